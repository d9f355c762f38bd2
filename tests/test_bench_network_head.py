"""`alphazero bench network` with an action-value head: its MFLOP/eval counts the search's pass."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from alphazero.app.bench.network import flops_per_evaluation
from alphazero.nn.network import build_network
from alphazero.nn.planes import compact_to_torch
from alphazero.presets import get_preset
from tests.helpers import random_compact


def _counted(call: Callable[[], object]) -> float:
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        call()
    return float(counter.get_total_flops())


@pytest.mark.usefixtures("one_torch_thread")
def test_the_flops_count_the_searchs_pass_not_every_moves_values() -> None:
    network = get_preset("tiny").network
    plain = flops_per_evaluation(build_network(network))
    torch.manual_seed(0)
    model = build_network(dataclasses.replace(network, action_value_head="hl_gauss")).eval()
    planes, scalars = compact_to_torch(*random_compact(4), "cpu")
    every_move = _counted(lambda: model(planes, scalars)) / 4
    search = _counted(lambda: model(planes, scalars, action_values=False)) / 4
    counted = flops_per_evaluation(model)
    assert counted == pytest.approx(search) and plain < counted < every_move
    # Scoring the legal moves adds the head's last layers on 32 moves, far less than all 4672.
    with_legal = flops_per_evaluation(model, legal_values=True)
    assert counted < with_legal < counted + (every_move - counted) / 10
    assert np.isclose(flops_per_evaluation(build_network(network), legal_values=True), plain)


@pytest.mark.usefixtures("one_torch_thread")
def test_the_bench_says_what_its_flops_count(capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli

    assert cli.main(["bench", "network", "--preset", "tiny", "--batch-sizes", "2", "--seconds", "0.05",
                     "--device", "cpu", "--set", "network.action_value_head=logit"]) == 0
    out = capsys.readouterr().out
    assert "MFLOP/eval: the search's pass per position" in " ".join(out.split())
    assert "MFLOP/eval with the action-value head's values of 32 legal moves" in out
