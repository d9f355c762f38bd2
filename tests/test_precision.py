"""The network's precision on a CPU (issue 32): bf16 only where the processor has it and it measured faster,
checked against float32 eager like the GPU's fast pass, with float32 master weights when training."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import alphazero.nn.forward as forward_module
import alphazero.nn.precision as precision_module
from alphazero.app.doctor import sample_leaves
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet
from alphazero.nn.parity import ParitySettings
from alphazero.nn.precision import MIN_SPEEDUP, TIMING_ROUNDS, check_precision, choose_precision, forget_choices
from alphazero.presets import get_preset

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def fresh_choices() -> None:
    forget_choices()  # each test decides anew (the choice is cached per process)


def timer_of(float32: float, bf16: float, calls: list[bool] | None = None):
    def timer(use_bf16: bool) -> float:
        if calls is not None:
            calls.append(use_bf16)
        return bf16 if use_bf16 else float32
    return timer


def test_auto_stays_float32_without_native_bf16_and_does_not_time() -> None:
    calls: list[bool] = []
    choice = choose_precision("auto", CPU, key="net", timer=timer_of(2.0, 1.0, calls), probe=lambda: None)
    assert not choice.bf16 and "no native bf16" in choice.reason and calls == []


def test_auto_takes_bf16_where_native_and_measured_faster() -> None:
    calls: list[bool] = []
    choice = choose_precision("auto", CPU, key="net", timer=timer_of(2.4, 1.0, calls), probe=lambda: "AVX512-BF16")
    assert choice.bf16 and choice.speedup == pytest.approx(2.4) and "AVX512-BF16" in choice.reason
    assert calls == [False, True] * TIMING_ROUNDS  # alternating, one series: bf16 won it


def test_auto_keeps_float32_where_bf16_is_native_but_not_faster() -> None:
    slow = choose_precision("auto", CPU, key="net", timer=timer_of(1.0, 1.0 / (MIN_SPEEDUP * 0.99)),
                            probe=lambda: "AMX")
    assert not slow.bf16 and "measured" in slow.reason


def test_a_burst_of_load_in_the_first_timings_does_not_decide_for_the_process() -> None:
    calls: list[bool] = []

    def timer(use_bf16: bool) -> float:
        calls.append(use_bf16)
        busy = len(calls) <= 2 * TIMING_ROUNDS and use_bf16  # other work slowed every bf16 pass of the first series
        return 1.0 * (3.0 if busy else 1.0) if use_bf16 else 1.6

    choice = choose_precision("auto", CPU, key="net", timer=timer, probe=lambda: "AVX512-BF16")
    assert choice.bf16 and choice.speedup == pytest.approx(1.6)
    assert calls == [False, True] * (2 * TIMING_ROUNDS)  # a second series, alternating too


def test_the_choice_is_measured_once_per_key_and_thread_count() -> None:
    calls: list[bool] = []
    probe = lambda: "AVX512-BF16"  # noqa: E731 - one probe for the cache key
    for _ in range(3):
        choose_precision("auto", CPU, key="net", timer=timer_of(2.0, 1.0, calls), probe=probe)
    assert len(calls) == 2 * TIMING_ROUNDS
    choose_precision("auto", CPU, key="another net", timer=timer_of(2.0, 1.0, calls), probe=probe)
    assert len(calls) == 4 * TIMING_ROUNDS


def test_forced_settings_and_cuda_need_no_timing() -> None:
    never = timer_of(1.0, 1.0, calls := [])
    assert choose_precision("bf16", CPU, key="n", timer=never, probe=lambda: None).bf16  # emulated, but asked for
    assert "emulated" in choose_precision("bf16", CPU, key="n", timer=never, probe=lambda: None).reason
    assert not choose_precision("float32", CPU, key="n", timer=never, probe=lambda: "AMX").bf16
    assert choose_precision("auto", torch.device("cuda"), key="n", timer=never).bf16
    assert not choose_precision("float32", torch.device("cuda"), key="n", timer=never).bf16
    assert calls == []


def test_an_unknown_precision_is_named_in_the_error() -> None:
    assert check_precision(" BF16 ") == "bf16"
    with pytest.raises(ValueError, match="selfplay.cpu_precision must be one of auto, bf16, float32"):
        check_precision("fp8", "selfplay.cpu_precision")


def _model() -> AlphaZeroNet:
    torch.manual_seed(0)
    return AlphaZeroNet(get_preset("tiny").network)


@pytest.mark.parametrize("native", [None, "AVX512-BF16"])
def test_the_evaluator_follows_the_probe(monkeypatch: pytest.MonkeyPatch, native: str | None) -> None:
    # Both answers of the capability probe, with a timing that favours bf16 (no real timing in a test).
    monkeypatch.setattr(precision_module, "native_bf16", lambda: native)
    monkeypatch.setattr(forward_module, "time_forward", lambda model, device, bf16, rows: 1.0 if bf16 else 2.0)
    evaluator = Evaluator(_model(), CPU, precision="auto")
    assert evaluator.autocast is (native is not None)
    assert evaluator.describe_pass() == ("eager, bf16" if native else "eager, float32")
    # channels_last only where it runs bf16
    stem = evaluator.model.stem[0].weight
    assert stem.is_contiguous(memory_format=torch.channels_last) is (native is not None)


def test_a_bf16_pass_on_the_cpu_agrees_with_float32_within_the_tolerances() -> None:
    planes, scalars, indices, counts = sample_leaves(64)
    fast = Evaluator(_model(), CPU, precision="bf16", parity=ParitySettings(mode="off"))
    logits, values = (a.copy() for a in fast.evaluate_legal(planes, scalars, indices, counts))
    ref_logits, ref_values = fast.reference_legal(planes, scalars, indices, counts, rows=64, width=logits.shape[1])
    assert fast.autocast and logits.dtype == np.float32 and values.dtype == np.float32
    from alphazero.nn.parity import compare_legal
    errors = compare_legal(logits, values, ref_logits, ref_values, counts, ParitySettings())
    assert errors.ok and errors.value > 0  # bf16 moved something, and not beyond 0.1 + 0.1 x |eager|


class _WrongUnderAutocast(torch.nn.Module):
    """The tiny net, but its values are off by 0.5 whenever it runs under CPU bf16 autocast: a broken fast path."""

    def __init__(self, model: AlphaZeroNet) -> None:
        super().__init__()
        self.model = model
        self.stem = model.stem
        self.config = model.config

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor):
        out = self.model(planes, scalars)
        if torch.is_autocast_enabled("cpu"):
            return out._replace(value=(out.value - 0.5).clamp(-1, 1))
        return out


def test_a_wrong_bf16_pass_is_caught_on_the_first_pass_and_float32_reaches_the_search(
        caplog: pytest.LogCaptureFixture) -> None:
    planes, scalars, indices, counts = sample_leaves(16)
    model = _WrongUnderAutocast(_model())
    evaluator = Evaluator(model, CPU, precision="bf16")  # parity 'auto': the first pass of each batch size
    with caplog.at_level(logging.WARNING, logger="alphazero.nn.forward"):
        logits, values = (a.copy() for a in evaluator.evaluate_legal(planes, scalars, indices, counts))
        again = evaluator.evaluate_legal(planes, scalars, indices, counts)[1].copy()
    ref_logits, ref_values = evaluator.reference_legal(planes, scalars, indices, counts, rows=16,
                                                       width=logits.shape[1])
    assert np.array_equal(values, ref_values) and np.array_equal(logits, ref_logits)  # eager's, not the fast pass's
    assert np.array_equal(again, ref_values)  # and float32 from then on
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "eager, bf16" in warnings[0] and "running eager, float32" in warnings[0]
    assert not evaluator.autocast and evaluator.precision_text().startswith("float32 (bf16 differed")


def test_training_in_bf16_keeps_float32_weights_and_optimiser_state() -> None:
    from learner.trainer import Trainer
    from tests.helpers import fixed_batch

    config = get_preset("tiny")
    trainer = Trainer(_model(), config.learner, CPU, precision="bf16")
    assert trainer.autocast and trainer.precision_choice.name == "bf16"
    stats = trainer.step(fixed_batch(32), 0)
    assert torch.isfinite(stats.total) and stats.total.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert state and all(t.dtype == torch.float32 for t in state if t.is_floating_point())
    assert not Trainer(_model(), config.learner, CPU, precision="float32").autocast
