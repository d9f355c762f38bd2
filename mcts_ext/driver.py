"""The loop around a MultiGameSearch: gather leaves, evaluate them, back up.

An evaluator is any callable taking (planes uint64 [B, 112], scalars float32
[B, 7]) and returning (policy logits [B, 4672], values [B]); a network
wrapper, an inference-server client, or the uniform evaluator below.

A legal evaluator also takes gather()'s legal_indices int32 [B, 256] and
legal_counts int32 [B] and returns only the legal moves' logits (legal
logits [B, W], W >= every row's count, row b's first legal_counts[b] in
legal_indices' order) and the values; the search backs those up with
backup_legal(). A GPU evaluator gathers them on the device and copies ~30
floats a position instead of 4672 (alphazero.nn.forward.Evaluator.evaluate_legal).

Either may return a third array, the action-value head's win probability of
each move for the side to move ([B, 4672] like the logits, or [B, W'] in
legal_indices' order for a legal evaluator): the search backs it up beside
them (MultiGameSearch.backup's action_values) and reads it where a setting
asks (MultiGameSearch.reads_action_values).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from mcts_ext.encode import NUM_MOVES
from mcts_ext.params import SearchParams
from mcts_ext.position import Board
from mcts_ext.search import MultiGameSearch

Evaluator = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, ...]]
"""(planes, scalars) -> (logits, values) or (logits, values, action values)."""
LegalEvaluator = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, ...]]
"""(planes, scalars, legal_indices, legal_counts) -> (legal logits, values) or (..., legal action values)."""


_ZEROS: dict[str, np.ndarray] = {"logits": np.zeros((0, NUM_MOVES), np.float32), "values": np.zeros(0, np.float32)}


def uniform_evaluator(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Equal priors for every move and a value of 0: search guided by game ends alone.

    Returns read-only views of one shared zero buffer (grown as needed), so
    that timing a search with it measures the search, not memory allocation.
    """
    rows = planes.shape[0]
    if rows > len(_ZEROS["values"]):
        _ZEROS["logits"] = np.zeros((rows, NUM_MOVES), np.float32)
        _ZEROS["values"] = np.zeros(rows, np.float32)
        for array in _ZEROS.values():
            array.flags.writeable = False
    return _ZEROS["logits"][:rows], _ZEROS["values"][:rows]


def uniform_legal_evaluator(planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                            legal_counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The uniform evaluator as a legal evaluator: equal legal logits [B, W] (W: legal_indices' width) and values 0.

    Returns read-only views of one shared zero buffer, as uniform_evaluator.
    """
    rows, width = planes.shape[0], legal_indices.shape[1]
    legal = _ZEROS.get("legal")
    if legal is None or legal.shape[0] < rows or legal.shape[1] != width:
        legal = np.zeros((max(rows, 1), width), np.float32)
        legal.flags.writeable = False
        _ZEROS["legal"] = legal
    return legal[:rows], uniform_evaluator(planes, scalars)[1]


def _outputs(result: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """An evaluator's logits, values and action values (None when it gave none) as the search takes them."""
    action_values = result[2] if len(result) > 2 else None
    return (np.ascontiguousarray(result[0], dtype=np.float32),
            np.ascontiguousarray(result[1], dtype=np.float32).reshape(-1),
            None if action_values is None else np.ascontiguousarray(action_values, dtype=np.float32))


def evaluate_into(search: MultiGameSearch, evaluate: Evaluator, batch: tuple, rows: int) -> None:
    """Evaluates the first `rows` leaves of `batch` and backs the results up."""
    planes, scalars = batch[0], batch[1]
    search.backup(*_outputs(evaluate(planes[:rows], scalars[:rows])))


def evaluate_legal_into(search: MultiGameSearch, evaluate_legal: LegalEvaluator, batch: tuple, rows: int) -> None:
    """Evaluates the first `rows` leaves of `batch` with a legal evaluator and backs the results up."""
    planes, scalars, legal_indices, legal_counts = batch[:4]
    search.backup_legal(*_outputs(evaluate_legal(planes[:rows], scalars[:rows], legal_indices, legal_counts)))


def run(search: MultiGameSearch, evaluate: Evaluator | None = None, *,
        evaluate_legal: LegalEvaluator | None = None,
        should_stop: Callable[[], bool] | None = None,
        on_step: Callable[[int], None] | None = None,
        batch: tuple | None = None) -> None:
    """Steps the search until no slot wants simulations (or should_stop() says so).

    Give either `evaluate` (full logits) or `evaluate_legal` (the legal moves'
    logits only; what a GPU evaluator should be given). `batch` is the arrays
    to gather into, as search.new_batch() makes them (an evaluator may want
    them in pinned memory); default: new ones. Self-play searches play their
    games to the end (collect them with take_finished() from on_step);
    analysis searches stop at their budgets, or sooner when their tree fills
    its memory (search.tree_full(slot); the answer is read as after any search).

    Raises:
        TypeError: both evaluators or neither given.
    """
    if (evaluate is None) == (evaluate_legal is None):
        raise TypeError("run() takes one of evaluate and evaluate_legal")
    batch = search.new_batch() if batch is None else batch
    while search.searching():
        rows = search.gather(*batch)
        if rows:
            if evaluate_legal is not None:
                evaluate_legal_into(search, evaluate_legal, batch, rows)
            else:
                assert evaluate is not None  # one of the two, checked above
                evaluate_into(search, evaluate, batch, rows)
        if on_step is not None:
            on_step(rows)
        if should_stop is not None and should_stop():
            return


def analyse(board: Board, evaluate: Evaluator, simulations: int, *, seed: int = 0, **params: Any) -> MultiGameSearch:
    """Searches one position (no noise unless asked) and returns the search, ready to read.

    ``params`` are further SearchParams fields (an analysis search: autoplay off, Gumbel's noise scale 0
    unless given).

    >>> search = analyse(Board(), uniform_evaluator, 100)
    >>> search.best_move(0) in Board().legal_moves()
    True
    """
    params.setdefault("gumbel_scale", 0.0)
    search = MultiGameSearch(1, SearchParams(simulations=simulations, autoplay=False, **params), seed=seed)
    search.set_position(0, board)
    run(search, evaluate)
    return search
