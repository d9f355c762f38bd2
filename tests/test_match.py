"""The match runner, the agents and player specs (Stockfish tests need the binary)."""

from __future__ import annotations

import io
import json
import random
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import chess
import chess.engine
import chess.pgn
import pytest

import eval.agents as agents_module
from alphazero.errors import UserError
from eval.agents import Agent, Choice, RandomAgent, StockfishAgent, parse_player, register_player, split_spec
from eval.match import (
    AgentContractError,
    Clock,
    GameRecord,
    IllegalAgentMoveError,
    MatchResult,
    _Game,
    _Rules,
    board_outcome,
    format_summary,
    play_match,
)
from eval.openings import load_openings
from tests.helpers import REQUIRE_ENV, ROOT, fail_writes_under, stockfish_or_skip


@pytest.fixture
def stockfish_path() -> str:
    return stockfish_or_skip()


class ScriptedAgent(Agent):
    """Plays random legal moves and reports a fixed value per colour; counts its calls."""

    def __init__(self, name: str, white_value: float | None, black_value: float | None, seed: int = 0) -> None:
        super().__init__(name)
        self.values = {chess.WHITE: white_value, chess.BLACK: black_value}
        self.rng = random.Random(seed)
        self.batches: list[int] = []
        self.new_games = 0

    def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
        self.batches.append(len(boards))
        return [Choice(self.rng.choice(list(b.legal_moves)), self.values[b.turn]) for b in boards]

    def new_game(self) -> None:
        self.new_games += 1


# --- matches between random agents ---------------------------------------------------


def _read_pgn(path: Path) -> list[chess.pgn.Game]:
    games = []
    with open(path, encoding="utf-8") as f:
        while (game := chess.pgn.read_game(f)) is not None:
            assert not game.errors, game.errors
            games.append(game)
    return games


# The game ends a match applies, as python-chess predicates on the position on the board
# (the rules of self-play and search: a draw one legal move away is not an end).
RULE_ENDS: dict[str, Callable[[chess.Board], bool]] = {
    "checkmate": chess.Board.is_checkmate,
    "insufficient_material": chess.Board.is_insufficient_material,
    "stalemate": chess.Board.is_stalemate,
    "fifty_moves": chess.Board.is_fifty_moves,
    "threefold_repetition": lambda board: board.is_repetition(3),
}


def _check_replay(game: chess.pgn.Game, record: GameRecord) -> None:
    """Replays a PGN game and checks it against the record and the rules."""
    board = game.end().board()
    assert [m.uci() for m in board.move_stack] == record.moves
    assert game.headers["Result"] == record.result
    assert game.headers["TerminationDetail"] == record.termination  # the one custom tag, as in self-play
    assert game.headers["Termination"] == ("adjudication" if record.termination == "ply_limit" else "normal")
    assert game.headers["PlyCount"] == str(record.plies)
    replay = game.board()
    for move in board.move_stack:
        assert not any(ends(replay) for ends in RULE_ENDS.values()), f"the game went on after its end: {replay.fen()}"
        replay.push(move)
    ended_by = [name for name, ends in RULE_ENDS.items() if ends(board)]
    if record.termination in ("ply_limit", "resignation"):
        assert not ended_by
        assert (record.result == "1/2-1/2") == (record.termination == "ply_limit")
    else:
        assert ended_by[0] == record.termination  # the first end in the rules' order
        mated_sides_loss = "0-1" if board.turn == chess.WHITE else "1-0"  # the side to move is mated
        assert record.result == (mated_sides_loss if record.termination == "checkmate" else "1/2-1/2")


def test_a_draw_one_move_away_does_not_end_a_game_but_one_on_the_board_does() -> None:
    board = chess.Board()
    for uci in ("g1f3", "g8f6", "f3g1", "f6g8", "g1f3", "g8f6", "f3g1"):
        board.push_uci(uci)
    assert board.outcome(claim_draw=True) is not None  # Black could claim with ...Ng8
    assert board_outcome(board) is None
    board.push_uci("f6g8")
    outcome = board_outcome(board)
    assert outcome is not None and outcome.termination == chess.Termination.THREEFOLD_REPETITION
    fifty = chess.Board("8/8/8/3k4/8/8/8/R3K3 w - - 99 80")
    assert fifty.outcome(claim_draw=True) is not None and board_outcome(fifty) is None
    fifty.push_uci("a1a2")
    outcome = board_outcome(fifty)
    assert outcome is not None and outcome.termination == chess.Termination.FIFTY_MOVES


def test_random_match_writes_pgn_and_jsonl(tmp_path: Path) -> None:
    openings = load_openings()
    a, b = RandomAgent(1), RandomAgent(2, name="other")
    result = play_match(a, b, openings=openings, games=6, concurrency=4, out_dir=tmp_path, progress=False,
                        match_id="m1")
    assert [g.round for g in result.games] == [1, 2, 3, 4, 5, 6]
    assert result.wins + result.draws + result.losses == 6
    # Each opening twice, A with White first, then colours swapped.
    for k, game in enumerate(result.games):
        assert game.opening == openings[k // 2].name
        assert game.a_is_white == (k % 2 == 0)
        assert (game.white, game.black) == (("random:seed=1", "other") if k % 2 == 0 else ("other", "random:seed=1"))
        assert game.moves[: game.opening_plies] == [m.uci() for m in openings[k // 2].moves]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m1.jsonl", "m1.pgn"]  # no temporary files left
    pgn_games = _read_pgn(tmp_path / "m1.pgn")
    assert len(pgn_games) == 6
    for pgn, record in zip(pgn_games, result.games):
        assert pgn.headers["Event"] == "m1" and pgn.headers["Round"] == str(record.round)
        assert pgn.headers["White"] == record.white and pgn.headers["Opening"] == record.opening
        _check_replay(pgn, record)
    lines = [json.loads(line) for line in (tmp_path / "m1.jsonl").read_text().splitlines()]
    assert lines == [r.to_json() for r in result.games]
    assert lines[1]["a_colour"] == "black" and lines[1]["agent_a"] == "random:seed=1"
    assert all(v is None for line in lines for v in line["values"])


def test_odd_games_round_up_and_ply_limit(tmp_path: Path) -> None:
    openings = load_openings()
    result = play_match(RandomAgent(3), RandomAgent(4), openings=openings, games=3, ply_limit=16, seed=5,
                        progress=False)
    assert len(result.games) == 4
    assert [g.opening for g in result.games] == [openings[5].name] * 2 + [openings[6].name] * 2
    assert all(g.termination == "ply_limit" and g.plies == 16 and g.result == "1/2-1/2" for g in result.games)
    assert result.pgn_path is None and result.jsonl_path is None


def test_agents_are_batched_across_games() -> None:
    same = ScriptedAgent("self", None, None)
    play_match(same, same, games=4, concurrency=4, ply_limit=30, progress=False)
    assert same.batches[0] == 4  # one agent on both sides: every running game in one call
    assert same.new_games == 4
    a, b = ScriptedAgent("a", None, None), ScriptedAgent("b", None, None, seed=1)
    play_match(a, b, games=4, concurrency=4, ply_limit=30, progress=False)
    assert max(b.batches) == 4 and a.new_games == b.new_games == 4


def test_no_resignation_without_values() -> None:
    result = play_match(
        RandomAgent(5), RandomAgent(6), games=4, ply_limit=60, agreed_resign_value=-0.5, resign_moves=1, progress=False
    )
    assert all(g.termination != "resignation" for g in result.games)
    # One side with values is not enough: the opponent never agrees.
    hopeless = ScriptedAgent("hopeless", -0.99, -0.99)
    result = play_match(
        hopeless, RandomAgent(7), games=2, ply_limit=60, agreed_resign_value=-0.5, resign_moves=1, progress=False
    )
    assert all(g.termination != "resignation" for g in result.games)


def test_resignation_when_both_agree(tmp_path: Path) -> None:
    # Whoever plays White thinks it is lost, whoever plays Black thinks it is winning.
    a = ScriptedAgent("a", -0.99, 0.99)
    b = ScriptedAgent("b", -0.99, 0.99, seed=1)
    result = play_match(a, b, games=2, agreed_resign_value=-0.9, resign_moves=2, out_dir=tmp_path, progress=False)
    for game in result.games:
        assert game.termination == "resignation" and game.result == "0-1"
        # W (no opponent value yet), B, W (agree 1), B, W (agree 2: resigns instead of moving).
        assert game.plies == game.opening_plies + 4
        assert game.values[game.opening_plies :] == [-0.99, 0.99, -0.99, 0.99]
    for pgn, record in zip(_read_pgn(result.pgn_path), result.games):  # type: ignore[arg-type]
        _check_replay(pgn, record)


def test_illegal_move_names_agent_move_and_fen() -> None:
    class Cheater(Agent):
        def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
            return [Choice(chess.Move.from_uci("e1e5")) for _ in boards]

    with pytest.raises(IllegalAgentMoveError) as info:
        play_match(Cheater("cheater"), RandomAgent(), games=2, progress=False)
    message = str(info.value)
    assert "cheater" in message and "e1e5" in message
    assert re.search(r"[pnbrqkPNBRQK1-8/]+ [wb] ", message)  # the FEN


def test_wrong_number_of_choices() -> None:
    class Lazy(Agent):
        def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
            return []

    with pytest.raises(AgentContractError, match="lazy returned 0 choices"):
        play_match(Lazy("lazy"), RandomAgent(), games=2, progress=False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"games": -1}, "games"),
        ({"games": 2, "concurrency": 0}, "concurrency"),
        ({"games": 2, "agreed_resign_value": 0.9}, "agreed_resign_value"),
        ({"games": 2, "resign_moves": 0}, "resign_moves"),
        ({"games": 2, "match_id": "../x"}, "match id"),
        ({"games": 2, "openings": []}, "empty"),
    ],
)
def test_bad_match_arguments(kwargs: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        play_match(RandomAgent(), RandomAgent(), progress=False, **kwargs)


def test_format_summary() -> None:
    def record(score: float) -> GameRecord:
        result = {1.0: "1-0", 0.5: "1/2-1/2", 0.0: "0-1"}[score]
        return GameRecord("m", 1, "o", 0, "A", "B", True, result, "checkmate", [], [], "", "")

    games = [record(1.0)] * 12 + [record(0.5)] * 5 + [record(0.0)] * 3
    text = format_summary(MatchResult("m", "A", "B", games))
    assert text.startswith("A vs B: +12 =5 -3, score 72.5%, Elo +168 (95%: ")
    assert re.fullmatch(r"A vs B: \+12 =5 -3, score 72\.5%, Elo \+168 \(95%: \+\d+\.\.\+\d+\), LOS 99\.\d%", text)
    assert format_summary(MatchResult("m", "A", "B", [])) == "A vs B: +0 =0 -0, no games"
    # 4 wins of 4: the exact lower bound 0.025^(1/4) = 0.398 is -72 Elo.
    assert "score 100.0%, Elo +inf (95%: -72..+inf)" in format_summary(MatchResult("m", "A", "B", [record(1.0)] * 4))


# --- player specs ----------------------------------------------------------------------


def test_split_spec() -> None:
    assert split_spec("stockfish") == ("stockfish", [])
    assert split_spec(" Stockfish:ELO=1500, depth=3 ") == ("stockfish", [("elo", "1500"), ("depth", "3")])
    assert split_spec("search:400,checkpoint=runs/x/step_1.pt") == (
        "search", [(None, "400"), ("checkpoint", "runs/x/step_1.pt")]
    )


@pytest.mark.parametrize(
    ("spec", "fragments"),
    [
        ("alphabeta", ["unknown player 'alphabeta'", "random", "stockfish"]),
        ("random:depth=3", ["unknown option 'depth'", "seed"]),
        ("random:3", ["takes no bare value"]),
        ("random:seed=x", ["must be an integer"]),
        ("random:seed=1,seed=2", ["given twice"]),
        ("random:=3", ["malformed option"]),
        (":elo=3", ["empty player name"]),
    ],
)
def test_parse_player_errors(spec: str, fragments: list[str]) -> None:
    with pytest.raises(UserError) as info:
        parse_player(spec)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_the_registry_holds_every_builtin_kind_and_importing_it_needs_no_torch() -> None:
    code = ("import sys, eval.agents as agents; assert 'torch' not in sys.modules; "
            "print(','.join(sorted(agents.players())))")
    listed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert set(listed.stdout.strip().split(",")) == set(agents_module.BUILTIN_PLAYERS)


def test_parse_random_and_register_a_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_player("random").name == "random"
    assert parse_player("random", seed=4).name == "random:seed=4"
    assert parse_player("random:seed=9,name=rnd").name == "rnd"
    monkeypatch.setattr(agents_module, "PLAYERS", dict(agents_module.PLAYERS))
    seen: dict[str, object] = {}

    def factory(options: dict[str, str], context: dict) -> Agent:
        seen.update(options=options, context=context)
        return RandomAgent(name=f"toy{options['sims']}")

    register_player("toy", factory, help="test kind", options={"sims": "simulations"}, positional="sims")
    agent = parse_player("toy:400", run="runs/x")
    assert agent.name == "toy400"
    assert seen == {"options": {"sims": "400"}, "context": {"run": "runs/x"}}
    with pytest.raises(ValueError, match="already registered"):
        register_player("toy", factory, help="again")
    with pytest.raises(UserError, match="unknown option 'depth' for 'toy'"):
        parse_player("toy:depth=3")


# --- Stockfish ---------------------------------------------------------------------------


def test_stockfish_gate_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="required"):
        stockfish_or_skip(lambda: None)
    monkeypatch.delenv(REQUIRE_ENV)
    with pytest.raises(pytest.skip.Exception):
        stockfish_or_skip(lambda: None)


def test_stockfish_match_completes(stockfish_path: str, tmp_path: Path) -> None:
    with StockfishAgent(depth=1, path=stockfish_path) as sf, RandomAgent(8) as rnd:
        result = play_match(sf, rnd, games=2, out_dir=tmp_path, progress=False, match_id="sf")
    assert sf.name == "stockfish:depth=1"
    assert len(result.games) == 2 and (tmp_path / "sf.pgn").is_file() and (tmp_path / "sf.jsonl").is_file()
    for pgn, record in zip(_read_pgn(tmp_path / "sf.pgn"), result.games):
        _check_replay(pgn, record)
    lines = [json.loads(line) for line in (tmp_path / "sf.jsonl").read_text().splitlines()]
    assert len(lines) == 2
    # Stockfish reports values (its plies), random does not.
    sf_values = [v for line in lines for i, v in enumerate(line["values"])
                 if i >= line["opening_plies"] and (i % 2 == 0) == (line["white"] == sf.name)]
    assert sf_values and all(isinstance(v, float) and -1.0 <= v <= 1.0 for v in sf_values)


def test_stockfish_elo_out_of_range_quotes_the_range(stockfish_path: str) -> None:
    with chess.engine.SimpleEngine.popen_uci(stockfish_path) as engine:
        low, high = engine.options["UCI_Elo"].min, engine.options["UCI_Elo"].max
    with pytest.raises(UserError) as info:
        StockfishAgent(elo=low - 100, path=stockfish_path)
    assert f"from {low} to {high}" in str(info.value) and f"elo={low - 100}" in str(info.value)
    with pytest.raises(UserError, match="not both"):
        StockfishAgent(elo=1500, skill=3, path=stockfish_path)


def test_stockfish_specs_and_limits(stockfish_path: str) -> None:
    with parse_player("stockfish:1500", stockfish_path=stockfish_path) as sf:
        assert sf.name == "stockfish:elo=1500"
        assert sf.limit.depth == 2  # Stockfish 15.1 fixes its move at depth 1 + int(level(1500))
    with parse_player("stockfish:skill=5,movetime=50,name=sf5", stockfish_path=stockfish_path) as sf:
        assert sf.name == "sf5" and sf.limit.time == 0.05 and sf.limit.depth is None
    with parse_player("stockfish:depth=1,processes=2", stockfish_path=stockfish_path) as sf:
        boards = [chess.Board(), load_openings()[0].board(), chess.Board("7k/8/8/8/8/8/8/K6R w - - 0 1")]
        choices = sf.choose(boards)
        assert len(choices) == 3 and all(b.is_legal(c.move) for b, c in zip(boards, choices))
        assert choices[2].value is not None and choices[2].value > 0.9  # a rook up
    with pytest.raises(UserError, match="at least 1"):
        parse_player("stockfish:depth=0", stockfish_path=stockfish_path)


# --- `alphazero match`: where the games go -------------------------------------------------------


def match_cli(run: Path, *extra: str) -> int:
    from alphazero.app import cli

    return cli.main(["match", "random", "vs", "random:seed=2", "--run", str(run), "--ply-limit", "20",
                     "--no-progress", *extra])


def test_a_run_that_is_a_file_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli

    blocker = tmp_path / "afile"
    blocker.write_text("not a run")
    assert match_cli(blocker, "--games", "2") == 2
    assert cli.main(["eval", "--run", str(blocker), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{blocker} is a file, not a run directory") == 2 and "Traceback" not in err


def test_unwritable_outputs_are_refused_before_the_first_game(tmp_path: Path, games_started: list[int],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "eval").write_text("a file where the records folder should be")  # unwritable even for root
    assert match_cli(run, "--games", "2") == 2
    err = capsys.readouterr().err
    assert f"cannot write the match's records in {run / 'eval'}" in err and "Traceback" not in err
    assert games_started == []


def skip_if_read_only_modes_do_not_stop_writes(folder: Path) -> None:
    """Skips the test where a mode of 0o555 does not stop this process writing (root, CAP_DAC_OVERRIDE)."""
    probe = folder / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    try:
        (probe / "file").touch()
    except PermissionError:
        return
    finally:
        probe.chmod(0o755)
    pytest.skip("this process writes through read-only modes (root); the test after it covers the path")


def test_a_read_only_run_is_refused_before_the_first_game(tmp_path: Path, games_started: list[int],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    skip_if_read_only_modes_do_not_stop_writes(tmp_path)
    run = tmp_path / "run"
    for folder in ("eval", "games"):
        (run / folder).mkdir(parents=True)
        (run / folder).chmod(0o555)
    try:
        assert match_cli(run, "--games", "2") == 2
    finally:
        for folder in ("eval", "games"):
            (run / folder).chmod(0o755)
    assert "cannot write the match's records" in capsys.readouterr().err
    assert games_started == []


def test_games_that_cannot_be_written_after_playing_go_to_a_temporary_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    import eval.match as match_module

    run = tmp_path / "run"
    fail_writes_under(monkeypatch, match_module, run)
    assert match_cli(run, "--games", "4", "--match-id", "m") == 0
    out, err = capsys.readouterr()
    (fallback,) = re.findall(r"this match's games go to (\S+) instead", err)
    try:
        assert f"games: {fallback}/m.pgn" in out and f"records: {fallback}/m.jsonl" in out
        assert len(_read_pgn(Path(fallback) / "m.pgn")) == 4
        assert len((Path(fallback) / "m.jsonl").read_text().splitlines()) == 4
    finally:
        shutil.rmtree(fallback)
    assert not list((run / "games").iterdir())


def test_games_that_cannot_be_written_anywhere_are_printed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import eval.match as match_module

    fail_writes_under(monkeypatch, match_module, Path("/"))
    monkeypatch.setattr(match_module.tempfile, "mkdtemp", lambda prefix: str(tmp_path / "nowhere"))
    assert match_cli(tmp_path / "run", "--games", "2") == 0
    out, err = capsys.readouterr()
    assert "the games are kept in memory only" in err
    assert "games (written nowhere else)" in out and "games:" not in out
    printed = io.StringIO(out.split("games (written nowhere else):")[1])
    games = []
    while (game := chess.pgn.read_game(printed)) is not None:
        assert not game.errors and game.headers["Result"] in ("1-0", "0-1", "1/2-1/2")
        games.append(game)
    assert len(games) == 2


def test_no_games_is_refused_and_an_odd_number_is_said(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert match_cli(tmp_path / "run", "--games", "0") == 2
    out, err = capsys.readouterr()
    assert "--games must be at least 1, got 0" in err and "games:" not in out
    assert not (tmp_path / "run" / "eval").exists()
    assert match_cli(tmp_path / "run", "--games", "1") == 0
    out = capsys.readouterr().out
    assert "playing 2 games, not 1: each opening is played twice, colours swapped" in out
    assert len(_read_pgn(next((tmp_path / "run" / "games").glob("*.pgn")))) == 2


# --- on a clock ------------------------------------------------------------------------------


class Stopwatch:
    """Stands in for eval.match's `time` module: its time moves only as a ClockedAgent thinks, so that the
    clocks' arithmetic is checked exactly, whatever else the machine is doing."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def stopwatch(monkeypatch: pytest.MonkeyPatch) -> Stopwatch:
    import eval.match as match_module

    watch = Stopwatch()
    monkeypatch.setattr(match_module, "time", watch)
    return watch


class ClockedAgent(ScriptedAgent):
    """A ScriptedAgent that plays on a clock, taking `seconds` of the stopwatch's time a move; keeps the clocks it
    was given."""

    plays_on_clock = True

    def __init__(self, name: str, stopwatch: Stopwatch | None = None, seconds: float = 0.0, seed: int = 0) -> None:
        super().__init__(name, None, None, seed)
        self.stopwatch, self.seconds = stopwatch, seconds
        self.limits: list[chess.engine.Limit] = []

    def choose_on_clock(self, board: chess.Board, clock: chess.engine.Limit) -> Choice:
        self.limits.append(clock)
        if self.stopwatch is not None:
            self.stopwatch.now += self.seconds
        return self.choose([board])[0]


def test_clock_parse() -> None:
    assert Clock.parse("10+0.1") == Clock(10.0, 0.1) and str(Clock.parse(" 60 ")) == "60+0"
    for bad in ("", "ten", "0+1", "10+-1", "10+0.1+2", "inf"):
        with pytest.raises(UserError, match="clock"):
            Clock.parse(bad)


def test_a_clocked_match_sends_the_clocks_adds_the_increment_and_records_the_times(
        tmp_path: Path, stopwatch: Stopwatch) -> None:
    a, b = ClockedAgent("a", stopwatch, seconds=0.125), ClockedAgent("b", stopwatch, seconds=0.25, seed=1)
    result = play_match(a, b, games=2, concurrency=1, ply_limit=30, out_dir=tmp_path, progress=False,
                        clock=Clock(60.0, 0.5))
    assert len(result.games) == 2 and all(g.time_control == "60+0.5" for g in result.games)
    first = a.limits[0]
    assert first.white_clock == first.black_clock == 60.0 and first.white_inc == first.black_inc == 0.5
    # Each side loses the time it took and gains the increment after its move: a plays white in the first game.
    assert a.limits[1].white_clock == 60.0 - 0.125 + 0.5 and a.limits[1].black_clock == 60.0 - 0.25 + 0.5
    record = json.loads(result.jsonl_path.read_text().splitlines()[0]) if result.jsonl_path else {}
    opening = record["opening_plies"]
    assert record["seconds"][:opening] == [None] * opening and len(record["seconds"]) == record["plies"]

    def spent(ply: int) -> float:  # a makes the first timed move
        return 0.125 if (ply - opening) % 2 == 0 else 0.25

    timed = range(opening, record["plies"])
    assert record["seconds"][opening:] == [spent(ply) for ply in timed]
    # After its k-th timed move (from 0) the mover's clock holds 60 + (k + 1) * (increment - time a move).
    assert record["clocks"][opening:] == [60.0 + ((ply - opening) // 2 + 1) * (0.5 - spent(ply)) for ply in timed]
    assert result.pgn_path is not None and "[%clk 0:01:00" in result.pgn_path.read_text()
    assert '[TimeControl "60+0.5"]' in result.pgn_path.read_text()


def test_running_out_of_time_loses_and_is_a_draw_when_the_opponent_cannot_mate(stopwatch: Stopwatch) -> None:
    slow, fast = ClockedAgent("slow", stopwatch, seconds=1.5), ClockedAgent("fast", stopwatch, seconds=0.5)
    result = play_match(slow, fast, games=2, concurrency=1, progress=False, clock=Clock(1.0, 0.0))
    assert [g.termination for g in result.games] == ["time_forfeit", "time_forfeit"]
    assert result.losses == 2
    # A flag against a lone king is a draw; against mating material, a loss.
    for fen, result_, termination in (
            ("4k3/8/8/8/8/8/8/3QK3 w - - 0 1", "1/2-1/2", "time_forfeit_insufficient_material"),
            ("4k3/8/8/8/8/8/8/3QK3 b - - 0 1", "1-0", "time_forfeit")):
        game = _Game(1, load_openings()[0], True, chess.Board(fen))
        game.clock = {chess.WHITE: 0.1, chess.BLACK: 0.1}
        game.play_on_clock(ClockedAgent("slow", stopwatch, seconds=0.3), Clock(0.1), _Rules(None, None, 3))
        assert (game.result, game.termination) == (result_, termination)


def test_players_that_cannot_play_on_a_clock_are_refused_before_the_first_game() -> None:
    with pytest.raises(UserError, match="cannot play on a clock"):
        play_match(RandomAgent(), ClockedAgent("b"), games=2, progress=False, clock=Clock(1.0))
