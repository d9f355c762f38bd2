"""Players for matches by name: the registry of player kinds and the specs that build agents.

Players are named on the command line by specs such as `random`,
`stockfish:elo=1500`, `stockfish:skill=5,movetime=100` or `fairy:skill=-5`
(Fairy-Stockfish below Stockfish's weakest level; `random=0.5` mixes in
random moves, as the ladder's lowest rungs do); `parse_player` turns
a spec into an Agent through the registry (`players()`: this module's kinds and
eval.network_agents' policy, value, av, search and gumbel, loaded on first use),
which `register_player` extends.

The agents themselves live by kind: the Agent interface, Choice and the random
mover in eval.agent, Stockfish and this project's engine in eval.engine_agents,
the network's agents in eval.network_agents; a kind and its option readers in
eval.player_kind. This module re-exports the first three modules' public names,
where callers import them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import chess
import chess.engine

from alphazero.errors import UserError
from alphazero.search import parse_cpuct
from eval.agent import Agent, Choice, RandomAgent, RandomMixAgent
from eval.engine_agents import (
    FALLBACK_MOVETIME_MS,
    FULL_STRENGTH_NODES,
    FairyStockfishAgent,
    StockfishAgent,
    StockfishStrength,
    UciAgent,
)
from eval.player_kind import PlayerFactory, PlayerKind, int_option, number_option, player_kind, ptemp_option

# --- player specs ---------------------------------------------------------------


PLAYERS: dict[str, PlayerKind] = {}
"""The registry: player name -> kind. players() puts the built-in kinds in it on first use; extend it with
register_player."""

BUILTIN_PLAYERS = ("uci", "random", "stockfish", "fairy", "policy", "value", "av", "search", "gumbel")
"""The kinds that come with the project: this module's, then eval.network_agents'."""

NAME_OPTION = "name"
"""An option every kind accepts: the agent's display name (`stockfish:elo=1500,name=sf1500`)."""


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


def _make_random(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    seed = int_option(options, "seed", int(context.get("seed", 0)), bounds=None)  # Python's generator: any int
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
    "random": "share of moves (0..1) played uniformly at random instead of the engine's, default 0",
}
_FAIRY_OPTIONS = {
    "skill": "Skill Level -20..20 (below 0: weaker than Stockfish's weakest level)",
    **{key: text for key, text in _STOCKFISH_OPTIONS.items() if key not in ("elo", "skill")},
}


def _parse_share(text: str) -> float:
    share = float(text)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"expected a share of moves from 0 to 1, got {text!r}")
    return share


def _random_share(options: Mapping[str, str]) -> float:
    """Reads the `random` option (checked before the engine starts); 0 when absent."""
    return number_option(options, "random", _parse_share) or 0.0


def _with_random_moves(agent: Agent, share: float, context: Mapping[str, Any]) -> Agent:
    """Wraps the engine in a RandomMixAgent when `share` is above 0; the name is the engine's spec with it."""
    if not share:
        return agent
    shown = f"{agent.name}{',' if ':' in agent.name else ':'}random={share:g}"
    return RandomMixAgent(agent, share, seed=int(context.get("seed", 0)), name=shown)


def _make_stockfish(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    share = _random_share(options)
    return _with_random_moves(_engine_agent(StockfishAgent, options, context, elo=int_option(options, "elo")),
                              share, context)


def _make_fairy(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    share = _random_share(options)
    return _with_random_moves(_engine_agent(FairyStockfishAgent, options, context), share, context)


def _engine_agent(kind: type[StockfishAgent], options: dict[str, str], context: Mapping[str, Any],
                  elo: int | None = None) -> StockfishAgent:
    def opt(key: str, default: int | None = None) -> int | None:
        return int_option(options, key, default)

    path_key = "fairy_path" if kind is FairyStockfishAgent else "stockfish_path"
    return kind(
        elo=elo,
        skill=opt("skill"),
        depth=opt("depth"),
        nodes=opt("nodes"),
        movetime=opt("movetime"),
        threads=opt("threads", 1) or 0,  # 0 (never None here) fails StockfishAgent's check
        hash_mb=opt("hash", 16) or 0,
        processes=opt("processes", 1) or 0,
        path=context.get(path_key),
    )


_UCI_FLAGS = {
    "weights": "a model file or checkpoint, or 'builtin' (or 'builtin-DATE', one that shipped before; default: the "
               "run's latest checkpoint, else builtin)",
    "device": "auto, cpu, cuda or cuda:N (default: the match's --device)",
}
_UCI_LIMITS = {"movetime": "milliseconds a move (go movetime)", "nodes": "simulations a move (go nodes)"}
_UCI_PROCESSES = {"processes": "engines searching games (or puzzles, positions) in parallel, default 1"}
UCI_AGENT_OPTIONS = {
    "leaves": "LeavesPerBatch",
    "threads": "Threads",
    "overhead": "Move Overhead",
    "movestogo": "MovesToGo",
    "algorithm": "SearchAlgorithm",
    "vpl": "VisitsPerLeaf",
    "ptemp": "PolicyTemperature",
    "cpuct": "CPuct",
    "precision": "Precision",
    "timeman": "TimeManager",
    "mode": "Mode",
    "fpu": "FpuMode",
    "unvisited": "GumbelUnvisited",
    "treemb": "Hash",
    "hash": "Hash",
    "syzygy": "SyzygyPath",
    "log": "Debug Log File",
}
"""The `uci` player's options that set the engine's UCI options: spec key -> UCI name (eval.uci.OPTIONS)."""
_UCI_TEXT_OPTIONS = ("algorithm", "ptemp", "cpuct", "precision", "timeman", "mode", "fpu", "unvisited", "syzygy",
                     "log")
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
    return UciAgent(flags=flags, options=uci_options, limit=limit, name="uci" + (f":{shown}" if shown else ""),
                    processes=int_option(options, "processes", 1) or 0)  # 0 (never None) fails UciAgent's check


def _builtin_kinds() -> dict[str, PlayerKind]:
    """This module's kinds for the registry (players())."""
    return {
        "uci": player_kind(
            _make_uci,
            help="this project's UCI engine (alphazero uci) in a subprocess, through python-chess as a GUI drives "
                 "it; default: the engine's Nodes a move, or the match's --clock",
            options={**_UCI_FLAGS, **_UCI_LIMITS, **_UCI_PROCESSES,
                     **{key: f"the engine's {name} option" for key, name in UCI_AGENT_OPTIONS.items()}}),
        "random": player_kind(_make_random, help="uniformly random legal moves", options={"seed": "random seed"}),
        "stockfish": player_kind(
            _make_stockfish,
            help="Stockfish; default full strength at 100k nodes a move, elo/skill weaken it",
            options=_STOCKFISH_OPTIONS,
            positional="elo"),
        "fairy": player_kind(
            _make_fairy,
            help="Fairy-Stockfish, weakened by its skill level (down to -20, below Stockfish's weakest); the "
                 "default limit is the depth where it picks its move",
            options=_FAIRY_OPTIONS,
            positional="skill"),
    }


__all__ = [
    "Agent",
    "BUILTIN_PLAYERS",
    "Choice",
    "FALLBACK_MOVETIME_MS",
    "FairyStockfishAgent",
    "FULL_STRENGTH_NODES",
    "NAME_OPTION",
    "PLAYERS",
    "PlayerFactory",
    "PlayerKind",
    "RandomAgent",
    "RandomMixAgent",
    "StockfishAgent",
    "StockfishStrength",
    "UCI_AGENT_OPTIONS",
    "UciAgent",
    "describe_players",
    "int_option",
    "number_option",
    "parse_player",
    "player_kind",
    "players",
    "ptemp_option",
    "register_player",
    "split_spec",
    "with_budget",
]
