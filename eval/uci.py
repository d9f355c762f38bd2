"""A UCI engine around the network and the PUCT search, for any chess GUI or lichess-bot.

Run it as `alphazero uci --run DIR` (or `--weights FILE`; `--fresh` allows a
run without checkpoints, i.e. freshly initialised weights). Commands: uci,
isready, ucinewgame, setoption, position startpos|fen ... [moves ...], go,
stop, ponderhit, quit (debug and register are accepted and ignored).

The search runs on a background thread, so `stop`, `ponderhit` and
`isready` are answered while it runs (one thread, for the engine's life, runs
every network call: see _NetworkThread); the search hears `stop` and its
deadline within a few milliseconds whatever the tree holds. A malformed or
unknown line, or a bad option value, is answered with `info string ...` and
otherwise ignored (an option keeps its previous value); a position without
legal moves gets `bestmove 0000`.

Each network call evaluates up to LeavesPerBatch leaves (default
alphazero.search.UCI_LEAVES_PER_BATCH): the search descends that many times, charging
virtual loss to each path so that the next descent looks elsewhere; a descent
that meets a leaf already in the batch (a collision) adds nothing, and its
virtual loss is taken back before the call, as lc0 does (mcts_ext.search).
Game ends, repetitions and proven nodes are scored on the spot and never wait
for the network. Gumbel's search batches too: a leaf in flight counts as a
visit, and a batch ends with a Sequential Halving phase. `info nps` is the
nodes of the search over the seconds it has run; Threads sets torch's CPU
threads (0: torch's default, the machine's cores).

`go` limits (whichever comes first ends the search):

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
`mate` and `searchmoves` are not supported and are ignored with an info string.

The search proves results where it meets game ends (an MCTS-solver): a
proven mate is reported as `score mate N` (N moves, negative when we are
mated), the shortest proven mate is played, and a search whose root is
proven stops early. Other scores are the search's Q of the move, a value in
[-1, 1] for the side to move, converted to centipawns by
eval.scores.value_to_centipawns, Leela's formula
cp = 111.714640912 * tan(1.5620688421 * Q): Q 0.5 is about +111 cp, Q 0.9
about +671 cp, Q +-1 is +-12 800 cp. `MultiPV N` reports the N best root
moves (best_move's order), each with its own score and line, as `multipv k`.
`UCI_ShowWDL` adds `wdl W D L` in per mille (eval.scores.value_to_wdl: W - L
is the move's Q; D is a 'wdl' network's draw probability at the root, cut to
what Q leaves room for, or 0 for a scalar value head, as lc0 does; always
summing to 1000; proven results are 1000/0/0, 0/1000/0 or 0/0/1000).
`bestmove` names a `ponder` move when the line has a second move.

Between moves of one game the search keeps the subtree of the moves played
(tree reuse): when a `position` continues the game last searched, the visits
already spent on it are kept; `ucinewgame`, another game, or a new network or
LeavesPerBatch start from an empty tree.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO, TypeVar

import torch

from alphazero import __version__
from alphazero.config import PRECISIONS
from alphazero.errors import UserError
from alphazero.nn.builtin import BUILTIN
from alphazero.nn.network import pick_device
from alphazero.search import (
    UCI,
    UCI_LEAVES_PER_BATCH,
    UCI_VISITS_PER_LEAF,
    parse_cpuct,
    parse_policy_temperature,
    search_params,
)
from alphazero.store.rundir import DEFAULT_RUN_DIR, RunDir
from alphazero.store.sources import FRESH, Network, NetworkSource, load_network, resolve_source
from eval.scores import value_to_centipawns, value_to_wdl
from eval.timeman import MANAGERS, MIN_BUDGET_MS, MovePlan, TimeManager, best_is_settled, simple_budget_ms
from mcts_ext import STARTING_FEN, Board, ChessError
from mcts_ext.driver import run as run_search
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch

ENGINE_AUTHOR = "the alphazero authors"


PRUNING_AFTER_SHARE = 0.1
"""Smart pruning waits until this share of a move's budget has passed, so that the speed it extrapolates is
measured (eval.timeman.best_is_settled)."""

DEFAULT_MOVE_OVERHEAD_MS = 10
"""Milliseconds kept back each move: a local GUI or python-chess answers within a few. The engine's first
default, 100, with the simple manager left half its clock unused at 10+0.1 (EXPERIMENTS.md, "Issue 24"), and at
1+0.01 a per-move reserve above the 10 ms increment would leave the smart manager nothing to search with."""

ENGINE_FORWARD = "graphs"
"""How the engine's network runs on CUDA: a CUDA graph per batch-size bucket, captured at load. Eagerly, its
calls of 1-32 leaves were bound by kernel launches, and bf16 autocast's casts made it slower than float32; graphs
beat both by far (EXPERIMENTS.md, "The UCI engine on CUDA with CUDA graphs"; `alphazero bench uci --device
cuda` measures both). On a CPU the passes run eager whatever this says."""

INFINITE_NODES = 50_000_000
"""The node cap of `go infinite`, `go ponder` and timed searches (bounds the tree's memory)."""

INFO_INTERVAL_S = 0.5
"""Seconds between info lines during a search (one more comes with bestmove)."""

INFO_STRING_LIMIT = 400
"""The longest `info string` text (a message quoting a 20 000-character line is no help to a GUI)."""

MAX_MULTIPV = 256
"""The most lines MultiPV may ask for (no position has more legal moves)."""

_GO_INTEGERS = ("wtime", "btime", "winc", "binc", "movestogo", "depth", "nodes", "mate", "movetime")
_GO_FLAGS = ("infinite", "ponder")


# --- options ------------------------------------------------------------------------


@dataclass(frozen=True)
class UciOption:
    """One engine option, as declared to the GUI: UCI name, type, default, range and help."""

    name: str
    type: str  # 'spin', 'check', 'combo' or 'string'
    default: int | bool | str
    help: str
    min: int | None = None
    max: int | None = None
    choices: tuple[str, ...] = ()  # the values of a combo
    check: Callable[[str], object] | None = None  # a string's check: raises ValueError saying what is expected

    def declaration(self) -> str:
        """Returns the `option name ... type ...` line sent in answer to `uci`."""
        if self.type == "check":
            default = "true" if self.default else "false"
        else:
            default = str(self.default) if self.default != "" else "<empty>"
        line = f"option name {self.name} type {self.type} default {default}"
        if self.type == "spin":
            line += f" min {self.min} max {self.max}"
        line += "".join(f" var {choice}" for choice in self.choices)
        return line

    def parse(self, text: str) -> int | bool | str:
        """Converts a setoption value. Raises ValueError saying what is expected."""
        if self.type == "spin":
            try:
                value = int(text)
            except ValueError:
                raise ValueError(f"{self.name} takes an integer, got {_quoted(text)}") from None
            assert self.min is not None and self.max is not None
            if not self.min <= value <= self.max:
                raise ValueError(f"{self.name} must lie in {self.min}..{self.max}, got {_quoted(text)}")
            return value
        if self.type == "check":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{self.name} takes true or false, got {_quoted(text)}")
            return text.lower() == "true"
        if self.type == "combo":
            if text.lower() not in self.choices:
                raise ValueError(f"{self.name} takes one of {', '.join(self.choices)}, got {text!r}")
            return text.lower()
        text = "" if text == "<empty>" else text
        if self.check is not None and text:
            self.check(text)
        return text


OPTIONS: tuple[UciOption, ...] = (
    UciOption("Nodes", "spin", 400, "simulations a move when `go` sets no limit, and the cap of `go depth`",
              1, INFINITE_NODES),
    UciOption("Weights", "string", "", "a model file or learner checkpoint; empty: the run's latest checkpoint"),
    UciOption("Device", "string", "auto", "where the network runs: auto, cpu, cuda or cuda:N"),
    UciOption("Precision", "combo", "auto", "the network's precision on a CPU: auto (bf16 where the processor has "
              "native bf16 and a pass timed at load is faster), bf16 or float32", choices=PRECISIONS),
    UciOption("Threads", "spin", 0, "torch CPU threads for the network; 0: torch's default, the machine's cores",
              0, 1024),
    UciOption("MoveOverhead", "spin", DEFAULT_MOVE_OVERHEAD_MS, "milliseconds kept back each move for the GUI "
              "and lag", 0, 60_000),
    UciOption("TimeManager", "combo", "smart", "smart: the clock shared over the moves the game is expected to last, "
              "saved time spent later, early stops when the best move is settled; simple: clock / MovesToGo "
              "+ 0.75 increment", choices=MANAGERS),
    UciOption("MovesToGo", "spin", 30, "the simple time manager: moves assumed left when the GUI sends a clock "
              "without movestogo", 1, 1000),
    UciOption("LeavesPerBatch", "spin", UCI_LEAVES_PER_BATCH, "leaves per network call, gathered with virtual "
              "loss (more nodes a second, each a little less informed)", 1, 256),
    UciOption("VisitsPerLeaf", "spin", round(UCI_VISITS_PER_LEAF), "the batch grows with the tree: a network "
              "call takes at most the root's visits / this leaves, up to LeavesPerBatch; 0: full batches from the "
              "first call", 0, 1_000_000),
    UciOption("PolicyTemperature", "string", "", "softmax temperature of the network's prior (> 1 flattens it, "
              "as lc0's); empty: the network's own search.policy_temperature", check=parse_policy_temperature),
    UciOption("CPuct", "string", "", "PUCT's exploration constant c_init (lc0's CPuct): more explores more moves; "
              "empty: the network's own search.c_init", check=parse_cpuct),
    UciOption("MultiPV", "spin", 1, "root moves reported, each with its own score and line (multipv k)",
              1, MAX_MULTIPV),
    UciOption("UCI_ShowWDL", "check", False, "add `wdl W D L` (per mille) to the scores"),
    UciOption("Ponder", "check", False, "the GUI may send `go ponder`; pondering works either way"),
    UciOption("SearchAlgorithm", "combo", "auto", "puct or gumbel (no noise; best with a node limit, as Sequential "
              "Halving plans for its budget); auto: the network's search.algorithm for a node limit, puct "
              "under a clock or until stop",
              choices=("auto", "puct", "gumbel")),
)
"""Every engine option, declared once: the `uci` answer and setoption both read this table."""

_OPTIONS_BY_NAME = {option.name.lower(): option for option in OPTIONS}

DEFAULT_THREADS = torch.get_num_threads()
"""torch's own choice of CPU threads (the machine's cores), which Threads 0 restores."""


def _quoted(text: str, limit: int = 80) -> str:
    """Quotes outside input for a message, cut to `limit` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")


# --- go ----------------------------------------------------------------------------------


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
    searchmoves: bool = False
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
            go.searchmoves = True
            while i + 1 < len(tokens) and tokens[i + 1].lower() not in (*_GO_INTEGERS, *_GO_FLAGS):
                i += 1
        elif token in _GO_INTEGERS:
            value = tokens[i + 1] if i + 1 < len(tokens) else None
            try:
                number = int(value) if value is not None else None
            except ValueError:
                number = None
            if number is None or (number < 0 and token not in ("wtime", "btime", "mate")):
                problems.append(f"{token} {value if value is not None else '(missing)'}")
            else:
                setattr(go, token, number)
            i += 1 if value is not None else 0
        else:
            problems.append(token)
        i += 1
    go.problems = tuple(problems)
    return go


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


@dataclass
class _Job:
    """One search in flight: the position, its limits, the events that end it, and whether it answered.

    `deadline` is None while the search has no time limit (pondering, or no
    clock given); `ponderhit` sets it. `wake` is set whenever `stop` or
    `ponderhit` arrives, for a search that finished early and waits to
    answer. `answered` is set just before `bestmove` is written: from then on
    the GUI may send the next `go`, although the thread may not have exited yet.
    """

    board: Board
    go: GoCommand
    nodes: int
    plan: MovePlan | None
    deadline: float | None
    pondering: bool
    started: float  # the reported time counts from here (reset by ponderhit, as the clock is)
    stop: threading.Event = field(default_factory=threading.Event)
    wake: threading.Event = field(default_factory=threading.Event)
    answered: threading.Event = field(default_factory=threading.Event)
    clock: Callable[[], float] = time.monotonic  # the engine's clock (a test gives its own)
    searching_since: float = -1.0  # nps counts every node from here (`started` unless set)

    def __post_init__(self) -> None:
        if self.searching_since < 0:
            self.searching_since = self.started

    @property
    def budget_ms(self) -> float | None:
        return self.plan.budget_ms if self.plan is not None else None

    def must_wait(self) -> bool:
        """Checks whether a finished search must still withhold bestmove (infinite, or pondering)."""
        return not self.stop.is_set() and (self.go.infinite or self.pondering)


@dataclass(frozen=True)
class SearchReport:
    """What the last search did: `nodes` (simulations) in `seconds` (pondering included), in `batches`
    network calls that evaluated `leaves` positions, within `budget_ms` when a clock or movetime gave one;
    `nodes_per_second` is what `info nps` reports."""

    nodes: int
    seconds: float
    batches: int
    leaves: int
    budget_ms: float | None = None  # the time the plan gave the move (None: no clock, movetime or infinite)

    @property
    def nodes_per_second(self) -> float:
        return self.nodes / max(self.seconds, 1e-6)

    @property
    def leaves_per_batch(self) -> float:
        return self.leaves / self.batches if self.batches else 0.0


# --- output ---------------------------------------------------------------------------------


class _Output:
    """Writes whole lines to the GUI from any thread, flushing each one."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def line(self, text: str) -> None:
        with self._lock:
            try:
                self._stream.write(text + "\n")
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # the GUI went away (or closed our stream); nothing to tell it


def mate_in_moves(result: str, plies: int) -> int:
    """Converts a proven result of the position AFTER a move (its mover's opponent's view) to UCI's
    `score mate N` for the player making the move: N moves to mate, negative when mated.

    >>> mate_in_moves("loss", 0), mate_in_moves("loss", 2), mate_in_moves("win", 1), mate_in_moves("win", 3)
    (1, 2, -1, -2)
    """
    if result == "loss":  # the opponent is lost: we mate in plies + 1 of ours and theirs
        return (plies + 2) // 2
    return -((plies + 1) // 2)


@dataclass(frozen=True)
class _Line:
    """One root move's report: its line, and its score as centipawns or a mate."""

    pv: list[str]
    cp: int | None
    mate: int | None
    wdl: tuple[int, int, int]

    def score(self) -> str:
        return f"score mate {self.mate}" if self.mate is not None else f"score cp {self.cp}"


def _line_for(search: MultiGameSearch, move: str, q: float | None, draw: float | None) -> _Line:
    pv = search.principal_variation(0, first=move)
    proof = search.proof(0, [move])
    if proof is not None and proof[0] != "draw":
        mate = mate_in_moves(*proof)
        return _Line(pv, None, mate, (1000, 0, 0) if mate > 0 else (0, 0, 1000))
    if proof is not None:
        return _Line(pv, 0, None, (0, 1000, 0))
    value = q if q is not None else search.root_value(0)
    return _Line(pv, round(value_to_centipawns(value)), None, value_to_wdl(value, draw))


def _info_lines(search: MultiGameSearch, job: _Job, multipv: int, *, wdl: bool,
                draw: float | None) -> list[str]:
    """Formats one `info depth .. multipv k score .. [wdl ..] nodes .. nps .. time .. pv ..` per line.

    nodes: the simulations of this search (a kept subtree's older visits are
    not counted); nps: those nodes over the seconds the search has run
    (pondering included); time: milliseconds since `go`, or since ponderhit.
    """
    now = job.clock()
    elapsed = max(now - job.started, 1e-6)
    nodes = search.simulations(0)
    nps = int(nodes / max(now - job.searching_since, 1e-6))
    q_of = {uci: q for uci, _, _, q, _ in search.root_stats(0)}
    lines = []
    for k, move in enumerate(search.ranked_moves(0)[:multipv], start=1):
        line = _line_for(search, move, q_of[move], draw)
        shown_wdl = f" wdl {line.wdl[0]} {line.wdl[1]} {line.wdl[2]}" if wdl else ""
        lines.append(f"info depth {len(line.pv)} seldepth {len(line.pv)} multipv {k} {line.score()}{shown_wdl} "
                     f"nodes {nodes} nps {nps} time {int(elapsed * 1000)} pv {' '.join(line.pv)}")
    return lines


def _lenient(stream: TextIO) -> TextIO:
    """Makes a text stream replace undecodable bytes instead of raising (garbage must not end the engine)."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        try:
            reconfigure(errors="replace")
        except (ValueError, OSError):
            pass
    return stream


# --- the engine -------------------------------------------------------------------------------


_Result = TypeVar("_Result")


class _NetworkThread:
    """One daemon thread that runs, in order, every call of the engine that touches torch: loading the
    network, setting its threads, and the searches.

    Why one, and why not the main thread: torch's CPU threads come from OpenMP (libgomp), which keeps a
    pool of worker threads for each thread that ever ran a parallel operation, for that thread's life.
    Once the process holds more pool threads than cores, libgomp stops spinning between operations and
    every operation waits to wake its workers. With the network loaded on the main thread and searched on
    a fresh thread per `go`, the built-in network's passes ran at 40% of their speed on the 2-core
    machine (335 against 861 evaluations/s at batch 1, 2 threads; EXPERIMENTS.md, "Issue 24"). Kept to
    one thread, the engine keeps one pool.
    """

    def __init__(self) -> None:
        self._tasks: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = \
            queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, function: Callable[..., _Result], *args: Any) -> Future[_Result]:
        """Queues ``function(*args)``; its future holds the result or the exception."""
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._serve, name="uci-network", daemon=True)
            self._thread.start()
        future: Future[_Result] = Future()
        self._tasks.put((future, function, args))
        return future

    def call(self, function: Callable[..., _Result], *args: Any) -> _Result:
        """Runs ``function(*args)`` on the thread and waits for it (at once when already on it)."""
        if threading.current_thread() is self._thread:
            return function(*args)
        return self.submit(function, *args).result()

    def close(self) -> None:
        """Ends the thread once the queued calls are done (a later submit starts a new one)."""
        if self._thread is not None and self._thread.is_alive():
            self._tasks.put(None)
            self._thread.join()
        self._thread = None

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            future, function, args = task
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as error:  # handed to whoever waits on the future
                future.set_exception(error)


class UciEngine:
    """The engine's state and command handlers; `run()` is the loop over the input stream.

    Construct it with the network's source (a run directory and/or a weights
    file) and streams; the network is loaded at the first `isready` or `go`,
    so that the `uci` handshake is immediate. A run without checkpoints plays
    the built-in network (alphazero/weights, saying so); a run that was named
    but does not exist is refused (a typo must not play); freshly initialised
    weights, about as strong as random, take `fresh=True`.

    Raises UserError (from the constructor) if the source names no existing
    file or usable run checkpoint (unless `fresh`), or the device is unknown.
    """

    def __init__(
        self,
        run_dir: str | Path | None = None,
        weights: str | Path | None = None,
        device: str = "auto",
        *,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        stderr: TextIO | None = None,
        nodes: int | None = None,
        threads: int | None = None,
        fresh: bool = False,
        clock: Callable[[], float] = time.monotonic,
        forward: str = ENGINE_FORWARD,
    ) -> None:
        self._clock = clock  # every deadline and reported time reads it (tests give a clock they advance)
        self._in = stdin if stdin is not None else _lenient(sys.stdin)
        self._out = _Output(stdout if stdout is not None else sys.stdout)
        self._err = stderr if stderr is not None else sys.stderr
        self._run = Path(run_dir) if run_dir is not None else DEFAULT_RUN_DIR
        self._run_named = run_dir is not None  # a run the user named must exist (a typo must not play)
        self._fresh = fresh
        self._forward = forward  # how a CUDA pass runs (ENGINE_FORWARD; a benchmark's baseline gives 'eager')
        self.values: dict[str, Any] = {option.name: option.default for option in OPTIONS}
        self.values["Weights"] = str(weights) if weights is not None else ""
        self.values["Device"] = device
        self._network_thread = _NetworkThread()
        try:
            if nodes is not None:
                self.values["Nodes"] = _OPTIONS_BY_NAME["nodes"].parse(str(nodes))
            if threads is not None:
                self._set_threads(int(_OPTIONS_BY_NAME["threads"].parse(str(threads))))
        except ValueError as error:
            raise UserError(str(error)) from None
        self._check_source()  # fail now, with a clear message, not at the first `go`
        pick_device(device)
        self._network: Network | None = None
        self._loaded_key: tuple[NetworkSource, str, str] | None = None
        self._time = TimeManager()  # the smart time manager's bank, kept across the moves of a game
        self._board = Board(ply_limit=None)
        self._job: _Job | None = None
        self._search_done: Future[None] | None = None  # the running (or last) search, on the network thread
        # The search and its tree, kept between moves for reuse, and the arrays it gathers
        # leaves into; only the network thread touches them while a search runs. Rebuilt
        # when the network, LeavesPerBatch or the algorithm changes.
        self._search: MultiGameSearch | None = None
        self._batch: tuple[Any, ...] = ()
        self._search_key: tuple[Network, SearchParams] | None = None
        self.last_report: SearchReport | None = None
        """What the last finished search did (for benchmarks and tests)."""

    # -- the loop --

    def run(self) -> None:
        """Reads commands until `quit` or the end of input; then stops any search and returns."""
        try:
            while True:
                line = self._in.readline()
                if not line or not self.handle(line):
                    break
        finally:
            self.stop_search()
            self._network_thread.close()

    def on_network_thread(self, function: Callable[..., _Result], *args: Any) -> _Result:
        """Runs ``function(*args)`` on the thread that runs the engine's network, and returns its result
        (a benchmark times the network alone there, as the engine runs it: see _NetworkThread)."""
        return self._network_thread.call(function, *args)

    def handle(self, line: str) -> bool:
        """Handles one input line; returns False after `quit`. Never raises for bad input."""
        tokens = line.split()
        if not tokens:
            return True
        command, args = tokens[0], tokens[1:]
        handler = self._handlers().get(command)
        if handler is None:
            self.info_string(f"unknown command: {line.strip()[:200]}")
            return True
        if command == "quit":
            return False
        try:
            handler(args)
        except Exception as error:  # a handler bug must not end the engine
            self.info_string(f"error in {command}: {type(error).__name__}: {error}")
        return True

    def _handlers(self) -> dict[str, Callable[[list[str]], None]]:
        return {
            "uci": self._uci, "isready": self._isready, "ucinewgame": self._ucinewgame,
            "setoption": self._setoption, "position": self._position, "go": self._go, "stop": self._stop,
            "ponderhit": self._ponderhit,
            # Accepted and ignored: nothing to debug or register.
            "quit": lambda args: None, "debug": lambda args: None, "register": lambda args: None,
        }

    def info_string(self, text: str) -> None:
        """Sends `info string TEXT` (one line, cut to INFO_STRING_LIMIT characters)."""
        text = " ".join(text.split())
        if len(text) > INFO_STRING_LIMIT:
            text = text[:INFO_STRING_LIMIT] + "..."
        self._out.line("info string " + text)

    # -- commands --

    def _uci(self, args: list[str]) -> None:
        self._out.line(f"id name alphazero {__version__}")
        self._out.line(f"id author {ENGINE_AUTHOR}")
        for option in OPTIONS:
            self._out.line(option.declaration())
        self._out.line("uciok")

    def _isready(self, args: list[str]) -> None:
        if not self.searching():
            self._network_thread.call(self._ensure_network)
        self._out.line("readyok")

    def _ucinewgame(self, args: list[str]) -> None:
        self.stop_search()
        self._time.new_game()
        self._board = Board(ply_limit=None)
        self._search = None  # a new game: nothing of the old tree is reused

    def _setoption(self, args: list[str]) -> None:
        lowered = [a.lower() for a in args]
        if not lowered or lowered[0] != "name":
            self.info_string(f"malformed setoption (expected: setoption name <id> [value <x>]): "
                             f"{' '.join(args)[:200]}")
            return
        split = lowered.index("value") if "value" in lowered else len(args)
        name = " ".join(args[1:split])
        value = " ".join(args[split + 1:])
        option = _OPTIONS_BY_NAME.get(name.lower())
        if option is None:
            self.info_string(f"unknown option {_quoted(name)}; options: {', '.join(o.name for o in OPTIONS)}")
            return
        try:
            parsed = option.parse(value)
        except ValueError as error:
            self.info_string(f"ignored: {error}")
            return
        self._apply_option(option, parsed)

    def _apply_option(self, option: UciOption, value: int | bool | str) -> None:
        old = self.values[option.name]
        self.values[option.name] = value
        if option.name == "Threads":
            self._set_threads(int(value))
        if option.name in ("Weights", "Device"):
            try:
                self._check_source()
                pick_device(str(self.values["Device"]))
            except UserError as error:
                self.values[option.name] = old
                self.info_string(f"ignored {option.name}, kept {_quoted(str(old))}: {error}")

    def _set_threads(self, threads: int) -> None:
        """Sets torch's CPU threads for the network; 0 restores torch's default, the machine's cores.

        torch keeps the count per thread once a thread has used it, so it is set here (for threads
        to come) and queued on the network thread (after a running search, whose passes keep theirs).
        """
        self.values["Threads"] = threads
        count = threads if threads > 0 else DEFAULT_THREADS
        torch.set_num_threads(count)
        self._network_thread.submit(torch.set_num_threads, count)

    def _position(self, args: list[str]) -> None:
        if not args or args[0] not in ("startpos", "fen"):
            self.info_string(f"malformed position (expected startpos or fen ...): {' '.join(args)[:200]}")
            return
        split = args.index("moves") if "moves" in args else len(args)
        fen = STARTING_FEN if args[0] == "startpos" else " ".join(args[1:split])
        try:
            board = Board(fen, ply_limit=None)
        except ChessError as error:
            self.info_string(f"position ignored: {error}")
            return
        for uci in args[split + 1:]:
            try:
                board.push_uci(uci)
            except ChessError as error:
                self.info_string(f"moves from {_quoted(uci)} on ignored: {error}")
                break
        self._board = board

    def _go(self, args: list[str]) -> None:
        if self.searching():
            self.info_string("go ignored: a search is running (send stop first)")
            return
        self.stop_search()  # joins a finished thread
        go = parse_go(args)
        self._report_unsupported(go)
        board = self._board.copy()
        if not board.legal_moves():
            self.info_string(f"no legal moves ({board.termination()})")
            self._out.line("bestmove 0000")
            return
        network = self._network_thread.call(self._ensure_network)
        if network is None:
            self.info_string("no network could be loaded; see the error above")
            self._out.line("bestmove 0000")
            return
        self._job = self._make_job(go, board)
        self._search_done = self._network_thread.submit(self._search_job, self._job, network)

    def _report_unsupported(self, go: GoCommand) -> None:
        for problem in go.problems:
            self.info_string(f"go: ignored {_quoted(problem)}")
        if go.mate is not None:
            self.info_string("go mate is not supported; searching with the other limits")
        if go.searchmoves:
            self.info_string("go searchmoves is not supported; searching every move")

    def _make_job(self, go: GoCommand, board: Board) -> _Job:
        started = self._clock()
        manager = self._time if self.values["TimeManager"] == "smart" else None
        game_ply = 2 * (board.fullmove_number - 1) + (0 if board.turn else 1)
        plan = plan_search_time(go, board.turn, overhead_ms=float(self.values["MoveOverhead"]),
                              moves_to_go=int(self.values["MovesToGo"]), ply=game_ply, manager=manager)
        timed = plan is not None or go.infinite
        nodes = go.nodes if go.nodes is not None else (INFINITE_NODES if timed else int(self.values["Nodes"]))
        deadline = started + plan.budget_ms / 1000.0 if plan is not None and not go.ponder else None
        return _Job(board, go, max(1, min(nodes, INFINITE_NODES)), plan, deadline, go.ponder, started,
                    clock=self._clock)

    def _stop(self, args: list[str]) -> None:
        if self._job is not None:
            self._job.stop.set()
            self._job.wake.set()
        self.wait()

    def _ponderhit(self, args: list[str]) -> None:
        """The GUI's opponent played the predicted move: the ponder search becomes the real one from now."""
        job = self._job
        if job is None or not job.pondering or job.answered.is_set():
            self.info_string("ponderhit ignored: no ponder search is running")
            return
        now = self._clock()
        if job.budget_ms is not None:
            job.deadline = now + job.budget_ms / 1000.0
        job.started = now  # the reported time counts from here, as the clock does
        job.pondering = False
        job.wake.set()

    # -- the search (on the network thread) --

    def _algorithm_for(self, network: Network, job: _Job) -> str:
        """The search algorithm of ``job``: the SearchAlgorithm option, or for ``auto`` the network's
        search.algorithm when the search has a node budget, and PUCT when it runs until a clock or ``stop``
        ends it (Sequential Halving divides a budget known in advance; PUCT's best move is good whenever
        it is stopped)."""
        chosen = str(self.values["SearchAlgorithm"])
        if chosen != "auto":
            return chosen
        return "puct" if job.nodes >= INFINITE_NODES else network.search_config.algorithm

    def _policy_temperature(self) -> float | None:
        """PolicyTemperature as a number, or None (empty) for the network's own."""
        text = str(self.values["PolicyTemperature"]).strip()
        return parse_policy_temperature(text) if text else None

    def _cpuct(self) -> float | None:
        """CPuct as a number, or None (empty) for the network's own c_init."""
        text = str(self.values["CPuct"]).strip()
        return parse_cpuct(text) if text else None

    def _search_for(self, network: Network, job: _Job) -> MultiGameSearch:
        """The engine's search (tree kept from the last move), rebuilt if the network, batch size or
        algorithm changed."""
        params = search_params(network.search_config, UCI, algorithm=self._algorithm_for(network, job),
                               simulations=INFINITE_NODES, leaves_per_game=int(self.values["LeavesPerBatch"]),
                               visits_per_leaf=float(self.values["VisitsPerLeaf"]),
                               policy_temperature=self._policy_temperature(), c_init=self._cpuct())
        key = (network, params)
        if self._search is None or self._search_key != key:
            self._search = MultiGameSearch(1, params)
            self._batch = network.evaluator.pin(self._search.new_batch())
            self._search_key = key
        return self._search

    def _search_job(self, job: _Job, network: Network) -> None:
        best, ponder = "0000", None
        try:
            search = self._search_for(network, job)
            # Gumbel's Sequential Halving schedules a budget from an empty root: no reuse there.
            search.set_position(0, job.board, simulations=job.nodes, reuse=search.algorithm == "puct")
            multipv = int(self.values["MultiPV"])
            wdl = bool(self.values["UCI_ShowWDL"])
            draw = network.draw_probability(job.board) if wdl else None
            last_info = [job.started]

            def report() -> None:
                for line in _info_lines(search, job, multipv, wdl=wdl, draw=draw):
                    self._out.line(line)

            calls = [0, 0]  # network calls, leaves evaluated
            last_call = [0.0]  # seconds the last network call took
            evaluate = network.evaluator.evaluate_legal

            def evaluate_legal(*arrays: Any) -> tuple[Any, Any]:
                calls[0] += 1
                calls[1] += len(arrays[0])
                started = self._clock()
                result = evaluate(*arrays)
                last_call[0] = self._clock() - started
                return result

            first_simulations = search.simulations(0)

            def settled(now: float, deadline: float) -> bool:
                """Smart pruning, once a share of the budget has passed (the speed is measured by then)."""
                elapsed = now - job.started
                if job.budget_ms is None or elapsed < PRUNING_AFTER_SHARE * job.budget_ms / 1000.0:
                    return False
                speed = (search.simulations(0) - first_simulations) / max(elapsed, 1e-6)
                return best_is_settled([stat[2] for stat in search.root_stats(0)], speed, deadline - now)

            def should_stop() -> bool:
                now = self._clock()
                if now - last_info[0] >= INFO_INTERVAL_S:
                    last_info[0] = now
                    report()
                if job.stop.is_set():
                    return True
                if job.pondering:
                    return False  # no limit but stop (or the node cap) until ponderhit
                if job.deadline is not None and now + last_call[0] >= job.deadline:
                    return True  # the next network call would end past the deadline (a batch takes a while)
                if job.deadline is not None and job.plan is not None and job.plan.may_stop_early \
                        and settled(now, job.deadline):
                    return True  # no other move can overtake the best in the time left: bank the rest
                depth = job.go.depth
                return depth is not None and len(search.principal_variation(0, depth)) >= depth

            run_search(search, evaluate_legal=evaluate_legal, should_stop=should_stop, batch=self._batch)
            search.stop(0)
            report()
            self.last_report = SearchReport(search.simulations(0), self._clock() - job.searching_since,
                                            calls[0], calls[1], budget_ms=job.budget_ms)
            while job.must_wait():  # UCI: no bestmove before `stop` (infinite) or `ponderhit` (ponder)
                job.wake.wait()
                job.wake.clear()
            if job.plan is not None and self.values["TimeManager"] == "smart" and job.go.movetime is None:
                self._time.spent(job.plan, self._clock() - job.started)
            line = search.principal_variation(0, 2)
            best = search.best_move(0)
            ponder = line[1] if len(line) == 2 and line[0] == best else None
        except Exception as error:  # report, and still answer with a move
            self.info_string(f"search failed: {type(error).__name__}: {error}")
            moves = job.board.legal_moves()
            best, ponder = (moves[0] if moves else "0000"), None
            self._search = None  # the tree may be half-updated: start afresh next time
        finally:
            job.answered.set()
            self._out.line(f"bestmove {best}" + (f" ponder {ponder}" if ponder else ""))

    def searching(self) -> bool:
        """Checks whether a search is running (one that has sent its bestmove is not)."""
        return self._job is not None and not self._job.answered.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits for the running search (if any) to finish; returns False on timeout."""
        if self._search_done is not None:
            finished, _ = futures.wait([self._search_done], timeout)
            if not finished:
                return False
            self._search_done = None
        return True

    def stop_search(self) -> None:
        """Stops the running search, if any, and waits for its bestmove."""
        if self._job is not None:
            self._job.stop.set()
            self._job.wake.set()
        self.wait()
        self._job = None

    # -- the network --

    def _source(self) -> NetworkSource:
        weights = str(self.values["Weights"]).strip()
        return NetworkSource(self._run, None, Path(weights) if weights else None,
                             fallback=FRESH if self._fresh else BUILTIN)

    def _check_source(self) -> None:
        """Checks that the network source names a usable file (cheap; nothing is loaded).

        Raises UserError for a missing or unusable file or run, and for a run
        with no checkpoint unless fresh weights were allowed.
        """
        source = self._source()
        resolved = resolve_source(source)
        if self._fresh or source.weights is not None:
            return
        missing = resolved.config is None and not RunDir(self._run).exists()
        if resolved.path is None or (missing and self._run_named):
            why = "has no checkpoint yet" if not missing else "does not exist"
            raise UserError(f"run {str(self._run)!r} {why}: give a run with checkpoints or a weights file "
                            f"(--weights builtin: the network that ships), or --fresh to play with freshly "
                            f"initialised (about random) weights")

    def _ensure_network(self) -> Network | None:
        """Loads the network when the options changed (or at first use); reports errors as info strings."""
        key = (self._source(), str(self.values["Device"]), str(self.values["Precision"]))
        if self._network is not None and self._loaded_key == key:
            return self._network
        try:
            self._check_source()
            network = load_network(key[0], device=key[1], warn=self._err, precision=key[2], forward=self._forward,
                                   max_batch=int(self.values["LeavesPerBatch"]))
            network.evaluator.warm_up()  # a CUDA graph per batch size up to LeavesPerBatch, now and not mid-search
        except UserError as error:
            self.info_string(f"error: {error}")
            return self._network
        except OSError as error:  # the file changed under us since the options were checked
            self.info_string(f"error: cannot load the network: {error.strerror or error}")
            return self._network
        if network.fresh:
            self.info_string(f"warning: {self._run} has no checkpoint; playing with freshly initialised weights")
        elif (note := resolve_source(key[0]).note) is not None:
            self.info_string(f"note: {note}")
        network.evaluator.fold_batch_norm()  # the engine's weights never change: fold once, not every pass
        self._network, self._loaded_key = network, key
        device = network.evaluator.device
        count = torch.get_num_threads()
        threads = f" ({count} thread{'s' if count != 1 else ''})" if device.type == "cpu" else ""
        self.info_string(f"network: {network.label} on {device}{threads}, {network.evaluator.precision_text()}")
        if network.notice:  # the attribution a licence of its data asks for travels with the weights
            self.info_string(f"network notice: {network.notice}")
        return network


def run_uci(
    run_dir: str | Path | None,
    weights: str | Path | None,
    device: str = "auto",
    *,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
    nodes: int | None = None,
    threads: int | None = None,
    fresh: bool = False,
) -> None:
    """Runs the UCI engine over stdin/stdout (or the given streams) until `quit` or end of input.

    `run_dir` (default runs/default) gives the latest checkpoint; `weights`,
    when given, a model file or checkpoint instead. `nodes` and `threads`
    preset the Nodes and Threads options; `fresh` allows a run without
    checkpoints (freshly initialised weights).

    Raises UserError if the weights file or run is unusable (before any output).
    """
    UciEngine(run_dir, weights, device, stdin=stdin, stdout=stdout, stderr=stderr, nodes=nodes,
              threads=threads, fresh=fresh).run()
