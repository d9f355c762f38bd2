"""The UCI engine: driven by python-chess over a subprocess, by raw pipes, and in-process."""

from __future__ import annotations

import io
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import chess
import chess.engine
import pytest
import torch

from alphazero.checkpoint import save_model
from alphazero.config import get_preset
from alphazero.errors import UserError
from alphazero.network import AlphaZeroNet
from eval.uci import (
    MAX_TIME_FRACTION,
    OPTIONS,
    GoCommand,
    UciEngine,
    parse_go,
    time_budget_ms,
)


ROOT = Path(__file__).resolve().parent.parent
MATED = "7k/6Q1/6K1/8/8/8/8/8 b - - 0 1"


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("uci") / "net.pt"
    save_model(path, AlphaZeroNet(get_preset("tiny").network))
    return path


def _command(weights: Path) -> list[str]:
    return [sys.executable, "-m", "eval.uci", "--weights", str(weights), "--device", "cpu", "--threads", "1"]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


@pytest.fixture(scope="module")
def engine(weights: Path) -> Iterator[chess.engine.SimpleEngine]:
    uci = chess.engine.SimpleEngine.popen_uci(_command(weights), cwd=ROOT, env=_env(), timeout=60)
    try:
        yield uci
    finally:
        uci.quit()
        uci.close()


# --- through python-chess ---------------------------------------------------------------------


def test_engine_declares_its_options(engine: chess.engine.SimpleEngine) -> None:
    assert engine.id["name"].startswith("alphazero")
    for name in ("Nodes", "Weights", "Device", "MoveOverhead", "Threads"):
        assert name in engine.options
    assert engine.options["Nodes"].default == 400


def test_engine_plays_a_game(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board()
    for _ in range(8):
        result = engine.play(board, chess.engine.Limit(nodes=8), game="g1")
        assert result.move is not None and board.is_legal(result.move)
        board.push(result.move)


def test_go_nodes_is_respected_and_reported(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")
    info = engine.analyse(board, chess.engine.Limit(nodes=50))
    assert info["nodes"] == 50
    assert info["depth"] == len(info["pv"]) >= 1
    assert board.is_legal(info["pv"][0])
    assert "score" in info and "nps" in info and "time" in info


def test_go_infinite_runs_until_stop(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board()
    with engine.analysis(board) as analysis:
        time.sleep(1.2)  # longer than the info interval: at least one info line arrives while searching
        analysis.stop()
        best = analysis.wait()
    assert best.move is not None and board.is_legal(best.move)
    assert analysis.info["nodes"] > 10


def test_movetime_and_clock_are_kept(engine: chess.engine.SimpleEngine) -> None:
    engine.configure({"MoveOverhead": 50})
    board = chess.Board()
    start = time.monotonic()
    engine.play(board, chess.engine.Limit(time=0.3))
    assert time.monotonic() - start < 1.5
    start = time.monotonic()
    engine.play(board, chess.engine.Limit(white_clock=3.0, black_clock=3.0, white_inc=0.0, black_inc=0.0))
    assert time.monotonic() - start < 1.5  # about 3 s / 30 - 50 ms


def test_no_legal_moves_gives_a_null_move(engine: chess.engine.SimpleEngine) -> None:
    result = engine.play(chess.Board(MATED), chess.engine.Limit(nodes=10))
    assert result.move == chess.Move.null()  # python-chess reads `bestmove 0000` as the null move


# --- raw pipes ---------------------------------------------------------------------------------


class _Pipe:
    """A raw engine process: write bytes, read lines with a timeout."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, cwd=ROOT, env=_env(), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            self.lines.put(raw.decode("utf-8", "replace").rstrip("\n"))

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def expect(self, prefix: str, timeout: float = 30.0) -> list[str]:
        """Returns every line read up to and including the first that starts with prefix."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            seen.append(line)
            if line.startswith(prefix):
                return seen

    def close(self) -> None:
        try:
            self.send(b"quit\n")
            self.process.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()
        finally:
            for stream in (self.process.stdin, self.process.stdout):
                if stream is not None:
                    stream.close()


@pytest.fixture
def pipe(weights: Path) -> Iterator[_Pipe]:
    process = _Pipe(_command(weights))
    try:
        yield process
    finally:
        process.close()


GARBAGE = [
    b"\x00\xff\xfe garbage \x80\x81\n",
    b"hello world\n",
    b"position\n",
    b"position fen not/a/fen w - - 0 1\n",
    b"position startpos moves e2e5\n",
    b"go nodes -5 movetime abc depth\n",
    b"setoption\n",
    b"setoption name\n",
    b"setoption name Nodes value 99999999999999999999\n",
    b"setoption name NoSuchOption value 1\n",
    b"setoption name MoveOverhead value lots\n",
    b"stop\n",
    b"   \n",
    b"x" * 100_000 + b"\n",
]


def test_garbage_is_answered_and_survived(pipe: _Pipe) -> None:
    pipe.send(b"uci\n")
    pipe.expect("uciok")
    pipe.send(b"".join(GARBAGE) + b"isready\n")
    lines = pipe.expect("readyok")
    assert sum(line.startswith("info string") for line in lines) >= 8
    pipe.send(b"position startpos moves e2e4\ngo nodes 8\n")
    best = pipe.expect("bestmove")[-1].split()[1]
    after_e4 = chess.Board("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1")
    assert chess.Move.from_uci(best) in after_e4.legal_moves


def test_isready_and_stop_are_answered_during_a_search(pipe: _Pipe) -> None:
    pipe.send(b"isready\n")
    pipe.expect("readyok")
    pipe.send(b"position startpos\ngo infinite\n")
    time.sleep(0.3)
    pipe.send(b"isready\n")
    lines = pipe.expect("readyok", timeout=5)
    assert not any(line.startswith("bestmove") for line in lines)
    pipe.send(b"stop\n")
    assert pipe.expect("bestmove", timeout=5)[-1] != "bestmove 0000"


def test_a_mated_position_gets_bestmove_0000(pipe: _Pipe) -> None:
    pipe.send(f"position fen {MATED}\ngo nodes 10\n".encode())
    assert pipe.expect("bestmove")[-1] == "bestmove 0000"


def test_a_missing_weights_file_fails_before_the_handshake(tmp_path: Path) -> None:
    command = _command(tmp_path / "missing.pt")
    done = subprocess.run(command, cwd=ROOT, env=_env(), input=b"uci\n", capture_output=True, timeout=60)
    assert done.returncode == 2
    assert b"does not exist" in done.stderr and b"uciok" not in done.stdout


# --- in-process ----------------------------------------------------------------------------------


def test_options_are_declared_once_each() -> None:
    names = [option.name.lower() for option in OPTIONS]
    assert len(names) == len(set(names))
    out = io.StringIO()
    engine = UciEngine(None, None, "cpu", stdin=io.StringIO("uci\nquit\n"), stdout=out)
    engine.run()
    lines = out.getvalue().splitlines()
    assert lines[-1] == "uciok"
    assert [line for line in lines if line.startswith("option")] == [option.declaration() for option in OPTIONS]


def test_time_budget_formula() -> None:
    def budget(**kwargs: int) -> float | None:
        return time_budget_ms(GoCommand(**kwargs), True, overhead_ms=100, moves_to_go=30)

    assert budget() is None
    assert budget(movetime=1000) == 900
    assert budget(wtime=60_000, btime=1) == pytest.approx(60_000 / 30 - 100)
    assert budget(wtime=60_000, winc=1000) == pytest.approx(2000 + 750 - 100)
    assert budget(wtime=60_000, movestogo=1) == pytest.approx(MAX_TIME_FRACTION * 60_000 - 100)
    assert budget(wtime=50) == 1.0  # never below the minimum: a move is always chosen
    assert time_budget_ms(GoCommand(wtime=1, btime=30_000), False, overhead_ms=0, moves_to_go=30) == 1000


def test_go_parsing_skips_bad_values() -> None:
    go = parse_go("wtime 1000 btime x winc 5 searchmoves e2e4 d2d4 nodes 7 infinite bogus".split())
    assert (go.wtime, go.btime, go.winc, go.nodes, go.infinite, go.searchmoves) == (1000, None, 5, 7, True, True)
    assert go.problems == ("btime x", "bogus")


def test_unusable_sources_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        UciEngine(None, tmp_path / "nothing.pt", "cpu", stdin=io.StringIO(""), stdout=io.StringIO())
    with pytest.raises(UserError):
        UciEngine(None, None, "cpu", nodes=0, stdin=io.StringIO(""), stdout=io.StringIO())


class _SlowBestmove(io.StringIO):
    """Output that lingers after writing `bestmove`, keeping the search thread alive a moment longer."""

    def __init__(self) -> None:
        super().__init__()
        self.bestmove = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if text.startswith("bestmove"):
            self.bestmove.set()
            time.sleep(0.3)
        return written


def test_go_right_after_bestmove_is_not_refused(weights: Path) -> None:
    # Regression: a GUI sends the next `go` as soon as it reads `bestmove`; the
    # engine refused it while the finishing thread was still alive, and the GUI hung.
    out = _SlowBestmove()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out)
    engine.handle("position startpos")
    engine.handle("go nodes 4")
    assert out.bestmove.wait(30)
    out.bestmove.clear()
    engine.handle("go nodes 4")
    assert out.bestmove.wait(30)
    engine.stop_search()
    assert out.getvalue().count("bestmove") == 2
    assert "go ignored" not in out.getvalue()
