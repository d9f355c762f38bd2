"""Agents that play with a network: policy-only, value-only, action-value-only and search (PUCT or Gumbel).

Five kinds, in the player registry (eval.agents.players(), which loads network_player_kinds()):

- `policy`: the legal move with the highest prior; no search, one network
  call for all the games' positions.
- `value`: every legal move's resulting position, of every game, evaluated in
  ONE batch; plays the move whose position is worst for the opponent. Game
  ends are scored exactly without the network (giving mate is +1, a draw 0).
- `av`: the legal move with the highest action value (the network's
  action-value head, eval.action_values: its win probability for the mover
  after each move); no search, one network call for all the games'
  positions. A network without the head is refused in one line.
- `search:N`: N simulations without noise of the run's `search.algorithm`
  (PUCT: the most visited move; Gumbel: Sequential Halving's choice);
  `algorithm=puct|gumbel` picks one. One MultiGameSearch slot per game, so
  each step sends the leaves of all the games through the network together.
  Where the run's search settings read the action-value head's values
  (MultiGameSearch.reads_action_values: mcts_ext.params' FPU_MODES) the search
  gets them from a network with the head; without one, a warning says so once
  and the search goes on with its usual value for unvisited moves.
  `fpu=` and `unvisited=` replace those two settings for this player (a
  checkpoint or model file from outside the run carries its own).
- `gumbel:N`: the same with Gumbel AlphaZero's search, whatever the run used.

Where the weights come from is alphazero.store.sources' NetworkSource: a run's
latest checkpoint (the default; a run with none yet plays the built-in
network of alphazero/weights, and says so on stderr), `checkpoint=STEP` or
`checkpoint=PATH`, or `weights=FILE` (a model file or any checkpoint, a run
directory, or `weights=builtin`, the built-in network). Specs::

    policy                      value:checkpoint=1200       av:weights=net.pt
    search:400                  search:sims=64,weights=net.pt,device=cpu
    gumbel:16                   search:sims=64,algorithm=puct,run=runs/g16

Boards come from python-chess with their move stacks; each is rebuilt as an
mcts_ext Board from its first position and moves, so the network sees the
same history planes (and repetitions) as in self-play.
"""

from __future__ import annotations

import abc
import dataclasses
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess
import numpy as np

from alphazero.errors import UserError
from alphazero.search import ANALYSIS, search_params
from alphazero.search_action_values import asks_action_values, legal_evaluator
from alphazero.store.rundir import DEFAULT_RUN_DIR, RunDir
from alphazero.store.sources import Network, NetworkCache, NetworkSource, load_network
from eval.action_values import has_action_values, legal_action_values, require_action_values
from eval.agent import Agent, Choice
from eval.player_kind import PlayerKind, int_option, player_kind, ptemp_option
from mcts_ext import Board, ChessError
from mcts_ext.driver import run as run_search
from mcts_ext.encode import legal_move_indices
from mcts_ext.params import FPU_MODES, GUMBEL_UNVISITED, SearchParams, settings_of
from mcts_ext.search import MultiGameSearch

DEFAULT_SIMULATIONS = 400
"""Simulations of `search` when neither the spec nor the caller's context gives a number."""

_NETWORK_OPTIONS = {
    "checkpoint": "a step of the run (e.g. 1200) or a checkpoint file; default the run's latest",
    "weights": "a model file (or any checkpoint, or another run's directory) outside the run; 'builtin' for the "
               "network that ships ('builtin-DATE' for one that shipped before)",
    "run": "the run directory (default: the caller's, else runs/default)",
    "device": "auto, cpu, cuda or cuda:N (default auto)",
    "precision": "auto, bf16 or float32 (default auto: on a CPU bf16 where native and measured faster)",
}


# --- boards ------------------------------------------------------------------------------


def to_mcts_board(board: chess.Board) -> Board:
    """Rebuilds a python-chess board as an mcts_ext Board: its first position plus every move.

    The history matters: the network's input holds the last 8 positions and
    their repetition counts. No ply limit is set (the caller's rules end games).

    Raises ValueError for Chess960 boards or a position mcts_ext rejects.
    """
    if board.chess960:
        raise ValueError(f"Chess960 is not supported: {board.fen()}")
    root = board.root()
    try:
        return Board.from_moves([move.uci() for move in board.move_stack], root.fen(), ply_limit=None)
    except ChessError as error:
        raise ValueError(f"cannot rebuild {board.fen()} for the network: {error}") from None


def _softmax(logits: np.ndarray) -> np.ndarray:
    # Subtracting the max keeps exp() finite; the result is unchanged.
    shifted = np.exp(logits - logits.max())
    return shifted / shifted.sum()


def exact_value(board: Board) -> float | None:
    """Returns the value of a game-ending position for its side to move (mated -1, drawn 0), else None."""
    termination = board.termination()
    if termination is None:
        return None
    return -1.0 if termination == "checkmate" else 0.0


# --- the agents ----------------------------------------------------------------------------


class NetworkAgent(Agent):
    """An agent that plays with a Network (shared, never closed by the agent)."""

    def __init__(self, network: Network, name: str) -> None:
        super().__init__(name)
        self.network = network


class SearchlessAgent(NetworkAgent):
    """A network agent that answers from the network's outputs alone, without a tree (policy, value, av).

    choose() rebuilds the boards for the network and calls choose_positions(), which takes mcts_ext Boards
    directly (the UCI engine's searchless modes, eval.uci_searchless, call it with the engine's board).
    """

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move on each board. Raises ValueError for an unsupported board."""
        if not boards:
            return []
        return self.choose_positions([to_mcts_board(b) for b in boards])

    @abc.abstractmethod
    def choose_positions(self, positions: Sequence[Board]) -> list[Choice]:
        """Chooses a move in each position (none over, each with its history); one Choice per position."""


class PolicyAgent(SearchlessAgent):
    """Plays the legal move with the highest prior (no search); all games in one network call.

    With `rules` (the default) the agent also knows how the rules score the
    positions one ply ahead, with no further network call: a checkmating move
    comes first; a move that draws at once (stalemate, insufficient material,
    fifty moves, a third repetition) or goes back to a position that stood
    before (scored a draw, as engines score a repetition in search) comes
    after the moves that play on when the network's value of the position is
    positive, and before them when it is negative. Within those tiers, the
    highest prior. Without `rules` it is the bare argmax of the policy
    (ChessBench's policy agent), which stalemates and repeats positions it is
    winning, since every winning move looks alike to a policy trained on win
    probabilities.

    Choice.value is the network's value of the position; info holds the
    move's prior probability among the legal moves.
    """

    def __init__(self, network: Network, name: str, *, rules: bool = True) -> None:
        super().__init__(network, name)
        self.rules = rules

    def choose_positions(self, positions: Sequence[Board]) -> list[Choice]:
        """Chooses a move in each position, all in one network call."""
        if not positions:
            return []
        logits, values = self.network.evaluate_boards(positions)
        choices = []
        for row, position in enumerate(positions):
            moves = position.legal_moves()
            legal = logits[row, legal_move_indices(position)]
            value = float(values[row])
            if self.rules:
                best = _best_by_rules(position, legal, value)
            else:
                best = int(np.argmax(legal))  # ties go to the first legal move
            info = {"nodes": 1, "prior": float(_softmax(legal)[best]), "pv": [moves[best]]}
            choices.append(Choice(chess.Move.from_uci(moves[best]), value, info))
        return choices


@dataclass
class Children:
    """The positions after every legal move of every board, flattened; exact values where known."""

    moves: list[list[str]] = field(default_factory=list)   # per board, its legal moves (UCI)
    values: list[list[float]] = field(default_factory=list)  # per board, the mover's value of each move
    pending: list[Board] = field(default_factory=list)     # positions for the network
    slots: list[tuple[int, int]] = field(default_factory=list)  # (board, move) of each pending position


def expand_children(positions: Sequence[Board]) -> Children:
    """Plays every legal move of every position: game ends get their exact value for the mover (mating +1,
    a draw 0), the other children wait in ``pending`` for the network (the value agent, the probe's SV)."""
    children = Children()
    for b, position in enumerate(positions):
        moves = position.legal_moves()
        children.moves.append(moves)
        children.values.append([math.nan] * len(moves))
        for m, uci in enumerate(moves):
            child = position.copy()
            child.push_uci(uci)
            exact = exact_value(child)
            if exact is not None:
                children.values[b][m] = -exact  # the mover's view: mating is +1
            else:
                children.pending.append(child)
                children.slots.append((b, m))
    return children


_MATE_SCORE = 2.0  # above any value the network gives, so a checkmate always comes first


def _best_by_rules(position: Board, logits: np.ndarray, value: float) -> int:
    """The index of the legal move with the best (rules' score, logit).

    Scores: a mate 2, a draw 0, a move back to a position seen before 0 (as
    engines score a repetition in search), any other move `value`.
    """
    children = expand_children([position])
    scores = np.array(children.values[0])  # the mover's exact values: mating +1, drawing 0; NaN for the rest
    scores[scores > 0] = _MATE_SCORE
    for (_, m), child in zip(children.slots, children.pending):
        scores[m] = 0.0 if child.repetition_count() > 1 else value
    # np.lexsort sorts by its last key first; the last index holds the best score, then the highest logit.
    return int(np.lexsort((-np.arange(len(scores)), logits, scores))[-1])


class ValueAgent(SearchlessAgent):
    """Plays the move whose resulting position the network likes least for the opponent.

    The positions after every legal move of every board go through the
    network in ONE batch; positions that end the game are scored exactly
    (checkmate +1 for the mover, draws 0) and never reach the network.
    Choice.value is the chosen move's value for the mover; ties go to the
    first legal move.
    """

    def choose_positions(self, positions: Sequence[Board]) -> list[Choice]:
        """Chooses a move in each position; every position's children in one network call."""
        if not positions:
            return []
        children = expand_children(positions)
        if children.pending:
            _, values = self.network.evaluate_boards(children.pending)
            for (b, m), value in zip(children.slots, values):
                children.values[b][m] = -float(value)  # the child's side to move is the opponent
        choices = []
        for moves, scores in zip(children.moves, children.values):
            best = int(np.argmax(scores))
            info = {"nodes": len(moves), "pv": [moves[best]]}
            choices.append(Choice(chess.Move.from_uci(moves[best]), float(scores[best]), info))
        return choices


class ActionValueAgent(SearchlessAgent):
    """Plays the legal move of highest action value, ChessBench's action-value policy: the network's head
    gives the mover's win probability after each legal move, all positions in one network call.

    Ties go to the first legal move (deterministic). Nothing is added to the head's values (a mate in one
    is the head's to see). Choice.value is 2 w - 1 of the chosen move's win probability w; info holds w as
    ``win``.

    Raises UserError, from the constructor, for a network without an action-value head (one line naming
    the weights and network.action_value_head).
    """

    def __init__(self, network: Network, name: str) -> None:
        require_action_values(network, "av")
        super().__init__(network, name)

    def choose_positions(self, positions: Sequence[Board]) -> list[Choice]:
        """Chooses a move in each position, all in one network call."""
        choices = []
        for position, wins in zip(positions, legal_action_values(self.network, positions)):
            moves = position.legal_moves()
            best = int(np.argmax(wins))  # ties go to the first legal move
            info = {"nodes": 1, "win": float(wins[best]), "pv": [moves[best]]}
            choices.append(Choice(chess.Move.from_uci(moves[best]), 2.0 * float(wins[best]) - 1.0, info))
        return choices


SEARCH_ALGORITHMS = ("puct", "gumbel")


def check_simulations(simulations: int, kind: str = "search") -> None:
    """Checks a search player's simulations against the setting (mcts_ext.params: 1 to a C int's largest).

    Raises UserError naming ``kind`` and the range.
    """
    if simulations < 1:
        raise UserError(f"{kind} needs at least 1 simulation, got sims={simulations}")
    problem = settings_of(SearchParams)["simulations"].problem("sims", simulations)
    if problem is not None:
        raise UserError(f"{kind}: {problem}")


class SearchAgent(NetworkAgent):
    """Searches each board with `simulations` simulations (no noise) and plays the search's best move.

    `algorithm` is 'puct' (the most visited move) or 'gumbel' (Sequential
    Halving's choice, Gumbel scale 0); None takes the network's run config
    (`search.algorithm`), whose `search` section also gives the constants
    (else AlphaZero's defaults). One MultiGameSearch slot per board; every
    step evaluates the leaves of all boards in one network call.
    `policy_temperature` T makes the priors softmax(logits / T); None takes
    the run config's (`search.policy_temperature`). `settings` replace other
    fields of the run config's search section (the players' `fpu=` and
    `unvisited=`: search.fpu_mode, search.gumbel_unvisited).
    Choice.value is the root's value for the mover; info holds nodes, the
    principal variation, the move's visits and Q. The network's action values
    go to a search whose settings read them (alphazero.search_action_values;
    a network without the head is warned of once, on stderr).

    Raises UserError if simulations are outside their setting's range (mcts_ext.params) or the algorithm
    is unknown.
    """

    def __init__(self, network: Network, simulations: int, name: str, *, algorithm: str | None = None,
                 policy_temperature: float | None = None, settings: Mapping[str, Any] | None = None) -> None:
        check_simulations(simulations)  # here, not where the first choose() makes the search
        if algorithm is not None and algorithm not in SEARCH_ALGORITHMS:
            raise UserError(f"the search algorithm must be one of {', '.join(SEARCH_ALGORITHMS)}, got {algorithm!r}")
        super().__init__(network, name)
        self.simulations = simulations
        self.algorithm = algorithm or network.search_config.algorithm
        self.policy_temperature = policy_temperature  # None: the run's search.policy_temperature
        self.search_config = dataclasses.replace(network.search_config, **(settings or {}))
        self._search: MultiGameSearch | None = None
        self._batch: tuple | None = None
        self._action_values = False  # the search reads the head's values and the network has the head
        self._warned = False

    def _search_for(self, games: int) -> MultiGameSearch:
        # Reused between calls (the trees' memory and the batch arrays, pinned
        # on a GPU, are kept); rebuilt when more games come.
        if self._search is None or self._search.games < games:
            params = search_params(self.search_config, ANALYSIS, algorithm=self.algorithm,
                                   simulations=self.simulations, policy_temperature=self.policy_temperature)
            self._search = MultiGameSearch(games, params)
            self._batch = self.network.evaluator.pin(self._search.new_batch())
            self._action_values = asks_action_values(self._search, has_action_values(self.network),
                                                     f"the network ({self.network.label})", self._warn_once)
        for slot in range(games, self._search.games):
            self._search.clear(slot)
        return self._search

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Searches every board at once; returns the most visited moves. Raises ValueError for an unsupported board."""
        if not boards:
            return []
        search = self._search_for(len(boards))
        for slot, board in enumerate(boards):
            search.set_position(slot, to_mcts_board(board))
        # The legal moves' logits only (and their action values where asked): on a GPU they are gathered there,
        # ~30 floats a position come back.
        evaluate = legal_evaluator(self.network.evaluator.evaluate_legal, self._action_values)
        run_search(search, evaluate_legal=evaluate, batch=self._batch)
        return [self._read(search, slot) for slot in range(len(boards))]

    def _read(self, search: MultiGameSearch, slot: int) -> Choice:
        best = search.best_move(slot)
        stats = {uci: (visits, q) for uci, _, visits, q, _ in search.root_stats(slot)}
        visits, q = stats[best]
        info = {
            "nodes": search.simulations(slot),
            "pv": search.principal_variation(slot) or [best],
            "visits": visits,
            "q": q,
        }
        return Choice(chess.Move.from_uci(best), float(search.root_value(slot)), info)

    def _warn_once(self, line: str) -> None:
        if not self._warned:
            self._warned = True
            print(f"warning: {self.name}: {line}", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Frees the search trees."""
        self._search = None
        self._batch = None


# --- the registry ----------------------------------------------------------------------------


def _source_from(options: Mapping[str, str], context: Mapping[str, Any]) -> NetworkSource:
    run = options.get("run") or context.get("run") or DEFAULT_RUN_DIR
    run_path = run.root if isinstance(run, RunDir) else Path(run)
    if options.get("run") and _missing(run_path):  # a run the player names must exist: a typo must not play
        raise UserError(f"run={options['run']}: no such run directory (leave out run= for the command's run, "
                        f"or give weights=builtin)")
    weights = options.get("weights")
    return NetworkSource(run_path, options.get("checkpoint") or None, Path(weights) if weights else None)


def _missing(path: Path) -> bool:
    """Checks that nothing is at ``path``; a path that cannot be looked at (too long) is left to the loader,
    which says why."""
    try:
        return not path.exists()
    except OSError:
        return False


def network_for(options: Mapping[str, str], context: Mapping[str, Any]) -> Network:
    """Gets the network a spec's options name, through the context's cache when there is one.

    Context keys read: `network` (a loaded Network, used when the spec names
    no source), `networks` (a NetworkCache), `run` (default runs/default),
    `device` (default auto).

    Raises UserError as load_network.
    """
    names_source = any(options.get(key) for key in ("checkpoint", "weights", "run"))
    given = context.get("network")
    if given is not None and not names_source and "device" not in options and "precision" not in options:
        return given
    source = _source_from(options, context)
    device = options.get("device") or context.get("device") or "auto"
    precision = options.get("precision") or "auto"
    cache = context.get("networks")
    if isinstance(cache, NetworkCache):
        return cache.get(source, str(device), precision)
    return load_network(source, device=str(device), precision=precision)


def _display_name(base: str, network: Network) -> str:
    return f"{base}@{network.tag}"


_SWITCH_VALUES = {"on": True, "off": False}


def _make_policy(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    rules_text = options.pop("rules", "on").lower()
    if rules_text not in _SWITCH_VALUES:
        raise UserError(f"option rules={rules_text!r} must be on or off")
    network = network_for(options, context)
    base = "policy" if _SWITCH_VALUES[rules_text] else "policy:rules=off"
    return PolicyAgent(network, _display_name(base, network), rules=_SWITCH_VALUES[rules_text])


def _make_value(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    network = network_for(options, context)
    return ValueAgent(network, _display_name("value", network))


def _make_av(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    network = network_for(options, context)
    return ActionValueAgent(network, _display_name("av", network))


def _make_search(options: dict[str, str], context: Mapping[str, Any], kind: str = "search") -> Agent:
    default = int(context.get("simulations") or DEFAULT_SIMULATIONS)
    simulations = int_option(options, "sims", default, bounds=None)  # the setting's range: check_simulations
    assert simulations is not None
    check_simulations(simulations, kind)
    algorithm = "gumbel" if kind == "gumbel" else (options.get("algorithm", "").lower() or None)
    if algorithm is not None and algorithm not in SEARCH_ALGORITHMS:
        raise UserError(f"option algorithm={algorithm!r} must be one of {', '.join(SEARCH_ALGORITHMS)}")
    policy_temperature = ptemp_option(options)
    settings = _search_settings(options)
    network = network_for(options, context)
    tag = f"{algorithm or kind}:{simulations}"
    if policy_temperature is not None:
        tag += f",ptemp={options['ptemp']}"
    tag += "".join(f",{key}={options[key]}" for key in _SETTING_KEYS if key in options)
    return SearchAgent(network, simulations, _display_name(tag, network), algorithm=algorithm,
                       policy_temperature=policy_temperature, settings=settings)


# A search player's keys for the run config's search settings it replaces, and each one's choices: a checkpoint
# or model file from another run searches with the settings it carries, so a match between settings names them.
_SETTING_KEYS = {"fpu": ("fpu_mode", FPU_MODES), "unvisited": ("gumbel_unvisited", GUMBEL_UNVISITED)}


def _search_settings(options: Mapping[str, str]) -> dict[str, str]:
    """Reads the `fpu` and `unvisited` options into search settings. Raises UserError for a value not offered."""
    settings = {}
    for key, (name, choices) in _SETTING_KEYS.items():
        if key in options:
            value = options[key].strip().lower()
            if value not in choices:
                raise UserError(f"option {key}={options[key]!r} must be one of {', '.join(choices)} "
                                f"(search.{name})")
            settings[name] = value
    return settings


def _make_gumbel(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    return _make_search(options, context, kind="gumbel")


_PTEMP_HELP = "softmax temperature of the prior (default: the run's search.policy_temperature)"


def network_player_kinds() -> dict[str, PlayerKind]:
    """The five kinds of this module, for the registry (eval.agents.players loads them on first use)."""
    searches = {"sims": f"simulations a move (default {DEFAULT_SIMULATIONS})", "ptemp": _PTEMP_HELP,
                "fpu": f"PUCT's value of an unvisited move, {' or '.join(FPU_MODES)} (default: the run's "
                       "search.fpu_mode)",
                "unvisited": f"Gumbel's completed Q of an unvisited move, {' or '.join(GUMBEL_UNVISITED)} "
                             "(default: the run's search.gumbel_unvisited)",
                **_NETWORK_OPTIONS}
    return {
        "policy": player_kind(
            _make_policy,
            help="the network's top-prior legal move, no search; it takes a mate in one and avoids drawing at "
                 "once while its value is positive (rules=off: the bare top prior)",
            options={"rules": "on (default) or off", **_NETWORK_OPTIONS}),
        "value": player_kind(_make_value, help="the move after which the network rates the opponent worst",
                             options=_NETWORK_OPTIONS),
        "av": player_kind(_make_av, help="the move of highest action value (the network's action-value head: "
                          "its win probability after each move), no search; only for a network with the head",
                          options=_NETWORK_OPTIONS),
        "search": player_kind(
            _make_search,
            help="the network with the run's search (search.algorithm: PUCT or Gumbel), search:400 = 400 "
                 "simulations",
            options={**searches, "algorithm": "puct or gumbel (default: the run's search.algorithm)"},
            positional="sims"),
        "gumbel": player_kind(
            _make_gumbel, help="the network with Gumbel AlphaZero's search, no noise (gumbel:64 = 64 simulations)",
            options=searches, positional="sims"),
    }

__all__ = [
    "DEFAULT_SIMULATIONS",
    "SEARCH_ALGORITHMS",
    "ActionValueAgent",
    "NetworkAgent",
    "PolicyAgent",
    "SearchAgent",
    "SearchlessAgent",
    "ValueAgent",
    "Children",
    "exact_value",
    "expand_children",
    "network_for",
    "network_player_kinds",
    "to_mcts_board",
]
