"""Label targets: Stockfish's win probabilities for a position's moves, turned into the policy a network learns.

The policy target is a softmax of w / ``pretrain.temperature`` over the moves
Stockfish scored (0: all on the best move); moves it left unscored get 0.
Every mate has w = 1, so w alone cannot tell a mate in one from a mate in
nine: a mate in N < ``MATE_HORIZON`` moves gets ``pretrain.mate_preference``
x (MATE_HORIZON - N) more logits (and being mated in N as many fewer), so the
policy learns to finish a won game, not to wander among winning moves until a
repetition or a stalemate ends it. learner.labels says what else a labelled
position holds.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MATE_HORIZON", "mate_bonus", "policy_target"]

MATE_HORIZON = 10  # mates in this many moves or more count as plain wins in the policy target


def mate_bonus(mates: np.ndarray, preference: float) -> np.ndarray:
    """Gets the logits each move's mate distance adds to its policy logit.

    ``mates`` holds Stockfish's mate distance in moves for each move (N > 0:
    the mover mates in N; N < 0: the mover is mated in -N; 0: no mate found).
    A mate in N < MATE_HORIZON gets ``preference`` x (MATE_HORIZON - N), being
    mated in N as much taken away; longer mates and other moves get 0.
    """
    nearness = np.maximum(MATE_HORIZON - np.abs(mates), 0).astype(np.float64)
    return preference * np.sign(mates) * np.where(mates != 0, nearness, 0.0)


def policy_target(wins: np.ndarray, scored: np.ndarray, temperature: float,
                  bonus: np.ndarray | None = None) -> np.ndarray:
    """Gets the policy over the legal moves: softmax(w / temperature + bonus) over the ``scored`` ones, 0 elsewhere.

    ``bonus`` (mate_bonus, default none) orders moves of equal w. A
    temperature of 0 puts everything on the first best move (highest w, then
    highest bonus). ``scored`` needs one True.
    """
    bonus = np.zeros(len(wins)) if bonus is None else np.asarray(bonus, dtype=np.float64)
    probs = np.zeros(len(wins), dtype=np.float64)
    candidates = np.flatnonzero(scored)
    if temperature <= 0.0:
        order = np.lexsort((-candidates, bonus[candidates], wins[candidates]))  # last key first; ties: first move
        probs[candidates[order[-1]]] = 1.0
    else:
        logits = wins[candidates] / temperature + bonus[candidates]
        # Subtracting the largest keeps every exponent <= 0: no overflow at small temperatures.
        weights = np.exp(logits - logits.max())
        probs[candidates] = weights / weights.sum()
    return probs.astype(np.float32)
