"""Pushes new checkpoints to a run's self-play actors through Ray (faster than each polling the disk).

A push is sent without waiting: the learner's thread, which publishes after
every checkpoint, never waits on an actor's running play() (up to
selfplay.play_seconds) nor on a lost link. The answers are collected at the
next publish and at the stop (bounded by PUBLISH_WAIT_SECONDS), and each
failure is reported then, naming the actor and the step: the first time an
error happens with its traceback (the actor's set_weights raised: where), each
time after in its last line only (a hundred actors that refuse the same weights
give one traceback).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from alphazero.store.played_weights import read_checkpoint_weights
from alphazero.store.rundir import RunDir
from selfplay import NAMESPACE
from selfplay.driver import remote_traceback
from selfplay.fleet import actor_name_prefix
from selfplay.ray_connect import connect_ray

log = logging.getLogger(__name__)

PUBLISH_WAIT_SECONDS = 10.0
"""How long the stop waits for the pushes still unanswered (one play() call, 2 s by default, and Ray's round trip)."""


@dataclass
class Push:
    """One push to one actor, until it answers."""

    name: str
    step: int
    ref: Any


class WeightPublisher:
    """Sends each new checkpoint's weights to the named self-play actors of one run.

    Actors that are gone are skipped; when they come back they pick the
    weights up from the run directory (transport 'disk') or the self-play
    driver, which follows the run's checkpoints, pushes them ('ray').
    """

    def __init__(self, run_path: str | Path, address: str | None) -> None:
        self.prefix = actor_name_prefix(RunDir(run_path))
        self.started_ray = connect_ray(address, num_cpus=1)
        self.pending: list[Push] = []   # pushes sent, not answered yet (at most one per actor)
        self.taken = 0                   # pushes the actors answered, since the start
        self.failures: list[str] = []    # one line per push that failed, as reported
        self.shown: set[str] = set()     # the errors (their last lines) whose traceback was shown

    def actors(self) -> dict[str, Any]:
        """Gets the run's self-play actors that exist now, by name."""
        import ray

        names = [entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
                 if entry.get("namespace") == NAMESPACE and entry["name"].startswith(self.prefix)]
        handles = {}
        for name in names:
            try:
                handles[name] = ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                continue  # gone between listing and lookup
        return handles

    def publish(self, step: int, path: Path) -> int:
        """Sends the weights of checkpoint `path` (step `step`) to the run's actors without waiting; returns how
        many it was sent to.

        The answers to the earlier pushes are collected first (those there
        are). An actor that has not answered its last push (a host out of
        reach, a stalled shard sink, a long play()) gets none this time,
        so pushes never pile up behind it: it gets the next checkpoint after
        it answers, as the learner never waits on a lost link (EXPERIMENTS.md,
        "Faults on a cluster of namespace hosts").
        """
        import ray

        self.collect(timeout=0.0)
        busy = {push.name for push in self.pending}
        handles = {name: handle for name, handle in self.actors().items() if name not in busy}
        if not handles:
            return 0
        found = read_checkpoint_weights(path)
        weights = ray.put(found.state)
        for name, handle in handles.items():
            self.pending.append(Push(name, step, handle.set_weights.remote(found.step, weights, found.identity)))
        return len(handles)

    def collect(self, timeout: float) -> int:
        """Collects the answers of the pushes sent, waiting up to ``timeout`` seconds for them all; reports
        each failed one (a warning naming the actor and step); returns how many are still unanswered."""
        import ray
        from ray.exceptions import RayError

        if not self.pending:
            return 0
        refs = [push.ref for push in self.pending]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        answered = set(done)  # ObjectRefs hash by the object they name
        still = []
        for push in self.pending:
            if push.ref not in answered:
                still.append(push)
                continue
            try:
                ray.get(push.ref)
                self.taken += 1
            except RayError as error:  # the actor died, or its set_weights raised (weights that do not fit)
                self._failed(push, error)
        self.pending = still
        return len(still)

    def _failed(self, push: Push, error: BaseException) -> None:
        """Reports a failed push: its error's traceback the first time that error happens, its last line after."""
        full = remote_traceback(error).strip()
        line = full.splitlines()[-1] if full else type(error).__name__
        self.failures.append(f"{push.name} did not take the weights of step {push.step}: {line}")
        if line in self.shown or full == line:
            log.warning("%s", self.failures[-1])
            return
        self.shown.add(line)
        log.warning("%s; its error in full (shown once: the same error again shows its last line only):\n%s",
                    self.failures[-1], full)

    def close(self) -> None:
        """Collects the pushes still unanswered, waiting up to PUBLISH_WAIT_SECONDS; says which never answered."""
        for push in self.pending if self.collect(PUBLISH_WAIT_SECONDS) else ():
            log.warning("%s did not answer the push of the weights of step %d within %g s", push.name, push.step,
                        PUBLISH_WAIT_SECONDS)
        self.pending = []

    def __enter__(self) -> WeightPublisher:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        import ray

        try:
            self.close()
        finally:
            if self.started_ray:
                ray.shutdown()
