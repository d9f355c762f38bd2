"""The loop around a MultiGameSearch: gather leaves, evaluate them, back up.

An evaluator is any callable taking (planes uint64 [B, 112], scalars float32
[B, 7]) and returning (policy logits [B, 4672], values [B]); a network
wrapper, an inference-server client, or the uniform evaluator below.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mcts_ext.encode import NUM_MOVES
from mcts_ext.position import Board
from mcts_ext.search import MultiGameSearch

Evaluator = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


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


def evaluate_into(search: MultiGameSearch, evaluate: Evaluator, batch: tuple, rows: int) -> None:
    """Evaluates the first `rows` leaves of `batch` and backs the results up."""
    planes, scalars = batch[0], batch[1]
    logits, values = evaluate(planes[:rows], scalars[:rows])
    search.backup(np.ascontiguousarray(logits, dtype=np.float32),
                  np.ascontiguousarray(values, dtype=np.float32).reshape(-1))


def run(search: MultiGameSearch, evaluate: Evaluator, *,
        should_stop: Callable[[], bool] | None = None,
        on_step: Callable[[int], None] | None = None) -> None:
    """Steps the search until no slot wants simulations (or should_stop() says so).

    Self-play searches play their games to the end (collect them with
    take_finished() from on_step); analysis searches stop at their budgets.
    """
    batch = search.new_batch()
    while search.searching():
        rows = search.gather(*batch)
        if rows:
            evaluate_into(search, evaluate, batch, rows)
        if on_step is not None:
            on_step(rows)
        if should_stop is not None and should_stop():
            return


def analyse(board: Board, evaluate: Evaluator, simulations: int, **options) -> MultiGameSearch:
    """Searches one position (no noise) and returns the search, ready to read.

    >>> search = analyse(Board(), uniform_evaluator, 100)
    >>> search.best_move(0) in Board().legal_moves()
    True
    """
    search = MultiGameSearch(1, simulations=simulations, autoplay=False, **options)
    search.set_position(0, board)
    run(search, evaluate)
    return search
