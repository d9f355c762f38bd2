"""The engine loads its network at `isready`, before any clock runs, says what it loaded where a client parses
it, says a parity fallback, and runs the precision every engine on the machine runs."""

from __future__ import annotations

import io
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chess
import chess.engine
import pytest

import eval.uci as uci_module
from alphazero.nn.parity import ParitySettings
from alphazero.user_cache import CACHE_ENV
from eval.engine_agents import UciAgent
from eval.uci import UciEngine

CLOCK = chess.engine.Limit(white_clock=5.0, black_clock=5.0, white_inc=0.1, black_inc=0.1)


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's engines keep their precision in a cache of its own (not the user's)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


def _precision(notes: list[str]) -> str:
    """The precision part of the engine's `network:` note (what follows its device and threads)."""
    line = next(note for note in notes if note.startswith("network: "))
    return line.split("), ", 1)[1]


def _engine_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines python-chess received from engines while caplog ran (its debug log: '<engine>: >> line')."""
    return [record.getMessage().split(": >> ", 1)[1] for record in caplog.records if ": >> " in record.getMessage()]


def test_the_network_loads_at_isready_before_the_first_clock(weights: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    agent = UciAgent(flags=["--weights", str(weights), "--device", "cpu"])
    try:
        assert any(note.startswith(f"network: weights {weights.name} on cpu") for note in agent.notes), agent.notes
        if os.environ.get("OMP_WAIT_POLICY", "").lower() != "passive":
            assert any("busy elsewhere, following the load" in note for note in agent.notes), agent.notes
        with caplog.at_level(logging.DEBUG, logger="chess.engine"):
            choice = agent.choose_on_clock(chess.Board(), CLOCK)
        lines = _engine_lines(caplog)
        assert any(line.startswith("bestmove") for line in lines) and choice.move is not None
        # Nothing was loaded on the move's clock: no load's note between the move's first line and its bestmove.
        assert not [line for line in lines if line.startswith("info string network:")], lines
        assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    finally:
        agent.close()


def test_go_measures_its_time_from_after_the_load(weights: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A GUI that sends no isready has the network loaded at its first `go`: the search's clock starts after."""
    offset = [0.0]
    loads = [0]
    real_load = uci_module.load_network

    def slow_load(*args: Any, **kwargs: Any) -> Any:
        loads[0] += 1
        offset[0] += 1000.0  # the load takes 1000 s on the engine's clock
        return real_load(*args, **kwargs)

    monkeypatch.setattr(uci_module, "load_network", slow_load)
    clock: Callable[[], float] = lambda: time.monotonic() + offset[0]  # noqa: E731
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=io.StringIO(), clock=clock)
    engine.handle("position startpos")
    engine.handle("go wtime 10000 btime 10000")
    assert engine.wait(timeout=120)
    assert loads == [1]
    assert engine.last_report is not None and engine.last_report.budget_ms is not None
    assert engine.last_report.seconds < 1000.0  # the load's 1000 s are not the move's
    engine.handle("isready")
    engine.handle("go wtime 10000 btime 10000")
    assert engine.wait(timeout=120) and loads == [1]  # loaded once: isready and go found it loaded


def test_a_parity_fallback_is_said_with_the_network_the_error_and_the_precision_left(weights: Path) -> None:
    out = io.StringIO()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out)
    engine.handle("setoption name Precision value bf16")  # (emulated where the processor has no bf16: still runs)
    engine.handle("isready")
    network = engine._network
    assert network is not None and network.evaluator.precision == "bf16"
    network.evaluator.parity = ParitySettings("always", 1.0, atol=-1.0, rtol=0.0)  # no pass can be close enough
    engine.handle("position startpos")
    engine.handle("go nodes 16")
    assert engine.wait(timeout=120)
    said = [line for line in out.getvalue().splitlines() if "parity check failed" in line]
    assert len(said) == 1, out.getvalue()  # said once: the pass runs float32 eager from then on
    assert said[0].startswith(f"info string warning: weights {weights.name}: parity check failed, precision now "
                              f"float32: the forward pass (eager, bf16) differs from float32 eager")
    assert "running eager, float32 from now on" in said[0]
    engine.handle("isready")
    assert "float32 (bf16 differed from float32 eager: the parity check fell back)" in \
        network.evaluator.precision_text()


def test_two_engines_on_one_machine_run_the_same_precision(weights: Path, tmp_path: Path) -> None:
    first = UciAgent(flags=["--weights", str(weights), "--device", "cpu"])
    try:
        second = UciAgent(flags=["--weights", str(weights), "--device", "cpu"])
        try:
            assert _precision(first.notes).split(" ")[0] == _precision(second.notes).split(" ")[0]
            if "measured now" in _precision(first.notes):  # a processor with native bf16: timed once, kept
                assert "kept in" in _precision(second.notes) and "measured now" not in _precision(second.notes)
                assert (tmp_path / "cache" / "precision.json").exists()
        finally:
            second.close()
    finally:
        first.close()
