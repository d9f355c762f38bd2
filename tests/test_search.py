"""The batched PUCT search: budgets, noise, determinism, tactics, records, bad input."""

from __future__ import annotations

import chess
import numpy as np
import pytest

from alphazero.chess.moves import move_to_index
from mcts_ext import Board
from mcts_ext.driver import analyse, run, uniform_evaluator
from mcts_ext.encode import NUM_MOVES
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch
from tests.helpers import material_evaluator, play_games


def replay(record: dict) -> chess.Board:
    """Replays a record in python-chess (push raises on an illegal move)."""
    board = chess.Board(record["start_fen"])
    for uci in record["moves"]:
        move = chess.Move.from_uci(uci)
        assert move in board.legal_moves, f"illegal {uci} in {board.fen()}"
        board.push(move)
    return board


def test_root_visits_add_up_to_the_budget():
    for budget in (1, 50, 333):
        stats = analyse(Board(), uniform_evaluator, budget).root_stats(0)
        assert sum(visits for _, _, visits, _, _ in stats) == budget


def test_self_play_samples_carry_the_full_budget_of_visits():
    search = MultiGameSearch(2, SearchParams(simulations=40, ply_limit=30), seed=5)
    for record in play_games(search):
        offsets, probs = record["policy_offsets"], record["policy_probs"]
        sums = np.add.reduceat(probs, offsets[:-1])
        np.testing.assert_allclose(sums, 1.0, atol=1e-5)
        # Each probability is a whole number of the 40 visits.
        np.testing.assert_allclose(probs * 40, np.round(probs * 40), atol=1e-3)


def test_noise_changes_root_priors_only():
    search = analyse(Board(), uniform_evaluator, 400, add_noise=True, seed=7)
    root = np.array(list(search.priors(0).values()))
    assert root.sum() == pytest.approx(1.0, abs=1e-5)
    assert root.std() > 0.01  # uniform priors would have no spread
    child = np.array(list(search.priors(0, [search.best_move(0)]).values()))
    np.testing.assert_allclose(child, 1.0 / len(child), rtol=1e-5)
    quiet = analyse(Board(), uniform_evaluator, 400)
    np.testing.assert_allclose(list(quiet.priors(0).values()), 1 / 20, rtol=1e-5)


def test_same_seed_same_game_and_batch_mates_do_not_matter():
    def first_game(games: int, seed: int) -> list[str]:
        search = MultiGameSearch(games, SearchParams(simulations=16, ply_limit=60), seed=seed)
        records = {}
        run(search, uniform_evaluator, on_step=lambda rows: records.update(search.take_finished()))
        return records[0]["moves"]

    assert first_game(1, seed=11) == first_game(1, seed=11) == first_game(4, seed=11)
    assert first_game(1, seed=11) != first_game(1, seed=12)


def test_finds_mate_in_one_for_either_side():
    scholar = Board.from_moves("e2e4 e7e5 f1c4 b8c6 d1h5 g8f6".split())
    assert analyse(scholar, uniform_evaluator, 200).best_move(0) == "h5f7"
    fool = Board.from_moves("f2f3 e7e5 g2g4".split())
    search = analyse(fool, uniform_evaluator, 200)
    assert search.best_move(0) == "d8h4"
    q_of = {uci: q for uci, _, _, q, _ in search.root_stats(0)}
    assert q_of["d8h4"] == pytest.approx(1.0)  # scored exactly, never by the evaluator


def forces_mate_in_one(board: chess.Board, move: chess.Move) -> bool:
    """Whether `move` mates, or every reply to it allows a mate in one."""
    board = board.copy()
    board.push(move)
    if board.is_checkmate():
        return True
    replies = list(board.legal_moves)
    for reply in replies:
        board.push(reply)
        mates = any(_mated_after(board, m) for m in list(board.legal_moves))
        board.pop()
        if not mates:
            return False
    return bool(replies)


def _mated_after(board: chess.Board, move: chess.Move) -> bool:
    board.push(move)
    mated = board.is_checkmate()
    board.pop()
    return mated


# With equal priors the budget a mate needs grows with the number of legal
# moves (a 31-move position needs about 1600); these have about 20.
@pytest.mark.parametrize(("fen", "budget"), [("k7/8/2K5/8/8/8/8/7R w - - 0 1", 400),
                                             ("7k/8/5K2/8/8/8/8/R7 w - - 0 1", 800)])
def test_finds_mate_in_two(fen, budget):
    board = chess.Board(fen)
    assert not any(_mated_after(board, m) for m in board.legal_moves)  # not a mate in one
    best = analyse(Board(fen), uniform_evaluator, budget).best_move(0)
    assert forces_mate_in_one(board, chess.Move.from_uci(best)), best


def test_material_evaluator_takes_the_hanging_queen():
    board = Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")
    assert analyse(board, material_evaluator, 100).best_move(0) == "d2d5"


def test_one_legal_move_is_played_and_finished_games_are_refused():
    board = Board("7k/8/8/8/8/8/6q1/7K w - - 0 1")  # the king must take the queen
    legal = board.legal_moves()
    assert len(legal) == 1
    assert analyse(board, uniform_evaluator, 30).best_move(0) == legal[0]
    mated = Board.from_moves(["f2f3", "e7e5", "g2g4", "d8h4"])
    with pytest.raises(ValueError, match="game is over"):
        analyse(mated, uniform_evaluator, 10)


def test_early_moves_are_sampled_and_later_ones_greedy():
    search = MultiGameSearch(12, SearchParams(simulations=24, temperature_plies=4, ply_limit=12), seed=3)
    sampled_off_argmax = 0
    for record in play_games(search):
        board = chess.Board(record["start_fen"])
        offsets, indices, probs = record["policy_offsets"], record["policy_indices"], record["policy_probs"]
        for ply, uci in enumerate(record["moves"]):
            played = move_to_index(chess.Move.from_uci(uci), board.turn)
            row = slice(offsets[ply], offsets[ply + 1])
            share = dict(zip(indices[row].tolist(), probs[row].tolist()))
            if ply >= 4:
                assert share.get(played, 0.0) == pytest.approx(max(share.values())), (ply, uci)
            elif share.get(played, 0.0) < max(share.values()):
                sampled_off_argmax += 1
            board.push_uci(uci)
    assert sampled_off_argmax > 0


def test_records_replay_in_python_chess_with_results_from_the_movers_view():
    search = MultiGameSearch(6, SearchParams(simulations=20), seed=21)
    records = play_games(search)
    assert len(records) == 6
    for record in records:
        board = replay(record)
        outcome = board.outcome(claim_draw=True)
        expected_termination = {
            chess.Termination.CHECKMATE: "checkmate", chess.Termination.STALEMATE: "stalemate",
            chess.Termination.INSUFFICIENT_MATERIAL: "insufficient_material",
            chess.Termination.FIFTY_MOVES: "fifty_moves",
            chess.Termination.THREEFOLD_REPETITION: "threefold_repetition",
        }
        if record["termination"] != "ply_limit":
            assert expected_termination[outcome.termination] == record["termination"]
            assert outcome.result() == record["result"]
        samples = len(record["results"])
        assert samples == record["plies"] == len(record["moves"])
        assert record["planes"].shape == (samples, 112) and record["scalars"].shape == (samples, 7)
        turns_white = record["scalars"][:, 0] == 1.0
        if record["winner"] is None:
            assert not record["results"].any()
        else:
            winner_white = record["winner"] == "white"
            np.testing.assert_array_equal(record["results"], np.where(turns_white == winner_white, 1, -1))


def test_resignation_ends_games_and_played_through_games_report_would_be_resignations():
    def white_is_lost(planes, scalars):
        white_to_move = scalars[:, 0] == 1.0
        return np.zeros((len(planes), NUM_MOVES), np.float32), np.where(white_to_move, -0.99, 0.99).astype(np.float32)

    kwargs = dict(simulations=8, resign_threshold=-0.9, resign_consecutive=2, ply_limit=80)
    resigning = play_games(MultiGameSearch(4, SearchParams(resign_disabled_fraction=0.0, **kwargs), seed=2),
                           white_is_lost)
    for record in resigning:
        assert record["termination"] == "resignation" and record["result"] == "0-1"
        assert record["plies"] == 2  # White's second move below the threshold
        assert record["results"][0] == -1 and record["results"][1] == 1
    played_through = play_games(MultiGameSearch(4, SearchParams(resign_disabled_fraction=1.0, **kwargs), seed=2),
                                white_is_lost)
    for record in played_through:
        assert record["termination"] != "resignation" and not record["resign_enabled"]
        assert record["would_resign_ply"] == 2 and record["would_resign_side"] == "white"


def test_playout_cap_records_only_full_searches():
    search = MultiGameSearch(4, SearchParams(simulations=32, playout_cap_fraction=0.25, playout_cap_simulations=4,
                                             ply_limit=60), seed=9)
    for record in play_games(search):
        full = record["full_search"]
        assert 0 < full.sum() < len(full)
        assert len(record["results"]) == full.sum()
        np.testing.assert_array_equal(record["plies_of_samples"], np.flatnonzero(full))


def test_tree_reuse_keeps_the_played_subtree():
    for reuse in (False, True):
        search = MultiGameSearch(1, SearchParams(simulations=64, tree_reuse=reuse, temperature_plies=0), seed=4)
        batch = search.new_batch()
        while search.board(0).ply == 0:
            rows = search.gather(*batch)
            search.backup(*[np.ascontiguousarray(a) for a in uniform_evaluator(batch[0][:rows], batch[1][:rows])])
        if reuse:
            assert sum(s[2] for s in search.root_stats(0)) > 0
        else:
            with pytest.raises(ValueError, match="no searched position"):
                search.root_stats(0)


def test_several_leaves_per_game_with_virtual_loss():
    search = MultiGameSearch(3, SearchParams(simulations=48, leaves_per_game=4, ply_limit=40), seed=8)
    assert search.max_batch == 12
    records = play_games(search)
    assert len(records) == 3
    for record in records:
        replay(record)
        sums = np.add.reduceat(record["policy_probs"], record["policy_offsets"][:-1])
        np.testing.assert_allclose(sums, 1.0, atol=1e-5)
    stats = analyse(Board(), uniform_evaluator, 200, leaves_per_game=8).root_stats(0)
    assert sum(s[2] for s in stats) == 200


def test_a_batch_grows_with_the_tree_under_visits_per_leaf():
    # visits_per_leaf 8: a call gathers at most max(1, root visits / 8) leaves, up to leaves_per_game.
    search = MultiGameSearch(1, SearchParams(simulations=600, leaves_per_game=16, visits_per_leaf=8.0,
                                             autoplay=False))
    search.set_position(0, Board())
    batch = search.new_batch()
    sizes = []
    while search.searching():
        visits = sum(s[2] for s in search.root_stats(0)) if sizes else -1
        rows = search.gather(*batch)
        assert 1 <= rows <= max(1, min(16, (visits + 1) // 8)), (visits, rows)  # + the root's own evaluation
        sizes.append(rows)
        search.backup(*[np.ascontiguousarray(a) for a in uniform_evaluator(batch[0][:rows], batch[1][:rows])])
    assert sizes[:8] == [1] * 8 and max(sizes) == 16
    assert sum(s[2] for s in search.root_stats(0)) == 600
    with pytest.raises(ValueError, match="visits_per_leaf"):
        SearchParams(visits_per_leaf=-1.0)


def _step_checking_the_batch(search: MultiGameSearch, batch: tuple, evaluate=uniform_evaluator) -> int:
    """One gather and backup, checking that the batch's leaves are distinct nodes, none below another,
    and that virtual loss is charged for exactly them and taken back by backup()."""
    rows = search.gather(*batch)
    paths = [tuple(moves) for _, moves in search.batch_paths()]
    assert len(paths) == rows and len(set(paths)) == rows
    for a in paths:
        for b in paths:
            assert a == b or a != b[:len(a)], f"leaf {b} lies below leaf {a} of the same batch"
    assert search.in_flight(0) == rows  # the collisions' virtual loss is gone already
    logits, values = evaluate(batch[0][:rows], batch[1][:rows])
    search.backup(logits, values)
    assert search.in_flight(0) == 0 and search.batch_paths() == []
    return rows


@pytest.mark.parametrize("fen", [chess.STARTING_FEN, "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1",
                                 "rnbqkbnr/ppp1pppp/8/3P4/8/8/PPPP1PPP/RNBQKBNR b KQkq - 0 2"])
@pytest.mark.parametrize("leaves", [8, 32])
def test_the_leaves_of_one_gather_are_distinct_and_none_lies_below_another(fen, leaves):
    search = MultiGameSearch(1, SearchParams(simulations=600, leaves_per_game=leaves, autoplay=False, solver=True,
                                             ply_limit=0))
    search.set_position(0, Board(fen, ply_limit=None))
    batch = search.new_batch()
    # Regression: descents went on below the root while its own evaluation (and so its priors)
    # was still in the batch, picking its moves in generation order.
    assert _step_checking_the_batch(search, batch) == 1 and search.total_collisions == 1
    sizes = []
    while search.searching():
        sizes.append(_step_checking_the_batch(search, batch))
    assert sum(s[2] for s in search.root_stats(0)) == search.simulations(0) == 600
    assert sizes.count(leaves) >= len(sizes) - 3  # collisions do not cut batches short once the tree has grown


@pytest.mark.parametrize("leaves", [4, 16, 64])
def test_a_batched_search_finds_a_mate_in_one_and_takes_the_hanging_queen(leaves):
    for solver in (False, True):
        scholar = Board.from_moves("e2e4 e7e5 f1c4 b8c6 d1h5 g8f6".split())
        assert analyse(scholar, uniform_evaluator, 400, leaves_per_game=leaves, solver=solver).best_move(0) == "h5f7"
        fool = Board.from_moves("f2f3 e7e5 g2g4".split())
        assert analyse(fool, uniform_evaluator, 400, leaves_per_game=leaves, solver=solver).best_move(0) == "d8h4"
        queen = Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")
        assert analyse(queen, material_evaluator, 200, leaves_per_game=leaves, solver=solver).best_move(0) == "d2d5"


@pytest.mark.parametrize(
    "options",
    [dict(simulations=0), dict(leaves_per_game=0), dict(fpu_mode="nope"), dict(noise_weight=2.0),
     dict(resign_threshold=-3.0), dict(playout_cap_fraction=1.5), dict(ply_limit=-1), dict(c_base=0)],
)
def test_bad_options_raise_value_error(options):
    with pytest.raises(ValueError):
        MultiGameSearch(2, SearchParams(**options))
    with pytest.raises(ValueError):
        MultiGameSearch(0, SearchParams())


def test_mismatched_batches_and_nan_are_refused_without_damage():
    search = MultiGameSearch(2, SearchParams(simulations=10), seed=1)
    planes, scalars, indices, counts, games = search.new_batch()
    with pytest.raises(ValueError):
        search.gather(planes[:1], scalars)
    with pytest.raises(ValueError):
        search.gather(np.zeros((2, 100), np.uint64), scalars)
    rows = search.gather(planes, scalars, indices, counts, games)
    assert rows == 2 and list(games[:rows]) == [0, 1] and list(counts[:rows]) == [20, 20]
    assert sorted(indices[0, :20]) == sorted(np.flatnonzero(np.isin(np.arange(NUM_MOVES), indices[0, :20])))
    logits, values = uniform_evaluator(planes[:rows], scalars[:rows])
    with pytest.raises(RuntimeError):
        search.gather(planes, scalars)  # the batch must be backed up first
    with pytest.raises(ValueError):
        search.backup(logits[:1], values)
    with pytest.raises(ValueError, match="non-finite value"):
        search.backup(logits, np.array([0.0, np.nan], np.float32))
    bad = logits.copy()
    bad[1, indices[1, 0]] = np.inf
    with pytest.raises(ValueError, match="non-finite policy"):
        search.backup(bad, values)
    search.backup(logits, values)  # the same batch, now valid, still goes in
    assert search.gather(planes, scalars) == 2


# --- game ends everywhere: stop is heard ------------------------------------------------------

FIFTY_MOVE_EDGE = "k7/8/8/8/8/8/1R6/K7 w - - 99 100"  # every move ends the game by the fifty-move rule


def test_a_search_whose_every_line_ends_the_game_still_returns_to_its_caller():
    # Regression: gather() looped until the budget was spent while every descent
    # ended in an exactly scored game end, so `stop` and deadlines went unheard.
    search = MultiGameSearch(1, SearchParams(simulations=5_000_000, autoplay=False, ply_limit=0))
    search.set_position(0, Board(FIFTY_MOVE_EDGE, ply_limit=None))
    steps = []
    run(search, uniform_evaluator, should_stop=lambda: (steps.append(search.simulations(0)), len(steps) >= 3)[1])
    assert len(steps) == 3  # should_stop was asked three times ...
    assert steps[0] < steps[1] < steps[2] < 5_000_000  # ... long before the budget was spent
    assert search.state(0) == "searching"
    assert search.best_move(0) in Board(FIFTY_MOVE_EDGE).legal_moves()


# --- the solver --------------------------------------------------------------------------------

BACK_RANK_MATE = "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1"  # Ra8# (mate in one, 1 ply)
MATE_IN_TWO = "k7/8/2K5/8/8/8/8/7R w - - 0 1"  # Kb6 Kb8 Rh8# (3 plies)
MATED_IN_ONE = "k7/8/1K6/8/8/8/8/7R b - - 0 1"  # Kb8 (forced) Rh8#: lost in 2 plies


def _solve(fen: str, budget: int = 2000, **options) -> MultiGameSearch:
    return analyse(Board(fen, ply_limit=None), uniform_evaluator, budget, solver=True, ply_limit=0, **options)


def test_the_solver_proves_a_mate_in_one_at_once_and_plays_it():
    search = _solve(BACK_RANK_MATE)
    assert search.proof(0) == ("win", 1)
    assert search.best_move(0) == "a1a8" and search.principal_variation(0) == ["a1a8"]
    assert search.proof(0, ["a1a8"]) == ("loss", 0)
    assert search.state(0) == "ready" and search.simulations(0) < 2000  # a proven root ends the search
    ranked = search.ranked_moves(0)
    assert ranked[0] == "a1a8" and len(ranked) == len(Board(BACK_RANK_MATE).legal_moves())


def test_the_solver_proves_a_mate_in_two_and_its_line_mates():
    search = _solve(MATE_IN_TWO)
    assert search.proof(0) == ("win", 3)
    board = chess.Board(MATE_IN_TWO)
    best = search.best_move(0)
    assert forces_mate_in_one(board, chess.Move.from_uci(best))
    line = search.principal_variation(0)
    assert len(line) == 3 and line[0] == best
    for uci in line:
        board.push_uci(uci)
    assert board.is_checkmate()
    assert search.proof(0, [best]) == ("loss", 2)


def test_the_solver_proves_a_loss_and_a_draw():
    lost = _solve(MATED_IN_ONE)
    assert lost.proof(0) == ("loss", 2) and lost.best_move(0) == "a8b8"
    drawn = _solve(FIFTY_MOVE_EDGE)  # every move ends the game by the fifty-move rule (none mates)
    assert drawn.proof(0)[0] == "draw"
    assert all(drawn.proof(0, [uci]) == ("draw", 0) for uci in drawn.ranked_moves(0))


def test_a_lost_side_holds_out_longest():
    # Kh8 allows Ra8# at once; Kf8 is lost too, but two plies later.
    fen = "6k1/8/6K1/8/8/8/8/R7 b - - 0 1"
    search = _solve(fen)
    assert search.proof(0) == ("loss", 4)
    assert search.proof(0, ["g8h8"]) == ("win", 1) and search.proof(0, ["g8f8"]) == ("win", 3)
    assert search.ranked_moves(0) == ["g8f8", "g8h8"] and search.best_move(0) == "g8f8"
    board = chess.Board(fen)
    for uci in search.principal_variation(0):
        board.push_uci(uci)
    assert board.is_checkmate() and len(board.move_stack) == 4


def test_without_the_solver_nothing_is_proven():
    search = analyse(Board(BACK_RANK_MATE), uniform_evaluator, 200)
    assert search.proof(0) is None and search.proof(0, ["a1a8"]) is None
    assert search.best_move(0) == "a1a8"  # found by search alone: the mate's exact score


def test_self_play_with_the_solver_plays_legal_games_to_the_end():
    search = MultiGameSearch(3, SearchParams(simulations=24, ply_limit=80, solver=True), seed=6)
    records = play_games(search)
    assert len(records) == 3
    for record in records:
        board = replay(record)
        if record["termination"] == "checkmate":
            assert board.is_checkmate()


# --- reuse between moves of one game ---------------------------------------------------------


def test_set_position_with_reuse_keeps_the_subtree_of_the_moves_played():
    search = MultiGameSearch(1, SearchParams(simulations=300, autoplay=False, ply_limit=0))
    search.set_position(0, Board(ply_limit=None))
    run(search, uniform_evaluator)
    line = search.principal_variation(0)[:2]
    visits_below = dict((uci, visits) for uci, _, visits, _, _ in search.root_stats(0))[line[0]]
    assert len(line) == 2 and visits_below > 2
    later = Board.from_moves(line, ply_limit=None)
    assert search.set_position(0, later, reuse=True, simulations=10)
    kept = sum(visits for _, _, visits, _, _ in search.root_stats(0))
    assert 0 < kept < visits_below  # the subtree two plies down, visits and all
    run(search, uniform_evaluator)
    assert search.simulations(0) == 10
    assert sum(visits for _, _, visits, _, _ in search.root_stats(0)) == kept + 10
    assert search.board(0).move_stack == line
    # The same position again keeps the whole tree; another game, or no reuse, starts afresh.
    assert search.set_position(0, later.copy(), reuse=True)
    assert sum(visits for _, _, visits, _, _ in search.root_stats(0)) == kept + 10
    other = Board.from_moves(["d2d4"], ply_limit=None)
    assert not search.set_position(0, other, reuse=True)
    assert not search.set_position(0, later, reuse=False)
    with pytest.raises(ValueError, match="no searched position"):
        search.root_stats(0)


def test_reuse_never_keeps_a_position_that_ended_the_game_below_the_root():
    # After 1. Nf3 Nf6 2. Ng1 Ng8 3. Nf3 Nf6 4. Ng1 the search saw ...Ng8 as a
    # threefold repetition; when the game goes on there anyway, the search starts afresh.
    moves = "g1f3 g8f6 f3g1 f6g8 g1f3 g8f6 f3g1".split()
    search = MultiGameSearch(1, SearchParams(simulations=400, autoplay=False, ply_limit=0))
    search.set_position(0, Board.from_moves(moves, ply_limit=None))
    run(search, uniform_evaluator)
    visits = {uci: visits for uci, _, visits, _, _ in search.root_stats(0)}
    assert visits["f6g8"] > 0  # searched, and scored as the draw it is there
    assert not search.set_position(0, Board.from_moves(moves + ["f6g8"], ply_limit=None), reuse=True)
    run(search, uniform_evaluator)
    assert search.best_move(0) in Board.from_moves(moves + ["f6g8"], ply_limit=None).legal_moves()


def _random_network_output(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    logits = rng.standard_normal((rows, NUM_MOVES)).astype(np.float32) * 3
    return logits, rng.uniform(-1, 1, rows).astype(np.float32)


def _play_steps(compact: bool, steps: int, *, head: bool = False, **options) -> MultiGameSearch:
    """Self-play steps fed the same random network output, as all 4672 logits or as the legal ones only;
    with `head`, random action values too (from a generator of their own: the rest stays the same)."""
    search = MultiGameSearch(4, SearchParams(simulations=24, **options), seed=7)
    planes, scalars, indices, counts, games = search.new_batch()
    rng, head_rng = np.random.default_rng(3), np.random.default_rng(4)
    for _ in range(steps):
        rows = search.gather(planes, scalars, indices, counts, games)
        logits, values = _random_network_output(rng, rows)
        wins = head_rng.random((rows, NUM_MOVES), dtype=np.float32) if head else None
        if not compact:
            search.backup(logits, values, wins)
            continue
        width = int(counts[:rows].max()) + 5
        legal = np.full((rows, width), np.nan, np.float32)  # columns beyond a row's count must never be read
        legal_wins = np.full((rows, width), np.nan, np.float32)
        for b in range(rows):
            legal[b, :counts[b]] = logits[b, indices[b, :counts[b]]]
            if wins is not None:
                legal_wins[b, :counts[b]] = wins[b, indices[b, :counts[b]]]
        search.backup_legal(legal, values, None if wins is None else legal_wins)
    return search


def _root_stats(search: MultiGameSearch, slot: int) -> list | None:
    try:
        return search.root_stats(slot)
    except ValueError:  # the root of a new move is not expanded yet
        return None


@pytest.mark.parametrize("options", [{}, {"leaves_per_game": 3}, {"tree_reuse": True}])
def test_backup_legal_gives_the_priors_and_visits_of_backup(options):
    full, compact = _play_steps(False, 300, **options), _play_steps(True, 300, **options)
    assert full.total_moves == compact.total_moves > 4
    assert full.total_simulations == compact.total_simulations
    for slot in range(4):
        assert full.state(slot) == compact.state(slot)
        assert _root_stats(full, slot) == _root_stats(compact, slot)  # priors bitwise, visits, Q
    finished = [record for _, record in full.take_finished()]
    for (_, record), expected in zip(compact.take_finished(), finished):
        assert record["moves"] == expected["moves"]
        assert np.array_equal(record["policy_probs"], expected["policy_probs"])


def test_backup_legal_refuses_short_rows_and_non_finite_output_without_damage():
    search = MultiGameSearch(2, SearchParams(simulations=10), seed=1)
    planes, scalars, indices, counts, games = search.new_batch()
    rows = search.gather(planes, scalars, indices, counts, games)
    legal, values = np.zeros((rows, 20), np.float32), np.zeros(rows, np.float32)
    with pytest.raises(ValueError, match="19 columns but row 0 has 20 legal moves"):
        search.backup_legal(np.ascontiguousarray(legal[:, :19]), values)
    with pytest.raises(ValueError, match="expected legal_logits"):
        search.backup_legal(legal[:1], values)
    with pytest.raises(ValueError, match="non-finite value"):
        search.backup_legal(legal, np.array([0.0, np.inf], np.float32))
    bad = legal.copy()
    bad[1, 19] = np.nan
    with pytest.raises(ValueError, match="non-finite policy"):
        search.backup_legal(bad, values)
    search.backup_legal(legal, values)
    assert search.gather(planes, scalars) == 2


def test_run_takes_a_legal_evaluator_and_gives_the_same_search():
    from mcts_ext.driver import uniform_legal_evaluator

    board = Board("k7/8/2K5/8/8/8/8/7R w - - 0 1")
    full = analyse(board, uniform_evaluator, 200)
    compact = MultiGameSearch(1, SearchParams(simulations=200, autoplay=False))
    compact.set_position(0, board)
    run(compact, evaluate_legal=uniform_legal_evaluator)
    assert compact.root_stats(0) == full.root_stats(0)
    with pytest.raises(TypeError):
        run(compact, uniform_evaluator, evaluate_legal=uniform_legal_evaluator)


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.0])
def test_priors_are_the_softmax_of_the_legal_logits_at_the_policy_temperature(temperature):
    # The oracle: python-chess's legal moves, this project's move index, numpy's softmax of logits / T.
    logits = np.random.default_rng(3).normal(0.0, 2.0, NUM_MOVES).astype(np.float32)

    def fixed_logits(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows = planes.shape[0]
        return np.tile(logits, (rows, 1)), np.zeros(rows, np.float32)

    moves = "e2e4 c7c5 g1f3 d7d6".split()
    search = analyse(Board.from_moves(moves), fixed_logits, 1, policy_temperature=temperature)
    board = chess.Board()
    for uci in moves:
        board.push_uci(uci)
    legal = sorted(board.legal_moves, key=chess.Move.uci)
    scaled = np.array([logits[move_to_index(move, board.turn)] for move in legal], np.float64) / temperature
    expected = np.exp(scaled - scaled.max())
    expected /= expected.sum()
    priors = search.priors(0)
    assert sorted(priors) == [move.uci() for move in legal]
    np.testing.assert_allclose([priors[move.uci()] for move in legal], expected, rtol=1e-5, atol=1e-7)


def test_a_policy_temperature_that_is_not_positive_and_finite_is_refused():
    for temperature in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="policy_temperature"):
            SearchParams(policy_temperature=temperature)


# --- the network's action values (an action-value head) for unvisited children -----------------


def _head_row(board: chess.Board, wins: dict[str, float], default: float = 0.5) -> np.ndarray:
    """Action values [4672] of `board`'s moves: the win probabilities `wins` (by UCI), `default` elsewhere."""
    row = np.full(NUM_MOVES, default, np.float32)
    for uci, p in wins.items():
        row[move_to_index(chess.Move.from_uci(uci), board.turn)] = p
    return row


def _visited(search: MultiGameSearch) -> list[str]:
    return [uci for uci, _, visits, _, _ in search.root_stats(0) if visits]


def test_puct_with_fpu_action_value_visits_first_the_unvisited_child_the_head_values():
    # e2e4 and d2d4 share the prior (the rest is far below); the head calls the one PUCT would try first even
    # (p = 1/2) and the other good (p = 0.9, a Q of 0.8 for White, the player choosing).
    logits = _head_row(chess.Board(), {"e2e4": 5.0, "d2d4": 5.0}, default=-10.0)

    def network(head: np.ndarray | None):
        def evaluate(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, ...]:
            rows = len(planes)
            out = (np.tile(logits, (rows, 1)), np.zeros(rows, np.float32))
            return out if head is None else (*out, np.tile(head, (rows, 1)))
        return evaluate

    [first] = _visited(analyse(Board(), network(None), 1))
    [other] = {"e2e4", "d2d4"} - {first}
    head = _head_row(chess.Board(), {other: 0.9})
    searched = analyse(Board(), network(head), 1, fpu_mode="action_value")
    assert searched.reads_action_values and _visited(searched) == [other]
    kept = searched.action_values(0)
    assert kept[other] == pytest.approx(0.8) and kept[first] == 0.0 and len(kept) == 20
    # The default reduction, and longer searches with it, do not depend on the head's values.
    for budget in (1, 60):
        plain = analyse(Board(), network(None), budget)
        with_head = analyse(Board(), network(head), budget)
        assert not with_head.reads_action_values and set(with_head.action_values(0).values()) == {None}
        assert with_head.root_stats(0) == plain.root_stats(0)
    assert _visited(analyse(Board(), network(head), 1)) == [first]


def test_fpu_action_value_reduction_lowers_the_heads_value_by_the_reduction():
    # e2e4 and d2d4 share the prior (the rest is far below, and valued as losses by the head). The head calls
    # e2e4 good (Q 0.8) and d2d4 poor (Q -0.5); every leaf's side to move sees +0.6, so once e2e4 is visited
    # its Q is -0.6. The second simulation then weighs d2d4's head value against e2e4's visit: unreduced, the
    # head's -0.5 beats the visit's -0.6 and d2d4 is tried; less the reduction (fpu_value 1 times the square
    # root of e2e4's half of the prior), it does not, and e2e4 is deepened.
    board = chess.Board()
    logits = _head_row(board, {"e2e4": 5.0, "d2d4": 5.0}, default=-10.0)
    head = _head_row(board, {"e2e4": 0.9, "d2d4": 0.25}, default=0.0)

    def evaluate(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, ...]:
        rows = len(planes)
        return np.tile(logits, (rows, 1)), np.full(rows, 0.6, np.float32), np.tile(head, (rows, 1))

    def visits(fpu_mode: str, fpu_value: float) -> dict[str, int]:
        searched = analyse(Board(), evaluate, 2, fpu_mode=fpu_mode, fpu_value=fpu_value)
        assert searched.reads_action_values == (fpu_mode != "reduction")
        return {uci: n for uci, _, n, _, _ in searched.root_stats(0) if n}

    assert visits("action_value", 1.0) == {"e2e4": 1, "d2d4": 1}
    assert visits("action_value_reduction", 0.0) == {"e2e4": 1, "d2d4": 1}  # no reduction: the head's values
    assert visits("action_value_reduction", 1.0) == {"e2e4": 2}
    # The plain reduction starts from the root's own value (+0.6 for White, less the same reduction) and
    # tries d2d4: the mode above lowers the head's value of each move, not the parent's.
    assert visits("reduction", 1.0) == {"e2e4": 1, "d2d4": 1}


def test_fpu_action_value_falls_back_to_the_reduction_where_a_batch_brought_no_values():
    queen = Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")
    for leaves in (1, 4):
        reduction = analyse(queen, material_evaluator, 300, leaves_per_game=leaves)
        fallback = analyse(queen, material_evaluator, 300, leaves_per_game=leaves, fpu_mode="action_value")
        assert fallback.root_stats(0) == reduction.root_stats(0)
        assert set(fallback.action_values(0).values()) == {None}
    # The root's batch brings none, the later ones bring p = 1 (a Q of 1): the root keeps NaN, its child values.
    search = MultiGameSearch(1, SearchParams(simulations=3, autoplay=False, fpu_mode="action_value"))
    search.set_position(0, Board())
    batch = search.new_batch()
    rows = search.gather(*batch)
    search.backup_legal(np.zeros((rows, 20), np.float32), np.zeros(rows, np.float32))
    while search.searching():
        rows = search.gather(*batch)
        search.backup_legal(np.zeros((rows, 40), np.float32), np.zeros(rows, np.float32),
                            np.ones((rows, 40), np.float32))
    assert set(search.action_values(0).values()) == {None}
    for uci in _visited(search):
        assert set(search.action_values(0, [uci]).values()) == {1.0}


def test_tree_reuse_keeps_the_heads_values_of_the_subtree():
    rng = np.random.default_rng(5)

    def legal_head(planes, scalars, legal_indices, legal_counts):
        rows = len(planes)
        wins = (rng.integers(0, 129, (rows, legal_indices.shape[1])) / 128).astype(np.float32)
        return np.zeros((rows, legal_indices.shape[1]), np.float32), np.zeros(rows, np.float32), wins

    search = MultiGameSearch(1, SearchParams(simulations=200, autoplay=False, ply_limit=0, fpu_mode="action_value"))
    search.set_position(0, Board(ply_limit=None))
    run(search, evaluate_legal=legal_head)  # the driver hands a third array on as legal_action_values
    line = search.principal_variation(0)[:2]
    before = search.action_values(0, line)
    assert len(line) == 2 and None not in before.values()
    assert search.set_position(0, Board.from_moves(line, ply_limit=None), reuse=True, simulations=50)
    assert search.action_values(0) == before
    run(search, evaluate_legal=legal_head)
    assert search.action_values(0) == before and search.simulations(0) == 50


def test_malformed_action_values_are_refused_without_damage():
    search = MultiGameSearch(2, SearchParams(simulations=10, fpu_mode="action_value"), seed=1)
    planes, scalars, indices, counts, games = search.new_batch()
    rows = search.gather(planes, scalars, indices, counts, games)
    logits, values = (np.ascontiguousarray(a) for a in uniform_evaluator(planes[:rows], scalars[:rows]))
    even = np.full((rows, NUM_MOVES), 0.5, np.float32)
    legal = indices[1, 0]
    for row_value, message in ((np.nan, "not a number"), (np.inf, "outside"), (1.5, "outside"), (-0.01, "outside")):
        bad = even.copy()
        bad[1, legal] = row_value
        with pytest.raises(ValueError, match=message):
            search.backup(logits, values, bad)
    with pytest.raises(ValueError, match="expected action_values"):
        search.backup(logits, values, even[:1])
    with pytest.raises(ValueError, match="expected action_values"):
        search.backup(logits, values, np.ascontiguousarray(even[:, :100]))
    illegal = even.copy()
    illegal[:, np.setdiff1d(np.arange(NUM_MOVES), indices[:rows, :20])] = np.nan  # never read
    search.backup(logits, values, illegal)
    assert set(search.action_values(0).values()) == {0.0} == set(search.action_values(1).values())
    # backup_legal: rows, width and the values read.
    rows = search.gather(planes, scalars, indices, counts, games)
    width = int(counts[:rows].max())
    legal_logits, values = np.zeros((rows, width), np.float32), np.zeros(rows, np.float32)
    wins = np.full((rows, width + 3), np.nan, np.float32)  # columns beyond a row's count are never read
    for b in range(rows):
        wins[b, :counts[b]] = 0.75
    with pytest.raises(ValueError, match="expected legal_action_values"):
        search.backup_legal(legal_logits, values, wins[:1])
    with pytest.raises(ValueError, match=f"legal_action_values has {width - 1} columns"):
        search.backup_legal(legal_logits, values, np.ascontiguousarray(wins[:, :width - 1]))
    bad = wins.copy()
    bad[0, 0] = 2.0
    with pytest.raises(ValueError, match="outside"):
        search.backup_legal(legal_logits, values, bad)
    search.backup_legal(legal_logits, values, wins)
    assert search.gather(planes, scalars) == 2


def _with_head(evaluate, seed: int = 4):
    """`evaluate` with random action values (multiples of 1/128) as a third output."""
    rng = np.random.default_rng(seed)

    def evaluate_with_head(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, ...]:
        logits, values = evaluate(planes, scalars)
        return logits, values, (rng.integers(0, 129, (len(planes), NUM_MOVES)) / 128).astype(np.float32)
    return evaluate_with_head


def test_the_heads_values_move_a_search_that_reads_them():
    queen = Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")
    plain = analyse(queen, material_evaluator, 200, fpu_mode="action_value")
    read = analyse(queen, _with_head(material_evaluator), 200, fpu_mode="action_value")
    assert read.root_stats(0) != plain.root_stats(0)
    assert read.best_move(0) == "d2d5"  # the material still tells


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("options", [{}, {"leaves_per_game": 3}, {"tree_reuse": True},
                                     {"gumbel_unvisited": "action_value"}, {"algorithm": "gumbel"},
                                     {"algorithm": "gumbel", "fpu_mode": "action_value"}])
def test_action_values_given_to_a_search_that_does_not_read_them_change_nothing(options, compact):
    plain, given = _play_steps(compact, 200, **options), _play_steps(compact, 200, head=True, **options)
    assert not given.reads_action_values
    assert plain.total_moves == given.total_moves > 4
    assert plain.total_simulations == given.total_simulations
    for slot in range(4):
        assert _root_stats(plain, slot) == _root_stats(given, slot)
    for (_, record), (_, expected) in zip(given.take_finished(), plain.take_finished()):
        assert record["moves"] == expected["moves"]
        assert np.array_equal(record["policy_probs"], expected["policy_probs"])


@pytest.mark.parametrize("algorithm", ["puct", "gumbel"])
def test_a_root_limited_to_some_moves_tries_ranks_and_plays_those_only(algorithm):
    # UCI's `go searchmoves`: the material evaluator would take the hanging queen (c6d8), which is not offered.
    board = Board("3q3k/8/2N5/8/8/8/8/6K1 w - - 0 1")
    allowed = ["g1f2", "g1h2", "c6e5"]
    search = MultiGameSearch(1, SearchParams(simulations=200, autoplay=False, algorithm=algorithm, gumbel_scale=0.0))
    search.set_position(0, board)
    search.set_root_moves(0, allowed)
    run(search, material_evaluator)
    tried = [stat[0] for stat in search.root_stats(0)]
    assert sorted(tried) == sorted(allowed) and search.best_move(0) in allowed
    assert sum(stat[2] for stat in search.root_stats(0)) > 0
    # The next search of the same position keeps nothing of this tree: every move is there again.
    assert search.set_position(0, board, reuse=True) is False
    run(search, material_evaluator)
    assert len(search.root_stats(0)) == len(board.legal_moves()) and search.best_move(0) == "c6d8"


def test_root_moves_are_checked_at_the_python_edge():
    board = Board()
    search = MultiGameSearch(1, SearchParams(simulations=16, autoplay=False))
    search.set_position(0, board)
    with pytest.raises(ValueError, match="'e2e5' is not a legal move at the root"):
        search.set_root_moves(0, ["e2e4", "e2e5"])
    with pytest.raises(ValueError, match="at least one move"):
        search.set_root_moves(0, [])
    run(search, uniform_evaluator)
    with pytest.raises(ValueError, match="a root not searched yet"):
        search.set_root_moves(0, ["e2e4"])
