"""Agents that are UCI engines in a subprocess, driven through python-chess: Stockfish, Fairy-Stockfish and this
project's engine.

StockfishAgent plays Stockfish at full strength or weakened (UCI_Elo or a
skill level); FairyStockfishAgent plays Fairy-Stockfish, whose skill levels
go below Stockfish's (down to -20), for the ladder's weakest rungs; UciAgent
plays `alphazero uci` as a GUI drives it. All can play on a game's clock
(Agent.choose_on_clock), and all can run several engine processes that
search the boards of one `choose` in parallel.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import chess
import chess.engine

from alphazero.chess.stockfish import require_fairy_stockfish, require_stockfish
from alphazero.errors import UserError
from eval.agent import Agent, Choice
from eval.scores import score_to_value

_T = TypeVar("_T")

FULL_STRENGTH_NODES = 100_000
"""Stockfish's default limit at full strength: about 0.1 s a move on one core."""

FALLBACK_MOVETIME_MS = 1000
"""Stockfish's default limit in Elo mode for versions whose Elo formula we do not know."""


# --- engines in subprocesses ------------------------------------------------------


class _EngineProcesses(Agent):
    """An agent of UCI engines in subprocesses: the boards of one `choose` spread over them, one thread each.

    Engine k searches boards k, k + n, k + 2n, ... one after another, so
    that each engine process is driven by one thread at a time.
    """

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self._engines: list[chess.engine.SimpleEngine] = []
        self._pool: ThreadPoolExecutor | None = None

    def _spread(self, boards: Sequence[chess.Board],
                search: Callable[[chess.engine.SimpleEngine, chess.Board], Choice]) -> list[Choice]:
        """Searches the boards over the engines, in parallel where there are several; choices in board order."""
        if not self._engines:
            raise RuntimeError(f"{self.name} is closed")
        n = min(len(self._engines), len(boards))
        if n <= 1:
            return [search(self._engines[0], board) for board in boards]
        parts = list(self._threads().map(lambda k: [search(self._engines[k], b) for b in boards[k::n]], range(n)))
        return [parts[i % n][i // n] for i in range(len(boards))]

    def _on_each(self, call: Callable[[chess.engine.SimpleEngine], _T]) -> list[_T]:
        """Calls `call` on every engine, in parallel where there are several; results in engine order."""
        if len(self._engines) <= 1:
            return [call(engine) for engine in self._engines]
        return list(self._threads().map(call, self._engines))

    def _threads(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self._engines), thread_name_prefix=self._kind)
        return self._pool

    _kind = "engine"
    """The player kind's name (threads' names; Stockfish's default agent name)."""

    def close(self) -> None:
        """Quits every engine process (killing one that does not answer)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        engines, self._engines = self._engines, []
        for engine in engines:
            try:
                engine.quit()
            except (chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError):
                engine.close()


# --- Stockfish -------------------------------------------------------------------


def _sf15_pick_depth(elo: int) -> int:
    """Returns the depth at which Stockfish 12..15.1 fixes its move at this UCI_Elo.

    With UCI_LimitStrength, those versions map Elo to a fractional skill level,
    level = clamp(((elo - 1346.6) / 143.4) ^ (1 / 0.806), 0, 20), search with
    MultiPV 4, and at depth 1 + int(level) pick a weakened move that later
    iterations never change (search.cpp, `Skill::time_to_pick`). Searching
    to that depth makes the same kind of pick as the calibrated engine (Elo
    calibrated at 60 s + 0.6 s) without spending the rest of that time.
    """
    e = max(elo - 1346.6, 0.0) / 143.4
    level = min(e ** (1 / 0.806), 20.0)
    return 1 + int(level)


def _knows_elo_formula(engine_name: str) -> bool:
    """Checks that the engine is a Stockfish release whose Elo formula _sf15_pick_depth copies."""
    match = re.match(r"Stockfish (\d+)", engine_name)
    return match is not None and 12 <= int(match.group(1)) <= 15


def _check_range(engine: chess.engine.SimpleEngine, option: str, value: int, flag: str,
                 label: str = "Stockfish") -> None:
    """Raises UserError if the engine lacks `option` or `value` is outside its range."""
    if option not in engine.options:
        raise UserError(f"this {label} ({engine.id.get('name', '?')}) has no {option!r} option, needed for {flag}")
    spec = engine.options[option]
    if spec.min is not None and spec.max is not None and not spec.min <= value <= spec.max:
        raise UserError(
            f"{flag}={value} is out of range: {engine.id.get('name', label)} accepts "
            f"{option} from {spec.min} to {spec.max}"
        )


@dataclass(frozen=True)
class StockfishStrength:
    """How strong Stockfish plays: at most one of `elo` (UCI_LimitStrength) and `skill` (0..20)."""

    elo: int | None = None
    skill: int | None = None

    def options(self) -> dict[str, int | bool]:
        """Returns the UCI options that set this strength."""
        if self.elo is not None:
            return {"UCI_LimitStrength": True, "UCI_Elo": self.elo}
        if self.skill is not None:
            return {"Skill Level": self.skill}
        return {}

    def default_limit(self, engine_name: str) -> chess.engine.Limit:
        """Returns the search limit used when the caller sets none (see StockfishAgent)."""
        if self.elo is not None:
            if _knows_elo_formula(engine_name):
                return chess.engine.Limit(depth=_sf15_pick_depth(self.elo))
            return chess.engine.Limit(time=FALLBACK_MOVETIME_MS / 1000.0)
        if self.skill is not None and self.skill < 20:
            # The depth where it picks its move: 1 + level (search.cpp, Skill::time_to_pick); Fairy-Stockfish's
            # levels below 0 pick at depth 1 (1 + max(level, 0)), weaker by a larger weakness term.
            return chess.engine.Limit(depth=1 + max(self.skill, 0))
        return chess.engine.Limit(nodes=FULL_STRENGTH_NODES)


class StockfishAgent(_EngineProcesses):
    """Stockfish through python-chess, optionally weakened; one engine process per `processes`.

    Strength: `elo` sets UCI_LimitStrength and UCI_Elo (Debian's 15.1 accepts
    1350..2850); `skill` sets Skill Level (0..20); neither is full strength.
    Search limit: any of `depth`, `nodes`, `movetime` (ms), whichever comes
    first. With none given, the defaults are:
    - elo: the depth at which Stockfish 12..15.1 fixes its weakened move
      (1 + int(level), 1 for Elo 1350 up to 19 for 2850; see _sf15_pick_depth),
      where it makes the same weakened pick as at its calibration time control.
      Unknown versions: movetime FALLBACK_MOVETIME_MS;
    - skill below 20: depth 1 + skill, for the same reason;
    - full strength: FULL_STRENGTH_NODES nodes (about 0.1 s on one core,
      and the same on every machine).
    Weakened play is random (Stockfish seeds it from the clock).

    `choose` searches the boards one after another on each engine; with
    processes > 1 the boards are spread over that many engines, searched in
    parallel. Threads and Hash are per engine (default 1 and 16 MB).
    Choice.value is the engine's score for the side to move, through
    eval.scores (mates are +-1). It and info["pv"] describe the engine's best
    line, which a weakened engine may not play.

    Raises UserError if Stockfish is missing, elo and skill are both given, a
    number is out of range (the Elo range is quoted from the engine), or the
    engine cannot be started.
    """

    engine_label = "Stockfish"
    """The engine's name in messages."""

    def __init__(
        self,
        *,
        elo: int | None = None,
        skill: int | None = None,
        depth: int | None = None,
        nodes: int | None = None,
        movetime: int | None = None,
        threads: int = 1,
        hash_mb: int = 16,
        processes: int = 1,
        path: str | None = None,
        name: str | None = None,
    ) -> None:
        if elo is not None and skill is not None:
            raise UserError("give Stockfish an elo or a skill level, not both")
        for flag, value in (("depth", depth), ("nodes", nodes), ("movetime", movetime)):
            if value is not None and value < 1:
                raise UserError(f"{flag} must be at least 1, got {value}")
        for flag, value in (("threads", threads), ("hash", hash_mb), ("processes", processes)):
            if value < 1:
                raise UserError(f"{flag} must be at least 1, got {value}")
        super().__init__(name or _stockfish_name(elo, skill, depth, nodes, movetime, self._kind))
        self.strength = StockfishStrength(elo, skill)
        self._game: object = None
        try:
            self._start(path or self._require_binary(), processes, threads, hash_mb)
            explicit = depth is not None or nodes is not None or movetime is not None
            self.limit = (
                chess.engine.Limit(depth=depth, nodes=nodes, time=None if movetime is None else movetime / 1000.0)
                if explicit
                else self.strength.default_limit(self._engines[0].id.get("name", ""))
            )
        except BaseException:
            self.close()
            raise

    _kind = "stockfish"
    """The player kind's name, which starts the agent's default name."""

    @staticmethod
    def _require_binary() -> str:
        return require_stockfish()

    def _start(self, path: str, processes: int, threads: int, hash_mb: int) -> None:
        """Starts the engines, checks the strength against the first one's ranges, configures all."""
        options: dict[str, int | bool] = {"Threads": threads, "Hash": hash_mb, **self.strength.options()}
        for _ in range(processes):
            try:
                engine = chess.engine.SimpleEngine.popen_uci(path)
            except (OSError, chess.engine.EngineError) as exc:
                raise UserError(f"cannot start {self.engine_label} at {path!r}: {exc}") from None
            self._engines.append(engine)
            if len(self._engines) == 1:
                self._check_strength(engine)
            engine.configure(options)

    def _check_strength(self, engine: chess.engine.SimpleEngine) -> None:
        if self.strength.elo is not None:
            _check_range(engine, "UCI_Elo", self.strength.elo, "elo", self.engine_label)
        if self.strength.skill is not None:
            _check_range(engine, "Skill Level", self.strength.skill, "skill", self.engine_label)

    def new_game(self) -> None:
        """Makes the next search send `ucinewgame` (clears Stockfish's hash)."""
        self._game = object()

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches each board with the configured limit; in parallel over the engines."""
        return self._choose(boards, fresh=False)

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches each board as a new game: `ucinewgame` before each search clears the engine's hash and
        move-ordering histories, whichever engine searched what before."""
        return self._choose(boards, fresh=True)

    def _choose(self, boards: Sequence[chess.Board], *, fresh: bool) -> list[Choice]:
        def search(engine: chess.engine.SimpleEngine, board: chess.Board) -> Choice:
            # python-chess sends ucinewgame when `game` differs from the engine's last one.
            return _play(engine, board, self.limit, object() if fresh else self._game, self.name)

        return self._spread(boards, search)

    plays_on_clock = True

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        """Searches the board on the game's clock (Stockfish manages its time; its strength settings hold)."""
        return self._spread([board], lambda engine, board: _play(engine, board, clock, self._game, self.name))[0]


def _play(engine: chess.engine.SimpleEngine, board: chess.Board, limit: chess.engine.Limit, game: object,
          name: str) -> Choice:
    """Plays one search of a UCI engine; the Choice's value is its score for the side to move (eval.scores)."""
    result = engine.play(board, limit, game=game, info=chess.engine.INFO_ALL)
    if result.move is None:
        raise RuntimeError(f"{name} returned no move in {board.fen()}")
    score = result.info.get("score")
    info: dict[str, Any] = {
        key: result.info[key] for key in ("depth", "seldepth", "nodes", "nps", "time") if key in result.info
    }
    info["pv"] = [move.uci() for move in result.info.get("pv", [])]
    if score is not None:
        info["score"] = str(score.relative)
    return Choice(result.move, None if score is None else score_to_value(score.relative), info)


class FairyStockfishAgent(StockfishAgent):
    """Fairy-Stockfish (Debian's `fairy-stockfish`, 11.1) weakened by its Skill Level, -20..20.

    Its levels below 0 are weaker than Stockfish's weakest (skill 0): the move
    is still picked at depth 1 among the MultiPV 4 best, with a weakness term
    of 120 - 2 * level that grows as the level falls (Fairy-Stockfish's
    search.cpp, Skill::pick_best). The default limit is the depth of that
    pick, 1 + max(level, 0), so the games do not depend on the machine's
    speed or load. Arguments and errors are StockfishAgent's, the missing
    engine's message saying how to install Fairy-Stockfish.
    """

    engine_label = "Fairy-Stockfish"
    _kind = "fairy"

    @staticmethod
    def _require_binary() -> str:
        return require_fairy_stockfish()


# --- this project's UCI engine ------------------------------------------------------


class UciAgent(_EngineProcesses):
    """This project's UCI engine (`alphazero uci`) in a subprocess, driven through python-chess as a GUI drives it.

    `flags` are the engine's command-line flags (--weights, --run, --device),
    `environment` variables its process starts with besides this one's,
    `options` its UCI options (set once, e.g. {"LeavesPerBatch": 32}), `limit`
    the search of each move in choose() (default: an empty `go`, which
    searches the engine's Nodes option). choose_on_clock() sends the game's
    clock instead (`go wtime btime winc binc`), and the engine manages its
    time. `ucinewgame` goes out with the first search of each game, so the
    engine keeps its tree between the moves of a game (when the match plays
    one game at a time). Choice.value is the engine's score for the side to
    move, info its nodes, nps, depth, time and line.

    With `processes` > 1 that many engines run, each with the same flags and
    options, and the boards of one choose() are spread over them and
    searched in parallel (as StockfishAgent's processes); choose_on_clock()
    plays on the first.

    Each engine loads its network at an `isready` sent when the agent is
    made (ready(); the engines in parallel), so that no game's clock pays
    for the load; the first engine's notes are kept in ``notes``.

    Raises UserError if `processes` is below 1, or an engine cannot be started, refuses an option or does not get
    ready.
    """

    _kind = "uci"

    def __init__(self, *, flags: Sequence[str] = (), options: Mapping[str, int | bool | str] | None = None,
                 limit: chess.engine.Limit | None = None, name: str = "uci",
                 environment: Mapping[str, str] | None = None, processes: int = 1) -> None:
        super().__init__(name)
        if processes < 1:
            raise UserError(f"processes must be at least 1, got {processes}")
        self.limit = limit or chess.engine.Limit()
        self._game: object = None
        command = [sys.executable, "-m", "alphazero", "uci", *flags]
        env = {**os.environ, **environment} if environment else None  # None: this process's own
        try:
            for _ in range(processes):
                self._engines.append(self._start(command, env, dict(options or {})))
            # Loaded now, before any clock runs (python-chess would send this isready inside the first move).
            notes = self._on_each(self._ready)
        except BaseException:
            self.close()
            raise
        self.notes: list[str] = notes[0]
        """The engine's `info string`s at its first `isready`: the network it loaded, its threads, precision."""

    def _start(self, command: list[str], env: dict[str, str] | None,
               options: dict[str, int | bool | str]) -> chess.engine.SimpleEngine:
        """Starts one engine and sets its options."""
        try:
            engine = chess.engine.SimpleEngine.popen_uci(command, timeout=120, env=env)
        except (OSError, chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError) as exc:
            raise UserError(f"cannot start the UCI engine ({' '.join(command)}): {exc}") from None
        try:
            engine.configure(options)
        except (chess.engine.EngineError, ValueError) as exc:
            engine.close()
            raise UserError(f"the UCI engine refused an option of {self.name!r}: {exc}") from None
        return engine

    def _ready(self, engine: chess.engine.SimpleEngine) -> list[str]:
        try:
            return ready(engine)
        except (chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError) as exc:
            raise UserError(f"the UCI engine {self.name!r} did not get ready: {exc}") from None

    def new_game(self) -> None:
        """Makes the next search send `ucinewgame`."""
        self._game = object()

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches the boards with the agent's limit: one after another on each engine, the engines in parallel."""
        return self._spread(boards, lambda engine, board: _play(engine, board, self.limit, self._game, self.name))

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches each board as a new game: `ucinewgame` before each search, so the engine starts from an
        empty tree and reuses nothing of the board searched before."""
        return self._spread(boards, lambda engine, board: _play(engine, board, self.limit, object(), self.name))

    plays_on_clock = True

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        """Searches the board on the game's clock (the engine's time management decides the move's time)."""
        return self._spread([board], lambda engine, board: _play(engine, board, clock, self._game, self.name))[0]


READY_TIMEOUT_S = 600.0
"""The most seconds an engine's first `isready` may take: it loads the network (and may time its precision)."""


class _ReadyCommand(chess.engine.BaseCommand[list[str]]):
    """python-chess's ping (`isready` ... `readyok`) that keeps the engine's `info string`s on the way, which
    its own ping logs as unexpected output."""

    def __init__(self, engine: chess.engine.Protocol) -> None:
        super().__init__(engine)
        self.engine = engine
        self.notes: list[str] = []

    def start(self) -> None:
        self.engine.send_line("isready")

    def line_received(self, line: str) -> None:
        if line.strip() == "readyok":
            self.result.set_result(self.notes)
            self.set_finished()
        elif line.startswith("info string "):
            self.notes.append(line[len("info string "):].strip())
        else:
            chess.engine.LOGGER.warning("%s: unexpected engine output before readyok: %r", self.engine, line)


def ready(engine: chess.engine.SimpleEngine, timeout: float = READY_TIMEOUT_S) -> list[str]:
    """Sends `isready` and waits for `readyok`; returns the `info string`s said meanwhile (this project's engine
    loads its network there and says what it runs).

    Raises TimeoutError after ``timeout`` seconds, EngineTerminatedError if the engine dies.
    """
    async def command() -> list[str]:
        return await engine.protocol.communicate(_ReadyCommand)

    future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(command(), timeout), engine.protocol.loop)
    return future.result()


def _stockfish_name(
    elo: int | None, skill: int | None, depth: int | None, nodes: int | None, movetime: int | None,
    kind: str = "stockfish",
) -> str:
    """Returns a spec-like name, e.g. 'stockfish:elo=1500', 'stockfish:skill=5,movetime=100' or 'fairy:skill=-5'."""
    parts = [f"{key}={value}" for key, value in
             (("elo", elo), ("skill", skill), ("depth", depth), ("nodes", nodes), ("movetime", movetime))
             if value is not None]
    return kind + (":" + ",".join(parts) if parts else "")
