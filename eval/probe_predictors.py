"""ChessBench's predictor metrics for the probe (eval.probe): action accuracy and Kendall's tau of the
network's three ways to rank a position's moves, against Stockfish's ranking.

The predictors (ChessBench, "Grandmaster-Level Chess Without Search", sections 2.3 and 2.4):

- ``bc`` (behavioural cloning): the policy's logit of each legal move;
- ``sv`` (state value): minus the network's value of the position after each move (the opponent's
  value, seen from the mover), game ends scored exactly (mating +1, a draw 0), as the ``value`` player
  plays; the positions after the moves are evaluated in batches;
- ``av`` (action value): the action-value head's win probability after each move, for a network with
  the head (eval.action_values).

At each labelled position, over the legal moves:

- **action accuracy**: 1 when the predictor's top move (ties: the first in legal order) is one of
  Stockfish's best (the largest win probability it gave; a move it did not score is a miss), else 0;
- **Kendall's tau**: ``kendall_tau`` (tau-b: ties count as neither agreeing nor disagreeing) between the
  predictor's scores and Stockfish's win probabilities, over the moves Stockfish scored. A position with
  a single legal move counts 1, as ChessBench's code counts it (perfect agreement); a position where tau
  is undefined (fewer than two scored moves, or all of one ranking tied: every move mates, every move
  loses) is left out of the mean.

The figures are the means over the positions where each is defined (``positions`` and ``tau_positions``
count them). ChessBench's released code (searchless_chess, src/metrics_evaluator.py) computes its tau as
``scipy.stats.kendalltau(np.argsort(predicted), np.argsort(stockfish))``: the correlation of the two
argsort permutations (which move stands at each rank), not of the scores; it agrees with tau at +1 and
-1 only, and in between depends on how the moves are numbered. The tau here is the rank correlation its
text defines; docs/methods.md compares the two.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from alphazero.nn.action_values import features_only
from alphazero.nn.planes import compact_to_torch
from eval.network_agents import expand_children
from mcts_ext import Board
from mcts_ext.encode import encode_boards, new_batch

PREDICTORS = ("bc", "sv", "av")
PREDICTOR_NAMES = {"bc": "BC (policy)", "sv": "SV (value)", "av": "AV (head)"}
SV_POSITIONS_PER_PASS = 64
"""Positions whose children are made at once for SV (about 30 each): the batches of a pass, few Boards held."""


def kendall_tau(x: np.ndarray, y: np.ndarray) -> float:
    """Gets Kendall's tau-b between two scorings of the same items (higher is better in both).

    Over the n (n - 1) / 2 pairs of items, a pair is concordant when both scorings order it the same way,
    discordant when they order it oppositely, and neither when it is tied in x, in y or in both. Then
    tau-b = (concordant - discordant) / sqrt((pairs - tied in x) (pairs - tied in y)), which is
    scipy.stats.kendalltau's default; without ties it is tau-a, (concordant - discordant) / pairs.
    NaN where it is undefined: fewer than two items, or every pair tied in x or in y.

    >>> kendall_tau(np.array([0.9, 0.5, 0.1]), np.array([3.0, 2.0, 1.0]))
    1.0
    >>> round(kendall_tau(np.array([0.9, 0.5, 0.1]), np.array([1.0, 2.0, 2.0])), 4)  # -2 / sqrt(3 * 2)
    -0.8165

    Raises:
        ValueError: x and y differ in length.
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"kendall_tau takes two 1-d arrays of one length, got shapes {x.shape} and {y.shape}")
    n = len(x)
    if n < 2:
        return math.nan
    upper = np.triu_indices(n, 1)
    sx = np.sign(x[:, None] - x[None, :])[upper]
    sy = np.sign(y[:, None] - y[None, :])[upper]
    pairs = n * (n - 1) // 2
    untied_x, untied_y = pairs - int(np.count_nonzero(sx == 0)), pairs - int(np.count_nonzero(sy == 0))
    if untied_x == 0 or untied_y == 0:
        return math.nan
    return float(np.sum(sx * sy) / math.sqrt(untied_x * untied_y))


@dataclass(frozen=True)
class PredictorFigures:
    """One predictor's means over a probe set: action accuracy over ``positions``, Kendall's tau over
    ``tau_positions`` (the positions where each is defined)."""

    action_accuracy: float
    kendall_tau: float
    positions: int
    tau_positions: int

    def as_dict(self) -> dict[str, float | int | None]:
        """The figures for JSON: NaN as None."""
        return {"action_accuracy": None if math.isnan(self.action_accuracy) else self.action_accuracy,
                "kendall_tau": None if math.isnan(self.kendall_tau) else self.kendall_tau,
                "positions": self.positions, "tau_positions": self.tau_positions}


@dataclass(frozen=True)
class PredictorScores:
    """One predictor's action accuracy and Kendall's tau at each position (float64 [N]; NaN where
    undefined, as the module docstring says)."""

    accuracy: np.ndarray
    tau: np.ndarray

    def figures(self) -> PredictorFigures:
        """The means over the positions where each is defined."""
        counted, tau_counted = ~np.isnan(self.accuracy), ~np.isnan(self.tau)
        accuracy = float(np.mean(self.accuracy[counted])) if counted.any() else math.nan
        tau = float(np.mean(self.tau[tau_counted])) if tau_counted.any() else math.nan
        return PredictorFigures(accuracy, tau, int(counted.sum()), int(tau_counted.sum()))


def predictor_scores(predicted: np.ndarray, wins: np.ndarray, offsets: np.ndarray) -> PredictorScores:
    """Measures one predictor at every position: ``predicted`` [E] is its score of each legal move (higher
    is better; NaN where it has none, which leaves the position out), ``wins`` [E] Stockfish's win
    probability after each (NaN: not scored), position i's moves being entries offsets[i]:offsets[i + 1]."""
    count = len(offsets) - 1
    accuracy, tau = np.full(count, math.nan), np.full(count, math.nan)
    for i in range(count):
        first, last = int(offsets[i]), int(offsets[i + 1])
        ours, theirs = predicted[first:last], wins[first:last]
        scored = ~np.isnan(theirs)
        if last == first or np.isnan(ours).any() or not scored.any():
            continue
        top = int(np.argmax(ours))  # ties go to the first legal move
        accuracy[i] = float(bool(scored[top]) and theirs[top] >= theirs[scored].max())
        tau[i] = 1.0 if last - first == 1 else kendall_tau(ours[scored], theirs[scored])
    return PredictorScores(accuracy, tau)


@torch.no_grad()
def state_value_scores(model: torch.nn.Module, boards: Sequence[Board | None], offsets: np.ndarray,
                       device: torch.device, batch: int) -> np.ndarray:
    """Gets SV's score of every legal move of every position (float64 [E], in legal order): minus the
    network's value of the position after the move, game ends exact (mating +1, a draw 0); NaN for the
    moves of a position that is None (not rebuilt). The model runs as it is (the caller sets eval mode);
    with an action-value head it scores no move (features_only): SV reads the value alone, and scoring all
    4672 moves of every child would cost several passes' worth."""
    scores = np.full(int(offsets[-1]), math.nan)
    forward = features_only(model)
    for start in range(0, len(boards), SV_POSITIONS_PER_PASS):
        rows = [i for i in range(start, min(start + SV_POSITIONS_PER_PASS, len(boards))) if boards[i] is not None]
        children = expand_children([boards[i] for i in rows])
        for first in range(0, len(children.pending), batch):
            pending = children.pending[first:first + batch]
            planes, scalars = new_batch(len(pending))
            encode_boards(pending, planes, scalars)
            values = forward(*compact_to_torch(planes, scalars, device)).value.float().cpu().numpy()
            for (b, m), value in zip(children.slots[first:first + batch], values):
                children.values[b][m] = -float(value)  # the child's side to move is the opponent
        for b, i in enumerate(rows):
            scores[int(offsets[i]):int(offsets[i + 1])] = children.values[b]
    return scores


__all__ = ["PREDICTORS", "PREDICTOR_NAMES", "PredictorFigures", "PredictorScores", "kendall_tau",
           "predictor_scores", "state_value_scores"]
