"""Agents that play with a network: policy-only, value-only and search (PUCT or Gumbel).

Four kinds, registered in the player registry (eval.agents.PLAYERS):

- `policy`: the legal move with the highest prior; no search, one network
  call for all the games' positions.
- `value`: every legal move's resulting position, of every game, evaluated in
  ONE batch; plays the move whose position is worst for the opponent. Game
  ends are scored exactly without the network (giving mate is +1, a draw 0).
- `search:N`: N simulations without noise of the run's `search.algorithm`
  (PUCT: the most visited move; Gumbel: Sequential Halving's choice);
  `algorithm=puct|gumbel` picks one. One MultiGameSearch slot per game, so
  each step sends the leaves of all the games through the network together.
- `gumbel:N`: the same with Gumbel AlphaZero's search, whatever the run used.

Where the weights come from (`NetworkSource`): a run's latest checkpoint (the
default; a run with none yet plays the built-in network of alphazero/weights,
or with `fallback="fresh"` freshly initialised, seeded weights, and says so on
stderr), `checkpoint=STEP` or `checkpoint=PATH`, or `weights=FILE` (a model
file or any checkpoint; `weights=builtin` is the built-in network). Specs::

    policy                      value:checkpoint=1200
    search:400                  search:sims=64,weights=net.pt,device=cpu
    gumbel:16                   search:sims=64,algorithm=puct,run=runs/g16

Boards come from python-chess with their move stacks; each is rebuilt as an
mcts_ext Board from its first position and moves, so the network sees the
same history planes (and repetitions) as in self-play.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import chess
import numpy as np
import torch

from alphazero.builtin import BUILTIN, builtin_path, is_builtin, require_builtin
from alphazero.checkpoint import checkpoint_name, latest_checkpoint, load_model, step_of
from alphazero.config import DEFAULT_PRESET, Config, SearchConfig, from_toml, get_preset
from alphazero.errors import UserError
from alphazero.network import AlphaZeroNet, Evaluator, build_network, pick_device
from alphazero.planes import compact_to_torch
from alphazero.rundir import DEFAULT_RUN, RunDir, complete_files
from alphazero.search import ANALYSIS, search_params
from eval.agents import Agent, Choice, int_option, register_player
from mcts_ext import Board, ChessError
from mcts_ext.driver import run as run_search
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch
from mcts_ext.search import MultiGameSearch

DEFAULT_RUN_DIR = Path(DEFAULT_RUN)
"""The run directory that every command uses when none is given (alphazero.rundir.DEFAULT_RUN)."""

FRESH = "fresh"
"""NetworkSource.fallback for seeded random weights when a run has no checkpoint (BUILTIN is the default)."""

DEFAULT_SIMULATIONS = 400
"""Simulations of `search` when neither the spec nor the caller's context gives a number."""

PathLike = str | os.PathLike[str]

_NETWORK_OPTIONS = {
    "checkpoint": "a step of the run (e.g. 1200) or a checkpoint file; default the run's latest",
    "weights": "a model file (or any checkpoint) outside the run; 'builtin' for the network that ships",
    "run": "the run directory (default: the caller's, else runs/default)",
    "device": "auto, cpu, cuda or cuda:N (default auto)",
}


# --- where the weights come from -------------------------------------------------------


@dataclass(frozen=True)
class NetworkSource:
    """Names a network: a run's latest checkpoint, one of its checkpoints, or a weights file.

    At most one of `checkpoint` (a step number like "1200", or a path) and
    `weights` (a model file or checkpoint, or 'builtin') may be set; with
    neither, the run's latest checkpoint is used. `fallback` says what plays
    when the run has no checkpoint: 'builtin' (the shipped network, when this
    installation has one; else fresh weights) or 'fresh' (seeded random weights).
    """

    run: Path = DEFAULT_RUN_DIR
    checkpoint: str | None = None
    weights: Path | None = None
    fallback: str = BUILTIN


@dataclass
class Network:
    """A loaded network and what it is: `label` ('step 1200', 'fresh weights', 'weights net.pt') for
    people, `tag` ('step1200', 'fresh', 'net') for agent names.

    `step` is the learner step (0 for fresh weights, None for a weights file
    without one); `config` is the run's config when known (its `search`
    section sets the PUCT constants of search agents).
    """

    evaluator: Evaluator
    label: str
    tag: str
    step: int | None
    path: Path | None
    fresh: bool
    config: Config | None = None

    def evaluate(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates compact positions: (logits [B, 4672], values [B]) for each side to move."""
        return self.evaluator.evaluate(planes, scalars)

    def draw_probability(self, board: Board) -> float | None:
        """Returns the network's probability that `board`'s game is drawn, from a 'wdl' value
        head (one extra network call), or None for a scalar head, which has no such output."""
        evaluator = self.evaluator
        if evaluator.config.value_head != "wdl":
            return None
        planes, scalars = _encode([board])
        planes_t, scalars_t = compact_to_torch(planes, scalars, evaluator.device)
        with torch.inference_mode():
            wdl_logits = evaluator.model(planes_t, scalars_t).wdl_logits
        assert wdl_logits is not None
        return float(torch.softmax(wdl_logits.float(), dim=-1)[0, 1])

    @property
    def search_config(self) -> SearchConfig:
        return self.config.search if self.config is not None else SearchConfig()


@dataclass(frozen=True)
class ResolvedSource:
    """A source resolved to a file (None: fresh weights), before anything is loaded.

    `from_run` marks a file of the run (its latest or a step), which must fit
    the run's architecture; `config` is the run's config when it has one.
    """

    path: Path | None
    step: int | None
    config: Config | None
    from_run: bool
    builtin: bool = False  # the path is the built-in network's
    note: str | None = None  # why the built-in network stands in for the run's (said when loading)


def _is_file(path: Path, what: str) -> bool:
    """Checks whether `path` is a file; an unusable path (too long, a symlink loop,
    no permission, ...) is a UserError naming `what` and the system's reason."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False  # a parent of the path is a file
    except OSError as error:
        raise UserError(f"{what} {_shown(path)} cannot be used: {error.strerror or error}") from None
    except ValueError as error:  # an embedded NUL byte
        raise UserError(f"{what} {_shown(path)} cannot be used: {error}") from None
    return path.is_file()


def _shown(path: Path | str, limit: int = 120) -> str:
    """Quotes a path for a message, cut to `limit` characters (a 300-character name is no help)."""
    text = str(path)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _run_config(run: RunDir) -> Config | None:
    """Reads the run's config, or returns None when the run does not exist. Raises UserError if invalid."""
    return run.read_config() if run.exists() else None


def _checkpoint_path(run: RunDir, checkpoint: str) -> tuple[Path, int | None]:
    """Turns `checkpoint=STEP` or `checkpoint=PATH` into a file. Raises UserError if there is none."""
    text = checkpoint.strip()
    if text.isdigit():
        path = run.checkpoints / checkpoint_name(int(text))
        if not path.is_file():
            steps = [step_of(p) for p in complete_files(run.checkpoints, "step_*.pt")]
            have = ", ".join(str(s) for s in steps if s is not None) or "none"
            raise UserError(f"run {run.root} has no checkpoint at step {int(text)} (its checkpoints: {have})")
        return path, int(text)
    path = Path(text).expanduser()
    if not _is_file(path, "checkpoint"):
        raise UserError(f"checkpoint {_shown(text)} is neither a step of run {run.root} nor an existing file")
    return path, step_of(path)


def resolve_source(source: NetworkSource) -> ResolvedSource:
    """Finds the file a source names without loading it (cheap; for checking options early).

    Raises UserError when both checkpoint and weights are given, a named file
    or step does not exist, a path cannot be used at all (too long, a symlink
    loop, no permission: any OSError), or the run's config is invalid.
    """
    if source.checkpoint is not None and source.weights is not None:
        raise UserError("give a network as checkpoint=... or weights=..., not both")
    if source.fallback not in (BUILTIN, FRESH):
        raise UserError(f"fallback must be {BUILTIN!r} or {FRESH!r}, got {source.fallback!r}")
    if is_builtin(source.weights):
        return ResolvedSource(require_builtin(), None, None, from_run=False, builtin=True)
    if source.weights is not None:
        path = Path(source.weights).expanduser()
        if not _is_file(path, "weights file"):
            raise UserError(f"weights file {_shown(source.weights)} does not exist")
        return ResolvedSource(path, step_of(path), None, from_run=False)
    try:
        return _resolve_in_run(source)
    except OSError as error:
        raise UserError(f"run {_shown(source.run)} cannot be used: {error.strerror or error}") from None


def _resolve_in_run(source: NetworkSource) -> ResolvedSource:
    """resolve_source for a run's latest checkpoint or `checkpoint=`; OSErrors pass through."""
    run = RunDir(source.run)
    _is_file(run.root, "run")  # an unusable run path fails here, with the system's reason
    config = _run_config(run)
    if source.checkpoint is not None:
        path, step = _checkpoint_path(run, source.checkpoint)
        if not source.checkpoint.strip().isdigit():  # a file from anywhere: it carries its own config
            return ResolvedSource(path, step, None, from_run=False)
        return ResolvedSource(path, step, config, from_run=True)
    latest = latest_checkpoint(run)
    builtin = builtin_path() if source.fallback == BUILTIN else None
    if latest is None and builtin is not None:
        why = f"run {run.root} has no checkpoint yet" if config is not None else f"run {run.root} does not exist"
        return ResolvedSource(builtin, None, config, from_run=False, builtin=True,
                              note=f"{why}; playing with the built-in network ({builtin})")
    return ResolvedSource(latest, step_of(latest) if latest else 0, config, from_run=True)


def _config_in_file(extra: Mapping[str, Any]) -> Config | None:
    """Reads the run config a learner checkpoint carries, or None (model files carry none)."""
    text = extra.get("config_toml")
    if not isinstance(text, str):
        return None
    try:
        return from_toml(text)
    except UserError:
        return None


def _fresh_model(config: Config) -> AlphaZeroNet:
    """Builds the config's network with weights seeded by learner.seed (global RNGs left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.learner.seed)
        return build_network(config.network)


def load_network(
    source: NetworkSource,
    *,
    device: str | torch.device = "auto",
    warn: TextIO | None = None,
) -> Network:
    """Loads the network a source names onto `device` ('auto' picks CUDA when present).

    A run with no checkpoint yet gives the built-in network (source.fallback
    'builtin', when this installation has one) or freshly initialised weights
    (seeded by the run's learner.seed; the tiny preset's network when the run
    does not exist), and says which on `warn` (default stderr).

    Raises UserError for a missing or corrupt file, an unknown step, an
    architecture that differs from the run's, or an unusable device.
    """
    resolved = resolve_source(source)
    torch_device = device if isinstance(device, torch.device) else pick_device(device)
    if resolved.path is None:
        return _fresh_network(source.run, resolved.config, torch_device, warn)
    expected = resolved.config.network if resolved.from_run and resolved.config is not None else None
    model, extra = load_model(resolved.path, torch_device, expected=expected)
    step = extra.get("step") if isinstance(extra.get("step"), int) else resolved.step
    config = resolved.config if resolved.config is not None else _config_in_file(extra)
    if resolved.note is not None:
        print(f"note: {resolved.note}", file=warn if warn is not None else sys.stderr, flush=True)
    if resolved.builtin:
        label, tag = "built-in network", BUILTIN
    elif step is not None and resolved.from_run:
        label, tag = f"step {step}", f"step{step}"
    else:
        label, tag = f"weights {resolved.path.name}", resolved.path.stem
    return Network(Evaluator(model, torch_device), label, tag, step, resolved.path, False, config)


def _fresh_network(run: Path, config: Config | None, device: torch.device, warn: TextIO | None) -> Network:
    out = warn if warn is not None else sys.stderr
    if config is None:
        config = get_preset(DEFAULT_PRESET)
        where = f"run {run} does not exist"
        what = f"the {DEFAULT_PRESET} preset's network"
    else:
        where = f"run {run} has no checkpoint yet"
        what = "the run's network"
    print(f"warning: {where}; playing with freshly initialised weights ({what}, seed "
          f"{config.learner.seed}), i.e. about as strong as random", file=out, flush=True)
    model = _fresh_model(config)
    return Network(Evaluator(model, device), "fresh weights", "fresh", 0, None, True, config)


class NetworkCache:
    """Shares loaded networks between agents: one load per (source, device).

    Put one in parse_player's context (`networks=NetworkCache()`) so that
    `policy`, `value` and `search:400` of the same checkpoint share one model.
    """

    def __init__(self, *, warn: TextIO | None = None) -> None:
        self._networks: dict[tuple[NetworkSource, str], Network] = {}
        self._warn = warn

    def get(self, source: NetworkSource, device: str = "auto") -> Network:
        """Returns the cached network for (source, device), loading it the first time (see load_network)."""
        key = (source, device)
        if key not in self._networks:
            self._networks[key] = load_network(source, device=device, warn=self._warn)
        return self._networks[key]


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


def _encode(boards: Sequence[Board]) -> tuple[np.ndarray, np.ndarray]:
    planes, scalars = new_batch(len(boards))
    encode_boards(list(boards), planes, scalars)
    return planes, scalars


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


class PolicyAgent(NetworkAgent):
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

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move on each board. Raises ValueError for an unsupported board."""
        if not boards:
            return []
        positions = [to_mcts_board(b) for b in boards]
        logits, values = self.network.evaluate(*_encode(positions))
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
class _Children:
    """The positions after every legal move of every board, flattened; exact values where known."""

    moves: list[list[str]] = field(default_factory=list)   # per board, its legal moves (UCI)
    values: list[list[float]] = field(default_factory=list)  # per board, the mover's value of each move
    pending: list[Board] = field(default_factory=list)     # positions for the network
    slots: list[tuple[int, int]] = field(default_factory=list)  # (board, move) of each pending position


def _expand_children(positions: Sequence[Board]) -> _Children:
    children = _Children()
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
    children = _expand_children([position])
    scores = np.array(children.values[0])  # the mover's exact values: mating +1, drawing 0; NaN for the rest
    scores[scores > 0] = _MATE_SCORE
    for (_, m), child in zip(children.slots, children.pending):
        scores[m] = 0.0 if child.repetition_count() > 1 else value
    # np.lexsort sorts by its last key first; the last index holds the best score, then the highest logit.
    return int(np.lexsort((-np.arange(len(scores)), logits, scores))[-1])


class ValueAgent(NetworkAgent):
    """Plays the move whose resulting position the network likes least for the opponent.

    The positions after every legal move of every board go through the
    network in ONE batch; positions that end the game are scored exactly
    (checkmate +1 for the mover, draws 0) and never reach the network.
    Choice.value is the chosen move's value for the mover; ties go to the
    first legal move.
    """

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move on each board. Raises ValueError for an unsupported board."""
        if not boards:
            return []
        children = _expand_children([to_mcts_board(b) for b in boards])
        if children.pending:
            _, values = self.network.evaluate(*_encode(children.pending))
            for (b, m), value in zip(children.slots, values):
                children.values[b][m] = -float(value)  # the child's side to move is the opponent
        choices = []
        for moves, values in zip(children.moves, children.values):
            best = int(np.argmax(values))
            info = {"nodes": len(moves), "pv": [moves[best]]}
            choices.append(Choice(chess.Move.from_uci(moves[best]), float(values[best]), info))
        return choices


SEARCH_ALGORITHMS = ("puct", "gumbel")


class SearchAgent(NetworkAgent):
    """Searches each board with `simulations` simulations (no noise) and plays the search's best move.

    `algorithm` is 'puct' (the most visited move) or 'gumbel' (Sequential
    Halving's choice, Gumbel scale 0); None takes the network's run config
    (`search.algorithm`), whose `search` section also gives the constants
    (else AlphaZero's defaults). One MultiGameSearch slot per board; every
    step evaluates the leaves of all boards in one network call.
    Choice.value is the root's value for the mover; info holds nodes, the
    principal variation, the move's visits and Q.

    Raises UserError if simulations < 1 or the algorithm is unknown.
    """

    def __init__(self, network: Network, simulations: int, name: str, *, algorithm: str | None = None) -> None:
        if simulations < 1:
            raise UserError(f"search needs at least 1 simulation, got {simulations}")
        if algorithm is not None and algorithm not in SEARCH_ALGORITHMS:
            raise UserError(f"the search algorithm must be one of {', '.join(SEARCH_ALGORITHMS)}, got {algorithm!r}")
        super().__init__(network, name)
        self.simulations = simulations
        self.algorithm = algorithm or network.search_config.algorithm
        self._search: MultiGameSearch | None = None
        self._batch: tuple | None = None

    def _search_for(self, games: int) -> MultiGameSearch:
        # Reused between calls (the trees' memory and the batch arrays, pinned
        # on a GPU, are kept); rebuilt when more games come.
        if self._search is None or self._search.games < games:
            params = search_params(self.network.search_config, ANALYSIS, algorithm=self.algorithm,
                                   simulations=self.simulations)
            self._search = MultiGameSearch(games, params)
            self._batch = self.network.evaluator.pin(self._search.new_batch())
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
        # The legal moves' logits only: on a GPU they are gathered there, ~30 floats a position come back.
        run_search(search, evaluate_legal=self.network.evaluator.evaluate_legal, batch=self._batch)
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

    def close(self) -> None:
        """Frees the search trees."""
        self._search = None
        self._batch = None


# --- the registry ----------------------------------------------------------------------------


def _source_from(options: Mapping[str, str], context: Mapping[str, Any]) -> NetworkSource:
    run = options.get("run") or context.get("run") or DEFAULT_RUN_DIR
    run_path = run.root if isinstance(run, RunDir) else Path(run)
    weights = options.get("weights")
    return NetworkSource(run_path, options.get("checkpoint") or None, Path(weights) if weights else None)


def network_for(options: Mapping[str, str], context: Mapping[str, Any]) -> Network:
    """Gets the network a spec's options name, through the context's cache when there is one.

    Context keys read: `network` (a loaded Network, used when the spec names
    no source), `networks` (a NetworkCache), `run` (default runs/default),
    `device` (default auto).

    Raises UserError as load_network.
    """
    names_source = any(options.get(key) for key in ("checkpoint", "weights", "run"))
    given = context.get("network")
    if given is not None and not names_source and "device" not in options:
        return given
    source = _source_from(options, context)
    device = options.get("device") or context.get("device") or "auto"
    cache = context.get("networks")
    if isinstance(cache, NetworkCache):
        return cache.get(source, str(device))
    return load_network(source, device=str(device))


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


def _make_search(options: dict[str, str], context: Mapping[str, Any], kind: str = "search") -> Agent:
    default = int(context.get("simulations") or DEFAULT_SIMULATIONS)
    simulations = int_option(options, "sims", default)
    assert simulations is not None
    if simulations < 1:
        raise UserError(f"{kind} needs at least 1 simulation, got sims={simulations}")
    algorithm = "gumbel" if kind == "gumbel" else (options.get("algorithm", "").lower() or None)
    if algorithm is not None and algorithm not in SEARCH_ALGORITHMS:
        raise UserError(f"option algorithm={algorithm!r} must be one of {', '.join(SEARCH_ALGORITHMS)}")
    network = network_for(options, context)
    tag = f"{algorithm or kind}:{simulations}"
    return SearchAgent(network, simulations, _display_name(tag, network), algorithm=algorithm)


def _make_gumbel(options: dict[str, str], context: Mapping[str, Any]) -> Agent:
    return _make_search(options, context, kind="gumbel")


NETWORK_PLAYERS = ("policy", "value", "search", "gumbel")
"""The player kinds this module registers."""


def register_network_players(*, replace: bool = False) -> None:
    """Registers `policy`, `value`, `search` and `gumbel` in the player registry (done once at import).

    Raises ValueError if a kind is already registered and replace is False.
    """
    register_player(
        "policy",
        _make_policy,
        help="the network's top-prior legal move, no search; it takes a mate in one and avoids drawing at once "
        "while its value is positive (rules=off: the bare top prior)",
        options={"rules": "on (default) or off", **_NETWORK_OPTIONS},
        replace=replace,
    )
    register_player("value", _make_value, help="the move after which the network rates the opponent worst",
                    options=_NETWORK_OPTIONS, replace=replace)
    register_player(
        "search",
        _make_search,
        help="the network with the run's search (search.algorithm: PUCT or Gumbel), search:400 = 400 simulations",
        options={"sims": f"simulations a move (default {DEFAULT_SIMULATIONS})",
                 "algorithm": "puct or gumbel (default: the run's search.algorithm)", **_NETWORK_OPTIONS},
        positional="sims",
        replace=replace,
    )
    register_player(
        "gumbel",
        _make_gumbel,
        help="the network with Gumbel AlphaZero's search, no noise (gumbel:64 = 64 simulations)",
        options={"sims": f"simulations a move (default {DEFAULT_SIMULATIONS})", **_NETWORK_OPTIONS},
        positional="sims",
        replace=replace,
    )


register_network_players()

__all__ = [
    "DEFAULT_RUN_DIR",
    "DEFAULT_SIMULATIONS",
    "FRESH",
    "NETWORK_PLAYERS",
    "SEARCH_ALGORITHMS",
    "Network",
    "NetworkAgent",
    "NetworkCache",
    "NetworkSource",
    "PolicyAgent",
    "ResolvedSource",
    "SearchAgent",
    "ValueAgent",
    "exact_value",
    "load_network",
    "network_for",
    "register_network_players",
    "resolve_source",
    "to_mcts_board",
]
