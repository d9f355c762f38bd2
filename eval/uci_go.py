"""The UCI `go` command: its limits parsed, and the time they give the move.

parse_go reads the limits a GUI sends; plan_search_time turns a clock or
movetime into the move's budget. The engine (eval.uci) searches until the
first of them ends the search:

- `nodes N`: N simulations (the reported nodes are the simulations done).
- `movetime T`: T - MoveOverhead milliseconds. Under any time limit, a
  network call that would end past the deadline (by the last call's time)
  is not started.
- `wtime/btime [winc/binc] [movestogo]`: the TimeManager option's plan
  (`plan_search_time`, eval.timeman): `smart` may also stop early, once the
  best move is settled, and bank the time left for later moves.
- `depth D`: a cap: stops once the principal variation (the line of best
  moves, whose length is the reported depth) is D plies long.
- `infinite`: until `stop`; `bestmove` is withheld until then, as UCI asks.
- `ponder`: the GUI has already played the move it expects us to predict;
  the search runs with no time limit until `ponderhit` (from then on it is
  the normal search its time limits describe, timed from the ponderhit) or
  `stop` (answered with bestmove, which the GUI discards).
- none of these: the Nodes option's simulations.
- `searchmoves M1 M2 ...`: the search's root tries those moves only (the
  engine says which it ignores: not legal there; with none left, every move).
`mate` is not supported and is ignored with an info string.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eval.timeman import MIN_BUDGET_MS, MovePlan, TimeManager, simple_budget_ms
from eval.uci_options import quoted
from mcts_ext.params import C_INT_MAX

_GO_INTEGERS = ("wtime", "btime", "winc", "binc", "movestogo", "depth", "nodes", "mate", "movetime")
_GO_FLAGS = ("infinite", "ponder")
MAX_DEPTH = C_INT_MAX
"""The largest `depth` kept (a larger one is this: no line is that long), so that it fits the search's C int."""


@dataclass
class GoCommand:
    """The parsed arguments of `go` (times in milliseconds); `problems` lists what was ignored."""

    wtime: int | None = None
    btime: int | None = None
    winc: int | None = None
    binc: int | None = None
    movestogo: int | None = None
    depth: int | None = None
    nodes: int | None = None
    mate: int | None = None
    movetime: int | None = None
    infinite: bool = False
    ponder: bool = False
    searchmoves: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()


def parse_go(tokens: Sequence[str]) -> GoCommand:
    """Parses the tokens after `go`; malformed values are skipped and named in `problems`."""
    go = GoCommand()
    problems: list[str] = []
    i = 0
    while i < len(tokens):
        token = tokens[i].lower()
        if token in _GO_FLAGS:
            setattr(go, token, True)
        elif token == "searchmoves":
            moves = []
            while i + 1 < len(tokens) and tokens[i + 1].lower() not in (*_GO_INTEGERS, *_GO_FLAGS):
                i += 1
                moves.append(tokens[i])
            go.searchmoves = (*go.searchmoves, *moves)
        elif token in _GO_INTEGERS:
            value = tokens[i + 1] if i + 1 < len(tokens) else None
            try:
                number = int(value) if value is not None else None
            except ValueError:
                number = None
            if number is None or (number < 0 and token not in ("wtime", "btime", "mate")):
                problems.append(f"{token} {value if value is not None else '(missing)'}")
            else:
                setattr(go, token, min(number, MAX_DEPTH) if token == "depth" else number)
            i += 1 if value is not None else 0
        else:
            problems.append(token)
        i += 1
    go.problems = tuple(problems)
    return go


def unsupported(go: GoCommand) -> list[str]:
    """Says what of `go` is ignored, one info string each: malformed values, `mate`."""
    texts = [f"go: ignored {quoted(problem)}" for problem in go.problems]
    if go.mate is not None:
        texts.append("go mate is not supported; searching with the other limits")
    return texts


def plan_search_time(go: GoCommand, white_to_move: bool, *, overhead_ms: float, moves_to_go: int,
                   ply: int = 0, manager: TimeManager | None = None) -> MovePlan | None:
    """Plans the search's time, or returns None when `go` sets no time limit (eval.timeman).

    - movetime T: T - overhead, all of it.
    - a clock: the smart `manager` (TimeManager: the clock shared over the
      moves expected from `ply`, a bank of saved time, early stops), or with
      none the simple formula min(t / m + 0.75 inc, t / 2) - overhead, m being
      movestogo when the GUI sends it, else `moves_to_go` (MovesToGo, 30).
    Never below MIN_BUDGET_MS: the root is always expanded and a move chosen.
    """
    if go.movetime is not None:
        return MovePlan(max(go.movetime - overhead_ms, MIN_BUDGET_MS), may_stop_early=False)
    remaining = go.wtime if white_to_move else go.btime
    if remaining is None:
        return None
    increment = (go.winc if white_to_move else go.binc) or 0
    if manager is not None:
        return manager.plan(remaining, increment, ply, overhead_ms=overhead_ms, movestogo=go.movestogo)
    moves_left = go.movestogo if go.movestogo else moves_to_go
    return MovePlan(simple_budget_ms(remaining, increment, movestogo=moves_left, overhead_ms=overhead_ms),
                    may_stop_early=False)
