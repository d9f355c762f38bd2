"""`alphazero bench network --beside "NAME KEY=VALUE ..."`: a variant measured beside each preset in one process."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from alphazero.app import cli
from alphazero.app.bench import network as bench_network
from alphazero.app.bench.network import Variant, beside_variant, measure_side_by_side

TINY = ["bench", "network", "--preset", "tiny", "--batch-sizes", "2", "--seconds", "0.02", "--device", "cpu",
        "--threads", "1"]


# --- the parser ------------------------------------------------------------------------------------------------


def test_a_variant_is_a_name_then_its_overrides() -> None:
    assert beside_variant("se network.se_ratio=2") == Variant("se", ("network.se_ratio=2",))
    assert beside_variant("  wide  network.filters=64 network.blocks=2 ") == \
        Variant("wide", ("network.filters=64", "network.blocks=2"))
    args = cli.build_parser().parse_args([*TINY, "--beside", "se network.se_ratio=2", "--beside",
                                          "se4 network.se_ratio=4"])
    assert args.variants == [Variant("se", ("network.se_ratio=2",)), Variant("se4", ("network.se_ratio=4",))]
    assert cli.build_parser().parse_args(TINY).variants == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("se", "variant 'se' has no overrides"),
        ("network.se_ratio=2", "a variant is a name, then its overrides"),
        ("", "a variant is a name, then its overrides"),
        ("se network.se_ratio", "an override must look like section.key=value, got 'network.se_ratio'"),
        ("se se_ratio=2", "an override must look like section.key=value, got 'se_ratio=2'"),
    ],
)
def test_a_malformed_variant_is_refused_with_a_message(capsys: pytest.CaptureFixture[str], text: str,
                                                        message: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main([*TINY, "--beside", text])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --beside" in err and message in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        (["big network.se_ratio=64"], "--beside 'big' on preset tiny: network.se_ratio (64) must be at most "
                                      "network.filters (32)"),
        (["x network.nope=1"], "--beside 'x' on preset tiny: unknown config key network.nope"),
        (["se network.se_ratio=2", "se network.se_ratio=4"], "--beside 'se' is given twice"),
    ],
)
def test_a_variant_that_does_not_build_ends_the_bench_before_it_measures(
        capsys: pytest.CaptureFixture[str], variants: list[str], message: str) -> None:
    assert cli.main([*TINY, *(arg for variant in variants for arg in ("--beside", variant))]) == 2
    captured = capsys.readouterr()
    assert message in captured.err and "Traceback" not in captured.err and "evals/s" not in captured.out


# --- the measuring ---------------------------------------------------------------------------------------------


class _Clock:
    """Stands in for the time module: its clock moves only when a pass runs (2 ms a pass)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class _Logged:
    """An Evaluator's bench surface that logs its passes and moves the clock."""

    def __init__(self, name: str, log: list[str], clock: _Clock) -> None:
        self.name, self.log, self.clock = name, log, clock

    def pin(self, arrays: tuple[np.ndarray, ...]) -> tuple[np.ndarray, ...]:
        return tuple(np.zeros_like(array) for array in arrays)

    def evaluate_legal(self, *arrays: Any) -> None:
        self.log.append(self.name)
        self.clock.now += 0.002

    def profile_legal(self, *arrays: Any) -> dict[str, float]:
        return {"input": 0.001, "forward": 0.0005, "output": 0.0005}


def test_the_preset_and_a_variant_are_timed_in_alternating_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    clock, log = _Clock(), []
    monkeypatch.setattr(bench_network, "time", clock)
    evaluators: list[Any] = [_Logged("preset", log, clock), _Logged("se", log, clock)]
    points = measure_side_by_side(evaluators, 4, 0.005, np.random.default_rng(0))
    # Each warms up (3 passes, then 1 that sizes its rounds: 1 pass at 2 ms), then 5 rounds of each, the order
    # turning round every round, so that a slow spell of the machine falls on both alike.
    assert log == ["preset"] * 4 + ["se"] * 4 + ["preset", "se", "se", "preset"] * 2 + ["preset", "se"]
    assert [(point.batch, point.seconds_per_pass, point.stages) for point in points] == \
        [(4, pytest.approx(0.002), {"input": 0.001, "forward": 0.0005, "output": 0.0005})] * 2


# --- a tiny real run -------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("one_torch_thread")
def test_bench_network_prints_a_variants_row_and_its_ratio_to_the_preset(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([*TINY, "--precision", "float32,bf16", "--beside", "se network.se_ratio=2"]) == 0
    out = capsys.readouterr().out
    table = [line for line in out.splitlines() if line.startswith("│")]
    variant_rows = [line for line in table if "tiny + se" in line]
    assert len(variant_rows) == 2  # float32, then bf16
    assert all(re.search(r"│ +se \d+\.\d\dx │$", line) for line in variant_rows)
    assert "vs preset" in out
    for precision in ("float32", "bf16"):
        assert re.search(rf"tiny \+ se vs tiny on cpu, eager, {precision}: evals/s \d+\.\d\dx at batch 1, "
                         rf"\d+\.\d\dx at batch 2", out)
