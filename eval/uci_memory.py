"""What the UCI engine says about memory: the tree's limit when a search is built, a tree that filled it, and an
allocation that failed.

The search bounds its tree by memory (mcts_ext.params, SearchParams.tree_memory_mb: the engine's Hash
option, 0 for half the machine's memory). A tree that fills its limit ends the search as its budget would
(MultiGameSearch.tree_full): the engine says so once and answers with the search's best move, after `stop` or
`ponderhit` under `go infinite` or `go ponder` as UCI asks. An allocation that fails all the same (the network's
pass on a GPU, the game's own records) is said with what to lower (alphazero.out_of_memory), and the engine answers
with the best move found so far and stays up.
"""

from __future__ import annotations

from alphazero.out_of_memory import out_of_memory_message
from eval.uci_search import SearchJob
from mcts_ext.search import MultiGameSearch

MIB = 2**20


def memory_line(search: MultiGameSearch, megabytes: int) -> str:
    """The `info string` text of a search's tree memory: its limit (from Hash ``megabytes``) and about
    how many nodes fit in it (MultiGameSearch.nodes_that_fit)."""
    source = f"Hash {megabytes}" if megabytes else "Hash 0: half the machine's memory"
    nodes = search.nodes_that_fit()
    if search.tree_memory_limit == 0:  # the machine did not say what it has
        return f"tree memory: no limit known ({source}); up to {nodes:,} nodes"
    return f"tree memory {search.tree_memory_limit / MIB:,.0f} MiB ({source}): about {nodes:,} nodes"


def tree_full_line(search: MultiGameSearch, job: SearchJob) -> str:
    """The `info string` text of a search that stopped because its tree could not grow."""
    nodes, _ = search.tree_size(0)
    if job.must_wait():
        then = "bestmove after ponderhit or stop" if job.pondering else "bestmove after stop"
    else:
        then = "answering with its best move"
    return (f"tree full at {nodes:,} nodes ({search.tree_bytes(0) / MIB:,.1f} MiB; Hash sets the limit): "
            f"the search stops there, {then}")


def out_of_memory_line(error: BaseException, answer: str) -> str:
    """The `info string` text of an allocation that failed in the engine: what ran out, what to lower, and what
    the engine does now (``answer``)."""
    return f"{out_of_memory_message(error, 'uci')}; {answer}"


__all__ = ["memory_line", "out_of_memory_line", "tree_full_line"]
