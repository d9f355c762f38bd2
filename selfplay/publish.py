"""Pushes new checkpoints to a run's self-play actors through Ray (faster than each polling the disk)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from alphazero.store.checkpoint import load_checkpoint
from alphazero.store.rundir import RunDir
from selfplay import NAMESPACE
from selfplay.fleet import actor_name_prefix
from selfplay.ray_connect import connect_ray

PUBLISH_WAIT_SECONDS = 10.0
"""How long a push waits for the actors to take it (one play() call, 2 s by default, and Ray's round trip)."""


class WeightPublisher:
    """Sends each new checkpoint's weights to the named self-play actors of one run.

    Actors that are gone are skipped; when they come back they pick the
    weights up from the run directory (transport 'disk') or the self-play
    driver, which follows the run's checkpoints, pushes them ('ray').
    """

    def __init__(self, run_path: str | Path, address: str | None) -> None:
        self.prefix = actor_name_prefix(RunDir(run_path))
        self.started_ray = connect_ray(address, num_cpus=1)
        self.unanswered: dict[str, Any] = {}  # actor name -> its push still unanswered after the deadline

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
        """Sends the weights of checkpoint `path` (step `step`); returns how many actors took them within
        PUBLISH_WAIT_SECONDS.

        An actor that has not answered an earlier push (a host out of reach, a
        stalled shard sink) gets this one too, but is not waited for until it
        answers: the learner, which calls this after every checkpoint, never
        waits on a lost link (EXPERIMENTS.md, "Issue 50: faults on a cluster of namespace hosts").
        """
        import ray
        from ray.exceptions import RayError

        if self.unanswered:
            answered, _ = ray.wait(list(self.unanswered.values()), num_returns=len(self.unanswered), timeout=0)
            self.unanswered = {name: ref for name, ref in self.unanswered.items() if ref not in answered}
        handles = self.actors()
        if not handles:
            return 0
        weights = ray.put(load_checkpoint(path, "cpu", mmap=True, check_optimizer=False)["model"])
        refs = {name: handle.set_weights.remote(step, weights) for name, handle in handles.items()}
        waited = [ref for name, ref in refs.items() if name not in self.unanswered]
        done, late = ray.wait(waited, num_returns=len(waited), timeout=PUBLISH_WAIT_SECONDS) if waited else ([], [])
        self.unanswered.update({name: ref for name, ref in refs.items() if ref in late})
        taken = 0
        for ref in done:
            try:
                ray.get(ref)
                taken += 1
            except RayError:
                continue
        return taken

    def __enter__(self) -> WeightPublisher:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        import ray

        if self.started_ray:
            ray.shutdown()
