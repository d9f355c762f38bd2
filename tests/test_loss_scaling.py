"""Per-device precision for self-play and the learner, and float16 training's loss scaling (issue 69, "GPUs
other than the one the tests imagine"): what a GPU of each compute capability trains in, decided without one;
a try whose scaled gradients overflowed updates nothing and is run again, so a step counts only updates; the
loss scale saved and restored with the optimiser's state; checkpoints without it still load."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import torch

import selfplay.inference as inference_module
import selfplay.worker as worker_module
from alphazero.config import Config, apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.nn.precision import PrecisionChoice, forget_choices
from alphazero.store.checkpoint import checkpoint_name, load_checkpoint, restore_checkpoint, save_checkpoint
from alphazero.store.rundir import RunDir
from learner.loss_scaling import MAX_SKIPS, SCALER_KEY, new_scaler
from learner.trainer import Trainer, training_precision
from tests.helpers import fixed_batch, old_tiny

CPU = torch.device("cpu")
CUDA = torch.device("cuda")
SMALL = ["network.blocks=1", "network.filters=8", "network.policy_filters=8"]


@pytest.fixture(autouse=True)
def fresh_choices() -> None:
    forget_choices()


def _config(*overrides: str) -> Config:
    return apply_overrides(old_tiny(), [*SMALL, *overrides])


def _model(config: Config) -> AlphaZeroNet:
    torch.manual_seed(0)
    return AlphaZeroNet(config.network)


def _weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# --- which precision, on which device ------------------------------------------------------------------------

@pytest.mark.parametrize(("capability", "trained"), [
    ((9, 0), "bf16"), ((8, 0), "bf16"),  # native bf16
    ((7, 5), "float16"), ((7, 0), "float16"),  # T4, V100: float16 tensor cores, with loss scaling
    ((6, 1), "float32"),  # no tensor cores
])
def test_the_learner_on_a_gpu_trains_in_what_its_capability_takes(capability: tuple[int, int], trained: str) -> None:
    # learner.cpu_precision=float32 must not decide on the GPU (it did: the CPU's setting, or 'auto' fixed).
    config = _config("learner.cpu_precision=float32")
    choice = training_precision(_model(config), config.learner, CUDA, capability=capability)
    assert choice.name == trained, choice.reason


def test_the_learner_reads_the_gpus_own_setting() -> None:
    config = _config("learner.cuda_precision=float32", "learner.cpu_precision=bf16")
    assert training_precision(_model(config), config.learner, CUDA, capability=(8, 0)).name == "float32"
    assert Trainer(_model(config), _config("learner.cpu_precision=float32").learner, CPU).precision_choice.name \
        == "float32"


class _Recorded(Exception):
    """Raised by the stand-in Evaluator once it has seen its arguments: the actor's set-up stops there."""


@pytest.mark.parametrize("make", ["worker", "server"])
def test_self_play_on_a_gpu_passes_the_gpus_precision_setting(monkeypatch: pytest.MonkeyPatch, make: str) -> None:
    seen: dict[str, Any] = {}

    def evaluator(model: torch.nn.Module, device: torch.device, **options: Any) -> None:
        seen.update(options, device=device)
        raise _Recorded

    for module in (worker_module, inference_module):  # (the server builds its network through the worker's)
        monkeypatch.setattr(module, "Evaluator", evaluator, raising=False)
        monkeypatch.setattr(module, "pick_device", lambda _name: CUDA, raising=False)
    monkeypatch.setattr(torch, "set_num_threads", lambda _n: None)  # (the actor's one thread; not this process)
    config = _config("selfplay.cpu_precision=float32", "selfplay.cuda_precision=float16",
                     "selfplay.cuda_forward=eager", "selfplay.cpu_forward=eager")
    with pytest.raises(_Recorded):
        if make == "worker":
            worker_module.SelfPlayWorker(None, to_toml(config), "a", sink="unused")
        else:
            inference_module.InferenceServer(None, to_toml(config))
    assert seen["device"] == CUDA and seen["precision"] == "float16" and seen["forward"] == "eager"


# --- loss scaling --------------------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled, but CUDA is not available")
def test_only_float16_gets_a_loss_scaler() -> None:
    assert isinstance(new_scaler(PrecisionChoice("float16", "test"), CUDA), torch.amp.GradScaler)
    assert new_scaler(PrecisionChoice("bf16", "test"), CUDA) is None
    assert new_scaler(PrecisionChoice("float32", "test"), CUDA) is None


class _Overflowing:
    """A loss scaler like torch's whose first ``overflows`` unscale_ calls find inf gradients."""

    def __init__(self, overflows: int, scale: float = 8.0) -> None:
        self.overflows, self.scale_value, self.found_inf, self.steps, self.tries = overflows, scale, False, 0, 0

    def scale(self, outputs: torch.Tensor) -> torch.Tensor:
        return outputs * self.scale_value

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        self.tries += 1
        self.found_inf = self.overflows > 0
        self.overflows -= 1
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(self.scale_value)
                    if self.found_inf:
                        p.grad.fill_(float("inf"))

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        if not self.found_inf:
            self.steps += 1
            optimizer.step()

    def update(self) -> None:
        if self.found_inf:
            self.scale_value /= 2

    def get_scale(self) -> float:
        return self.scale_value

    def state_dict(self) -> dict[str, Any]:
        return {"scale": self.scale_value}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.scale_value = state_dict["scale"]


def test_an_overflowed_try_updates_nothing_and_the_step_is_run_again() -> None:
    config = _config("learner.optimizer=adam")
    batch = fixed_batch(16)
    plain = Trainer(_model(config), config.learner, CPU, precision="float32")
    expected = plain.step(batch, 0)
    scaled = Trainer(_model(config), config.learner, CPU, precision="float32")
    scaled.scaler = scaler = _Overflowing(overflows=2)
    stats = scaled.step(batch, 0)
    # Two tries skipped, then one update: the same weights and figures as one plain step (the scale cancels).
    assert (scaler.tries, scaler.steps, scaled.skipped_steps, scaler.scale_value) == (3, 1, 2, 2.0)
    for a, b in zip(_weights(plain.model), _weights(scaled.model), strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(stats.grad_norm, expected.grad_norm)  # unscaled before it was measured
    torch.testing.assert_close(stats.total, expected.total)


def test_a_step_whose_gradients_keep_overflowing_stops_the_learner_and_changes_nothing() -> None:
    config = _config("learner.optimizer=adam")
    trainer = Trainer(_model(config), config.learner, CPU, precision="float32")
    trainer.scaler = scaler = _Overflowing(overflows=10**6)
    before = _weights(trainer.model)
    with pytest.raises(UserError, match="overflowed .* times in a row.*learner.cuda_precision=float32"):
        trainer.step(fixed_batch(16), 0)
    assert scaler.tries == MAX_SKIPS + 1 and scaler.steps == 0 and not trainer.optimizer.state
    for a, b in zip(before, _weights(trainer.model), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_torchs_grad_scaler_finds_a_scale_that_fits_and_trains_once() -> None:
    # The real GradScaler on the CPU, started at a scale that overflows these float32 gradients: 4x what takes
    # the largest of them (measured by a plain step on the same batch) past float32's largest number.
    config = _config("learner.value_loss_weight=100")  # gradients large enough for a scale below 2^128
    batch = fixed_batch(16)
    plain = Trainer(_model(config), config.learner, CPU, precision="float32")
    plain.step(batch, 0)
    largest = max(float(p.grad.abs().max()) for p in plain.model.parameters() if p.grad is not None)
    start = 2.0 ** (math.floor(math.log2(torch.finfo(torch.float32).max / largest)) + 2)
    trainer = Trainer(_model(config), config.learner, CPU, precision="float32")
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=start)
    stats = trainer.step(batch, 0)
    assert 2 <= trainer.skipped_steps <= MAX_SKIPS and trainer.scaler.get_scale() < start
    assert torch.isfinite(stats.grad_norm) and torch.isfinite(stats.total)
    for a, b in zip(_weights(plain.model), _weights(trainer.model), strict=True):
        torch.testing.assert_close(a, b)  # one update, the plain step's: the scale is divided out


# --- the scale in checkpoints --------------------------------------------------------------------------------

def _saved(tmp_path: Path, trainer: Trainer, config: Config) -> dict[str, Any]:
    run = RunDir.create_or_open(tmp_path / "run", config)[0]
    save_checkpoint(run, trainer.model, trainer.optimizer, 1, config)
    return load_checkpoint(run.checkpoints / checkpoint_name(1), "cpu", expected=config.network)


def test_the_loss_scale_is_saved_and_restored_with_the_optimiser(tmp_path: Path) -> None:
    config = _config("learner.optimizer=adam")
    trainer = Trainer(_model(config), config.learner, CPU, precision="float32")
    trainer.scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=3)
    trainer.step(fixed_batch(16), 0)
    saved = trainer.scaler.state_dict()
    assert saved["_growth_tracker"] == 1
    payload = _saved(tmp_path, trainer, config)
    assert payload["optimizer"][SCALER_KEY] == saved

    resumed = Trainer(_model(config), config.learner, CPU, precision="float32")
    resumed.scaler = torch.amp.GradScaler("cpu")  # the default scale, 2^16, until the checkpoint's comes
    restore_checkpoint(payload, resumed.model, resumed.optimizer)
    assert resumed.scaler.state_dict() == saved
    assert resumed.optimizer.state_dict()["state"][0]["step"] == trainer.optimizer.state_dict()["state"][0]["step"]


def test_checkpoints_without_a_loss_scale_load_and_a_scale_loads_without_a_scaler(tmp_path: Path) -> None:
    config = _config("learner.optimizer=adam")
    old = Trainer(_model(config), config.learner, CPU, precision="float32")  # no scaler: an older checkpoint's state
    old.step(fixed_batch(16), 0)
    payload = _saved(tmp_path / "old", old, config)
    assert SCALER_KEY not in payload["optimizer"]
    float16 = Trainer(_model(config), config.learner, CPU, precision="float32")
    float16.scaler = torch.amp.GradScaler("cpu")
    restore_checkpoint(payload, float16.model, float16.optimizer)
    assert float16.scaler.get_scale() == 2.0 ** 16 and float16.optimizer.state

    float16.step(fixed_batch(16), 1)  # a float16 run's checkpoint, resumed in bf16 or float32: the scale is dropped
    scaled = _saved(tmp_path / "scaled", float16, config)
    assert SCALER_KEY in scaled["optimizer"]
    plain = Trainer(_model(config), config.learner, CPU, precision="float32")
    restore_checkpoint(scaled, plain.model, plain.optimizer)
    assert SCALER_KEY not in plain.optimizer.state_dict() and plain.optimizer.state


# --- on a GPU (the GPU checks run these) ---------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU checks run it)")
@pytest.mark.parametrize("precision", ["auto", "float16"])  # float16 forced: the scaler runs on any GPU
def test_on_each_gpu_the_learner_trains_in_its_precision_and_on_its_device(precision: str) -> None:
    config = _config()
    current = torch.cuda.current_device()
    for index in range(torch.cuda.device_count()):
        device = torch.device("cuda", index)
        trainer = Trainer(_model(config), config.learner, device, precision=precision)
        expected = training_precision(trainer.model, config.learner, device, precision).name
        assert trainer.precision_choice.name == expected and (trainer.scaler is not None) == (expected == "float16")
        for step in range(3):
            stats = trainer.step(fixed_batch(32), step)
        torch.cuda.synchronize(device)
        assert torch.isfinite(stats.total) and torch.isfinite(stats.grad_norm) and stats.total.device == device
        assert all(p.device == device and bool(torch.isfinite(p).all()) for p in trainer.model.parameters())
        assert torch.cuda.current_device() == current
