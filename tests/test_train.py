"""`alphazero train`: self-play and the learner together, stopped and resumed."""

from __future__ import annotations

import re

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from alphazero.app import cli
from alphazero.store.checkpoint import latest_checkpoint, step_of
from alphazero.store.rundir import RunDir
from alphazero.store.shards import list_shards
from tests.helpers import TRAIN_FAST

pytest.importorskip("ray")

CAP_MINUTES = 15
"""The tests' runs end at their learner.training_steps: the minutes are only a bound against a hang, generous so
that a slow or busy machine never meets it (a run that did would end short of its steps and fail)."""


def train(run_path, minutes: float, *more: str) -> int:
    overrides = [item for override in [*TRAIN_FAST, *more] for item in ("--set", override)]
    return cli.main(["train", "--run", str(run_path), "--minutes", str(minutes), "--actors", "1", "--quiet",
                     *overrides])


@pytest.mark.slow
def test_train_writes_games_checkpoints_and_curves_then_resumes(tmp_path, capsys):
    run = RunDir(tmp_path / "run")
    assert train(run.root, CAP_MINUTES, "learner.training_steps=12") == 0
    out = capsys.readouterr().out
    assert "train: training is finished: step 12 reached learner.training_steps" in out
    assert "train: no checkpoint yet: the learner starts at step 0" in out and "learner at step" in out
    assert "learner at step" in out and "train: resign" in out
    # A first run's lines concern what the user asked for: nothing of an action-value head the network lacks.
    assert "action-value" not in out
    # How soon the run learned, from the launch: its first game, learner step and checkpoint after that step.
    first_game, first_step, first_saved, saved_step = map(int, re.search(
        r"train: from the start: first game (\d+) s, first learner step (\d+) s, first checkpoint after it "
        r"(\d+) s \(step (\d+)\)", out).groups())
    assert first_game <= first_step <= first_saved and saved_step > 0
    assert list_shards(run.selfplay) and list(run.games.glob("*.pgn"))
    first = latest_checkpoint(run)
    assert first is not None and step_of(first) > 0
    events = EventAccumulator(str(run.tb / "learner"))
    events.Reload()
    assert {"loss/total", "loss/policy", "loss/value", "replay/validation_positions"} <= set(events.Tags()["scalars"])
    assert events.Scalars("loss/total")
    selfplay_events = EventAccumulator(str(run.tb / "selfplay"))
    selfplay_events.Reload()
    assert {"selfplay/positions_per_s", "resign/threshold"} <= set(selfplay_events.Tags()["scalars"])
    assert (run.root / "resign.json").is_file()  # the threshold in force, for the actors and a restart

    shards_before = set(list_shards(run.selfplay))
    # A rerun resumes: nothing is lost, the step goes on.
    assert train(run.root, CAP_MINUTES, "learner.training_steps=15") == 0
    # Said without a terminal too (capsys is none), as `alphazero learn` says it.
    assert f"train: learner resumed from {first} (step {step_of(first):,})" in capsys.readouterr().out
    assert shards_before <= set(list_shards(run.selfplay))
    assert step_of(latest_checkpoint(run)) == 15


@pytest.mark.slow
def test_at_learning_rate_zero_self_play_and_learning_leave_every_parameter_bit_for_bit(tmp_path):
    """The loop's invariant (issue 22): a run that must not move does not move. Self-play plays, the learner
    takes steps and publishes checkpoints, and with learning rate 0 every parameter stays the start's; with
    the batch-norm statistics frozen (the default of a run from --init) so does every other tensor."""
    import torch

    from alphazero.nn.network import AlphaZeroNet
    from alphazero.presets import get_preset
    from alphazero.store.checkpoint import load_checkpoint, save_model

    torch.manual_seed(7)
    start = AlphaZeroNet(get_preset("tiny").network)
    save_model(tmp_path / "start.pt", start)
    overrides = [item for override in [*TRAIN_FAST, "learner.learning_rates=0,0,0,0", "learner.training_steps=10"]
                 for item in ("--set", override)]
    run = RunDir(tmp_path / "run")
    assert cli.main(["train", "--run", str(run.root), "--init", str(tmp_path / "start.pt"),
                     "--minutes", str(CAP_MINUTES), "--actors", "1", "--quiet", *overrides]) == 0
    assert run.read_config().learner.freeze_batch_norm
    final = latest_checkpoint(run)
    assert final is not None and step_of(final) == 10 and list_shards(run.selfplay)
    weights = load_checkpoint(final)["model"]
    assert set(weights) == set(start.state_dict())
    for name, tensor in start.state_dict().items():
        assert torch.equal(weights[name], tensor), name


@pytest.mark.slow
def test_a_run_from_weights_without_the_head_learns_one_from_its_own_games(tmp_path, capsys):
    """`train --init FILE --set network.action_value_head=logit` on weights without the head (the built-in
    network's case, issue 68): the head starts fresh, self-play writes the search's values of the moves it
    visited into the shards, and the learner trains the head on them (loss/action_value)."""
    import torch

    from alphazero.nn.network import AlphaZeroNet
    from alphazero.presets import get_preset
    from alphazero.store.checkpoint import load_checkpoint, save_model
    from alphazero.store.shards import read_shard

    torch.manual_seed(7)
    save_model(tmp_path / "start.pt", AlphaZeroNet(get_preset("tiny").network))
    overrides = [item for override in [*TRAIN_FAST, "network.action_value_head=logit", "learner.training_steps=8"]
                 for item in ("--set", override)]
    run = RunDir(tmp_path / "run")
    assert cli.main(["train", "--run", str(run.root), "--init", str(tmp_path / "start.pt"),
                     "--minutes", str(CAP_MINUTES), "--actors", "1", "--quiet", *overrides]) == 0
    assert "train: the action-value head learns the search's value of every move self-play visits" in \
        capsys.readouterr().out
    shards = list_shards(run.selfplay)
    assert shards and all(read_shard(path).policy_wins is not None for path in shards)
    final = latest_checkpoint(run)
    assert final is not None and step_of(final) == 8
    assert any(name.startswith("action_value") for name in load_checkpoint(final)["model"])
    events = EventAccumulator(str(run.tb / "learner"))
    events.Reload()
    losses = [event.value for event in events.Scalars("loss/action_value")]
    assert losses and all(loss > 0 for loss in losses)


@pytest.mark.parametrize(("args", "message"), [
    (["--preset", "cf-tiny"], "the --init weights are a 'resnet' network, and --preset cf-tiny is made for a "
                              "'chessformer' one"),
    (["--set", "network.filters=64"], "--init takes the network from its weights, and --set asks for another: "
                                      "network.filters=64 (the weights' 32)"),
])
def test_init_refuses_what_its_weights_would_overrule_before_the_run_is_made(
        tmp_path, capsys, weights, args: list[str], message: str) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--run", str(run), "--init", str(weights), "--minutes", "1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not run.exists()
    # The weights' own value, and a field they leave to the run, are not refused.
    from learner.init_weights import check_init_settings, read_init

    init = read_init(str(weights), run)
    check_init_settings(init, "tiny", ["network.filters=32", "network.action_value_head=logit"])


def test_a_bad_override_leaves_no_run_folder(tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--run", str(run), "--minutes", "1", "--set", "search.simulations=0"]) == 2
    assert "search.simulations must be at least 1" in capsys.readouterr().err
    assert not run.exists()
