"""The network's precision on a CPU (issue 32): bf16 only where the processor has it and it measured faster,
checked against float32 eager like the GPU's fast pass, with float32 master weights when training; on a GPU
(issue 69): a function of its compute capability, bf16 from 8.0, else float16 (inference) or float32."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

import alphazero.nn.forward as forward_module
import alphazero.nn.precision as precision_module
from alphazero.app.doctor import sample_leaves
from alphazero.config import CPU_PRECISIONS
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
    assert choose_precision("auto", torch.device("cuda"), key="n", timer=never, capability=(8, 0)).bf16
    assert not choose_precision("float32", torch.device("cuda"), key="n", timer=never, capability=(8, 0)).autocast
    assert calls == []


def test_an_unknown_precision_is_named_in_the_error() -> None:
    assert check_precision(" BF16 ") == "bf16"
    with pytest.raises(ValueError, match="selfplay.cpu_precision must be one of auto, bf16, float32, got 'fp8'"):
        check_precision("fp8", "selfplay.cpu_precision", CPU_PRECISIONS)
    with pytest.raises(ValueError, match="precision must be one of auto, bf16, float16, float32"):
        check_precision("fp8")


# --- on a GPU: a function of its compute capability (issue 69) ----------------------------------------


CUDA1 = torch.device("cuda", 1)


@pytest.mark.parametrize(("capability", "inference", "training"), [
    ((9, 0), "bf16", "bf16"),  # H100, H200
    ((8, 0), "bf16", "bf16"),  # A100: the first with native bf16
    ((7, 5), "float16", "float32"),  # T4: float16 tensor cores, no bf16; training would need loss scaling
    ((7, 0), "float16", "float32"),  # V100
    ((6, 1), "float32", "float32"),  # GTX 1080: neither tensor cores nor a fast float16
])
def test_auto_on_a_gpu_takes_what_its_compute_capability_computes_natively(
        capability: tuple[int, int], inference: str, training: str) -> None:
    never = timer_of(1.0, 1.0, calls := [])
    served = choose_precision("auto", CUDA1, key="n", timer=never, float16=True, capability=capability)
    trained = choose_precision("auto", CUDA1, key="n", timer=never, capability=capability)
    assert (served.name, trained.name) == (inference, training) and calls == []
    assert served.dtype == {"bf16": torch.bfloat16, "float16": torch.float16, "float32": None}[inference]
    for choice in (served, trained):  # the reason names the device and its capability
        assert choice.reason.startswith(choice.name) and f"cuda:1, compute capability {capability[0]}." in choice.reason
    if training == "float32" and inference != "float32":
        assert "loss scaling" in trained.reason


def test_the_capability_is_asked_of_the_models_gpu_not_the_current_one(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[object] = []

    def capability_of(device: object = None) -> tuple[int, int]:
        asked.append(device)
        return (7, 5)

    monkeypatch.setattr(torch.cuda, "get_device_capability", capability_of)
    monkeypatch.setattr(torch.version, "hip", None)
    choice = choose_precision("auto", CUDA1, key="n", timer=timer_of(1.0, 1.0), float16=True)
    assert choice.name == "float16" and asked == [CUDA1]


def test_forced_precisions_on_a_gpu_and_float16_where_it_cannot_run() -> None:
    never = timer_of(1.0, 1.0)
    emulated = choose_precision("bf16", CUDA1, key="n", timer=never, capability=(7, 5))
    assert emulated.bf16 and "emulated" in emulated.reason  # asked for, so taken, and said
    assert choose_precision("float16", CUDA1, key="n", timer=never, float16=True, capability=(8, 0)).name == "float16"
    assert choose_precision("float32", CUDA1, key="n", timer=never, float16=True, capability=(7, 5)).name == "float32"
    with pytest.raises(ValueError, match="float16 training needs loss scaling"):
        choose_precision("float16", CUDA1, key="n", timer=never, capability=(7, 5))
    on_cpu = choose_precision("float16", CPU, key="n", timer=never, float16=True, probe=lambda: "AMX")
    assert on_cpu.name == "float32" and "float16 is for CUDA" in on_cpu.reason  # a player's setting, on a CPU


class _SeesAutocast(torch.nn.Module):
    """The tiny net, noting the autocast type of each pass (None: no autocast)."""

    def __init__(self, model: AlphaZeroNet) -> None:
        super().__init__()
        self.model, self.stem, self.config = model, model.stem, model.config
        self.seen: list[torch.dtype | None] = []

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor, **kwargs: bool):
        on = torch.is_autocast_enabled("cpu")
        self.seen.append(torch.get_autocast_dtype("cpu") if on else None)
        return self.model(planes, scalars, **kwargs)


def test_a_float16_choice_runs_float16_autocast_and_is_checked_like_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    # What a T4 gets; on the CPU the Evaluator is told the choice (CPU autocast runs float16 too, slowly).
    from alphazero.nn.precision import PrecisionChoice

    chosen = PrecisionChoice("float16", "float16 autocast (cuda:0, compute capability 7.5: ...)")
    monkeypatch.setattr(forward_module, "choose_precision", lambda *args, **kwargs: chosen)
    model = _SeesAutocast(_model())
    evaluator = Evaluator(model, CPU)
    assert evaluator.autocast and evaluator.describe_pass() == "eager, float16" and evaluator._check_passes
    planes, scalars, indices, counts = sample_leaves(8)
    evaluator.evaluate_legal(planes, scalars, indices, counts)
    assert model.seen == [torch.float16, None]  # the pass, then float32 eager's, which checked it
    assert evaluator.precision_text() == chosen.reason and not evaluator.fallbacks


def _model() -> AlphaZeroNet:
    torch.manual_seed(0)
    return AlphaZeroNet(get_preset("tiny").network)


@pytest.mark.parametrize("native", [None, "AVX512-BF16"])
def test_the_evaluator_follows_the_probe(monkeypatch: pytest.MonkeyPatch, native: str | None) -> None:
    # Both answers of the capability probe, with a timing that favours bf16 (no real timing in a test).
    monkeypatch.setattr(precision_module, "native_bf16", lambda: native)
    monkeypatch.setattr(forward_module, "time_forward",
                        lambda model, device, bf16, rows, folded=False: 1.0 if bf16 else 2.0)
    evaluator = Evaluator(_model(), CPU, precision="auto")
    assert evaluator.autocast is (native is not None)
    assert evaluator.describe_pass() == ("eager, bf16" if native else "eager, float32")
    # channels_last either way: float32 passes on a CPU run faster in it too
    assert evaluator.model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)


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
    from tests.helpers import fixed_batch, old_tiny

    config = old_tiny()
    trainer = Trainer(_model(), config.learner, CPU, precision="bf16")
    assert trainer.autocast and trainer.precision_choice.name == "bf16"
    stats = trainer.step(fixed_batch(32), 0)
    assert torch.isfinite(stats.total) and stats.total.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in trainer.model.parameters())
    state = [t for s in trainer.optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    assert state and all(t.dtype == torch.float32 for t in state if t.is_floating_point())
    assert not Trainer(_model(), config.learner, CPU, precision="float32").autocast
