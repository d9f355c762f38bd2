"""The packaged opening suite and the opening-file parser."""

from __future__ import annotations

from pathlib import Path

import chess
import pytest

import eval.openings
from alphazero.errors import UserError
from eval.openings import OpeningError, load_openings, parse_opening


def test_suite_loads_and_is_sound() -> None:
    suite = load_openings()
    assert 30 <= len(suite) <= 50
    assert len({o.name for o in suite}) == len(suite)
    assert len({tuple(o.moves) for o in suite}) == len(suite)
    assert len({o.fen_after for o in suite}) == len(suite)
    for opening in suite:
        assert 4 <= len(opening.moves) <= 10, opening.name
        board = chess.Board()
        for move in opening.moves:
            assert board.is_legal(move), (opening.name, move)
            board.push(move)
        assert board.fen() == opening.fen_after
        assert not board.is_game_over(claim_draw=True), opening.name
        assert opening.board().move_stack == opening.moves


def test_suite_file_is_package_data() -> None:
    assert Path(eval.openings.__file__).with_name("openings.txt").is_file()


def test_explicit_path_comments_and_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "book.txt"
    path.write_text("# a comment\n\nScotch | e4 e5 Nf3 Nc6 d4   # trailing comment\nEnglish | c4 e5\n")
    suite = load_openings(path)
    assert [o.name for o in suite] == ["Scotch", "English"]
    assert [m.uci() for m in suite[1].moves] == ["c2c4", "e7e5"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Good | e4 e5\nBad Line | e4 e5 Ke3\n", ["line 2", "Bad Line", "'Ke3'", "ply 3"]),
        ("No separator e4 e5\n", ["line 1", "expected 'Name | SAN moves'"]),
        ("Nameless | \n", ["line 1", "expected"]),
        ("A | e4 e5\nB | e4 e5\n", ["line 2", "same move sequence as line 1"]),
        ("A | e4 e5\nA | d4 d5\n", ["line 2", "same name as line 1"]),
        ("Fool's mate | f3 e5 g4 Qh4\n", ["line 1", "ends the game"]),
        ("# nothing\n", ["holds no openings"]),
    ],
)
def test_bad_files_raise_naming_the_line(tmp_path: Path, text: str, expected: list[str]) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(OpeningError) as info:
        load_openings(path)
    assert str(path) in str(info.value)
    for fragment in expected:
        assert fragment in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, UserError)


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="cannot read the opening file"):
        load_openings(tmp_path / "absent.txt")


def test_parse_opening() -> None:
    opening = parse_opening("Petrov | e4 e5 Nf3 Nf6")
    assert opening.name == "Petrov"
    assert parse_opening("Petrov | 1. e4 e5 2. Nf3 Nf6").moves == opening.moves
    assert opening.fen_after == "rnbqkb1r/pppp1ppp/5n2/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3"
