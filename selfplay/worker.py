"""One self-play worker: G games at once, one network batch per search step.

A plain class, so it can be tested and benchmarked without Ray; the driver
wraps it as a Ray actor (selfplay.driver). Each `play()` call runs the
search loop for a while and returns statistics, so the driver can push
weights, stop the run or notice a lost actor between calls.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from alphazero.checkpoint import load_latest_weights
from alphazero.config import Config, SearchConfig, from_toml
from alphazero.network import Evaluator, build_network, pick_device
from alphazero.rundir import RunDir
from mcts_ext.search import MultiGameSearch
from selfplay.records import GameWriter

log = logging.getLogger(__name__)

EvaluateFn = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def search_options(search: SearchConfig) -> dict[str, Any]:
    """MultiGameSearch keyword arguments from the run's search config (the names match)."""
    return dataclasses.asdict(search)


@dataclass
class PlayStats:
    """What one play() call did; the driver sums these."""

    worker: str = ""
    wall_seconds: float = 0.0
    network_seconds: float = 0.0      # inside the evaluator (forward pass, transfers, Ray for a server)
    batches: int = 0
    evaluations: int = 0              # positions sent to the network
    moves: int = 0                    # positions played (plies), finished games or not
    games: int = 0
    samples: int = 0                  # training samples recorded
    shards: list[str] = field(default_factory=list)
    game_plies: list[int] = field(default_factory=list)
    results: dict[str, int] = field(default_factory=lambda: {"white": 0, "draw": 0, "black": 0})
    terminations: dict[str, int] = field(default_factory=dict)
    resigned: int = 0
    played_through: int = 0           # games with resignation disabled
    would_have_resigned: int = 0      # ... in which a side went below the threshold
    false_resignations: int = 0       # ... and that side did not lose
    weights_step: int = -1            # -1: freshly initialised weights


def _one_thread() -> None:
    # One actor per core: torch's own thread pool would fight the other actors
    # (the driver also starts actors with OMP/OpenBLAS/MKL at one thread).
    torch.set_num_threads(1)


class SelfPlayWorker:
    """Plays games with its own network copy (or an inference server) and writes them to the run."""

    def __init__(self, run_path: str, config_toml: str, name: str, *, seed: int | None = None,
                 device: str | None = None, server: Any = None, max_games: int | None = None) -> None:
        _one_thread()
        self.run = RunDir(run_path)
        self.config: Config = from_toml(config_toml)
        self.name = name
        self.server = server
        self.step = -1
        self.weights_checked = 0.0
        if server is None:
            model = build_network(self.config.network)
            self.evaluator: Evaluator | None = Evaluator(model, pick_device(device or self.config.selfplay.device))
            self._poll_weights(force=True)
            if self.step < 0:
                log.warning("%s: no checkpoint in %s yet: playing with freshly initialised weights",
                            name, self.run.checkpoints)
        else:
            self.evaluator = None
        # Self-play wants variety more than reproducibility: a restarted actor must
        # not replay the games it already wrote.
        seed = seed if seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.search = MultiGameSearch(self.config.selfplay.games_per_actor, seed=seed,
                                      **search_options(self.config.search))
        self.batch = self.search.new_batch()
        self.first_step = [self.step] * self.search.games
        # Games this worker may still start (None: no limit); all slots start at once.
        self.games_to_start = None if max_games is None else max_games - self.search.games
        for slot in range(max_games if max_games is not None and max_games < self.search.games else self.search.games,
                          self.search.games):
            self.search.clear(slot)
        self.writer = GameWriter(self.run, name, shard_games=self.config.selfplay.shard_games,
                                 save_pgn=self.config.selfplay.save_pgn)

    # -- weights -------------------------------------------------------------

    def set_weights(self, step: int, state_dict: dict[str, torch.Tensor]) -> int:
        """Takes weights pushed through Ray (between search steps: no game is dropped)."""
        if self.evaluator is not None and step > self.step:
            self.evaluator.set_weights(state_dict)
            self.step = step
        return self.step

    def _poll_weights(self, force: bool = False) -> None:
        """Loads the run's LATEST checkpoint when it is newer than the weights in use."""
        if self.evaluator is None:
            return
        now = time.monotonic()
        if not force and now - self.weights_checked < self.config.selfplay.weights_poll_seconds:
            return
        self.weights_checked = now
        step = load_latest_weights(self.run, self.evaluator.model, newer_than=self.step)
        if step is not None:
            self.step = step
            log.info("%s: now playing with the weights of step %d", self.name, step)

    def _evaluate(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self.server is not None:
            import ray

            logits, values, step = ray.get(self.server.evaluate.remote(planes, scalars))
            self.step = step
            return logits, values
        assert self.evaluator is not None
        return self.evaluator.evaluate(planes, scalars)

    # -- playing -------------------------------------------------------------

    def play(self, seconds: float) -> PlayStats:
        """Runs the search loop for about `seconds`; finished games are written as shards fill up."""
        stats = PlayStats(worker=self.name)
        moves_before = self.search.total_moves
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and self.search.searching():
            self._poll_weights()
            rows = self.search.gather(*self.batch)
            if rows:
                tick = time.perf_counter()
                logits, values = self._evaluate(self.batch[0][:rows], self.batch[1][:rows])
                stats.network_seconds += time.perf_counter() - tick
                self.search.backup(np.ascontiguousarray(logits, np.float32), np.ascontiguousarray(values, np.float32))
                stats.batches += 1
                stats.evaluations += rows
            self._collect(stats)
        stats.wall_seconds = time.perf_counter() - start
        stats.moves = self.search.total_moves - moves_before
        stats.weights_step = self.step
        return stats

    def _collect(self, stats: PlayStats) -> None:
        for slot, record in self.search.take_finished():
            record["weights_step"] = self.step
            record["weights_step_first"] = self.first_step[slot]
            record["actor"] = self.name
            self._count(stats, record)
            shard = self.writer.add(record)
            if shard is not None:
                stats.shards.append(str(shard))
            if self.games_to_start is None or self.games_to_start > 0:
                self.search.start_game(slot)
                self.first_step[slot] = self.step
                if self.games_to_start is not None:
                    self.games_to_start -= 1

    @staticmethod
    def _count(stats: PlayStats, record: dict[str, Any]) -> None:
        stats.games += 1
        stats.samples += len(record["results"])
        stats.game_plies.append(record["plies"])
        stats.results[record["winner"] or "draw"] += 1
        stats.terminations[record["termination"]] = stats.terminations.get(record["termination"], 0) + 1
        stats.resigned += record["termination"] == "resignation"
        if not record["resign_enabled"]:
            stats.played_through += 1
            if record["would_resign_side"] is not None:
                stats.would_have_resigned += 1
                stats.false_resignations += record["winner"] != _other(record["would_resign_side"])

    def network_rate(self, seconds: float) -> float:
        """Evaluations/s of the network alone in this process, on a full batch of this worker's leaves.

        The baseline of `alphazero bench selfplay`: same process, same thread
        settings, same kind of positions, no search in between.
        """
        rows = self.search.max_batch
        planes, scalars = self.batch[0][:rows], self.batch[1][:rows]
        self._evaluate(planes, scalars)
        done, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            self._evaluate(planes, scalars)
            done += rows
        return done / (time.perf_counter() - start)

    def flush(self) -> str | None:
        """Writes the finished games still buffered (at a clean stop); returns the shard path."""
        path = self.writer.flush()
        return str(path) if path else None

    def idle(self) -> bool:
        """Whether every game has finished and no new one will start (max_games reached)."""
        return self.search.searching() == 0


def _other(colour: str) -> str:
    return "black" if colour == "white" else "white"
