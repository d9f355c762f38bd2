"""An inference server: one network on one GPU, fed by the batches of several actors.

Actors send their gathered leaves (compact planes, a few KB per position) and
wait; the server waits up to `wait_ms` for more requests, concatenates up to
`max_batch` positions into one forward pass, and answers each actor with its
own rows. A plain class, wrapped as an async Ray actor by the driver.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from alphazero.checkpoint import load_latest_weights
from alphazero.config import from_toml
from alphazero.network import Evaluator, build_network, pick_device
from alphazero.rundir import RunDir

log = logging.getLogger(__name__)

Request = tuple[np.ndarray, np.ndarray, "asyncio.Future[tuple[np.ndarray, np.ndarray, int]]"]


class InferenceServer:
    """Batches evaluation requests from many actors into few forward passes."""

    def __init__(self, run_path: str, config_toml: str, *, device: str | None = None,
                 max_batch: int | None = None, wait_ms: float | None = None) -> None:
        config = from_toml(config_toml)
        self.run = RunDir(run_path)
        self.evaluator = Evaluator(build_network(config.network), pick_device(device or config.selfplay.device))
        self.max_batch = max_batch or config.selfplay.server_batch_size
        self.wait_s = (wait_ms if wait_ms is not None else config.selfplay.server_wait_ms) / 1000
        self.poll_s = config.selfplay.weights_poll_seconds
        self.step = -1
        self.weights_checked = 0.0
        self.pending: list[Request] = []
        self.batcher: asyncio.Task[None] | None = None
        # The forward pass runs off the event loop so requests keep arriving meanwhile.
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.passes = 0
        self.positions = 0
        self._poll_weights(force=True)

    def _poll_weights(self, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self.weights_checked >= self.poll_s:
            self.weights_checked = now
            step = load_latest_weights(self.run, self.evaluator.model, newer_than=self.step)
            if step is not None:
                self.step = step

    def set_weights(self, step: int, state_dict: dict[str, torch.Tensor]) -> int:
        """Takes weights pushed through Ray."""
        if step > self.step:
            self.evaluator.set_weights(state_dict)
            self.step = step
        return self.step

    async def evaluate(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
        """Evaluates one actor's batch (with others'); returns logits, values and the weights' step."""
        future: asyncio.Future[tuple[np.ndarray, np.ndarray, int]] = asyncio.get_running_loop().create_future()
        self.pending.append((planes, scalars, future))
        if self.batcher is None or self.batcher.done():
            self.batcher = asyncio.create_task(self._run_batches())
        return await future

    async def _run_batches(self) -> None:
        loop = asyncio.get_running_loop()
        while self.pending:
            if sum(len(p) for p, _, _ in self.pending) < self.max_batch:
                await asyncio.sleep(self.wait_s)  # let the other actors' requests arrive
            taken, size = [], 0
            while self.pending and (not taken or size + len(self.pending[0][0]) <= self.max_batch):
                taken.append(self.pending.pop(0))
                size += len(taken[-1][0])
            self._poll_weights()
            planes = np.concatenate([p for p, _, _ in taken])
            scalars = np.concatenate([s for _, s, _ in taken])
            try:
                logits, values = await loop.run_in_executor(self.pool, self.evaluator.evaluate, planes, scalars)
            except Exception as error:  # hand the failure to every waiting actor
                for _, _, future in taken:
                    future.set_exception(error)
                continue
            self.passes += 1
            self.positions += size
            start = 0
            for p, _, future in taken:
                future.set_result((logits[start:start + len(p)], values[start:start + len(p)], self.step))
                start += len(p)

    def stats(self) -> dict[str, float]:
        """Forward passes and positions so far (average batch = positions / passes)."""
        return {"passes": self.passes, "positions": self.positions}
