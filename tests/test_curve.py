"""`alphazero curve`: a run's checkpoints against each other and fixed anchors, one fit, a table and a picture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import eval.curve as curve_module
from alphazero.app.cli import main
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from eval.curve import Checkpoint, CurveSettings, choose_checkpoints, curve_games, fit_curve, pairings
from eval.evaluate import SETTINGS_FILE

TINY = get_preset("tiny")
# A curve small enough for a CPU test: 2 games a pairing, 2 simulations, games cut at 12 plies, no anchor but the
# start (no Stockfish level, no ladder rung).
FAST = ["--games", "2", "--simulations", "2", "--ply-limit", "12", "--stockfish-elos", "", "--rungs", "0",
        "--no-progress"]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _run_with_checkpoints(root: Path, hours: tuple[float, ...] = (0.0, 0.5, 1.0)) -> RunDir:
    run, _ = RunDir.create_or_open(root, TINY)
    torch.manual_seed(0)
    for index, hour in enumerate(hours):
        save_checkpoint(run.root, AlphaZeroNet(TINY.network), None, 10 * index, TINY, run_seconds=3600.0 * hour)
    return run


def test_checkpoints_are_chosen_by_the_runs_hours_with_the_start_and_the_latest() -> None:
    points = [Checkpoint(step, hours) for step, hours in ((0, 0.0), (100, 0.3), (200, 0.9), (300, 1.2),
                                                         (400, 2.05), (500, 2.5))]
    steps = lambda chosen: [point.step for point in chosen]  # noqa: E731
    assert steps(choose_checkpoints(points)) == [0, 200, 400, 500]  # one per hour: the nearest
    assert steps(choose_checkpoints(points, per_hour=2)) == [0, 100, 200, 300, 400, 500]
    assert steps(choose_checkpoints(points, hours=[0.33, 1])) == [0, 100, 200, 500]
    assert steps(choose_checkpoints(points, every=2)) == [0, 200, 400, 500]
    assert steps(choose_checkpoints(points, steps=[300])) == [0, 300, 500]
    with pytest.raises(UserError, match="no checkpoint at step 7"):
        choose_checkpoints(points, steps=[7])
    with pytest.raises(UserError, match="one way"):
        choose_checkpoints(points, every=2, per_hour=1)


def test_pairings_link_each_checkpoint_to_the_one_before_the_start_and_the_anchors() -> None:
    chosen = [Checkpoint(0, 0.0), Checkpoint(10, 1.0), Checkpoint(20, 2.0)]
    settings = CurveSettings(games=3, simulations=8, stockfish_elos=(1350,))
    pairs = {(pair.a, pair.b): pair.games for pair in pairings(chosen, settings)}
    s0, s10, s20 = "step0:search:8", "step10:search:8", "step20:search:8"
    assert set(pairs) == {(s10, s0), (s20, s10), (s20, s0), *((s, a) for s in (s0, s10, s20)
                                                              for a in ("random", "stockfish:elo=1350"))}
    assert set(pairs.values()) == {4}  # rounded up to even: each opening with both colours


def test_the_fit_puts_the_stronger_checkpoint_above_on_the_anchors_scale() -> None:
    chosen = [Checkpoint(0, 0.0), Checkpoint(10, 1.0)]
    settings = CurveSettings(simulations=8, stockfish_elos=(1400,), include_random=False)
    s0, s10, fish = "step0:search:8", "step10:search:8", "stockfish:elo=1400"
    games = [(s10, s0, 1.0)] * 30 + [(s10, s0, 0.0)] * 10 + [(s0, fish, 0.5)] * 40 + [(s10, fish, 0.5)] * 40
    games += [("step99:search:8", s0, 1.0)]  # not chosen: left out of the fit
    points, ratings, anchors = fit_curve(games, chosen, settings)
    assert anchors == {fish: 1400.0} and "step99:search:8" not in ratings
    start, later = points
    assert later.low > start.elo and later.elo > start.elo and later.games == 80
    # Head to head against the checkpoint before: 30 wins, 10 losses (+191), whichever side a record names first.
    assert start.before is None and later.before == 0 and later.gain_games == 40
    assert later.gain is not None and later.gain_low is not None and round(later.gain) == 191 and later.gain_low > 0
    flipped, _, _ = fit_curve([(b, a, 1.0 - score) for a, b, score in games], chosen, settings)
    assert flipped[1].gain == later.gain and flipped[1].gain_low == later.gain_low
    from rich.console import Console

    console = Console(width=200, record=True)
    console.print(curve_module.curve_table(points, ratings, anchors, "t"))
    row = next(line for line in console.export_text().splitlines() if "step 10" in line)
    assert "+191" in row and f"{later.gain_low:+.0f}..{later.gain_high:+.0f}" in row


def test_the_curve_plays_fits_draws_and_reuses_its_games(tmp_path: Path, capsys) -> None:
    run = _run_with_checkpoints(tmp_path / "run")
    assert main(["curve", "--run", str(run.root), *FAST]) == 0
    out = capsys.readouterr().out
    assert "step 20" in out and "1.00" in out and "anchor" in out  # the start anchors the scale at 0
    folder = run.root / "curve"
    assert (folder / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    payload = json.loads((folder / "curve.json").read_text())
    assert [point["step"] for point in payload["points"]] == [0, 20]  # one per hour: the start and hour 1
    settings = CurveSettings(games=2, simulations=2, ply_limit=12)
    assert len(curve_games(run, settings)) == 2 * 3  # step 20 against the start; each against random
    # A rerun plays nothing new; one with more games adds only the difference, from the next openings.
    assert main(["curve", "--run", str(run.root), *FAST]) == 0
    assert len(curve_games(run, settings)) == 6
    assert main(["curve", "--run", str(run.root), *FAST[2:], "--games", "4"]) == 0
    assert len(curve_games(run, settings)) == 12
    assert sorted(path.name for path in (folder / "games").glob("step20*step0*")) == [
        "step20_search_2-vs-step0_search_2-0000.jsonl", "step20_search_2-vs-step0_search_2-0001.jsonl"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.tb / "curve"))
    events.Reload()
    assert {event.step for event in events.Scalars("curve/elo")} == {0, 20}


def test_beside_draws_runs_side_by_side_from_their_curves_and_refuses_a_run_without_one(tmp_path: Path,
                                                                                         capsys) -> None:
    # Issue 70: a GPU sprint's minutes beside a CPU run's hours, one Elo axis.
    cpu, sprint = _run_with_checkpoints(tmp_path / "cpu3h"), _run_with_checkpoints(tmp_path / "sprint", (0.0, 0.1))
    assert main(["curve", "--run", str(sprint.root), *FAST, "--beside", str(cpu.root)]) == 2
    assert "no curve/curve.json" in capsys.readouterr().err
    assert not (sprint.root / "curve").exists()  # refused before any game
    assert main(["curve", "--run", str(cpu.root), *FAST]) == 0
    assert main(["curve", "--run", str(sprint.root), *FAST, "--beside", str(cpu.root)]) == 0
    assert "sprint: search:2, cpu3h: search:2 side by side" in capsys.readouterr().out
    from PIL import Image

    with Image.open(sprint.root / "curve" / "beside.png") as picture:
        assert picture.info["Title"] == "sprint: search:2 | cpu3h: search:2"
        assert picture.width > picture.height  # two panels in a row


def test_the_periodic_evaluations_games_join_when_played_alike(tmp_path: Path) -> None:
    run = _run_with_checkpoints(tmp_path / "run")
    settings = CurveSettings(games=2, simulations=64, ply_limit=200)
    for step, played in ((10, {"simulations": 64, "ply_limit": 200, "stockfish_depth": None}),
                         (20, {"simulations": 16, "ply_limit": 200, "stockfish_depth": None})):
        folder = run.eval / f"step_{step:09d}"
        folder.mkdir(parents=True)
        (folder / SETTINGS_FILE).write_text(json.dumps(played))
        records = [{"agent_a": "search:64", "agent_b": "start:search:64", "score_a": 1.0},
                   {"agent_a": "policy", "agent_b": "start:policy", "score_a": 1.0}]
        (folder / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records) + '{"cut')
    # Only step 10's search game counts: step 20 searched with 16 simulations, and policies are not curves.
    assert curve_games(run, settings) == [("step10:search:64", "step0:search:64", 1.0)]


def test_a_run_without_checkpoints_is_a_clear_error_and_ctrl_c_keeps_the_games(tmp_path: Path, monkeypatch,
                                                                               capsys) -> None:
    empty, _ = RunDir.create_or_open(tmp_path / "empty", TINY)
    assert main(["curve", "--run", str(empty.root), *FAST]) == 2
    assert "has no checkpoints" in capsys.readouterr().err
    run = _run_with_checkpoints(tmp_path / "run")
    original = curve_module.play_match
    calls = []

    def interrupted_after_one_pairing(*args, **kwargs):
        calls.append(1)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(curve_module, "play_match", interrupted_after_one_pairing)
    assert main(["curve", "--run", str(run.root), *FAST]) == 130
    captured = capsys.readouterr()
    assert "finished games are kept" in captured.err and "step 20" in captured.out  # fitted what was played
    assert len(curve_games(run, CurveSettings(games=2, simulations=2, ply_limit=12))) == 2


def test_the_picture_is_titled_with_the_runs_name_not_its_path(tmp_path: Path, monkeypatch) -> None:
    """docs/zero3h-curve.png's title named the folder of the machine it was drawn on; the run's name is enough."""
    import matplotlib
    from matplotlib import pyplot
    from PIL import Image

    run = _run_with_checkpoints(tmp_path / "zero3h", hours=(0.0, 1.0))
    drawn: list[str] = []
    close = pyplot.close

    def read_the_title_then_close(figure: matplotlib.figure.Figure) -> None:
        drawn.extend(axes.get_title() for axes in figure.axes)
        close(figure)

    monkeypatch.setattr(pyplot, "close", read_the_title_then_close)
    assert main(["curve", "--run", str(run.root), "--no-play", *FAST]) == 0
    title = "zero3h: Elo of search:2 over the run"
    assert drawn == [title]
    assert Image.open(run.root / "curve" / "curve.png").text["Title"] == title  # the PNG says it too
    monkeypatch.chdir(run.root)
    assert curve_module.curve_title(RunDir("."), 2) == title  # "." is named by the folder it stands for


def test_a_run_whose_times_triple_is_drawn_on_a_log_time_axis_the_start_as_a_line(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    import matplotlib
    from matplotlib import pyplot

    from eval.curve import CurvePoint
    from eval.curve_picture import Panel, draw_curve

    drawn: list[tuple[str, list[str]]] = []
    close = pyplot.close

    def read_the_axis_then_close(figure: matplotlib.figure.Figure) -> None:
        drawn.extend((axes.get_xscale(), [text.get_text() for text in axes.texts]) for axes in figure.axes)
        close(figure)

    monkeypatch.setattr(pyplot, "close", read_the_axis_then_close)
    for name, hours in (("tripling", (0.0, 1 / 6, 0.5, 1.5)), ("even", (0.0, 0.5, 1.0))):
        points = [CurvePoint(10 * k, h, True, 20, 100.0 * k, 100.0 * k - 50, 100.0 * k + 50)
                  for k, h in enumerate(hours)]
        draw_curve(tmp_path / f"{name}.png", Panel(name, points, {"random": -200.0}), relative=False)
    (log_scale, log_texts), (linear_scale, linear_texts) = drawn
    assert log_scale == "log" and "the start" in log_texts and "random" in log_texts
    assert linear_scale == "linear" and "the start" not in linear_texts


def test_a_start_written_in_the_runs_first_second_is_the_start_and_the_time_axis_can_be_chosen(
        tmp_path: Path, monkeypatch) -> None:
    import matplotlib
    from matplotlib import pyplot

    from eval.curve import CurvePoint
    from eval.curve_picture import Panel, draw_curve

    drawn: list[tuple[str, list[str], list[float]]] = []
    close = pyplot.close

    def read_the_axis_then_close(figure: matplotlib.figure.Figure) -> None:
        for axes in figure.axes:
            plotted = [float(x) for line in axes.lines for x in line.get_xdata()
                       if line.get_linestyle() not in ("--", ":")]  # not the lines across (axes fractions)
            drawn.append((axes.get_xscale(), [text.get_text() for text in axes.texts], plotted))
        close(figure)

    monkeypatch.setattr(pyplot, "close", read_the_axis_then_close)
    hours = (6.7e-7, 0.36, 1.0, 3.0)  # step 0's checkpoint, written a moment after the run began; not two triplings
    points = [CurvePoint(10 * k, h, True, 20, 100.0 * k, 100.0 * k - 50, 100.0 * k + 50) for k, h in enumerate(hours)]
    for axis in ("auto", "log", "linear"):
        draw_curve(tmp_path / f"{axis}.png", Panel(axis, points, {}), relative=False, axis=axis)
    (auto_scale, _, _), (log_scale, log_texts, log_times), (linear_scale, _, _) = drawn
    assert (auto_scale, log_scale, linear_scale) == ("linear", "log", "linear")
    assert "the start" in log_texts and min(log_times) == pytest.approx(0.36)  # the start is a line, not a point
    with pytest.raises(UserError, match="the time axis is one of auto, log, linear"):
        draw_curve(tmp_path / "bad.png", Panel("bad", points, {}), relative=False, axis="square")
