"""Padding batches to buckets (the shapes a CUDA graph or a compiled pass is made for), on the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alphazero.config import NetworkConfig
from alphazero.forward import BucketedForward, bucket_for
from alphazero.network import AlphaZeroNet, Evaluator
from alphazero.planes import COMPACT_PLANES, NUM_SCALARS, compact_to_torch

NET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=3, value_filters=2, value_hidden=16)
BUCKETS = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024]


def positions(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(n, COMPACT_PLANES), dtype=np.uint64, endpoint=True)
    scalars = rng.integers(0, 100, size=(n, NUM_SCALARS)).astype(np.float32)
    return compact_to_torch(planes, scalars, "cpu")


@pytest.fixture(scope="module")
def model(one_torch_thread: None) -> AlphaZeroNet:
    torch.manual_seed(0)
    net = AlphaZeroNet(NET)
    with torch.no_grad():  # move batch norm off the identity, so rows' outputs differ
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    net.train()
    net(*positions(16, seed=9))
    return net.eval()


def test_a_batch_lands_in_the_smallest_bucket_that_holds_it():
    for rows in range(1, 1025):
        assert bucket_for(rows) == min(b for b in BUCKETS if b >= rows)
    assert bucket_for(1025) == 1536 and bucket_for(4096) == 4096


def test_the_largest_batch_is_a_bucket_of_its_own():
    assert bucket_for(500, max_batch=500) == 500  # a full batch is never padded
    assert bucket_for(400, max_batch=500) == 500  # rather than 512
    assert bucket_for(300, max_batch=500) == 384  # smaller buckets stay
    assert bucket_for(600, max_batch=500) == 768  # beyond it, the usual buckets
    with pytest.raises(ValueError):
        bucket_for(0)


def test_padding_rows_never_change_the_real_rows(model: AlphaZeroNet):
    forward = BucketedForward(model, torch.device("cpu"), max_batch=40)
    with torch.inference_mode():
        forward(*positions(40, seed=1))  # the buckets' buffers now hold other positions
        forward(*positions(12, seed=2))
        for rows, seed in ((5, 3), (9, 4), (13, 5), (40, 6), (33, 7)):
            planes, scalars = positions(rows, seed)
            padded, alone = forward(planes, scalars), model(planes, scalars)
            assert padded.policy_logits.shape == (rows, 4672) and padded.value.shape == (rows,)
            torch.testing.assert_close(padded.policy_logits, alone.policy_logits, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(padded.value, alone.value, rtol=1e-5, atol=1e-5)
    assert sorted(forward.inputs) == [6, 12, 16, 40]  # one padded buffer per bucket met
    assert forward.inputs[16][0].shape == (16, COMPACT_PLANES)


def test_graphs_need_cuda(model: AlphaZeroNet):
    with pytest.raises(ValueError, match="CUDA"):
        BucketedForward(model, torch.device("cpu"), graphs=True)


def test_forward_modes_leave_the_cpu_path_eager(model: AlphaZeroNet):
    for mode in ("graphs", "compile"):
        evaluator = Evaluator(model, "cpu", forward=mode, max_batch=64)
        assert evaluator.forward_mode == "eager"
    with pytest.raises(ValueError, match="forward must be one of"):
        Evaluator(model, "cpu", forward="fast")
