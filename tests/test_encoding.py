"""The Cython encoders' Python edge: known indices, mirroring, and clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from mcts_ext import Board, IllegalMoveError, MoveIndexError
from mcts_ext.encode import NUM_MOVES, encode_board, encode_boards, index_to_uci, new_batch, push_index, uci_to_index


def test_known_indices_and_mirroring_for_black():
    board = Board()
    assert uci_to_index(board, "e2e4") == 1 * 64 + 12  # N, distance 2, from e2
    assert uci_to_index(board, "g1f3") == (56 + 7) * 64 + 6  # knight (-1, +2), from g1
    board.push_uci("e2e4")
    assert uci_to_index(board, "e7e5") == 1 * 64 + 12  # e7 mirrored is e2


@pytest.mark.parametrize(
    ("fen", "uci", "plane"),
    [
        ("4k3/1P6/8/8/8/8/8/4K3 w - - 0 1", "b7b8q", 0),  # queen promotion is a queen-like move N 1
        ("4k3/1P6/8/8/8/8/8/4K3 w - - 0 1", "b7b8n", 64 + 1),  # knight, straight
        ("r3k3/1P6/8/8/8/8/8/4K3 w - - 0 1", "b7a8b", 64 + 3 + 0),  # bishop, capture-left
        ("2r1k3/1P6/8/8/8/8/8/4K3 w - - 0 1", "b7c8r", 64 + 6 + 2),  # rook, capture-right
        ("4k3/8/8/8/8/8/1p6/2R1K3 b - - 0 1", "b2c1n", 64 + 0 + 2),  # Black: files are not mirrored
        ("4k3/8/8/8/8/8/1p6/2R1K3 b - - 0 1", "b2c1q", 7 * 1 + 0),  # NE (direction 1), distance 1, once mirrored
    ],
)
def test_promotions_land_in_their_planes(fen, uci, plane):
    assert uci_to_index(Board(fen), uci) // 64 == plane


@pytest.mark.parametrize("index", [-1, NUM_MOVES, 10**9, "76", 1.0, None, True])
def test_out_of_range_or_non_integer_index_raises_move_index_error(index):
    with pytest.raises(MoveIndexError):
        index_to_uci(Board(), index)
    with pytest.raises(IndexError):
        push_index(Board(), index)


def test_in_range_index_that_names_no_legal_move_raises_illegal_move_error():
    board = Board()
    with pytest.raises(IllegalMoveError, match="names no legal move"):
        push_index(board, 2 * 64 + 12)  # e2 moving east
    assert board.ply == 0
    assert index_to_uci(board, 76) == "e2e4"
    assert push_index(board, np.int64(76)) == "e2e4" and board.ply == 1


def test_encode_writes_caller_arrays_and_checks_them():
    boards = [Board(), Board.from_moves(["e2e4"])]
    planes, scalars = new_batch(3)
    encode_boards(boards, planes, scalars)
    assert planes[0, 0] == 0xFF00 and planes[1, 0] == 0xFF00  # each side's own pawns on its 2nd rank
    assert scalars[0, 0] == 1.0 and scalars[1, 0] == 0.0
    assert not planes[2].any()
    with pytest.raises(ValueError):
        encode_board(Board(), np.zeros((1, 100), np.uint64), scalars)
    with pytest.raises(IndexError):
        encode_board(Board(), planes, scalars, row=3)
    with pytest.raises(IndexError):
        encode_boards([Board()] * 4, planes, scalars)
    with pytest.raises(ValueError):
        encode_board(Board(), planes.astype(np.int64), scalars)
