"""Pushes new checkpoints to a run's self-play actors through Ray (faster than each polling the disk)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any

from alphazero.store.checkpoint import load_checkpoint
from alphazero.store.rundir import RunDir
from selfplay import NAMESPACE
from selfplay.driver import connect_ray
from selfplay.fleet import actor_name_prefix


class WeightPublisher:
    """Sends each new checkpoint's weights to the named self-play actors of one run.

    Actors that are gone are skipped; when they come back they pick the
    weights up from the run directory (transport 'disk') or the self-play
    driver, which follows the run's checkpoints, pushes them ('ray').
    """

    def __init__(self, run_path: str | Path, address: str | None) -> None:
        self.prefix = actor_name_prefix(RunDir(run_path))
        self.started_ray = connect_ray(address, num_cpus=1)

    def actors(self) -> list[Any]:
        import ray

        names = [entry["name"] for entry in ray.util.list_named_actors(all_namespaces=True)
                 if entry.get("namespace") == NAMESPACE and entry["name"].startswith(self.prefix)]
        handles = []
        for name in names:
            try:
                handles.append(ray.get_actor(name, namespace=NAMESPACE))
            except ValueError:
                continue  # gone between listing and lookup
        return handles

    def publish(self, step: int, path: Path) -> int:
        """Sends the weights of checkpoint `path` (step `step`); returns how many actors took them."""
        import ray
        from ray.exceptions import RayError

        handles = self.actors()
        if not handles:
            return 0
        weights = ray.put(load_checkpoint(path, "cpu", mmap=True, check_optimizer=False)["model"])
        refs = [handle.set_weights.remote(step, weights) for handle in handles]
        # One deadline for all: an actor held up (by a stalled shard sink, say) must not hold up the learner
        # for long; it takes the weights when it gets to them, counted or not.
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=60)
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
