"""The UCI engine's search in flight: the job one `go` starts, what the search reports, and the thread
that runs it.

A SearchJob holds a search's position, limits and the events that end it
(`stop`, `ponderhit`); info_lines formats the `info` lines sent while it runs
and with `bestmove`; SearchReport is what a finished search did (for
benchmarks and tests); NetworkThread is the one thread that runs every
network call, the searches included. The search itself is eval.uci's
(UciEngine), which reads the engine's options.

Scores: a proven mate is `score mate N` (N moves, negative when we are
mated; mate_in_moves); other scores are the search's Q of the move, a value
in [-1, 1] for the side to move, converted to centipawns by
eval.scores.value_to_centipawns, Leela's formula
cp = 111.714640912 * tan(1.5620688421 * Q): Q 0.5 is about +111 cp, Q 0.9
about +671 cp, Q +-1 is +-12 800 cp. `wdl W D L` is in per mille
(eval.scores.value_to_wdl: W - L is the move's Q; D is a 'wdl' network's draw
probability at the root, cut to what Q leaves room for, or 0 for a scalar
value head, as lc0 does; always summing to 1000; proven results are
1000/0/0, 0/1000/0 or 0/0/1000).
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from eval.scores import value_to_centipawns, value_to_wdl
from eval.timeman import MovePlan
from eval.uci_go import GoCommand
from mcts_ext import Board
from mcts_ext.search import MultiGameSearch

_Result = TypeVar("_Result")


def mate_in_moves(result: str, plies: int) -> int:
    """Converts a proven result of the position AFTER a move (its mover's opponent's view) to UCI's
    `score mate N` for the player making the move: N moves to mate, negative when mated.

    >>> mate_in_moves("loss", 0), mate_in_moves("loss", 2), mate_in_moves("win", 1), mate_in_moves("win", 3)
    (1, 2, -1, -2)
    """
    if result == "loss":  # the opponent is lost: we mate in plies + 1 of ours and theirs
        return (plies + 2) // 2
    return -((plies + 1) // 2)


@dataclass
class SearchJob:
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
    root_moves: tuple[str, ...] = ()  # `go searchmoves`' legal moves: the only ones the root tries (empty: all)

    def __post_init__(self) -> None:
        if self.searching_since < 0:
            self.searching_since = self.started

    @property
    def budget_ms(self) -> float | None:
        return self.plan.budget_ms if self.plan is not None else None

    def must_wait(self) -> bool:
        """Checks whether a finished search must still withhold bestmove (infinite, or pondering)."""
        return not self.stop.is_set() and (self.go.infinite or self.pondering)

    def wait_to_answer(self) -> None:
        """Waits until `bestmove` may be sent: UCI sends none before `stop` (infinite) or `ponderhit` (ponder)."""
        while self.must_wait():
            self.wake.wait()
            self.wake.clear()


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


@dataclass(frozen=True)
class ScoredLine:
    """One root move's report: its line, and its score as centipawns or a mate."""

    pv: list[str]
    cp: int | None
    mate: int | None
    wdl: tuple[int, int, int]

    def score(self) -> str:
        return f"score mate {self.mate}" if self.mate is not None else f"score cp {self.cp}"

    def scored(self, cp: int, wdl: tuple[int, int, int]) -> ScoredLine:
        """The same line with another score (the tablebases', eval.uci_syzygy)."""
        return dataclasses.replace(self, cp=cp, mate=None, wdl=wdl)


def line_for(search: MultiGameSearch, move: str, q: float | None, draw: float | None) -> ScoredLine:
    pv = search.principal_variation(0, first=move)
    proof = search.proof(0, [move])
    if proof is not None and proof[0] != "draw":
        mate = mate_in_moves(*proof)
        return ScoredLine(pv, None, mate, (1000, 0, 0) if mate > 0 else (0, 0, 1000))
    if proof is not None:
        return ScoredLine(pv, 0, None, (0, 1000, 0))
    value = q if q is not None else search.root_value(0)
    return ScoredLine(pv, round(value_to_centipawns(value)), None, value_to_wdl(value, draw))


def info_lines(search: MultiGameSearch, job: SearchJob, multipv: int, *, wdl: bool,
               draw: float | None, tbhits: int | None = None) -> list[str]:
    """Formats one `info depth .. multipv k score .. [wdl ..] nodes .. nps .. [tbhits ..] time .. pv ..` per line.

    nodes: the simulations of this search (a kept subtree's older visits are
    not counted); nps: those nodes over the seconds the search has run
    (pondering included); tbhits (given with tablebases): their probes since
    `go`; time: milliseconds since `go`, or since ponderhit.
    """
    now = job.clock()
    elapsed = max(now - job.started, 1e-6)
    nodes = search.simulations(0)
    nps = int(nodes / max(now - job.searching_since, 1e-6))
    q_of = {uci: q for uci, _, _, q, _ in search.root_stats(0)}
    lines = []
    for k, move in enumerate(search.ranked_moves(0)[:multipv], start=1):
        line = line_for(search, move, q_of[move], draw)
        shown_wdl = f" wdl {line.wdl[0]} {line.wdl[1]} {line.wdl[2]}" if wdl else ""
        hits = f" tbhits {tbhits}" if tbhits is not None else ""
        lines.append(f"info depth {len(line.pv)} seldepth {len(line.pv)} multipv {k} {line.score()}{shown_wdl} "
                     f"nodes {nodes} nps {nps}{hits} time {int(elapsed * 1000)} pv {' '.join(line.pv)}")
    return lines


class NetworkThread:
    """One daemon thread that runs, in order, every call of the engine that touches torch: loading the
    network, setting its threads, and the searches.

    Why one, and why not the main thread: torch's CPU threads come from OpenMP (libgomp), which keeps a
    pool of worker threads for each thread that ever ran a parallel operation, for that thread's life.
    Once the process holds more pool threads than cores, libgomp stops spinning between operations and
    every operation waits to wake its workers: with the network loaded on the main thread and searched on
    a fresh thread per `go`, the passes ran at a fraction of their speed on a 2-core machine
    (EXPERIMENTS.md, "The UCI engine's batches at equal time"). Kept to one thread, the engine
    keeps one pool.
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

