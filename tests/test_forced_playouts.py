"""KataGo's forced playouts and policy target pruning (Wu 2019, section 3.1; search.forced_playouts)."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import Any

import chess
import numpy as np
import pytest

from alphazero.chess.moves import move_to_index
from alphazero.config import apply_overrides
from alphazero.errors import UserError
from alphazero.presets import get_preset
from mcts_ext import Board
from mcts_ext.driver import analyse
from mcts_ext.encode import NUM_MOVES
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch
from tests.helpers import material_evaluator, play_games

C_INIT, C_BASE = 1.25, 19652.0  # SearchParams' defaults, which the searches below keep

PAWN = "k7/8/8/8/8/8/P7/K7 w - - 0 1"  # White has four moves: a2a4, a2a3, a1b1, a1b2
PAWN_PRIORS = {"a2a4": 0.4, "a2a3": 0.3, "a1b1": 0.2, "a1b2": 0.1}
HANGING_QUEEN = "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"


Evaluator = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]


def _fixed_priors(fen: str, priors: dict[str, float]) -> Evaluator:
    """An evaluator whose priors at `fen` are `priors` (logits log p; every other move's far below) and whose
    value is 0 everywhere."""
    board = chess.Board(fen)
    logits = np.full(NUM_MOVES, -30.0, np.float32)
    for uci, p in priors.items():
        logits[move_to_index(chess.Move.from_uci(uci), board.turn)] = np.log(p)

    def evaluate(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.tile(logits, (len(planes), 1)), np.zeros(len(planes), np.float32)
    return evaluate


def _visits(search: MultiGameSearch) -> dict[str, int]:
    return {uci: n for uci, _, n, _, _ in search.root_stats(0)}


# The constructed tree: the root's four children's visits N and Q (for White, who chooses).
WANTED = {"a2a4": (60, 0.1), "a2a3": (25, 0.0), "a1b1": (12, -0.3), "a1b2": (3, -0.5)}


def _constructed(**params: Any) -> MultiGameSearch:
    """A search of 16 simulations of PAWN (the evaluator says 0 everywhere), which visits every move, and
    backups that bring the root's children to WANTED."""
    search = analyse(Board(PAWN), _fixed_priors(PAWN, PAWN_PRIORS), 16, **params)
    assert all(0 < n <= WANTED[uci][0] for uci, n in _visits(search).items())
    for uci, (n, q) in WANTED.items():
        more = n - _visits(search)[uci]
        search.repeat_backup(0, [uci], -q * n / more, more)  # the child's side to move sees -Q
    stats = {uci: (n, q, p) for uci, _, n, q, p in search.root_stats(0)}
    for uci, (n, q) in WANTED.items():
        assert stats[uci][0] == n and stats[uci][1] == pytest.approx(q, abs=1e-6)
        assert stats[uci][2] == pytest.approx(PAWN_PRIORS[uci], abs=1e-6)
    return search


def test_the_pruned_target_is_the_hand_count_on_a_constructed_tree() -> None:
    # A noisy root (noise weight 0 keeps the priors as given) with forced playouts, k = 2.
    search = _constructed(add_noise=True, noise_weight=0.0, forced_playouts=2.0)

    # The hand count. The root has N = 101 (its own evaluation and its children's 100): C = (log((1 + 101 +
    # c_base) / c_base) + c_init) * sqrt(101) = 12.614. a2a4, the most visited (c*), keeps its 60 visits;
    # its score is Q + C * P / (1 + N) = 0.1 + 12.614 * 0.4 / 61 = 0.1827.
    c = (math.log((1 + 101 + C_BASE) / C_BASE) + C_INIT) * math.sqrt(101)
    assert c == pytest.approx(12.614, abs=1e-3)

    def score(q: float, p: float, n: int) -> float:
        return q + c * p / (1 + n)

    best = score(0.1, 0.4, 60)
    assert best == pytest.approx(0.1827, abs=1e-4)
    # a2a3: n_forced = sqrt(2 * 0.3 * 100) = 7.75, so it may give back 7 visits (down to 18); its score
    # 0 + 3.784 / (1 + n) stays at most c*'s down to n = 20 (0.1802) and passes it at 19 (0.1892): 20.
    assert math.sqrt(2 * 0.3 * 100) == pytest.approx(7.75, abs=0.01)
    assert score(0.0, 0.3, 20) <= best < score(0.0, 0.3, 19)
    # a1b1: n_forced = sqrt(2 * 0.2 * 100) = 6.32, so 6 visits at most (down to 6); its score -0.3 + 2.523 /
    # (1 + n) is below c*'s at 6 (0.0604) and still at 5 (0.1205): n_forced bounds it, not PUCT: 6.
    assert math.sqrt(2 * 0.2 * 100) == pytest.approx(6.32, abs=0.01)
    assert score(-0.3, 0.2, 6) <= best and score(-0.3, 0.2, 5) <= best
    # a1b2: n_forced = sqrt(2 * 0.1 * 100) = 4.47, all 3 visits may go; its score -0.5 + 1.261 / (1 + n) is
    # below c*'s at 1 (0.1307) and above at 0 (0.7614): 1 visit, and a child left with one is pruned: 0.
    assert math.sqrt(2 * 0.1 * 100) > 3
    assert score(-0.5, 0.1, 1) <= best < score(-0.5, 0.1, 0)
    hand = {"a2a4": 60, "a2a3": 20, "a1b1": 6, "a1b2": 0}

    target = search.improved_policy(0)  # the target self-play records (root_target)
    assert target == pytest.approx({uci: n / sum(hand.values()) for uci, n in hand.items()}, abs=1e-7)
    assert _visits(search) == {uci: n for uci, (n, _) in WANTED.items()}  # the tree keeps every visit
    assert search.best_move(0) == "a2a4"


def test_without_forced_playouts_or_a_noisy_root_the_target_is_the_visit_share() -> None:
    for params in (dict(add_noise=True, noise_weight=0.0), dict(forced_playouts=2.0)):  # no k; no noise
        search = _constructed(**params)
        assert search.improved_policy(0) == pytest.approx({uci: n / 100 for uci, (n, _) in WANTED.items()},
                                                          abs=1e-7)


def test_a_noisy_root_gives_every_tried_child_its_forced_visits() -> None:
    # The queen hangs: the search piles its visits on d2d5, and without forcing the noise's other moves get
    # one visit or a few. With k = 2 every child the search tried has at least about sqrt(2 * P * sum N).
    def search(k: float) -> MultiGameSearch:
        return analyse(Board(HANGING_QUEEN), material_evaluator, 400, add_noise=True, forced_playouts=k, seed=5)

    def shortfalls(searched: MultiGameSearch) -> list[float]:
        stats = searched.root_stats(0)
        total = sum(n for _, _, n, _, _ in stats)
        return [math.sqrt(2.0 * p * total) - n for _, _, n, _, p in stats if n > 0]

    forced, plain = search(2.0), search(0.0)
    assert forced.priors(0) == plain.priors(0)  # the same seed: the same noise
    assert forced.best_move(0) == plain.best_move(0) == "d2d5"
    assert max(shortfalls(forced)) < 1.0  # at most a visit behind a forced count that grew since
    assert max(shortfalls(plain)) > 3.0  # what forcing changes
    tried = {uci for uci, _, n, _, _ in forced.root_stats(0) if n > 0}
    assert tried >= {uci for uci, _, _, _, p in forced.root_stats(0) if p >= 0.02}  # the non-negligible priors
    # The target prunes the forced visits: below the visit shares everywhere but on the most visited move.
    visits = _visits(forced)
    target = forced.improved_policy(0)
    assert target["d2d5"] > visits["d2d5"] / 400
    assert all(target[uci] <= visits[uci] / 400 for uci in visits if uci != "d2d5")


def _game_digest(**params: Any) -> tuple[list[str], str]:
    """The first game's moves, and a digest of the moves and the recorded arrays (targets, root values, move
    values) of two fixed-seed self-play games."""
    search = MultiGameSearch(2, SearchParams(simulations=48, ply_limit=16, **params), seed=7)
    records = sorted(play_games(search, material_evaluator), key=lambda record: record["moves"])
    digest = hashlib.sha256()
    for record in records:
        digest.update(" ".join(record["moves"]).encode())
        for key in ("policy_indices", "policy_probs", "root_values", "move_values"):
            digest.update(np.ascontiguousarray(record[key]).tobytes())
    return records[0]["moves"], digest.hexdigest()


# Two self-play games (PUCT with noise, temperature, material values) as the search played and recorded them
# before forced playouts existed (the commit before issue 79's). A change that means to move self-play games
# updates these; one that does not must leave them.
BEFORE_MOVES = "c2c3 f7f5 d1a4 a7a5 a4b4 a8a6 b4g4 d7d6 g4f5 c8f5 e1d1 g8f6 f2f4 f6h5 a2a3 a6b6".split()
BEFORE_DIGEST = "1822f7115ce90d666e8a58489b9e321d1b5c5915fa67b710e0dc38579fdac564"


def test_forced_playouts_off_leave_self_play_as_it_was_bit_for_bit() -> None:
    absent = _game_digest()
    assert absent == (BEFORE_MOVES, BEFORE_DIGEST)
    assert _game_digest(forced_playouts=0.0) == absent
    assert _game_digest(forced_playouts=2.0)[1] != BEFORE_DIGEST  # the comparison can tell


def test_the_playout_caps_cheap_moves_are_neither_forced_nor_recorded() -> None:
    # Every move cheap (a full search once in a billion): the same games with and without k, no samples.
    def games(k: float, fraction: float) -> list[dict]:
        search = MultiGameSearch(3, SearchParams(simulations=32, playout_cap_fraction=fraction,
                                                 playout_cap_simulations=16, ply_limit=24, forced_playouts=k),
                                 seed=4)
        return sorted(play_games(search, material_evaluator), key=lambda record: record["moves"])

    cheap, cheap_forced = games(0.0, 1e-9), games(2.0, 1e-9)
    assert [r["moves"] for r in cheap] == [r["moves"] for r in cheap_forced]
    for record in cheap_forced:
        assert not record["full_search"].any() and len(record["results"]) == 0
    for record in games(2.0, 0.5):  # some full: those, and only those, are written as targets
        full = record["full_search"]
        assert 0 < full.sum() < len(full)
        np.testing.assert_array_equal(record["plies_of_samples"], np.flatnonzero(full))
        np.testing.assert_allclose(np.add.reduceat(record["policy_probs"], record["policy_offsets"][:-1]), 1.0,
                                   atol=1e-5)


def test_gumbel_and_bad_values_are_refused() -> None:
    with pytest.raises(ValueError, match="gumbel.*forced playouts.*not a visit distribution"):
        SearchParams(algorithm="gumbel", forced_playouts=2.0)
    with pytest.raises(UserError, match="forced_playouts"):
        apply_overrides(get_preset("tiny"), ["search.algorithm=gumbel", "search.forced_playouts=2"])
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="forced_playouts"):
            SearchParams(forced_playouts=bad)
    assert apply_overrides(get_preset("small"), ["search.forced_playouts=2"]).search.forced_playouts == 2.0
