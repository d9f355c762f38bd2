"""Tests of the policy index for python-chess moves (alphazero.chess.moves), of the random
game corpus the differential tests rely on, and of the reference input encoder."""

from __future__ import annotations

import collections
import functools

import chess
import numpy as np
import pytest

from alphazero.chess.moves import NUM_MOVES, index_to_move, legal_move_indices, move_to_index, policy_mask
from mcts_ext.errors import IllegalMoveError, MoveIndexError
from tests.random_games import CORPUS_SEEDS, DEFAULT_MAX_PLIES, corpus, iter_positions, random_game
from tests.reference_encoder import SCALAR_SCALE, reference_compact, reference_planes

ALL_ONES = (1 << 64) - 1

# Positions where the promotions are legal: White pawns b7, d7 and Black pawns b2, d2,
# each pair able to push straight or take the rook between them.
WHITE_PROMOTIONS = "2r3k1/1P1P4/8/8/8/8/8/4K3 w - - 0 1"
BLACK_PROMOTIONS = "4k3/8/8/8/8/8/1p1p4/2R3K1 b - - 0 1"
CASTLING_WHITE = "r3k2r/8/8/8/8/8/8/R3K2R w KQkq - 0 1"
CASTLING_BLACK = "r3k2r/8/8/8/8/8/8/R3K2R b KQkq - 0 1"


def plane_of(index: int) -> int:
    return index // 64


# --- move index: whole corpus -------------------------------------------------


def test_corpus_legal_moves_have_distinct_indices_that_round_trip() -> None:
    positions = 0
    for board in iter_positions(CORPUS_SEEDS):
        moves = list(board.legal_moves)
        indices = legal_move_indices(board)
        assert indices.dtype == np.int64 and indices.shape == (len(moves),)
        assert len(set(indices.tolist())) == len(moves), board.fen()
        for move, index in zip(moves, indices.tolist()):
            assert move_to_index(move, board.turn) == index
            assert index_to_move(board, index) == move, (board.fen(), move.uci(), index)
        mask = policy_mask(board)
        assert mask.dtype == np.bool_ and mask.shape == (NUM_MOVES,)
        assert int(mask.sum()) == len(moves) and mask[indices].all(), board.fen()
        positions += 1
    assert positions > 5000  # the corpus really was walked


# --- move index: hand-computed spot checks ------------------------------------

SPOT_CHECKS = [
    # (fen, uci, index, why)
    (chess.STARTING_FEN, "e2e4", 1 * 64 + 12, "N distance 2 from e2"),
    (chess.STARTING_FEN, "g1f3", 63 * 64 + 6, "knight (-1, +2) is the 8th knight step"),
    (chess.STARTING_FEN, "b1c3", 56 * 64 + 1, "knight (+1, +2) is the 1st knight step"),
    ("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1", "e7e5", 1 * 64 + 12, "mirrored"),
    ("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1", "g8f6", 63 * 64 + 6, "mirrored"),
    (CASTLING_WHITE, "e1g1", (7 * 2 + 1) * 64 + 4, "E distance 2"),
    (CASTLING_WHITE, "e1c1", (7 * 6 + 1) * 64 + 4, "W distance 2"),
    (CASTLING_WHITE, "a1a8", 6 * 64 + 0, "N distance 7, a rook: no promotion"),
    (CASTLING_BLACK, "e8g8", (7 * 2 + 1) * 64 + 4, "E distance 2, files not mirrored"),
    (CASTLING_BLACK, "e8c8", (7 * 6 + 1) * 64 + 4, "W distance 2"),
    (CASTLING_BLACK, "e8e7", 0 * 64 + 4, "Black king down the board is oriented N"),
    (CASTLING_BLACK, "h8h1", 6 * 64 + 7, "oriented h1 -> h8, N distance 7"),
    (WHITE_PROMOTIONS, "b7b8q", 0 * 64 + 49, "queen promotion: N distance 1"),
    (WHITE_PROMOTIONS, "b7c8q", (7 * 1 + 0) * 64 + 49, "capturing queen promotion: NE distance 1"),
    (WHITE_PROMOTIONS, "b7b8n", (64 + 0 + 1) * 64 + 49, "knight, straight"),
    (WHITE_PROMOTIONS, "b7c8n", (64 + 0 + 2) * 64 + 49, "knight, capture-right"),
    (WHITE_PROMOTIONS, "d7c8b", (64 + 3 + 0) * 64 + 51, "bishop, capture-left"),
    (WHITE_PROMOTIONS, "d7d8r", (64 + 6 + 1) * 64 + 51, "rook, straight"),
    (WHITE_PROMOTIONS, "d7c8r", (64 + 6 + 0) * 64 + 51, "rook, capture-left"),
    (BLACK_PROMOTIONS, "b2b1q", 0 * 64 + 49, "b2 is oriented b7; N distance 1"),
    (BLACK_PROMOTIONS, "d2c1q", (7 * 7 + 0) * 64 + 51, "capturing towards the a-file is NW"),
    (BLACK_PROMOTIONS, "b2c1n", (64 + 0 + 2) * 64 + 49, "towards the h-file is capture-right"),
    (BLACK_PROMOTIONS, "d2c1b", (64 + 3 + 0) * 64 + 51, "towards the a-file is capture-left"),
    (BLACK_PROMOTIONS, "d2d1r", (64 + 6 + 1) * 64 + 51, "rook, straight"),
    (BLACK_PROMOTIONS, "b2c1r", (64 + 6 + 2) * 64 + 49, "rook, capture-right"),
]


@pytest.mark.parametrize(("fen", "uci", "index", "why"), SPOT_CHECKS)
def test_spot_check_index(fen: str, uci: str, index: int, why: str) -> None:
    board = chess.Board(fen)
    move = chess.Move.from_uci(uci)
    assert board.is_legal(move), "the test position must allow the move"
    assert move_to_index(move, board.turn) == index, why
    assert index_to_move(board, index) == move, why
    assert index in legal_move_indices(board).tolist()


@pytest.mark.parametrize(
    ("uci", "turn", "index"),
    [
        ("a1h8", chess.WHITE, (7 * 1 + 6) * 64 + 0),  # NE distance 7
        ("h1a8", chess.WHITE, (7 * 7 + 6) * 64 + 7),  # NW distance 7
        ("h8a1", chess.BLACK, (7 * 7 + 6) * 64 + 7),  # oriented h1 -> a8: the same move
        ("d4c2", chess.WHITE, (56 + 4) * 64 + 27),  # knight (-1, -2)
        ("d5c7", chess.BLACK, (56 + 4) * 64 + 27),  # oriented d4 -> c2: the same move
        ("h8g6", chess.BLACK, (56 + 7) * 64 + 7),  # oriented h1 -> g3: knight (-1, +2)
    ],
)
def test_geometry_without_a_board(uci: str, turn: chess.Color, index: int) -> None:
    assert move_to_index(chess.Move.from_uci(uci), turn) == index


def test_queen_like_index_promotes_a_pawn_to_a_queen_only() -> None:
    board = chess.Board(WHITE_PROMOTIONS)
    assert index_to_move(board, 0 * 64 + chess.B7).promotion == chess.QUEEN
    rook = chess.Board(CASTLING_WHITE)
    assert index_to_move(rook, 6 * 64 + chess.A1) == chess.Move.from_uci("a1a8")


def test_numpy_integer_index_is_accepted() -> None:
    board = chess.Board()
    assert index_to_move(board, np.int64(76)) == chess.Move.from_uci("e2e4")
    assert index_to_move(board, legal_move_indices(board)[0]) == next(iter(board.legal_moves))


# --- move index: errors -------------------------------------------------------


@pytest.mark.parametrize("index", [-1, NUM_MOVES, 10**9])
def test_index_out_of_range_raises_move_index_error(index: int) -> None:
    with pytest.raises(MoveIndexError, match=str(index)) as info:
        index_to_move(chess.Board(), index)
    assert isinstance(info.value, IndexError)


@pytest.mark.parametrize("index", ["76", 76.0, None, True])
def test_non_integer_index_raises_move_index_error(index: object) -> None:
    with pytest.raises(MoveIndexError, match="int"):
        index_to_move(chess.Board(), index)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "index",
    [
        0 * 64 + chess.A1,  # a1a2: blocked by our own pawn
        2 * 7 * 64 + chess.H1,  # E from h1: off the board
        (64 + 1) * 64 + chess.E2,  # under-promotion from e2
        1 * 64 + chess.E4,  # no piece on e4
    ],
)
def test_in_range_index_naming_no_legal_move_raises_illegal_move_error(index: int) -> None:
    board = chess.Board()
    with pytest.raises(IllegalMoveError) as info:
        index_to_move(board, index)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert f"policy index {index} " in message and board.fen() in message


@pytest.mark.parametrize(
    ("move", "turn"),
    [
        (chess.Move.null(), chess.WHITE),
        (chess.Move(chess.A1, chess.A1), chess.WHITE),
        (chess.Move.from_uci("a1d2"), chess.WHITE),  # (3, 1): neither queen-like nor knight
        (chess.Move.from_uci("a1h7"), chess.BLACK),  # (7, 6)
        (chess.Move.from_uci("e2e1n"), chess.WHITE),  # under-promotion backwards for White
        (chess.Move.from_uci("e7e8n"), chess.BLACK),  # ... and for Black
        (chess.Move.from_uci("e7e5n"), chess.WHITE),  # under-promotion two steps
        (chess.Move.from_uci("b7d8r"), chess.WHITE),  # under-promotion two files over
        (chess.Move.from_uci("e7g8q"), chess.WHITE),  # queen promotion by a knight jump
        (chess.Move(chess.E7, chess.E8, promotion=chess.KING), chess.WHITE),
    ],
)
def test_move_no_index_expresses_raises_illegal_move_error(
    move: chess.Move, turn: chess.Color
) -> None:
    with pytest.raises(IllegalMoveError, match=move.uci()):
        move_to_index(move, turn)


# --- the random game corpus ---------------------------------------------------


def _corpus_features() -> collections.Counter[str]:
    """Counts the rules the corpus games reach, as names (see the test below)."""
    seen: collections.Counter[str] = collections.Counter()
    for game in corpus():
        seen[f"end {game.termination}"] += 1
        board = chess.Board()
        for move in game.moves:
            side = "white" if board.turn else "black"
            if board.is_kingside_castling(move):
                seen[f"{side} castles kingside"] += 1
            if board.is_queenside_castling(move):
                seen[f"{side} castles queenside"] += 1
            if board.is_en_passant(move):
                seen[f"{side} en passant"] += 1
            if move.promotion:
                seen[f"{side} promotes to {chess.piece_name(move.promotion)}"] += 1
                if board.is_capture(move):
                    seen[f"{side} promotes capturing"] += 1
            board.push(move)
    return seen


@functools.cache
def _legal_planes() -> dict[chess.Color, frozenset[int]]:
    """Gets, per side to move, the policy planes of all legal moves of the corpus positions."""
    planes: dict[chess.Color, set[int]] = {chess.WHITE: set(), chess.BLACK: set()}
    for board in iter_positions(CORPUS_SEEDS):
        planes[board.turn].update(plane_of(i) for i in legal_move_indices(board).tolist())
    return {color: frozenset(found) for color, found in planes.items()}


def test_corpus_covers_every_rule() -> None:
    seen = _corpus_features()
    wanted = [f"end {name}" for name in ("checkmate", "stalemate", "insufficient_material")]
    wanted += ["end fifty_moves", "end threefold_repetition"]
    for side in ("white", "black"):
        wanted += [f"{side} castles kingside", f"{side} castles queenside", f"{side} en passant"]
        wanted += [f"{side} promotes to {name}" for name in ("queen", "rook", "bishop", "knight")]
        wanted.append(f"{side} promotes capturing")
    missing = [feature for feature in wanted if seen[feature] == 0]
    assert not missing, f"the corpus misses {missing}; seen {dict(seen)}"


@pytest.mark.parametrize("color", [chess.WHITE, chess.BLACK], ids=["white", "black"])
def test_corpus_offers_every_policy_plane(color: chess.Color) -> None:
    missing = set(range(73)) - _legal_planes()[color]
    assert not missing, f"no corpus position offers planes {sorted(missing)}"


def test_corpus_games_end_as_python_chess_says() -> None:
    checks = {
        "checkmate": lambda b: b.is_checkmate(),
        "stalemate": lambda b: b.is_stalemate(),
        "insufficient_material": lambda b: b.is_insufficient_material(),
        "fifty_moves": lambda b: b.is_fifty_moves(),
        "threefold_repetition": lambda b: b.is_repetition(3),
        "ply_limit": lambda b: b.ply() >= DEFAULT_MAX_PLIES,
    }
    for game in corpus():
        assert checks[game.termination](game.board), (game.seed, game.termination)
        assert game.board.move_stack == game.moves


def test_random_game_is_reproducible_from_its_seed() -> None:
    assert random_game(7).moves == random_game(7).moves
    assert random_game(7).moves != random_game(8).moves


# --- the reference encoder ----------------------------------------------------


def board_after(*ucis: str, fen: str = chess.STARTING_FEN) -> chess.Board:
    board = chess.Board(fen)
    for uci in ucis:
        board.push_uci(uci)
    return board


def step(planes: np.ndarray, t: int) -> list[int]:
    return [int(x) for x in planes[14 * t : 14 * t + 14]]


RANK_1 = 0xFF
RANK_2 = 0xFF << 8
RANK_7 = 0xFF << 48
START_US = [RANK_2, 0x42, 0x24, 0x81, 1 << 3, 1 << 4]  # P N B R Q(d1) K(e1)
START_THEM = [RANK_7, 0x42 << 56, 0x24 << 56, 0x81 << 56, 1 << 59, 1 << 60]


def test_start_position_compact() -> None:
    planes, scalars = reference_compact(chess.Board())
    assert planes.dtype == np.uint64 and planes.shape == (112,)
    assert scalars.dtype == np.float32 and scalars.shape == (7,)
    assert step(planes, 0) == START_US + START_THEM + [0, 0]
    assert not planes[14:].any(), "steps before the start are zero"
    assert scalars.tolist() == [1, 1, 1, 1, 1, 1, 0]


def test_black_to_move_is_mirrored_and_history_oriented_by_the_mover_now() -> None:
    planes, scalars = reference_compact(board_after("e2e4"))
    e4_oriented = 1 << 36  # e4 -> e5 when Black looks
    white_pawns = (RANK_7 & ~(1 << 52)) | e4_oriented  # e2 -> e7 gone
    # Black's pieces are "us", on oriented ranks 1 and 2; files are not mirrored (king on e).
    assert step(planes, 0) == START_US + [white_pawns] + START_THEM[1:] + [0, 0]
    # The start position, seen by Black (the mover now), though White moved there.
    assert step(planes, 1) == START_US + START_THEM + [0, 0]
    assert not planes[28:].any()
    assert scalars.tolist() == [0, 1, 1, 1, 1, 1, 0]


def test_history_steps_before_the_game_start_are_zero() -> None:
    planes, _ = reference_compact(board_after("e2e4", "e7e5", "g1f3"))
    for t in range(4):
        assert any(step(planes, t)[:12]), t
    assert not planes[14 * 4 :].any()
    fen_only, _ = reference_compact(chess.Board("4k3/8/8/8/8/8/8/4K3 w - - 0 1"))
    assert not fen_only[14:].any(), "a FEN without moves has no history"


def test_repetition_planes() -> None:
    shuffle = ("g1f3", "g8f6", "f3g1", "f6g8")
    twice, _ = reference_compact(board_after(*shuffle))
    assert step(twice, 0)[12:] == [ALL_ONES, 0], "2nd occurrence: seen once before"
    assert step(twice, 1)[12:] == [0, 0] and step(twice, 4)[12:] == [0, 0]
    thrice, _ = reference_compact(board_after(*shuffle, *shuffle))
    assert step(thrice, 0)[12:] == [ALL_ONES, ALL_ONES], "3rd occurrence"
    assert step(thrice, 1)[12:] == [ALL_ONES, 0], "after 3.Ng1 stood once before (after 2.Ng1)"
    assert step(thrice, 4)[12:] == [ALL_ONES, 0], "step 4 is the 2nd occurrence"


def test_repetition_counts_positions_further_back_than_the_history() -> None:
    # Queens and knights walk out and back: the position after 1...e5 returns 10 plies
    # later, beyond the 8 history steps, with no repetition in between.
    moves = ("e2e4", "e7e5", "d1e2", "d8e7", "g1h3", "g8h6", "e2f3", "e7f6", "h3g1", "h6g8")
    planes, _ = reference_compact(board_after(*moves, "f3d1", "f6d8"))
    assert step(planes, 0)[12:] == [ALL_ONES, 0]
    assert all(step(planes, t)[12:] == [0, 0] for t in range(1, 8))


def test_repetition_ignores_an_en_passant_square_without_a_legal_capture() -> None:
    # After 1.e4 the e3 square is no real en passant right, so 3.Ng1 repeats 1.e4.
    planes, _ = reference_compact(board_after("e2e4", "g8f6", "g1f3", "f6g8", "f3g1"))
    assert step(planes, 0)[12:] == [ALL_ONES, 0]


def test_repetition_counts_a_legal_en_passant_right() -> None:
    # After 2...d5 White may take exd6 e.p.: the same placement later, without it, is new.
    moves = ("e2e4", "g8f6", "e4e5", "d7d5", "g1f3", "f6g8", "f3g1", "g8f6")
    planes, _ = reference_compact(board_after(*moves))
    assert step(planes, 0)[12:] == [0, 0]
    again, _ = reference_compact(board_after(*moves, "g1f3", "f6g8", "f3g1", "g8f6"))
    assert step(again, 0)[12:] == [ALL_ONES, 0]


def test_scalars_with_asymmetric_castling_and_black_to_move() -> None:
    board = chess.Board("r3k2r/8/8/8/8/8/8/R3K2R b Kq - 17 42")
    _, scalars = reference_compact(board)
    # us = Black: kingside no, queenside yes; them = White: kingside yes, queenside no.
    assert scalars.tolist() == [0, 42, 0, 1, 1, 0, 17]
    planes = reference_planes(board)
    expected = [0, 42 / 256, 0, 1, 1, 0, 0.17]
    for j, value in enumerate(expected):
        assert np.all(planes[112 + j] == np.float32(value)), j


def test_castling_scalars_use_python_chess_cleaned_rights() -> None:
    # The FEN claims White's kingside right, but the h1 rook is gone: no right.
    board = chess.Board("r3k2r/8/8/8/8/8/8/R3K3 w KQkq - 0 1")
    _, scalars = reference_compact(board)
    assert scalars.tolist()[2:6] == [0, 1, 1, 1]


def _expand(planes: np.ndarray, scalars: np.ndarray) -> np.ndarray:
    """Expands the compact form as SPEC.md's numpy recipe says (the test's own copy)."""
    bits = np.unpackbits(planes.astype("<u8").view(np.uint8), bitorder="little")
    out = np.empty((119, 8, 8), dtype=np.float32)
    out[:112] = bits.reshape(112, 8, 8)
    out[112:] = (scalars.astype(np.float64) * np.array(SCALAR_SCALE))[:, None, None]
    return out


def test_reference_planes_agree_with_expanded_compact_on_the_corpus() -> None:
    for n, board in enumerate(iter_positions(range(6))):
        if n % 5:
            continue
        expected = _expand(*reference_compact(board))
        direct = reference_planes(board)
        assert direct.dtype == np.float32 and direct.shape == (119, 8, 8)
        np.testing.assert_array_equal(direct, expected, err_msg=board.fen())


def test_reference_planes_layout_row_is_rank_column_is_file() -> None:
    planes = reference_planes(board_after("e2e4"))
    # White's e4 pawn is "them" (plane 6) at oriented e5: row 4, column 4.
    assert planes[6, 4, 4] == 1 and planes[6, 3, 4] == 0
    # Black's king on e8 is "us" (plane 5) at oriented e1: row 0, column 4.
    assert planes[5, 0, 4] == 1 and planes[5].sum() == 1
