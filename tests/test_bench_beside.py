"""`alphazero bench beside`: its engines' specs and its turns (the measuring itself runs engines for minutes)."""

from __future__ import annotations

import argparse
import os

import chess.engine
import pytest

from alphazero.app.bench import beside
from alphazero.app.bench.beside import ROOT, EngineSpec, _engine_spec
from alphazero.errors import UserError
from eval.engine_agents import UciAgent


def test_an_engine_is_a_label_a_checkout_and_options_of_its_own() -> None:
    assert _engine_spec(f"before={ROOT}") == EngineSpec("before", ROOT)
    assert _engine_spec(f"one={ROOT},Threads=1,Hash=64").options == (("Threads", "1"), ("Hash", "64"))


def test_an_engines_environment_variables_reach_its_process_and_no_other(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, str]] = []

    def popen_uci(command: list[str], **kwargs: object) -> object:
        seen.append(dict(kwargs["env"] or os.environ))  # type: ignore[call-overload]  # (None: this process's)
        raise OSError("no engine started in this test")

    monkeypatch.setattr(chess.engine.SimpleEngine, "popen_uci", popen_uci)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    spec = _engine_spec(f"spin={ROOT},Threads=1,env:GOMP_SPINCOUNT=10000")
    assert spec.options == (("Threads", "1"),) and spec.environment == (("GOMP_SPINCOUNT", "10000"),)
    for engine in (spec, _engine_spec(f"plain={ROOT}")):
        with pytest.raises(OSError, match="no engine"):
            beside._measure(engine, "builtin", {}, 10)
    assert seen[0]["GOMP_SPINCOUNT"] == "10000" and seen[0]["PYTHONPATH"] == str(ROOT)
    assert "GOMP_SPINCOUNT" not in seen[1]
    # The match's engines (--match) start the same way, through the match's UCI player.
    for environment in ({"GOMP_SPINCOUNT": "10000"}, None):
        with pytest.raises(UserError, match="cannot start the UCI engine"):
            UciAgent(environment=environment)
    assert seen[2]["GOMP_SPINCOUNT"] == "10000" and "GOMP_SPINCOUNT" not in seen[3]
    assert "GOMP_SPINCOUNT" not in os.environ


@pytest.mark.parametrize("text", ["nolabel", f"={ROOT}", "x=/no/such/checkout", f"x={ROOT},Threads"])
def test_a_malformed_engine_is_refused_with_a_message(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="LABEL=DIR"):
        _engine_spec(text)


def test_engines_take_turns_round_by_round_beside_each_busy_count(monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    calls: list[tuple[str, int, dict[str, str]]] = []
    started: list[int] = []
    rates = {"a": 1000.0, "b": 500.0}

    def measure(spec: EngineSpec, weights: str, options: dict[str, str], movetime: int) -> tuple[float, list[str]]:
        label = "a" if "Threads" not in options else "b"
        calls.append((label, started[-1], options))
        return rates[label] / (1 + started[-1]), [f"network: x on cpu (2 threads), bf16 ({label})"]

    monkeypatch.setattr(beside, "_measure", measure)
    def busy_processes(count: int) -> list[object]:
        started.append(count)
        return []

    monkeypatch.setattr(beside, "_busy_processes", busy_processes)
    monkeypatch.setattr(beside, "_ambient_load", lambda meter: 0.0)
    parser = argparse.ArgumentParser()
    beside.add_arguments(parser)
    beside.run(parser.parse_args(["--engine", f"a={ROOT}", "--engine", f"b={ROOT},Threads=1", "--busy", "2",
                                  "--rounds", "2", "--option", "Hash=64"]))
    assert started == [0, 2]
    assert [(label, busy) for label, busy, _ in calls] == [("a", 0), ("b", 0), ("b", 0), ("a", 0),
                                                          ("a", 2), ("b", 2), ("b", 2), ("a", 2)]
    assert calls[1][2] == {"Hash": "64", "Threads": "1"}
    out = capsys.readouterr().out
    assert "beside 2 busy         a:      333 nodes/s (33% of alone)" in out
