"""The engine as lichess-bot starts it, and its Syzygy tablebases: the bare command by absolute path from another
folder, configured through python-chess's client by Stockfish's option names (which the client refuses to send
to an engine that does not declare them), every option declared and honoured, games played; the root's
tablebase choice, `tbhits`, and a SyzygyPath that cannot be used. Also the options on the command line."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import chess
import chess.engine
import pytest

from alphazero.chess.syzygy import Tables
from alphazero.errors import UserError
from eval.uci import UciEngine
from eval.uci_options import ALIASES, OPTIONS, OPTIONS_BY_NAME, options_markdown
from tests.helpers import KQVK, KRVK, KVKP_ONLY_KC2_HOLDS, ROOT, SYZYGY_TABLES, repo_env

LICHESS_BOT_OPTIONS = {"Hash": 64, "SyzygyPath": str(SYZYGY_TABLES), "Threads": 1, "Move Overhead": 100}
"""What a lichess-bot config.yml's engine options typically hold (by Stockfish's names)."""


def _bare_command() -> list[str]:
    """`alphazero uci` with nothing else, by absolute path, as a GUI or lichess-bot runs it: the built-in network."""
    return [str(Path(sys.executable).resolve()), "-m", "alphazero", "uci"]


class _Heard(logging.Handler):
    """Keeps what python-chess's client logs of the engine's output (`>> info string ...` among it)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def heard() -> Iterator[_Heard]:
    logger = logging.getLogger("chess.engine")
    handler, level = _Heard(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture(scope="module")
def bot(tmp_path_factory: pytest.TempPathFactory, heard: _Heard) -> Iterator[chess.engine.SimpleEngine]:
    folder = tmp_path_factory.mktemp("lichess-bot")  # no runs/ here: a bare command plays the built-in network
    engine = chess.engine.SimpleEngine.popen_uci(_bare_command(), cwd=folder, env=repo_env(), timeout=120)
    try:
        engine.configure(LICHESS_BOT_OPTIONS)
        engine.ping()  # the options are sent, and the network loaded, before the tests begin
        yield engine
    finally:
        engine.quit()
        engine.close()


def _said(heard: _Heard) -> list[str]:
    """The engine's `info string` texts the client has heard so far."""
    return [line.split(">> info string ", 1)[1] for line in heard.lines if ">> info string " in line]


def test_the_bots_options_are_honoured_as_the_engine_says(bot: chess.engine.SimpleEngine, heard: _Heard) -> None:
    bot.play(chess.Board(), chess.engine.Limit(nodes=8), game="options")
    said = _said(heard)
    assert f"tablebases: Syzygy tables up to 3 pieces from {SYZYGY_TABLES}" in said
    assert any(text.startswith("network: built-in network on cpu (1 thread: Threads 1)") for text in said), said
    assert any(text.startswith("tree memory 64 MiB (Hash 64): about ") for text in said), said


def test_every_option_is_declared_by_its_name_and_stockfishs_names_are_among_them(
        bot: chess.engine.SimpleEngine) -> None:
    assert sorted(bot.options) == sorted(option.name for option in OPTIONS)
    for name in LICHESS_BOT_OPTIONS:
        assert name in bot.options
    assert not set(ALIASES) & set(bot.options)  # the old names are taken, not declared twice


def test_the_bot_plays_a_game_on_a_clock(bot: chess.engine.SimpleEngine) -> None:
    board = chess.Board()
    clock = {chess.WHITE: 20.0, chess.BLACK: 20.0}
    for _ in range(6):
        limit = chess.engine.Limit(white_clock=clock[chess.WHITE], black_clock=clock[chess.BLACK],
                                   white_inc=0.1, black_inc=0.1)
        result = bot.play(board, limit, game="clocked")
        assert result.move is not None and board.is_legal(result.move)
        board.push(result.move)


def test_move_overhead_is_kept_back(bot: chess.engine.SimpleEngine, tmp_path: Path) -> None:
    # The engine's Debug Log File says the budget it planned: the overhead's effect without timing the search.
    log = tmp_path / "engine.log"
    bot.configure({"Move Overhead": 900, "Debug Log File": str(log)})
    try:
        bot.analyse(chess.Board(), chess.engine.Limit(time=1.0))
    finally:
        bot.configure({"Move Overhead": 100, "Debug Log File": "<empty>"})
    budgets = [line.split("budget ")[1] for line in log.read_text().splitlines() if "search starts" in line]
    assert budgets == ["100 ms"]  # a movetime of 1000 ms less 900 kept back


def test_a_won_ending_is_converted_by_moves_that_keep_the_win(bot: chess.engine.SimpleEngine) -> None:
    tables = Tables.open(SYZYGY_TABLES)
    for fen in (KQVK, KRVK):
        board = chess.Board(fen)
        for _ in range(4):  # the engine's moves, against the tables' best defence
            result = bot.play(board, chess.engine.Limit(nodes=24), info=chess.engine.INFO_ALL, game=fen)
            assert result.move is not None
            board.push(result.move)
            assert board.is_checkmate() or tables.wdl(board) == -2, (fen, board.fen())
            assert result.info.get("tbhits", 0) > 0
            if board.is_game_over():
                break
            probe = tables.root(board)
            assert probe is not None
            board.push_uci(probe.moves[0])


def test_a_drawn_ending_is_held_by_the_one_move_that_holds(bot: chess.engine.SimpleEngine) -> None:
    result = bot.play(chess.Board(KVKP_ONLY_KC2_HOLDS), chess.engine.Limit(nodes=24), info=chess.engine.INFO_ALL)
    assert result.move == chess.Move.from_uci("b1c2")
    assert result.info["score"].relative == chess.engine.Cp(0) and result.info["tbhits"] > 0


def test_tbhits_count_the_leaves_below_a_root_outside_the_tables(bot: chess.engine.SimpleEngine) -> None:
    # Four pieces against three-piece tables: the root is not held, but a capture leads into the tables.
    board = chess.Board("8/8/8/3k4/8/2n5/8/KQ6 w - - 0 1")
    info = bot.analyse(board, chess.engine.Limit(nodes=64))
    assert info["tbhits"] > 0


# --- in-process: what the engine says ------------------------------------------------------------------------


def _engine(weights: Path, **options: str) -> tuple[UciEngine, io.StringIO]:
    out = io.StringIO()
    return UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out, threads=1, options=options), out


def test_a_bad_path_from_the_bot_is_said_once_and_the_bot_plays_on(bot: chess.engine.SimpleEngine,
                                                                   heard: _Heard) -> None:
    bot.configure({"SyzygyPath": "/no/such/folder"})
    try:
        result = bot.play(chess.Board(KQVK), chess.engine.Limit(nodes=8), info=chess.engine.INFO_ALL)
    finally:
        bot.configure({"SyzygyPath": str(SYZYGY_TABLES)})
    assert result.move is not None and "tbhits" not in result.info
    bad = [text for text in _said(heard) if text.startswith("SyzygyPath '/no/such/folder'")]
    assert bad == ["SyzygyPath '/no/such/folder' not used: no such folder: '/no/such/folder'; playing without "
                   "tablebases"]


def test_a_path_that_cannot_be_used_gets_one_info_string_and_the_engine_plays_on(weights: Path) -> None:
    engine, out = _engine(weights)
    engine.handle("setoption name SyzygyPath value /no/such/folder")
    said = [line for line in out.getvalue().splitlines() if line.startswith("info string")]
    assert said == ["info string SyzygyPath '/no/such/folder' not used: no such folder: '/no/such/folder'; "
                    "playing without tablebases"]
    engine.handle(f"position fen {KQVK}")
    engine.handle("go nodes 8")
    engine.wait()
    assert "bestmove " in out.getvalue() and "tbhits" not in out.getvalue()


def test_setting_a_path_says_what_it_holds_and_an_empty_one_turns_the_tables_off(weights: Path) -> None:
    engine, out = _engine(weights)
    engine.handle(f"setoption name SyzygyPath value {SYZYGY_TABLES}")
    engine.handle("setoption name SyzygyPath value <empty>")
    said = [line for line in out.getvalue().splitlines() if line.startswith("info string")]
    assert said == [f"info string tablebases: Syzygy tables up to 3 pieces from {SYZYGY_TABLES}",
                    "info string SyzygyPath empty: no tablebases"]


def test_the_old_names_set_the_same_options(weights: Path) -> None:
    engine, _ = _engine(weights)
    engine.handle("setoption name TreeMemoryMB value 3")
    engine.handle("setoption name MoveOverhead value 77")
    assert engine.values["Hash"] == 3 and engine.values["Move Overhead"] == 77
    assert OPTIONS_BY_NAME["treememorymb"] is OPTIONS_BY_NAME["hash"]


# --- the command line --------------------------------------------------------------------------------------


def test_options_on_the_command_line_are_set_before_the_engine_starts(weights: Path) -> None:
    engine, out = _engine(weights, Hash="2", **{"Move Overhead": "40", "SyzygyPath": str(SYZYGY_TABLES)})
    assert engine.values["Hash"] == 2 and engine.values["Move Overhead"] == 40
    engine.handle(f"position fen {KQVK}")
    engine.handle("go nodes 8")
    engine.wait()
    assert "tree memory 2 MiB (Hash 2)" in out.getvalue() and " tbhits " in out.getvalue()


@pytest.mark.parametrize(("options", "said"), [
    ({"Hash": "lots"}, "--hash: Hash takes an integer, got 'lots'"),
    ({"Move Overhead": "-1"}, "--move-overhead: Move Overhead must lie in 0..60000, got '-1'"),
    ({"SyzygyPath": "/no/such/folder"}, "--syzygy-path: no such folder: '/no/such/folder'"),
    ({"Mode": "fast"}, "--mode: Mode takes one of search, policy, value, av, got 'fast'"),
    ({"Hashes": "1"}, "unknown engine option 'Hashes'"),
])
def test_a_bad_option_on_the_command_line_stops_the_engine_with_what_is_wrong(
        weights: Path, options: dict[str, str], said: str) -> None:
    with pytest.raises(UserError, match="^" + said.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        _engine(weights, **options)


def test_the_flags_reach_the_engine_and_a_bad_one_is_one_line(weights: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "alphazero", "uci", "--weights", str(weights), "--device", "cpu"]
    run = subprocess.run([*command, "--hash", "2", "--syzygy-path", str(SYZYGY_TABLES)], cwd=tmp_path, env=repo_env(),
                         input=f"position fen {KQVK}\ngo nodes 8\nisready\nquit\n", capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    assert "tree memory 2 MiB (Hash 2)" in run.stdout and " tbhits " in run.stdout
    bad = subprocess.run([*command, "--hash", "lots"], cwd=tmp_path, env=repo_env(), input="quit\n",
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == "alphazero uci: error: --hash: Hash takes an integer, got 'lots'"


def test_help_lists_every_option_from_the_one_table() -> None:
    run = subprocess.run([sys.executable, "-m", "alphazero", "uci", "--help"], cwd=ROOT, env=repo_env(),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0
    for option in OPTIONS:
        assert f"  {option.name} ({option.flag}): {option.summary()}" in run.stdout


def test_the_engine_page_holds_the_options_table_as_declared() -> None:
    assert options_markdown() in (ROOT / "docs" / "engine.md").read_text()
