"""Gumbel AlphaZero in the batched search: against a plain-Python reference, budgets, tactics, records."""

from __future__ import annotations

import hashlib
import math

import chess
import numpy as np
import pytest

from alphazero.chess.moves import legal_move_indices, move_to_index
from alphazero.config import apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.presets import get_preset
from alphazero.store.rundir import RunDir
from alphazero.store.shards import list_shards, read_shard, shard_from_records
from mcts_ext import Board
from mcts_ext.driver import analyse, run, uniform_evaluator
from mcts_ext.encode import NUM_MOVES
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch
from tests.gumbel_reference import gumbel_search, visit_schedule
from tests.helpers import material_evaluator, play_games
from tests.reference_encoder import reference_compact

# --- a network with fixed answers, keyed by the position --------------------------------


class FixedNetwork:
    """Fixed pseudo-random logits and values per position, the same through python-chess and the search.

    A position's key is its piece bitboards as the side to move sees them plus
    the side to move (what the search's leaves carry in their first 12 planes
    and first scalar). Values are multiples of 1/64, so every sum of them the
    search keeps in float32 is exact and the reference's Q values match the
    search's to the last bit. With `head`, it also gives each move a win
    probability, a multiple of 1/128 (so 2p - 1 is a multiple of 1/64 too),
    drawn after the logits and value: those stay the same as without it.
    """

    def __init__(self, seed: int, logit_scale: float = 1.5, *, head: bool = False) -> None:
        self.seed = seed
        self.logit_scale = logit_scale
        self.head = head
        self._cache: dict[bytes, tuple[np.ndarray, float, np.ndarray]] = {}

    def _answer(self, key: bytes) -> tuple[np.ndarray, float, np.ndarray]:
        if key not in self._cache:
            digest = hashlib.blake2b(key + self.seed.to_bytes(4, "little"), digest_size=8).digest()
            rng = np.random.default_rng(int.from_bytes(digest, "little"))
            logits = (rng.normal(size=NUM_MOVES) * self.logit_scale).astype(np.float32)
            value = int(rng.integers(-57, 58)) / 64
            action_values = (rng.integers(0, 129, NUM_MOVES) / 128).astype(np.float32)
            self._cache[key] = (logits, value, action_values)
        return self._cache[key]

    @staticmethod
    def _key(pieces: np.ndarray, white_to_move: bool) -> bytes:
        return np.ascontiguousarray(pieces, dtype=np.uint64).tobytes() + bytes([white_to_move])

    def __call__(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, ...]:
        """The evaluator the search calls: rows of compact planes and scalars."""
        answers = [self._answer(self._key(row[:12], bool(colour == 1.0))) for row, colour in zip(planes, scalars[:, 0])]
        logits = np.stack([a[0] for a in answers]) if answers else np.zeros((0, NUM_MOVES), np.float32)
        values = np.array([a[1] for a in answers], np.float32)
        if not self.head:
            return logits, values
        return logits, values, np.stack([a[2] for a in answers]) if answers else np.zeros_like(logits)

    def evaluate_board(self, board: chess.Board) -> tuple:
        """The reference's evaluator: the same answers, for a python-chess board."""
        planes, _ = reference_compact(board)
        logits, value, action_values = self._answer(self._key(planes[:12], board.turn == chess.WHITE))
        index = {move: move_to_index(move, board.turn) for move in board.legal_moves}
        answer = {move: float(logits[i]) for move, i in index.items()}, value
        return answer + ({move: float(action_values[i]) for move, i in index.items()},) if self.head else answer


class StubNetwork(FixedNetwork):
    """Logits 0, value 0 and a win probability of 1/2 for every move (an even game), but where told otherwise:
    ``answers`` is {fen: ({uci: logit}, {uci: win probability})}."""

    def __init__(self, answers: dict[str, tuple[dict[str, float], dict[str, float]]]) -> None:
        super().__init__(0, head=True)
        self._even = (np.zeros(NUM_MOVES, np.float32), 0.0, np.full(NUM_MOVES, 0.5, np.float32))
        self._stubs: dict[bytes, tuple[np.ndarray, float, np.ndarray]] = {}
        for fen, (logits, wins) in answers.items():
            board = chess.Board(fen)
            row_logits, row_wins = self._even[0].copy(), self._even[2].copy()
            for row, given in ((row_logits, logits), (row_wins, wins)):
                for uci, number in given.items():
                    row[move_to_index(chess.Move.from_uci(uci), board.turn)] = number
            planes, _ = reference_compact(board)
            self._stubs[self._key(planes[:12], board.turn == chess.WHITE)] = (row_logits, 0.0, row_wins)

    def _answer(self, key: bytes) -> tuple[np.ndarray, float, np.ndarray]:
        return self._stubs.get(key, self._even)


class ChessRules:
    """The reference's game: python-chess, with the game ends the search scores exactly."""

    def legal_moves(self, board: chess.Board) -> list[chess.Move]:
        return list(board.legal_moves)

    def play(self, board: chess.Board, move: chess.Move) -> chess.Board:
        child = board.copy()
        child.push(move)
        return child

    def terminal_value(self, board: chess.Board) -> float | None:
        if board.is_checkmate():
            return -1.0
        if (board.is_stalemate() or board.is_insufficient_material() or board.halfmove_clock >= 100
                or board.is_repetition(3)):
            return 0.0
        return None


def gumbel_analysis(fen: str, evaluate, simulations: int, **options) -> MultiGameSearch:
    return analyse(Board(fen, ply_limit=None), evaluate, simulations, algorithm="gumbel", **options)


# --- the same search as the reference -----------------------------------------------------

START = chess.STARTING_FEN
ITALIAN = "r1bqk1nr/pppp1ppp/2n5/2b1p3/2B1P3/5N2/PPPP1PPP/RNBQK2R w KQkq - 4 4"
BACK_RANK = "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1"                # Ra8# among quiet moves
BLACK_KQK = "8/8/8/8/8/2k5/3q4/K7 b - - 0 1"                      # Black mates (Qb2) or stalemates (Qc2)
ROOK_ENDING = "8/8/8/4k3/8/8/3K4/7R w - - 0 1"

CASES = [
    # fen, simulations, considered, gumbel scale, seed of the network
    (START, 1, 16, 0.0, 1),
    (START, 2, 16, 1.0, 2),
    (START, 16, 16, 1.0, 3),
    (START, 64, 16, 1.0, 4),
    (ITALIAN, 50, 16, 1.0, 5),
    (ITALIAN, 100, 8, 0.0, 6),
    (BACK_RANK, 32, 16, 0.0, 7),
    (BACK_RANK, 64, 4, 1.0, 8),
    (BLACK_KQK, 40, 16, 1.0, 9),
    (ROOK_ENDING, 100, 16, 1.0, 10),
    (ROOK_ENDING, 7, 1, 1.0, 11),
    (ROOK_ENDING, 33, 3, 0.0, 12),
]


def check_against_the_reference(search: MultiGameSearch, fen: str, network: FixedNetwork, simulations: int,
                                **options) -> None:
    """The search's move, visits, improved policy and line are the reference's (`options`: gumbel_search's)."""
    noise = {chess.Move.from_uci(uci): g for uci, g in search.gumbel_noise(0).items()}
    expected = gumbel_search(ChessRules(), chess.Board(fen), network.evaluate_board, simulations=simulations,
                             gumbel=noise, **options)
    visits = {uci: n for uci, _, n, _, _ in search.root_stats(0)}
    assert search.best_move(0) == expected.move.uci()
    assert visits == {move.uci(): n for move, n in expected.visits.items()}
    assert sum(visits.values()) == expected.simulations == simulations == search.simulations(0)
    improved = search.improved_policy(0)
    for move, probability in expected.improved_policy.items():
        assert improved[move.uci()] == pytest.approx(probability, abs=1e-6), move.uci()
    assert search.principal_variation(0) == [move.uci() for move in expected.principal_variation]


@pytest.mark.parametrize("normalisation", ["tree", "node"])
@pytest.mark.parametrize(("fen", "simulations", "considered", "scale", "seed"), CASES)
def test_matches_the_reference(fen, simulations, considered, scale, seed, normalisation):
    network = FixedNetwork(seed)
    search = gumbel_analysis(fen, network, simulations, gumbel_considered=considered, gumbel_scale=scale,
                             gumbel_q_normalisation=normalisation, seed=seed)
    assert (scale == 0.0) == (not any(search.gumbel_noise(0).values()))
    check_against_the_reference(search, fen, network, simulations, considered=considered, normalisation=normalisation)


# --- the network's action values for unvisited moves (gumbel_unvisited) --------------------------


@pytest.mark.parametrize("normalisation", ["tree", "node"])
@pytest.mark.parametrize(("fen", "simulations", "considered", "scale", "seed"), CASES)
def test_matches_the_reference_with_the_heads_values_for_unvisited_moves(fen, simulations, considered, scale, seed,
                                                                        normalisation):
    network = FixedNetwork(seed, head=True)
    search = gumbel_analysis(fen, network, simulations, gumbel_considered=considered, gumbel_scale=scale,
                             gumbel_q_normalisation=normalisation, gumbel_unvisited="action_value", seed=seed)
    assert search.reads_action_values
    check_against_the_reference(search, fen, network, simulations, considered=considered, normalisation=normalisation,
                                unvisited="action_value")


def test_an_unvisited_moves_head_value_raises_its_share_of_the_improved_policy():
    # e2e4 and d2d4 lead the prior and take the two simulations; the head calls g1f3 a sure win (and every
    # other move even), which a visit never shows. With the head's values the tree's range is [-1, 1] and
    # sigma = (c_visit 1 + 1 visit) * q_hat: 2 for g1f3's q_hat of 1, 1 for every other move's 1/2, so
    # g1f3 weighs e = exp(2 - 1) times another unvisited move of the same prior. The mixed value gives
    # every unvisited move the same weight.
    network = StubNetwork({START: ({"e2e4": 3.0, "d2d4": 2.0}, {"g1f3": 1.0})})
    for unvisited, ratio in (("mixed", 1.0), ("action_value", math.e)):
        search = gumbel_analysis(START, network, 2, gumbel_considered=2, gumbel_c_visit=1.0,
                                 gumbel_unvisited=unvisited)
        assert {uci for uci, _, n, _, _ in search.root_stats(0) if n} == {"e2e4", "d2d4"}
        improved = search.improved_policy(0)
        assert improved["g1f3"] / improved["b1c3"] == pytest.approx(ratio, rel=1e-5), unvisited
        assert search.action_values(0)["g1f3"] == (1.0 if unvisited == "action_value" else None)
        check_against_the_reference(search, START, network, 2, considered=2, c_visit=1.0, unvisited=unvisited)


def test_the_heads_values_change_nothing_while_gumbel_unvisited_is_mixed():
    for fen, simulations, considered, scale, seed in CASES[3:6]:
        searches = [gumbel_analysis(fen, FixedNetwork(seed, head=head), simulations, gumbel_considered=considered,
                                    gumbel_scale=scale, seed=seed) for head in (False, True)]
        assert not searches[1].reads_action_values
        assert searches[0].root_stats(0) == searches[1].root_stats(0)
        assert searches[0].improved_policy(0) == searches[1].improved_policy(0)
        assert set(searches[1].action_values(0).values()) == {None}  # given, checked, not kept


@pytest.mark.parametrize("leaves", [4, 16])
@pytest.mark.parametrize(("fen", "simulations", "considered", "scale", "seed"), CASES[4:8])
def test_a_batched_search_with_the_heads_values_keeps_the_schedule(fen, simulations, considered, scale, seed,
                                                                    leaves):
    network = FixedNetwork(seed, head=True)
    options = dict(gumbel_considered=considered, gumbel_scale=scale, gumbel_unvisited="action_value", seed=seed)
    batched = gumbel_analysis(fen, network, simulations, leaves_per_game=leaves, **options)
    one = gumbel_analysis(fen, network, simulations, **options)
    assert batched.simulations(0) == simulations and batched.in_flight(0) == 0
    counts = sorted((n for _, _, n, _, _ in batched.root_stats(0)), reverse=True)
    assert counts == sorted((n for _, _, n, _, _ in one.root_stats(0)), reverse=True)


def test_visit_counts_follow_the_reference_schedule():
    for k in (1, 2, 3, 5, 16, 40):
        for budget in (1, 2, 7, 16, 64, 200):
            counts = sorted((n for _, _, n, _, _ in analyse(Board(), uniform_evaluator, budget, algorithm="gumbel",
                                                            gumbel_considered=k).root_stats(0)), reverse=True)
            schedule = visit_schedule(min(k, 20), budget)
            # With equal priors and no noise every phase keeps the first moves: the visits follow the schedule.
            expected = sorted(np.bincount([i for i, _ in _assign(schedule)], minlength=20).tolist(), reverse=True)
            assert counts == expected, (k, budget)


def _assign(schedule: list[int]) -> list[tuple[int, int]]:
    """Plays a schedule on equal moves: each simulation goes to the first move with the scheduled visits."""
    visits: list[int] = [0] * 20
    out = []
    for wanted in schedule:
        move = visits.index(wanted)
        visits[move] += 1
        out.append((move, wanted))
    return out


# --- many leaves per network call ------------------------------------------------------------


def _phase(k: int, budget: int, index: int) -> int:
    """The Sequential Halving phase of simulation `index` (the reference schedule's phases, 0-based)."""
    phases, considered, start, phase = max(1, math.ceil(math.log2(k))) if k > 1 else 1, k, 0, 0
    if k <= 1:
        return 0
    while True:
        span = max(1, budget // (phases * considered)) * considered
        if index < start + span:
            return phase
        start, considered, phase = start + span, max(2, considered // 2), phase + 1


@pytest.mark.parametrize("leaves", [4, 16])
@pytest.mark.parametrize(("fen", "simulations", "considered", "scale", "seed"), CASES)
def test_a_batched_search_keeps_the_schedule_and_never_batches_across_a_phase(fen, simulations, considered, scale,
                                                                               seed, leaves):
    network = FixedNetwork(seed)
    params = SearchParams(simulations=simulations, autoplay=False, algorithm="gumbel", leaves_per_game=leaves,
                          gumbel_considered=considered, gumbel_scale=scale, ply_limit=0)
    search = MultiGameSearch(1, params, seed=seed)
    search.set_position(0, Board(fen, ply_limit=None))
    batch = search.new_batch()
    k = min(considered, chess.Board(fen).legal_moves.count())
    sizes = []
    while search.searching():
        done = search.simulations(0)
        rows = search.gather(*batch)
        paths = [tuple(moves) for _, moves in search.batch_paths()]
        assert len(set(paths)) == rows and all(a == b or a != b[:len(a)] for a in paths for b in paths)
        if done or rows > 1:  # the root's own evaluation is not a simulation
            assert _phase(k, simulations, done) == _phase(k, simulations, done + max(rows, 1) - 1)
        logits, values = network(batch[0][:rows], batch[1][:rows])
        search.backup(logits, values)
        sizes.append(rows)
    assert search.in_flight(0) == 0 and search.simulations(0) == simulations
    one = gumbel_analysis(fen, network, simulations, gumbel_considered=considered, gumbel_scale=scale, seed=seed)
    counts = sorted((n for _, _, n, _, _ in search.root_stats(0)), reverse=True)
    assert counts == sorted((n for _, _, n, _, _ in one.root_stats(0)), reverse=True)  # Sequential Halving's visits
    assert simulations < 16 or max(sizes) > 1


@pytest.mark.parametrize("leaves", [4, 16])
def test_a_batched_gumbel_search_mates_in_one_and_takes_the_hanging_queen(leaves):
    for fen, mate in MATES_IN_ONE:
        assert gumbel_analysis(fen, uniform_evaluator, 16, leaves_per_game=leaves).best_move(0) == mate
    search = gumbel_analysis("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1", material_evaluator, 64, gumbel_considered=32,
                             leaves_per_game=leaves)
    assert search.best_move(0) == "d2d5"


# --- budgets and small searches -----------------------------------------------------------


@pytest.mark.parametrize("simulations", [1, 2, 16])
def test_small_budgets_give_a_legal_move_and_a_normalised_target(simulations):
    for fen in (START, ITALIAN, BLACK_KQK):
        search = gumbel_analysis(fen, uniform_evaluator, simulations)
        board = chess.Board(fen)
        assert chess.Move.from_uci(search.best_move(0)) in board.legal_moves
        target = search.improved_policy(0)
        assert set(target) == {move.uci() for move in board.legal_moves}
        assert sum(target.values()) == pytest.approx(1.0, abs=1e-6)
        assert sum(n for _, _, n, _, _ in search.root_stats(0)) == simulations


def test_game_end_leaves_count_as_simulations_and_the_root_evaluation_does_not():
    # Every Black move here ends the game or walks into mate: many simulations end at exact game ends.
    batches = []

    def counting(planes, scalars):
        batches.append(len(planes))
        return uniform_evaluator(planes, scalars)

    search = gumbel_analysis(BLACK_KQK, counting, 50)
    stats = search.root_stats(0)
    assert sum(n for _, _, n, _, _ in stats) == 50 == search.total_simulations
    assert sum(batches) < 51  # the root's evaluation plus fewer than one per simulation


# --- tactics with a uniform network ----------------------------------------------------------

MATES_IN_ONE = [
    ("6k1/5ppp/8/8/8/5PPP/5PPP/R5BK w - - 0 1", "a1a8"),     # back rank
    ("r5bk/5ppp/5ppp/8/8/8/5PPP/6K1 b - - 0 1", "a8a1"),
    ("6rk/6pp/8/6N1/8/8/8/6K1 w - - 0 1", "g5f7"),           # smothered
    ("6k1/8/8/8/6n1/8/6PP/6RK b - - 0 1", "g4f2"),
]


@pytest.mark.parametrize("normalisation", ["tree", "node"])
@pytest.mark.parametrize(("fen", "mate"), MATES_IN_ONE)
def test_sixteen_simulations_find_mate_in_one_with_a_uniform_network(fen, mate, normalisation):
    # k = 16 considers every move of these positions. With equal priors and no noise,
    # a position of more moves leaves the last ones in move order unsampled, mate or not.
    assert chess.Board(fen).legal_moves.count() <= 16
    assert gumbel_analysis(fen, uniform_evaluator, 16, gumbel_q_normalisation=normalisation).best_move(0) == mate


def test_material_evaluator_takes_the_hanging_queen():
    for normalisation in ("tree", "node"):
        search = gumbel_analysis("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1", material_evaluator, 64,
                                 gumbel_considered=32, gumbel_q_normalisation=normalisation)
        assert search.best_move(0) == "d2d5"
        assert max(search.improved_policy(0).items(), key=lambda item: item[1])[0] == "d2d5"


# --- noise, determinism, options ---------------------------------------------------------------


def test_gumbel_noise_is_seeded_and_analysis_without_noise_is_deterministic():
    def noisy(seed: int) -> dict[str, float]:
        return gumbel_analysis(START, uniform_evaluator, 16, gumbel_scale=1.0, seed=seed).gumbel_noise(0)

    assert noisy(3) == noisy(3) != noisy(4)
    values = np.array(list(noisy(5).values()))
    assert values.std() > 0.5  # Gumbel(0, 1) has a standard deviation of 1.28
    quiet = gumbel_analysis(START, uniform_evaluator, 16, seed=6)
    assert not any(quiet.gumbel_noise(0).values())
    assert quiet.best_move(0) == gumbel_analysis(START, uniform_evaluator, 16, seed=7).best_move(0)


def test_same_seed_same_self_play_game():
    def first_game(games: int, seed: int) -> list[str]:
        search = MultiGameSearch(games, SearchParams(simulations=8, ply_limit=40, algorithm="gumbel"), seed=seed)
        records = {}
        run(search, uniform_evaluator, on_step=lambda rows: records.update(search.take_finished()))
        return records[0]["moves"]

    assert first_game(1, seed=11) == first_game(1, seed=11) == first_game(3, seed=11)
    assert first_game(1, seed=11) != first_game(1, seed=12)


@pytest.mark.parametrize(
    "options",
    [dict(algorithm="mcts"), dict(algorithm="gumbel", tree_reuse=True),
     dict(algorithm="gumbel", add_noise=True), dict(gumbel_q_normalisation="global"), dict(gumbel_considered=0),
     dict(gumbel_scale=-1.0), dict(gumbel_c_visit=-1.0), dict(gumbel_unvisited="head")],
)
def test_bad_gumbel_options_raise_value_error(options):
    with pytest.raises(ValueError):
        MultiGameSearch(1, SearchParams(**options))


def test_config_refuses_what_gumbel_cannot_do_and_self_play_takes_its_fields():
    from alphazero.search import SELFPLAY, search_params

    with pytest.raises(UserError, match="leaves_per_game"):
        apply_overrides(get_preset("tiny"), ["search.algorithm=gumbel", "search.leaves_per_game=4"])
    with pytest.raises(UserError, match="tree_reuse"):
        apply_overrides(get_preset("tiny"), ["search.algorithm=gumbel", "search.tree_reuse=true"])
    with pytest.raises(UserError, match="algorithm"):
        apply_overrides(get_preset("tiny"), ["search.algorithm=alphabeta"])
    config = apply_overrides(get_preset("tiny"), ["search.algorithm=gumbel", "search.gumbel_q_normalisation=node"])
    assert MultiGameSearch(2, search_params(config.search, SELFPLAY)).algorithm == "gumbel"
    assert get_preset("tiny").search.algorithm == "gumbel" and get_preset("small").search.algorithm == "puct"


def test_puct_target_is_the_visit_share_and_gumbel_inspection_is_refused():
    search = analyse(Board(), uniform_evaluator, 20)
    assert search.algorithm == "puct"
    with pytest.raises(ValueError, match="gumbel"):
        search.gumbel_noise(0)
    visits = {uci: n for uci, _, n, _, _ in search.root_stats(0)}
    assert search.improved_policy(0) == pytest.approx({uci: n / 20 for uci, n in visits.items()})


# --- self-play ------------------------------------------------------------------------------


def check_targets(record: dict) -> None:
    """Each sample's target covers exactly the legal moves (python-chess) and sums to 1."""
    board = chess.Board(record["start_fen"])
    offsets, indices, probs = record["policy_offsets"], record["policy_indices"], record["policy_probs"]
    samples = iter(range(len(offsets) - 1))
    for ply, uci in enumerate(record["moves"]):
        if record["full_search"][ply]:
            sample = next(samples)
            row = slice(offsets[sample], offsets[sample + 1])
            assert sorted(indices[row].tolist()) == sorted(legal_move_indices(board).tolist())
            assert probs[row].sum() == pytest.approx(1.0, abs=1e-5) and (probs[row] > 0).all()
        board.push_uci(uci)


def test_self_play_records_improved_policies_that_go_into_valid_shards(tmp_path):
    search = MultiGameSearch(3, SearchParams(simulations=16, ply_limit=30, algorithm="gumbel"), seed=2)
    records = play_games(search, FixedNetwork(1))
    assert len(records) == 3
    for record in records:
        check_targets(record)
        assert len(record["results"]) == record["plies"]
    shard = shard_from_records([{**r, "weights_step": 0} for r in records])
    dense = shard.dense_policy(list(range(len(shard))))
    np.testing.assert_allclose(dense.sum(axis=1), 1.0, atol=1e-5)


def test_playout_cap_with_gumbel_records_full_searches_only():
    search = MultiGameSearch(4, SearchParams(simulations=24, playout_cap_fraction=0.25, playout_cap_simulations=3,
                                             ply_limit=40, algorithm="gumbel"), seed=9)
    for record in play_games(search):
        full = record["full_search"]
        assert 0 < full.sum() < len(full)
        np.testing.assert_array_equal(record["plies_of_samples"], np.flatnonzero(full))
        check_targets(record)


def test_resignation_with_gumbel():
    def white_is_lost(planes, scalars):
        white_to_move = scalars[:, 0] == 1.0
        return np.zeros((len(planes), NUM_MOVES), np.float32), np.where(white_to_move, -0.99, 0.99).astype(np.float32)

    search = MultiGameSearch(3, SearchParams(simulations=8, resign_threshold=-0.9, resign_consecutive=2, ply_limit=80,
                                             resign_disabled_fraction=0.0, algorithm="gumbel"), seed=2)
    for record in play_games(search, white_is_lost):
        assert record["termination"] == "resignation" and record["result"] == "0-1" and record["plies"] == 2


def test_self_play_worker_writes_gumbel_shards(tmp_path):
    from selfplay.worker import SelfPlayWorker

    run_dir, config = RunDir.create_or_open(
        tmp_path / "run", get_preset("tiny"),
        ["search.algorithm=gumbel", "search.simulations=8", "search.playout_cap_fraction=0", "search.ply_limit=20",
         "selfplay.games_per_actor=2", "selfplay.shard_games=1", "selfplay.save_pgn=false"])
    worker = SelfPlayWorker(str(run_dir.root), to_toml(config), "w", seed=1, max_games=2)
    assert worker.search.algorithm == "gumbel"
    worker.play(120)
    worker.flush()
    assert worker.idle()
    shards = [read_shard(path) for path in list_shards(run_dir.selfplay)]
    assert sum(len(shard.games) for shard in shards) == 2
    for shard in shards:
        for game_number, game in enumerate(shard.games):
            rows = np.flatnonzero(shard.game == game_number)
            board = chess.Board(game["start_fen"])
            for row, uci in zip(rows, game["moves"]):
                start, end = shard.policy_offsets[row], shard.policy_offsets[row + 1]
                assert sorted(shard.policy_indices[start:end].tolist()) == sorted(legal_move_indices(board).tolist())
                assert shard.policy_probs[start:end].sum() == pytest.approx(1.0, abs=1e-5)
                board.push_uci(uci)


# --- evaluation agents and the UCI engine ------------------------------------------------------


def test_search_players_follow_the_run_algorithm_and_gumbel_players_always_use_gumbel(tmp_path, weights):
    from alphazero.store.sources import NetworkCache
    from eval.agents import parse_player
    from eval.network_agents import SearchAgent

    puct_run, _ = RunDir.create_or_open(tmp_path / "puct", get_preset("tiny"), ["search.algorithm=puct"])
    gumbel_run, _ = RunDir.create_or_open(tmp_path / "gumbel", get_preset("tiny"))
    context = {"device": "cpu", "networks": NetworkCache()}

    def agent(spec: str, run_dir: RunDir) -> SearchAgent:
        made = parse_player(spec, run=run_dir.root, **context)
        assert isinstance(made, SearchAgent)
        return made

    assert agent("search:8", puct_run).algorithm == "puct"
    assert agent("search:8", gumbel_run).algorithm == "gumbel"
    assert agent("search:8,algorithm=puct", gumbel_run).algorithm == "puct"
    assert agent("search:8,algorithm=gumbel", puct_run).algorithm == "gumbel"
    assert agent("gumbel:8", puct_run).algorithm == "gumbel" and agent("gumbel:8", puct_run).name == "gumbel:8@builtin"
    with pytest.raises(UserError, match="algorithm"):
        agent("search:8,algorithm=alphabeta", puct_run)
    smothered = chess.Board("6rk/6pp/8/6N1/8/8/8/6K1 w - - 0 1")
    gumbel = agent(f"gumbel:16,weights={weights}", puct_run)
    boards = [chess.Board(), chess.Board(ITALIAN), smothered]
    first, again = gumbel.choose(boards), gumbel.choose(boards)
    assert [c.move for c in first] == [c.move for c in again]  # no noise: the same moves
    assert all(board.is_legal(choice.move) for board, choice in zip(boards, first))
    assert first[2].move == chess.Move.from_uci("g5f7")
    assert all(choice.info["nodes"] == 16 and choice.info["pv"][0] == choice.move.uci() for choice in first)


def test_uci_engine_searches_with_gumbel_when_asked(weights):
    import io

    from eval.uci import OPTIONS, UciEngine

    [option] = [o for o in OPTIONS if o.name == "SearchAlgorithm"]
    assert option.declaration() == "option name SearchAlgorithm type combo default auto var auto var puct var gumbel"
    out = io.StringIO()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(), stdout=out)
    engine.handle("setoption name SearchAlgorithm value Nope")
    assert "ignored: SearchAlgorithm takes one of auto, puct, gumbel" in out.getvalue()
    engine.handle("setoption name SearchAlgorithm value gumbel")
    engine.handle("setoption name LeavesPerBatch value 4")  # batches of up to 4 leaves, within each phase
    engine.handle("position fen 6rk/6pp/8/6N1/8/8/8/6K1 w - - 0 1")
    engine.handle("go nodes 16")
    assert engine.wait(60)
    assert engine.values["SearchAlgorithm"] == "gumbel"
    assert out.getvalue().splitlines()[-1] == "bestmove g5f7"
    assert "search failed" not in out.getvalue()
    engine.handle("position startpos")
    engine.handle("go nodes 200")
    assert engine.wait(60)
    assert engine.last_report is not None and engine.last_report.nodes == 200
    assert engine.last_report.leaves_per_batch > 2


def test_uci_auto_follows_the_network_for_a_node_limit_and_takes_puct_under_a_clock(tmp_path):
    import io

    import torch

    from alphazero.config import to_toml
    from alphazero.nn.network import AlphaZeroNet
    from alphazero.store.checkpoint import save_model
    from eval.uci import UciEngine

    torch.manual_seed(3)
    path = tmp_path / "gumbel-run-net.pt"
    save_model(path, AlphaZeroNet(get_preset("tiny").network), config_toml=to_toml(get_preset("tiny")))
    out = io.StringIO()
    engine = UciEngine(None, path, "cpu", stdin=io.StringIO(), stdout=out)
    engine.handle("position startpos")
    played = []
    for go in ("go nodes 16", "go movetime 150", "go wtime 2000 btime 2000", "go"):
        engine.handle(go)
        assert engine.wait(60)
        played.append(engine._search.algorithm)
    # The network's run searches with gumbel; Sequential Halving needs its budget in advance, a clock does not say it.
    assert played == ["gumbel", "puct", "puct", "gumbel"]
    assert out.getvalue().count("bestmove") == 4 and "search failed" not in out.getvalue()


def test_bench_search_prints_gumbel_beside_puct(capsys):
    import re

    from alphazero.app import cli

    assert cli.main(["bench", "search", "--algorithm", "gumbel", "--games", "2", "--simulations", "20",
                     "--seconds", "0.3"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"PUCT: .* simulations/s", out)
    assert re.search(r"Gumbel: .* simulations/s .* = \d+\.\dx PUCT", out)
