"""Numbers on the command line: a NaN, an infinity, a zero or a count too large is refused in one line, exit 2,
before the command's work starts (and never minutes later, as a traceback from deep inside)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from alphazero.app import cli
from alphazero.errors import UserError

NON_POSITIVE = ("nan", "inf", "1e309", "0", "-1")
BAD_GPUS = ("-1", "nan", "inf", "1e300")
BAD_THREADS = ("-1", "1025", "99999999999999999999")

FLAGS = [
    # (the command line before the flag, the flag, its bad values, the function the command's work starts in)
    (["train", "--run", "{run}"], "--minutes", NON_POSITIVE, "alphazero.app.train.run"),
    (["train", "--run", "{run}"], "--gpus", BAD_GPUS, "alphazero.app.train.run"),
    (["selfplay", "--run", "{run}"], "--minutes", NON_POSITIVE, "selfplay.cli.run"),
    (["selfplay", "--run", "{run}"], "--gpus", BAD_GPUS, "selfplay.cli.run"),
    (["selfplay", "--run", "{run}"], "--games", ("0", "-1"), "selfplay.cli.run"),
    (["learn", "--run", "{run}", "--steps", "1"], "--threads", BAD_THREADS,
     "alphazero.store.rundir.open_run_from_args"),
    (["learn", "--run", "{run}"], "--poll-seconds", ("nan", "inf", "0"), "alphazero.store.rundir.open_run_from_args"),
    (["learn", "--run", "{run}"], "--clip-grad-norm", ("nan", "inf"), "alphazero.store.rundir.open_run_from_args"),
    (["pretrain", "--run", "{run}", "--steps", "1"], "--threads", BAD_THREADS, "learner.cli.run_pretrain"),
    (["curve", "--run", "{run}", "--no-play"], "--per-hour", NON_POSITIVE, "eval.curve.run_curve_command"),
    (["bench", "search"], "--games", ("0", "-1", "99999999999"), "alphazero.app.bench.search.run"),
    (["bench", "search"], "--simulations", ("0", "-1"), "alphazero.app.bench.search.run"),
    (["bench", "search"], "--seconds", NON_POSITIVE, "alphazero.app.bench.search.run"),
    (["bench", "uci"], "--seconds", NON_POSITIVE, "alphazero.app.bench.uci.run"),
    (["bench", "uci"], "--threads", BAD_THREADS, "alphazero.app.bench.uci.run"),
    (["bench", "uci"], "--game-movetime", ("0",), "alphazero.app.bench.uci.run"),
    (["bench", "uci"], "--game-plies", ("-1",), "alphazero.app.bench.uci.run"),
    (["bench", "uci"], "--visits-per-leaf", ("-1",), "alphazero.app.bench.uci.run"),
    (["bench", "learner"], "--seconds", NON_POSITIVE, "alphazero.app.bench.learner.run"),
    (["bench", "learner"], "--batch-size", ("-1",), "alphazero.app.bench.learner.run"),
    (["bench", "learner"], "--threads", BAD_THREADS, "alphazero.app.bench.learner.run"),
    (["bench", "network"], "--seconds", ("nan", "inf", "0"), "alphazero.app.bench.network.run"),
    (["bench", "network"], "--max-pass-seconds", ("nan", "inf", "0"), "alphazero.app.bench.network.run"),
    (["bench", "selfplay"], "--seconds", NON_POSITIVE, "alphazero.app.bench.selfplay.run"),
    (["bench", "selfplay"], "--actors", ("0",), "alphazero.app.bench.selfplay.run"),
    (["bench", "selfplay"], "--gpus", BAD_GPUS, "alphazero.app.bench.selfplay.run"),
    (["bench", "beside"], "--match", ("abc", "10+inf", "0"), "alphazero.app.bench.beside.run"),
    (["bench", "beside"], "--movetime", ("0",), "alphazero.app.bench.beside.run"),
    (["bench", "beside"], "--rounds", ("0",), "alphazero.app.bench.beside.run"),
    (["bench", "beside"], "--match-games", ("0",), "alphazero.app.bench.beside.run"),
    (["doctor"], "--seconds", NON_POSITIVE, "alphazero.app.doctor.run"),
    (["doctor"], "--threads", BAD_THREADS, "alphazero.app.doctor.run"),
]
CASES = [(start, flag, value, target) for start, flag, values, target in FLAGS for value in values]


def _work_started(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("the command's work started: the bad value was let through")


@pytest.mark.parametrize(("start", "flag", "value", "target"), CASES,
                         ids=[f"{' '.join(c[0][:2] if c[0][0] == 'bench' else c[0][:1])} {c[1]} {c[2]}"
                              for c in CASES])
def test_a_bad_number_is_refused_in_one_line_before_the_work_starts(
        start: list[str], flag: str, value: str, target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(target, _work_started)
    with pytest.raises(SystemExit) as exit_info:
        # FLAG=VALUE: a lone -1 would be read as an option, not as the flag's value
        cli.main([*(part.format(run=tmp_path / "run") for part in start), f"{flag}={value}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    said = err.strip().splitlines()[-1]
    assert said.startswith("alphazero ") and f": error: argument {flag}: " in said and repr(value) in said, err
    assert "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("kind", "text", "value"), [
    ("positive_float", "1e-3", 1e-3), ("positive_float", "1e308", 1e308), ("gpu_count", "0", 0.0),
    ("gpu_count", "0.5", 0.5), ("gpu_count", "1024", 1024.0), ("positive_int", "1", 1),
    ("positive_int", "2147483647", 2**31 - 1), ("nonnegative_int", "0", 0), ("thread_count", "0", 0),
    ("thread_count", "1024", 1024),
])
def test_the_edges_of_each_range_are_taken(kind: str, text: str, value: float) -> None:
    import alphazero.arguments

    assert getattr(alphazero.arguments, kind)(text) == value


def test_pretrain_refuses_infinite_minutes_before_the_run_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # Once a 'deadline' timer's OverflowError, printed from its thread, and exit status 0.
    monkeypatch.setattr("learner.cli.open_run_from_args", _work_started)
    assert cli.main(["pretrain", "--run", str(tmp_path / "run"), "--minutes", "inf", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "alphazero pretrain: error: --minutes must be positive and finite, got inf"


def test_an_infinite_rate_of_checkpoints_is_refused() -> None:
    from eval.curve import Checkpoint, choose_checkpoints

    points = [Checkpoint(0, 0.0), Checkpoint(100, 1.0)]
    with pytest.raises(UserError, match="--per-hour must be positive and finite, got inf"):
        choose_checkpoints(points, per_hour=math.inf)
