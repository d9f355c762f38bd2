"""The Agent interface a match plays, the Choice an agent returns, and the random mover.

An agent chooses moves for MANY games in one call, so that a network agent
can put the positions of all the games it is playing into one batch:

    choices = agent.choose([board_1, board_2, ...])   # one Choice per board

eval.agents builds agents from player specs; eval.engine_agents and
eval.network_agents hold the other kinds.
"""

from __future__ import annotations

import abc
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import chess
import chess.engine

from alphazero.errors import UserError

_AgentT = TypeVar("_AgentT", bound="Agent")


# --- the interface ---------------------------------------------------------------


@dataclass
class Choice:
    """An agent's move for one board.

    `value` is the agent's estimate of the game for the side to move (the
    agent itself) in [-1, 1], or None when it has none; the match runner uses
    it for resignation. `info` holds extras for logs (nodes, depth, pv, ...),
    JSON-serialisable values only.
    """

    move: chess.Move
    value: float | None = None
    info: dict[str, Any] = field(default_factory=dict)


class Agent(abc.ABC):
    """A player. Subclasses implement `choose`; `new_game` and `close` are optional hooks.

    Agents are context managers: `with parse_player("stockfish") as sf: ...`
    closes the engine on the way out.
    """

    name: str
    plays_on_clock: bool = False
    """Whether choose_on_clock() works (UCI engines)."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move for each board; returns one Choice per board, in order.

        Each board is a game in progress (not over) with its full move stack,
        so the agent can see the history (repetitions, network history planes).
        Contract: leave the boards as they were (push/pop is fine; the caller
        owns them) and return legal moves; the match runner raises on an
        illegal one.
        """

    def new_game(self) -> None:  # noqa: B027 - a hook: most agents keep nothing between games
        """Hears that a game is starting (one call per game; games overlap in a match)."""

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a move for each board as the first search of a new game; one Choice per board, in order.

        Nothing the agent kept from another board or an earlier call (a UCI
        engine's hash table, a search tree) enters the answer, so the answers
        depend neither on the order of the boards nor on how many come in one
        call. The yardsticks (eval.epd, eval.puzzles) ask this way. The boards'
        contract is choose()'s; each keeps its move stack, so the history still
        counts.

        This default calls choose(): right for agents that keep nothing
        between boards (the network agents search every board from an empty
        tree). Agents that do keep something override it.
        """
        return self.choose(boards)

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        """Chooses a move for one board under a game clock, as a GUI asks a UCI engine.

        `clock` holds both sides' remaining seconds and increments (white_clock,
        black_clock, white_inc, black_inc); the caller times the call and keeps
        the clocks. The board's contract is choose()'s.

        Raises UserError for an agent that cannot play on a clock (plays_on_clock False).
        """
        raise UserError(f"{self.name} cannot play on a clock: only UCI engines can (stockfish, uci)")

    def close(self) -> None:  # noqa: B027 - a hook: most agents hold no process
        """Releases processes and memory; the agent is unusable afterwards. Safe to call twice."""

    def __enter__(self: _AgentT) -> _AgentT:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


# --- random ----------------------------------------------------------------------


class RandomAgent(Agent):
    """Plays a uniformly random legal move; has no value (never resigns).

    The same seed replays the same moves for the same sequence of positions.
    """

    def __init__(self, seed: int = 0, *, name: str | None = None) -> None:
        super().__init__(name or ("random" if seed == 0 else f"random:seed={seed}"))
        self._rng = random.Random(seed)

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a random legal move on each board."""
        return [Choice(self._rng.choice(list(board.legal_moves))) for board in boards]


class RandomMixAgent(Agent):
    """Plays a uniformly random legal move on a share of its moves and `inner`'s move on the rest.

    Each board draws, with probability `share`, whether this move is random;
    only the boards that do not are handed to `inner`, so a mix costs the
    inner agent's time on the other moves only. A random move has no value
    (the mix never resigns on one). The ladder (eval.ladder) uses mixes of a
    weak engine and random moves as rungs between `random` and the engine.
    The same seed draws the same sequence of choices.

    Raises UserError if `share` is outside [0, 1].
    """

    def __init__(self, inner: Agent, share: float, *, seed: int = 0, name: str | None = None) -> None:
        if not 0.0 <= share <= 1.0:
            raise UserError(f"random={share!r} must lie in [0, 1]: the share of moves played at random")
        super().__init__(name or f"{inner.name},random={share:g}")
        self.inner, self.share = inner, share
        self._rng = random.Random(seed)

    plays_on_clock = False

    def new_game(self) -> None:
        self.inner.new_game()

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        """Chooses a random move on each board that draws one, the inner agent's move on the others."""
        return self._mix(boards, self.inner.choose)

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        return self._mix(boards, self.inner.choose_fresh)

    def _mix(self, boards: Sequence[chess.Board], ask: Any) -> list[Choice]:
        randomly = [self._rng.random() < self.share for _ in boards]
        rest = [board for board, drawn in zip(boards, randomly, strict=True) if not drawn]
        asked = iter(ask(rest) if rest else [])
        return [Choice(self._rng.choice(list(board.legal_moves)), None, {"random": True}) if drawn else next(asked)
                for board, drawn in zip(boards, randomly, strict=True)]

    def close(self) -> None:
        self.inner.close()
