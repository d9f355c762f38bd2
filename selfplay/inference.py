"""An inference server: one network on one GPU, fed by the batches of several actors.

Actors send their gathered leaves (compact planes, a few KB per position, and
the legal moves' indices) and wait; the server copies up to `max_batch`
positions of the waiting requests (by default all its actors' requests at
once: server_batch_size) into one preallocated (on CUDA pinned) batch, runs
one forward pass, and answers each actor with its own rows: only the legal
moves' logits (~30 floats a position) and the values, and to an actor that
asks (its search reads them, alphazero.search_action_values) the legal moves'
action values too: a pass computes them when one of its requests asks, and
answers them to those that asked. Requests
that come during a pass make up the next one; an idle server takes what is
ready at once (with ``wait_ms`` > 0 it waits up to that for company), so the
GPU never idles while a request waits.

What crosses Ray: each request's arrays are numpy, which Ray serializes
without pickling their contents (pickle protocol 5 buffers; arrays above
100 KB go through the shared-memory object store and arrive as zero-copy
views). The answers are small: the legal logits of a batch of 64 are about
12 KB, where all 4672 logits were 1.2 MB. A plain class, wrapped as an async
Ray actor by the driver.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from alphazero.config import Config
from alphazero.errors import UserError
from alphazero.nn.network import build_network, pick_device
from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS
from alphazero.presets import from_toml
from alphazero.store.played_weights import poll_latest_weights
from alphazero.store.rundir import RunDir
from selfplay.worker import measure_rate, selfplay_evaluator

log = logging.getLogger(__name__)

Answer = tuple[np.ndarray, np.ndarray, int] | tuple[np.ndarray, np.ndarray, int, np.ndarray]
"""Legal logits [n, W], values [n], the weights' step, and for a request that asked, legal action values [n, W]."""


def server_batch_size(config: Config, actors: int) -> int:
    """Gets the most positions in one pass of a server that serves ``actors`` actors.

    selfplay.server_batch_size when set; 0 (the default): every request its
    actors can have in flight at once, actors x games_per_actor x
    search.leaves_per_game (each of an actor's lanes sends its share of its
    games), so the requests that arrive during a pass all go in the next one.
    """
    if config.selfplay.server_batch_size > 0:
        return config.selfplay.server_batch_size
    return max(1, actors) * config.selfplay.games_per_actor * config.search.leaves_per_game


@dataclass
class _Request:
    planes: np.ndarray                 # uint64 [n, 112]
    scalars: np.ndarray                # float32 [n, 7]
    indices: np.ndarray                # int32 [n, W] legal moves' policy indices
    counts: np.ndarray                 # int32 [n]
    answer: asyncio.Future[Answer]
    action_values: bool = False        # the legal moves' action values wanted too


class InferenceServer:
    """Batches evaluation requests from many actors into few forward passes."""

    def __init__(self, run_path: str | None, config_toml: str, *, device: str | None = None,
                 max_batch: int | None = None, wait_ms: float | None = None, actors: int = 1) -> None:
        """Builds the server's network: with ``run_path`` (transport 'disk') from the run's newest checkpoint,
        polled later; without (transport 'ray') with fresh weights until set_weights. ``actors`` is how many
        actors it serves: with selfplay.server_batch_size 0 its largest pass takes all their requests
        (server_batch_size). Every bucket's graph or compilation is made here.

        Raises:
            UserError: the run's newest checkpoint is corrupt or of another architecture.
        """
        config = from_toml(config_toml)
        self.run = RunDir(run_path) if run_path is not None else None
        self.max_batch = max_batch or server_batch_size(config, actors)
        torch_device = pick_device(device or config.selfplay.device)
        self.evaluator = selfplay_evaluator(build_network(config.network), config.selfplay, torch_device,
                                            self.max_batch)
        self.wait_s = (wait_ms if wait_ms is not None else config.selfplay.server_wait_ms) / 1000
        self.poll_s = config.selfplay.weights_poll_seconds
        self.network = config.network
        self.step = -1
        self.weights_identity: str | None = None  # what the weights are (alphazero.store.played_weights); None: fresh
        self.weights_file: str | None = None      # the checkpoint file last read (played_weights.file_key)
        self.weights_checked = 0.0
        self.pending: list[_Request] = []
        self.batcher: asyncio.Task[None] | None = None
        # The forward pass runs off the event loop so requests keep arriving
        # meanwhile; weights change in the same thread, never during a pass.
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.batch: tuple[np.ndarray, ...] = ()
        self.passes = 0
        self.positions = 0
        self._poll_weights(force=True)
        # In the pool's thread, where the passes run: torch.compile's CUDA graphs are kept per thread.
        self.pool.submit(self.evaluator.warm_up).result()

    def _poll_weights(self, force: bool = False) -> None:
        """Loads the weights LATEST names when they differ from those in use (transport 'disk'; in the pool's
        thread, between passes): newer ones, or older ones after a rewind (``learn --from-checkpoint``)."""
        if self.run is None:
            return
        now = time.monotonic()
        if force or now - self.weights_checked >= self.poll_s:
            self.weights_checked = now
            found = poll_latest_weights(self.run, self.network, seen_file=self.weights_file)
            if found is not None:
                self._take_weights(found.step, found.identity, found.state)
                self.weights_file = found.file_key

    def _take_weights(self, step: int, identity: str, state_dict: dict[str, torch.Tensor]) -> None:
        """Every weight change goes through here (in the pool's thread), whichever transport brought it:
        Evaluator.set_weights, which also refolds the batch norms and arms the parity check (alphazero.nn.forward)."""
        if identity == self.weights_identity:
            return
        self.evaluator.set_weights(state_dict)
        self.weights_identity = identity
        self.step = step
        log.info("inference server: now serving the weights of step %d (%s)", step, identity)

    async def set_weights(self, step: int, state_dict: dict[str, torch.Tensor], identity: str | None = None) -> int:
        """Takes weights pushed through Ray (between passes) unless they are the ones in use: any other weights,
        of a lower step too (a rewound learner's). A push that does not name them is named by its step."""
        named = identity if identity is not None else f"step {step}"
        await asyncio.get_running_loop().run_in_executor(self.pool, self._take_weights, step, named, state_dict)
        return self.step

    def has_action_values(self) -> bool:
        """Whether the server's network has an action-value head (what evaluate_legal's action_values needs)."""
        return self.evaluator.has_action_values

    async def evaluate_legal(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                             legal_counts: np.ndarray, action_values: bool = False) -> Answer:
        """Evaluates one actor's batch (with others'); returns legal logits [n, W], values [n] and the weights' step,
        and with ``action_values`` the legal moves' action values [n, W] after them.

        legal_indices int32 [n, W] holds row b's legal moves' policy indices
        in its first legal_counts[b] columns (Evaluator.evaluate_legal).

        Raises:
            UserError: action values asked of a network without the head (before the request joins a pass).
        """
        if action_values and not self.evaluator.has_action_values:
            raise UserError("action values asked of the inference server, whose network has no action-value head "
                            "(network.action_value_head = 'none')")
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self.pending.append(_Request(planes, scalars, legal_indices, legal_counts, future, action_values))
        if self.batcher is None or self.batcher.done():
            self.batcher = asyncio.create_task(self._run_batches())
        return await future

    async def _run_batches(self) -> None:
        loop = asyncio.get_running_loop()
        idle = True
        while self.pending:
            # Requests that come while a pass runs wait for the next one, so only
            # an idle server may wait (wait_ms, 0 by default) for other actors' requests.
            if idle and self.wait_s > 0 and sum(len(r.planes) for r in self.pending) < self.max_batch:
                await asyncio.sleep(self.wait_s)
            idle = False
            taken: list[_Request] = []
            size = 0
            while self.pending and (not taken or size + len(self.pending[0].planes) <= self.max_batch):
                taken.append(self.pending.pop(0))
                size += len(taken[-1].planes)
            try:
                outputs = await loop.run_in_executor(self.pool, self._pass, taken, size)
            except Exception as error:  # hand the failure to every waiting actor
                for request in taken:
                    request.answer.set_exception(error)
                continue
            self.passes += 1
            self.positions += size
            self._answer(taken, outputs)

    def _answer(self, taken: list[_Request], outputs: tuple[np.ndarray, ...]) -> None:
        """Answers each request of a pass with its rows of the pass's outputs (its action values where it asked)."""
        legal, values, *action_values = outputs
        start = 0
        for request in taken:
            end = start + len(request.planes)
            width = max(int(request.counts.max()), 1)
            # Copies: the evaluator's buffers are reused by the next pass.
            answer: Answer = (legal[start:end, :width].copy(), values[start:end].copy(), self.step)
            if request.action_values:
                answer = (*answer, action_values[0][start:end, :width].copy())
            request.answer.set_result(answer)
            start = end

    def _pass(self, taken: list[_Request], size: int) -> tuple[np.ndarray, ...]:
        """Copies the requests into the server's batch and evaluates it (in the pool thread), with the legal moves'
        action values when a request asks for them."""
        self._poll_weights()
        width = max(r.indices.shape[1] for r in taken)
        planes, scalars, indices, counts = self._batch_arrays(size, width)
        np.concatenate([r.planes for r in taken], out=planes)
        np.concatenate([r.scalars for r in taken], out=scalars)
        np.concatenate([r.counts for r in taken], out=counts)
        start = 0
        for request in taken:
            rows, columns = request.indices.shape
            indices[start:start + rows, :columns] = request.indices
            start += rows
        return self.evaluator.evaluate_legal(planes, scalars, indices, counts,
                                             action_values=any(r.action_values for r in taken))

    def _batch_arrays(self, rows: int, width: int) -> tuple[np.ndarray, ...]:
        """Views of the preallocated (pinned on CUDA) pass arrays for rows x width; grown when too small."""
        if not self.batch or self.batch[0].shape[0] < rows or self.batch[2].shape[1] < width:
            capacity = max(rows, self.max_batch, self.batch[0].shape[0] if self.batch else 0)
            width = max(width, self.batch[2].shape[1] if self.batch else 0)
            self.batch = self.evaluator.pin((np.zeros((capacity, COMPACT_PLANES), np.uint64),
                                             np.zeros((capacity, NUM_SCALARS), np.float32),
                                             np.zeros((capacity, width), np.int32),
                                             np.zeros(capacity, np.int32)))
        planes, scalars, indices, counts = self.batch
        return planes[:rows], scalars[:rows], indices[:rows], counts[:rows]

    async def network_rate(self, planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                           legal_counts: np.ndarray, seconds: float, action_values: bool = False) -> float:
        """Evaluations/s of this server's network alone on one batch (the baseline of `bench selfplay`),
        from the server's own pass arrays as a pass would be (with the action values where the actors ask)."""

        def measure() -> float:
            batch_planes, batch_scalars, indices, counts = self._batch_arrays(len(planes), legal_indices.shape[1])
            batch_planes[...], batch_scalars[...], counts[...] = planes, scalars, legal_counts
            indices[:, :legal_indices.shape[1]] = legal_indices
            return measure_rate(self.evaluator, batch_planes, batch_scalars, indices, counts, seconds,
                                action_values=action_values)

        return await asyncio.get_running_loop().run_in_executor(self.pool, measure)

    def stats(self) -> dict[str, float]:
        """Forward passes, positions and GPU seconds so far (average batch = positions / passes)."""
        return {"passes": self.passes, "positions": self.positions, "gpu_seconds": self.evaluator.gpu_seconds}
