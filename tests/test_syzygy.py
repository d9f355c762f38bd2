"""Syzygy tablebases (alphazero.chess.syzygy, eval.uci_syzygy): opening a path, Stockfish's ranking of root
moves, a search leaf read back from its compact input, and a match adjudicated by the tables (match --syzygy),
on the small real tables in tests/data/syzygy (their source and terms: its README)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import chess
import numpy as np
import pytest

from alphazero.chess.syzygy import MAX_DTZ, SyzygyPathError, Tables, rank_of
from eval.agents import RandomAgent
from eval.match import play_match
from eval.openings import Opening
from eval.uci_syzygy import leaf_board, open_tables, probe_leaves
from mcts_ext import Board
from mcts_ext.encode import encode_board, new_batch
from tests.helpers import KQVK, KRVK, KVKP_ONLY_KC2_HOLDS, ROOT, SYZYGY_TABLES, repo_env

KPVK_WIN = "4k3/8/8/4K3/4P3/8/8/8 w - - 0 1"


@pytest.fixture(scope="module")
def tables() -> Tables:
    return Tables.open(SYZYGY_TABLES)


def test_the_shipped_tables_are_few_and_small() -> None:
    files = [path for path in SYZYGY_TABLES.iterdir() if path.suffix in (".rtbw", ".rtbz")]
    assert len(files) == 10 and sum(path.stat().st_size for path in files) < 64 * 1024
    assert (SYZYGY_TABLES / "README.md").read_text().count("python-chess") >= 2


def test_open_says_what_it_holds(tables: Tables) -> None:
    assert tables.max_pieces == 3
    assert tables.describe() == f"Syzygy tables up to 3 pieces from {SYZYGY_TABLES}"


@pytest.mark.parametrize(("path", "said"), [
    ("", "the Syzygy path is empty"),
    ("/no/such/folder", "no such folder: '/no/such/folder'"),
    (str(SYZYGY_TABLES / "README.md"), "not a folder"),
])
def test_a_path_that_cannot_be_used_is_refused_with_what_is_wrong(path: str, said: str) -> None:
    with pytest.raises(SyzygyPathError, match=said):
        Tables.open(path)


def test_a_folder_without_tables_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SyzygyPathError, match="no Syzygy tables"):
        Tables.open(tmp_path)


def test_several_folders_are_joined_as_stockfish_joins_them(tmp_path: Path) -> None:
    tables = Tables.open(f"{tmp_path}{os.pathsep}{SYZYGY_TABLES}")
    assert tables.max_pieces == 3 and tables.folders == [str(tmp_path), str(SYZYGY_TABLES)]


def test_the_engine_opens_a_path_or_says_why_not() -> None:
    opened, said = open_tables(str(SYZYGY_TABLES))
    assert opened is not None and said == f"tablebases: Syzygy tables up to 3 pieces from {SYZYGY_TABLES}"
    missing, said = open_tables("/no/such/folder")
    assert missing is None
    assert said == ("SyzygyPath '/no/such/folder' not used: no such folder: '/no/such/folder'; "
                    "playing without tablebases")
    assert open_tables("") == (None, "SyzygyPath empty: no tablebases")


def test_wdl_and_dtz_of_known_positions(tables: Tables) -> None:
    assert tables.wdl(chess.Board(KQVK)) == 2
    assert tables.wdl(chess.Board(KQVK).mirror()) == 2  # the tables are colour-symmetric
    assert tables.wdl(chess.Board("8/8/8/8/8/8/3p4/1K4k1 b - - 0 1")) == 2
    assert tables.dtz(chess.Board(KQVK)) is not None
    hits = tables.hits
    assert tables.wdl(chess.Board()) is None and tables.hits == hits  # 32 pieces: not probed, not a hit


def test_a_won_root_keeps_only_winning_moves_of_the_least_dtz(tables: Tables) -> None:
    for fen in (KQVK, KRVK, KPVK_WIN):
        board = chess.Board(fen)
        probe = tables.root(board)
        assert probe is not None and probe.result == 1 and probe.dtz > 0, fen
        for move in probe.moves:
            board.push_uci(move)
            assert board.is_checkmate() or tables.wdl(board) == -2, (fen, move)
            assert board.is_checkmate() or board.halfmove_clock == 0 or tables.dtz(board) == -(probe.dtz - 1)
            board.pop()
        slower = [move for move in board.legal_moves if move.uci() not in probe.moves]
        assert slower, fen  # some winning moves are not kept: they zero later


def test_a_drawn_root_keeps_only_the_moves_that_hold(tables: Tables) -> None:
    board = chess.Board(KVKP_ONLY_KC2_HOLDS)
    assert tables.wdl(board) == 0 and board.legal_moves.count() == 5
    probe = tables.root(board)
    assert probe is not None and probe.moves == ("b1c2",) and probe.result == 0


def test_a_lost_root_resists_longest(tables: Tables) -> None:
    board = chess.Board(KQVK.replace(" w ", " b "))
    probe = tables.root(board)
    assert probe is not None and probe.result == -1
    # The winner's DTZ after each reply: the kept replies leave the winner farthest from zeroing.
    longest = max(tables.dtz(_after(board, move)) or 0 for move in board.legal_moves)
    assert all(tables.dtz(_after(board, chess.Move.from_uci(move))) == longest for move in probe.moves)


def _after(board: chess.Board, move: chess.Move) -> chess.Board:
    after = board.copy()
    after.push(move)
    return after


def test_the_fifty_move_rule_spoils_a_win_too_far_from_zeroing() -> None:
    # Stockfish's ranks: a win whose DTZ fits in the plies left ranks above one that does not, which ranks
    # above a draw; a loss the rule saves ranks above one it does not.
    assert rank_of(10, 0, False) == MAX_DTZ - 10
    assert rank_of(10, 95, False) == MAX_DTZ // 2 - 105 > 0
    assert rank_of(10, 0, True) < rank_of(10, 0, False)  # a repeated position: the win is not sure
    assert rank_of(-30, 50, False) > rank_of(-30, 0, False)


def test_the_root_is_not_probed_outside_the_tables(tables: Tables) -> None:
    assert tables.root(chess.Board()) is None
    assert tables.root(chess.Board("8/8/8/3k4/8/8/8/KQR5 w - - 0 1")) is None  # 4 pieces: no such table here


def test_adjudication_counts_the_fifty_move_rule(tables: Tables) -> None:
    won = chess.Board(KQVK)
    outcome = tables.outcome(won)
    assert outcome is not None and outcome.winner == chess.WHITE
    spoilt = chess.Board(KQVK.replace(" 0 1", " 99 80"))
    outcome = tables.outcome(spoilt)
    assert outcome is not None and outcome.winner is None
    drawn = tables.outcome(chess.Board(KVKP_ONLY_KC2_HOLDS))
    assert drawn is not None and drawn.winner is None
    assert tables.outcome(chess.Board()) is None


# --- a search leaf read back from its compact input ---------------------------------------------------------


def _planes(board: Board) -> tuple[np.ndarray, np.ndarray]:
    planes, scalars = new_batch(1)
    encode_board(board, planes, scalars)
    return planes, scalars


@pytest.mark.parametrize(("fen", "moves"), [
    (KQVK, []),
    (KQVK.replace(" w ", " b "), []),
    ("8/8/8/8/2p5/8/4k3/1K6 w - - 0 1", ["b1c2", "e2e3"]),
])
def test_a_leaf_reads_back_as_its_position_from_the_side_to_moves_view(fen: str, moves: list[str]) -> None:
    board = Board.from_moves(moves, fen)
    expected = chess.Board(fen)
    for move in moves:
        expected.push_uci(move)
    planes, _ = _planes(board)
    read = leaf_board(planes[0])
    oriented = expected if expected.turn == chess.WHITE else expected.mirror()
    assert read.board_fen() == oriented.board_fen() and read.turn == chess.WHITE


def test_an_en_passant_capture_is_seen_from_the_step_before() -> None:
    board = Board.from_moves(["d7d5"], "4k3/3p4/8/4P3/8/8/8/4K3 b - - 0 1")
    planes, _ = _planes(board)
    read = leaf_board(planes[0])
    assert read.ep_square == chess.D6 and read.has_legal_en_passant()
    quiet = leaf_board(_planes(Board.from_moves(["d7d6"], "4k3/3p4/8/4P3/8/8/8/4K3 b - - 0 1"))[0][0])
    assert quiet.ep_square is None


def test_leaves_the_tables_hold_take_their_result(tables: Tables) -> None:
    boards = [Board(KQVK), Board(KQVK.replace(" w ", " b ")), Board(KVKP_ONLY_KC2_HOLDS), Board()]
    planes, scalars = new_batch(len(boards))
    for row, board in enumerate(boards):
        encode_board(board, planes, scalars, row)
    network = np.full(len(boards), 0.25, dtype=np.float32)
    values = probe_leaves(tables, planes, scalars, network)
    assert values.tolist() == [1.0, -1.0, 0.0, 0.25]
    assert network.tolist() == [0.25] * 4  # the network's own array is left alone


# --- match adjudication --------------------------------------------------------------------------------------


def _opening(fen: str) -> Opening:
    return Opening(fen, [], fen, start_fen=fen)


def test_a_match_adjudicates_a_game_as_soon_as_the_tables_hold_it(tables: Tables, tmp_path: Path) -> None:
    # Four pieces against three-piece tables: random moves go on until a capture leaves three.
    openings = [_opening(KQVK), _opening("8/8/8/3k4/8/2n5/8/KQ6 w - - 0 1")]
    result = play_match(RandomAgent(1), RandomAgent(2), openings=openings, games=4, syzygy=tables, progress=False,
                        out_dir=tmp_path, match_id="tb")
    first = result.games[0]
    assert (first.result, first.termination, first.plies) == ("1-0", "tablebase", 0)
    for game in result.games[2:]:
        board = chess.Board(game.start_fen)
        for move in game.moves:
            board.push_uci(move)
        assert game.termination in ("tablebase", "checkmate", "stalemate", "insufficient_material")
        if game.termination == "tablebase":
            outcome = tables.outcome(board)
            assert outcome is not None and outcome.result() == game.result and len(board.piece_map()) == 3
    assert '[TerminationDetail "tablebase"]' in (tmp_path / "tb.pgn").read_text()
    assert '[Termination "adjudication"]' in (tmp_path / "tb.pgn").read_text()


def test_a_match_without_tables_plays_the_ending_out() -> None:
    result = play_match(RandomAgent(1), RandomAgent(2), openings=[_opening(KQVK)], games=2, ply_limit=20,
                        progress=False)
    assert all(game.termination != "tablebase" and game.plies > 0 for game in result.games)


def test_match_refuses_a_syzygy_path_without_tables_in_one_line(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "alphazero", "match", "random", "vs", "random", "--games", "2",
                          "--run", str(tmp_path / "run"), "--syzygy", str(tmp_path), "--no-progress"],
                         cwd=ROOT, env=repo_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert run.stderr.strip() == f"alphazero match: error: no Syzygy tables (*.rtbw) in {str(tmp_path)!r}"
