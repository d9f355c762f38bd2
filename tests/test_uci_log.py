"""The engine's Debug Log File: what it heard and said, and its searches' start and end, each timed."""

from __future__ import annotations

import datetime
import io
import re
import sys
from pathlib import Path

import chess
import chess.engine
import pytest

from alphazero.errors import UserError
from eval.uci import UciEngine
from tests.helpers import ROOT, repo_env

LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}) (>>|<<|--) (.*)$")


def _engine(weights: Path, **options: str) -> tuple[UciEngine, io.StringIO]:
    out = io.StringIO()
    return UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out, threads=1, options=options), out


def _entries(path: Path) -> list[tuple[datetime.datetime, str, str]]:
    """The log's lines as (time, mark, text); every line must have the log's form."""
    entries = []
    for line in path.read_text().splitlines():
        match = LOG_LINE.match(line)
        assert match is not None, line
        entries.append((datetime.datetime.fromisoformat(match[1]), match[2], match[3]))
    return entries


def test_the_log_holds_every_line_heard_and_said_and_the_search_between(weights: Path, tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    engine, out = _engine(weights)
    engine.handle(f"setoption name Debug Log File value {log}")
    said_before = len(out.getvalue().splitlines())
    for line in ("isready", "position startpos moves e2e4", "go nodes 8"):
        engine.handle(line)
    engine.wait()
    entries = _entries(log)
    assert [text for _, mark, text in entries if mark == ">>"] == ["isready", "position startpos moves e2e4",
                                                                   "go nodes 8"]
    assert [text for _, mark, text in entries if mark == "<<"] == out.getvalue().splitlines()[said_before:]
    marks = [(mark, text.split()[0]) for _, mark, text in entries if mark != "<<" or text.startswith("bestmove")]
    assert marks[-4:] == [(">>", "go"), ("--", "search"), ("--", "search"), ("<<", "bestmove")]
    notes = [text for _, mark, text in entries if mark == "--"]
    assert re.fullmatch(r"search starts \d+\.\d ms after go", notes[0]), notes
    assert re.fullmatch(r"search ends \d+\.\d ms after go: \d+ nodes, \d+ network calls", notes[1]), notes
    times = [time for time, _, _ in entries]
    assert times == sorted(times)


def test_a_clock_gives_the_budget_and_an_empty_path_turns_the_log_off(weights: Path, tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    engine, _ = _engine(weights)
    engine.handle(f"setoption name Debug Log File value {log}")
    engine.handle("go wtime 2000 btime 2000 winc 10 binc 10")
    engine.wait()
    engine.handle("setoption name Debug Log File value <empty>")
    engine.handle("go nodes 8")
    engine.wait()
    entries = _entries(log)
    assert any(re.fullmatch(r"search starts \d+\.\d ms after go, budget \d+ ms", text) for _, _, text in entries)
    assert entries[-1][1:] == (">>", "setoption name Debug Log File value <empty>")
    assert engine.values["Debug Log File"] == ""


def test_the_log_is_appended_to_by_each_engine_that_names_it(weights: Path, tmp_path: Path) -> None:
    log = tmp_path / "games.log"
    for game in ("first", "second"):
        engine, _ = _engine(weights, **{"Debug Log File": str(log)})
        engine.handle(f"position startpos moves {'e2e4' if game == 'first' else 'd2d4'}")
        engine.handle("go nodes 4")
        engine.wait()
    heard = [text for _, mark, text in _entries(log) if mark == ">>"]
    assert heard == ["position startpos moves e2e4", "go nodes 4", "position startpos moves d2d4", "go nodes 4"]


@pytest.mark.parametrize(("path", "why"), [
    ("/no/such/folder/engine.log", "No such file or directory"),
    ("engine\x00.log", "not a usable file name (embedded null byte)"),
])
def test_a_path_that_cannot_be_written_gets_one_info_string_and_the_engine_plays_on(weights: Path, path: str,
                                                                                    why: str) -> None:
    engine, out = _engine(weights)
    engine.handle(f"setoption name Debug Log File value {path}")
    said = [line for line in out.getvalue().splitlines() if line.startswith("info string")]
    assert said == [f"info string Debug Log File {path!r} not used: cannot append to it: {why}; no log"]
    assert engine.values["Debug Log File"] == ""
    engine.handle("go nodes 4")
    engine.wait()
    assert "bestmove " in out.getvalue()


def test_a_path_that_cannot_be_written_on_the_command_line_stops_the_engine(weights: Path, tmp_path: Path) -> None:
    path = str(tmp_path / "no" / "engine.log")  # the whole path said, however long
    with pytest.raises(UserError, match=f"^--debug-log-file: cannot append to {re.escape(repr(path))}: No such file "
                                        f"or directory$"):
        _engine(weights, **{"Debug Log File": path})


def test_a_client_on_a_clock_finds_its_exchange_in_the_log(weights: Path, tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    command = [sys.executable, "-m", "alphazero", "uci", "--weights", str(weights), "--device", "cpu",
               "--threads", "1", "--debug-log-file", str(log)]
    engine = chess.engine.SimpleEngine.popen_uci(command, cwd=ROOT, env=repo_env(), timeout=60)
    try:
        result = engine.play(chess.Board(), chess.engine.Limit(white_clock=5, black_clock=5, white_inc=0.1,
                                                                black_inc=0.1))
    finally:
        engine.quit()
        engine.close()
    entries = _entries(log)
    heard = [text for _, mark, text in entries if mark == ">>"]
    assert heard[0] == "uci" and heard[-1] == "quit"
    assert any(text.startswith("go wtime 5000 btime 5000 winc 100 binc 100") for text in heard), heard
    assert result.move is not None
    assert [text.split()[:2] for _, mark, text in entries if text.startswith("bestmove")] == \
        [["bestmove", result.move.uci()]]


def test_the_uci_player_keeps_the_engines_log(weights: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `match "uci:...,log=FILE" vs ...` is how a match's engine-side timing is kept: the key must reach the
    # engine's Debug Log File.
    from eval.agents import parse_player

    monkeypatch.setenv("PYTHONPATH", repo_env()["PYTHONPATH"])
    log = tmp_path / "player.log"
    with parse_player(f"uci:weights={weights},threads=1,nodes=8,log={log}", run=tmp_path, device="cpu") as agent:
        agent.new_game()
        assert chess.Board().is_legal(agent.choose([chess.Board()])[0].move)
    said = [text for _, mark, text in _entries(log) if mark == "<<"]
    assert any(text.startswith("bestmove ") for text in said)
