"""A UCI engine around the network and the PUCT search, for any chess GUI or lichess-bot.

Run it as `alphazero uci --run DIR` (or `--weights FILE`; `--fresh` allows a
run without checkpoints, i.e. freshly initialised weights). Commands: uci,
isready, ucinewgame, setoption, position startpos|fen ... [moves ...], go,
stop, ponderhit, quit (debug and register are accepted and ignored).

Over 600 lines: the engine's command loop and the state it keeps between
commands (options, position, the search thread, the network's load at
isready, tablebases at the root) read together; its pieces that stand alone
are already modules of their own (eval.uci_go, uci_options, uci_output,
uci_search, uci_syzygy, uci_threads). To be split further.

The search runs on a background thread, so `stop`, `ponderhit` and
`isready` are answered while it runs (one thread, for the engine's life, runs
every network call: see NetworkThread); the search hears `stop` and its
deadline within a few milliseconds whatever the tree holds. A malformed or
unknown line, or a bad option value, is answered with `info string ...` and
otherwise ignored (an option keeps its previous value); a refused `position`
(a bad FEN, a move that is not legal) leaves no position, and `go` answers
`bestmove 0000` until the next good one, as it does in a position without
legal moves (after `stop` or `ponderhit` for `go infinite` or `go ponder`).
Every `go` gets one `bestmove`: a `go` sent during a search waits for that
search's answer, or stops it first where only `stop` would end it.

Each network call evaluates up to LeavesPerBatch leaves (default
alphazero.search.UCI_LEAVES_PER_BATCH): the search descends that many times, charging
virtual loss to each path so that the next descent looks elsewhere; a descent
that meets a leaf already in the batch (a collision) adds nothing, and its
virtual loss is taken back before the call, as lc0 does (mcts_ext.search).
Game ends, repetitions and proven nodes are scored on the spot and never wait
for the network. Gumbel's search batches too: a leaf in flight counts as a
visit, and a batch ends with a Sequential Halving phase. `info nps` is the
nodes of the search over the seconds it has run; Threads sets torch's CPU
threads (0: the cores less those other work keeps busy, chosen at the
network's load and followed through each search, eval.uci_threads).

`go` takes the limits eval.uci_go lists (whichever comes first ends the
search; with none, the Nodes option's simulations); `searchmoves`
limits the root to its legal moves (MultiGameSearch.set_root_moves: a fresh
tree, and no reuse of it by the next search); `mate` is not supported and is
ignored with an info string.
`Mode policy|value|av` answers `go` at once with that player's move, no search (eval.uci_searchless).

The search proves results where it meets game ends (an MCTS-solver): the
shortest proven mate is played, and a search whose root is proven stops
early. `MultiPV N` reports the N best root moves (best_move's order), each
with its own score and line, as `multipv k`; `UCI_ShowWDL` adds `wdl W D L`
(eval.uci_search says how scores are given). `bestmove` names a `ponder`
move when the line has a second move.

The search's constants are the network's run config's (its `search` section;
the defaults for a model file), with the options above on top
(eval.uci_params; FpuMode and GumbelUnvisited at `auto` keep the network's).
Where they read the action-value head's values (fpu_mode or gumbel_unvisited
'action_value'), a network with the head gives them with each batch
(alphazero.search_action_values); one without it is said in an `info string`
and searched with the usual value for unvisited moves.

The tree is bounded by memory, Hash (0: half the machine's memory),
said in an `info string` when a search is built; a tree that fills it ends
the search, said once, and the search's best move is the answer (after `stop`
or `ponderhit` for `go infinite` or `go ponder`). An allocation that fails
anyway is said with what to lower, answered with the best move so far, and
the engine stays up (eval.uci_memory).

Between moves of one game the search keeps the subtree of the moves played
(tree reuse): when a `position` continues the game last searched, the visits
already spent on it are kept; `ucinewgame`, another game, or a new network or
LeavesPerBatch start from an empty tree.

With SyzygyPath set, Syzygy tablebases decide what they hold: at a root
they hold, only the moves that keep the tables' result are played (the
fastest to zero the fifty-move counter among winning ones, as Stockfish
ranks them); from a root they do not hold, the search's leaves within the
tables take the tables' result as their value; info lines add `tbhits`
(eval.uci_syzygy). A path that cannot be used is said in
one `info string`, and the engine plays on without tables.

Debug Log File names a file the engine appends what it hears and says to,
with each search's start and end, all timed to the microsecond
(eval.uci_log): where a move's time went.

Every option may also be given on the command line, as lc0 takes them
(`alphazero uci --hash 256 --syzygy-path /tb`: UciOption.flag), checked
before the engine starts.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Mapping
from concurrent import futures
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TextIO, TypeVar

import chess
import torch

from alphazero import __version__
from alphazero.chess.syzygy import RootProbe, SyzygyPathError, Tables
from alphazero.errors import UserError
from alphazero.nn.builtin import BUILTIN
from alphazero.nn.kept_precision import KeptPrecisions
from alphazero.nn.network import pick_device
from alphazero.out_of_memory import out_of_memory_in, out_of_memory_message
from alphazero.search_action_values import asks_action_values, legal_evaluator
from alphazero.store.rundir import DEFAULT_RUN_DIR, RunDir
from alphazero.store.sources import FRESH, Network, NetworkSource, load_network, resolve_source
from eval.action_values import has_action_values
from eval.timeman import TimeManager, best_is_settled
from eval.uci_go import GoCommand, parse_go, plan_search_time, unsupported
from eval.uci_log import HEARD, NOTE, SAID, DebugLog
from eval.uci_memory import memory_line, out_of_memory_line, tree_full_line
from eval.uci_options import INFINITE_NODES, OPTIONS, OPTIONS_BY_NAME, SEARCH, UciOption, quoted
from eval.uci_output import Output, info_string_line, lenient
from eval.uci_params import engine_search_params
from eval.uci_search import NetworkThread, SearchJob, SearchReport, info_lines
from eval.uci_searchless import answer_searchless, usable_mode
from eval.uci_syzygy import chosen_move, open_tables, probe_leaves, root_probe, tablebase_info_line
from eval.uci_threads import BusyMeter, ThreadsFollowingLoad, default_threads, machine_cores, waits_passively
from mcts_ext import STARTING_FEN, Board, ChessError
from mcts_ext.driver import run as run_search
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch

ENGINE_AUTHOR = "the alphazero authors"

PRUNING_AFTER_SHARE = 0.1
"""Smart pruning waits until this share of a move's budget has passed, so that the speed it extrapolates is
measured (eval.timeman.best_is_settled)."""

ENGINE_FORWARD = "graphs"
"""How the engine's network runs on CUDA: a CUDA graph per batch-size bucket, captured at load, because run
eagerly the engine's small batches are bound by kernel launches, which bf16's casts only add to (EXPERIMENTS.md,
"The UCI engine on CUDA with CUDA graphs, on one H200"; `alphazero bench uci --device cuda` measures both). On a
CPU the passes run eager whatever this says."""

DEFAULT_THREADS = torch.get_num_threads()
"""torch's own choice of CPU threads (the machine's cores): Threads 0 until the network's load chooses
(eval.uci_threads.default_threads)."""

INFO_INTERVAL_S = 0.5
"""Seconds between info lines during a search (one more comes with bestmove)."""


# --- the engine -------------------------------------------------------------------------------


_Result = TypeVar("_Result")

class UciEngine:
    """The engine's state and command handlers; `run()` is the loop over the input stream.

    Construct it with the network's source (a run directory and/or a weights
    file) and streams; the network is loaded at the first `isready` or `go`
    (after the options, as lc0 loads its weights), so that the `uci`
    handshake is immediate and a client that sends `isready` before its
    first clock pays nothing for the load on it. The load's notes (the
    network, its threads and precision) are `info string`s before `readyok`. A run without checkpoints plays
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
        options: Mapping[str, str] | None = None,
    ) -> None:
        self._clock = clock  # every deadline and reported time reads it (tests give a clock they advance)
        self._in = stdin if stdin is not None else lenient(sys.stdin)
        self._log = DebugLog()  # Debug Log File: what was heard and said, and when (eval.uci_log)
        self._out = Output(stdout if stdout is not None else sys.stdout,
                           listener=lambda text: self._log.write(SAID, text))
        self._err = stderr if stderr is not None else sys.stderr
        self._run = Path(run_dir) if run_dir is not None else DEFAULT_RUN_DIR
        self._run_named = run_dir is not None  # a run the user named must exist (a typo must not play)
        self._fresh = fresh
        self._forward = forward  # how a CUDA pass runs (ENGINE_FORWARD; a benchmark's baseline gives 'eager')
        self.values: dict[str, Any] = {option.name: option.default for option in OPTIONS}
        self.values["Weights"] = str(weights) if weights is not None else ""
        self.values["Device"] = device
        self._network_thread = NetworkThread()
        self._tables: Tables | None = None  # the SyzygyPath's tables, None without
        self._busy = BusyMeter()  # the cores other work keeps busy, from now to the network's load (Threads 0)
        self._busy.start()
        self._auto_threads = DEFAULT_THREADS  # Threads 0's count, chosen at each load of the network
        self._fallbacks_said = 0  # the evaluator's parity fallbacks said so far
        given = {"Nodes": nodes, "Threads": threads}
        self._set_from_command_line({name: str(value) for name, value in given.items() if value is not None})
        self._set_from_command_line(options or {})
        self._check_source()  # fail now, with a clear message, not at the first `go`
        pick_device(device)
        self._network: Network | None = None
        self._loaded_key: tuple[NetworkSource, str, str] | None = None
        self._time = TimeManager()  # the smart time manager's bank, kept across the moves of a game
        self._board = Board(ply_limit=None)
        self._start_fen = STARTING_FEN  # the first position of the game on _board (its history, for the tables)
        self._refused: str | None = None  # why the last `position` was refused; None while _board is the GUI's
        self._job: SearchJob | None = None
        self._search_done: Future[None] | None = None  # the running (or last) search, on the network thread
        # The search and its tree, kept between moves for reuse, and the arrays it gathers
        # leaves into; only the network thread touches them while a search runs. Rebuilt
        # when the network, LeavesPerBatch or the algorithm changes.
        self._search: MultiGameSearch | None = None
        self._batch: tuple[Any, ...] = ()
        self._search_key: tuple[Network, SearchParams] | None = None
        self._action_values = False  # the search reads the head's values and the network has the head
        self._memory_said: tuple[int, int, int] | None = None  # the tree memory last said (limit, nodes, option)
        self.last_report: SearchReport | None = None
        """What the last finished search did (for benchmarks and tests)."""

    def _set_from_command_line(self, texts: Mapping[str, str]) -> None:
        """Sets options given on the command line (UCI name -> text), each checked as setoption checks it.

        Raises UserError naming the flag, for an unknown option, a bad value or a SyzygyPath that cannot be used.
        """
        for name, text in texts.items():
            option = OPTIONS_BY_NAME.get(name.lower())
            if option is None:
                raise UserError(f"unknown engine option {quoted(name)}; options: {', '.join(o.name for o in OPTIONS)}")
            try:
                value = option.parse(text)
            except ValueError as error:
                raise UserError(f"{option.flag}: {error}") from None
            if option.name == "SyzygyPath" and str(value).strip():
                try:
                    self._tables = Tables.open(str(value))
                except SyzygyPathError as error:
                    raise UserError(f"{option.flag}: {error}") from None
                self.values[option.name] = value
            elif option.name == "Debug Log File":
                if (why := self._open_log(str(value))) is not None:
                    raise UserError(f"{option.flag}: cannot append to {str(value)!r}: {why}")
                self.values[option.name] = value
            elif option.name == "Threads":
                self._set_threads(int(value))
            else:
                self.values[option.name] = value

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
            self._log.close()

    def on_network_thread(self, function: Callable[..., _Result], *args: Any) -> _Result:
        """Runs ``function(*args)`` on the thread that runs the engine's network, and returns its result
        (a benchmark times the network alone there, as the engine runs it: see NetworkThread)."""
        return self._network_thread.call(function, *args)

    def handle(self, line: str) -> bool:
        """Handles one input line; returns False after `quit`. Never raises for bad input."""
        self._log.write(HEARD, line)
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
        except Exception as error:  # a handler bug (or an allocation that failed) must not end the engine
            exhausted = out_of_memory_in(error)
            why = out_of_memory_message(exhausted, "uci") if exhausted is not None else \
                f"{type(error).__name__}: {error}"
            self.info_string(f"error in {command}: {why}")
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
        """Sends `info string TEXT` (one line, cut to eval.uci_output.INFO_STRING_LIMIT characters)."""
        self._out.line(info_string_line(text))

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
        self._start_fen = STARTING_FEN
        self._refused = None
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
        option = OPTIONS_BY_NAME.get(name.lower())
        if option is None:
            self.info_string(f"unknown option {quoted(name)}; options: {', '.join(o.name for o in OPTIONS)}")
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
        if option.name == "SyzygyPath":
            self._tables, said = open_tables(str(value))
            self.info_string(said)
        if option.name == "Debug Log File" and (why := self._open_log(str(value))) is not None:
            self.values[option.name] = ""
            self.info_string(f"Debug Log File {str(value)!r} not used: cannot append to it: {why}; no log")
        if option.name in ("Weights", "Device"):
            try:
                self._check_source()
                pick_device(str(self.values["Device"]))
            except UserError as error:
                self.values[option.name] = old
                self.info_string(f"ignored {option.name}, kept {quoted(str(old))}: {error}")

    def _open_log(self, path: str) -> str | None:
        """Logs to ``path`` from now (empty: no log); gets why it cannot, or None."""
        try:
            self._log.open(path)
        except OSError as error:
            return error.strerror or str(error)
        return None

    def _set_threads(self, threads: int) -> None:
        """Sets torch's CPU threads for the network; 0: the count the network's last load chose
        (eval.uci_threads.default_threads; torch's default before the first).

        torch keeps the count per thread once a thread has used it, so it is set here (for threads
        to come) and queued on the network thread (after a running search, whose passes keep theirs).
        """
        self.values["Threads"] = threads
        count = threads if threads > 0 else self._auto_threads
        torch.set_num_threads(count)
        self._network_thread.submit(torch.set_num_threads, count)

    def _position(self, args: list[str]) -> None:
        """Sets the position; a refused one leaves none (`go` answers `bestmove 0000` until the next good one),
        so that no move of the position before is played in the one the GUI meant."""
        if not args or args[0] not in ("startpos", "fen"):
            self._refuse_position(f"malformed position (expected startpos or fen ...): {' '.join(args)[:200]}")
            return
        split = args.index("moves") if "moves" in args else len(args)
        fen = STARTING_FEN if args[0] == "startpos" else " ".join(args[1:split])
        try:
            board = Board(fen, ply_limit=None)
        except ChessError as error:
            self._refuse_position(f"position refused: {error}")
            return
        for uci in args[split + 1:]:
            try:
                board.push_uci(uci)
            except ChessError as error:
                self._refuse_position(f"position refused at move {quoted(uci)}: {error}")
                return
        self._board = board
        self._start_fen = fen
        self._refused = None

    def _refuse_position(self, why: str) -> None:
        self.info_string(why)
        self._refused = why

    def _go(self, args: list[str]) -> None:
        self._end_search_before_go()
        go = parse_go(args)
        for text in unsupported(go):
            self.info_string(text)
        board = self._board.copy()
        if self._refused is not None:
            self._answer_without_search(go, board, f"no position to search: {self._refused}")
            return
        if not board.legal_moves():
            self._answer_without_search(go, board, f"no legal moves ({board.termination()})")
            return
        network = self._network_thread.call(self._ensure_network)
        if network is None:
            self._answer_without_search(go, board, "no network could be loaded; see the error above")
            return
        mode = usable_mode(str(self.values["Mode"]), network, self.info_string)
        self._job = self._make_job(go, board)
        if mode == SEARCH:
            self._job.root_moves = self._root_moves(go, board)
        elif go.searchmoves:
            self.info_string(f"go searchmoves is not used in Mode {mode}: answering from every move")
        if mode != SEARCH:  # one predictor's move at once (eval.uci_searchless)
            self._search_done = self._network_thread.submit(answer_searchless, mode, network, self._job, self._out.line,
                                                            self.info_string, bool(self.values["UCI_ShowWDL"]))
        else:
            self._search_done = self._network_thread.submit(self._search_job, self._job, network)

    def _end_search_before_go(self) -> None:
        """Ends the search a `go` arrives during, so that every `go` gets its own `bestmove`, in order: one
        that only `stop` or `ponderhit` would end is stopped, one with a limit runs to it."""
        if self.searching():
            job = self._job
            if job is not None and job.must_wait():
                self.info_string("go during a search that only stop ends: stopped it first (send stop before go)")
            else:
                self.info_string("go during a search: its bestmove first (send go after bestmove)")
                self.wait()
        self.stop_search()  # stops it, or joins a finished thread

    def _answer_without_search(self, go: GoCommand, board: Board, why: str) -> None:
        """Answers `bestmove 0000` for a `go` with nothing to search; after `stop` or `ponderhit` where the
        `go` is infinite or ponder, as UCI asks of every search of those."""
        self.info_string(why)
        # No plan: the time manager's bank is for moves searched.
        job = self._job = SearchJob(board, go, 1, None, None, go.ponder, self._clock(), clock=self._clock)

        def answer() -> None:
            try:
                job.wait_to_answer()
            finally:
                job.answered.set()
                self._out.line("bestmove 0000")

        if job.must_wait():
            self._search_done = self._network_thread.submit(answer)
        else:
            answer()

    def _root_moves(self, go: GoCommand, board: Board) -> tuple[str, ...]:
        """The moves `go searchmoves` limits the root to, those legal here; says what it ignores."""
        if not go.searchmoves:
            return ()
        legal = set(board.legal_moves())
        ignored = [move for move in go.searchmoves if move not in legal]
        if ignored:
            self.info_string(f"go searchmoves: ignored {' '.join(quoted(move) for move in ignored)} (not legal here)")
        kept = tuple(dict.fromkeys(move for move in go.searchmoves if move in legal))
        if not kept:
            self.info_string("go searchmoves: no legal move left; searching every move")
        return kept

    def _make_job(self, go: GoCommand, board: Board) -> SearchJob:
        started = self._clock()
        manager = self._time if self.values["TimeManager"] == "smart" else None
        game_ply = 2 * (board.fullmove_number - 1) + (0 if board.turn else 1)
        plan = plan_search_time(go, board.turn, overhead_ms=float(self.values["Move Overhead"]),
                              moves_to_go=int(self.values["MovesToGo"]), ply=game_ply, manager=manager)
        timed = plan is not None or go.infinite
        nodes = go.nodes if go.nodes is not None else (INFINITE_NODES if timed else int(self.values["Nodes"]))
        deadline = started + plan.budget_ms / 1000.0 if plan is not None and not go.ponder else None
        return SearchJob(board, go, max(1, min(nodes, INFINITE_NODES)), plan, deadline, go.ponder, started,
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

    def _search_for(self, network: Network, job: SearchJob) -> MultiGameSearch:
        """The engine's search (tree kept from the last move), rebuilt if the network or an option the search
        reads changed (eval.uci_params)."""
        params = engine_search_params(self.values, network, job.nodes)
        key = (network, params)
        if self._search is None or self._search_key != key:
            self._search = None  # the old tree's memory goes before the new search takes its own
            self._search = MultiGameSearch(1, params)
            self._batch = network.evaluator.pin(self._search.new_batch())
            self._search_key = key
            self._action_values = asks_action_values(self._search, has_action_values(network),
                                                     f"the network ({network.label})",
                                                     lambda line: self.info_string(f"warning: {line}"))
            self._say_memory(self._search)
        return self._search

    def _say_memory(self, search: MultiGameSearch) -> None:
        """Says the tree's memory limit and about how many nodes fit, when that differs from what was last said."""
        megabytes = int(self.values["Hash"])
        said = (search.tree_memory_limit, search.nodes_that_fit(), megabytes)
        if said != self._memory_said:
            self._memory_said = said
            self.info_string(memory_line(search, megabytes))

    def _search_job(self, job: SearchJob, network: Network) -> None:
        budget = f", budget {job.budget_ms:.0f} ms" if job.budget_ms is not None else ""
        self._log.write(NOTE, f"search starts {1000 * (self._clock() - job.started):.1f} ms after go{budget}")
        best, ponder = "0000", None
        so_far: list[str] = []  # the search's best move after its last finished batch
        try:
            best, ponder = self._searched_move(job, network, so_far)
        except Exception as error:  # report, and still answer with a move
            moves = list(job.root_moves) or job.board.legal_moves()
            best, ponder = (so_far[-1] if so_far else moves[0] if moves else "0000"), None
            answer = "answering with the best move so far" if so_far else "answering with a legal move"
            exhausted = out_of_memory_in(error)
            self.info_string(out_of_memory_line(exhausted, answer) if exhausted is not None else
                             f"search failed: {type(error).__name__}: {error}; {answer}")
            self._search = None  # the tree may be half-updated (or too big): start afresh next time
            job.wait_to_answer()
        finally:
            job.answered.set()
            self._out.line(f"bestmove {best}" + (f" ponder {ponder}" if ponder else ""))

    def _searched_move(self, job: SearchJob, network: Network, so_far: list[str]) -> tuple[str, str | None]:
        """Runs the search of ``job`` and gets its move and ponder move (after `stop` or `ponderhit` where UCI
        asks); ``so_far`` gets the best move after each batch, for an answer if the search fails."""
        search = self._search_for(network, job)
        tables = self._tables  # this search's, whatever a setoption sets meanwhile
        hits_before = tables.hits if tables is not None else 0
        # Where searchmoves limit the root, the tables do not choose among its moves (their choice may be none).
        probe = root_probe(tables, self._python_board(job.board)) if tables is not None and not job.root_moves \
            else None
        # Where the tables rank the root, they choose the move; probing the leaves too would cost a fifth of the
        # search's speed for a tie break (EXPERIMENTS.md, "Syzygy tablebases in the engine").
        leaf_tables = tables if probe is None else None
        # Gumbel's Sequential Halving schedules a budget from an empty root: no reuse there.
        search.set_position(0, job.board, simulations=job.nodes,
                            reuse=search.algorithm == "puct" and not job.root_moves)
        if job.root_moves:
            search.set_root_moves(0, job.root_moves)
        multipv = int(self.values["MultiPV"])
        wdl = bool(self.values["UCI_ShowWDL"])
        draw = network.draw_probability(job.board) if wdl else None
        last_info = [job.started]

        def tbhits() -> int | None:
            return tables.hits - hits_before if tables is not None else None

        said: list[list[str]] = [[]]

        def report() -> None:
            lines = info_lines(search, job, multipv, wdl=wdl, draw=draw, tbhits=tbhits())
            if lines != said[0]:  # the search's last lines, said again when it ends at once after them
                for line in lines:
                    self._out.line(line)
                said[0] = lines

        calls = [0, 0]  # network calls, leaves evaluated
        last_call = [0.0]  # seconds the last network call took
        evaluate = legal_evaluator(network.evaluator.evaluate_legal, self._action_values)
        follower = self._threads_follower(network)

        def evaluate_legal(*arrays: Any) -> tuple[Any, ...]:
            calls[0] += 1
            calls[1] += len(arrays[0])
            if follower is not None and follower.look():  # on this thread, the one whose passes use them
                self._auto_threads = follower.threads
                self.info_string(f"threads: {follower.threads} (Threads 0: {follower.cores} cores less "
                                 f"{follower.busy:.1f} busy elsewhere)")
            started = self._clock()
            result = evaluate(*arrays)
            if leaf_tables is not None:  # the tables' results for the leaves they hold
                result = (result[0], probe_leaves(leaf_tables, arrays[0], arrays[1], result[1]), *result[2:])
            last_call[0] = self._clock() - started
            self._say_fallbacks(network)
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
            with contextlib.suppress(ValueError):  # (a root not expanded yet has no best move)
                so_far[:] = [search.best_move(0)]  # the batch is backed up: the tree is whole here
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
        if search.tree_full(0):  # it could not grow: its answer stands, as at its budget
            self.info_string(tree_full_line(search, job))
        self.last_report = SearchReport(search.simulations(0), self._clock() - job.searching_since,
                                        calls[0], calls[1], budget_ms=job.budget_ms)
        self._log.write(NOTE, f"search ends {1000 * (self._clock() - job.started):.1f} ms after go: "
                              f"{self.last_report.nodes} nodes, {self.last_report.batches} network calls")
        job.wait_to_answer()
        if job.plan is not None and self.values["TimeManager"] == "smart" and job.go.movetime is None:
            self._time.spent(job.plan, self._clock() - job.started)
        return self._answer(search, job, probe, tbhits(), wdl)

    def _threads_follower(self, network: Network) -> ThreadsFollowingLoad | None:
        """Threads 0's count following the load through this search (eval.uci_threads), where the network runs
        on the CPU and its threads spin; None where the count stays as it is."""
        if int(self.values["Threads"]) != 0 or waits_passively() or network.evaluator.device.type != "cpu":
            return None
        return ThreadsFollowingLoad(machine_cores(), self._auto_threads)

    def _say_fallbacks(self, network: Network) -> None:
        """Says each parity fallback of the network's passes not said yet: the network, what differed and the
        pass (and precision) it runs from now on (alphazero.nn.forward.Evaluator: a fast pass that differs from
        float32 eager steps down for good)."""
        fallbacks = network.evaluator.fallbacks
        for line in fallbacks[self._fallbacks_said:]:
            self.info_string(f"warning: {network.label}: parity check failed, precision now "
                             f"{network.evaluator.precision}: {line}")
        self._fallbacks_said = len(fallbacks)

    def _answer(self, search: MultiGameSearch, job: SearchJob, probe: RootProbe | None, tbhits: int | None,
                wdl: bool) -> tuple[str, str | None]:
        """The search's move and ponder move; where the tables ranked the root, the search's most visited move
        among those they keep, said in one more info line."""
        best = search.best_move(0)
        if probe is not None:
            best = chosen_move(search, probe)
            self._out.line(tablebase_info_line(search, job, best, probe, tbhits or 0, wdl=wdl))
        line = search.principal_variation(0, 2, first=best)
        return best, (line[1] if len(line) == 2 and line[0] == best else None)

    def _python_board(self, board: Board) -> chess.Board:
        """The game on ``board`` as a python-chess board, its moves played from the game's first position (the
        tables' ranking reads its history for repetitions)."""
        played = chess.Board(self._start_fen)
        for uci in board.move_stack:
            played.push_uci(uci)
        return played

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

    def _choose_threads(self) -> str:
        """Sets torch's threads for the load and the passes (on the network thread, where it runs this); says
        how many and why. Threads 0 chooses by the wait policy and the load (eval.uci_threads)."""
        given = int(self.values["Threads"])
        passive = waits_passively()
        if given == 0:
            cores = machine_cores()
            busy = self._busy.busy(own_threads=0)
            self._auto_threads = default_threads(cores, busy, passive=passive)
            why = ("Threads 0: every core, its threads waiting passively" if passive else
                   f"Threads 0: {cores} cores less {busy:.1f} busy elsewhere, following the load")
        else:
            why = "Threads " + str(given)
        count = given or self._auto_threads
        torch.set_num_threads(count)
        self._busy.start()  # the next load measures from here
        return f"{count} thread{'s' if count != 1 else ''}: {why}"

    def _ensure_network(self) -> Network | None:
        """Loads the network when the options changed (or at first use); reports errors as info strings."""
        key = (self._source(), str(self.values["Device"]), str(self.values["Precision"]))
        if self._network is not None and self._loaded_key == key:
            return self._network
        try:
            self._check_source()
            threads = self._choose_threads()
            # The precision is said in the info string below, not on stderr (a client logs stderr as warnings);
            # an `auto` choice is measured once per machine and kept (alphazero.nn.kept_precision).
            network = load_network(key[0], device=key[1], warn=self._err, precision=key[2], forward=self._forward,
                                   max_batch=int(self.values["LeavesPerBatch"]), say_precision=False,
                                   keep=KeptPrecisions())
            network.evaluator.warm_up()  # a CUDA graph per batch size up to LeavesPerBatch, now and not mid-search
        except UserError as error:
            self.info_string(f"error: {error}")
            return self._network
        except OSError as error:  # the file changed under us since the options were checked
            self.info_string(f"error: cannot load the network: {error.strerror or error}")
            return self._network
        except Exception as error:  # a failed allocation is said with what to lower; anything else is a bug
            exhausted = out_of_memory_in(error)
            if exhausted is None:
                raise
            self.info_string(f"error: cannot load the network: {out_of_memory_message(exhausted, 'uci')}")
            return self._network
        if network.fresh:
            self.info_string(f"warning: {self._run} has no checkpoint; playing with freshly initialised weights")
        elif (note := resolve_source(key[0]).note) is not None:
            self.info_string(f"note: {note}")
        network.evaluator.fold_batch_norm()  # the engine's weights never change: fold once, not every pass
        self._network, self._loaded_key, self._fallbacks_said = network, key, 0
        device = network.evaluator.device
        said = f" ({threads})" if device.type == "cpu" else ""
        self.info_string(f"network: {network.label} on {device}{said}, {network.evaluator.precision_text()}")
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
    options: Mapping[str, str] | None = None,
) -> None:
    """Runs the UCI engine over stdin/stdout (or the given streams) until `quit` or end of input.

    `run_dir` (default runs/default) gives the latest checkpoint; `weights`,
    when given, a model file or checkpoint instead. `nodes` and `threads`
    preset the Nodes and Threads options, `options` any option (UCI name ->
    text, as setoption's value); `fresh` allows a run without checkpoints
    (freshly initialised weights).

    Raises UserError if the weights file or run is unusable, or an option's value is bad (before any output).
    """
    UciEngine(run_dir, weights, device, stdin=stdin, stdout=stdout, stderr=stderr, nodes=nodes,
              threads=threads, fresh=fresh, options=options).run()
