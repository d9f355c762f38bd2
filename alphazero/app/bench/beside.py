"""`alphazero bench beside`: the UCI engine's nodes/s at its defaults alone and beside busy processes.

Each engine is a checkout's `python -m alphazero uci` (this one by default;
`--engine before=/tmp/before` adds another, e.g. a worktree of an older
commit with its extension built), run as a GUI runs it: a subprocess driven
by python-chess, started afresh for each measurement (so that what it
chooses when it loads, its threads and precision, sees the load of the
moment), made ready with `isready`, then asked `go movetime` on a few
positions. Its nodes/s is the nodes of those searches over their time, as
the engine reports them. The engines take turns within each round (the
order alternating round by round), so a change in the machine's other work
slows both; each point is the median over the rounds. Beside N busy
processes means N `python -c "while True: pass"` at the engine's own
priority, started before the engines of that point; the load average and
the cores busy besides (/proc/stat, niced work left out) are printed with
each point, since another user's work skews every figure.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from alphazero.app.bench import int_list
from alphazero.arguments import positive_int
from alphazero.errors import UserError

if TYPE_CHECKING:
    import chess
    import chess.engine

    from eval.agent import Choice
    from eval.engine_agents import UciAgent
    from eval.match import Clock

POSITIONS = (
    "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1",
    "r1bq1rk1/pp2bppp/2n1pn2/3p4/2PP4/2N1PN2/PP3PPP/R2QKB1R w KQ - 0 9",
    "8/5pk1/6p1/3R4/1r5P/6P1/5PK1/8 b - - 0 40",
    "r3k2r/pp1n1ppp/2p1pn2/q7/3P4/2NBPN2/PP3PPP/R2QK2R w KQkq - 0 10",
)
"""What each measurement searches: an opening, two middlegames and a rook endgame."""

BUSY_PROGRAM = "while True: pass"
AMBIENT_WINDOW_S = 1.0
"""Seconds over which the machine's other work is measured before each point."""
ROOT = Path(__file__).resolve().parents[3]


@dataclass
class Point:
    """One engine's measurements beside one number of busy processes."""

    rates: list[float] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0


@dataclass(frozen=True)
class EngineSpec:
    """An engine measured: its label, the checkout whose `python -m alphazero uci` runs, its own options and the
    environment variables its process starts with (``env:NAME=VALUE``, e.g. OpenMP's, read before any option)."""

    label: str
    folder: Path
    options: tuple[tuple[str, str], ...] = ()
    environment: tuple[tuple[str, str], ...] = ()


def _engine_spec(text: str) -> EngineSpec:
    """Parses --engine LABEL=DIR[,NAME=VALUE...][,env:NAME=VALUE...] (argparse type).

    >>> spec = _engine_spec(f"one={ROOT},Threads=1,env:GOMP_SPINCOUNT=10000")
    >>> spec.options, spec.environment
    ((('Threads', '1'),), (('GOMP_SPINCOUNT', '10000'),))
    """
    label, sep, rest = text.partition("=")
    folder, *pairs = rest.split(",")
    path = Path(folder).expanduser()
    named = [tuple(pair.split("=", 1)) for pair in pairs if "=" in pair]
    options = tuple(pair for pair in named if not pair[0].startswith("env:"))
    environment = tuple((name.removeprefix("env:"), value) for name, value in named if name.startswith("env:"))
    if not sep or not label or len(named) != len(pairs) or not (path / "alphazero" / "__main__.py").is_file():
        raise argparse.ArgumentTypeError(f"--engine takes LABEL=DIR[,NAME=VALUE...][,env:NAME=VALUE...], DIR a "
                                         f"checkout of this project, got {text!r}")
    return EngineSpec(label, path, options, environment)  # type: ignore[arg-type]  # (pairs of two, checked above)


def _clock(text: str) -> Clock:
    """Reads --match's BASE+INC (an argparse type): a bad clock is refused before the minutes of measuring."""
    from eval.match import Clock

    try:
        return Clock.parse(text)
    except UserError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--engine", type=_engine_spec, action="append", default=None, metavar="LABEL=DIR",
                        help="an engine to measure: a label, a checkout of this project, options of its own and "
                             "environment variables its process starts with, e.g. before=/tmp/before, "
                             "one=.,Threads=1 or spin=.,env:GOMP_SPINCOUNT=10000 (repeatable; default: this "
                             "checkout, labelled 'this')")
    parser.add_argument("--busy", type=functools.partial(int_list, what="busy process counts"), default=[1, 2],
                        metavar="N,...", help="numbers of busy processes beside the engine, besides none "
                                              "(default 1,2)")
    parser.add_argument("--movetime", type=positive_int, default=1000, metavar="MS",
                        help="milliseconds each position is searched (default 1000)")
    parser.add_argument("--rounds", type=positive_int, default=3,
                        help="measurements of each engine at each point (default 3)")
    parser.add_argument("--weights", default="builtin", help="the network (default: builtin)")
    parser.add_argument("--match", type=_clock, default=None, metavar="BASE+INC",
                        help="then play the first engine on this clock (e.g. 10+0.1) as `alphazero match` does: "
                             "one engine process playing both sides, then two, one a side; each engine's median "
                             "nodes/s over its moves and the precision each says")
    parser.add_argument("--match-games", type=positive_int, default=2, metavar="N", help="games of each (default 2)")
    parser.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                        help="an engine option set on every engine (repeatable), e.g. Threads=1")


def _search_rate(engine: object, movetime_ms: int) -> float:
    import chess
    import chess.engine

    assert isinstance(engine, chess.engine.SimpleEngine)
    nodes = seconds = 0.0
    for fen in POSITIONS:
        result = engine.play(chess.Board(fen), chess.engine.Limit(time=movetime_ms / 1000.0), game=object(),
                             info=chess.engine.INFO_ALL)
        nodes += result.info.get("nodes", 0)
        seconds += result.info.get("time", 0.0)
    return nodes / seconds if seconds > 0 else 0.0


def _measure(spec: EngineSpec, weights: str, options: dict[str, str], movetime_ms: int) -> tuple[float, list[str]]:
    """Starts the checkout's engine, makes it ready and measures its nodes/s; returns it with its notes."""
    import chess.engine

    from eval.engine_agents import ready

    env = {**os.environ, **dict(spec.environment), "PYTHONPATH": str(spec.folder)}
    command = [sys.executable, "-m", "alphazero", "uci", "--weights", weights, "--device", "cpu"]
    engine = chess.engine.SimpleEngine.popen_uci(command, cwd=spec.folder, env=env, timeout=300)
    try:
        engine.configure(options)
        notes = ready(engine)
        return _search_rate(engine, movetime_ms), notes
    finally:
        engine.quit()


def _recorded(agent: UciAgent, rates: list[float]) -> None:
    """Makes ``agent``'s clocked moves note the engine's nodes/s (its last info's nps) in ``rates``."""
    choose = agent.choose_on_clock

    def recording(board: chess.Board, clock: chess.engine.Limit) -> Choice:
        choice = choose(board, clock)
        if choice.info.get("nps"):
            rates.append(float(choice.info["nps"]))
        return choice

    setattr(agent, "choose_on_clock", recording)  # noqa: B010  # (an instance's own, over the class's method)


def _clock_point(spec: EngineSpec, weights: str, options: dict[str, str], clock: Clock, games: int,
                 engines: int) -> list[tuple[float, str]]:
    """Plays ``games`` on the clock between ``engines`` (1: one process both sides, 2: one a side) of ``spec``;
    returns each engine's median nodes/s over its moves, with the precision part of its network note."""
    from eval.engine_agents import UciAgent
    from eval.match import play_match

    flags = ["--weights", weights, "--device", "cpu"]
    agents: list[UciAgent] = []
    try:
        for _ in range(engines):
            agents.append(UciAgent(flags=flags, options={**options, **dict(spec.options)}, name=f"uci{len(agents)}",
                                   environment=dict(spec.environment)))
        rates: list[list[float]] = [[] for _ in agents]
        for agent, noted in zip(agents, rates):
            _recorded(agent, noted)
        play_match(agents[0], agents[-1], games=games, concurrency=1, clock=clock, progress=False)
        return [(statistics.median(noted) if noted else 0.0, _precision_of(agent.notes))
                for agent, noted in zip(agents, rates)]
    finally:
        for agent in agents:
            agent.close()


def _precision_of(notes: list[str]) -> str:
    line = next((note for note in notes if note.startswith("network:")), "")
    return line.split("), ", 1)[1] if "), " in line else line


def _busy_processes(count: int) -> list[subprocess.Popen[bytes]]:
    return [subprocess.Popen([sys.executable, "-c", BUSY_PROGRAM]) for _ in range(count)]


def _ambient_load(meter: object, seconds: float = AMBIENT_WINDOW_S) -> float:
    """The cores other work kept busy over a window of ``seconds`` (/proc/stat, niced work left out)."""
    from eval.uci_threads import BusyMeter

    assert isinstance(meter, BusyMeter)
    meter.start()
    time.sleep(seconds)  # a measuring window: what runs meanwhile is what is measured
    return meter.busy()


def run(args: argparse.Namespace) -> None:
    from eval.uci_threads import BusyMeter, machine_cores

    lone = 0.0
    options = dict(text.split("=", 1) for text in args.option if "=" in text)
    if len(options) != len(args.option):
        raise UserError(f"--option takes NAME=VALUE, got {args.option!r}")
    engines: list[EngineSpec] = args.engine or [EngineSpec("this", ROOT)]
    levels = [0, *[n for n in args.busy if n > 0]]
    print(f"{machine_cores()} cores; {len(POSITIONS)} positions at go movetime {args.movetime}, "
          f"{args.rounds} rounds, engines fresh each time; median nodes/s")
    results: dict[tuple[str, int], Point] = {}
    for busy in levels:
        ambient = _ambient_load(BusyMeter())
        processes = _busy_processes(busy)
        try:
            for round_ in range(args.rounds):
                order = engines if round_ % 2 == 0 else engines[::-1]
                for spec in order:
                    rate, notes = _measure(spec, args.weights, {**options, **dict(spec.options)},
                                           args.movetime)
                    point = results.setdefault((spec.label, busy), Point())
                    point.rates.append(rate)
                    point.notes = notes
        finally:
            for process in processes:
                process.kill()
                process.wait()
        load = os.getloadavg()[0]
        for label in (spec.label for spec in engines):
            point = results[(label, busy)]
            alone = results[(label, 0)].median
            share = f" ({point.median / alone:.0%} of alone)" if busy and alone > 0 else ""
            rates = ", ".join(f"{rate:.0f}" for rate in point.rates)
            print(f"beside {busy} busy  {label:>8}: {point.median:8.0f} nodes/s{share}  [{rates}]  "
                  f"load avg {load:.1f}; {ambient:.1f} cores busy before the point", flush=True)
    if args.match is not None:
        for count in (1, 2):
            figures = _clock_point(engines[0], args.weights, options, args.match, args.match_games, count)
            lone = figures[0][0] if count == 1 else lone
            for index, (rate, precision) in enumerate(figures):
                share = f" ({rate / lone:.0%} of the lone engine's)" if count == 2 and lone > 0 else ""
                print(f"match {args.match}, {count} engine{'s' if count > 1 else ''}: engine {index + 1} "
                      f"{rate:.0f} nodes/s{share}, {precision}; load avg {os.getloadavg()[0]:.1f}", flush=True)
    for label in (spec.label for spec in engines):
        network = [note for note in results[(label, levels[-1])].notes if note.startswith("network:")]
        print(f"{label}: {network[0] if network else '(no network note)'}")
