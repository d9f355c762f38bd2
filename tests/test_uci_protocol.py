"""The engine keeps UCI's bargain with a GUI whatever it is sent: one `bestmove` for every `go`, in order, never a
move of a position other than the one the GUI gave, and `go infinite` or `go ponder` answered only after `stop` or
`ponderhit`. python-chess is the reference for the positions' legal moves."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import chess
import pytest

from alphazero.errors import UserError
from eval.uci import UciEngine
from eval.uci_go import MAX_DEPTH, parse_go

MATED = "7k/6Q1/6K1/8/8/8/8/8 b - - 0 1"
STALEMATE = "7k/5Q2/6K1/8/8/8/8/8 b - - 0 1"
AFTER_E4 = chess.Board("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1")


def _engine(weights: Path) -> tuple[UciEngine, io.StringIO]:
    out = io.StringIO()
    return UciEngine(None, weights, "cpu", threads=1, stdin=io.StringIO(""), stdout=out), out


def _bestmoves(out: io.StringIO) -> list[str]:
    return [line.split()[1] for line in out.getvalue().splitlines() if line.startswith("bestmove")]


@pytest.mark.parametrize("refused", [
    "position fen r3k2r/8/8/8/8/8/8/R3K2R w HAha - 0 1",  # castling rights no standard FEN has
    "position fen 7k/8/8/8/8/8/8/K6R w - - 0 1",  # the side not to move is in check
    "position fen 8/8/8/8/8/8/8/8 w - - 0 1",  # no kings
    "position startpos moves e2e4 e2e4",  # a move that is not legal there
    "position startpos moves e2e4 0000 d7d5",  # a null move (no standard game has one)
    "position",
])
def test_a_refused_position_is_not_searched_and_the_next_good_one_is(weights: Path, refused: str) -> None:
    engine, out = _engine(weights)
    engine.handle("position startpos moves e2e4")
    engine.handle(refused)
    engine.handle("go nodes 4")
    engine.wait()
    # Not a move of the position before (e7e5 after e2e4, which the GUI no longer means): no move at all.
    assert _bestmoves(out) == ["0000"]
    assert "info string no position to search: " in out.getvalue()
    engine.handle("position startpos moves e2e4")
    engine.handle("go nodes 4")
    engine.wait()
    assert chess.Move.from_uci(_bestmoves(out)[-1]) in AFTER_E4.legal_moves
    engine.handle(refused)
    engine.handle("ucinewgame")  # a new game starts from the start position
    engine.handle("go nodes 4")
    engine.wait()
    assert chess.Move.from_uci(_bestmoves(out)[-1]) in chess.Board().legal_moves


@pytest.mark.parametrize("fen, go, release", [
    (MATED, "go infinite", "stop"),
    (STALEMATE, "go ponder", "ponderhit"),
    (STALEMATE, "go ponder wtime 1000 btime 1000", "stop"),
    ("8/8/8/8/8/8/8/8 w - - 0 1", "go infinite", "stop"),  # a refused position
])
def test_infinite_and_ponder_without_a_move_answer_after_stop_or_ponderhit(weights: Path, fen: str, go: str,
                                                                          release: str) -> None:
    engine, out = _engine(weights)
    engine.handle(f"position fen {fen}")
    engine.handle(go)
    engine.handle("isready")
    assert engine.searching() and out.getvalue().splitlines()[-1] == "readyok"
    assert _bestmoves(out) == []
    engine.handle(release)
    engine.wait()
    assert _bestmoves(out) == ["0000"] and not engine.searching()


def test_every_go_gets_its_own_bestmove_in_order(weights: Path) -> None:
    engine, out = _engine(weights)
    engine.handle("position startpos")
    engine.handle("go nodes 64")
    engine.handle("position startpos moves e2e4")
    engine.handle("go nodes 4")  # before the first bestmove, if the search is still running: it runs to its nodes
    engine.wait()
    first, second = _bestmoves(out)
    assert chess.Move.from_uci(first) in chess.Board().legal_moves
    assert chess.Move.from_uci(second) in AFTER_E4.legal_moves
    # A search only `stop` ends is stopped by the next go (waiting for it would never end).
    for waiting in ("go infinite", "go ponder", "go ponder wtime 5000 btime 5000"):
        engine.handle("position startpos")
        engine.handle(waiting)
        engine.handle("position startpos moves e2e4")
        engine.handle("go nodes 4")
        engine.wait()
        *_, stopped, answered = _bestmoves(out)
        assert chess.Move.from_uci(stopped) in chess.Board().legal_moves
        assert chess.Move.from_uci(answered) in AFTER_E4.legal_moves
    assert len(_bestmoves(out)) == 2 + 2 * 3
    assert "go ignored" not in out.getvalue()


def test_a_depth_beyond_any_line_is_taken_as_no_cap(weights: Path) -> None:
    assert parse_go(["depth", str(10**11)]).depth == MAX_DEPTH
    engine, out = _engine(weights)
    engine.handle("position startpos")
    engine.handle(f"go depth {10**11} nodes 8")
    engine.wait()
    assert chess.Move.from_uci(_bestmoves(out)[0]) in chess.Board().legal_moves
    assert "search failed" not in out.getvalue()


def test_a_weights_file_that_is_no_model_is_refused_before_the_first_go(weights: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pt"
    junk.write_bytes(bytes(range(256)) * 20)
    truncated = tmp_path / "truncated.pt"
    truncated.write_bytes(weights.read_bytes()[:-100])
    assert not zipfile.is_zipfile(truncated)
    for bad in (junk, truncated):
        with pytest.raises(UserError, match="not a complete torch archive"):
            UciEngine(None, bad, "cpu", stdin=io.StringIO(""), stdout=io.StringIO())
    engine, out = _engine(weights)
    engine.handle(f"setoption name Weights value {junk}")
    assert engine.values["Weights"] == str(weights)
    assert f"info string ignored Weights, kept '{weights}'" in out.getvalue()


def _first_moves_of_last_report(out: io.StringIO) -> set[str]:
    """The first move of each `multipv` line of the last search's report (its last lines before bestmove)."""
    lines = out.getvalue().splitlines()
    last = max(i for i, line in enumerate(lines) if line.startswith("bestmove"))
    report = []
    for line in reversed(lines[:last]):
        if not line.startswith("info depth"):
            break
        report.append(line)
    return {line.split(" pv ")[1].split()[0] for line in report}


def test_searchmoves_limits_the_search_to_the_legal_moves_it_names(weights: Path) -> None:
    engine, out = _engine(weights)
    engine.handle("setoption name MultiPV value 5")
    engine.handle("position fen 3q3k/8/2N5/8/8/8/8/6K1 w - - 0 1")
    engine.handle("go nodes 64 searchmoves g1f2 c6e5 e2e4 g1h2")
    engine.wait()
    assert "info string go searchmoves: ignored 'e2e4' (not legal here)" in out.getvalue()
    assert _bestmoves(out)[-1] in {"g1f2", "c6e5", "g1h2"}
    assert _first_moves_of_last_report(out) == {"g1f2", "c6e5", "g1h2"}
    # The next search is not limited, and keeps nothing of the limited tree.
    engine.handle("go nodes 64")
    engine.wait()
    board = chess.Board("3q3k/8/2N5/8/8/8/8/6K1 w - - 0 1")
    first = _first_moves_of_last_report(out)
    assert len(first) == 5 and all(chess.Move.from_uci(move) in board.legal_moves for move in first)
    # None legal: every move is searched, and said so.
    engine.handle("go nodes 16 searchmoves a1a2")
    engine.wait()
    assert "info string go searchmoves: no legal move left; searching every move" in out.getvalue()
    assert chess.Move.from_uci(_bestmoves(out)[-1]) in board.legal_moves
