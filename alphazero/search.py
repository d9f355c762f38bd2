"""The one way into the search: a run's search settings and a mode become one SearchParams.

Every MultiGameSearch of the project is built from a mcts_ext.params.SearchParams.
Self-play, the evaluation agents and the UCI engine get theirs here, from the
run's ``search`` section and what the mode needs:

- ``SELFPLAY``: every field of the config (PUCT or Gumbel, noise, temperature,
  resignation, playout cap), with the resignation threshold in force
  (alphazero.store.resign.threshold_for_actors) instead of search.resign_threshold,
  which only the 'fixed' mode uses.
- ``ANALYSIS`` (the search agents of matches and evaluation): the algorithm and
  its constants, no noise of any kind (Dirichlet off, Gumbel scale 0: the
  search is deterministic), no move temperature (they play the best move; only
  self-play samples), no game-length limit, one leaf per game.
- ``UCI`` (the engine): analysis with ``leaves_per_game`` leaves per network
  call and the solver (proven mates are played and reported).

The run's config is checked the same way when it is read (SearchConfig builds
its self-play parameters), so a setting the search cannot honour is refused
before any actor starts.

>>> from alphazero.config import SearchConfig
>>> params = search_params(SearchConfig(algorithm="gumbel"), ANALYSIS, simulations=64)
>>> (params.algorithm, params.simulations, params.gumbel_scale, params.autoplay)
('gumbel', 64, 0.0, False)
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal

from mcts_ext.params import SearchParams, SearchSettings, settings_of

SearchMode = Literal["selfplay", "analysis", "uci"]
SELFPLAY: SearchMode = "selfplay"
ANALYSIS: SearchMode = "analysis"
UCI: SearchMode = "uci"
MODES: tuple[SearchMode, ...] = (SELFPLAY, ANALYSIS, UCI)

UCI_LEAVES_PER_BATCH = 32
"""The engine's most leaves gathered per network call (virtual loss; its LeavesPerBatch option). Chosen by
equal-time matches against fewer leaves a call: EXPERIMENTS.md, "The UCI engine's batches at equal time"."""

UCI_VISITS_PER_LEAF = 8.0
"""The engine's batch grows with its tree: at most (root visits / this) leaves a network call, up to
UCI_LEAVES_PER_BATCH (mcts_ext.params.SearchParams.visits_per_leaf), because virtual loss spreads a large
batch over moves a small tree would not try. Chosen by equal-time matches of 8, 16 and 32 and a full batch
from the first call: EXPERIMENTS.md, "The UCI engine's batches at equal time"."""

_ANALYSIS_FIELDS = tuple(name for name, spec in settings_of(SearchSettings).items() if spec.analysis)
"""The settings analysis takes from the run's config: the algorithm and its constants (no noise, no game rules)."""


def _float_or_nan(text: str) -> float:
    """The number ``text`` spells, or NaN (which every range check refuses)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _parse_setting(name: str, text: str, what: str) -> float:
    """Reads the number ``text`` for the search setting ``name``, within the range its one definition holds
    (mcts_ext.params.SearchParams); ``what`` names it for the message.

    Raises:
        ValueError: not a number the setting allows; the message quotes it.
    """
    problem = settings_of(SearchParams)[name].problem(name, _float_or_nan(text))
    if problem is not None:
        raise ValueError(f"{what}: {problem.rsplit(', got ', 1)[0]}, got {text!r}")
    return float(text)


def parse_policy_temperature(text: str) -> float:
    """Reads a softmax temperature of the prior (a player's ``ptemp``, the engine's PolicyTemperature), in the
    range of the setting policy_temperature.

    Raises:
        ValueError: not a number policy_temperature allows (positive, finite); the message quotes it.
    """
    return _parse_setting("policy_temperature", text, "the prior's softmax temperature")


def parse_cpuct(text: str) -> float:
    """Reads PUCT's exploration constant c_init (the engine's CPuct, a ``uci`` player's ``cpuct``), in the range
    of the setting c_init.

    Raises:
        ValueError: not a number c_init allows (finite, >= 0); the message quotes it.
    """
    return _parse_setting("c_init", text, "PUCT's exploration constant")


def search_params(config: SearchSettings, mode: SearchMode, *, algorithm: str | None = None,
                  simulations: int | None = None, leaves_per_game: int | None = None,
                  resign_threshold: float | None = None, policy_temperature: float | None = None,
                  visits_per_leaf: float | None = None, c_init: float | None = None) -> SearchParams:
    """Gets the parameters of a search in ``mode`` for a run whose search section is ``config``
    (alphazero.config.SearchConfig, or any SearchSettings).

    ``algorithm``, ``simulations``, ``policy_temperature`` and ``c_init``
    replace the config's (an agent's ``search:64,algorithm=puct,ptemp=2``,
    the engine's CPuct);
    ``leaves_per_game`` and ``visits_per_leaf`` are the UCI engine's
    LeavesPerBatch and VisitsPerLeaf (analysis takes one leaf);
    ``resign_threshold`` is self-play's threshold in force (None: nobody
    resigns).

    Raises:
        ValueError: an unknown mode, or parameters the search refuses (mcts_ext.params.SearchParams).
    """
    if mode not in MODES:
        raise ValueError(f"the search mode must be one of {', '.join(MODES)}, got {mode!r}")
    fields: dict[str, Any]
    if mode == SELFPLAY:
        fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(SearchSettings)}
        fields["resign_threshold"] = resign_threshold
    else:
        fields = {name: getattr(config, name) for name in _ANALYSIS_FIELDS}
        fields.update(autoplay=False, add_noise=False, gumbel_scale=0.0, ply_limit=0, temperature=0.0)
        if mode == UCI:
            fields["solver"] = True
            fields["visits_per_leaf"] = UCI_VISITS_PER_LEAF
    if algorithm is not None:
        fields["algorithm"] = algorithm
    if simulations is not None:
        fields["simulations"] = simulations
    if leaves_per_game is not None:
        fields["leaves_per_game"] = leaves_per_game
    if visits_per_leaf is not None:
        fields["visits_per_leaf"] = visits_per_leaf
    if policy_temperature is not None:
        fields["policy_temperature"] = policy_temperature
    if c_init is not None:
        fields["c_init"] = c_init
    return SearchParams(**fields)
