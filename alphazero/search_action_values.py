"""Whether a search asks the network for its action values, and the one line said where it cannot.

A search whose settings read the action-value head's values
(MultiGameSearch.reads_action_values: PUCT with search.fpu_mode =
"action_value" or "action_value_reduction", Gumbel with
search.gumbel_unvisited = "action_value") gets them from a network with the
head (Evaluator.has_action_values): its legal evaluator is called with
``action_values=True`` and the third array reaches backup_legal
(mcts_ext.driver.run forwards it). A search that does not read them never
asks, so the passes cost what they did. Where the settings read them and the
network lacks the head, one line says so and the search goes on without them:
an unvisited move then gets the search's usual value (PUCT's first-play
reduction, Gumbel's mixed value; mcts_ext.search). Self-play
(selfplay.worker), the search players (eval.network_agents) and the UCI engine
(eval.uci) decide here.

Example::

    asks = asks_action_values(search, evaluator.has_action_values, "the built-in network", print)
    run(search, evaluate_legal=legal_evaluator(evaluator.evaluate_legal, asks))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mcts_ext.driver import LegalEvaluator
from mcts_ext.search import MultiGameSearch

_FALLBACKS = {"puct": ("search.fpu_mode", "the first-play reduction (search.fpu_value)"),
              "gumbel": ("search.gumbel_unvisited", "the mixed value in the completed Q")}
"""Per algorithm: the setting that reads the head, and what an unvisited move gets without it."""


def missing_head_line(search: MultiGameSearch, network: str) -> str:
    """Says in one line that ``search``'s settings read action values that ``network`` (a name for people)
    cannot give, and what the search does instead."""
    setting, fallback = _FALLBACKS.get(search.algorithm, _FALLBACKS["puct"])
    chosen = getattr(search.params, setting.removeprefix("search."))
    return (f"{setting} = '{chosen}' reads the network's action values, but {network} has no "
            f"action-value head (network.action_value_head = 'none'): unvisited moves get {fallback} instead")


def asks_action_values(search: MultiGameSearch, has_head: bool, network: str, say: Callable[[str], None]) -> bool:
    """Checks whether ``search``'s evaluations should ask for the head's action values: its settings read
    them and the network has the head (``has_head``). Settings that read them from a network without the
    head are said through ``say`` (missing_head_line) and answered False: the search then uses its fallback.
    """
    if not search.reads_action_values:
        return False
    if not has_head:
        say(missing_head_line(search, network))
    return has_head


def legal_evaluator(evaluate_legal: Callable[..., tuple[np.ndarray, ...]], asks: bool) -> LegalEvaluator:
    """Gets the legal evaluator a search calls: ``evaluate_legal`` (Evaluator.evaluate_legal's signature)
    as it is, or, when ``asks``, with ``action_values=True`` (a third array, the legal moves' values)."""
    if not asks:
        return evaluate_legal

    def with_values(planes: np.ndarray, scalars: np.ndarray, legal_indices: np.ndarray,
                    legal_counts: np.ndarray) -> tuple[np.ndarray, ...]:
        return evaluate_legal(planes, scalars, legal_indices, legal_counts, action_values=True)

    return with_values


__all__ = ["asks_action_values", "legal_evaluator", "missing_head_line"]
