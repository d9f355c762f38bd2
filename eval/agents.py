"""Players for matches: the Agent interface, a random mover, Stockfish, and player specs.

An agent chooses moves for MANY games in one call, so that a network agent
can put the positions of all the games it is playing into one batch:

    choices = agent.choose([board_1, board_2, ...])   # one Choice per board

Players are named on the command line by specs such as `random`,
`stockfish:elo=1500` or `stockfish:skill=5,movetime=100`; `parse_player` turns
a spec into an Agent through the registry (`players()`: this module's kinds and
eval.network_agents' policy, value, search and gumbel, loaded on first use),
which `register_player` extends.
"""

from __future__ import annotations

import abc
import random
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import chess
import chess.engine

from alphazero.chess.stockfish import require_stockfish
from alphazero.errors import UserError
from alphazero.search import parse_cpuct, parse_policy_temperature
from eval.scores import score_to_value

PlayerFactory = Callable[[dict[str, str], Mapping[str, Any]], "Agent"]
"""Builds an agent from a spec's options (strings, already checked against the
kind's declared options) and the caller's context (see parse_player)."""

_AgentT = TypeVar("_AgentT", bound="Agent")

FULL_STRENGTH_NODES = 100_000
"""Stockfish's default limit at full strength: about 0.1 s a move on one core."""

FALLBACK_MOVETIME_MS = 1000
"""Stockfish's default limit in Elo mode for versions whose Elo formula we do not know."""


# --- the interface ---------------------------------------------------------------


@dataclass
class Choice:
    """An agent's move for one board.

    `value` is the agent's estimate of the game for the side to move (the
    agent itself) in [-1, 1], or None when it has none; the match runner uses
    it for resignation. `info` holds extras for logs (nodes, depth, pv, ...),
    JSON-serialisable values only.
    """

    move: chess.Move
    value: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Agent(abc.ABC):
    """A player. Subclasses implement `choose`; `new_game` and `close` are optional hooks.

    Agents are context managers: `with parse_player("stockfish") as sf: ...`
    closes the engine on the way out.
    """

    name: str
    plays_on_clock: bool = False
    """Whether choose_on_clock() works (UCI engines)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move for each board; returns one Choice per board, in order.

        Each board is a game in progress (not over) with its full move stack,
        so the agent can see the history (repetitions, network history planes).
        Contract: leave the boards as they were (push/pop is fine; the caller
        owns them) and return legal moves; the match runner raises on an
        illegal one.
        """

    def new_game(self) -> None:  # noqa: B027 - a hook: most agents keep nothing between games
        """Hears that a game is starting (one call per game; games overlap in a match)."""

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move for each board as the first search of a new game; one Choice per board, in order.

        Nothing the agent kept from another board or an earlier call (a UCI
        engine's hash table, a search tree) enters the answer, so the answers
        depend neither on the order of the boards nor on how many come in one
        call. The yardsticks (eval.epd, eval.puzzles) ask this way. The boards'
        contract is choose()'s; each keeps its move stack, so the history still
        counts.

        This default calls choose(): right for agents that keep nothing
        between boards (the network agents search every board from an empty
        tree). Agents that do keep something override it.
        """
        return self.choose(boards)

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        """Chooses a move for one board under a game clock, as a GUI asks a UCI engine.

        `clock` holds both sides' remaining seconds and increments (white_clock,
        black_clock, white_inc, black_inc); the caller times the call and keeps
        the clocks. The board's contract is choose()'s.

        Raises UserError for an agent that cannot play on a clock (plays_on_clock False).
        """
        raise UserError(f"{self.name} cannot play on a clock: only UCI engines can (stockfish, uci)")

    def close(self) -> None:  # noqa: B027 - a hook: most agents hold no process
        """Releases processes and memory; the agent is unusable afterwards. Safe to call twice."""

    def __enter__(self: _AgentT) -> _AgentT:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# --- random ----------------------------------------------------------------------


class RandomAgent(Agent):
    """Plays a uniformly random legal move; has no value (never resigns).

    The same seed replays the same moves for the same sequence of positions.
    """

    def __init__(self, seed: int = 0, *, name: str | None = None) -> None:
        super().__init__(name or ("random" if seed == 0 else f"random:seed={seed}"))
        self._rng = random.Random(seed)

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a random legal move on each board."""
        return [Choice(self._rng.choice(list(board.legal_moves))) for board in boards]


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


def _check_range(engine: chess.engine.SimpleEngine, option: str, value: int, flag: str) -> None:
    """Raises UserError if the engine lacks `option` or `value` is outside its range."""
    if option not in engine.options:
        raise UserError(f"this Stockfish ({engine.id.get('name', '?')}) has no {option!r} option, needed for {flag}")
    spec = engine.options[option]
    if spec.min is not None and spec.max is not None and not spec.min <= value <= spec.max:
        raise UserError(
            f"{flag}={value} is out of range: {engine.id.get('name', 'Stockfish')} accepts "
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
            return chess.engine.Limit(depth=1 + self.skill)  # the depth where it picks its move
        return chess.engine.Limit(nodes=FULL_STRENGTH_NODES)


class StockfishAgent(Agent):
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
        super().__init__(name or _stockfish_name(elo, skill, depth, nodes, movetime))
        self.strength = StockfishStrength(elo, skill)
        self._engines: list[chess.engine.SimpleEngine] = []
        self._pool: ThreadPoolExecutor | None = None
        self._game: object = None
        try:
            self._start(path or require_stockfish(), processes, threads, hash_mb)
            explicit = depth is not None or nodes is not None or movetime is not None
            self.limit = (
                chess.engine.Limit(depth=depth, nodes=nodes, time=None if movetime is None else movetime / 1000.0)
                if explicit
                else self.strength.default_limit(self._engines[0].id.get("name", ""))
            )
        except BaseException:
            self.close()
            raise

    def _start(self, path: str, processes: int, threads: int, hash_mb: int) -> None:
        """Starts the engines, checks the strength against the first one's ranges, configures all."""
        options: dict[str, int | bool] = {"Threads": threads, "Hash": hash_mb, **self.strength.options()}
        for _ in range(processes):
            try:
                engine = chess.engine.SimpleEngine.popen_uci(path)
            except (OSError, chess.engine.EngineError) as exc:
                raise UserError(f"cannot start Stockfish at {path!r}: {exc}") from None
            self._engines.append(engine)
            if len(self._engines) == 1:
                self._check_strength(engine)
            engine.configure(options)

    def _check_strength(self, engine: chess.engine.SimpleEngine) -> None:
        if self.strength.elo is not None:
            _check_range(engine, "UCI_Elo", self.strength.elo, "elo")
        if self.strength.skill is not None:
            _check_range(engine, "Skill Level", self.strength.skill, "skill")

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
        if not self._engines:
            raise RuntimeError(f"{self.name} is closed")

        def search(engine: chess.engine.SimpleEngine, board: chess.Board) -> Choice:
            # python-chess sends ucinewgame when `game` differs from the engine's last one.
            return _play(engine, board, self.limit, object() if fresh else self._game, self.name)

        n = min(len(self._engines), len(boards))
        if n <= 1:
            return [search(self._engines[0], board) for board in boards]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self._engines), thread_name_prefix="stockfish")
        # Engine k takes boards k, k + n, k + 2n, ...; each engine runs in one thread.
        parts = list(self._pool.map(lambda k: [search(self._engines[k], b) for b in boards[k::n]], range(n)))
        return [parts[i % n][i // n] for i in range(len(boards))]

    plays_on_clock = True

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        """Searches the board on the game's clock (Stockfish manages its time; its strength settings hold)."""
        if not self._engines:
            raise RuntimeError(f"{self.name} is closed")
        return _play(self._engines[0], board, clock, self._game, self.name)

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


# --- this project's UCI engine ------------------------------------------------------


class UciAgent(Agent):
    """This project's UCI engine (`alphazero uci`) in a subprocess, driven through python-chess as a GUI drives it.

    `flags` are the engine's command-line flags (--weights, --run, --device),
    `options` its UCI options (set once, e.g. {"LeavesPerBatch": 32}), `limit`
    the search of each move in choose() (default: an empty `go`, which
    searches the engine's Nodes option). choose_on_clock() sends the game's
    clock instead (`go wtime btime winc binc`), and the engine manages its
    time. `ucinewgame` goes out with the first search of each game, so the
    engine keeps its tree between the moves of a game (when the match plays
    one game at a time). Choice.value is the engine's score for the side to
    move, info its nodes, nps, depth, time and line.

    Raises UserError if the engine cannot be started or refuses an option.
    """

    def __init__(self, *, flags: Sequence[str] = (), options: Mapping[str, int | bool | str] | None = None,
                 limit: chess.engine.Limit | None = None, name: str = "uci") -> None:
        super().__init__(name)
        self.limit = limit or chess.engine.Limit()
        self._game: object = None
        command = [sys.executable, "-m", "alphazero", "uci", *flags]
        try:
            self._engine: chess.engine.SimpleEngine | None = chess.engine.SimpleEngine.popen_uci(command, timeout=120)
        except (OSError, chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError) as exc:
            raise UserError(f"cannot start the UCI engine ({' '.join(command)}): {exc}") from None
        try:
            self._engine.configure(dict(options or {}))
        except (chess.engine.EngineError, ValueError) as exc:
            self.close()
            raise UserError(f"the UCI engine refused an option of {name!r}: {exc}") from None

    def new_game(self) -> None:
        """Makes the next search send `ucinewgame`."""
        self._game = object()

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches the boards one after another with the agent's limit."""
        return [self._play(board, self.limit, self._game) for board in boards]

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches each board as a new game: `ucinewgame` before each search, so the engine starts from an
        empty tree and reuses nothing of the board searched before."""
        return [self._play(board, self.limit, object()) for board in boards]

    plays_on_clock = True

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        """Searches the board on the game's clock (the engine's time management decides the move's time)."""
        return self._play(board, clock, self._game)

    def _play(self, board: chess.Board, limit: chess.engine.Limit, game: object) -> Choice:
        if self._engine is None:
            raise RuntimeError(f"{self.name} is closed")
        return _play(self._engine, board, limit, game, self.name)

    def close(self) -> None:
        """Quits the engine process (killing it if it does not answer)."""
        engine, self._engine = self._engine, None
        if engine is not None:
            try:
                engine.quit()
            except (chess.engine.EngineError, chess.engine.EngineTerminatedError, TimeoutError):
                engine.close()


def _stockfish_name(
    elo: int | None, skill: int | None, depth: int | None, nodes: int | None, movetime: int | None
) -> str:
    """Returns a spec-like name, e.g. 'stockfish:elo=1500' or 'stockfish:skill=5,movetime=100'."""
    parts = [f"{key}={value}" for key, value in
             (("elo", elo), ("skill", skill), ("depth", depth), ("nodes", nodes), ("movetime", movetime))
             if value is not None]
    return "stockfish" + (":" + ",".join(parts) if parts else "")


# --- player specs ---------------------------------------------------------------


@dataclass(frozen=True)
class PlayerKind:
    """A kind of player in the registry.

    `options` maps each accepted option to a line of help; `positional`, if
    set, is the option that a bare value fills (`search:400` -> sims=400 with
    positional="sims").
    """

    factory: PlayerFactory
    help: str
    options: Mapping[str, str]
    positional: str | None = None


PLAYERS: dict[str, PlayerKind] = {}
"""The registry: player name -> kind. players() puts the built-in kinds in it on first use; extend it with
register_player."""

BUILTIN_PLAYERS = ("uci", "random", "stockfish", "policy", "value", "search", "gumbel")
"""The kinds that come with the project: this module's, then eval.network_agents'."""

NAME_OPTION = "name"
"""An option every kind accepts: the agent's display name (`stockfish:elo=1500,name=sf1500`)."""


def player_kind(factory: PlayerFactory, *, help: str, options: Mapping[str, str] | None = None,
                positional: str | None = None) -> PlayerKind:
    """Makes a kind of player (see register_player).

    Raises ValueError if `positional` is not among the options.
    """
    opts = dict(options or {})
    if positional is not None and positional not in opts:
        raise ValueError(f"positional option {positional!r} is not among the options {sorted(opts)}")
    return PlayerKind(factory, help, opts, positional)


def players() -> dict[str, PlayerKind]:
    """The registry with the built-in kinds in it, loaded on first use (the network kinds bring torch, so
    importing this module does not); a kind registered under a built-in name keeps its place."""
    if not set(BUILTIN_PLAYERS) <= PLAYERS.keys():
        from eval.network_agents import network_player_kinds

        for name, kind in {**_builtin_kinds(), **network_player_kinds()}.items():
            PLAYERS.setdefault(name, kind)
    return PLAYERS


def register_player(
    name: str,
    factory: PlayerFactory,
    *,
    help: str,
    options: Mapping[str, str] | None = None,
    positional: str | None = None,
    replace: bool = False,
) -> None:
    """Registers a kind of player under `name` for parse_player.

    The factory gets the spec's options as strings (only declared ones reach
    it; `name` is handled by parse_player) and the context given to
    parse_player, and returns an Agent. Example::

        def _random_agent(options, context):
            return RandomAgent(seed=int(options.get("seed", "0")))

        register_player("coin", _random_agent, help="uniformly random legal moves",
                        options={"seed": "random seed (default 0)"}, positional="seed")

    Raises ValueError if the name is taken (unless replace=True) or malformed,
    or `positional` is not among the options.
    """
    if not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
        raise ValueError(f"a player name must be lower-case letters, digits, '-' or '_', got {name!r}")
    if name in players() and not replace:
        raise ValueError(f"player {name!r} is already registered")
    PLAYERS[name] = player_kind(factory, help=help, options=options, positional=positional)


def describe_players() -> str:
    """Returns the accepted player specs, one kind per line with its options (for help and errors)."""
    lines = []
    for name, kind in sorted(players().items()):
        opts = ", ".join(f"{key} ({text})" for key, text in kind.options.items())
        lines.append(f"  {name}: {kind.help}" + (f"; options: {opts}" if opts else ""))
    return "\n".join(lines)


def split_spec(spec: str) -> tuple[str, list[tuple[str | None, str]]]:
    """Splits `NAME[:ITEM[,ITEM...]]` into the name and (key, value) items; a bare item has key None.

    Raises UserError on an empty name, an empty item or an item with an empty key.
    """
    name, _, rest = spec.strip().partition(":")
    name = name.strip().lower()
    if not name:
        raise UserError(f"empty player name in {spec!r}; expected e.g. 'stockfish:elo=1500'")
    items: list[tuple[str | None, str]] = []
    for item in rest.split(",") if rest.strip() else []:
        key, eq, value = item.partition("=")
        if not item.strip() or (eq and not key.strip()):
            raise UserError(f"malformed option {item!r} in player spec {spec!r}; expected key=value")
        items.append((key.strip().lower(), value.strip()) if eq else (None, key.strip()))
    return name, items


def _collect_options(spec: str, name: str, kind: PlayerKind, items: list[tuple[str | None, str]]) -> dict[str, str]:
    """Checks items against the kind's options; returns them as a dict, bare value under `positional`."""
    accepted = sorted([*kind.options, NAME_OPTION])
    options: dict[str, str] = {}
    for key, value in items:
        if key is None:
            if kind.positional is None:
                raise UserError(f"{name!r} takes no bare value, got {value!r} in {spec!r}; "
                                f"options: {', '.join(accepted)}")
            key = kind.positional
        if key not in kind.options and key != NAME_OPTION:
            raise UserError(f"unknown option {key!r} for {name!r} in {spec!r}; accepted: {', '.join(accepted)}")
        if key in options:
            raise UserError(f"option {key!r} given twice in {spec!r}")
        options[key] = value
    return options


_BUDGETS = {"search": {"nodes": "sims"}, "gumbel": {"nodes": "sims"},
            "stockfish": {"nodes": "nodes", "movetime": "movetime"}, "uci": {"nodes": "nodes", "movetime": "movetime"}}
"""For each player kind, the option that takes a node or time budget (`with_budget`)."""


def with_budget(spec: str, *, nodes: int | None = None, movetime: int | None = None) -> str:
    """Gives a player spec a budget a move: ``nodes`` (simulations of a network search, Stockfish's or the
    engine's nodes) or ``movetime`` (milliseconds, for Stockfish and the engine).

    >>> with_budget("search", nodes=64), with_budget("stockfish:elo=1500", movetime=100)
    ('search:sims=64', 'stockfish:elo=1500,movetime=100')

    Raises:
        UserError: the player takes no such budget, or the spec already sets it.
    """
    if nodes is None and movetime is None:
        return spec
    name, items = split_spec(spec)
    kind, value = ("nodes", nodes) if nodes is not None else ("movetime", movetime)
    if value is None or value < 1:
        raise UserError(f"--{kind} must be at least 1, got {value}")
    key = _BUDGETS.get(name, {}).get(kind)
    if key is None:
        takers = ", ".join(sorted(n for n, budgets in _BUDGETS.items() if kind in budgets))
        raise UserError(f"{name!r} takes no --{kind} budget (players that do: {takers})")
    positional = players()[name].positional if name in players() else None
    if any(k == key or (k is None and positional == key) for k, _ in items):
        raise UserError(f"{spec!r} already sets its {key}: give the budget once")
    return f"{spec}{',' if items else ':'}{key}={value}"


def parse_player(spec: str, **context: Any) -> Agent:
    """Builds an agent from a player spec: `NAME[:key=value,...]`.

    Examples: `random`, `random:seed=3`, `stockfish`, `stockfish:elo=1500`,
    `stockfish:1500` (a bare value fills the kind's positional option),
    `stockfish:skill=5,movetime=100`, `stockfish:depth=3,name=sf-d3`.
    `context` is handed to the factory as a dict; the built-in kinds read
    `seed` (default seed of `random`) and `stockfish_path`.

    Raises UserError for an unknown name or option (listing what is
    accepted), a malformed spec or a bad option value, and whatever the
    factory raises (a missing Stockfish is a UserError).
    """
    name, items = split_spec(spec)
    kind = players().get(name)
    if kind is None:
        raise UserError(f"unknown player {name!r} in {spec!r}; accepted players:\n{describe_players()}")
    options = _collect_options(spec, name, kind, items)
    display = options.pop(NAME_OPTION, None)
    agent = kind.factory(options, context)
    if display:
        agent.name = display
    return agent


def int_option(options: Mapping[str, str], key: str, default: int | None = None) -> int | None:
    """Reads an integer option for a factory; `default` when absent.

    Raises UserError quoting the value when it is not an integer.
    """
    if key not in options:
        return default
    try:
        return int(options[key])
    except ValueError:
        raise UserError(f"option {key}={options[key]!r} must be an integer") from None


def number_option(options: Mapping[str, str], key: str, parse: Callable[[str], float]) -> float | None:
    """Reads a number option for a factory with ``parse`` (which says what it expects); None when absent.

    Raises UserError naming the option when ``parse`` refuses the value.
    """
    if key not in options:
        return None
    try:
        return parse(options[key])
    except ValueError as error:
        raise UserError(f"option {key}: {error}") from None


def ptemp_option(options: Mapping[str, str]) -> float | None:
    """Reads the `ptemp` option, the prior's softmax temperature (a positive, finite number); None when absent."""
    return number_option(options, "ptemp", parse_policy_temperature)


def _make_random(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    seed = int_option(options, "seed", int(context.get("seed", 0)))
    return RandomAgent(0 if seed is None else seed)


_STOCKFISH_OPTIONS = {
    "elo": "UCI_Elo, e.g. 1500; Stockfish 15.1 allows 1350..2850",
    "skill": "Skill Level 0..20",
    "depth": "search depth in plies",
    "nodes": "nodes a move",
    "movetime": "milliseconds a move",
    "threads": "threads per engine, default 1",
    "hash": "hash MB per engine, default 16",
    "processes": "engines searching games in parallel, default 1",
}


def _make_stockfish(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    def opt(key: str, default: int | None = None) -> int | None:
        return int_option(options, key, default)

    return StockfishAgent(
        elo=opt("elo"),
        skill=opt("skill"),
        depth=opt("depth"),
        nodes=opt("nodes"),
        movetime=opt("movetime"),
        threads=opt("threads", 1) or 0,  # 0 (never None here) fails StockfishAgent's check
        hash_mb=opt("hash", 16) or 0,
        processes=opt("processes", 1) or 0,
        path=context.get("stockfish_path"),
    )


_UCI_FLAGS = {
    "weights": "a model file or checkpoint, or 'builtin' (or 'builtin-DATE', one that shipped before; default: the "
               "run's latest checkpoint, else builtin)",
    "device": "auto, cpu, cuda or cuda:N (default: the match's --device)",
}
_UCI_LIMITS = {"movetime": "milliseconds a move (go movetime)", "nodes": "simulations a move (go nodes)"}
UCI_AGENT_OPTIONS = {
    "leaves": "LeavesPerBatch",
    "threads": "Threads",
    "overhead": "MoveOverhead",
    "movestogo": "MovesToGo",
    "algorithm": "SearchAlgorithm",
    "vpl": "VisitsPerLeaf",
    "ptemp": "PolicyTemperature",
    "cpuct": "CPuct",
    "precision": "Precision",
    "timeman": "TimeManager",
}
"""The `uci` player's options that set the engine's UCI options: spec key -> UCI name (eval.uci.OPTIONS)."""
_UCI_TEXT_OPTIONS = ("algorithm", "ptemp", "cpuct", "precision", "timeman")
"""Those passed on as text (the rest are integers)."""


def _make_uci(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    flags = ["--device", options.get("device", str(context.get("device", "auto")))]
    if "weights" in options:
        flags += ["--weights", options["weights"]]
    else:
        flags += ["--run", str(context.get("run", "runs/default"))]
    uci_options: dict[str, int | str] = {}
    for key, uci_name in UCI_AGENT_OPTIONS.items():
        if key in options:
            value = options[key]
            uci_options[uci_name] = value if key in _UCI_TEXT_OPTIONS else int_option(options, key) or 0
    ptemp_option(options)  # checked here, not by the engine at its first search
    number_option(options, "cpuct", parse_cpuct)
    movetime, nodes = int_option(options, "movetime"), int_option(options, "nodes")
    for key, limit_value in (("movetime", movetime), ("nodes", nodes)):
        if limit_value is not None and limit_value < 1:
            raise UserError(f"{key} must be at least 1, got {limit_value}")
    limit = chess.engine.Limit(time=None if movetime is None else movetime / 1000.0, nodes=nodes)
    shown = ",".join(f"{key}={value}" for key, value in options.items())
    return UciAgent(flags=flags, options=uci_options, limit=limit, name="uci" + (f":{shown}" if shown else ""))


def _builtin_kinds() -> dict[str, PlayerKind]:
    """This module's kinds for the registry (players())."""
    return {
        "uci": player_kind(
            _make_uci,
            help="this project's UCI engine (alphazero uci) in a subprocess, through python-chess as a GUI drives "
                 "it; default: the engine's Nodes a move, or the match's --clock",
            options={**_UCI_FLAGS, **_UCI_LIMITS,
                     **{key: f"the engine's {name} option" for key, name in UCI_AGENT_OPTIONS.items()}}),
        "random": player_kind(_make_random, help="uniformly random legal moves", options={"seed": "random seed"}),
        "stockfish": player_kind(
            _make_stockfish,
            help="Stockfish; default full strength at 100k nodes a move, elo/skill weaken it",
            options=_STOCKFISH_OPTIONS,
            positional="elo"),
    }
