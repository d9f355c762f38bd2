"""The match runner: two agents, many games at once, PGN and JSON lines out.

Games start from the opening suite: opening k is played twice, agent A with
White in the first game of the pair and with Black in the second, so the
number of games is rounded up to an even number. Up to `concurrency` games
are in flight; at each step every game where it is agent X's turn goes to X
in ONE `choose` call, which is what lets a network agent batch positions
across games.

A game ends by the rules self-play and search play by (`board_outcome`:
checkmate, insufficient material, stalemate, then draws that stand on the
board: a half-move clock of 100, a position there for the third time), as a
draw at the ply limit, by resignation when both agents agree it is lost
(see `play_match`), or, given Syzygy tables (`syzygy`, `match --syzygy`), as
soon as the tables hold the position: the result they give under the
fifty-move rule (alphazero.chess.syzygy, Tables.outcome; termination
`tablebase`). A draw that a player could only claim by announcing the
move that makes it does not end the game: a searching agent plans with the
same rules it is judged by, and a random player does not claim draws.

With an `out_dir`, each finished game is appended to `<match_id>.pgn` and
`<match_id>.jsonl` in one write of the whole game (the first games create
them through a temporary file `.<name>.tmp` renamed into place), so readers
see whole games only and a crash loses only the games in flight; at the end,
games that finished out of round order are put in order (_GameFiles). The
folders are checked before the first game; if they stop taking files later,
the files move to a temporary folder (named on stderr) rather than losing
games. PGN tags for the end of a game
follow alphazero.chess.pgn (the standard Termination, the rule in TerminationDetail).
The records themselves, and the result that counts them, are eval.match_records'.

With a `clock` (Fischer: a base time and an increment, e.g. 10+0.1 s) every
move goes to its agent on its own as `go wtime btime winc binc`
(Agent.choose_on_clock: UCI engines, as a GUI drives them); the runner times
each call and keeps the clocks, and a side whose clock runs out loses on time
(a draw when the opponent has no mating material). The seconds each move took
and the clocks are kept in the records (JSON `seconds` and `clocks`, PGN
`[%clk]` comments).
"""

from __future__ import annotations

import math
import re
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import chess
import chess.engine
import chess.pgn

from alphazero.chess.syzygy import Tables
from alphazero.console import LiveDisplay
from alphazero.errors import UserError
from alphazero.store.rundir import atomic_write_text, check_writable_directory
from eval.agent import Agent, Choice
from eval.match_records import DRAW, GameRecord, MatchResult, append_text, format_summary, jsonl_text, pgn_text
from eval.openings import Opening, load_openings

DEFAULT_CONCURRENCY = 16
"""Games (or puzzles, positions) played at once by every command that plays many: a network player
evaluates one position of each in one batch."""
DEFAULT_PLY_LIMIT = 512
"""Games this long are draws (AlphaZero's self-play limit)."""

DEFAULT_RESIGN_MOVES = 3
"""Consecutive own moves on which both sides must agree before the loser resigns."""

PLY_LIMIT = "ply_limit"  # termination names as in self-play records (alphazero.chess.pgn)
TABLEBASE = "tablebase"
RESIGNATION = "resignation"
TIME_FORFEIT = "time_forfeit"
TIME_FORFEIT_DRAW = "time_forfeit_insufficient_material"  # out of time, but the opponent cannot mate


@dataclass(frozen=True)
class Clock:
    """A Fischer clock: `seconds` for each side at the start, `increment` seconds added after each move."""

    seconds: float
    increment: float = 0.0

    @classmethod
    def parse(cls, text: str) -> Clock:
        """Reads BASE+INCREMENT in seconds ('10+0.1', '60'). Raises UserError saying what is expected.

        >>> Clock.parse("10+0.1")
        Clock(seconds=10.0, increment=0.1)
        """
        base, _, increment = text.strip().partition("+")
        try:
            clock = cls(float(base), float(increment) if increment else 0.0)
        except ValueError:
            raise UserError(f"a clock is BASE+INCREMENT in seconds, e.g. 10+0.1 or 60; got {text!r}") from None
        if not (0 < clock.seconds < math.inf and 0 <= clock.increment < math.inf):
            raise UserError(f"a clock needs a positive base time and an increment of at least 0, got {text!r}")
        return clock

    def __str__(self) -> str:
        return f"{self.seconds:g}+{self.increment:g}"


class IllegalAgentMoveError(chess.IllegalMoveError):
    """An agent returned an illegal move: a bug in that agent. The message names it, the move and the FEN."""


class AgentContractError(RuntimeError):
    """An agent broke the `choose` contract (wrong number of choices, a changed board, a NaN value)."""


# --- games in flight -----------------------------------------------------------------


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def board_outcome(board: chess.Board) -> chess.Outcome | None:
    """The end of the game on `board` by the rules of self-play and search, else None.

    As python-chess's `outcome(claim_draw=False)` (checkmate, insufficient
    material, stalemate, 75 moves, fivefold repetition), then the draws a
    player may claim in the position on the board: fifty moves
    (`is_fifty_moves`) and threefold repetition (`is_repetition(3)`). Unlike
    `outcome(claim_draw=True)`, a draw one legal move away does not count.
    """
    outcome = board.outcome(claim_draw=False)
    if outcome is not None:
        return outcome
    if board.is_fifty_moves():
        return chess.Outcome(chess.Termination.FIFTY_MOVES, None)
    if board.is_repetition(3):
        return chess.Outcome(chess.Termination.THREEFOLD_REPETITION, None)
    return None


@dataclass(frozen=True)
class _Rules:
    """How games end besides the rules of chess."""

    ply_limit: int | None
    # Not self-play's resign_threshold (one side's root value): both sides' values must agree beyond it.
    agreed_resign_value: float | None
    resign_moves: int
    tables: Tables | None = None  # Syzygy tables that adjudicate the positions they hold


@dataclass
class _Game:
    """A game in flight: its board, and what resignation needs to remember."""

    round: int
    opening: Opening
    a_is_white: bool
    board: chess.Board
    started: str = field(default_factory=_now)
    values: list[float | None] = field(default_factory=list)
    last_value: dict[chess.Color, float | None] = field(default_factory=lambda: {chess.WHITE: None, chess.BLACK: None})
    streak: dict[chess.Color, int] = field(default_factory=lambda: {chess.WHITE: 0, chess.BLACK: 0})
    result: str | None = None
    termination: str | None = None
    clock: dict[chess.Color, float] | None = None  # clocked games: each side's remaining seconds
    seconds: list[float | None] = field(default_factory=list)
    clocks: list[float | None] = field(default_factory=list)

    def to_move(self, a: Agent, b: Agent) -> Agent:
        """Returns the agent whose turn it is."""
        return a if (self.board.turn == chess.WHITE) == self.a_is_white else b

    def check_end(self, rules: _Rules) -> None:
        """Ends the game if the rules or the ply limit say so."""
        outcome = board_outcome(self.board)
        if outcome is not None:
            self.result, self.termination = outcome.result(), outcome.termination.name.lower()
        elif rules.tables is not None and (decided := rules.tables.outcome(self.board)) is not None:
            self.result, self.termination = decided.result(), TABLEBASE
        elif rules.ply_limit is not None and len(self.board.move_stack) >= rules.ply_limit:
            self.result, self.termination = DRAW, PLY_LIMIT

    def play(self, agent: Agent, choice: Choice, rules: _Rules) -> None:
        """Plays the agent's choice, or resigns for it; then checks for the end.

        Raises IllegalAgentMoveError on an illegal move, AgentContractError on a non-finite value.
        """
        move, value, mover = choice.move, choice.value, self.board.turn
        if not isinstance(move, chess.Move) or not self.board.is_legal(move):
            raise IllegalAgentMoveError(
                f"{agent.name} chose the illegal move {move} in {self.board.fen()} (round {self.round})"
            )
        if value is not None and not math.isfinite(value):
            raise AgentContractError(f"{agent.name} gave the value {value!r} in {self.board.fen()}")
        if self._resigns(mover, None if value is None else float(value), rules):
            self.result, self.termination = ("0-1" if mover == chess.WHITE else "1-0"), RESIGNATION
            return
        self.board.push(move)
        self.values.append(None if value is None else float(value))
        self.check_end(rules)

    def play_on_clock(self, agent: Agent, clock: Clock, rules: _Rules) -> None:
        """Asks the agent for its move on the game's clock, times it, and plays it or flags the agent.

        Raises as play().
        """
        assert self.clock is not None
        mover = self.board.turn
        limit = chess.engine.Limit(white_clock=self.clock[chess.WHITE], black_clock=self.clock[chess.BLACK],
                                   white_inc=clock.increment, black_inc=clock.increment)
        size = len(self.board.move_stack)
        started = time.monotonic()
        choice = agent.choose_on_clock(self.board, limit)
        spent = time.monotonic() - started
        if len(self.board.move_stack) != size:
            raise AgentContractError(f"{agent.name} changed the board it was given ({self.board.fen()})")
        self.clock[mover] -= spent
        if self.clock[mover] < 0:
            if self.board.has_insufficient_material(not mover):
                self.result, self.termination = DRAW, TIME_FORFEIT_DRAW
            else:
                self.result, self.termination = ("0-1" if mover == chess.WHITE else "1-0"), TIME_FORFEIT
            return
        self.clock[mover] += clock.increment
        plies = len(self.board.move_stack)
        self.play(agent, choice, rules)
        if len(self.board.move_stack) > plies:
            self.seconds.append(round(spent, 3))
            self.clocks.append(round(self.clock[mover], 3))

    def _resigns(self, mover: chess.Color, value: float | None, rules: _Rules) -> bool:
        """Records the mover's value; True once both sides agreed for resign_moves of its moves.

        Agreement: the mover's value < threshold and the opponent's last value
        > -threshold. An agent without values never agrees, so never resigns
        and is never resigned against.
        """
        self.last_value[mover] = value
        threshold, other = rules.agreed_resign_value, self.last_value[not mover]
        if threshold is None or value is None or other is None:
            agree = False
        else:
            agree = value < threshold and other > -threshold
        self.streak[mover] = self.streak[mover] + 1 if agree else 0
        return self.streak[mover] >= rules.resign_moves

    def record(self, match_id: str, a: Agent, b: Agent, clock: Clock | None = None) -> GameRecord:
        """Returns the finished game's record."""
        assert self.result is not None and self.termination is not None
        white, black = (a, b) if self.a_is_white else (b, a)
        opening: list[float | None] = [None] * len(self.opening.moves)
        return GameRecord(
            match_id=match_id,
            round=self.round,
            opening=self.opening.name,
            opening_plies=len(self.opening.moves),
            white=white.name,
            black=black.name,
            a_is_white=self.a_is_white,
            result=self.result,
            termination=self.termination,
            moves=[m.uci() for m in self.board.move_stack],
            values=[*[None] * len(self.opening.moves), *self.values],
            started=self.started,
            finished=_now(),
            seconds=opening + self.seconds if clock is not None else [],
            clocks=opening + self.clocks if clock is not None else [],
            time_control=str(clock) if clock is not None else None,
            start_fen=self.opening.start_fen,
        )


def _advance(agent: Agent, games: list[_Game], rules: _Rules) -> None:
    """Asks the agent for a move in all these games at once, and plays them.

    Raises AgentContractError if the agent returns the wrong number of choices
    or changes a board, IllegalAgentMoveError on an illegal move.
    """
    sizes = [len(g.board.move_stack) for g in games]
    choices = agent.choose([g.board for g in games])
    if len(choices) != len(games):
        raise AgentContractError(f"{agent.name} returned {len(choices)} choices for {len(games)} boards")
    for game, size, choice in zip(games, sizes, choices):
        if len(game.board.move_stack) != size:
            raise AgentContractError(f"{agent.name} changed the board it was given ({game.board.fen()})")
        game.play(agent, choice, rules)


# --- output --------------------------------------------------------------------------


def _write_games(pgn_path: Path, jsonl_path: Path, records: Sequence[GameRecord]) -> None:
    """Writes both output files anew with these games, each through a temporary file renamed into place.

    Raises:
        OSError: a file cannot be written.
    """
    atomic_write_text(pgn_path, pgn_text(records))
    atomic_write_text(jsonl_path, jsonl_text(records))


class _GameFiles:
    """Where a match's games are written: the folders asked for, or a temporary folder once those fail.

    The first games finished create the files (replacing those of a match of
    the same id, as a rerun does); each game after is appended, so that a
    match writes each game once, not all of them after every game. At the
    end (`close`) games that finished out of round order are put in order by
    one rewrite: the files are then those of every game in round order.
    Games already played are never dropped for want of a place to write
    them: when the chosen folders stop taking files (a full or read-only
    disk), the files move to a new temporary folder, and a warning on stderr
    says where; if that fails too, the games stay in memory (MatchResult) for
    the caller to print.
    """

    def __init__(self, pgn_path: Path, jsonl_path: Path) -> None:
        self.pgn_path: Path | None = pgn_path
        self.jsonl_path: Path | None = jsonl_path
        self.written: list[GameRecord] = []  # the games in the files, in the files' order

    def add(self, records: Sequence[GameRecord]) -> None:
        """Writes newly finished games after those already written."""
        if self.pgn_path is None or self.jsonl_path is None:
            return
        try:
            if self.written:
                append_text(self.pgn_path, pgn_text(records))
                append_text(self.jsonl_path, jsonl_text(records))
            else:
                _write_games(self.pgn_path, self.jsonl_path, records)
        except OSError as error:
            self._fall_back(error, [*self.written, *records])
        self.written.extend(records)

    def close(self) -> None:
        """Rewrites the files in round order if games finished out of it (once, at the end of the match)."""
        rounds = [r.round for r in self.written]
        if self.pgn_path is None or self.jsonl_path is None or rounds == sorted(rounds):
            return
        self.written.sort(key=lambda r: r.round)
        try:
            _write_games(self.pgn_path, self.jsonl_path, self.written)
        except OSError as error:
            self._fall_back(error, self.written)

    def _fall_back(self, error: OSError, records: Sequence[GameRecord]) -> None:
        assert self.pgn_path is not None and self.jsonl_path is not None
        failed = Path(error.filename).parent if error.filename else self.pgn_path.parent
        try:
            folder = Path(tempfile.mkdtemp(prefix="alphazero-match-"))
            pgn_path, jsonl_path = folder / self.pgn_path.name, folder / self.jsonl_path.name
            _write_games(pgn_path, jsonl_path, records)
        except OSError as second:
            print(f"warning: cannot write in {failed} ({error.strerror or error}), nor in a temporary folder "
                  f"({second.strerror or second}): the games are kept in memory only", file=sys.stderr, flush=True)
            self.pgn_path = self.jsonl_path = None
            return
        print(f"warning: cannot write in {failed} ({error.strerror or error}); this match's games go to "
              f"{folder} instead", file=sys.stderr, flush=True)
        self.pgn_path, self.jsonl_path = pgn_path, jsonl_path


def slug(name: str) -> str:
    """Makes a player's name safe in a file name: 'stockfish:elo=1500' stays, 'a/b c' becomes 'a_b_c'."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", name).strip("_.") or "agent"


def match_id_of(a: str, b: str, suffix: str = "") -> str:
    """Names a match's files after its players: 'search_64-vs-random' plus ``suffix``."""
    return f"{slug(a)}-vs-{slug(b)}{suffix}"


def _default_match_id(a: Agent, b: Agent) -> str:
    return match_id_of(a.name, b.name, datetime.now(UTC).strftime("-%Y%m%dT%H%M%SZ"))


# --- the runner ------------------------------------------------------------------------


def _check_arguments(
    games: int, concurrency: int, ply_limit: int | None, agreed_resign_value: float | None, resign_moves: int,
    match_id: str | None,
) -> None:
    """Raises UserError on an argument out of range, saying what is expected."""
    if games < 0:
        raise UserError(f"games must be at least 0, got {games}")
    if concurrency < 1:
        raise UserError(f"concurrency must be at least 1, got {concurrency}")
    if ply_limit is not None and ply_limit < 1:
        raise UserError(f"the ply limit must be at least 1 (or None), got {ply_limit}")
    if agreed_resign_value is not None and not -1.0 < agreed_resign_value < 0.0:
        raise UserError(f"agreed_resign_value is the value both sides must agree beyond (the mover's below it, "
                        f"the opponent's above minus it), in (-1, 0), e.g. -0.9; got {agreed_resign_value}")
    if resign_moves < 1:
        raise UserError(f"resign_moves must be at least 1, got {resign_moves}")
    if match_id is not None and (not match_id or match_id.startswith(".") or re.search(r"[/\\]", match_id)):
        raise UserError(f"a match id names files: no '/', no leading '.', got {match_id!r}")


def _schedule(openings: Sequence[Opening], games: int, seed: int) -> deque[tuple[int, Opening, bool]]:
    """Returns (round, opening, a_is_white) for every game: each opening twice, colours swapped."""
    if not openings:
        raise UserError("the opening suite is empty")
    total = games + games % 2
    return deque(
        (g + 1, openings[(seed + g // 2) % len(openings)], g % 2 == 0) for g in range(total)
    )


def _progress_bar(enabled: bool, a: Agent, b: Agent, total: int) -> LiveDisplay:
    """Shows games done of total and the score so far (on stdout, with the results); nothing when not enabled."""
    return LiveDisplay(enabled=enabled, bar=("label", "bar", "count", "text", "elapsed"), label=f"{a.name} vs {b.name}",
                       total=total, stderr=False)


def play_match(
    agent_a: Agent,
    agent_b: Agent,
    *,
    openings: Sequence[Opening] | None = None,
    games: int,
    concurrency: int = DEFAULT_CONCURRENCY,
    ply_limit: int | None = DEFAULT_PLY_LIMIT,
    agreed_resign_value: float | None = None,
    resign_moves: int = DEFAULT_RESIGN_MOVES,
    out_dir: Path | None = None,
    pgn_dir: Path | None = None,
    progress: bool = True,
    seed: int = 0,
    match_id: str | None = None,
    clock: Clock | None = None,
    stop: threading.Event | None = None,
    syzygy: Tables | None = None,
) -> MatchResult:
    """Plays a match of `games` games (rounded up to even) between two agents.

    With a `clock`, each move is asked for on its own on the game's clock
    (Agent.choose_on_clock) and timed, and running out of time loses (see
    the module's docstring); `concurrency` 1 plays the games one after
    another, as a GUI would, so engines keep their trees between moves.

    Openings: `openings` (default: the packaged suite, load_openings()) in
    order from index `seed` (mod its length), cycled; each is played by a
    pair of games with colours swapped, A with White first.

    Resignation (off unless agreed_resign_value is set, a value in (-1, 0) such as
    -0.9): the side to move resigns instead of moving when, on each of its
    last `resign_moves` moves, its value was below agreed_resign_value AND the
    opponent's latest value was above -agreed_resign_value. Agents that give no
    value never resign.

    `ply_limit` (None for none) ends a game as a draw after that many plies,
    opening included. `syzygy` (Syzygy tables) ends a game as soon as they hold its position, with the
    result they give under the fifty-move rule. A `stop` event, once set, ends the match after the
    current move: the games in flight are dropped, the finished ones kept
    (in the result and the files). `match_id` (default `<a>-vs-<b>-<UTC time>`) names the
    files and is the PGN Event: `out_dir/<match_id>.jsonl` and
    `pgn_dir/<match_id>.pgn` (pgn_dir defaults to out_dir). Both folders are
    checked for writing before the first game; should writing fail later, the
    files go to a temporary folder instead (a warning on stderr names it) and
    the result's paths say where they are. The paths stay None until a file
    is written. The agents are not closed here.

    Raises UserError on a bad argument, an output folder that cannot be
    written or an agent that cannot play on a clock; IllegalAgentMoveError or AgentContractError when an agent
    misbehaves; anything an agent raises. On an exception, the files hold
    every game finished before it.
    """
    _check_arguments(games, concurrency, ply_limit, agreed_resign_value, resign_moves, match_id)
    for agent in (agent_a, agent_b) if clock is not None else ():
        if not agent.plays_on_clock:
            raise UserError(f"{agent.name} cannot play on a clock: on a clock, both players must be UCI engines "
                            f"(stockfish, uci)")
    pending = _schedule(load_openings() if openings is None else openings, games, seed)
    rules = _Rules(ply_limit, agreed_resign_value, resign_moves, syzygy)
    result = MatchResult(match_id or _default_match_id(agent_a, agent_b), agent_a.name, agent_b.name, [])
    files = None
    if out_dir is not None:
        out_dir, pgn_dir = Path(out_dir), Path(pgn_dir if pgn_dir is not None else out_dir)
        check_writable_directory(out_dir, "the match's records")
        check_writable_directory(pgn_dir, "the match's games")
        files = _GameFiles(pgn_dir / f"{result.match_id}.pgn", out_dir / f"{result.match_id}.jsonl")
    agents = [agent_a] if agent_a is agent_b else [agent_a, agent_b]
    running: list[_Game] = []
    with _progress_bar(progress, agent_a, agent_b, len(pending)) as bar:
        try:
            while (pending or running) and not (stop is not None and stop.is_set()):
                while pending and len(running) < concurrency:
                    running.append(_start_game(*pending.popleft(), agents, rules, clock))
                for agent in agents:
                    turn = [g for g in running if g.result is None and g.to_move(agent_a, agent_b) is agent]
                    if turn and clock is not None:
                        for game in turn:
                            game.play_on_clock(agent, clock, rules)
                    elif turn:
                        _advance(agent, turn, rules)
                finished = [g for g in running if g.result is not None]
                running = [g for g in running if g.result is None]
                if finished:
                    _finish(result, finished, agent_a, agent_b, files, clock)
                    bar.update(advance=len(finished), text=_score_text(result))
        finally:  # also on an agent's error or Ctrl-C: the files hold the finished games in round order
            if files is not None and files.written:
                files.close()
                result.pgn_path, result.jsonl_path = files.pgn_path, files.jsonl_path
    return result


def _start_game(round_: int, opening: Opening, a_is_white: bool, agents: list[Agent], rules: _Rules,
                clock: Clock | None = None) -> _Game:
    for agent in agents:
        agent.new_game()
    game = _Game(round_, opening, a_is_white, opening.board())
    if clock is not None:
        game.clock = {chess.WHITE: clock.seconds, chess.BLACK: clock.seconds}
    game.check_end(rules)  # a custom opening may already end the game
    return game


def _finish(result: MatchResult, finished: list[_Game], a: Agent, b: Agent, files: _GameFiles | None,
            clock: Clock | None = None) -> None:
    """Records finished games in the result and adds them to the output files (their paths go in the result)."""
    records = sorted((g.record(result.match_id, a, b, clock) for g in finished), key=lambda r: r.round)
    result.games.extend(records)
    result.games.sort(key=lambda r: r.round)
    if files is not None:
        files.add(records)
        result.pgn_path, result.jsonl_path = files.pgn_path, files.jsonl_path


def _score_text(result: MatchResult) -> str:
    n = len(result.games)
    score = (result.wins + 0.5 * result.draws) / n if n else 0.0
    return f"+{result.wins} ={result.draws} -{result.losses} ({100 * score:.1f}%)"


__all__ = [  # the records are re-exported from eval.match_records
    "AgentContractError",
    "Clock",
    "DEFAULT_CONCURRENCY",
    "DEFAULT_PLY_LIMIT",
    "DEFAULT_RESIGN_MOVES",
    "DRAW",
    "GameRecord",
    "IllegalAgentMoveError",
    "MatchResult",
    "PLY_LIMIT",
    "RESIGNATION",
    "TIME_FORFEIT",
    "TIME_FORFEIT_DRAW",
    "board_outcome",
    "format_summary",
    "match_id_of",
    "play_match",
    "slug",
]
