"""Targets read off a position's game: the next position's policy (the reply) and the root value some plies on.

Both come from KataGo (Wu 2019, "Accelerating Self-Play Learning in Go";
its later docs/KataGoMethods.md for the short-term values) and are built
when a shard's samples enter the replay window (learner.replay_store.Block.of),
from the shard's own games: a shard holds whole games (alphazero.store.shards),
so a sample's successors are in it. Samples are matched by ``game`` and
``ply``, not by their order in the file.

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
  own value target as v_h, so that s shifts nothing there.

KataGo averages the root values ahead with exponential weights (a horizon
lambda); this takes one fixed horizon, which a test can compute by hand.

Example::

    targets = GameTargets.of(config.learner)        # what the window keeps for the learner's settings
    rows = next_rows(shard.game, shard.ply)         # int64 [S], -1: no next position
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alphazero.config import LearnerConfig
from alphazero.store.shards import Shard, value_targets

__all__ = ["NO_GAME_TARGETS", "GameTargets", "next_rows", "short_term_values"]

_PLY_SPAN = 1 << 32  # game * this + ply orders samples by game, then ply (plies are int16)


@dataclass(frozen=True)
class GameTargets:
    """What the replay window builds for each position beside its own targets (none by default)."""

    reply: bool = False  # the next position's policy (Batch.reply_*)
    short_term_plies: int = 0  # > 0: the root value this many plies on (Batch.short_term)

    @classmethod
    def of(cls, config: LearnerConfig) -> GameTargets:
        """Gets the targets that the learner's settings train (each one's weight > 0)."""
        short = config.value_target_short_term_plies if config.value_target_short_term_weight > 0 else 0
        return cls(reply=config.reply_policy_weight > 0, short_term_plies=short)


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
