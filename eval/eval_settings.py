"""How big an evaluation is: EvalSettings, the run's eval section as `full` or a CPU's `quick` one.

`alphazero eval` (eval.evaluate) plays by these settings and writes them
beside its games (SETTINGS_FILE), so that `alphazero curve` takes in the
games that fit its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from alphazero.config import EvalConfig
from alphazero.errors import UserError
from eval.match import DEFAULT_CONCURRENCY

QUICK_GAMES_PER_PAIR = 4
QUICK_START_SEARCH_GAMES = 16  # enough to show a collapse of the search; the policy's cheaper twin match is finer
QUICK_SIMULATIONS = 64
QUICK_PLY_LIMIT = 200
FULL_PLY_LIMIT = 512
SETTINGS_FILE = "settings.json"
"""In each step's folder of match records (run/eval/step_S/): the EvalSettings its games were played with."""


@dataclass(frozen=True)
class EvalSettings:
    """How big an evaluation is.

    `games_per_pair` is rounded up to even (each opening with both colours);
    `stockfish_depth`, when set, replaces the calibrated default search limit
    of the Stockfish levels (for tests; the anchors keep their UCI_Elo).
    `start_*_games` size each agent's twin match against the run's step-0
    network (0: that twin does not play); `fall_margin` is the Elo below the
    start at which an agent has fallen. `rungs` are ladder rungs (player specs
    of eval.ladder) that play as anchors at their calibrated Elo, usually the
    ones nearest the network (eval.ladder.Ladder.nearest).
    """

    games_per_pair: int
    simulations: int
    stockfish_elos: tuple[int, ...]
    stockfish_depth: int | None = None
    include_random: bool = True
    ply_limit: int = FULL_PLY_LIMIT
    concurrency: int = DEFAULT_CONCURRENCY
    seed: int = 0
    start_policy_games: int = 0
    start_value_games: int = 0
    start_search_games: int = 0
    fall_margin: float = 100.0
    openings: str | None = None  # an opening book (EPD, PGN or the suite's format); None: the suite
    openings_order: str = "sequential"
    rungs: tuple[str, ...] = ()

    @classmethod
    def full(cls, config: EvalConfig) -> EvalSettings:
        """Returns the run's eval section as settings: config.eval.games per pair, its simulations and levels,
        and every agent's twin match against the start over config.eval.start_games."""
        games = config.start_games
        return cls(config.games, config.simulations, tuple(config.stockfish_elos), start_policy_games=games,
                   start_value_games=games, start_search_games=games, fall_margin=config.fall_margin)

    @classmethod
    def quick(cls, config: EvalConfig, rungs: tuple[str, ...] = ()) -> EvalSettings:
        """Returns settings for a CPU: 4 games per pair, 64 simulations, 200 plies, and as anchors the ladder's
        `rungs` when given, else the lowest Stockfish level; the policy's twin match over
        config.eval.start_games, the search's over QUICK_START_SEARCH_GAMES."""
        elos = (min(config.stockfish_elos),) if config.stockfish_elos and not rungs else ()
        return cls(QUICK_GAMES_PER_PAIR, QUICK_SIMULATIONS, elos, ply_limit=QUICK_PLY_LIMIT,
                   start_policy_games=config.start_games,
                   start_search_games=min(QUICK_START_SEARCH_GAMES, config.start_games),
                   fall_margin=config.fall_margin, rungs=rungs)

    def check(self) -> None:
        """Raises UserError on a value out of range."""
        if self.games_per_pair < 1:
            raise UserError(f"games per pair must be at least 1, got {self.games_per_pair}")
        if self.simulations < 1:
            raise UserError(f"simulations must be at least 1, got {self.simulations}")
        if self.ply_limit < 1 or self.concurrency < 1:
            raise UserError(f"ply limit and concurrency must be at least 1, got {self.ply_limit}, {self.concurrency}")
        if len(set(self.stockfish_elos)) != len(self.stockfish_elos):
            raise UserError(f"Stockfish levels repeat: {list(self.stockfish_elos)}")
        if len(set(self.rungs)) != len(self.rungs):
            raise UserError(f"ladder rungs repeat: {list(self.rungs)}")
        if min(self.start_policy_games, self.start_value_games, self.start_search_games) < 0:
            raise UserError("games against the start must be 0 or more")
