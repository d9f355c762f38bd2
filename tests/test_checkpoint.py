"""Learner checkpoints and model files: save, LATEST, thinning, loading, checksums, corrupt files, rewinding."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.config import Config, NetworkConfig, apply_overrides
from alphazero.config_compat import config_hash
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS
from alphazero.presets import from_toml
from alphazero.store.checkpoint import (
    LATEST_NAME,
    checkpoint_name,
    checkpoint_steps,
    latest_checkpoint,
    load_checkpoint,
    load_latest_weights,
    load_model,
    restore_checkpoint,
    rewind_checkpoints,
    save_checkpoint,
    save_model,
    step_of,
    thin_checkpoints,
)
from alphazero.store.rundir import RunDir
from tests.helpers import old_tiny, overwrite_inside


@pytest.fixture()
def run(tmp_path: Path) -> tuple[RunDir, Config]:
    # The old tiny: every parameter of this network is trained by its forward pass (no training-only head).
    tiny = apply_overrides(old_tiny(), ["network.blocks=1", "network.filters=8", "network.policy_filters=8"])
    return RunDir.create_or_open(tmp_path / "run", tiny)


def train_step(model: AlphaZeroNet, optimizer: torch.optim.Optimizer) -> None:
    planes = torch.randint(-2**62, 2**62, (4, COMPACT_PLANES))
    scalars = torch.rand(4, NUM_SCALARS)
    out = model(planes, scalars)
    (out.policy_logits.logsumexp(1).mean() + out.value.square().mean()).backward()
    optimizer.step()
    optimizer.zero_grad()


def test_names() -> None:
    assert checkpoint_name(12000) == "step_000012000.pt"
    assert step_of(Path("x") / "step_000012000.pt") == 12000
    assert step_of("LATEST") is None and step_of(".step_000000001.pt.1.ab.tmp") is None


def test_save_latest_load_round_trip_with_optimizer(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    torch.manual_seed(0)
    model = AlphaZeroNet(config.network)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train_step(model, optimizer)
    random.seed(5)
    np.random.seed(6)
    path = save_checkpoint(rundir, model, optimizer, 12000, config, positions_seen=99)
    expected_draws = (random.random(), np.random.rand(), torch.rand(1).item())

    assert path == rundir.checkpoints / "step_000012000.pt"
    assert (rundir.checkpoints / LATEST_NAME).read_text().strip() == path.name
    assert latest_checkpoint(rundir) == path == latest_checkpoint(rundir.root)
    assert sorted(p.name for p in rundir.checkpoints.iterdir()) == [LATEST_NAME, path.name]

    payload = load_checkpoint(path, expected=config.network)
    assert payload["step"] == 12000 and payload["positions_seen"] == 99
    assert payload["config_hash"] == config_hash(config) and from_toml(payload["config_toml"]) == config

    restored = AlphaZeroNet(config.network)
    restored_optimizer = torch.optim.SGD(restored.parameters(), lr=0.01, momentum=0.9)
    random.seed(0)
    assert restore_checkpoint(payload, restored, restored_optimizer) == 12000
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected_draws
    for a, b in zip(model.state_dict().values(), restored.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    momentum = [optimizer.state[p]["momentum_buffer"] for p in model.parameters()]
    restored_momentum = [restored_optimizer.state[p]["momentum_buffer"] for p in restored.parameters()]
    for a, b in zip(momentum, restored_momentum, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_adam_state_round_trips(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train_step(model, optimizer)
    save_checkpoint(rundir, model, optimizer, 1, config)
    restored = AlphaZeroNet(config.network)
    restored_optimizer = torch.optim.Adam(restored.parameters(), lr=1e-3)
    restore_checkpoint(load_checkpoint(rundir.checkpoints / checkpoint_name(1)), restored, restored_optimizer)
    assert restored_optimizer.state_dict()["state"][0]["step"] == optimizer.state_dict()["state"][0]["step"]


def test_thinning_keeps_the_newest_and_every_nth(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    for step in range(100, 1100, 100):
        save_checkpoint(rundir, model, None, step, config)
    deleted = thin_checkpoints(rundir.checkpoints, 3, keep_every=500)
    assert sorted(step_of(p) for p in deleted) == [100, 200, 300, 400, 600, 700]
    left = sorted(step_of(p) for p in rundir.checkpoints.glob("step_*.pt"))
    assert left == [500, 800, 900, 1000]
    assert latest_checkpoint(rundir) == rundir.checkpoints / checkpoint_name(1000)
    with pytest.raises(ValueError):
        thin_checkpoints(rundir.checkpoints, 0)


def test_thinning_keeps_step_zero_the_start_that_evaluations_compare_with(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    for step in range(0, 600, 100):
        save_checkpoint(rundir, model, None, step, config)
    thin_checkpoints(rundir.checkpoints, 2, keep_every=0)
    assert sorted(step_of(p) for p in rundir.checkpoints.glob("step_*.pt")) == [0, 400, 500]


def test_latest_falls_back_to_the_highest_step(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    assert latest_checkpoint(rundir) is None
    model = AlphaZeroNet(config.network)
    for step in (5, 40, 300):
        save_checkpoint(rundir, model, None, step, config)
    (rundir.checkpoints / LATEST_NAME).write_text("step_000000999.pt\n")  # names a missing file
    assert step_of(latest_checkpoint(rundir)) == 300  # type: ignore[arg-type]
    (rundir.checkpoints / LATEST_NAME).write_text("../../etc/passwd\n")
    assert step_of(latest_checkpoint(rundir)) == 300  # type: ignore[arg-type]


def test_load_latest_weights_only_when_newer(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    actor_model = AlphaZeroNet(config.network)
    assert load_latest_weights(rundir, actor_model) is None
    learner_model = AlphaZeroNet(config.network)
    optimizer = torch.optim.SGD(learner_model.parameters(), lr=0.1)
    train_step(learner_model, optimizer)
    save_checkpoint(rundir, learner_model, optimizer, 200, config)
    assert load_latest_weights(rundir, actor_model, newer_than=200) is None
    assert load_latest_weights(rundir, actor_model, newer_than=100) == 200
    for a, b in zip(actor_model.state_dict().values(), learner_model.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_load_model_opens_a_checkpoint(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    path = save_checkpoint(rundir, AlphaZeroNet(config.network), None, 7, config)
    model, extra = load_model(path)
    assert model.config == config.network and extra["step"] == 7 and "model" not in extra


def test_corrupt_or_truncated_checkpoint_raises(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    path = save_checkpoint(rundir, AlphaZeroNet(config.network), None, 10, config)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="is corrupt or not a checkpoint"):
        load_checkpoint(path)
    with pytest.raises(UserError, match="is corrupt or not a checkpoint"):
        load_latest_weights(rundir, AlphaZeroNet(config.network))
    path.write_bytes(b"\x00" * 64)
    with pytest.raises(UserError, match="is corrupt or not a checkpoint"):
        load_checkpoint(path)


def test_checkpoint_of_another_architecture_raises(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    path = save_checkpoint(rundir, AlphaZeroNet(config.network), None, 10, config)
    other = NetworkConfig(blocks=2, filters=8, policy_filters=8)
    with pytest.raises(UserError, match=r"checkpoint has network\.blocks=1, run config says 2"):
        load_checkpoint(path, expected=other)
    with pytest.raises(UserError, match=r"network\.blocks"):
        load_latest_weights(rundir, AlphaZeroNet(other))


def test_a_model_file_is_not_a_learner_checkpoint(tmp_path: Path) -> None:
    save_model(tmp_path / "net.pt", AlphaZeroNet(NetworkConfig(blocks=1, filters=8, policy_filters=8)))
    with pytest.raises(UserError, match="not a learner checkpoint"):
        load_checkpoint(tmp_path / "net.pt")


# --- checksums -------------------------------------------------------------------------------

def test_a_damaged_tensor_is_found_and_the_file_named(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    path = save_checkpoint(rundir, model, None, 30, config)
    overwrite_inside(path, model.stem[0].weight.detach())  # 8 x 119 x 3 x 3 float32: 34 KB
    with pytest.raises(UserError, match=rf"{path} is corrupt: the checksum of its weights does not match"):
        load_checkpoint(path)
    with pytest.raises(UserError, match=rf"{path} is corrupt: the checksum of its weights"):
        load_latest_weights(rundir, AlphaZeroNet(config.network))  # what self-play actors call
    with pytest.raises(UserError, match=rf"{path} is corrupt: the checksum of its weights"):
        load_model(path)  # what eval, match and uci call


def test_damaged_optimizer_state_is_found_by_a_full_load(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    train_step(model, optimizer)
    path = save_checkpoint(rundir, model, optimizer, 31, config)
    overwrite_inside(path, optimizer.state[model.stem[0].weight]["momentum_buffer"])
    with pytest.raises(UserError, match=rf"{path} is corrupt: the checksum of its optimizer state"):
        load_checkpoint(path)
    # A weights-only load never reads the optimizer state, so the weights still serve.
    assert load_latest_weights(rundir, AlphaZeroNet(config.network)) == 31


def test_a_model_file_is_checked_too(tmp_path: Path) -> None:
    model = AlphaZeroNet(NetworkConfig(blocks=1, filters=8, policy_filters=8))
    save_model(tmp_path / "net.pt", model)
    overwrite_inside(tmp_path / "net.pt", model.stem[0].weight.detach())
    with pytest.raises(UserError, match="net.pt is corrupt: the checksum of its weights"):
        load_model(tmp_path / "net.pt")


def test_a_checkpoint_without_checksums_still_loads(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    path = save_checkpoint(rundir, model, torch.optim.SGD(model.parameters(), lr=0.1), 40, config)
    payload = torch.load(path, weights_only=True)
    del payload["checksums"]  # as written before checksums existed
    torch.save(payload, path)
    assert load_checkpoint(path)["step"] == 40
    assert load_latest_weights(rundir, AlphaZeroNet(config.network)) == 40


def test_changed_metadata_is_found(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    path = save_checkpoint(rundir, AlphaZeroNet(config.network), None, 50, config)
    payload = torch.load(path, weights_only=True)
    payload["step"] = 60
    torch.save(payload, path)
    with pytest.raises(UserError, match="is corrupt: the checksum of its metadata"):
        load_checkpoint(path)


def test_rewinding_moves_newer_checkpoints_aside_and_points_latest_back(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    model = AlphaZeroNet(config.network)
    for step in (100, 200, 300):
        save_checkpoint(rundir, model, None, step, config)
    moved = rewind_checkpoints(rundir, 100)
    assert [step_of(p) for p in moved] == [200, 300] and all(p.is_file() for p in moved)
    assert moved[0].parent.parent == rundir.checkpoints
    assert checkpoint_steps(rundir) == [100] and latest_checkpoint(rundir) == rundir.checkpoints / checkpoint_name(100)
    assert (rundir.checkpoints / LATEST_NAME).read_text().strip() == checkpoint_name(100)
    assert rewind_checkpoints(rundir, 100) == []
    with pytest.raises(UserError, match="no checkpoint at step 7"):
        rewind_checkpoints(rundir, 7)
