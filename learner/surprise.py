"""Policy surprise weighting: KataGo's frequency weights for the positions whose search surprised the network.

KataGo (docs/KataGoMethods.md, "Policy Surprise Weighting"; its g170 run)
writes each self-play position into its training data with a frequency
weight instead of once: of a game's total weight, a share goes to every
position evenly and the rest in proportion to the position's policy
surprise, the KL divergence of its policy target from the prior its search
started from (shards keep it per sample, ``policy_surprise``). A position is
then trained on floor(w) times, and once more with probability w - floor(w).
The mean weight over a game is 1, so the expected number of samples stays
the game's; surprising positions are seen more often at full weight (no
importance correction, as KataGo: the policy only suggests moves to search).

The replay window applies the weights as each shard's training positions
enter it (``copies``), drawing from a generator seeded by the shard's name, so
a restarted learner draws the same copies for the same file.

Example::

    weights = frequency_weights(shard.game, shard.policy_surprise, share=0.5)   # mean 1 per game
    rows = np.repeat(np.arange(len(shard)), copies(weights, shard_rng(name)))
"""

from __future__ import annotations

import zlib

import numpy as np

__all__ = ["copies", "frequency_weights", "shard_rng"]


def frequency_weights(game: np.ndarray, surprise: np.ndarray, share: float) -> np.ndarray:
    """Gets each position's frequency weight (float64 [S]): (1 - share) evenly, ``share`` of its game's total
    in proportion to its surprise; a game whose positions all have surprise 0 keeps weight 1 everywhere.

    >>> frequency_weights(np.array([0, 0, 0, 1]), np.array([0.0, 1.0, 2.0, 5.0]), 0.5).tolist()
    [0.5, 1.0, 1.5, 1.0]

    Raises:
        ValueError: share outside [0, 1], arrays of different lengths, or a surprise below 0 or not finite.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the surprise share must lie in [0, 1], got {share}")
    if game.shape != surprise.shape:
        raise ValueError(f"game and surprise differ in shape: {game.shape} and {surprise.shape}")
    if not np.all(np.isfinite(surprise)) or np.any(surprise < 0):
        raise ValueError("a policy surprise is negative or not finite")
    if len(game) == 0:
        return np.zeros(0)
    _, index, counts = np.unique(game, return_inverse=True, return_counts=True)
    sums = np.bincount(index, weights=surprise.astype(np.float64))
    per_game_mean = sums[index] / counts[index]
    surprised = np.divide(surprise, per_game_mean, out=np.ones(len(game)), where=per_game_mean > 0)
    return (1.0 - share) + share * surprised


def copies(weights: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Gets how many times each position is kept (int64): floor(w), plus one with probability w - floor(w)."""
    whole = np.floor(weights)
    return (whole + (rng.random(len(weights)) < weights - whole)).astype(np.int64)


def shard_rng(name: str) -> np.random.Generator:
    """Gets the generator of a shard's copies: seeded by its file name, the same in every session."""
    return np.random.default_rng(zlib.crc32(name.encode()))
