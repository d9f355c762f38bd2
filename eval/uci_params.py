"""The UCI engine's search parameters: the network's run config's search settings, with the engine's options on top.

``engine_search_params`` is the one place an option value reaches the
search's SearchParams: SearchAlgorithm, LeavesPerBatch, VisitsPerLeaf,
PolicyTemperature, CPuct, FpuMode, GumbelUnvisited and Hash. A
string option left empty, or a combo left at ``auto``, keeps the network's
own setting (its run config's `search` section; the defaults for a model
file). The parameters are the key of the engine's search: a changed option
rebuilds the search (and its tree) at the next `go`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from alphazero.search import UCI, parse_cpuct, parse_policy_temperature, search_params
from alphazero.store.sources import Network
from eval.uci_options import AUTO, INFINITE_NODES
from mcts_ext.params import SearchParams

_COMBO_SETTINGS = {"FpuMode": "fpu_mode", "GumbelUnvisited": "gumbel_unvisited"}
"""The combo options that set a search setting of the same meaning, unless left at AUTO."""


def algorithm_for(values: Mapping[str, Any], network: Network, nodes: int) -> str:
    """The search algorithm of a search of ``nodes`` simulations: the SearchAlgorithm option, or for ``auto`` the
    network's search.algorithm when the search has a node budget, and PUCT when it runs until a clock or ``stop``
    ends it (INFINITE_NODES: Sequential Halving divides a budget known in advance; PUCT's best move is good
    whenever it is stopped)."""
    chosen = str(values["SearchAlgorithm"])
    if chosen != AUTO:
        return chosen
    return "puct" if nodes >= INFINITE_NODES else network.search_config.algorithm


def _optional(text: Any, parse: Any) -> float | None:
    """A string option as a number, or None (empty) for the network's own."""
    stripped = str(text).strip()
    return parse(stripped) if stripped else None


def engine_search_params(values: Mapping[str, Any], network: Network, nodes: int) -> SearchParams:
    """Gets the parameters of the engine's search for a `go` of ``nodes`` simulations, from the engine's option
    ``values`` (UciEngine.values) and ``network``'s search settings.

    Raises:
        ValueError: settings the search refuses (each option's value was checked when it was set).
    """
    params = search_params(network.search_config, UCI, algorithm=algorithm_for(values, network, nodes),
                           simulations=INFINITE_NODES, leaves_per_game=int(values["LeavesPerBatch"]),
                           visits_per_leaf=float(values["VisitsPerLeaf"]),
                           policy_temperature=_optional(values["PolicyTemperature"], parse_policy_temperature),
                           c_init=_optional(values["CPuct"], parse_cpuct))
    chosen: dict[str, Any] = {setting: str(values[option]) for option, setting in _COMBO_SETTINGS.items()
              if str(values[option]) != AUTO}
    # Hash 0 is the search's own default (half the machine's memory), so it is passed as it is.
    return dataclasses.replace(params, tree_memory_mb=float(values["Hash"]), **chosen)


__all__ = ["algorithm_for", "engine_search_params"]
