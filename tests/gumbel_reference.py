"""A deliberately plain Gumbel AlphaZero search: the oracle for mcts_ext's gumbel.pxd.

Written from Danihelka, Guez, Schrittwieser and Silver, "Policy improvement
by planning with Gumbel" (ICLR 2022), with the details DeepMind's mctx fixes
(gumbel_muzero_policy): the Sequential Halving schedule of visits, the mixed
value for unvisited moves, sigma. One Node object per position, recursion,
dicts and floats in double precision; no code shared with mcts_ext. Slow on
purpose.

The game is abstract (see `Game`), so the search knows nothing of chess:

    result = gumbel_search(game, state, evaluate, simulations=16, gumbel={...})
    result.move, result.visits, result.improved_policy

Values are for the side to move at a state, in [-1, 1]; two players alternate.

With ``unvisited="action_value"`` an evaluator may also give each legal move
a win probability p in [0, 1] for the side to move (an action-value head);
an unvisited move's completed Q is then its own 2p - 1 (the mover's value,
on the value's scale) instead of the mixed value, where the evaluator gave
one, and those values count in the tree's value range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

EPSILON = 1e-8
"""The smallest range a Q normalisation divides by (mctx's epsilon)."""


class Game(Protocol):
    """The rules the search needs: moves, their results, and exact values of game ends."""

    def legal_moves(self, state: Any) -> Sequence[Hashable]: ...

    def play(self, state: Any, move: Hashable) -> Any: ...

    def terminal_value(self, state: Any) -> float | None:
        """The value of a finished game for its side to move (mated -1, drawn 0), or None while it goes on."""


Evaluate = Callable[[Any], tuple[Any, ...]]
"""state -> (a logit for each legal move, a value for the side to move), optionally followed by a win
probability in [0, 1] for the side to move after each legal move (a mapping like the logits', or None)."""

UNVISITED = ("mixed", "action_value")
"""The completed Q of an unvisited move: the node's mixed value, or the evaluator's value of the move."""


@dataclass
class Node:
    state: Any
    visits: int = 0
    value_sum: float = 0.0           # from the view of the player who moved INTO this node
    raw_value: float = 0.0           # the evaluation of this node, for its side to move
    terminal: float | None = None
    expanded: bool = False
    moves: list[Hashable] = field(default_factory=list)
    logits: dict[Hashable, float] = field(default_factory=dict)
    children: dict[Hashable, Node] = field(default_factory=dict)
    head_q: dict[Hashable, float] = field(default_factory=dict)  # 2p - 1 of the moves the evaluator valued

    def child_visits(self, move: Hashable) -> int:
        return self.children[move].visits if move in self.children else 0

    def q(self, move: Hashable) -> float:
        """The mean value of a visited move, for this node's side to move."""
        child = self.children[move]
        return child.value_sum / child.visits


@dataclass
class Result:
    move: Hashable
    visits: dict[Hashable, int]
    improved_policy: dict[Hashable, float]
    simulations: int
    principal_variation: list[Hashable]


def softmax(scores: Mapping[Hashable, float]) -> dict[Hashable, float]:
    top = max(scores.values())
    weights = {key: math.exp(value - top) for key, value in scores.items()}
    total = sum(weights.values())
    return {key: weight / total for key, weight in weights.items()}


def visit_schedule(considered: int, simulations: int) -> list[int]:
    """Sequential Halving as a list: entry i is the visit count a move needs to get simulation i.

    The budget goes out in phases; each phase gives each of the m moves still
    considered max(1, floor(budget / (ceil(log2 considered) * m))) more
    visits, one round at a time, and then halves m (never below 2).
    """
    if considered <= 1:
        return list(range(simulations))
    phases = math.ceil(math.log2(considered))
    counts = [0] * considered
    schedule: list[int] = []
    m = considered
    while len(schedule) < simulations:
        for _ in range(max(1, simulations // (phases * m))):
            schedule.extend(counts[:m])
            counts[:m] = [count + 1 for count in counts[:m]]
        m = max(2, m // 2)
    return schedule[:simulations]


class GumbelSearch:
    """One search: the tree, the constants, and the running value range of the tree."""

    def __init__(self, game: Game, evaluate: Evaluate, *, c_visit: float, c_scale: float,
                 normalisation: str, unvisited: str = "mixed") -> None:
        if normalisation not in ("tree", "node"):
            raise ValueError(f"normalisation must be 'tree' or 'node', got {normalisation!r}")
        if unvisited not in UNVISITED:
            raise ValueError(f"unvisited must be one of {UNVISITED}, got {unvisited!r}")
        self.game = game
        self.evaluate = evaluate
        self.c_visit = c_visit
        self.c_scale = c_scale
        self.normalisation = normalisation
        self.unvisited = unvisited
        # Every Q the tree has held, seen from either player: its min and max.
        self.lowest = math.inf
        self.highest = -math.inf

    # -- the statistics of one node --

    def priors(self, node: Node) -> dict[Hashable, float]:
        return softmax(node.logits)

    def mixed_value(self, node: Node) -> float:
        priors = self.priors(node)
        visited = [move for move in node.moves if node.child_visits(move) > 0]
        total_visits = sum(node.child_visits(move) for move in node.moves)
        if not visited:
            return node.raw_value
        prior_mass = sum(priors[move] for move in visited)
        weighted_q = sum(priors[move] * node.q(move) for move in visited) / prior_mass
        return (node.raw_value + total_visits * weighted_q) / (1 + total_visits)

    def completed_q(self, node: Node) -> dict[Hashable, float]:
        mixed = self.mixed_value(node)
        return {move: node.q(move) if node.child_visits(move) > 0 else node.head_q.get(move, mixed)
                for move in node.moves}

    def sigma(self, node: Node) -> dict[Hashable, float]:
        """sigma(q_hat) of every move: (c_visit + max_b N(b)) * c_scale * q_hat."""
        completed = self.completed_q(node)
        if self.normalisation == "node":
            low, high = min(completed.values()), max(completed.values())
        else:
            low, high = self.lowest, self.highest
        span = max(high - low, EPSILON)
        most = max(node.child_visits(move) for move in node.moves)
        return {move: (self.c_visit + most) * self.c_scale * (q - low) / span for move, q in completed.items()}

    def improved_policy(self, node: Node) -> dict[Hashable, float]:
        sigma = self.sigma(node)
        return softmax({move: node.logits[move] + sigma[move] for move in node.moves})

    # -- selection --

    def root_score(self, node: Node, gumbel: Mapping[Hashable, float]) -> dict[Hashable, float]:
        """g + logits + sigma of every root move (logits as log-priors: the constant shift changes nothing)."""
        priors = self.priors(node)
        sigma = self.sigma(node)
        return {move: gumbel.get(move, 0.0) + math.log(priors[move]) + sigma[move] for move in node.moves}

    def interior_move(self, node: Node) -> Hashable:
        policy = self.improved_policy(node)
        total_visits = sum(node.child_visits(move) for move in node.moves)
        score = {move: policy[move] - node.child_visits(move) / (1 + total_visits) for move in node.moves}
        return _first_argmax(node.moves, score)

    # -- one simulation --

    def expand(self, node: Node) -> float:
        """Evaluates a new node; returns its value for its side to move."""
        node.terminal = self.game.terminal_value(node.state)
        if node.terminal is not None:
            node.raw_value = node.terminal
            return node.terminal
        logits, value, *rest = self.evaluate(node.state)
        node.moves = list(self.game.legal_moves(node.state))
        node.logits = {move: logits[move] for move in node.moves}
        node.raw_value = value
        node.expanded = True
        if rest and rest[0] is not None and self.unvisited == "action_value":
            # A win probability p for the side to move here is 2p - 1 on the value's scale, seen by the
            # player choosing the move: the view of this node's Q values.
            node.head_q = {move: 2.0 * rest[0][move] - 1.0 for move in node.moves}
            for q in node.head_q.values():
                self.lowest = min(self.lowest, -abs(q))
                self.highest = max(self.highest, abs(q))
        return value

    def backup(self, path: list[Node], value: float) -> None:
        """Adds `value` (for the last node's side to move) to every node of the path, flipping sides."""
        for node in reversed(path):
            node.visits += 1
            node.value_sum -= value  # the player who moved into the node sees the opposite
            value = -value
        for node in path:
            q = abs(node.value_sum / node.visits)
            self.lowest = min(self.lowest, -q)
            self.highest = max(self.highest, q)

    def simulate(self, root: Node, first_move: Hashable) -> None:
        """Walks from the root through `first_move` and the interior rule to a leaf, evaluates it, backs up."""
        path = [root]
        node = root
        move = first_move
        while True:
            if move not in node.children:
                node.children[move] = Node(self.game.play(node.state, move))
            node = node.children[move]
            path.append(node)
            if node.terminal is not None:
                self.backup(path, node.terminal)
                return
            if not node.expanded:
                self.backup(path, self.expand(node))
                return
            move = self.interior_move(node)


def _first_argmax(moves: Sequence[Hashable], score: Mapping[Hashable, float]) -> Hashable:
    best = moves[0]
    for move in moves:
        if score[move] > score[best]:
            best = move
    return best


def _most_visited_line(root: Node, first: Hashable, search: GumbelSearch, limit: int) -> list[Hashable]:
    line = [first]
    node = root.children.get(first)
    while node is not None and node.expanded and len(line) < limit:
        priors = search.priors(node)
        best = node.moves[0]
        for move in node.moves:
            key = (node.child_visits(move), priors[move])
            if key > (node.child_visits(best), priors[best]):
                best = move
        if node.child_visits(best) == 0:
            break
        line.append(best)
        node = node.children[best]
    return line


def gumbel_search(game: Game, state: Any, evaluate: Evaluate, *, simulations: int, considered: int = 16,
                  gumbel: Mapping[Hashable, float] | None = None, c_visit: float = 50.0, c_scale: float = 1.0,
                  normalisation: str = "tree", unvisited: str = "mixed", pv_limit: int = 32) -> Result:
    """Searches `state` with `simulations` simulations; `gumbel` holds each root move's noise (default none);
    `unvisited` is how unvisited moves complete their Q (see UNVISITED).

    The root's own evaluation is not a simulation; a simulation that reaches
    a game end backs up its exact value.
    """
    search = GumbelSearch(game, evaluate, c_visit=c_visit, c_scale=c_scale, normalisation=normalisation,
                          unvisited=unvisited)
    noise = dict(gumbel or {})
    root = Node(state)
    search.backup([root], search.expand(root))
    if root.terminal is not None:
        raise ValueError("the root is a finished game")
    k = min(considered, len(root.moves))
    schedule = visit_schedule(k, simulations)
    for index in range(simulations):
        score = search.root_score(root, noise)
        # Only the moves with exactly the scheduled visits compete (Gumbel-Top-k, then the halvings).
        candidates = [move for move in root.moves if root.child_visits(move) == schedule[index]]
        search.simulate(root, _first_argmax(candidates, score))
    most = max(root.child_visits(move) for move in root.moves)
    score = search.root_score(root, noise)
    move = _first_argmax([m for m in root.moves if root.child_visits(m) == most], score)
    return Result(move, {m: root.child_visits(m) for m in root.moves}, search.improved_policy(root),
                  sum(root.child_visits(m) for m in root.moves), _most_visited_line(root, move, search, pv_limit))
