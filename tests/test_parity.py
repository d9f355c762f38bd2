"""The GPU path's self-checks on the CPU (issue 23): the parity check against float32 eager, the float32 heads,
the lanes' events. The fast pass is a fake (``runner_maker``), and CUDA's events are fakes."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest
import torch

from alphazero.config import NetworkConfig
from alphazero.nn import forward as forward_module
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, NetOutput, build_network
from alphazero.nn.parity import ParitySettings, compare_legal, legal_softmax
from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS, compact_to_torch

NET = NetworkConfig(blocks=1, filters=8, policy_filters=8, policy_kernel=3, value_filters=2, value_hidden=16)
CF = NetworkConfig(kind="chessformer", layers=1, embedding=16, heads=2, ffn=16, policy_filters=16,
                   value_head="wdl", value_filters=4, value_hidden=16)
ROWS, WIDTH = 8, 24


def batch(rows: int = ROWS, seed: int = 0) -> tuple[np.ndarray, ...]:
    """Random compact positions with WIDTH distinct legal indices each (fewer in some rows)."""
    rng = np.random.default_rng(seed)
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(rows, COMPACT_PLANES), dtype=np.uint64, endpoint=True)
    scalars = rng.integers(0, 100, size=(rows, NUM_SCALARS)).astype(np.float32)
    indices = np.stack([rng.choice(4672, WIDTH, replace=False) for _ in range(rows)]).astype(np.int32)
    counts = rng.integers(1, WIDTH + 1, size=rows).astype(np.int32)
    return planes, scalars, indices, counts


@pytest.fixture(scope="module")
def model(one_torch_thread: None) -> AlphaZeroNet:
    torch.manual_seed(0)
    net = AlphaZeroNet(NET)
    with torch.no_grad():  # off the identity, so that positions get different outputs
        for parameter in net.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.3)
    return net.eval()


def fake_fast_pass(model: torch.nn.Module, *, value_shift: float = 0.0, made: list[int] | None = None):
    """A runner maker whose runners are the eager model on the bucket's buffers, values shifted by value_shift."""

    def make(planes: torch.Tensor, scalars: torch.Tensor):
        if made is not None:
            made.append(planes.shape[0])

        def run() -> NetOutput:
            out = model(planes, scalars)
            return NetOutput(out.policy_logits, out.value + value_shift, out.wdl_logits)

        return run

    return make


def eager(model: torch.nn.Module, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray]:
    legal, values = Evaluator(model, "cpu").evaluate_legal(*arrays)
    return legal.copy(), values.copy()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- the comparison ---------------------------------------------------------------------


def test_the_comparison_reads_probabilities_over_the_legal_moves_only():
    logits = np.array([[0.0, np.log(2.0), 50.0], [1.0, 2.0, 3.0]], np.float32)
    counts = np.array([2, 0], np.int32)
    np.testing.assert_allclose(legal_softmax(logits, counts), [[1 / 3, 2 / 3, 0.0], [0.0, 0.0, 0.0]], rtol=1e-6)
    settings = ParitySettings(atol=0.01, rtol=0.0)
    values = np.array([0.5, -0.5], np.float32)
    # A constant shift of a row's logits changes no prior; a column beyond the count is never read.
    shifted = logits + np.array([[3.0, 3.0, -99.0], [7.0, 7.0, 7.0]], np.float32)
    same = compare_legal(shifted, values + [0.0, 0.005], logits, values, counts, settings)
    assert same.ok and same.value == pytest.approx(0.005) and same.policy < 1e-6
    flat = np.zeros_like(logits)  # row 0: 1/2 each where eager says 1/3 and 2/3
    off = compare_legal(flat, values, logits, values, counts, settings)
    assert not off.ok and off.value == 0.0 and off.policy == pytest.approx(1 / 6, abs=1e-6)
    nan = compare_legal(logits, values * np.nan, logits, values, counts, ParitySettings(atol=1.0, rtol=1.0))
    assert not nan.ok and np.isnan(nan.value)


# --- the parity check in the Evaluator ----------------------------------------------------


def test_a_wrong_fast_pass_is_caught_on_its_first_pass_and_the_search_gets_eager_results(model, caplog):
    # Issue 23, defect 4 (the acceptance test): nothing compared the fast pass with the plain one.
    evaluator = Evaluator(model, "cpu", forward="graphs", max_batch=ROWS,
                          runner_maker=fake_fast_pass(model, value_shift=0.5))
    with caplog.at_level(logging.WARNING, logger="alphazero.nn.network"):
        for seed in range(4):
            legal, values = evaluator.evaluate_legal(*batch(seed=seed))
            want_logits, want_values = eager(model, batch(seed=seed))
            for row, count in enumerate(batch(seed=seed)[3]):  # every pass, the first included: eager's results
                np.testing.assert_allclose(legal[row, :count], want_logits[row, :count], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(values, want_values, rtol=1e-5, atol=1e-6)
    assert len(warnings_of(caplog)) == 1
    assert "forward pass (graphs, float32) differs from float32 eager on a batch of 8: largest value error 0.5" \
        in warnings_of(caplog)[0]
    assert warnings_of(caplog)[0].endswith("running eager, float32 from now on")
    assert evaluator.forward_mode == "eager" and evaluator.fallbacks == warnings_of(caplog)


def test_a_right_fast_pass_is_checked_per_bucket_after_each_weight_update_and_on_a_share(model, monkeypatch):
    checked: list[int] = []
    evaluator = Evaluator(model, "cpu", forward="compile", max_batch=ROWS, runner_maker=fake_fast_pass(model),
                          parity=ParitySettings(share=0.0))
    reference = evaluator.reference_legal

    def counting(*arrays: np.ndarray, rows: int, width: int) -> tuple[np.ndarray, np.ndarray]:
        checked.append(rows)
        return reference(*arrays, rows=rows, width=width)

    monkeypatch.setattr(evaluator, "reference_legal", counting)
    for rows in (8, 8, 1, 2, 1, 8):  # the first pass of each bucket is checked
        evaluator.evaluate_legal(*(array[:rows] for array in batch(rows)))
    assert checked == [8, 1, 2]
    evaluator.set_weights(model.state_dict())
    evaluator.evaluate_legal(*batch())
    assert checked == [8, 1, 2, 8]
    evaluator.parity = ParitySettings(share=1.0)
    evaluator.evaluate_legal(*batch())
    assert checked == [8, 1, 2, 8, 8]
    assert evaluator.forward_mode == "compile" and not evaluator.fallbacks


@pytest.mark.parametrize(("mode", "checks"), [("off", 0), ("always", 3)])
def test_the_parity_check_turns_off_or_to_always(model, monkeypatch, mode, checks):
    evaluator = Evaluator(model, "cpu", forward="graphs", max_batch=ROWS,
                          runner_maker=fake_fast_pass(model, value_shift=0.5 if mode == "off" else 0.0),
                          parity=ParitySettings(mode=mode))
    checked: list[int] = []
    reference = evaluator.reference_legal
    monkeypatch.setattr(evaluator, "reference_legal",
                        lambda *a, rows, width: checked.append(rows) or reference(*a, rows=rows, width=width))
    for _ in range(3):
        _, values = evaluator.evaluate_legal(*batch())
    assert len(checked) == checks
    if mode == "off":  # unchecked, the wrong values reach the caller
        np.testing.assert_allclose(values, eager(model, batch())[1] + 0.5, rtol=1e-5, atol=1e-6)


def test_the_cpu_path_is_never_checked(model, monkeypatch):
    evaluator = Evaluator(model, "cpu", forward="graphs", max_batch=ROWS)  # no CUDA: eager, float32
    monkeypatch.setattr(evaluator, "reference_legal", lambda *a, **k: pytest.fail("the CPU path was checked"))
    evaluator.evaluate_legal(*batch())
    assert evaluator.describe_pass() == "eager, float32"


@pytest.mark.filterwarnings("ignore:CUDA is not available")
def test_an_eager_bf16_mismatch_falls_back_to_float32(model, caplog):
    evaluator = Evaluator(model, "cpu")
    evaluator.autocast = True  # as on CUDA; the CPU's pass stays float32, so a fake shifts the values
    evaluator._check_passes = evaluator._fast()
    real = evaluator._forward
    evaluator._forward = evaluator._eager = lambda p, s: NetOutput(real(p, s).policy_logits, real(p, s).value - 1,
                                                                   None)
    with caplog.at_level(logging.WARNING, logger="alphazero.nn.network"):
        _, values = evaluator.evaluate_legal(*batch())
    np.testing.assert_allclose(values, eager(model, batch())[1], rtol=1e-5, atol=1e-6)
    assert evaluator.describe_pass() == "eager, float32" and len(warnings_of(caplog)) == 1


# --- the lanes' events ----------------------------------------------------------------------


class FakeEvent:
    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        self.recorded = 0
        self.synchronized = 0

    def record(self) -> None:
        self.recorded += 1

    def synchronize(self) -> None:
        self.synchronized += 1

    def elapsed_time(self, end: FakeEvent) -> float:
        return 5.0  # milliseconds


def test_lanes_wait_on_blocking_events(monkeypatch):
    # Issue 23, defect 7: the events the lanes waited on spun a CPU core each while the GPU worked.
    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    start, end = forward_module._pass_events(torch.device("cuda", 0))
    assert start.kwargs == end.kwargs == {"enable_timing": True, "blocking": True}
    assert forward_module._pass_events(torch.device("cpu")) is None


def test_passes_that_capture_compile_or_are_checked_are_not_timed(model, monkeypatch):
    # Issue 23, defect 9: CUDA events bracketed captures, compilations and host work.
    monkeypatch.setattr(forward_module, "_pass_events", lambda device: (FakeEvent(), FakeEvent()))
    made: list[int] = []
    evaluator = Evaluator(model, "cpu", forward="graphs", max_batch=ROWS,
                          runner_maker=fake_fast_pass(model, made=made), parity=ParitySettings(share=0.0))
    evaluator.evaluate_legal(*batch())  # captures bucket 8, and is checked
    assert made == [8] and evaluator.gpu_seconds == 0.0
    evaluator.evaluate_legal(*batch())
    assert evaluator.gpu_seconds == pytest.approx(0.005)
    start, end = evaluator._lanes[0][1]
    assert start.recorded == end.recorded == 2 and end.synchronized >= 2


# --- the heads' last layers ------------------------------------------------------------------


@pytest.mark.parametrize("config", [NET, CF], ids=["resnet", "chessformer"])
def test_the_heads_last_layers_run_in_float32_under_autocast(config, one_torch_thread):
    # Issue 23, defect 5: under bf16 autocast the priors and values were rounded to 8 bits of mantissa.
    torch.manual_seed(0)
    model = build_network(dataclasses.replace(config)).eval()
    heads = {"resnet": ("policy_out", "value_out"), "chessformer": ("policy", "value.out")}[config.kind]
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name in heads:
        module = model.get_submodule(name)
        module.register_forward_hook(lambda m, inputs, output, name=name: seen.update({name: (inputs[0], output)}))
    planes, scalars = compact_to_torch(*batch()[:2], "cpu")
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        model(planes, scalars)
    for name in heads:
        inputs, output = seen[name]
        assert output.dtype == torch.float32, name
        with torch.inference_mode():
            alone = model.get_submodule(name)(inputs.float())  # the same layer in float32, no autocast
        torch.testing.assert_close(output, alone, rtol=1e-6, atol=1e-6)
