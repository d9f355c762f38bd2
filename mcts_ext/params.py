"""The parameters of a MultiGameSearch: one frozen object, checked once when it is made.

Every search is built the same way, from one SearchParams (as mctx hands its
search one policy object, not thirty keywords):

    params = SearchParams(simulations=64, autoplay=False, add_noise=False)
    search = MultiGameSearch(games, params, seed=0)

The run's config becomes a SearchParams in one place (alphazero.search.search_params,
for self-play, analysis or the UCI engine); benchmarks and tests make their own.
The search copies the values into its C struct and does not check them again.
Here, and only here, are the rules Gumbel AlphaZero sets (no tree reuse, no
Dirichlet noise, one leaf per game in self-play).

>>> SearchParams(algorithm="gumbel", simulations=16).algorithm
'gumbel'
>>> SearchParams(algorithm="gumbel", tree_reuse=True)
Traceback (most recent call last):
...
ValueError: algorithm='gumbel' does not reuse trees ...; set tree_reuse=False
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ALGORITHMS = ("puct", "gumbel")
"""The search algorithms: AlphaZero's PUCT, or Gumbel AlphaZero (Sequential Halving at the root)."""

FPU_MODES = ("reduction", "absolute")
"""How an unvisited child is valued: its parent's value minus fpu_value, or fpu_value itself."""

Q_NORMALISATIONS = ("tree", "node")
"""How Gumbel rescales Q to [0, 1]: by the tree's value range, or by each node's own Q values (mctx)."""


def check_resign_threshold(threshold: float | None) -> None:
    """Checks a resignation threshold: a root value in [-1, 1], or None for no resignation.

    Raises:
        ValueError: outside [-1, 1].
    """
    if threshold is not None and not -1.0 <= threshold <= 1.0:
        raise ValueError(f"need -1 <= resign_threshold <= 1 (or None), got {threshold}")


@dataclass(frozen=True)
class SearchParams:
    """What a MultiGameSearch does: the algorithm and its constants, noise, temperature, game rules, recording.

    The defaults are the AlphaZero pseudocode's (PUCT, 800 simulations). Three
    fields default to None, resolved by ``autoplay``: ``add_noise`` (Dirichlet
    noise at full-search roots: on for PUCT self-play), ``record`` (training
    samples: on in self-play) and ``gumbel_scale`` (1 in self-play, 0 in
    analysis, which makes Gumbel deterministic).

    Raises:
        ValueError: a value out of range, an unknown name, or an option that
            Gumbel AlphaZero cannot honour; the message names the field.
    """

    algorithm: str = "puct"                 # 'puct' or 'gumbel'
    simulations: int = 800                  # budget per move (full search)
    # PUCT: C(s) = log((1 + N + c_base) / c_base) + c_init
    c_init: float = 1.25
    c_base: float = 19652.0
    fpu_mode: str = "reduction"             # see FPU_MODES
    fpu_value: float = 0.25
    policy_temperature: float = 1.0         # priors = softmax(logits / this) (lc0's PolicyTemperature)
    # Dirichlet noise at the root of full searches (PUCT)
    dirichlet_alpha: float = 0.3
    noise_weight: float = 0.25
    add_noise: bool | None = None           # None: on for PUCT self-play (autoplay)
    # PUCT self-play: the first temperature_plies moves are sampled by visits^(1/temperature)
    temperature_plies: int = 30
    temperature: float = 1.0
    leaves_per_game: int = 1                # leaves gathered per game and step; >1 uses virtual loss
    virtual_loss: float = 1.0
    visits_per_leaf: float = 0.0            # >0 (PUCT): leaves per game and step at most root visits / this (a
                                            # batch that grows with the tree); 0: always leaves_per_game
    tree_reuse: bool = False                # keep the played move's subtree as the next root
    ply_limit: int | None = 512             # game length (plies) that ends in a draw; None: none
    autoplay: bool = True                   # self-play: choose, play and record moves; False: analysis
    record: bool | None = None              # training samples; None: as autoplay
    # Resignation (self-play): resign_consecutive moves in a row below the threshold resign the game
    resign_threshold: float | None = None   # None: nobody resigns
    resign_consecutive: int = 3
    resign_disabled_fraction: float = 0.1   # games played through regardless, to measure false positives
    # Playout cap randomisation (KataGo): only this fraction of moves get the full budget
    playout_cap_fraction: float = 0.0
    playout_cap_simulations: int = 100      # budget of the other, cheap moves (no noise, no sample)
    solver: bool = False                    # prove results (mates, forced draws) and search around them
    # Gumbel AlphaZero (gumbel.pxd)
    gumbel_considered: int = 16             # moves sampled at the root by Gumbel-Top-k
    gumbel_scale: float | None = None       # scale of the root's Gumbel noise; None: 1 in self-play, 0 in analysis
    gumbel_c_visit: float = 50.0            # sigma(q) = (c_visit + max N) * c_scale * q
    gumbel_c_scale: float = 1.0
    gumbel_q_normalisation: str = "tree"    # see Q_NORMALISATIONS

    def __post_init__(self) -> None:
        self._check_budgets()
        self._check_constants()
        check_resign_threshold(self.resign_threshold)
        self._check_gumbel()

    def _check_budgets(self) -> None:
        if self.simulations < 1:
            raise ValueError(f"simulations must be at least 1, got {self.simulations}")
        if self.leaves_per_game < 1:
            raise ValueError(f"leaves_per_game must be at least 1, got {self.leaves_per_game}")
        if not self.visits_per_leaf >= 0.0:
            raise ValueError(f"visits_per_leaf must be at least 0, got {self.visits_per_leaf}")
        if not 0.0 <= self.playout_cap_fraction <= 1.0 or self.playout_cap_simulations < 1:
            raise ValueError(f"need 0 <= playout_cap_fraction <= 1 and playout_cap_simulations >= 1, "
                             f"got {self.playout_cap_fraction} and {self.playout_cap_simulations}")
        if self.ply_limit is not None and self.ply_limit < 1:
            raise ValueError(f"ply_limit must be at least 1 or None, got {self.ply_limit}")
        if self.resign_consecutive < 1:
            raise ValueError(f"resign_consecutive must be at least 1, got {self.resign_consecutive}")
        if not 0.0 <= self.resign_disabled_fraction <= 1.0:
            raise ValueError(f"resign_disabled_fraction must be in [0, 1], got {self.resign_disabled_fraction}")

    def _check_constants(self) -> None:
        if self.fpu_mode not in FPU_MODES:
            raise ValueError(f"fpu_mode must be 'reduction' or 'absolute', got {self.fpu_mode!r}")
        if self.c_base <= 0 or self.c_init < 0:
            raise ValueError(f"need c_base > 0 and c_init >= 0, got c_base={self.c_base}, c_init={self.c_init}")
        if not 0.0 <= self.noise_weight <= 1.0 or self.dirichlet_alpha <= 0:
            raise ValueError(f"need 0 <= noise_weight <= 1 and dirichlet_alpha > 0, "
                             f"got {self.noise_weight} and {self.dirichlet_alpha}")
        if not 0.0 < self.policy_temperature < math.inf:
            raise ValueError(f"policy_temperature must be positive and finite, got {self.policy_temperature}")
        if self.temperature < 0 or self.temperature_plies < 0:
            raise ValueError(f"temperature and temperature_plies must be >= 0, got {self.temperature}, "
                             f"{self.temperature_plies}")

    def _check_gumbel(self) -> None:
        """The Gumbel constants, and what Gumbel AlphaZero cannot do (the only place these rules live)."""
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be 'puct' or 'gumbel', got {self.algorithm!r}")
        if self.gumbel_q_normalisation not in Q_NORMALISATIONS:
            raise ValueError(f"gumbel_q_normalisation must be 'tree' or 'node', got {self.gumbel_q_normalisation!r}")
        scale = self.gumbel_scale
        if (self.gumbel_considered < 1 or (scale is not None and not 0.0 <= scale < math.inf)
                or self.gumbel_c_visit < 0 or self.gumbel_c_scale < 0):
            raise ValueError(f"need gumbel_considered >= 1 and gumbel_scale, gumbel_c_visit, gumbel_c_scale >= 0, "
                             f"got {self.gumbel_considered}, {scale}, {self.gumbel_c_visit} and "
                             f"{self.gumbel_c_scale}")
        if self.algorithm != "gumbel":
            return
        if self.tree_reuse:
            raise ValueError("algorithm='gumbel' does not reuse trees (each move's Sequential Halving starts from "
                             "a fresh root); set tree_reuse=False")
        if self.add_noise:
            raise ValueError("algorithm='gumbel' takes no Dirichlet noise (its Gumbel noise explores); "
                             "leave add_noise unset or False")
        # Many leaves per game and call (a leaf in flight counts as a visit) came for the UCI engine
        # (issue 24) and are tested in analysis only; self-play keeps Sequential Halving's one leaf.
        if self.autoplay and self.leaves_per_game != 1:
            raise ValueError(f"algorithm='gumbel' in self-play (autoplay) needs leaves_per_game=1 (many leaves "
                             f"per game are for analysis and the UCI engine), got {self.leaves_per_game}")
