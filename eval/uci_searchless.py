"""The UCI engine's searchless modes (its Mode option): `go` answered at once with one predictor's move.

``Mode policy``, ``value`` or ``av`` answers `go` with the move the player of that name
(eval.network_agents) plays on the engine's board, from the network's outputs alone: the top prior
(``policy``, with its rules: a mate in one first, no draw at once while winning), the move after which the
network rates the opponent worst (``value``: every move's position in one network call, game ends
exact), or the highest action value (``av``: the action-value head, eval.action_values). Clocks, nodes,
depth and MultiPV are ignored: one `info` line, then `bestmove` (no ponder move). `go infinite` and
`go ponder` still withhold `bestmove` until `stop` or `ponderhit`, as UCI asks. Where the network lacks
what the mode needs (``av`` without the head), `go` says so in one `info string` and searches instead.

Scores: the predictor's value for the mover (policy: the network's value of the position; value: the
chosen move's value; av: 2 w - 1 of the move's win probability w) in centipawns by
eval.scores.value_to_centipawns, as the search reports its Q, or ``mate 1`` for a move that mates;
``wdl`` with UCI_ShowWDL (the draw share of a 'wdl' network, as the search's).
"""

from __future__ import annotations

from collections.abc import Callable

from alphazero.errors import UserError
from alphazero.out_of_memory import out_of_memory_in, out_of_memory_message
from alphazero.store.sources import Network
from eval.action_values import action_value_refusal, has_action_values
from eval.network_agents import ActionValueAgent, PolicyAgent, SearchlessAgent, ValueAgent
from eval.scores import value_to_centipawns, value_to_wdl
from eval.uci_options import MODES, SEARCH
from eval.uci_search import SearchJob


def usable_mode(mode: str, network: Network, say: Callable[[str], None]) -> str:
    """Gets the mode `go` runs in: ``mode``, or ``search`` where the network lacks what ``mode`` needs
    (after saying why, in one line, through ``say``)."""
    if mode == "av" and not has_action_values(network):
        say(f"Mode av refused, searching instead: {action_value_refusal(network, 'Mode av')}")
        return SEARCH
    return mode


def _agent(mode: str, network: Network) -> SearchlessAgent:
    """The player of a searchless mode. Raises UserError for an unknown mode or av without the head."""
    if mode == "policy":
        return PolicyAgent(network, "policy")
    if mode == "value":
        return ValueAgent(network, "value")
    if mode == "av":
        return ActionValueAgent(network, "av")
    raise UserError(f"Mode takes one of {', '.join(MODES)}, got {mode!r}")


def answer_searchless(mode: str, network: Network, job: SearchJob, line: Callable[[str], None],
                      say: Callable[[str], None], wdl: bool = False) -> None:
    """Answers one `go` in a searchless mode (on the engine's network thread): an `info` line (through
    ``line``) with the predictor's score and move, then `bestmove` (after `stop` or `ponderhit` for
    `go infinite` or `go ponder`). A failure is said through ``say`` (an info string) and answered with
    the first legal move."""
    best = "0000"
    try:
        choice = _agent(mode, network).choose_positions([job.board])[0]
        best = choice.move.uci()
        after = job.board.copy()
        after.push_uci(best)
        value = choice.value if choice.value is not None else 0.0
        score = "score mate 1" if after.termination() == "checkmate" else \
            f"score cp {round(value_to_centipawns(value))}"
        if wdl:
            win, draw, loss = (1000, 0, 0) if score == "score mate 1" else \
                value_to_wdl(value, network.draw_probability(job.board))
            score += f" wdl {win} {draw} {loss}"
        nodes = int(choice.info.get("nodes", 1))
        elapsed_ms = int(1000 * max(job.clock() - job.started, 0.0))
        line(f"info depth 1 seldepth 1 multipv 1 {score} nodes {nodes} time {elapsed_ms} pv {best}")
        job.wait_to_answer()  # UCI: no bestmove before `stop` (infinite) or `ponderhit` (ponder)
    except Exception as error:  # report, and still answer with a move
        exhausted = out_of_memory_in(error)
        say(f"Mode {mode} failed: " + (out_of_memory_message(exhausted, "uci") if exhausted is not None else
                                       f"{type(error).__name__}: {error}"))
        moves = job.board.legal_moves()
        best = moves[0] if moves else "0000"
    finally:
        job.answered.set()
        line(f"bestmove {best}")


__all__ = ["answer_searchless", "usable_mode"]
