"""The Cython board's Python edge: FEN validation, checked moves, game status."""

from __future__ import annotations

import pickle

import chess
import pytest

from mcts_ext import STARTING_FEN, Board, IllegalMoveError, InvalidFenError


@pytest.mark.parametrize(
    ("fen", "reason"),
    [
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq", "4 to 6 space-separated fields"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1 extra", "4 to 6 space-separated fields"),
        ("rnbqkbnr/pppppppp/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "expected 8 ranks"),
        ("rnbqkbnr/ppppxppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "bad piece letter 'x'"),
        ("rnbqkbnr/ppppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "more than 8 files"),
        ("rnbqkbnr/ppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1", "exactly 8 files"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKKNR w kq - 0 1", "white has 2 kings"),
        ("rnbq1bnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQ - 0 1", "black has 0 kings"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNP w kq - 0 1", "pawn on the first or last rank"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR x KQkq - 0 1", "side to move must be 'w' or 'b'"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQxk - 0 1", "bad castling field"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq e9 0 1", "bad en passant square"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq e3 0 1", "not on rank 6"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq e6 0 1", "no pawn that just moved two"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - x 1", "half-move clock"),
        ("rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 -3", "full-move number"),
        ("4k3/8/8/8/8/8/4R3/4K3 w - - 0 1", "the side not to move (black) is in check"),
    ],
)
def test_bad_fen_raises_value_error_saying_why(fen, reason):
    with pytest.raises(InvalidFenError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        Board(fen)
    with pytest.raises(ValueError):  # callers that only know ValueError still catch it
        Board(fen)


def test_fen_round_trips_and_matches_python_chess_output():
    fens = [
        STARTING_FEN,
        "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
        "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
        "4k3/8/8/8/8/8/8/4K3 b - - 99 180",
    ]
    for fen in fens:
        assert Board(fen).fen() == chess.Board(fen).fen() == fen


def test_fen_drops_castling_rights_without_king_and_rook_at_home_like_python_chess():
    fen = "4k3/8/8/8/8/8/8/4K2R w KQkq - 0 1"
    assert Board(fen).fen() == chess.Board(fen).fen() == "4k3/8/8/8/8/8/8/4K2R w K - 0 1"


def test_en_passant_square_shown_only_when_a_capture_is_legal():
    board = Board()
    board.push_uci("e2e4")
    assert board.fen().split()[3] == "-"  # no black pawn can take
    board = Board.from_moves(["e2e4", "a7a6", "e4e5", "d7d5"])
    assert board.fen().split()[3] == "d6"


@pytest.mark.parametrize("uci", ["e2e5", "e7e5", "e1g1", "a1a1", "e2e4x", "", "e2", "i2i4", "e7e8k"])
def test_illegal_or_malformed_moves_raise_and_leave_the_board_alone(uci):
    board = Board()
    with pytest.raises(IllegalMoveError):
        board.push_uci(uci)
    assert board.fen() == STARTING_FEN and board.ply == 0


def test_illegal_move_message_quotes_move_and_fen():
    with pytest.raises(IllegalMoveError, match=r"'e2e5'.*rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"):
        Board().push_uci("e2e5")


def test_push_rejects_non_strings():
    with pytest.raises(IllegalMoveError):
        Board().push_uci(None)  # type: ignore[arg-type]


def test_pop_undoes_moves_and_raises_when_empty():
    board = Board.from_moves(["e2e4", "e7e5"])
    assert board.pop() == "e7e5"
    assert board.move_stack == ["e2e4"]
    board.pop()
    with pytest.raises(IndexError):
        board.pop()


def test_copy_and_pickle_keep_the_history():
    board = Board.from_moves(["g1f3", "g8f6", "f3g1", "f6g8"], ply_limit=300)
    for other in (board.copy(), pickle.loads(pickle.dumps(board))):
        assert other.fen() == board.fen()
        assert other.move_stack == board.move_stack
        assert other.repetition_count() == 2
        assert other.ply_limit == 300
    copy = board.copy()
    copy.push_uci("e2e4")
    assert board.ply == 4  # the original is untouched


def test_checkmate_and_result():
    board = Board.from_moves(["f2f3", "e7e5", "g2g4", "d8h4"])
    assert board.is_checkmate() and board.termination() == "checkmate" and board.result() == "0-1"
    assert board.legal_moves() == []


def test_stalemate():
    board = Board("7k/5Q2/6K1/8/8/8/8/8 b - - 0 1")
    assert board.is_stalemate() and board.termination() == "stalemate" and board.result() == "1/2-1/2"


def test_threefold_repetition_ends_the_game_on_the_third_occurrence():
    board = Board()
    shuffle = ["g1f3", "g8f6", "f3g1", "f6g8"]
    for uci in shuffle:
        board.push_uci(uci)
    assert board.repetition_count() == 2 and board.termination() is None
    for uci in shuffle:
        board.push_uci(uci)
    assert board.repetition_count() == 3 and board.termination() == "threefold_repetition"


def test_fifty_move_rule_and_checkmate_takes_precedence():
    assert Board("4k3/8/8/8/8/8/8/R3K3 w - - 100 80").termination() == "fifty_moves"
    assert Board("4k3/8/8/8/8/8/8/R3K3 w - - 99 80").termination() is None
    # mate delivered on the 100th half-move is still mate
    board = Board("k7/8/1K6/8/8/8/8/7R w - - 99 80")
    board.push_uci("h1h8")
    assert board.termination() == "checkmate"


@pytest.mark.parametrize(
    ("fen", "insufficient"),
    [
        ("8/8/8/4k3/8/8/8/4K3 w - - 0 1", True),
        ("8/8/8/4k3/8/8/8/4KN2 w - - 0 1", True),
        ("8/8/8/4k3/8/8/8/4KB2 w - - 0 1", True),
        ("8/8/8/4k3/5b2/8/8/4KB2 w - - 0 1", False),  # opposite-coloured bishops can mate
        ("8/8/8/4kb2/8/8/8/4KB2 w - - 0 1", True),  # same-coloured bishops cannot
        ("8/8/8/4k3/8/8/8/2B1KB2 w - - 0 1", False),
        ("8/8/8/4k3/8/8/8/3NKN2 w - - 0 1", False),
        ("8/8/8/4kq2/8/8/8/4KN2 w - - 0 1", False),  # python-chess: queen vs knight is not insufficient
        ("8/8/8/4kn2/8/8/8/4KN2 w - - 0 1", False),
        ("8/8/8/4k3/8/8/4P3/4K3 w - - 0 1", False),
    ],
)
def test_insufficient_material_follows_python_chess(fen, insufficient):
    assert chess.Board(fen).is_insufficient_material() == insufficient
    board = Board(fen)
    assert board.is_insufficient_material() == insufficient
    assert (board.termination() == "insufficient_material") == insufficient


def test_ply_limit_ends_the_game_as_a_draw():
    board = Board(ply_limit=4)
    for uci in ["g1f3", "g8f6", "b1c3"]:
        board.push_uci(uci)
    assert board.termination() is None
    board.push_uci("b8c6")
    assert board.termination() == "ply_limit" and board.result() == "1/2-1/2"
    assert Board(ply_limit=None).ply_limit == 0
    with pytest.raises(ValueError):
        Board(ply_limit=0)


def test_zobrist_key_is_incremental_and_equal_for_transpositions():
    a = Board.from_moves(["g1f3", "g8f6", "b1c3"])
    b = Board.from_moves(["b1c3", "g8f6", "g1f3"])
    assert a.zobrist_key == b.zobrist_key == a.recomputed_key()
    assert a.zobrist_key != Board.from_moves(["g1f3", "g8f6"]).zobrist_key


@pytest.mark.parametrize("fen", [b"4k3/8/8/8/8/8/8/4K3 w - - 0 1", 12, None])
def test_a_fen_that_is_not_a_string_is_an_invalid_fen(fen):
    with pytest.raises(InvalidFenError, match="must be a string"):
        Board(fen)
    with pytest.raises(InvalidFenError, match="must be a string"):
        Board.from_moves([], fen)


@pytest.mark.parametrize("counters", ["² 1", "0 ²", "0 ٣", "+5 1", "0 2147483648", "99999999999999999999999 1"])
def test_counters_take_ascii_digits_in_the_accepted_range(counters):
    fen = f"4k3/8/8/8/8/8/8/4K3 w - - {counters}"
    with pytest.raises(InvalidFenError, match="whole number from 0 to 2147483647"):
        Board(fen)


def test_large_counters_read_as_python_chess_reads_them():
    for fen in ("4k3/8/8/8/8/8/8/4K3 w - - 1000000000 1234567890", "4k3/8/8/8/8/8/8/4K3 w - - 0 2147483647"):
        assert Board(fen).fen() == chess.Board(fen).fen() == fen


def test_every_fen_a_board_writes_reads_back():
    # Regression: a full-move number of 999999999 became 1000000000 after Black's
    # move, a FEN the board itself refused. Counters now stop at 2**31 - 1.
    board = Board("4k3/8/8/8/8/8/8/4K3 b - - 999999999 999999999")
    oracle = chess.Board(board.fen())
    for uci in ("e8e7", "e1e2"):
        board.push_uci(uci)
        oracle.push_uci(uci)
        assert Board(board.fen()).fen() == board.fen() == oracle.fen()
    top = Board("4k3/8/8/8/8/8/8/4K3 b - - 2147483647 2147483647")
    for uci in ("e8e7", "e1e2", "e7e8"):
        top.push_uci(uci)
        assert Board(top.fen()).fen() == top.fen()
    assert (top.halfmove_clock, top.fullmove_number) == (2147483647, 2147483647)
