"""Probe positions: a few fixed positions whose evaluation the learner logs as text at every checkpoint.

``probe_report`` formats the net's value and top-3 moves in each as a markdown
table (TensorBoard's ``probes`` text), beside what a good net says there.
"""

from __future__ import annotations

from dataclasses import dataclass

import chess
import numpy as np
import torch

from alphazero.chess.moves import index_to_move, legal_move_indices
from alphazero.nn.planes import compact_to_torch, encode_position
from learner.trainer import eval_mode

__all__ = ["PROBES", "EncodedProbe", "Probe", "encode_probes", "probe_report"]


@dataclass(frozen=True)
class Probe:
    """A fixed position whose evaluation is logged as text: ``moves`` (UCI) played from ``fen``."""

    name: str
    fen: str = chess.STARTING_FEN
    moves: tuple[str, ...] = ()
    expect: str = ""  # what a good net says here, for the reader


PROBES = (
    Probe("start position", expect="about even; e4, d4, Nf3 or c4"),
    Probe("1.e4 e5 2.Nf3", moves=("e2e4", "e7e5", "g1f3"), expect="about even; Nc6, d6 or Nf6 (defend e5)"),
    Probe("mate in one", "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1", expect="winning; Ra8#"),
    Probe("K+Q vs K", "8/8/8/4k3/8/8/8/3QK3 w - - 0 1", expect="winning for White, to move"),
)


@dataclass(frozen=True)
class EncodedProbe:
    probe: Probe
    board: chess.Board
    planes: np.ndarray
    scalars: np.ndarray
    legal: np.ndarray  # int64 policy indices of the legal moves


def encode_probes(probes: tuple[Probe, ...]) -> list[EncodedProbe]:
    encoded = []
    for probe in probes:
        board = chess.Board(probe.fen)
        for uci in probe.moves:
            board.push_uci(uci)
        planes, scalars = encode_position(probe.fen, list(probe.moves))
        encoded.append(EncodedProbe(probe, board, planes, scalars, legal_move_indices(board)))
    return encoded


def probe_report(model: torch.nn.Module, device: torch.device, probes: tuple[Probe, ...] = PROBES,
                 *, _encoded: list[EncodedProbe] | None = None) -> str:
    """Formats a markdown table of the net's value and top-3 moves (softmax over legal moves) in ``probes``.

    Values are for the side to move. The model is evaluated in eval mode and
    left in the mode it was in.
    """
    encoded = _encoded if _encoded is not None else encode_probes(probes)
    planes, scalars = compact_to_torch(np.concatenate([e.planes for e in encoded]),
                                       np.concatenate([e.scalars for e in encoded]), device)
    with eval_mode(model), torch.no_grad():
        out = model(planes, scalars)
    logits = out.policy_logits.float().cpu().numpy()
    values = out.value.float().cpu().numpy()
    wdl = out.wdl_logits.float().softmax(dim=1).cpu().numpy() if out.wdl_logits is not None else None
    lines = ["| position | to move | value | top moves | a good net |", "|---|---|---|---|---|"]
    for row, probe in enumerate(encoded):
        legal_logits = logits[row, probe.legal]
        shares = np.exp(legal_logits - legal_logits.max())
        shares /= shares.sum()
        top = np.argsort(-shares, kind="stable")[:3]
        moves = ", ".join(f"{probe.board.san(index_to_move(probe.board, int(probe.legal[i])))} {shares[i]:.0%}"
                          for i in top)
        value = f"{values[row]:+.2f}"
        if wdl is not None:
            value += " (W/D/L " + "/".join(f"{p:.0%}" for p in wdl[row]) + ")"
        side = "White" if probe.board.turn == chess.WHITE else "Black"
        lines.append(f"| {probe.probe.name} | {side} | {value} | {moves} | {probe.probe.expect} |")
    return "\n".join(lines)
