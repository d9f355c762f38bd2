"""Engine scores as win probabilities: Lichess's logistic of centipawns, a mate as certain.

A score from the mover's point of view (``chess.engine.Score``: centipawns or
a mate) becomes the mover's win probability, as Lichess turns centipawns into
one: ``w = 1/2 + 1/2 * (2 / (1 + exp(-WIN_SLOPE * cp)) - 1)``; a mate for the
mover is 1, against it 0. A value target in [-1, 1] is ``2 w - 1``. Stockfish
labels (learner.labels) and engine evaluations in PGN comments
(alphazero.chess.pgn_reader) both use it. (eval.scores is another mapping:
the network's value to the centipawns our UCI engine reports, lc0's.)

Example::

    >>> import chess.engine
    >>> win_probability(chess.engine.Cp(0))
    0.5
    >>> round(win_probability(chess.engine.Cp(100)), 3), win_probability(chess.engine.Mate(-3))
    (0.591, 0.0)
    >>> win_probability(chess.engine.Cp(-999_900)), win_probability(chess.engine.Cp(999_900))
    (0.0, 1.0)
"""

from __future__ import annotations

import math

import chess.engine

__all__ = ["WIN_SLOPE", "win_probability"]

WIN_SLOPE = 0.00368208  # Lichess's centipawn-to-win-probability slope


def win_probability(score: chess.engine.Score) -> float:
    """Gets the mover's win probability in [0, 1] of a score from the mover's view (Lichess's formula)."""
    if score.is_mate():
        # Mate(n > 0) and MateGiven (the mover has mated) are wins; Mate(-n) and Mate(0) (the mover is mated) losses.
        return 1.0 if score > chess.engine.Cp(0) else 0.0
    centipawns = score.score()
    assert centipawns is not None
    # The formula is the logistic 1 / (1 + exp(-x)); written so that exp never overflows, whatever an engine's
    # comment claims (TCEC's archive holds evaluations of thousands of pawns).
    x = WIN_SLOPE * centipawns
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    odds = math.exp(x)
    return odds / (1.0 + odds)
