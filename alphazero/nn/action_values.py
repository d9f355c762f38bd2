"""The action-value head: each move's win probability for the mover (ChessBench's action values), and its losses.

ChessBench (Ruoss et al., "Grandmaster-level chess without search") trains a
predictor of Q(s, a), the mover's win probability after move a, on
Stockfish's value of every legal move; ``network.action_value_head`` puts one
beside the policy and value heads of either network kind, on the same body.

**The head's shapes** (``network.action_value_shape``):

- ``squares``: the body's features of each square (the resnet tower's output
  through a 1x1 convolution, the Chessformer's tokens through a linear layer)
  become two vectors of E = ``network.action_value_filters`` channels per
  square: one the square has as a move's origin, one as its target. Move a
  from f to t (with under-promotion piece p) has the hidden vector

      h(a) = relu(from[f] + to[t] + piece[p])

  (``piece`` is zero for every move but an under-promotion), and one linear
  layer shared by all moves turns h(a) into its output. Only the per-square
  vectors, [N, 64, 2E], come out of the network's pass
  (NetOutput.action_features); the moves' outputs are computed for the moves
  asked for: the legal ones in the search (Evaluator.evaluate_legal), those
  with a target in training, the 1858 that can ever be legal for
  NetOutput.action_values (the other indices hold 0).
- ``policy``: a move's value logit is a level of its position plus the
  move's own term,

      logit(a) = level(s) + delta(s, a),

  the level from a branch shaped as the value head (a scalar), delta from a
  second policy head of the network's own kind (the resnet's 3x3
  conv-BN-ReLU and conv to 73 planes, the Chessformer's attention policy).
  The pass gives the 4672 sums as NetOutput.action_features [N, 4672], and
  a move's value is read off by index. A network loaded from weights
  without the head starts it from copies of its own heads
  (``start_action_values_from_policy``): delta from the policy head, the
  level from the value head (twice a scalar head's pre-tanh output, the
  logit of (1 + v) / 2; zero for a WDL head), so that the head ranks moves
  as the policy does and learns their values from there, where the squares'
  shape, on a body trained for the policy, learnt little (EXPERIMENTS.md
  "Action-value head: the first heads trained, on the shipped network's body"). The
  level keeps the position's part of every move's value out of delta, whose
  copied ranking a head without it lost within a few hundred steps (EXPERIMENTS.md
  "Action-value head: a head shaped as the policy head"). The 'logit' form only.

Its forms (``network.action_value_head``):

- ``logit``: one logit per move, sigmoid(logit) the win probability, trained
  by binary cross-entropy against Stockfish's win probability y (the K = 2
  case of the binned form).
- ``hl_gauss``: K = ``network.action_value_bins`` logits per move over K
  bins of width 1/K on [0, 1]. The target is HL-Gauss (Imani & White, 2018;
  sigma = 0.75 bin widths, as ChessBench takes from Farebrother et al., 2024):
  a Gaussian of mean y and sigma 0.75 / K integrated over each bin and
  renormalised over [0, 1]; the loss is the cross-entropy of the head's
  softmax against it; the prediction is the expected value sum_k p_k c_k over
  the bins' centres c_k.

Labels outside [0, 1] are clipped into it; moves without one (NaN) are never
computed (``action_value_targets`` picks the others on the host).

Beside either form's loss on each move, ``learner.action_value_rank_weight``
adds a listwise one on each position's ranking of its moves
(``action_value_rank_loss``): the policy's kind of target, on the head's
win probabilities.

Example::

    out = model(planes, scalars)                     # NetOutput: action_values [N, 4672] in [0, 1]
    head = action_value_head(model)                  # the ActionValueHead, or None without one
    legal = head.legal_values(out.action_features, legal_indices)      # [B, W]
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from alphazero.chess.moves import NUM_MOVES
from alphazero.config import NetworkConfig
from alphazero.nn.heads import NetOutput, float32_head
from alphazero.nn.move_map import NO_PIECE, SQUARES, UNDER_PROMOTION_PIECES, move_squares, policy_index_map

__all__ = [
    "ACTION_VALUE_PREFIX", "HL_GAUSS_SIGMA", "ActionValueHead", "action_features", "action_value_head",
    "action_value_loss", "action_value_rank_loss", "action_value_sums", "action_value_targets", "bin_centres",
    "features_only", "has_action_values", "hl_gauss_target", "segment_log_softmax", "start_level_from_value",
    "with_action_values",
]

ACTION_VALUE_PREFIX = "action_value"
"""Parameter names of the action-value head start with it (its projection of the body and the head itself)."""
HL_GAUSS_SIGMA = 0.75  # the HL-Gauss target's sigma, in bin widths (ChessBench; Farebrother et al., 2024)
# all_values scores this many positions at a time, so that their moves' hidden vectors and bins (a few MB)
# stay in cache instead of streaming through memory.
ALL_VALUES_ROWS = 8


def bin_centres(bins: int, device: torch.device | None = None) -> torch.Tensor:
    """Gets the centres (k + 0.5) / K of K uniform bins on [0, 1] (float32 [K]).

    >>> bin_centres(4).tolist()
    [0.125, 0.375, 0.625, 0.875]
    """
    return (torch.arange(bins, dtype=torch.float32, device=device) + 0.5) / bins


def hl_gauss_target(labels: torch.Tensor, bins: int, sigma: float | None = None) -> torch.Tensor:
    """Gets the HL-Gauss target of each label in [0, 1]: float32 [*S, K] from labels [*S], each row summing to 1.

    A Gaussian of mean the label and standard deviation ``sigma`` (default
    HL_GAUSS_SIGMA / K) integrated over each of K uniform bins on [0, 1],
    divided by its mass inside [0, 1] (a label at 0 or 1 has half its mass
    outside). Its mean over the bins' centres is the label within a bin's
    width (at the ends it lies about 0.6 of a width inside).

    >>> target = hl_gauss_target(torch.tensor([0.3]), 128)
    >>> round(float(target.sum()), 4), round(float(target @ bin_centres(128)), 3)
    (1.0, 0.3)
    """
    sigma = HL_GAUSS_SIGMA / bins if sigma is None else sigma
    edges = torch.linspace(0.0, 1.0, bins + 1, dtype=torch.float32, device=labels.device)
    cdf = torch.special.ndtr((edges - labels.float()[..., None]) / sigma)  # [*S, K + 1]
    return (cdf[..., 1:] - cdf[..., :-1]) / (cdf[..., -1:] - cdf[..., :1])


def start_level_from_value(level_out: nn.Linear, value_out: nn.Linear, value_head: str) -> None:
    """Sets the level branch's last layer from the value head's (the 'policy' shape's start, see the module
    docstring): twice a scalar head's weights, whose pre-tanh output x gives the win probability
    (1 + tanh x) / 2 = sigmoid(2x); zero for a WDL head (its three logits have no linear win logit)."""
    with torch.no_grad():
        if value_head == "scalar":
            level_out.weight.copy_(2.0 * value_out.weight)
            level_out.bias.copy_(2.0 * value_out.bias)
        else:
            level_out.weight.zero_()
            level_out.bias.zero_()


def action_value_targets(action_values: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Picks the moves that have a target out of a batch's action values (float32 [B, 4672], NaN: none).

    Returns (rows int64 [M], moves int64 [M], labels float32 [M] clipped to
    [0, 1]); all empty for None (a batch without any).

    >>> values = np.full((2, 4672), np.nan, np.float32); values[1, 7] = 1.2
    >>> [a.tolist() for a in action_value_targets(values)]
    [[1], [7], [1.0]]
    """
    if action_values is None:
        empty = np.zeros(0, np.int64)
        return empty, empty, np.zeros(0, np.float32)
    rows, moves = np.nonzero(np.isfinite(action_values))
    labels = np.clip(action_values[rows, moves], 0.0, 1.0).astype(np.float32)
    return rows.astype(np.int64), moves.astype(np.int64), labels


class ActionValueHead(nn.Module):
    """Each move's output from the pass's action features (NetOutput.action_features): the per-square from and
    to features [N, 64, 2E] in the 'squares' shape, the moves' value logits [N, 4672] in the 'policy' shape (see
    the module docstring).

    Args:
        config: the network's config: ``action_value_head`` ('logit' or
            'hl_gauss'), ``action_value_bins``, ``action_value_filters``.

    Raises:
        ValueError: ``config.action_value_head`` is 'none'.
    """

    from_square: torch.Tensor  # buffers (register_buffer below): each policy index's squares and piece
    to_square: torch.Tensor
    piece: torch.Tensor
    possible: torch.Tensor
    centres: torch.Tensor

    promotion: nn.Embedding | None  # the 'squares' shape's modules (None in the 'policy' shape)
    out: nn.Linear | None

    def __init__(self, config: NetworkConfig) -> None:
        super().__init__()
        if config.action_value_head == "none":
            raise ValueError("ActionValueHead needs network.action_value_head = 'logit' or 'hl_gauss'")
        self.kind = config.action_value_head
        self.shape = config.action_value_shape
        self.width = config.action_value_filters
        self.outputs = config.action_value_bins if self.kind == "hl_gauss" else 1
        self.promotion = self.out = None
        if self.shape == "squares":
            # The padding row (NO_PIECE, every move but an under-promotion) stays zero and never learns.
            self.promotion = nn.Embedding(UNDER_PROMOTION_PIECES + 1, self.width, padding_idx=NO_PIECE)
            self.out = nn.Linear(self.width, self.outputs)
        elif self.outputs != 1:
            raise ValueError("the 'policy' shape of the action-value head has one logit a move")
        # Not saved with the weights: fixed, rebuilt with the model.
        for name, array in zip(("from_square", "to_square", "piece"), move_squares(), strict=True):
            self.register_buffer(name, torch.from_numpy(array.copy()), persistent=False)
        possible = np.flatnonzero(policy_index_map()[0] < SQUARES * SQUARES)  # the 1858 that can be legal
        self.register_buffer("possible", torch.from_numpy(possible), persistent=False)
        self.register_buffer("centres", bin_centres(self.outputs), persistent=False)

    def hidden(self, features: torch.Tensor, rows: torch.Tensor, moves: torch.Tensor) -> torch.Tensor:
        """Gets h(a) (float32 [*S, E]) of moves ``moves`` (policy indices [*S]) of positions ``rows`` ([*S] or
        broadcastable to it) from per-square features [N, 64, 2E]."""
        assert self.promotion is not None  # the 'squares' shape
        width = self.width
        flat_rows = rows * SQUARES
        start = features[..., :width].reshape(-1, width)[flat_rows + self.from_square[moves]]
        end = features[..., width:].reshape(-1, width)[flat_rows + self.to_square[moves]]
        return F.relu(start.float() + end.float() + self.promotion(self.piece[moves]).float())

    def logits(self, features: torch.Tensor, rows: torch.Tensor, moves: torch.Tensor) -> torch.Tensor:
        """Gets the moves' raw outputs, float32 [*S, outputs] (one logit, or K bin logits): what the losses take."""
        if self.out is None:  # the 'policy' shape: features are the moves' logits [N, 4672]
            return features[rows, moves].float()[..., None]
        return float32_head(self.out, self.hidden(features, rows, moves)).float()

    def values_of(self, logits: torch.Tensor) -> torch.Tensor:
        """Turns raw outputs [*S, outputs] into win probabilities [*S] in [0, 1]."""
        if self.kind == "logit":
            return torch.sigmoid(logits[..., 0])
        # A sum of products, not a matrix product, which bf16 autocast would round to 8 bits of mantissa.
        return (logits.float().softmax(dim=-1) * self.centres).sum(dim=-1)

    def values(self, features: torch.Tensor, rows: torch.Tensor, moves: torch.Tensor) -> torch.Tensor:
        """Gets the mover's win probability after each of ``moves`` of positions ``rows`` (float32 [*S])."""
        return self.values_of(self.logits(features, rows, moves))

    def legal_values(self, features: torch.Tensor, legal_indices: torch.Tensor) -> torch.Tensor:
        """Gets the win probability of each move of ``legal_indices`` (int64 [B, W], each in [0, 4672)) of the
        B positions of ``features`` (their action features: [B, 64, 2E] or [B, 4672], in autocast's dtype), float32
        [B, W]; the search reads them beside the legal logits."""
        rows = torch.arange(legal_indices.shape[0], device=legal_indices.device)[:, None]
        return self.values(features, rows, legal_indices)

    def all_values(self, features: torch.Tensor) -> torch.Tensor:
        """Gets the win probability after each of the 4672 moves (float32 [N, 4672]), ALL_VALUES_ROWS
        positions at a time. Only the 1858 indices that can be a legal move are scored; the others (a
        target off the board, an under-promotion short of the last rank) hold 0."""
        out = torch.zeros(len(features), NUM_MOVES, dtype=torch.float32, device=features.device)
        moves = self.possible[None, :]
        if self.out is None:  # the 'policy' shape: every move's logit is already there
            out[:, self.possible] = torch.sigmoid(features[:, self.possible].float())
            return out
        for start in range(0, len(features), ALL_VALUES_ROWS):
            rows = torch.arange(start, min(start + ALL_VALUES_ROWS, len(features)), device=features.device)
            out[rows[:, None], moves] = self.values(features, rows[:, None], moves)
        return out

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Gets each move's loss against its label in [0, 1] and its predicted win probability (float32 [M] each)
        from the moves' raw outputs (``logits``, [M, outputs]).

        'logit': binary cross-entropy; 'hl_gauss': cross-entropy against
        hl_gauss_target (see the module docstring).
        """
        labels = labels.float().clamp(0.0, 1.0)
        if self.kind == "logit":
            loss = F.binary_cross_entropy_with_logits(logits[..., 0], labels, reduction="none")
        else:
            loss = -(hl_gauss_target(labels, self.outputs) * logits.log_softmax(dim=-1)).sum(dim=-1)
        return loss, self.values_of(logits.detach())


def action_value_loss(head: ActionValueHead, logits: torch.Tensor,
                      labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gets the mean loss over the M moves with a target and their mean absolute error (0-dim float32 each),
    from their raw outputs (``head.logits``, [M, outputs]) and labels [M].

    M = 0 (no move of the batch has a target) gives 0 and 0 (not the mean
    of nothing, NaN).
    """
    if labels.numel() == 0:
        zero = torch.zeros((), device=logits.device)
        return zero, zero
    loss, predicted = head.loss(logits, labels)
    return loss.mean(), (predicted - labels.float().clamp(0.0, 1.0)).abs().mean()


def action_value_rank_loss(head: ActionValueHead, logits: torch.Tensor, rows: torch.Tensor, labels: torch.Tensor,
                           positions: int, temperature: float) -> torch.Tensor:
    """Gets the listwise loss on the head's ranking of each position's moves with a target (0-dim float32),
    from the M moves' raw outputs (``head.logits``, [M, outputs]), positions (``rows``, [M] in
    [0, positions)) and labels [M].

    ListNet's top-one loss (Cao et al., 2007) on win probabilities: for
    each of the ``positions`` positions of the batch, the cross-entropy of
    softmax(head's values / T) over its moves with a target against
    softmax(labels / T), the shape of the policy's target
    (learner.label_targets), averaged over the positions with two such
    moves or more (one move has nothing to rank; none gives 0). The
    pointwise loss weighs each move's level alone; this one the differences
    between a position's moves, the best ones most (EXPERIMENTS.md,
    "Action-value head: a listwise loss on the head's ranking").
    """
    if rows.numel() == 0:
        return torch.zeros((), device=logits.device)
    predicted = head.values_of(logits) / temperature
    target = segment_log_softmax(labels.float().clamp(0.0, 1.0) / temperature, rows, positions).exp()
    per_move = -target * segment_log_softmax(predicted, rows, positions)
    per_position = torch.zeros(positions, device=logits.device).index_add(0, rows, per_move)
    counts = torch.zeros(positions, device=logits.device).index_add(0, rows, torch.ones_like(per_move))
    ranked = (counts >= 2).float()
    return (per_position * ranked).sum() / ranked.sum().clamp(min=1.0)


def segment_log_softmax(scores: torch.Tensor, rows: torch.Tensor, positions: int) -> torch.Tensor:
    """Gets each score's log-softmax among the scores of its own row (float32 [M] from scores [M] and rows
    int64 [M] in [0, positions)).

    >>> rows = torch.tensor([0, 0, 1])
    >>> [round(x, 4) for x in segment_log_softmax(torch.tensor([0.0, 0.0, 5.0]), rows, 2).tolist()]
    [-0.6931, -0.6931, 0.0]
    """
    scores = scores.float()
    # Each row's largest score, a constant of its softmax (no gradient needed), keeps exp() finite.
    top = torch.full((positions,), -torch.inf, device=scores.device).scatter_reduce(
        0, rows, scores.detach(), reduce="amax", include_self=True)
    shifted = scores - top[rows]
    sums = torch.zeros(positions, device=scores.device).index_add(0, rows, shifted.exp())
    return shifted - sums.log()[rows]


def action_value_sums(head: ActionValueHead, features: torch.Tensor, rows: torch.Tensor, moves: torch.Tensor,
                      labels: torch.Tensor) -> torch.Tensor:
    """Sums the loss and the absolute error over the M moves with a target, then counts them (float64 [3]):
    what validation divides into means over several batches."""
    if rows.numel() == 0:
        return torch.zeros(3, dtype=torch.float64, device=features.device)
    loss, predicted = head.loss(head.logits(features, rows, moves), labels)
    error = (predicted - labels.float().clamp(0.0, 1.0)).abs()
    count = torch.full((), float(rows.numel()), dtype=torch.float64, device=features.device)
    return torch.stack([loss.sum().double(), error.sum().double(), count])


def with_action_values(out: NetOutput, head: ActionValueHead | None, features: torch.Tensor | None,
                       full: bool) -> NetOutput:
    """Adds the head's outputs to a network's NetOutput: its action features (per-square [N, 64, 2E], or the
    moves' value logits [N, 4672] in the 'policy' shape), and with ``full`` every move's win probability
    (NetOutput.action_values); unchanged without a head."""
    if head is None or features is None:
        return out
    return out._replace(action_values=head.all_values(features) if full else None, action_features=features)


def action_features(out: NetOutput) -> torch.Tensor:
    """Gets a pass's action-value features (NetOutput.action_features: per-square [N, 64, 2E], or the moves'
    value logits [N, 4672] in the 'policy' shape).

    Raises:
        ValueError: the pass gave none (a network without the head, or a fake pass that leaves them out).
    """
    if out.action_features is None:
        raise ValueError("the forward pass gave no action-value features (NetOutput.action_features)")
    return out.action_features


class _FeaturesOnly(nn.Module):
    """A network whose action-value head stops at its action features (NetOutput.action_features):
    NetOutput.action_values is None."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor) -> NetOutput:
        return self.model(planes, scalars, action_values=False)


def features_only(model: nn.Module) -> nn.Module:
    """Gets the pass that scores no move: the model itself without an action-value head, else the model with
    ``action_values=False``, so that a caller (the Evaluator, eager, captured or compiled) scores only the
    moves it asks for."""
    return _FeaturesOnly(model) if has_action_values(model) else model


def _unwrap(model: nn.Module) -> nn.Module:
    return getattr(model, "_orig_mod", model)  # the module inside a torch.compile wrapper


def action_value_head(model: nn.Module) -> ActionValueHead | None:
    """Gets a network's action-value head (compiled or not), or None when it has none."""
    head = getattr(_unwrap(model), "action_value", None)
    return head if isinstance(head, ActionValueHead) else None


def has_action_values(model: nn.Module) -> bool:
    """Checks whether a network has an action-value head (any other module: False)."""
    return action_value_head(model) is not None
