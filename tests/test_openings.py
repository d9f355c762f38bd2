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


def test_a_binary_file_is_a_user_error(tmp_path: Path) -> None:
    binary = tmp_path / "book.pgn"
    binary.write_bytes(bytes(range(128, 256)) * 8)
    with pytest.raises(UserError, match="is not a text file"):
        load_openings(binary)


def test_parse_opening() -> None:
    opening = parse_opening("Petrov | e4 e5 Nf3 Nf6")
    assert opening.name == "Petrov"
    assert parse_opening("Petrov | 1. e4 e5 2. Nf3 Nf6").moves == opening.moves
    assert opening.fen_after == "rnbqkb1r/pppp1ppp/5n2/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3"


# An EPD book: a position a line, named by `id` or by its line number.
EPD_BOOK = (
    'rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - id "Open game";\n'
    "\n"
    "r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq -\n"
)
PGN_BOOK = (
    '[Event "book"]\n[Opening "Italian"]\n\n1. e4 e5 2. Nf3 Nc6 3. Bc4 *\n\n'
    '[Event "book"]\n[FEN "4k3/8/8/8/8/8/4P3/4K3 w - - 0 1"]\n[SetUp "1"]\n\n1. Kd2 Kd7 *\n'
)


def test_an_epd_book_starts_games_from_its_positions(tmp_path: Path) -> None:
    path = tmp_path / "book.epd"
    path.write_text(EPD_BOOK)
    book = load_openings(path)
    assert [o.name for o in book] == ["Open game", "EPD line 3"]
    for opening, line in zip(book, [line for line in EPD_BOOK.splitlines() if line], strict=True):
        expected, _ = chess.Board.from_epd(line)  # python-chess as the oracle
        assert opening.board().fen() == expected.fen() == opening.start_fen and opening.moves == []
    path.write_text(EPD_BOOK + "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - id \"Open game\";\n")
    with pytest.raises(OpeningError, match=r"line 4: .*same name as line 1"):
        load_openings(path)
    path.write_text(EPD_BOOK + "not a position at all\n")
    with pytest.raises(OpeningError, match="line 4"):
        load_openings(path)


def test_a_pgn_book_gives_each_games_line_from_its_start(tmp_path: Path) -> None:
    path = tmp_path / "book.pgn"
    path.write_text(PGN_BOOK)
    italian, ending = load_openings(path)
    assert (italian.name, ending.name) == ("Italian", "book")
    assert [m.uci() for m in italian.moves] == ["e2e4", "e7e5", "g1f3", "b8c6", "f1c4"]
    assert ending.start_fen == "4k3/8/8/8/8/8/4P3/4K3 w - - 0 1" and ending.board().fen() == ending.fen_after
    assert [m.uci() for m in ending.board().move_stack] == ["e1d2", "e8d7"]
    path.write_text(PGN_BOOK + '\n[Event "book"]\n\n1. e4 e5 2. Ke3 *\n')
    with pytest.raises(OpeningError, match="game 3"):
        load_openings(path)


def test_a_random_order_is_a_seeded_shuffle_of_the_book() -> None:
    from eval.openings import ordered_openings

    suite = load_openings()
    shuffled = ordered_openings(suite, "random", 7)
    assert shuffled == ordered_openings(suite, "random", 7) != suite
    assert sorted(o.name for o in shuffled) == sorted(o.name for o in suite)
    assert ordered_openings(suite, "sequential", 7) == suite
    with pytest.raises(UserError, match="order"):
        ordered_openings(suite, "backwards", 0)


def test_a_match_from_an_epd_book_records_the_start_in_json_and_pgn(tmp_path: Path, capsys) -> None:
    import json

    import chess.pgn

    from alphazero.app.cli import main

    book = tmp_path / "book.epd"
    book.write_text(EPD_BOOK)
    run = tmp_path / "run"
    assert main(["match", "random", "vs", "random:seed=1", "--games", "4", "--run", str(run), "--openings",
                 str(book), "--ply-limit", "12", "--no-progress"]) == 0
    records = [json.loads(line) for path in (run / "eval").glob("*.jsonl") for line in path.read_text().splitlines()]
    assert sorted(r["opening"] for r in records) == ["EPD line 3", "EPD line 3", "Open game", "Open game"]
    with next((run / "games").glob("*.pgn")).open() as handle:
        for record in records:
            game = chess.pgn.read_game(handle)
            assert game is not None and not game.errors
            assert game.board().fen() == record["start_fen"]  # python-chess replays it from the book's position
            assert [m.uci() for m in game.mainline_moves()] == record["moves"]
    assert main(["match", "random", "vs", "random", "--run", str(run), "--openings", str(tmp_path / "no.epd")]) == 2
    assert "cannot read the opening file" in capsys.readouterr().err


def test_a_book_made_twice_with_one_seed_is_the_same_and_loads_as_balanced_lines(tmp_path: Path) -> None:
    from alphazero.app.cli import main
    from tests.helpers import stockfish_or_skip

    stockfish_or_skip()
    quick = ["--lines", "3", "--plies", "4", "--pick-nodes", "1000", "--judge-nodes", "2000", "--no-progress"]
    for name in ("a.pgn", "b.pgn"):
        assert main(["book", str(tmp_path / name), *quick]) == 0
    assert (tmp_path / "a.pgn").read_text() == (tmp_path / "b.pgn").read_text()
    assert main(["book", str(tmp_path / "c.pgn"), *quick, "--seed", "1"]) == 0
    assert (tmp_path / "c.pgn").read_text() != (tmp_path / "a.pgn").read_text()
    book = load_openings(tmp_path / "a.pgn")
    assert [o.name for o in book] == ["balanced 001", "balanced 002", "balanced 003"]
    assert len({o.fen_after for o in book}) == 3 and all(len(o.moves) == 4 for o in book)
    import chess.pgn

    with (tmp_path / "a.pgn").open() as handle:
        while (game := chess.pgn.read_game(handle)) is not None:
            assert abs(float(game.headers["BookEval"])) <= 0.40  # within --max-cp 40 of even


def test_the_shipped_book_gives_400_distinct_balanced_lines() -> None:
    book = load_openings(Path(eval.openings.__file__).with_name("books") / "balanced-400.pgn")
    assert len(book) == 400 and len({o.fen_after for o in book}) == 400
    assert all(len(o.moves) == 8 and not o.board().is_game_over(claim_draw=True) for o in book)
