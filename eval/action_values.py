"""The network's action values (ChessBench's action-value predictor): whether a network has the head, and
its win probability after each legal move.

The head (``network.action_value_head``: "none", "logit" or "hl_gauss", alphazero.nn) gives, for every
move of the 8x8x73 policy planes, the side to move's win probability in [0, 1] after it, indexed like the
policy logits: ``Evaluator.evaluate_action_values(planes, scalars)`` (float32 [N, 4672]) and
``NetOutput.action_values`` (None without the head). Everything in eval that reads the head reads it here:
the ``av`` agent (eval.network_agents), the UCI engine's ``Mode av`` (eval.uci_searchless), the probe's AV
predictor (eval.probe), and ``alphazero eval``, which leaves ``av`` out of its table for a network
without the head (``action_value_refusal`` says why, in one line).

Example::

    require_action_values(network, "av")              # UserError naming the weights and the setting
    wins = legal_action_values(network, [board])[0]   # float64, one per legal move, in legal order
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, cast

import numpy as np
import torch

from alphazero.errors import UserError
from alphazero.store.sources import Network
from mcts_ext import Board
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch

HEAD_SETTING = "network.action_value_head"
"""The config setting that gives a network its action-value head."""


class ActionValueEvaluator(Protocol):
    """What the head adds to alphazero.nn.forward.Evaluator."""

    @property
    def has_action_values(self) -> bool: ...

    def evaluate_action_values(self, planes: np.ndarray, scalars: np.ndarray) -> np.ndarray:
        """Gets float32 [N, 4672]: the mover's win probability after each move; UserError without the head."""
        ...


def has_action_values(network: Network) -> bool:
    """Checks whether the network has an action-value head.

    An evaluator without ``has_action_values`` reads as a network without the head.
    """
    return bool(getattr(network.evaluator, "has_action_values", False))


_NAMES = {"built-in network": "the built-in network", "fresh weights": "the run's freshly initialised network"}


def action_value_refusal(network: Network, who: str) -> str:
    """Says in one line why ``who`` cannot use the network's action values, naming the weights and the
    setting: "av needs an action-value head, which the built-in network (.../builtin.pt) lacks
    (network.action_value_head = 'none'); ..."."""
    setting = str(getattr(network.evaluator.config, "action_value_head", "none"))
    where = f" ({network.path})" if network.path is not None else ""
    name = _NAMES.get(network.label, network.label)
    return (f"{who} needs an action-value head, which {name}{where} lacks ({HEAD_SETTING} = {setting!r}); "
            f"give weights trained with {HEAD_SETTING} = 'logit' or 'hl_gauss'")


def require_action_values(network: Network, who: str) -> None:
    """Raises UserError (action_value_refusal's line) unless the network has an action-value head."""
    if not has_action_values(network):
        raise UserError(action_value_refusal(network, who))


def legal_action_values(network: Network, positions: Sequence[Board]) -> list[np.ndarray]:
    """Gets, for each position, the head's win probability for its mover after each legal move (float64,
    in the order of ``position.legal_moves()``), all positions in one network call.

    Raises:
        UserError: the network has no action-value head (from the evaluator).
    """
    if not positions:
        return []
    planes, scalars = new_batch(len(positions))
    encode_boards(list(positions), planes, scalars)
    values = cast(ActionValueEvaluator, network.evaluator).evaluate_action_values(planes, scalars)
    return [np.asarray(values[row, legal_move_indices(position)], dtype=np.float64)
            for row, position in enumerate(positions)]


def output_action_values(output: Any) -> torch.Tensor | None:
    """Gets a model output's action values (float32 [N, 4672]), or None for a network without the head (or
    a NetOutput that predates the field)."""
    values = getattr(output, "action_values", None)
    return values if isinstance(values, torch.Tensor) else None


__all__ = ["HEAD_SETTING", "ActionValueEvaluator", "action_value_refusal", "has_action_values", "legal_action_values",
           "output_action_values", "require_action_values"]
