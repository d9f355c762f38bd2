"""Targets read off a position's game: the next position's policy (the reply), the root value some plies on, and
the plies left in the game.

The first two come from KataGo (Wu 2019, "Accelerating Self-Play Learning in
Go"; its later docs/KataGoMethods.md for the short-term values), the third
from lc0. All are built when a shard's samples enter the replay window
(learner.replay_store.Block.of), from the shard's own games: a shard holds
whole games (alphazero.store.shards), so a sample's successors are in it.
Samples are matched by ``game`` and ``ply``, not by their order in the file.

- **Reply** (``next_rows``; the learner's ``reply_policy_weight``): the
  policy target of position p of a game is kept beside it as the target of
  network.reply_policy_head: the sample of the same game at ply p + 1, the
  position after the move played, whose search policy is the opponent's
  reply. Its policy indices are left as the shard has them, in the next
  mover's frame (the board flipped for the side to move then): the head
  learns to answer in that frame, and the loss's softmax runs over that
  position's legal moves. A position without a next sample (the game's last,
  or one whose next position was not written: a cheap move of playout cap
  randomisation) has no target and no term in the loss.
- **Short-term value** (``short_term_values``; ``value_target_short_term_weight``
  s and ``value_target_short_term_plies`` h): the search's root value h plies
  on in the same game, from the position's mover's side: root values are the
  mover's at each ply, so the value at ply p + k is negated for odd k. Where
  the sample at ply p + h was not written, the game's first sample after it
  is taken (its own sign). Where the game has no sample that far on (it ended
  before, or its last plies were not written), the target falls back to the
  position's value target, the game's result for its mover. The value target
  is then (1 - w - s) z + w q + s v_h (learner.trainer). Shards whose value
  target is not the game's result (Stockfish's labels, VALUE_NONE) take their
  own value target as v_h, so that s shifts nothing there. KataGo averages
  the root values ahead with exponential weights (a horizon lambda); this
  takes one fixed horizon, which a test can compute by hand.
- **Moves left** (``plies_left``; lc0's moves-left head, the learner's
  ``moves_left_weight``): the plies from the position to its game's end,
  the game's recorded length (its record's ``plies``, the moves played)
  less the position's ply. The position before the move that ends the game
  (a mate, a draw by rule) has 1; a position where a side resigned has 0
  (self-play writes the resigning side's searched position, then the game
  ends without a move). A resigned game counts to the resignation and a
  game cut at the ply limit (a draw by adjudication) to the cut, as its
  record has them: neither is how long the game would have gone on, which
  nobody knows. (lc0 counts to the same end, plus its search's moves-left
  estimate at the last written position, its ``best_m``; our search has
  none.) A game without a recorded end has no target (NaN: masked out of
  the loss): a record without ``plies`` (synthetic shards) or one that a
  labeller cut (termination "label": Stockfish's labelling games stopped at
  pretrain.game_plies or a chunk's end, segments of position files). PGN
  games count to their recorded end, as resigned self-play games do.

Example::

    targets = GameTargets.of(config.learner)        # what the window keeps for the learner's settings
    rows = next_rows(shard.game, shard.ply)         # int64 [S], -1: no next position
    left = plies_left(shard)                        # float32 [S], NaN: no target
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from alphazero.config import LearnerConfig
from alphazero.store.shards import Shard, value_targets

__all__ = ["NO_GAME_TARGETS", "GameTargets", "next_rows", "plies_left", "short_term_values"]

_PLY_SPAN = 1 << 32  # game * this + ply orders samples by game, then ply (plies are int16)
_CUT = "label"  # the termination of a game that a labeller stopped (learner.label_games): no end of its own


@dataclass(frozen=True)
class GameTargets:
    """What the replay window builds for each position beside its own targets (none by default)."""

    reply: bool = False  # the next position's policy (Batch.reply_*)
    short_term_plies: int = 0  # > 0: the root value this many plies on (Batch.short_term)
    moves_left: bool = False  # the plies left in the game (Batch.moves_left)

    @classmethod
    def of(cls, config: LearnerConfig) -> GameTargets:
        """Gets the targets that the learner's settings train (each one's weight > 0)."""
        short = config.value_target_short_term_plies if config.value_target_short_term_weight > 0 else 0
        return cls(reply=config.reply_policy_weight > 0, short_term_plies=short,
                   moves_left=config.moves_left_weight > 0)


NO_GAME_TARGETS = GameTargets()
"""Neither target: what the replay window builds unless asked."""


def _by_game_and_ply(game: np.ndarray, ply: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gets the samples' order by game, then ply, and each one's key game * _PLY_SPAN + ply in that order."""
    order = np.lexsort((ply, game))
    keys = game[order].astype(np.int64) * _PLY_SPAN + ply[order].astype(np.int64)
    return order, keys


def next_rows(game: np.ndarray, ply: np.ndarray) -> np.ndarray:
    """Gets each sample's next position: the row of its game's sample at the next ply, -1 where there is none.

    >>> next_rows(np.array([0, 0, 0, 1, 1]), np.array([0, 1, 3, 0, 1])).tolist()
    [1, -1, -1, 4, -1]
    """
    order, keys = _by_game_and_ply(game, ply)
    follows = keys[1:] == keys[:-1] + 1  # the same game, one ply on
    out = np.full(len(game), -1, np.int64)
    out[order[:-1][follows]] = order[1:][follows]
    return out


def short_term_values(shard: Shard, plies: int) -> np.ndarray:
    """Gets each sample's short-term value target (float32 [S], see the module docstring): the root value
    ``plies`` on in its game for its mover, else its own value target (NaN where it has none).

    Raises:
        ValueError: plies < 1.
    """
    if plies < 1:
        raise ValueError(f"the short-term value's horizon must be at least 1 ply, got {plies}")
    fallback = np.asarray(value_targets(shard), np.float32)
    if shard.meta.get("value_target") is not None or not len(shard):
        return fallback.copy()
    order, keys = _by_game_and_ply(shard.game, shard.ply)
    ahead = np.searchsorted(keys, keys + min(plies, _PLY_SPAN // 2))  # the first sample that far on, or later
    found = ahead < len(keys)
    ahead = np.minimum(ahead, len(keys) - 1)
    found &= keys[ahead] // _PLY_SPAN == keys // _PLY_SPAN  # ... in the same game
    sign = np.where((keys[ahead] - keys) % 2 == 0, 1.0, -1.0).astype(np.float32)
    values = sign * np.clip(shard.root_values[order[ahead]], -1.0, 1.0)
    out = np.empty(len(shard), np.float32)
    out[order] = np.where(found, values, fallback[order])
    return out


def _recorded_length(game: Mapping[str, Any]) -> float:
    """Gets a game's length in plies from its record, NaN where it has no end of its own (see plies_left)."""
    plies = game.get("plies")
    if game.get("termination") == _CUT or not isinstance(plies, int) or isinstance(plies, bool):
        return float("nan")
    return float(plies)


def plies_left(shard: Shard) -> np.ndarray:
    """Gets each sample's moves-left target (float32 [S], see the module docstring): its game's recorded length
    less its ply, NaN where the game has no recorded end (or a record shorter than the sample's ply).

    A game mated after 3 plies gives its samples at plies 0, 1, 2 the targets
    3, 2, 1; a game resigned after 2 plies (the resigning side's position at
    ply 2 written too) gives its samples at plies 0, 1, 2 the targets 2, 1, 0.
    """
    lengths = np.array([_recorded_length(game) for game in shard.games] or [np.nan], np.float64)
    left = lengths[shard.game] - shard.ply.astype(np.float64)
    return np.where(left >= 0, left, np.nan).astype(np.float32)  # NaN stays NaN (its comparison is False)
