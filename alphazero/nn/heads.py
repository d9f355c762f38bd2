"""What both networks return (NetOutput, TrainingHeads) and how their heads' last layers run (float32_head).

The piece the residual network and the Chessformer share (both import it,
neither imports the other for it): both networks
(alphazero.nn.network.AlphaZeroNet, alphazero.nn.chessformer.Chessformer)
return a ``NetOutput``, always from the side to move, and run their heads'
last layers through ``float32_head``, so that what the search reads is not
rounded by bf16 autocast. Their training-only heads (the reply policy, the
moves left) come out of ``forward_with_training_heads`` as ``TrainingHeads``.

Example::

    logits = float32_head(policy_out, features)     # a module or a function; float32 under bf16 autocast too
    out = NetOutput(logits.flatten(1), torch.tanh(value[:, 0]), None)     # a scalar value head: no WDL logits
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, TypeVar

import torch
import torch.nn.functional as F

_T = TypeVar("_T")

REPLY_POLICY_PREFIX = "reply_policy"
"""Parameter names of the reply-policy head (``network.reply_policy_head``) start with it: a second policy head
that predicts the next position's search policy, the opponent's reply (KataGo's auxiliary policy target, Wu
2019). Both networks build it alike and run it only in ``forward_with_reply`` or ``forward_with_training_heads``
(training); their ``forward``, which search, the Evaluator and every agent call, never does."""

MOVES_LEFT_PREFIX = "moves_left"
"""Parameter names of the moves-left head (``network.moves_left_head``) start with it: lc0's head predicting the
plies left in the game. Both networks run it only in ``forward_with_training_heads`` (training); search does not
read it."""
SOFT_POLICY_PREFIX = "soft_policy"
"""Parameter names of the soft policy head start with it (the resnet's ``network.soft_policy_head``, the
chessformer's auxiliary head): KataGo's auxiliary soft policy target, the search's policy at a temperature. The
resnet runs it only in ``forward_with_training_heads`` (training)."""
MOVES_LEFT_FILTERS = 8  # lc0's: the head's channels per square (the resnet's 1x1 conv, the chessformer's embedding)
MOVES_LEFT_HIDDEN = 128  # lc0's: the head's hidden units
MOVES_LEFT_UNIT = 20.0
"""Plies per unit of the moves-left head's last layer, and the scale of its loss (learner.losses): lc0's 20."""


class NetOutput(NamedTuple):
    """What the network returns for a batch of N positions.

    The last two come from the action-value head (alphazero.nn.action_values)
    and are None without one; ``action_values`` is None as well from a pass
    asked for the features alone (``model(planes, scalars, action_values=False)``:
    the search's and the learner's, which score only the moves they need).
    """

    policy_logits: torch.Tensor  # float32 [N, 4672], unmasked
    value: torch.Tensor  # float32 [N] in [-1, 1]
    wdl_logits: torch.Tensor | None  # float32 [N, 3] (win, draw, loss), or None for a scalar head
    # float32 [N, 4672]: the mover's win probability after each move (0 at the indices never legal)
    action_values: torch.Tensor | None = None
    # what the head reads the moves' values from: [N, 64, 2E] each square's from and to features (the 'squares'
    # shape), or [N, 4672] the moves' value logits (the 'policy' shape)
    action_features: torch.Tensor | None = None


class TrainingHeads(NamedTuple):
    """What the training-only heads give for N positions (``forward_with_training_heads``); None: not asked for."""

    reply_policy_logits: torch.Tensor | None = None  # float32 [N, 4672]: the next position's policy, its frame
    moves_left: torch.Tensor | None = None  # float32 [N] >= 0: the plies left in the game (moves_left_plies)
    soft_policy_logits: torch.Tensor | None = None  # float32 [N, 4672]: the soft policy head's (the resnet's)


def moves_left_plies(last: torch.Tensor) -> torch.Tensor:
    """Gets the plies left, float32 [N] >= 0, from the moves-left head's last layer [N, 1].

    Softplus where lc0 has a ReLU: non-negative as well, but its slope never
    reaches 0 (a ReLU head whose last layer went negative on every position
    would stop learning for good; far below 0 softplus learns slowly). The
    layer counts units of MOVES_LEFT_UNIT plies, as lc0's loss scales them,
    so its gradients are of the other heads' size and a fresh head starts
    near 20 * softplus(0), 14 plies, not at 0.7.
    """
    return MOVES_LEFT_UNIT * F.softplus(last.float()[:, 0])


def float32_head(layer: Callable[[torch.Tensor], _T], x: torch.Tensor) -> _T:
    """Runs a head's last layer (a module or a function of one tensor) in float32, whatever autocast says.

    Its outputs are what the search reads: under bf16 autocast they would keep
    8 bits of mantissa, so priors would be rounded before the legal moves'
    logits are gathered. Without autocast (the CPU) it is just ``layer(x)``.
    """
    if not torch.is_autocast_enabled(x.device.type):
        return layer(x)
    with torch.autocast(device_type=x.device.type, enabled=False):
        return layer(x.float())


__all__ = [
    "MOVES_LEFT_FILTERS", "MOVES_LEFT_HIDDEN", "MOVES_LEFT_PREFIX", "MOVES_LEFT_UNIT", "REPLY_POLICY_PREFIX",
    "SOFT_POLICY_PREFIX",
    "NetOutput", "TrainingHeads", "float32_head", "moves_left_plies",
]
