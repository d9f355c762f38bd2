"""The learner's prefetch thread (issue 69): its batches are the ones a seeded window draws inline, the draws
of batches made ahead are not the run's (checkpoints and the next sitting draw them again), its errors reach
the training thread, and it never outlives a stop."""

from __future__ import annotations

import shutil
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from alphazero.config import Config, LearnerConfig, apply_overrides
from alphazero.presets import get_preset
from alphazero.store.checkpoint import checkpoint_name, load_checkpoint
from alphazero.store.rundir import RunDir
from learner.batch import Batch
from learner.feed import DEPTH, BatchFeed
from learner.loop import Learner
from learner.prefetch import Prefetcher
from learner.replay import ReplayWindow
from learner.trainer import Trainer
from tests.helpers import add_shard

BOUND_S = 120.0  # only stops a hang: each wait ends on its condition long before
THREAD = "learner-batches"
# float32 pinned: 'auto' times a step each way on a CPU with bf16 and may choose differently for a learner
# and its resumed copy, whose weights the tests compare.
CONFIG = ["network.blocks=1", "network.filters=16", "network.policy_filters=16", "network.value_filters=2",
          "network.value_hidden=16", "learner.batch_size=32", "learner.min_window_positions=50",
          "learner.window_positions=1000", "learner.max_sample_reuse=0", "learner.checkpoint_every=5",
          "learner.log_every=2", "learner.keep_checkpoints=20", "learner.learning_rates=[0.1]",
          "learner.lr_boundaries=[]", "learner.scale_lr=false", "learner.device=cpu", "learner.validation_share=0",
          "learner.cpu_precision=float32"]


@pytest.fixture(autouse=True)
def _threads() -> None:
    torch.set_num_threads(min(2, torch.get_num_threads()))


class _Changes:
    """A condition the thread under test notifies each time what a test waits for moves."""

    def __init__(self) -> None:
        self._condition = threading.Condition()

    def moved(self) -> None:
        with self._condition:
            self._condition.notify_all()

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        with self._condition:
            assert self._condition.wait_for(condition, BOUND_S), f"no {what} within {BOUND_S} s"


@pytest.fixture()
def draws(monkeypatch: pytest.MonkeyPatch) -> _Changes:
    """Notified after every draw from a replay window (the feed's thread draws ahead of the steps)."""
    changes, original = _Changes(), ReplayWindow.sample

    def sample(self: ReplayWindow, *args: Any, **kwargs: Any) -> Any:
        try:
            return original(self, *args, **kwargs)
        finally:
            changes.moved()

    monkeypatch.setattr(ReplayWindow, "sample", sample)
    return changes


def _feed_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD]


def _config(*overrides: str) -> Config:
    return apply_overrides(get_preset("tiny"), [*CONFIG, *overrides])


@pytest.fixture()
def run(tmp_path: Path) -> tuple[RunDir, Config]:
    rundir, config = RunDir.create_or_open(tmp_path / "run", _config())
    add_shard(rundir.selfplay, range(0, 100))
    add_shard(rundir.selfplay, range(100, 200))
    return rundir, config


# --- the thread ---------------------------------------------------------------------------------------


def test_the_prefetcher_keeps_order_stays_depth_ahead_and_closes_while_blocked() -> None:
    made: list[int] = []
    changes = _Changes()

    def make(closed: threading.Event) -> int:
        made.append(len(made))
        changes.moved()
        return made[-1]

    prefetcher = Prefetcher(make, depth=2)
    assert [prefetcher.get(timeout=BOUND_S) for _ in range(4)] == [0, 1, 2, 3]
    changes.wait_for(lambda: len(made) == 4 + 3, "item made ahead")  # two queued, a third held at the full queue
    prefetcher.close()
    assert not prefetcher.alive and len(made) == 7


def test_the_prefetcher_raises_its_threads_error_with_its_traceback_after_the_items_before_it() -> None:
    def make(closed: threading.Event) -> int:
        count[0] += 1
        if count[0] == 3:
            raise OSError("the shard vanished")
        return count[0]

    count = [0]
    with Prefetcher(make) as prefetcher:
        assert [prefetcher.get(timeout=BOUND_S), prefetcher.get(timeout=BOUND_S)] == [1, 2]
        with pytest.raises(OSError, match="vanished") as raised:
            prefetcher.get(timeout=BOUND_S)
        assert "in make" in "".join(traceback.format_tb(raised.value.__traceback__))
        prefetcher._thread.join(BOUND_S)  # the thread ends on its own after its error
        assert not prefetcher.alive


def test_closing_the_prefetcher_ends_a_make_that_waits() -> None:
    waiting = threading.Event()

    def make(closed: threading.Event) -> int | None:
        waiting.set()
        closed.wait()
        return None

    prefetcher = Prefetcher(make)
    assert waiting.wait(BOUND_S)
    assert prefetcher.get(timeout=0) is None  # nothing ready: get does not wait
    prefetcher.close()
    assert not prefetcher.alive


# --- the learner's batches -----------------------------------------------------------------------------


def _window(directory: Path, seed: int) -> ReplayWindow:
    window = ReplayWindow(directory, window_positions=1000, max_sample_reuse=0, seed=seed)
    window.refresh(force=True)
    return window


def _ids(batch: object) -> list[int]:
    scalars = batch.scalars  # type: ignore[attr-defined]
    return np.asarray(scalars[:, 1]).astype(int).tolist()


def test_the_feed_gives_the_batches_a_seeded_window_draws_inline_and_gives_back_those_not_taken(
        tmp_path: Path, draws: _Changes) -> None:
    add_shard(tmp_path / "selfplay", range(0, 200))
    add_shard(tmp_path / "mix", range(1000, 1100))
    settings = LearnerConfig(batch_size=16, mix_share=0.25, mix_decay_steps=4, mix_dir="mix")
    window, mix = _window(tmp_path / "selfplay", 3), _window(tmp_path / "mix", 4)
    inline, inline_mix = _window(tmp_path / "selfplay", 3), _window(tmp_path / "mix", 4)
    feed = BatchFeed(window, mix, settings, pin=False, describe_wait=str)
    stop = threading.Event()
    with feed.prefetching(0):
        for step in range(5):
            staged, waited = feed.next(stop, lambda reason, text: pytest.fail("the window never waits"))
            assert staged is not None and waited == 0.0 and len(staged) == 16
            mixed = settings.mix_rows(step)
            expected = inline.sample(16 - mixed)
            assert expected is not None
            if mixed:
                extra = inline_mix.sample(mixed)
                assert extra is not None
                expected_ids = _ids(expected) + _ids(extra)
            else:
                expected_ids = _ids(expected)
            assert _ids(staged) == expected_ids, step
        # The thread is ahead of the five steps taken: the checkpoint's state is theirs alone.
        taken = sum(16 - settings.mix_rows(step) for step in range(5))  # the reuse cap counts the window's rows
        draws.wait_for(lambda: window.samples_drawn >= taken + DEPTH * 16, "batches made ahead")
        assert feed.samples_drawn == inline.samples_drawn == taken
        state = feed.window_state()
        assert state["samples_drawn"] == inline.samples_drawn and state["rng"] == inline.state()["rng"]
    assert not _feed_threads()
    assert window.samples_drawn == inline.samples_drawn  # the draws not taken were given back
    assert _ids(window.sample(16)) == _ids(inline.sample(16))
    assert _ids(mix.sample(4)) == _ids(inline_mix.sample(4))


def test_a_checkpoint_taken_while_batches_are_made_ahead_resumes_on_the_batches_not_yet_trained(
        run: tuple[RunDir, Config], monkeypatch: pytest.MonkeyPatch, draws: _Changes) -> None:
    rundir, config = run
    original = Trainer.step
    learner = Learner(rundir, config)

    def step_once_ahead(self: Trainer, batch: object, step: int) -> object:
        if step == 4:  # the thread has drawn past the checkpoint at step 5 before it is saved
            draws.wait_for(lambda: learner.window.samples_drawn >= (5 + DEPTH) * 32, "batches made ahead")
        return original(self, batch, step)  # type: ignore[arg-type]

    monkeypatch.setattr(Trainer, "step", step_once_ahead)
    with learner:
        learner.resume()
        assert learner.train(7) == 7
        straight = {k: v.clone() for k, v in learner.model.state_dict().items()}
    monkeypatch.undo()
    assert load_checkpoint(rundir.checkpoints / checkpoint_name(5))["replay"]["samples_drawn"] == 5 * 32
    assert load_checkpoint(rundir.checkpoints / checkpoint_name(7))["replay"]["samples_drawn"] == 7 * 32
    again = rundir.root.parent / "again"
    shutil.copytree(rundir.root, again)
    resumed_run, _ = RunDir.open(again)
    with Learner(resumed_run, config) as resumed:
        assert resumed.resume(from_step=5) == 5
        assert resumed.train(2) == 7
        for key, value in resumed.model.state_dict().items():
            torch.testing.assert_close(value, straight[key], msg=key)


def test_an_error_on_the_feeds_thread_is_raised_by_train_and_the_thread_ends(run: tuple[RunDir, Config]) -> None:
    rundir, config = run
    with Learner(rundir, config) as learner:
        learner.resume()
        sample, calls = learner.window.sample, [0]

        def failing_sample(size: int) -> Batch | None:
            calls[0] += 1
            if calls[0] == 3:
                raise OSError("the disk went away")
            return sample(size)

        learner.window.sample = failing_sample  # type: ignore[method-assign,assignment]
        with pytest.raises(OSError, match="the disk went away") as raised:
            learner.train(10)
        assert "in failing_sample" in "".join(traceback.format_tb(raised.value.__traceback__))
        assert learner.step == 2 and learner.saved_step == 0  # an error saves nothing
    assert not _feed_threads()


def test_a_second_ctrl_c_quits_without_waiting_for_the_feed(run: tuple[RunDir, Config],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rundir, config = run
    original = Trainer.step

    def interrupted(self: Trainer, batch: object, step: int) -> object:
        if step == 3:
            raise KeyboardInterrupt
        return original(self, batch, step)  # type: ignore[arg-type]

    monkeypatch.setattr(Trainer, "step", interrupted)
    with Learner(rundir, config) as learner:
        learner.resume()
        with pytest.raises(KeyboardInterrupt):
            learner.train(10)
        assert learner.step == 3 and learner.saved_step == 0
    for thread in _feed_threads():  # closed: it ends once its current batch is made
        thread.join(BOUND_S)
    assert not _feed_threads()


def test_a_stop_while_the_feed_waits_for_positions_ends_its_thread(tmp_path: Path) -> None:
    rundir, config = RunDir.create_or_open(tmp_path / "run", _config("learner.poll_seconds=0.01"))
    stop = threading.Event()
    with Learner(rundir, config) as learner:
        learner.resume()

        def stop_when_waiting(reason: str, text: str) -> None:
            assert reason == "positions" and text.startswith("waiting for self-play: 0 of 50 positions")
            stop.set()

        learner._on_wait = stop_when_waiting  # type: ignore[method-assign]
        assert learner.train(stop=stop) == 0
    assert not _feed_threads()


def test_the_learner_bench_times_the_old_batch_path_beside_the_learners(capsys: pytest.CaptureFixture[str]) -> None:
    import argparse
    import re

    from alphazero.app.bench import learner as bench

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    bench.run(parser.parse_args(["--preset", "tiny", "--device", "cpu", "--batch-size", "8", "--seconds", "0.05",
                                 "--set", "network.blocks=1", "--set", "network.filters=8"]))
    out = capsys.readouterr().out
    said = re.search(r"a step with its batch from the replay window ([\d.]+) ms \(sparse targets scattered on the "
                     r"device, prefetched\) against ([\d.]+) ms \(dense host targets, sampled inline\) = ([\d.]+)x "
                     r"the old path's speed; the batch alone ([\d.]+) ms sparse against ([\d.]+) ms dense = "
                     r"([\d.]+)x", out)
    assert said is not None, out
    assert all(float(figure) > 0 for figure in said.groups())
    assert not _feed_threads()
