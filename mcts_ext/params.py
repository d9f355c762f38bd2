"""The parameters of a MultiGameSearch: every search setting defined once, checked once when it is made.

Every search is built the same way, from one SearchParams (as mctx hands its
search one policy object, not thirty keywords):

    params = SearchParams(simulations=64, autoplay=False, add_noise=False)
    search = MultiGameSearch(games, params, seed=0)

This module is the one definition of each search setting: its name, type,
default, help, range or choices, and the field of the search's C struct it
fills (``setting()`` below). The run's config section ``[search]``
(alphazero.config.SearchConfig) is SearchSettings, the settings a run keeps,
plus how self-play picks its resignation threshold; SearchParams adds what a
mode decides (self-play or analysis, noise, the solver). The search fills its
C ``Options`` struct from ``SearchParams.c_options()``, so a new setting is one
``setting()`` here, its field in ``Options`` (mcts_ext/search.pyx) and its use
in the search: tests/test_params.py fails when the definitions disagree.
Here, and only here, are the rules Gumbel AlphaZero sets (no tree reuse, no
Dirichlet noise, no forced playouts, one leaf per game in self-play).

>>> SearchParams(algorithm="gumbel", simulations=16).algorithm
'gumbel'
>>> SearchParams(algorithm="gumbel", tree_reuse=True)
Traceback (most recent call last):
...
ValueError: algorithm='gumbel' does not reuse trees ...; set tree_reuse=False
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ALGORITHMS = ("puct", "gumbel")
"""The search algorithms: AlphaZero's PUCT, or Gumbel AlphaZero (Sequential Halving at the root)."""

FPU_MODES = ("reduction", "absolute", "action_value", "action_value_reduction")
"""How an unvisited child is valued: its parent's value minus fpu_value (times the square root of the prior mass
already visited), fpu_value itself, the network's action value of its move (2p - 1; the reduction where the
network gave none), or that action value minus the same reduction."""

GUMBEL_UNVISITED = ("mixed", "action_value")
"""Gumbel's completed Q of an unvisited move: the node's one mixed value (mctx), or the network's action value of
the move (the mixed value where the network gave none)."""

C_INT_MAX = 2**31 - 1
"""The largest C ``int``, the type of every integer field of the search's C ``Options`` struct: an integer
setting with no ``maximum`` of its own is bounded by it (``setting()``), so a huge value is refused by name
instead of overflowing where the search fills its struct."""

Q_NORMALISATIONS = ("tree", "node")
"""How Gumbel rescales Q to [0, 1]: by the tree's value range, or by each node's own Q values (mctx)."""

MACHINE_MEMORY_SHARE = 0.5
"""The share of the machine's memory that the trees of the process's searches with tree_memory_mb 0 may take
together (split evenly between those searches: MultiGameSearch), the copy of a kept subtree (tree reuse) counted
in it: the rest is left to the network and the system."""

_CGROUP_LIMITS = (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
"""Where a container's memory limit is read (cgroup v2, v1): a container may have less than the machine."""

ToC = Callable[[Any, "SearchParams"], Any]
"""Turns a setting's value (and the params it belongs to, for values a mode resolves) into its C field's value."""


@dataclass(frozen=True)
class Setting:
    """What the one definition of a search setting says besides its name, type and default.

    ``minimum`` and ``maximum`` bound it (inclusive), ``above`` from below
    (exclusive); a float must also be finite; an integer setting's
    ``maximum`` is C_INT_MAX unless it names its own (``setting()``).
    ``choices`` are the names a string may take; the C field gets the chosen name's index (the C enums
    follow the same order). ``c`` is the field of the search's C ``Options``
    struct it fills ("puct.c_init" for a nested struct's field), None for a
    setting the search reads elsewhere; ``to_c`` converts the value when the C
    field holds something else. ``analysis`` marks the algorithm's constants,
    which analysis searches take from a run's config (alphazero.search).
    """

    doc: str
    minimum: float | None = None
    above: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    c: str | None = None
    to_c: ToC | None = None
    analysis: bool = False

    def problem(self, name: str, value: Any) -> str | None:
        """Gets what is wrong with ``value`` for the setting ``name`` ("simulations must be at least 1, got 0"),
        or None when it is allowed. None values are the caller's to allow or refuse."""
        if value is None:
            return None
        if self.choices and value not in self.choices:
            return f"{name} must be one of {', '.join(map(repr, self.choices))}, got {value!r}"
        if isinstance(value, (bool, str)):
            return None
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name} must be a finite number, got {value}"
        if self.minimum is not None and not value >= self.minimum:
            return f"{name} must be at least {self.minimum:g}, got {value}"
        if self.above is not None and not value > self.above:
            return f"{name} must be above {self.above:g}, got {value}"
        if self.maximum is not None and not value <= self.maximum:
            if self.minimum is not None:
                return f"{name} must lie in [{_shown(self.minimum)}, {_shown(self.maximum)}], got {value}"
            return f"{name} must be at most {_shown(self.maximum)}, got {value}"
        return None


def setting(default: Any, doc: str, **spec: Any) -> Any:
    """Declares a search setting: its default and its Setting (help, range or choices, C field).

    An integer default makes an integer setting, bounded by C_INT_MAX where ``maximum`` names no smaller bound.

    The help is the text a run's config.toml writes above the field (the same
    ``doc`` metadata alphazero.config's sections carry).
    """
    if type(default) is int and spec.get("maximum") is None:  # an integer fills a C int (C_INT_MAX)
        spec["maximum"] = C_INT_MAX
    return dataclasses.field(default=default, metadata={"doc": doc, "setting": Setting(doc, **spec)})


def _shown(bound: float) -> str:
    """Writes a bound for a message: an integer in full (2147483647, not 2.14748e+09), a float as %g."""
    return str(int(bound)) if float(bound).is_integer() and abs(bound) < 2**53 else f"{bound:g}"


def settings_of(cls: Any) -> dict[str, Setting]:
    """Gets the Setting of each search setting of a dataclass (SearchSettings, SearchParams, or a subclass)."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def _choice_index(name: str) -> ToC:
    def index(value: Any, params: SearchParams) -> int:
        return settings_of(SearchParams)[name].choices.index(value)
    return index


def machine_memory_bytes() -> int | None:
    """Gets the memory this process may use: the machine's physical memory, or its container's (cgroup) limit
    when smaller; None when the system does not say."""
    try:
        known = [os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")]
    except (AttributeError, ValueError, OSError):  # no sysconf (Windows) or no such name
        known = []
    for path in _CGROUP_LIMITS:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit():  # "max" (v2) is no limit; v1 says so with a huge number, which min() drops
            known.append(int(text))
    known = [size for size in known if size > 0]
    return min(known) if known else None


def default_tree_memory_bytes() -> int:
    """Gets the bytes the trees of the process's searches with tree_memory_mb 0 may take together (each search
    gets an even share of it): MACHINE_MEMORY_SHARE of machine_memory_bytes(), or 0 (no limit but the trees'
    int32 indices) when that is unknown."""
    machine = machine_memory_bytes()
    return int(machine * MACHINE_MEMORY_SHARE) if machine else 0


def tree_memory_bytes(megabytes: float) -> int:
    """Gets the bytes of a tree_memory_mb setting (MiB; 0: default_tree_memory_bytes())."""
    return int(megabytes * 2**20) if megabytes > 0 else default_tree_memory_bytes()


def resign_options(threshold: float | None) -> dict[str, Any]:
    """Gets the C ``Options`` fields of a resignation threshold (None: nobody resigns; the threshold field then
    holds -2, below every value)."""
    return {"resign": threshold is not None, "resign_threshold": -2.0 if threshold is None else threshold}


def check_resign_threshold(threshold: float | None) -> None:
    """Checks a resignation threshold against its setting (SearchParams.resign_threshold: a root value in
    [-1, 1]), or None for no resignation; for MultiGameSearch.set_resign_threshold, which bypasses SearchParams.

    Raises:
        ValueError: outside the setting's range; the message names resign_threshold.
    """
    problem = settings_of(SearchParams)["resign_threshold"].problem("resign_threshold", threshold)
    if problem is not None:
        raise ValueError(problem)


@dataclass(frozen=True)
class SearchSettings:
    """The settings of a search that a run keeps (its config's ``[search]`` section holds these).

    The defaults are the AlphaZero pseudocode's (PUCT, 800 simulations).
    """

    algorithm: str = setting("puct", "'puct' (AlphaZero) or 'gumbel' (Gumbel AlphaZero: Sequential Halving at "
                                     "the root, improved-policy training targets; needs leaves_per_game = 1)",
                             choices=ALGORITHMS, c="algorithm", to_c=_choice_index("algorithm"), analysis=True)
    simulations: int = setting(800, "simulations per move (the full budget)", minimum=1, c="simulations")
    c_init: float = setting(1.25, "PUCT exploration constant: C(s) = log((1 + N + c_base) / c_base) + c_init",
                            minimum=0.0, c="puct.c_init", analysis=True)
    c_base: float = setting(19652.0, "visit count over which exploration grows (see c_init)", above=0.0,
                            c="puct.c_base", analysis=True)
    dirichlet_alpha: float = setting(0.3, "puct: Dirichlet noise concentration at the root (0.3 for chess)",
                                     above=0.0, c="dirichlet_alpha")
    noise_weight: float = setting(0.25, "share of the root prior replaced by Dirichlet noise", minimum=0.0,
                                  maximum=1.0, c="noise_weight")
    fpu_mode: str = setting("reduction", "puct: value of unvisited children: 'reduction' (parent minus fpu_value), "
                                         "'absolute' (fpu_value), 'action_value' (the network's value of the "
                                         "move, where it gives one: else the reduction) or "
                                         "'action_value_reduction' (that value minus the reduction)",
                            choices=FPU_MODES, c="puct.fpu_mode", to_c=_choice_index("fpu_mode"), analysis=True)
    fpu_value: float = setting(0.25, "first-play urgency: the reduction or the absolute value, by fpu_mode",
                               c="puct.fpu_value", analysis=True)
    policy_temperature: float = setting(1.0, "softmax temperature of the prior: the search's priors are "
                                             "softmax(logits / this) (lc0's PolicyTemperature; > 1 flattens)",
                                        above=0.0, c="inverse_policy_temperature",
                                        to_c=lambda value, params: 1.0 / value, analysis=True)
    # Self-play's move temperature over the whole game (move_temperature below): AlphaZero's rule by default
    # (T = 1 for 30 plies, then the most visited move); the PUCT presets keep a temperature to the game's end.
    temperature_plies: int = setting(30, "puct: plies from the game start whose moves are sampled at "
                                         "`temperature` (AlphaZero: 30); later ones at temperature_endgame, "
                                         "reached at once or by temperature_halflife (gumbel plays Sequential "
                                         "Halving's choice and reads none of the temperature settings)",
                                     minimum=0, c="temperature_plies")
    temperature: float = setting(1.0, "puct: temperature T of the opening's sampling: moves in proportion to "
                                      "visits^(1/T); 0 plays the most visited", minimum=0.0, c="temperature")
    temperature_endgame: float = setting(0.0, "puct: temperature after temperature_plies, to the game's end "
                                              "(lc0's TempEndgame, KataGo's chosenMoveTemperature); 0: the most "
                                              "visited move, as AlphaZero", minimum=0.0, c="temperature_endgame")
    temperature_halflife: float = setting(0.0, "puct: plies in which the temperature's excess over "
                                               "temperature_endgame halves, from temperature_plies on (KataGo's "
                                               "chosenMoveTemperatureHalflife); 0: temperature_endgame at once",
                                          minimum=0.0, c="temperature_halflife")
    temperature_value_cutoff: float = setting(1.0, "puct: a move whose win probability (1 + Q) / 2 lies more than "
                                                   "this below the chosen-by-visits best move's is never sampled "
                                                   "(lc0's TempValueCutoff as a share: its 100 is 1); 1: none "
                                                   "excluded", minimum=0.0, maximum=1.0,
                                              c="temperature_value_cutoff")
    leaves_per_game: int = setting(1, "leaves collected per game per network batch (>1 uses virtual loss)",
                                   minimum=1, c="leaves_per_game")
    virtual_loss: float = setting(1.0, "value subtracted from a path while its leaf awaits evaluation",
                                  minimum=0.0, c="puct.virtual_loss")
    tree_reuse: bool = setting(False, "keep the subtree of the played move for the next search", c="tree_reuse")
    ply_limit: int = setting(512, "plies after which a game is a draw (0 = no limit)", minimum=0, c="ply_limit")
    resign_consecutive: int = setting(3, "consecutive own moves below the threshold before resigning",
                                      minimum=1, c="resign_consecutive")
    resign_disabled_fraction: float = setting(0.1, "share of games played out to measure false resignations",
                                              minimum=0.0, maximum=1.0, c="resign_disabled_fraction")
    playout_cap_fraction: float = setting(0.0, "0 = off; else the share of moves given the full budget "
                                               "(the others use playout_cap_simulations, no training target)",
                                          minimum=0.0, maximum=1.0, c="playout_cap_fraction")
    playout_cap_simulations: int = setting(100, "simulations of the cheap moves when playout_cap_fraction > 0",
                                           minimum=1, c="playout_cap_simulations")
    forced_playouts: float = setting(0.0, "puct: KataGo's forced playouts k (0 = off; KataGo uses 2): at a noisy "
                                          "root a tried move visited fewer than sqrt(k * prior * root visits) "
                                          "times is searched first, and policy target pruning takes such visits "
                                          "back from the training target; gumbel refuses it (its completed-Q "
                                          "target is not a visit distribution)",
                                     minimum=0.0, c="forced_playouts")
    gumbel_considered: int = setting(16, "gumbel: moves sampled at the root by Gumbel-Top-k (at most the legal "
                                         "ones)", minimum=1, c="gumbel.considered", analysis=True)
    gumbel_scale: float = setting(1.0, "gumbel: scale of the root's Gumbel noise (analysis searches use 0, which "
                                       "makes the search deterministic)", minimum=0.0, c="gumbel.scale")
    gumbel_c_visit: float = setting(50.0, "gumbel: sigma(q) = (gumbel_c_visit + most visits) * gumbel_c_scale * q",
                                    minimum=0.0, c="gumbel.c_visit", analysis=True)
    gumbel_c_scale: float = setting(1.0, "gumbel: the scale of sigma (see gumbel_c_visit)", minimum=0.0,
                                    c="gumbel.c_scale", analysis=True)
    gumbel_q_normalisation: str = setting("tree", "gumbel: q rescaled to [0, 1] by the tree's value range ('tree') "
                                                  "or by each node's own Q values ('node', as DeepMind's mctx)",
                                          choices=Q_NORMALISATIONS, c="gumbel.normalisation",
                                          to_c=_choice_index("gumbel_q_normalisation"), analysis=True)
    gumbel_unvisited: str = setting("mixed", "gumbel: completed Q of unvisited moves, in selection and the "
                                             "improved-policy target: 'mixed' (one mixed value, as mctx) or "
                                             "'action_value' (the network's value of each move, where it gives "
                                             "one: else the mixed value)",
                                    choices=GUMBEL_UNVISITED, c="gumbel.unvisited",
                                    to_c=_choice_index("gumbel_unvisited"), analysis=True)

    def move_temperature(self, ply: int) -> float:
        """Gets the temperature of PUCT self-play's move choice at ``ply`` (0: the game's first move).

        ``temperature`` for the first ``temperature_plies`` plies; after them
        ``temperature_endgame``, at once (``temperature_halflife`` 0) or by an
        excess over it that halves every ``temperature_halflife`` plies
        (KataGo's interpolateEarly, cpp/search/searchhelpers.cpp, counted
        from the end of the opening instead of the game's start). The search's
        C twin (mcts_ext/search.pyx, move_temperature) computes the same, in float.

        >>> SearchSettings().move_temperature(29), SearchSettings().move_temperature(30)
        (1.0, 0.0)
        >>> SearchSettings(temperature_endgame=0.5, temperature_halflife=10).move_temperature(40)
        0.75
        """
        if ply < self.temperature_plies:
            return self.temperature
        if self.temperature_halflife <= 0.0:
            return self.temperature_endgame
        excess = self.temperature - self.temperature_endgame
        return self.temperature_endgame + excess * 0.5 ** ((ply - self.temperature_plies) / self.temperature_halflife)


def _noise_on(value: bool | None, params: SearchParams) -> bool:
    return params.autoplay and params.algorithm == "puct" if value is None else value


def _records(value: bool | None, params: SearchParams) -> bool:
    return params.autoplay if value is None else value


@dataclass(frozen=True)
class SearchParams(SearchSettings):
    """What a MultiGameSearch does: a run's settings and what its mode decides.

    ``add_noise`` (Dirichlet noise at full-search roots) and ``record``
    (training samples) default to None, resolved by ``autoplay``: noise for
    PUCT self-play, samples in self-play.

    Raises:
        ValueError: a value out of range, an unknown name, or an option that
            Gumbel AlphaZero cannot honour; the message names the field.
    """

    autoplay: bool = setting(True, "self-play: choose, play and record moves; False: analysis", c="autoplay")
    add_noise: bool | None = setting(None, "Dirichlet noise at the root of full searches; None: on for PUCT "
                                           "self-play", c="add_noise", to_c=_noise_on)
    record: bool | None = setting(None, "keep training samples; None: as autoplay", c="record", to_c=_records)
    visits_per_leaf: float = setting(0.0, ">0 (PUCT): leaves per game and step at most root visits / this (a "
                                          "batch that grows with the tree); 0: always leaves_per_game",
                                     minimum=0.0, c="visits_per_leaf")
    # The threshold in force, from the run's resignation mode (alphazero.search); it fills two C fields
    # (resign_options), which MultiGameSearch.set_resign_threshold changes while games run.
    resign_threshold: float | None = setting(None, "root value (mover's view) below which a move counts towards "
                                                   "resigning; None: nobody resigns", minimum=-1.0, maximum=1.0)
    solver: bool = setting(False, "prove results (mates, forced draws) and search around them", c="solver")
    # The engine's memory option (as lc0's RamLimitMb): a long analysis ends when its tree fills this, keeping
    # its answer (MultiGameSearch.tree_full), instead of outgrowing the machine.
    tree_memory_mb: float = setting(0.0, "MiB the search's trees may take together, split evenly between its "
                                         "games; a tree that fills its share ends that move's search with what it "
                                         "has; 0: half of the machine's memory, shared by every search of the "
                                         "process with 0",
                                    minimum=0.0, maximum=float(2**30), c="tree_memory_bytes",
                                    to_c=lambda value, params: tree_memory_bytes(value))

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is None and f.default is not None:
                raise ValueError(f"{f.name} must be given a value, got None (its default: {f.default!r})")
            problem = f.metadata["setting"].problem(f.name, value)
            if problem is not None:
                raise ValueError(problem)
        if self.playout_cap_fraction > 0 and self.playout_cap_simulations > self.simulations:
            raise ValueError(f"playout_cap_simulations ({self.playout_cap_simulations}) must be at most simulations "
                             f"({self.simulations}) while playout_cap_fraction > 0: the cheap moves search less "
                             f"than the full ones; lower it, or set playout_cap_fraction=0 to search every move alike")
        self._check_gumbel()

    def _check_gumbel(self) -> None:
        """What Gumbel AlphaZero cannot do (the only place these rules live)."""
        if self.algorithm != "gumbel":
            return
        if self.tree_reuse:
            raise ValueError("algorithm='gumbel' does not reuse trees (each move's Sequential Halving starts from "
                             "a fresh root); set tree_reuse=False")
        if self.add_noise:
            raise ValueError("algorithm='gumbel' takes no Dirichlet noise (its Gumbel noise explores); "
                             "leave add_noise unset or False")
        if self.forced_playouts > 0:
            raise ValueError(f"algorithm='gumbel' takes no forced playouts (its training target is the improved "
                             f"policy of completed Qs, not a visit distribution, so forced visits and their "
                             f"pruning do not apply); set forced_playouts=0, got {self.forced_playouts}")
        # Many leaves per game and call (a leaf in flight counts as a visit) serve the UCI engine and are
        # tested in analysis only; self-play keeps Sequential Halving's one leaf.
        if self.autoplay and self.leaves_per_game != 1:
            raise ValueError(f"algorithm='gumbel' in self-play (autoplay) needs leaves_per_game=1 (many leaves "
                             f"per game are for analysis and the UCI engine), got {self.leaves_per_game}")

    def c_options(self) -> dict[str, Any]:
        """Gets the values of the search's C ``Options`` struct, keyed by its field names (a nested struct's as
        a dict), each from its setting's ``c`` and ``to_c``; the resignation fields come from the threshold.

        MultiGameSearch assigns the dict to the struct, which Cython refuses when a field has no value.
        """
        options = resign_options(self.resign_threshold)
        for name, spec in settings_of(type(self)).items():
            if spec.c is None:
                continue
            value = getattr(self, name)
            value = spec.to_c(value, self) if spec.to_c is not None else value
            *outer, field_name = spec.c.split(".")
            table = options
            for part in outer:
                table = table.setdefault(part, {})
            table[field_name] = value
        return options
