"""Self-play follows the weights LATEST names, a rewound learner's too, and every weight change takes one path
(Evaluator.set_weights, which arms the parity check): the actor's disk poll, its Ray push, the inference server
and the driver's feed (alphazero.store.played_weights)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from alphazero.config import Config, to_toml
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet
from alphazero.store.checkpoint import rewind_checkpoints, save_checkpoint
from alphazero.store.played_weights import poll_latest_weights
from tests.helpers import fast_run

EAGER = ["selfplay.cpu_forward=eager", "selfplay.cpu_precision=float32"]


def _model(config: Any, seed: int) -> AlphaZeroNet:
    torch.manual_seed(seed)
    return AlphaZeroNet(config.network)


def _first_parameter(model: torch.nn.Module) -> torch.Tensor:
    return next(iter(model.state_dict().values())).detach().clone()


def _run_at_20_with_10_before(tmp_path: Path, *extra: str) -> tuple[Any, Any, dict[int, torch.Tensor]]:
    """A run with checkpoints 10 and 20 of other weights (LATEST: 20); returns each one's first parameter."""
    run, config = fast_run(tmp_path / "run", *EAGER, *extra)
    assert isinstance(config, Config)
    first = {}
    for step, seed in ((10, 1), (20, 2)):
        model = _model(config, seed)
        save_checkpoint(run, model, None, step, config)
        first[step] = _first_parameter(model)
    assert not torch.equal(first[10], first[20])
    return run, config, first


def _worker(run: Any, config: Any) -> Any:
    from selfplay.worker import SelfPlayWorker

    return SelfPlayWorker(str(run.root), to_toml(config), "w1", seed=1, max_games=4)


def test_an_actor_follows_a_rewound_learner_back_to_the_older_weights(tmp_path: Path) -> None:
    run, config, first = _run_at_20_with_10_before(tmp_path)
    worker = _worker(run, config)
    assert worker.evaluator is not None and worker.step == 20
    assert torch.equal(_first_parameter(worker.evaluator.model), first[20])
    rewind_checkpoints(run, 10)  # what `learn --from-checkpoint 10` does to LATEST
    worker._poll_weights(force=True)
    assert worker.step == 10
    assert torch.equal(_first_parameter(worker.evaluator.model), first[10])
    # The relearnt step 20 is another network than the abandoned one of the same step: taken too.
    relearnt = _model(config, 3)
    save_checkpoint(run, relearnt, None, 20, config)
    worker._poll_weights(force=True)
    assert worker.step == 20 and torch.equal(_first_parameter(worker.evaluator.model), _first_parameter(relearnt))


def test_a_ray_push_of_older_weights_is_taken_and_the_same_weights_are_not_taken_twice(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, config, first = _run_at_20_with_10_before(tmp_path)
    worker = _worker(run, config)
    older = _model(config, 1).state_dict()
    assert worker.set_weights(10, older, "step 10 pushed") == 10
    assert torch.equal(_first_parameter(worker.evaluator.model), first[10])
    calls: list[dict[str, torch.Tensor]] = []
    monkeypatch.setattr(worker.evaluator, "set_weights", calls.append)
    worker.set_weights(10, older, "step 10 pushed")
    assert calls == []  # the weights in use: no reload, no parity check armed again


def test_a_disk_polled_weight_change_goes_through_set_weights_and_arms_the_parity_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, config, first = _run_at_20_with_10_before(tmp_path)
    worker = _worker(run, config)
    worker.evaluator._checked.add((8, False))  # as after a checked pass of a bucket of 8
    taken: list[Evaluator] = []
    original = Evaluator.set_weights

    def spy(self: Evaluator, state: dict[str, torch.Tensor]) -> None:
        taken.append(self)
        original(self, state)

    monkeypatch.setattr(Evaluator, "set_weights", spy)
    save_checkpoint(run, _model(config, 4), None, 30, config)
    worker._poll_weights(force=True)
    assert worker.step == 30 and taken == [worker.evaluator]
    assert not worker.evaluator._checked  # each bucket's next pass is checked against float32 eager again
    worker._poll_weights(force=True)  # LATEST unchanged: nothing read, nothing armed
    assert taken == [worker.evaluator]


def test_an_inference_server_follows_a_rewound_learner_through_set_weights(tmp_path: Path) -> None:
    from selfplay.inference import InferenceServer

    run, config, first = _run_at_20_with_10_before(tmp_path)
    server = InferenceServer(str(run.root), to_toml(config), device="cpu", max_batch=8)
    assert server.step == 20 and torch.equal(_first_parameter(server.evaluator.model), first[20])
    server.evaluator._checked.add((8, False))
    rewind_checkpoints(run, 10)
    server._poll_weights(force=True)
    assert server.step == 10 and torch.equal(_first_parameter(server.evaluator.model), first[10])
    assert not server.evaluator._checked  # the parity check armed: the change went through set_weights


class _Target:
    """An actor (or server) handle: records what the feed pushes."""

    def __init__(self) -> None:
        self.pushes: list[tuple[int, str | None]] = []
        self.set_weights = types.SimpleNamespace(remote=self._push)

    def _push(self, step: int, weights: Any, identity: str | None = None) -> None:
        self.pushes.append((step, identity))


def test_the_drivers_feed_pushes_the_rewound_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from selfplay.fleet import WeightFeed
    from selfplay.worker import PlayStats

    monkeypatch.setitem(sys.modules, "ray", types.SimpleNamespace(put=lambda value: value))
    run, config, first = _run_at_20_with_10_before(tmp_path)
    target = _Target()
    feed = WeightFeed(run, config, sink=None, targets=[target])
    feed.update(force=True)
    assert [step for step, _ in target.pushes] == [20]
    feed.note(0, PlayStats(weights_step=20, weights_identity=target.pushes[0][1]))
    feed.update(force=True)  # LATEST unchanged: nothing pushed again
    rewind_checkpoints(run, 10)
    feed.update(force=True)
    assert [step for step, _ in target.pushes] == [20, 10]
    assert torch.equal(_first_parameter(_as_model(config, feed.weights)), first[10])


def _as_model(config: Any, state: dict[str, torch.Tensor]) -> AlphaZeroNet:
    model = AlphaZeroNet(config.network)
    model.load_state_dict(state)
    return model


def test_weights_are_named_by_their_content_and_a_file_without_checksums_by_the_file(tmp_path: Path) -> None:
    run, config, _ = _run_at_20_with_10_before(tmp_path)
    found = poll_latest_weights(run, config.network)
    assert found is not None and found.step == 20 and found.identity.startswith("step 20 sha256 ")
    assert poll_latest_weights(run, config.network, seen_file=found.file_key) is None  # the same file: not read
    path = run.checkpoints / "step_000000020.pt"
    payload = torch.load(path, weights_only=True)
    del payload["checksums"]  # a file from before checksums
    torch.save(payload, path)
    old = poll_latest_weights(run, config.network, seen_file=found.file_key)
    assert old is not None and old.identity.startswith("step 20 file step_000000020.pt:")



class _Ref:
    """A push's answer, given when the test says."""

    def __init__(self) -> None:
        self.done = False
        self.error: Exception | None = None


class _FakeRay(types.ModuleType):
    """What WeightPublisher asks of Ray: put, wait, get and RayError."""

    def __init__(self, error_type: type[Exception]) -> None:
        super().__init__("ray")
        self.waits: list[float] = []
        self.error_type = error_type

    def put(self, value: Any) -> Any:
        return value

    def wait(self, refs: list[_Ref], num_returns: int, timeout: float) -> tuple[list[_Ref], list[_Ref]]:
        self.waits.append(timeout)
        return [ref for ref in refs if ref.done], [ref for ref in refs if not ref.done]

    def get(self, ref: _Ref) -> int:
        assert ref.done  # never blocks on an unanswered push
        if ref.error is not None:
            raise ref.error
        return 0

    def shutdown(self) -> None:
        pass


class _Actor:
    def __init__(self) -> None:
        self.refs: list[_Ref] = []
        self.set_weights = types.SimpleNamespace(remote=self._push)

    def _push(self, step: int, weights: Any, identity: str) -> _Ref:
        self.refs.append(_Ref())
        return self.refs[-1]


def test_publish_returns_before_a_slow_actor_answers_and_reports_its_failure_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from selfplay import publish

    class RayError(Exception):
        pass

    fake = _FakeRay(RayError)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setitem(sys.modules, "ray.exceptions", types.SimpleNamespace(RayError=RayError))
    monkeypatch.setattr(publish, "connect_ray", lambda address, num_cpus: False)
    run, config, _ = _run_at_20_with_10_before(tmp_path)
    fast, slow = _Actor(), _Actor()
    publisher = publish.WeightPublisher(run.root, None)
    monkeypatch.setattr(publisher, "actors", lambda: {"fast": fast, "slow": slow})
    assert publisher.publish(20, run.checkpoints / "step_000000020.pt") == 2  # neither has answered: no wait
    assert fake.waits == []
    fast.refs[0].done = True
    assert publisher.publish(30, save_checkpoint(run, _model(config, 5), None, 30, config)) == 1
    assert len(fast.refs) == 2 and len(slow.refs) == 1  # no second push piled up behind the slow actor
    assert fake.waits == [0.0] and publisher.taken == 1
    slow.refs[0].done, slow.refs[0].error = True, RayError("actor died")
    fast.refs[1].done = True
    with caplog.at_level("WARNING", logger="selfplay.publish"):
        publisher.__exit__(None, None, None)  # the stop collects what is left
    assert publisher.failures == ["slow did not take the weights of step 20: actor died"]
    assert "slow did not take the weights of step 20" in caplog.text
    assert publisher.taken == 2 and publisher.pending == []
    assert fake.waits[-1] == publish.PUBLISH_WAIT_SECONDS  # the stop's wait is bounded
