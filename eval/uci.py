"""A UCI engine around the network and the PUCT search, for any chess GUI or lichess-bot.

Run it as `alphazero uci --run DIR` (or `--weights FILE`), or directly as
`python -m eval.uci --weights FILE`. Commands: uci, isready, ucinewgame,
setoption, position startpos|fen ... [moves ...], go, stop, quit (plus
debug, register and ponderhit, which are accepted and ignored).

The search runs on a background thread, so `stop` and `isready` are answered
while it runs. A malformed or unknown line is answered with `info string ...`
and otherwise ignored; a position without legal moves gets `bestmove 0000`.

`go` limits (whichever comes first ends the search):

- `nodes N`: N simulations (the reported nodes are the simulations done).
- `movetime T`: T - MoveOverhead milliseconds.
- `wtime/btime [winc/binc] [movestogo]`: see `time_budget_ms`.
- `depth D`: a cap: stops once the principal variation (the line of most
  visited moves, whose length is the reported depth) is D plies long.
- `infinite`: until `stop`; `bestmove` is withheld until then, as UCI asks.
- none of these: the Nodes option's simulations.
`mate`, `searchmoves` and `ponder` are not supported and are ignored with an
info string.

Scores: the search's Q of the best move, a value in [-1, 1] for the side to
move (the mean of the backed-up network values and exact game ends below
it), converted to centipawns by eval.scores.value_to_centipawns, Leela's
formula cp = 111.714640912 * tan(1.5620688421 * Q): Q 0.5 is about +111 cp,
Q 0.9 about +671 cp, Q +-1 is +-12 800 cp.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from alphazero import __version__
from alphazero.errors import UserError
from alphazero.network import pick_device
from eval.network_agents import (
    DEFAULT_RUN_DIR, Network, NetworkSource, load_network, resolve_source, search_options,
)
from eval.scores import value_to_centipawns
from mcts_ext import STARTING_FEN, Board, ChessError
from mcts_ext.driver import run as run_search
from mcts_ext.search import MultiGameSearch

ENGINE_AUTHOR = "the alphazero authors"

INCREMENT_SHARE = 0.75
"""Share of the increment spent on each move (the rest builds a reserve)."""

MAX_TIME_FRACTION = 0.5
"""The most of the remaining clock one move may use, whatever movestogo says."""

MIN_BUDGET_MS = 1.0
"""The least time budget: the search always expands the root and plays something."""

INFINITE_NODES = 50_000_000
"""The node cap of `go infinite` and timed searches (bounds the tree's memory)."""

INFO_INTERVAL_S = 0.5
"""Seconds between info lines during a search (one more comes with bestmove)."""

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
                raise ValueError(f"{self.name} takes an integer, got {text!r}") from None
            assert self.min is not None and self.max is not None
            if not self.min <= value <= self.max:
                raise ValueError(f"{self.name} must lie in {self.min}..{self.max}, got {value}")
            return value
        if self.type == "check":
            if text.lower() not in ("true", "false"):
                raise ValueError(f"{self.name} takes true or false, got {text!r}")
            return text.lower() == "true"
        if self.type == "combo":
            if text.lower() not in self.choices:
                raise ValueError(f"{self.name} takes one of {', '.join(self.choices)}, got {text!r}")
            return text.lower()
        return "" if text == "<empty>" else text


OPTIONS: tuple[UciOption, ...] = (
    UciOption("Nodes", "spin", 400, "simulations a move when `go` sets no limit, and the cap of `go depth`",
              1, INFINITE_NODES),
    UciOption("Weights", "string", "", "a model file or learner checkpoint; empty: the run's latest checkpoint"),
    UciOption("Device", "string", "auto", "where the network runs: auto, cpu, cuda or cuda:N"),
    UciOption("Threads", "spin", 0, "torch CPU threads for the network; 0 keeps torch's default", 0, 1024),
    UciOption("MoveOverhead", "spin", 100, "milliseconds kept back each move for the GUI, the network and lag",
              0, 60_000),
    UciOption("MovesToGo", "spin", 30, "moves assumed left when the GUI sends a clock without movestogo", 1, 1000),
    UciOption("LeavesPerBatch", "spin", 1, "leaves per network call; more uses virtual loss (faster on a GPU, "
              "weaker per node); gumbel always takes 1", 1, 256),
    UciOption("SearchAlgorithm", "combo", "auto", "puct or gumbel (no noise; best with a node limit, as Sequential "
              "Halving plans for its budget); auto: the network's search.algorithm",
              choices=("auto", "puct", "gumbel")),
)
"""Every engine option, declared once: the `uci` answer and setoption both read this table."""

_OPTIONS_BY_NAME = {option.name.lower(): option for option in OPTIONS}


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


def time_budget_ms(go: GoCommand, white_to_move: bool, *, overhead_ms: float, moves_to_go: int) -> float | None:
    """Returns the milliseconds to search, or None when `go` sets no time limit.

    - movetime T: T - overhead.
    - a clock (our remaining time t, increment inc, both ms):
      budget = min(t / m + INCREMENT_SHARE * inc, MAX_TIME_FRACTION * t) - overhead,
      where m is movestogo when the GUI sends it, else `moves_to_go` (the
      MovesToGo option, 30).
    Never below MIN_BUDGET_MS: the root is always expanded and a move chosen.
    """
    if go.movetime is not None:
        return max(go.movetime - overhead_ms, MIN_BUDGET_MS)
    remaining = go.wtime if white_to_move else go.btime
    if remaining is None:
        return None
    increment = (go.winc if white_to_move else go.binc) or 0
    moves_left = go.movestogo if go.movestogo else moves_to_go
    budget = min(remaining / moves_left + INCREMENT_SHARE * increment, MAX_TIME_FRACTION * remaining)
    return max(budget - overhead_ms, MIN_BUDGET_MS)


@dataclass
class _Job:
    """One search in flight: the position, its limits, the event that stops it, and whether it answered.

    `answered` is set just before `bestmove` is written: from then on the GUI
    may send the next `go`, although the thread may not have exited yet.
    """

    board: Board
    nodes: int
    deadline: float | None
    depth: int | None
    infinite: bool
    stop: threading.Event
    started: float
    answered: threading.Event = field(default_factory=threading.Event)


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


def _info_line(search: MultiGameSearch, started: float) -> str:
    """Formats `info depth .. nodes .. nps .. score cp .. time .. pv ..` from the search's slot 0."""
    elapsed = max(time.monotonic() - started, 1e-6)
    nodes = search.simulations(0)
    best = search.best_move(0)
    pv = search.principal_variation(0) or [best]
    q = next((q for uci, _, _, q, _ in search.root_stats(0) if uci == best), None)
    value = q if q is not None else search.root_value(0)
    cp = round(value_to_centipawns(value))
    return (f"info depth {len(pv)} seldepth {len(pv)} nodes {nodes} nps {int(nodes / elapsed)} "
            f"score cp {cp} time {int(elapsed * 1000)} pv {' '.join(pv)}")


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


class UciEngine:
    """The engine's state and command handlers; `run()` is the loop over the input stream.

    Construct it with the network's source (a run directory and/or a weights
    file) and streams; the network is loaded at the first `isready` or `go`,
    so that the `uci` handshake is immediate.

    Raises UserError (from the constructor) if the source names no existing
    file or run checkpoint, or the device is unknown.
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
    ) -> None:
        self._in = stdin if stdin is not None else _lenient(sys.stdin)
        self._out = _Output(stdout if stdout is not None else sys.stdout)
        self._err = stderr if stderr is not None else sys.stderr
        self._run = Path(run_dir) if run_dir is not None else DEFAULT_RUN_DIR
        self.values: dict[str, Any] = {option.name: option.default for option in OPTIONS}
        self.values["Weights"] = str(weights) if weights is not None else ""
        self.values["Device"] = device
        try:
            if nodes is not None:
                self.values["Nodes"] = _OPTIONS_BY_NAME["nodes"].parse(str(nodes))
            if threads is not None:
                self._set_threads(int(_OPTIONS_BY_NAME["threads"].parse(str(threads))))
        except ValueError as error:
            raise UserError(str(error)) from None
        resolve_source(self._source())  # fail now, with a clear message, not at the first `go`
        pick_device(device)
        self._network: Network | None = None
        self._loaded_key: tuple[NetworkSource, str] | None = None
        self._board = Board(ply_limit=None)
        self._job: _Job | None = None
        self._thread: threading.Thread | None = None

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
            # Accepted and ignored: nothing to debug, register or ponder.
            "quit": lambda args: None, "debug": lambda args: None, "register": lambda args: None,
            "ponderhit": lambda args: None,
        }

    def info_string(self, text: str) -> None:
        """Sends `info string TEXT` (one line)."""
        self._out.line("info string " + " ".join(text.split()))

    # -- commands --

    def _uci(self, args: list[str]) -> None:
        self._out.line(f"id name alphazero {__version__}")
        self._out.line(f"id author {ENGINE_AUTHOR}")
        for option in OPTIONS:
            self._out.line(option.declaration())
        self._out.line("uciok")

    def _isready(self, args: list[str]) -> None:
        if not self.searching():
            self._ensure_network()
        self._out.line("readyok")

    def _ucinewgame(self, args: list[str]) -> None:
        self.stop_search()
        self._board = Board(ply_limit=None)

    def _setoption(self, args: list[str]) -> None:
        lowered = [a.lower() for a in args]
        if not lowered or lowered[0] != "name":
            self.info_string(f"malformed setoption (expected: setoption name <id> [value <x>]): {' '.join(args)}")
            return
        split = lowered.index("value") if "value" in lowered else len(args)
        name = " ".join(args[1:split])
        value = " ".join(args[split + 1:])
        option = _OPTIONS_BY_NAME.get(name.lower())
        if option is None:
            self.info_string(f"unknown option {name!r}; options: {', '.join(o.name for o in OPTIONS)}")
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
                resolve_source(self._source())
                pick_device(str(self.values["Device"]))
            except UserError as error:
                self.values[option.name] = old
                self.info_string(f"ignored {option.name}: {error}")

    def _set_threads(self, threads: int) -> None:
        self.values["Threads"] = threads
        if threads > 0:
            torch.set_num_threads(threads)

    def _position(self, args: list[str]) -> None:
        if not args or args[0] not in ("startpos", "fen"):
            self.info_string(f"malformed position (expected startpos or fen ...): {' '.join(args)}")
            return
        split = args.index("moves") if "moves" in args else len(args)
        fen = STARTING_FEN if args[0] == "startpos" else " ".join(args[1:split])
        try:
            board = Board(fen, ply_limit=None)
        except (ChessError, ValueError) as error:
            self.info_string(f"position ignored: {error}")
            return
        for uci in args[split + 1:]:
            try:
                board.push_uci(uci)
            except (ChessError, ValueError) as error:
                self.info_string(f"moves from {uci!r} on ignored: {error}")
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
        network = self._ensure_network()
        if network is None:
            self.info_string("no network could be loaded; see the error above")
            self._out.line("bestmove 0000")
            return
        self._job = self._make_job(go, board)
        self._thread = threading.Thread(target=self._search, args=(self._job, network), name="uci-search",
                                        daemon=True)
        self._thread.start()

    def _report_unsupported(self, go: GoCommand) -> None:
        for problem in go.problems:
            self.info_string(f"go: ignored {problem!r}")
        if go.mate is not None:
            self.info_string("go mate is not supported; searching with the other limits")
        if go.searchmoves:
            self.info_string("go searchmoves is not supported; searching every move")
        if go.ponder:
            self.info_string("pondering is not supported; searching now")

    def _make_job(self, go: GoCommand, board: Board) -> _Job:
        started = time.monotonic()
        budget = time_budget_ms(go, board.turn, overhead_ms=float(self.values["MoveOverhead"]),
                                moves_to_go=int(self.values["MovesToGo"]))
        timed = budget is not None or go.infinite
        nodes = go.nodes if go.nodes is not None else (INFINITE_NODES if timed else int(self.values["Nodes"]))
        deadline = started + budget / 1000.0 if budget is not None else None
        return _Job(board, max(1, min(nodes, INFINITE_NODES)), deadline, go.depth, go.infinite,
                    threading.Event(), started)

    def _stop(self, args: list[str]) -> None:
        if self._job is not None:
            self._job.stop.set()
        self.wait()

    # -- the search thread --

    def _search(self, job: _Job, network: Network) -> None:
        best = "0000"
        try:
            algorithm = str(self.values["SearchAlgorithm"])
            options = search_options(network.search_config, algorithm=None if algorithm == "auto" else algorithm)
            leaves = int(self.values["LeavesPerBatch"]) if options["algorithm"] == "puct" else 1
            search = MultiGameSearch(1, simulations=job.nodes, leaves_per_game=leaves, **options)
            search.set_position(0, job.board)
            last_info = [job.started]

            def should_stop() -> bool:
                now = time.monotonic()
                if now - last_info[0] >= INFO_INTERVAL_S:
                    last_info[0] = now
                    self._out.line(_info_line(search, job.started))
                if job.stop.is_set() or (job.deadline is not None and now >= job.deadline):
                    return True
                return job.depth is not None and len(search.principal_variation(0, job.depth)) >= job.depth

            run_search(search, network.evaluate, should_stop=should_stop)
            search.stop(0)
            if job.infinite:
                job.stop.wait()  # UCI: no bestmove before `stop` in infinite mode
            self._out.line(_info_line(search, job.started))
            best = search.best_move(0)
        except Exception as error:  # report, and still answer with a move
            self.info_string(f"search failed: {type(error).__name__}: {error}")
            moves = job.board.legal_moves()
            best = moves[0] if moves else "0000"
        finally:
            job.answered.set()
            self._out.line(f"bestmove {best}")

    def searching(self) -> bool:
        """Checks whether a search is running (one that has sent its bestmove is not)."""
        return self._job is not None and not self._job.answered.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Waits for the running search (if any) to finish; returns False on timeout."""
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                return False
            self._thread = None
        return True

    def stop_search(self) -> None:
        """Stops the running search, if any, and waits for its bestmove."""
        if self._job is not None:
            self._job.stop.set()
        self.wait()
        self._job = None

    # -- the network --

    def _source(self) -> NetworkSource:
        weights = str(self.values["Weights"]).strip()
        return NetworkSource(self._run, None, Path(weights) if weights else None)

    def _ensure_network(self) -> Network | None:
        """Loads the network when the options changed (or at first use); reports errors as info strings."""
        key = (self._source(), str(self.values["Device"]))
        if self._network is not None and self._loaded_key == key:
            return self._network
        try:
            network = load_network(key[0], device=key[1], warn=self._err)
        except UserError as error:
            self.info_string(f"error: {error}")
            return self._network
        if network.fresh:
            self.info_string(f"warning: {self._run} has no checkpoint; playing with freshly initialised weights")
        self._network, self._loaded_key = network, key
        self.info_string(f"network: {network.label} on {network.evaluator.device}")
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
) -> None:
    """Runs the UCI engine over stdin/stdout (or the given streams) until `quit` or end of input.

    `run_dir` (default runs/default) gives the latest checkpoint; `weights`,
    when given, a model file or checkpoint instead. `nodes` and `threads`
    preset the Nodes and Threads options.

    Raises UserError if the weights file or run is unusable (before any output).
    """
    UciEngine(run_dir, weights, device, stdin=stdin, stdout=stdout, stderr=stderr, nodes=nodes,
              threads=threads).run()


def main(argv: Sequence[str] | None = None) -> int:
    """Runs `python -m eval.uci [--run DIR | --weights FILE] [--device D] [--nodes N] [--threads N]`."""
    from eval.cli import add_uci_arguments, run_uci_command

    parser = argparse.ArgumentParser(prog="python -m eval.uci", description="alphazero as a UCI engine")
    add_uci_arguments(parser)
    args = parser.parse_args(argv)
    try:
        run_uci_command(args)
    except UserError as error:
        print(f"alphazero uci: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
