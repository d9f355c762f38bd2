"""The Cython core against python-chess over every position of the random-game corpus.

Same legal moves, same FEN after every move, same game status and reason, and
the same encodings as the plain reference encoder written over python-chess.
"""

from __future__ import annotations

import chess
import numpy as np
import pytest

from alphazero.chess import moves as pc_moves
from alphazero.nn.planes import expand_numpy
from mcts_ext import Board
from mcts_ext.encode import encode_board, index_to_uci, legal_move_indices, new_batch, push_index
from tests.random_games import corpus, termination
from tests.reference_encoder import reference_compact, reference_planes

GAMES = corpus()


def test_corpus_is_thousands_of_positions():
    assert sum(len(game.moves) for game in GAMES) > 5000


@pytest.mark.parametrize("game", GAMES, ids=lambda game: f"seed{game.seed}")
def test_moves_fens_and_status_match_python_chess(game):
    ours = Board(ply_limit=None)
    theirs = chess.Board()
    for ply, move in enumerate([*game.moves, None]):
        where = f"ply {ply} of seed {game.seed}: {theirs.fen()}"
        assert ours.fen() == theirs.fen(), where
        assert sorted(ours.legal_moves()) == sorted(m.uci() for m in theirs.legal_moves), where
        assert ours.is_check() == theirs.is_check(), where
        assert ours.is_checkmate() == theirs.is_checkmate(), where
        assert ours.is_stalemate() == theirs.is_stalemate(), where
        assert ours.is_insufficient_material() == theirs.is_insufficient_material(), where
        assert ours.is_fifty_moves() == theirs.is_fifty_moves(), where
        assert ours.is_repetition(3) == theirs.is_repetition(3), where
        assert ours.termination() == termination(theirs, max_plies=10**6), where
        assert ours.zobrist_key == ours.recomputed_key(), where
        if move is not None:
            ours.push_uci(move.uci())
            theirs.push(move)
    assert ours.termination() == game.termination


@pytest.mark.parametrize("game", GAMES[::3], ids=lambda game: f"seed{game.seed}")
def test_encodings_match_the_reference_encoder(game):
    ours = Board(ply_limit=None)
    theirs = chess.Board()
    planes, scalars = new_batch(1)
    for ply, move in enumerate([*game.moves, None]):
        where = f"ply {ply} of seed {game.seed}: {theirs.fen()}"
        encode_board(ours, planes, scalars)
        ref_planes, ref_scalars = reference_compact(theirs)
        np.testing.assert_array_equal(planes[0], ref_planes, err_msg=where)
        np.testing.assert_array_equal(scalars[0], ref_scalars, err_msg=where)
        np.testing.assert_allclose(expand_numpy(planes, scalars)[0], reference_planes(theirs), rtol=1e-6,
                                   err_msg=where)
        indices = legal_move_indices(ours)
        assert len(set(indices.tolist())) == len(indices), where
        by_uci = {uci: int(i) for uci, i in zip(ours.legal_moves(), indices)}
        assert by_uci == {m.uci(): pc_moves.move_to_index(m, theirs.turn) for m in theirs.legal_moves}, where
        assert all(index_to_uci(ours, i) == uci for uci, i in by_uci.items()), where
        if move is not None:
            assert push_index(ours, by_uci[move.uci()]) == move.uci()
            theirs.push(move)
