"""The UCI engine: driven by python-chess over a subprocess, by raw pipes, and in-process."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import json
import math
import os
import queue
import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import chess
import chess.engine
import pytest
import torch

import eval.uci as uci_module
from alphazero.errors import UserError
from alphazero.nn.cuda_device import cuda_capability
from alphazero.nn.network import AlphaZeroNet
from alphazero.nn.precision import cuda_choice
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_model
from eval.scores import centipawns_to_value
from eval.timeman import HARD_FRACTION, SIMPLE_MAX_FRACTION
from eval.uci import (
    DEFAULT_THREADS,
    OPTIONS,
    GoCommand,
    SearchReport,
    UciEngine,
    parse_go,
    plan_search_time,
)
from tests.helpers import repo_env

ROOT = Path(__file__).resolve().parent.parent
MATED = "7k/6Q1/6K1/8/8/8/8/8 b - - 0 1"


def _command(weights: Path) -> list[str]:
    return [sys.executable, "-m", "alphazero", "uci", "--weights", str(weights), "--device", "cpu",
            "--threads", "1"]


@pytest.fixture(scope="module")
def engine(weights: Path) -> Iterator[chess.engine.SimpleEngine]:
    uci = chess.engine.SimpleEngine.popen_uci(_command(weights), cwd=ROOT, env=repo_env(), timeout=60)
    try:
        yield uci
    finally:
        uci.quit()
        uci.close()


# --- through python-chess ---------------------------------------------------------------------


def test_engine_declares_its_options(engine: chess.engine.SimpleEngine) -> None:
    assert engine.id["name"].startswith("alphazero")
    for name in ("Nodes", "Weights", "Device", "Move Overhead", "Threads", "Hash", "SyzygyPath"):
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
        for info in analysis:  # the info lines of the running search, as they come
            if info.get("nodes", 0) > 10:
                break
        analysis.stop()
        best = analysis.wait()
    assert best.move is not None and board.is_legal(best.move)
    assert analysis.info["nodes"] > 10


class SteppingClock:
    """A clock that moves `step` seconds each time it is read: the engine's deadlines pass after a known
    number of its own readings, however loaded the machine is."""

    def __init__(self, step: float = 0.001) -> None:
        self.now = 0.0
        self.step = step
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            self.now += self.step
            return self.now


def _timed_search(weights: Path, fen: str | None, go: str) -> SearchReport:
    """Runs `go` in-process on the engine's own stepping clock; returns the search's report."""
    engine, out = _in_process(weights, "MoveOverhead value 50", clock=SteppingClock())
    engine.handle(f"position fen {fen}" if fen else "position startpos")
    engine.handle(go)
    engine.wait()
    best = out.getvalue().split("bestmove ")[-1].split()[0]
    assert chess.Move.from_uci(best) in chess.Board(fen or chess.STARTING_FEN).legal_moves
    assert engine.last_report is not None
    return engine.last_report


def test_movetime_and_clock_are_kept(weights: Path) -> None:
    # movetime: all of it but the overhead; the search ends at its deadline, not later.
    report = _timed_search(weights, None, "go movetime 300")
    assert report.budget_ms == 250 and 0.24 <= report.seconds <= 0.26
    # A clock: a share of it (never past the hard cap), and the search ends at that share's deadline.
    report = _timed_search(weights, None, "go wtime 3000 btime 3000 winc 0 binc 0")
    assert report.budget_ms is not None and 0 < report.budget_ms <= HARD_FRACTION * 3000
    assert report.budget_ms / 1000 - 0.01 <= report.seconds <= report.budget_ms / 1000 + 0.01


def test_no_legal_moves_gives_a_null_move(engine: chess.engine.SimpleEngine) -> None:
    result = engine.play(chess.Board(MATED), chess.engine.Limit(nodes=10))
    assert result.move == chess.Move.null()  # python-chess reads `bestmove 0000` as the null move


# --- raw pipes ---------------------------------------------------------------------------------


class _Pipe:
    """A raw engine process: write bytes, read lines with a timeout."""

    def __init__(self, command: list[str]) -> None:
        self.process = subprocess.Popen(command, cwd=ROOT, env=repo_env(), stdin=subprocess.PIPE,
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
                    with contextlib.suppress(OSError):  # a process that quit already: the unsent quit is lost
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
    pipe.expect("info")  # the search is running
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
    done = subprocess.run(command, cwd=ROOT, env=repo_env(), input=b"uci\n", capture_output=True, timeout=60)
    assert done.returncode == 2
    assert b"does not exist" in done.stderr and b"uciok" not in done.stdout


# --- in-process ----------------------------------------------------------------------------------


def test_options_are_declared_once_each() -> None:
    names = [option.name.lower() for option in OPTIONS]
    assert len(names) == len(set(names))
    out = io.StringIO()
    engine = UciEngine(None, None, "cpu", stdin=io.StringIO("uci\nquit\n"), stdout=out, fresh=True)
    engine.run()
    lines = out.getvalue().splitlines()
    assert lines[-1] == "uciok"
    assert [line for line in lines if line.startswith("option")] == [option.declaration() for option in OPTIONS]


def test_the_simple_time_budget_formula() -> None:
    def budget(**kwargs: int) -> float | None:
        plan = plan_search_time(GoCommand(**kwargs), True, overhead_ms=100, moves_to_go=30)
        return None if plan is None else plan.budget_ms

    assert budget() is None
    assert budget(movetime=1000) == 900
    assert budget(wtime=60_000, btime=1) == pytest.approx(60_000 / 30 - 100)
    assert budget(wtime=60_000, winc=1000) == pytest.approx(2000 + 750 - 100)
    assert budget(wtime=60_000, movestogo=1) == pytest.approx(SIMPLE_MAX_FRACTION * 60_000 - 100)
    assert budget(wtime=50) == 1.0  # never below the minimum: a move is always chosen
    plan = plan_search_time(GoCommand(wtime=1, btime=30_000), False, overhead_ms=0, moves_to_go=30)
    assert plan is not None and plan.budget_ms == 1000 and not plan.may_stop_early


def test_go_parsing_skips_bad_values() -> None:
    go = parse_go("wtime 1000 btime x winc 5 searchmoves e2e4 d2d4 nodes 7 infinite bogus".split())
    assert (go.wtime, go.btime, go.winc, go.nodes, go.infinite, go.searchmoves) == \
        (1000, None, 5, 7, True, ("e2e4", "d2d4"))
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


# --- analysis: mates, MultiPV, WDL, ponder ---------------------------------------------------

BACK_RANK_MATE = "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1"  # Ra8#
MATE_IN_TWO = "k7/8/2K5/8/8/8/8/7R w - - 0 1"  # Kb6 Kb8 Rh8#


def test_a_mate_in_one_is_reported_as_mate_1_and_played(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board(BACK_RANK_MATE)
    info = engine.analyse(board, chess.engine.Limit(nodes=200))
    assert info["score"].relative == chess.engine.Mate(1)
    assert info["pv"][0] == chess.Move.from_uci("a1a8")
    assert engine.play(board, chess.engine.Limit(nodes=200)).move == chess.Move.from_uci("a1a8")


def test_mate_in_two_and_being_mated_are_reported_with_their_distance(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board(MATE_IN_TWO)
    info = engine.analyse(board, chess.engine.Limit(nodes=2000))
    assert info["score"].relative == chess.engine.Mate(2)
    line = board.copy()
    for move in info["pv"]:
        line.push(move)
    assert line.is_checkmate()
    mated = chess.Board("k7/8/1K6/8/8/8/8/7R b - - 0 1")  # Kb8 (forced) Rh8#
    assert engine.analyse(mated, chess.engine.Limit(nodes=200))["score"].relative == chess.engine.Mate(-1)


def test_multipv_3_gives_three_different_first_moves_each_with_a_score_and_a_line(
        engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")
    infos = engine.analyse(board, chess.engine.Limit(nodes=60), multipv=3)
    assert [info["multipv"] for info in infos] == [1, 2, 3]
    firsts = [info["pv"][0] for info in infos]
    assert len(set(firsts)) == 3
    for info in infos:
        assert "score" in info and info["nodes"] == 60
        line = board.copy()
        for move in info["pv"]:
            assert line.is_legal(move), (info["pv"], line.fen())
            line.push(move)


def test_wdl_is_shown_on_request_and_sums_to_1000(engine: chess.engine.SimpleEngine) -> None:
    engine.configure({"UCI_ShowWDL": True})
    try:
        for fen, nodes in ((chess.STARTING_FEN, 30), (BACK_RANK_MATE, 30), ("k7/8/8/8/8/8/1R6/K7 w - - 99 100", 30)):
            info = engine.analyse(chess.Board(fen), chess.engine.Limit(nodes=nodes))
            wdl = info["wdl"].relative
            assert wdl.total() == 1000 and min(wdl) >= 0, (fen, wdl)
            assert info["score"].relative.wdl(model="lichess").expectation() is not None
        assert info["wdl"].relative == chess.engine.Wdl(0, 1000, 0)  # a proven draw
    finally:
        engine.configure({"UCI_ShowWDL": False})


def test_wdl_of_a_wdl_network_has_draws_and_keeps_q(tmp_path: Path) -> None:
    torch.manual_seed(1)
    path = tmp_path / "wdl.pt"
    save_model(path, AlphaZeroNet(dataclasses.replace(get_preset("tiny").network, value_head="wdl")))
    out = io.StringIO()
    engine = UciEngine(None, path, "cpu", stdin=io.StringIO(""), stdout=out)
    engine.handle("setoption name UCI_ShowWDL value true")
    engine.handle("position startpos moves e2e4")
    engine.handle("go nodes 12")
    engine.wait()
    info = [line.split() for line in out.getvalue().splitlines() if " wdl " in line][-1]
    win, draw, loss = (int(word) for word in info[info.index("wdl") + 1:info.index("wdl") + 4])
    cp = int(info[info.index("cp") + 1])
    assert win + draw + loss == 1000 and min(win, draw, loss) >= 0
    assert draw > 0  # the network's draw probability, not the scalar head's 0
    assert (win - loss) / 1000 == pytest.approx(centipawns_to_value(cp), abs=0.01)


def test_bestmove_names_a_ponder_move_from_the_line(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board()
    board.push_uci("e2e4")
    result = engine.play(board, chess.engine.Limit(nodes=60))
    assert result.move is not None and result.ponder is not None  # `bestmove X ponder Y`
    board.push(result.move)
    assert board.is_legal(result.ponder)


def test_a_ponder_search_answers_only_after_ponderhit_or_stop(pipe: _Pipe) -> None:
    # A ponder search that ends its nodes early still withholds bestmove until ponderhit.
    pipe.send(b"position startpos moves e2e4 e7e5\ngo ponder nodes 5\nisready\n")
    assert not any(line.startswith("bestmove") for line in pipe.expect("readyok"))
    pipe.send(b"ponderhit\n")
    best = pipe.expect("bestmove")[-1].split()[1]
    board = chess.Board("rnbqkbnr/pppp1ppp/8/4p3/4P3/8/PPPP1PPP/RNBQKBNR w KQkq - 0 2")
    assert chess.Move.from_uci(best) in board.legal_moves
    # With a clock: no time runs while pondering; after ponderhit the normal budget applies.
    pipe.send(b"position startpos moves e2e4\ngo ponder wtime 2000 btime 2000\n")
    pipe.expect("info")  # the ponder search is running
    pipe.send(b"isready\n")
    assert not any(line.startswith("bestmove") for line in pipe.expect("readyok"))
    pipe.send(b"ponderhit\n")
    assert pipe.expect("bestmove", timeout=30)[-1].split()[1] != "0000"
    # The opponent played something else: the GUI stops the ponder search (its bestmove is discarded).
    pipe.send(b"position startpos moves d2d4\ngo ponder wtime 2000 btime 2000\nstop\n")
    assert pipe.expect("bestmove", timeout=30)[-1].split()[1] != "0000"
    pipe.send(b"ponderhit\nisready\n")  # a ponderhit with nothing to ponder is answered and ignored
    assert any("ponderhit ignored" in line for line in pipe.expect("readyok"))


def test_python_chess_can_play_with_pondering(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board()
    for _ in range(6):
        result = engine.play(board, chess.engine.Limit(nodes=8), ponder=True, game="ponder")
        assert result.move is not None and board.is_legal(result.move)
        board.push(result.move)
    engine.play(board, chess.engine.Limit(nodes=8), ponder=False, game="ponder")  # ends the ponder search


def test_a_100_ply_game_with_tree_reuse_stays_legal(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board()
    while len(board.move_stack) < 100 and not board.is_game_over(claim_draw=False):
        result = engine.play(board, chess.engine.Limit(nodes=6), game="reuse")
        assert result.move is not None and board.is_legal(result.move), (result.move, board.fen())
        board.push(result.move)
    assert len(board.move_stack) == 100 or board.is_game_over(claim_draw=False)


def test_the_tree_of_the_moves_played_is_kept_until_a_new_game(weights: Path) -> None:
    out = io.StringIO()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out)

    def search(position: str) -> int:
        engine.handle(position)
        engine.handle("go nodes 40")
        engine.wait()
        assert engine._search is not None
        return sum(visits for _, _, visits, _, _ in engine._search.root_stats(0))

    assert search("position startpos") == 40
    best = out.getvalue().split("bestmove ")[-1].split()[0]
    assert search(f"position startpos moves {best}") > 40  # the visits below our move were kept
    engine.handle("ucinewgame")
    assert search(f"position startpos moves {best}") == 40
    assert search("position startpos moves g1f3") == 40  # not a continuation of the last game: afresh
    engine.stop_search()


# --- many leaves per network call --------------------------------------------------------------

HANGING_QUEEN = "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"  # Rxd5


def _in_process(weights: Path | str, *options: str, clock: Any = None) -> tuple[UciEngine, io.StringIO]:
    out = io.StringIO()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out,
                       **({"clock": clock} if clock is not None else {}))
    for option in options:
        engine.handle(f"setoption name {option}")
    return engine, out


def _last_info(out: io.StringIO) -> dict[str, str]:
    line = [line for line in out.getvalue().splitlines() if " nps " in line][-1].split()
    return {key: line[line.index(key) + 1] for key in ("nodes", "nps", "time")}


def test_the_default_gathers_many_leaves_per_network_call(weights: Path) -> None:
    engine, out = _in_process(weights)
    engine.handle("position startpos")
    engine.handle("go nodes 3000")
    engine.wait()
    report = engine.last_report
    assert report is not None and report.nodes == int(_last_info(out)["nodes"]) == 3000
    default = next(option.default for option in OPTIONS if option.name == "LeavesPerBatch")
    assert isinstance(default, int) and default > 1
    # The batch grows with the tree (alphazero.search.UCI_VISITS_PER_LEAF): the first calls are small.
    assert report.leaves_per_batch > 8
    assert report.batches < 3000 / 8
    engine.handle("setoption name LeavesPerBatch value 1")
    engine.handle("go nodes 50")
    engine.wait()
    assert engine.last_report is not None and engine.last_report.leaves_per_batch == 1


def test_visits_per_leaf_sets_how_fast_the_batch_grows(weights: Path) -> None:
    def leaves_per_call(visits_per_leaf: int) -> float:
        engine, _ = _in_process(weights, f"VisitsPerLeaf value {visits_per_leaf}")
        engine.handle("position startpos")
        engine.handle("go nodes 256")
        engine.wait()
        assert engine.last_report is not None and engine.last_report.nodes == 256
        return engine.last_report.leaves_per_batch

    # 256 visits at 32 a leaf allow at most 8 leaves a call; 0 takes LeavesPerBatch (32) from the first call.
    assert leaves_per_call(32) <= 8 < leaves_per_call(0)


@pytest.mark.parametrize("leaves", [8, 64])
def test_a_batched_engine_mates_in_one_and_takes_a_hanging_queen(leaves: int) -> None:
    engine, out = _in_process("builtin", f"LeavesPerBatch value {leaves}")
    engine.handle(f"position fen {BACK_RANK_MATE}")
    engine.handle("go nodes 400")
    engine.wait()
    assert "score mate 1 " in out.getvalue() and out.getvalue().rstrip().endswith("bestmove a1a8")
    engine.handle(f"position fen {HANGING_QUEEN}")
    engine.handle("go nodes 400")
    engine.wait()
    assert out.getvalue().rstrip().split("\n")[-1].startswith("bestmove d2d5")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the GPU checks run it)")
def test_on_cuda_the_engine_replays_cuda_graphs_and_still_finds_the_mate_and_the_queen() -> None:
    out = io.StringIO()
    engine = UciEngine(None, "builtin", "cuda", stdin=io.StringIO(""), stdout=out)
    engine.handle("isready")
    network = engine._network
    # What the device's compute capability gives (bf16 from 8.0, float16 from 7.0: alphazero.nn.precision).
    device = network.evaluator.device if network is not None else torch.device("cuda")
    expected = f"graphs, {cuda_choice('auto', device, cuda_capability(device), float16=True).name}"
    assert network is not None and network.evaluator.describe_pass() == expected
    for fen, best in ((BACK_RANK_MATE, "a1a8"), (HANGING_QUEEN, "d2d5")):
        engine.handle(f"position fen {fen}")
        engine.handle("go nodes 400")
        engine.wait()
        assert out.getvalue().rstrip().split("\n")[-1].startswith(f"bestmove {best}")
    # Every batch size the searches sent replayed a captured graph, each checked once against float32 eager.
    assert network.evaluator.bucket_failures == {} and network.evaluator.fallbacks == []
    assert network.evaluator.describe_pass() == expected
    engine.stop_search()


def test_policy_temperature_flattens_the_engines_prior_and_refuses_what_is_not_a_temperature() -> None:
    engine, out = _in_process("builtin")
    engine.handle("position startpos moves e2e4 c7c5")

    def root_priors() -> dict[str, float]:
        engine.handle("go nodes 2")
        engine.wait()
        assert engine._search is not None
        return engine._search.priors(0)

    sharp = root_priors()
    engine.handle("setoption name PolicyTemperature value 2")
    flat = root_priors()
    # softmax(l / 2) is the renormalised square root of softmax(l).
    roots = {uci: math.sqrt(p) for uci, p in sharp.items()}
    total = sum(roots.values())
    assert flat.keys() == sharp.keys()
    assert flat == pytest.approx({uci: r / total for uci, r in roots.items()}, rel=1e-4, abs=1e-7)
    for bad in ("0", "-1", "hot"):
        engine.handle(f"setoption name PolicyTemperature value {bad}")
        assert "info string ignored" in out.getvalue().splitlines()[-1]
    assert root_priors() == pytest.approx(flat, rel=1e-6)
    engine.handle("setoption name PolicyTemperature value <empty>")
    assert root_priors() == pytest.approx(sharp, rel=1e-6)


def test_cpuct_sets_the_engines_exploration_and_refuses_what_is_not_a_constant() -> None:
    engine, out = _in_process("builtin")
    engine.handle("position startpos moves e2e4 c7c5")

    def root_visits() -> list[int]:
        engine.handle("go nodes 300")
        engine.wait()
        assert engine._search is not None and engine._search_key is not None
        return sorted((visits for _, _, visits, _, _ in engine._search.root_stats(0)), reverse=True)

    own = root_visits()
    assert engine._search_key[1].c_init == 1.25  # the built-in network's own search.c_init
    engine.handle("setoption name CPuct value 0")
    greedy = root_visits()
    engine.handle("setoption name CPuct value 8")
    wide = root_visits()
    assert engine._search_key[1].c_init == 8.0
    # More exploration spreads the same nodes over more moves, and gives the favourite fewer.
    assert sum(v > 0 for v in wide) > sum(v > 0 for v in greedy)
    assert wide[0] < greedy[0]
    for bad in ("-1", "inf", "wide"):
        engine.handle(f"setoption name CPuct value {bad}")
        assert "info string ignored" in out.getvalue().splitlines()[-1]
    engine.handle("setoption name CPuct value <empty>")
    assert root_visits() == own


def test_nps_counts_the_nodes_of_the_whole_search_over_its_whole_time(weights: Path) -> None:
    # Regression: after ponderhit, nps divided every node searched while pondering by the
    # milliseconds since the ponderhit.
    clock = SteppingClock()
    engine, out = _in_process(weights, clock=clock)
    engine.handle("position startpos moves e2e4")
    engine.handle("go ponder wtime 600000 btime 600000")
    while clock.now < 0.6:  # the engine's clock has run 0.6 s of pondering
        assert not engine.wait(timeout=0.01), "the ponder search ended by itself"
    engine.handle("ponderhit")
    engine.handle("stop")
    info = _last_info(out)
    assert int(info["nps"]) <= int(info["nodes"]) / 0.6  # the search has run 0.6 s at least
    assert engine.last_report is not None and engine.last_report.seconds >= 0.6


def test_threads_sets_torchs_threads_and_0_restores_its_default() -> None:
    default = torch.get_num_threads()
    engine, out = _in_process("builtin", "Threads value 1")
    try:
        assert torch.get_num_threads() == 1
        engine.handle("isready")
        assert "on cpu (1 thread: Threads 1)" in out.getvalue()
        engine.handle("setoption name Threads value 0")
        assert torch.get_num_threads() == DEFAULT_THREADS  # no load has chosen yet: torch's own choice
    finally:
        torch.set_num_threads(default)


def test_the_network_is_loaded_and_run_on_one_thread_for_the_engines_life(
        weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's OpenMP keeps a pool of workers per thread that ran it: loading on the main thread and
    searching on a new thread per `go` made every pass slower (eval.uci_search.NetworkThread)."""
    used: list[tuple[str, int]] = []
    real_load = uci_module.load_network

    def load_network(*args: object, **kwargs: object) -> object:
        used.append(("load", threading.get_ident()))
        network = real_load(*args, **kwargs)  # type: ignore[arg-type]
        evaluate = network.evaluator.evaluate_legal

        def evaluate_legal(*arrays: object) -> object:
            used.append(("evaluate", threading.get_ident()))
            return evaluate(*arrays)

        network.evaluator.evaluate_legal = evaluate_legal  # type: ignore[method-assign]
        return network

    monkeypatch.setattr(uci_module, "load_network", load_network)
    engine, out = _in_process(weights)
    engine.handle("isready")
    for moves in ("", " moves e2e4", " moves e2e4 e7e5"):
        engine.handle(f"position startpos{moves}")
        engine.handle("go nodes 40")
        engine.wait()
    engine.handle("quit")
    assert [kind for kind, _ in used[:2]] == ["load", "evaluate"] and len(used) > 3
    assert len({ident for _, ident in used}) == 1
    assert used[0][1] != threading.get_ident()
    assert out.getvalue().count("bestmove") == 3


# --- the `uci` player: our engine in matches, by movetime and on a clock --------------------------


def test_the_uci_players_options_name_the_engines_options() -> None:
    from eval.agents import UCI_AGENT_OPTIONS

    assert set(UCI_AGENT_OPTIONS.values()) <= {option.name for option in OPTIONS}


def test_the_uci_player_sets_the_engines_action_value_and_memory_options(weights: Path, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 68's search uses are measured through `match ... uci:fpu=action_value,...`: the keys must reach
    # the engine's options, and a value the engine refuses must say so in one line.
    from eval.agents import UciAgent, parse_player

    monkeypatch.setenv("PYTHONPATH", repo_env()["PYTHONPATH"])
    spec = f"uci:weights={weights},threads=1,fpu=action_value,unvisited=action_value,treemb=64,nodes=8"
    with parse_player(spec, run=tmp_path, device="cpu") as agent:
        assert isinstance(agent, UciAgent)
        board = chess.Board()
        agent.new_game()
        assert board.is_legal(agent.choose([board])[0].move)
    with pytest.raises(UserError, match="refused an option"):
        parse_player(f"uci:weights={weights},threads=1,fpu=sometimes", run=tmp_path, device="cpu")


def test_the_uci_player_plays_by_movetime_and_on_a_clock(weights: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from eval.agents import UciAgent, parse_player

    monkeypatch.setenv("PYTHONPATH", repo_env()["PYTHONPATH"])
    spec = f"uci:weights={weights},leaves=4,threads=1,overhead=0,movetime=50"
    with parse_player(spec, run=tmp_path, device="cpu") as agent:
        assert isinstance(agent, UciAgent) and agent.plays_on_clock
        assert agent.name == f"uci:weights={weights},leaves=4,threads=1,overhead=0,movetime=50"
        board = chess.Board()
        agent.new_game()
        choice = agent.choose([board])[0]
        assert board.is_legal(choice.move) and choice.info["nodes"] >= 1 and "nps" in choice.info
        board.push(choice.move)
        clock = chess.engine.Limit(white_clock=1.0, black_clock=1.0, white_inc=0.05, black_inc=0.05)
        assert board.is_legal(agent.choose_on_clock(board, clock).move)


def _engine_children() -> list[int]:
    """This process's child processes that run `alphazero uci`, from /proc."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            ppid = next(line for line in status.read_text().splitlines() if line.startswith("PPid:")).split()[1]
            cmdline = (status.parent / "cmdline").read_bytes().split(b"\0")
        except (OSError, StopIteration):
            continue  # ended while read
        if int(ppid) == os.getpid() and b"alphazero" in cmdline and b"uci" in cmdline:
            found.append(int(status.parent.name))
    return found


def test_the_uci_players_processes_search_the_boards_of_one_call_each_its_own(weights: Path, tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from eval.agents import parse_player

    monkeypatch.setenv("PYTHONPATH", repo_env()["PYTHONPATH"])
    before = set(_engine_children())
    with parse_player(f"uci:weights={weights},threads=1,nodes=8,processes=2", run=tmp_path, device="cpu") as agent:
        assert len(set(_engine_children()) - before) == 2
        assert any(note.startswith("network: ") for note in agent.notes), agent.notes
        # Three boards whose legal moves share none: each choice must be its own board's.
        boards = [chess.Board(), chess.Board(), chess.Board("7k/8/8/8/8/8/8/K5R1 w - - 0 1")]
        boards[1].push_san("e4")
        choices = agent.choose(boards)
        for i, choice in enumerate(choices):
            assert [board.is_legal(choice.move) for board in boards] == [j == i for j in range(3)]
        clock = chess.engine.Limit(white_clock=1.0, black_clock=1.0, white_inc=0.05, black_inc=0.05)
        assert boards[1].is_legal(agent.choose_on_clock(boards[1], clock).move)
    assert set(_engine_children()) - before == set()
    with pytest.raises(UserError, match="processes must be at least 1, got 0"):
        parse_player(f"uci:weights={weights},processes=0", run=tmp_path, device="cpu")


def test_two_settings_of_the_engine_play_a_clocked_match(weights: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from alphazero.app import cli

    monkeypatch.setenv("PYTHONPATH", repo_env()["PYTHONPATH"])
    players = [f"uci:weights={weights},leaves=4,threads=1", "vs", f"uci:weights={weights},leaves=1,threads=1"]
    assert cli.main(["match", *players, "--clock", "3+0.05", "--games", "2", "--ply-limit", "16", "--run",
                     str(tmp_path / "run"), "--no-progress"]) == 0
    records = [json.loads(line) for line in next((tmp_path / "run" / "eval").glob("*.jsonl")).read_text().splitlines()]
    assert len(records) == 2 and all(r["time_control"] == "3+0.05" for r in records)
    assert all(r["termination"] != "time_forfeit" for r in records)


# --- a search hears stop and its deadline whatever the tree holds ------------------------------


def _quiet_history(plies: int = 1600, seed: int = 1) -> tuple[str, list[str]]:
    """A game of `plies`+ moves with no capture or pawn move, ending where no capture is possible:
    every move then ends the game by the fifty-move rule. Seeded; about 0.3 s."""
    rng = random.Random(seed)
    fen = "r1b1k1nr/8/8/8/8/8/8/R1B1K1NR w - - 0 1"
    board = chess.Board(fen)
    seen: set[object] = set()
    while len(board.move_stack) < plies or any(board.is_capture(m) for m in board.legal_moves):
        quiet = [m for m in board.legal_moves if not board.is_capture(m)]
        rng.shuffle(quiet)
        for move in quiet:
            board.push(move)
            key = board._transposition_key()
            fine = key not in seen and any(board.legal_moves) and not board.is_insufficient_material()
            board.pop()
            if fine:
                board.push(move)
                seen.add(key)
                break
        else:
            board.pop()  # a dead end: take the last move back and try another
    return fen, [move.uci() for move in board.move_stack]


def test_a_position_whose_every_move_ends_the_game_keeps_the_time_limit(weights: Path) -> None:
    # Regression: every simulation ended the game (scored exactly), the search never returned to check
    # its clock, and `go movetime 1000` answered after 2.7 s. On a clock that moves only when read, such a
    # search would never end; this one must end at its deadline.
    report = _timed_search(weights, "k7/8/8/8/8/8/1R6/K7 w - - 99 100", "go movetime 300")
    assert report.seconds <= 0.26


def test_stop_is_heard_after_a_long_quiet_history(weights: Path) -> None:
    # Regression: after 1,600 plies without a capture, `go infinite` + `stop` answered after 24 s.
    # The search runs until stop (the engine's clock moves only when read); stop is sent once the
    # search has reported, and must end it with a legal move.
    fen, moves = _quiet_history()
    engine, out = _in_process(weights, clock=SteppingClock(step=0.05))  # an info line every few readings
    engine.handle(f"position fen {fen} moves {' '.join(moves)}")
    engine.handle("go infinite")
    while " nps " not in out.getvalue():
        assert not engine.wait(timeout=0.05), "the infinite search ended by itself"
    engine.handle("stop")
    board = chess.Board(fen)
    for uci in moves:
        board.push_uci(uci)
    best = out.getvalue().split("bestmove ")[-1].split()[0]
    assert chess.Move.from_uci(best) in board.legal_moves


# --- bad option values and network sources --------------------------------------------------------


def test_a_bad_weights_value_is_refused_and_the_old_one_kept(weights: Path, tmp_path: Path) -> None:
    # Regression: a 300-character Weights value made every later isready and go fail (OSError).
    # The engine names a run that does not exist, so an empty Weights (the run's checkpoint) is refused too.
    out = io.StringIO()
    engine = UciEngine(tmp_path / "misspelt", weights, "cpu", stdin=io.StringIO(""), stdout=out)
    for value in ("w" * 300, "/nonexistent/net.pt", str(weights) + "\x00x", ""):
        engine.handle(f"setoption name Weights value {value}")
        assert engine.values["Weights"] == str(weights)
    engine.handle("isready")
    engine.handle("position startpos")
    engine.handle("go nodes 4")
    engine.wait()
    lines = out.getvalue().splitlines()
    refusals = [line for line in lines if line.startswith("info string ignored Weights")]
    assert len(refusals) == 4 and any("File name too long" in line for line in refusals)
    assert lines[-1].startswith("bestmove ") and lines[-1] != "bestmove 0000"
    assert not any("error" in line for line in lines), lines


@pytest.mark.parametrize("flag", ["--weights", "--run"])
def test_an_unusable_path_on_the_command_line_is_one_line_and_exit_2(
        flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    from alphazero.app import cli

    assert cli.main(["uci", flag, "p" * 300, "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("alphazero uci: error:") and "File name too long" in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_run_without_checkpoints_needs_fresh(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # Regression: a misspelt --run silently played with random weights.
    from alphazero.app import cli

    misspelt = tmp_path / "runs" / "defualt"
    assert cli.main(["uci", "--run", str(misspelt), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "--fresh" in err and len(err.strip().splitlines()) == 1
    monkeypatch.setattr(sys, "stdin", io.StringIO("uci\nisready\nquit\n"))
    assert cli.main(["uci", "--run", str(misspelt), "--fresh", "--device", "cpu", "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert "uciok" in captured.out and "readyok" in captured.out and "freshly initialised" in captured.out


def test_the_uci_engine_does_not_import_the_cli() -> None:
    # The argument declaration and runner live in eval/cli.py alone; eval/uci.py is the engine.
    tree = ast.parse((ROOT / "eval" / "uci.py").read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not any(name and (name == "eval.cli" or name.startswith("alphazero.app.cli")) for name in imported)


def test_the_precision_option_sets_what_the_network_runs_in(weights: Path) -> None:
    # Issue 32: auto, bf16 or float32 on a CPU; the engine says which (and why) when it loads the network.
    # float16 is a GPU's (issue 69): a CPU takes it and runs float32, saying so.
    option = next(option for option in OPTIONS if option.name == "Precision")
    assert "float16" in option.choices and "GPU" in option.help and "compute capability" in option.help
    for value, said in (("float32", "float32 (forced)"), ("bf16", "bf16 (forced"), ("fp8", None),
                        ("float16", "float32 (float16 is for CUDA")):
        out = io.StringIO()
        commands = f"uci\nsetoption name Precision value {value}\nisready\nposition startpos\ngo nodes 8\nquit\n"
        UciEngine(None, weights, "cpu", stdin=io.StringIO(commands), stdout=out, stderr=io.StringIO(),
                  threads=1).run()
        lines = out.getvalue().splitlines()
        network = [line for line in lines if line.startswith("info string network:")]
        assert any(line.startswith("bestmove") for line in lines)
        if said is None:  # refused with a message; the default (auto, float32 in tests) stays
            assert any("Precision" in line and "fp8" in line for line in lines if line.startswith("info string"))
            assert network and "float32" in network[0]
        else:
            assert network and said in network[0], network


def test_the_exchange_cutechess_drives_plays_a_legal_game_on_a_fast_clock(pipe: _Pipe) -> None:
    """cutechess-cli's sequence: uci, setoption, isready, ucinewgame, isready, then per move `position startpos
    moves ...` and `go wtime btime winc binc` (1+0.01 s, the fastest clock people use), a `stop`, and quit."""
    pipe.send(b"uci\n")
    pipe.expect("uciok")
    pipe.send(b"setoption name Threads value 1\nisready\n")
    pipe.expect("readyok")
    pipe.send(b"ucinewgame\nisready\n")
    pipe.expect("readyok")
    board, clocks = chess.Board(), {chess.WHITE: 1000, chess.BLACK: 1000}
    for ply in range(20):
        moves = " ".join(move.uci() for move in board.move_stack)
        position = f"position startpos moves {moves}" if moves else "position startpos"
        go = f"go wtime {clocks[chess.WHITE]} btime {clocks[chess.BLACK]} winc 10 binc 10"
        pipe.send(f"{position}\n{go}\n".encode() + (b"stop\n" if ply == 7 else b""))
        move = chess.Move.from_uci(pipe.expect("bestmove")[-1].split()[1])
        assert move in board.legal_moves, (board.fen(), move)  # python-chess as the oracle
        board.push(move)
        clocks[not board.turn] = max(clocks[not board.turn] - 40 + 10, 100)  # as if each move took 40 ms
        if board.is_game_over():
            break
    pipe.send(b"quit\n")
    assert pipe.process.wait(timeout=10) == 0
