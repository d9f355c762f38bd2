"""`alphazero puzzles` and `alphazero epd`: Lichess puzzles and EPD test suites, checked with python-chess."""

from __future__ import annotations

import csv
import json
from collections.abc import Sequence
from pathlib import Path

import chess
import pytest

from alphazero.app.cli import main
from alphazero.errors import UserError
from eval.agents import Agent, Choice
from eval.epd import read_epd, score_epd
from eval.puzzles import read_puzzles, solve_puzzles
from tests.helpers import ROOT, stockfish_or_skip

HEADER = "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags\n"
# Black's a7a6, then White mates on the back rank: Rd8 (the solution) and Re8 both mate.
MATE_IN_ONE = "m1,6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1,a7a6 d1d8,900,75,90,100,mateIn1,,\n"
# The opponent's move, then the solver's, the opponent's reply and the solver's again.
THREE_MOVES = f"t3,{chess.STARTING_FEN},e2e4 e7e5 g1f3 b8c6,1650,75,90,100,opening,,\n"


class Scripted(Agent):
    """Plays the move its script gives for a position (by FEN), else the first legal one."""

    def __init__(self, script: dict[str, str]) -> None:
        super().__init__("scripted")
        self.script = script

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        return [Choice(chess.Move.from_uci(self.script[b.fen()]) if b.fen() in self.script
                       else next(iter(b.legal_moves)), None) for b in boards]


def _fen_after(fen: str, *moves: str) -> str:
    board = chess.Board(fen)
    for move in moves:
        board.push_uci(move)
    return board.fen()


def test_any_mate_solves_a_mate_in_one_and_every_move_must_match_otherwise(tmp_path: Path) -> None:
    path = tmp_path / "puzzles.csv"
    path.write_text(HEADER + MATE_IN_ONE + THREE_MOVES)
    puzzles = read_puzzles(path)
    mate_position = _fen_after("6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1", "a7a6")
    other_mate = chess.Board(mate_position)
    other_mate.push_uci("e1e8")
    assert other_mate.is_checkmate()  # python-chess agrees: the other rook mates too
    start = chess.STARTING_FEN
    solver = Scripted({mate_position: "e1e8", _fen_after(start, "e2e4"): "e7e5",
                       _fen_after(start, "e2e4", "e7e5", "g1f3"): "b8c6"})
    report = solve_puzzles(solver, puzzles, concurrency=2)
    assert [(r.puzzle_id, r.solved, r.played) for r in report.results] == [
        ("m1", True, ["e1e8"]), ("t3", True, ["e7e5", "b8c6"])]
    wrong = Scripted({_fen_after(start, "e2e4"): "e7e5", _fen_after(start, "e2e4", "e7e5", "g1f3"): "g8f6"})
    failed = solve_puzzles(wrong, puzzles[1:])
    assert failed.results[0].solved is False and failed.results[0].played == ["e7e5", "g8f6"]
    # Buckets of 200 rating points, as ChessBench's figure.
    assert [(b.low, b.solved, b.total) for b in report.buckets()] == [(800, 1, 1), (1600, 1, 1)]
    assert read_puzzles(path, rating_range=(1000, 2000)) == puzzles[1:] and len(read_puzzles(path, limit=1)) == 1


@pytest.mark.parametrize(("text", "message"), [
    ("PuzzleId,FEN,Rating\nx,8/8/8/8/8/8/8/8 w - - 0 1,1500\n", "lacks Moves"),
    (HEADER + MATE_IN_ONE + "bad,6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1,a7a6 d1d9,900,,,,,,\n", "line 3"),
    (HEADER + "ill,6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1,a7a6 e2e4,900,,,,,,\n", "move 2 'e2e4' is illegal"),
    (HEADER, "holds no puzzles"),
    (HEADER + "short,6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1\n", "line 2 .*too few fields: no Moves, Rating"),
    (HEADER + "x,6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1,a7a6 d1d8,high,,,,,,\n", "rating 'high' is not a whole"),
])
def test_bad_puzzle_files_are_refused_with_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(UserError, match=message):
        read_puzzles(path)


EPD = (
    # bm: the back-rank mate; am: do not take the poisoned pawn
    '6k1/p4ppp/8/8/8/8/8/3RR1K1 w - - bm Rd8#; id "mates.001";\n'
    'rnbqkbnr/ppp2ppp/8/3pp3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - am Nxe5; id "mates.002";\n'
    # points as STS writes them: c0 with SAN, and c8/c9 with UCI
    'r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - bm Bb5; c0 "Bb5=10, Bc4=7, d4=5"; '
    'id "STS(v1.0) Open.001";\n'
    'r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - bm Bb5; c8 "10 7"; c9 "f1b5 f1c4"; '
    'id "STS(v1.0) Open.002";\n'
)


def test_epd_suites_score_bm_am_and_sts_points_per_theme(tmp_path: Path) -> None:
    path = tmp_path / "suite.epd"
    path.write_text(EPD)
    positions = read_epd(path)
    assert [p.theme for p in positions] == ["mates", "mates", "STS(v1.0) Open", "STS(v1.0) Open"]
    boards = [chess.Board.from_epd(line)[0] for line in EPD.splitlines()]  # python-chess as the oracle
    answers = {boards[0].fen(): "e1e8", boards[1].fen(): "d2d3", boards[2].fen(): "f1c4"}
    report = score_epd(Scripted(answers), positions, concurrency=3)
    # Re8 also mates, but bm names Rd8: not found. Not taking on e5: found. Bc4 scores 7 of 10, read from
    # c0 (SAN) in the third position and from c8/c9 (UCI) in the fourth, the same position.
    assert [(r.found, r.points, r.max_points) for r in report.results] == [
        (False, 0, 1), (True, 1, 1), (False, 7, 10), (False, 7, 10)]
    themes = {t.name: (t.points, t.max_points, t.found, t.total) for t in report.themes()}
    assert themes == {"mates": (1, 2, 1, 2), "STS(v1.0) Open": (14, 20, 0, 2)}
    assert (report.points, report.max_points, report.found, report.total) == (15, 22, 1, 4)
    unlisted = score_epd(Scripted({}), positions[3:])  # the first legal move: not in c9, so 0 points
    assert (unlisted.points, unlisted.results[0].found) == (0, False)


@pytest.mark.parametrize(("line", "message"), [
    ("6k1/p4ppp/8/8/8/8/8/3RR1K1 w - - bm Rd9;", "line 2"),
    ("6k1/p4ppp/8/8/8/8/8/3RR1K1 w - - id \"nothing\";", "nothing to score"),
    ('6k1/p4ppp/8/8/8/8/8/3RR1K1 w - - c0 "Rd8=ten";', "not MOVE=POINTS"),
])
def test_a_malformed_epd_line_is_named_by_its_number(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "bad.epd"
    path.write_text(EPD.splitlines()[0] + "\n" + line + "\n")
    with pytest.raises(UserError, match=message) as info:
        read_epd(path)
    assert "line 2" in str(info.value)


def test_both_commands_run_a_uci_player_and_write_json(tmp_path: Path, capsys) -> None:
    puzzles, suite = tmp_path / "puzzles.csv", tmp_path / "suite.epd"
    puzzles.write_text(HEADER + MATE_IN_ONE)
    suite.write_text(EPD)
    out = tmp_path / "puzzles.json"
    assert main(["puzzles", str(puzzles), "--player", "uci:weights=builtin,device=cpu", "--nodes", "32",
                 "--json", str(out), "--no-progress"]) == 0
    summary = json.loads(out.read_text())
    assert (summary["solved"], summary["total"]) == (1, 1) and summary["buckets"][0]["low"] == 800
    out = tmp_path / "epd.json"
    assert main(["epd", str(suite), "--player", "uci:weights=builtin,device=cpu", "--nodes", "32", "--limit", "2",
                 "--json", str(out), "--no-progress"]) == 0
    summary = json.loads(out.read_text())
    assert summary["total"] == 2 and summary["positions"][0]["move"] in {"d1d8", "e1e8"}
    assert "all" in capsys.readouterr().out
    # Bad input: one line and exit status 2.
    assert main(["puzzles", str(tmp_path / "missing.csv")]) == 2
    assert main(["epd", str(suite), "--player", "policy", "--movetime", "100"]) == 2
    err = capsys.readouterr().err
    assert "cannot read the puzzle file" in err and "takes no --movetime budget" in err



def test_a_malformed_line_costs_that_line_only(tmp_path: Path, capsys) -> None:
    """The commands skip a bad line, say it on stderr with its number, list it in the JSON, play the rest, and
    exit with status 2."""
    puzzles, suite = tmp_path / "puzzles.csv", tmp_path / "suite.epd"
    bad_puzzle = "bad,6k1/p4ppp/8/8/8/8/8/3RR1K1 b - - 0 1,a7a6 d1d9,900,,,,,,\n"
    puzzles.write_text(HEADER + MATE_IN_ONE + bad_puzzle + MATE_IN_ONE.replace("m1,", "m2,", 1))
    lines = EPD.splitlines()
    suite.write_text("\n".join([lines[0], "6k1/p4ppp/8/8/8/8/8/3RR1K1 w - - bm Rd9;", *lines[1:]]) + "\n")
    rejected: list[str] = []
    assert len(read_puzzles(puzzles, on_reject=rejected.append)) == 2 and "line 3" in rejected[0]
    out = tmp_path / "puzzles.json"
    assert main(["puzzles", str(puzzles), "--player", "random", "--json", str(out), "--no-progress"]) == 2
    summary = json.loads(out.read_text())
    assert summary["total"] == 2 and len(summary["rejected"]) == 1 and "line 3" in summary["rejected"][0]
    out = tmp_path / "epd.json"
    assert main(["epd", str(suite), "--player", "random", "--json", str(out), "--no-progress"]) == 2
    summary = json.loads(out.read_text())
    assert summary["total"] == 4 and len(summary["rejected"]) == 1 and "line 2" in summary["rejected"][0]
    err = capsys.readouterr().err
    assert "skipped:" in err and "line 3" in err and "line 2" in err and "1 malformed line skipped" in err


def test_chessbench_puzzles_give_the_game_as_pgn(tmp_path: Path) -> None:
    """ChessBench's puzzles.csv has PGN (the game up to the puzzle), Moves and Rating, no FEN nor PuzzleId."""
    path = tmp_path / "chessbench.csv"
    game = "1. e4 e5 2. Bc4 Nc6 3. Qh5"
    path.write_text(f'PGN,Moves,Rating\n"{game}",g8f6 h5f7,600\n')
    [puzzle] = read_puzzles(path)
    board = chess.Board()
    for san in ("e4", "e5", "Bc4", "Nc6", "Qh5"):  # python-chess as the oracle
        board.push_san(san)
    assert (puzzle.puzzle_id, puzzle.fen, puzzle.rating) == ("0", board.fen(), 600)
    report = solve_puzzles(Scripted({puzzle.start().fen(): "h5f7"}), [puzzle])
    assert report.solved == 1

def test_the_shipped_puzzles_and_sts_load_whole() -> None:
    data = Path(__file__).resolve().parents[1] / "eval" / "data"
    puzzles = read_puzzles(data / "lichess_puzzles_sample.csv")
    assert len(puzzles) == 1027 and len({p.puzzle_id for p in puzzles}) == 1027
    assert min(p.rating for p in puzzles) < 800 and max(p.rating for p in puzzles) > 2400
    sts = read_epd(data / "sts.epd")
    assert len(sts) == 1500 and sum(p.max_points for p in sts) == 15_000
    assert sts[0].name == "STS(v1.0) Undermine.001" and sts[0].theme == "STS(v1.0) Undermine"


def test_a_budget_goes_to_the_option_each_player_takes_it_by() -> None:
    from eval.agents import with_budget

    assert with_budget("search", nodes=64) == "search:sims=64"
    assert with_budget("uci:weights=builtin", movetime=100) == "uci:weights=builtin,movetime=100"
    assert with_budget("stockfish:elo=1500", nodes=1000) == "stockfish:elo=1500,nodes=1000"
    assert with_budget("policy") == "policy"  # no budget asked: the spec as it is
    with pytest.raises(UserError, match="already sets its sims"):
        with_budget("search:400", nodes=64)  # the bare 400 is search's simulations
    with pytest.raises(UserError, match="takes no --movetime budget"):
        with_budget("search", movetime=100)


# --- each position a new game: the order and --concurrency change no answer ---------------------------------

DATA = ROOT / "eval" / "data"


def _sts(count: int) -> list[str]:
    """The Strategic Test Suite's first ``count`` lines."""
    return (DATA / "sts.epd").read_text().splitlines()[:count]


def _puzzle_rows(count: int, *, lowest: int = 0, moves: int = 2) -> tuple[list[str], list[list[str]]]:
    """The header and the first ``count`` rows of the shipped Lichess sample rated ``lowest`` or more whose
    solution has ``moves`` moves or more (the opponent's first)."""
    with (DATA / "lichess_puzzles_sample.csv").open(newline="") as file:
        reader = csv.reader(file)
        header = next(reader)
        rating, solution = header.index("Rating"), header.index("Moves")
        return header, [row for row in reader
                        if int(row[rating]) >= lowest and len(row[solution].split()) >= moves][:count]


def _write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with path.open("w", newline="") as file:
        csv.writer(file).writerows([header, *rows])
    return path


def _answers(command: str, path: Path, player: str, concurrency: int, out: Path) -> dict[str, object]:
    """Runs `alphazero epd|puzzles` and returns each item's answer from its JSON: (move, points) of a position,
    (solved, moves played) of a puzzle."""
    assert main([command, str(path), "--player", player, "--concurrency", str(concurrency), "--json", str(out),
                 "--no-progress"]) == 0
    summary = json.loads(out.read_text())
    if command == "epd":
        return {row["name"]: (row["move"], row["points"]) for row in summary["positions"]}
    return {row["puzzle_id"]: (row["solved"], row["played"]) for row in summary["puzzles"]}


def test_stockfish_answers_each_position_as_a_new_game(tmp_path: Path) -> None:
    """Issue 49: Stockfish's hash carried over from position to position, so STS points moved with the order and
    --concurrency (586 against 620 on the first 100 positions at depth 6). Two engines: --concurrency 2 spreads
    the positions over both, --concurrency 1 gives them all to the first."""
    stockfish_or_skip()
    player = "stockfish:depth=6,processes=2"
    suite, backwards = tmp_path / "sts.epd", tmp_path / "backwards.epd"
    lines = _sts(12)
    suite.write_text("\n".join(lines) + "\n")
    backwards.write_text("\n".join(reversed(lines)) + "\n")
    header, rows = _puzzle_rows(12, lowest=1800)  # hard enough that the engine's state can change a move
    puzzles = _write_csv(tmp_path / "puzzles.csv", header, rows)
    puzzles_backwards = _write_csv(tmp_path / "backwards.csv", header, rows[::-1])
    for command, forwards, reverse in (("epd", suite, backwards), ("puzzles", puzzles, puzzles_backwards)):
        one = _answers(command, forwards, player, 1, tmp_path / "one.json")
        assert len(one) == 12
        assert _answers(command, forwards, player, 2, tmp_path / "two.json") == one, command
        assert _answers(command, reverse, player, 1, tmp_path / "reversed.json") == one, command


class Recorder(Agent):
    """Passes the yardsticks' questions to ``agent`` and keeps each answer whole, by the game that led to the
    position: the move, line, nodes and visits in ``answers``, the value and Q in ``values``."""

    def __init__(self, agent: Agent) -> None:
        super().__init__(agent.name)
        self.agent = agent
        self.answers: dict[str, tuple[object, ...]] = {}
        self.values: dict[str, float] = {}

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        raise AssertionError("the yardsticks ask for fresh games (choose_fresh)")

    def choose_fresh(self, boards: Sequence[chess.Board]) -> list[Choice]:
        choices = self.agent.choose_fresh(boards)
        for board, choice in zip(boards, choices, strict=True):
            game = " ".join([board.root().fen(), *(move.uci() for move in board.move_stack)])
            info = choice.info
            self.answers[game] = (choice.move.uci(), info["pv"], info["nodes"], info["visits"])
            self.values[f"{game} value"], self.values[f"{game} q"] = float(choice.value or 0.0), info["q"]
        return choices


@pytest.mark.usefixtures("one_torch_thread")
def test_our_search_answers_each_position_alike_whatever_the_order_and_concurrency(tmp_path: Path) -> None:
    """The network's search starts every position from an empty tree: one agent, asked in any order and any
    number at once, gives each position, and each move of a puzzle, the same answer, visits included (a tree
    kept from the puzzle's move before would add some). The search is noiseless: no seed enters. Values agree
    to rounding only: the network's batches differ in size."""
    from eval.agents import parse_player

    suite = tmp_path / "sts.epd"
    suite.write_text("\n".join(_sts(12)) + "\n")
    positions = read_epd(suite)
    header, rows = _puzzle_rows(12, moves=4)  # easy ones of two moves or more: some get past their first move
    puzzles = read_puzzles(_write_csv(tmp_path / "puzzles.csv", header, rows))
    with parse_player("search:sims=16,algorithm=puct,weights=builtin,device=cpu") as search:
        def answers(concurrency: int, order: int) -> Recorder:
            player = Recorder(search)
            score_epd(player, positions[::order], concurrency=concurrency)
            solve_puzzles(player, puzzles[::order], concurrency=concurrency)
            return player

        one = answers(1, 1)
        assert len(one.answers) > len(positions) + len(puzzles)  # some puzzles went past their first move
        for other in (answers(3, 1), answers(4, -1)):
            assert other.answers == one.answers
            assert other.values == pytest.approx(one.values, abs=1e-4)
