"""Maps values in [-1, 1] to centipawns and back: the one place that does.

A value is an expected game result for the side to move, -1 (loss) to +1 (win).
Engines and GUIs speak centipawns. We use Leela Chess Zero's published mapping
(lc0 `src/mcts/search.cc`, "Q to centipawns"):

    cp = 111.714640912 * tan(1.5620688421 * q)
    q  = atan(cp / 111.714640912) / 1.5620688421

so q = 0.5 is about +111 cp, q = 0.9 about +671 cp, and q = 1 exactly +12 800 cp.
`1.5620688421` is a little below pi/2, so tan stays finite at |q| = 1.
Values are clipped to [-1, 1] before mapping; centipawns beyond the image of
|q| = 1 map to +-1. Mate scores map to +-1.

Example::

    >>> round(value_to_centipawns(0.5), 1)
    110.7
    >>> round(centipawns_to_value(100.0), 3)
    0.467
"""

from __future__ import annotations

import math

import chess.engine

CP_SCALE = 111.714640912
"""lc0's centipawn scale: the score where tan's argument is pi/4 (q near 0.503)."""

Q_SCALE = 1.5620688421
"""Slightly below pi/2, so that |q| = 1 maps to a finite score."""

MAX_CENTIPAWNS = CP_SCALE * math.tan(Q_SCALE)
"""Centipawns for q = 1 (12 800: lc0 fitted the constants so)."""

_MATE_SCORE = 1_000_000  # any score above MAX_CENTIPAWNS; only its sign is used


def _clip(x: float, low: float, high: float) -> float:
    return min(max(x, low), high)


def value_to_centipawns(q: float) -> float:
    """Converts a value in [-1, 1] to centipawns (lc0's formula); clips q to [-1, 1] first.

    Returns a float; round it for UCI's integer `score cp`. Raises ValueError on NaN.
    """
    if math.isnan(q):
        raise ValueError("value is NaN")
    return CP_SCALE * math.tan(Q_SCALE * _clip(q, -1.0, 1.0))


def centipawns_to_value(cp: float) -> float:
    """Converts centipawns to a value in [-1, 1] (the inverse of value_to_centipawns).

    Scores beyond +-MAX_CENTIPAWNS (the image of q = +-1) map to +-1.
    Raises ValueError on NaN.
    """
    if math.isnan(cp):
        raise ValueError("centipawns is NaN")
    return _clip(math.atan(cp / CP_SCALE) / Q_SCALE, -1.0, 1.0)


def value_to_wdl(q: float, draw: float | None = None) -> tuple[int, int, int]:
    """Converts a value in [-1, 1] and a draw probability to (win, draw, loss) per mille, summing to 1000.

    The expected result q = W - L is kept exactly (up to rounding); the draw
    share is `draw` (a 'wdl' network's draw probability), cut to what q leaves
    room for (at most 1 - |q|): W = (1 - D + q) / 2, L = (1 - D - q) / 2. With
    no draw probability (a scalar value head says nothing about draws) D = 0,
    as lc0 does for such networks: W = (1 + q) / 2, L = (1 - q) / 2.
    Raises ValueError on NaN.

    >>> value_to_wdl(0.5), value_to_wdl(0.0, 0.6), value_to_wdl(0.9, 0.6)
    ((750, 0, 250), (200, 600, 200), (900, 100, 0))
    """
    if math.isnan(q) or (draw is not None and math.isnan(draw)):
        raise ValueError("value or draw probability is NaN")
    q = _clip(q, -1.0, 1.0)
    d = _clip(draw, 0.0, 1.0 - abs(q)) if draw is not None else 0.0
    win = round(500 * (1.0 - d + q))
    loss = min(round(500 * (1.0 - d - q)), 1000 - win)
    return win, 1000 - win - loss, loss


def score_to_value(score: chess.engine.Score) -> float:
    """Converts a python-chess engine score (from the side to move's view) to a value.

    A mate for the side to move (including `MateGiven`) is +1, being mated is -1;
    centipawns go through centipawns_to_value. Use `PovScore.relative` to get
    the side to move's view of an engine's `info["score"]`.
    """
    if score.is_mate():
        return 1.0 if score.score(mate_score=_MATE_SCORE) > 0 else -1.0
    cp = score.score()
    assert cp is not None  # not a mate, so a centipawn score
    return centipawns_to_value(float(cp))
