"""`alphazero eval`: matches between a checkpoint's agents, random and Stockfish; ratings JSON and TensorBoard."""

from __future__ import annotations

import argparse
import dataclasses
import io
import json
from pathlib import Path

import pytest
import torch
from rich.console import Console

from alphazero.config import Config, EvalConfig
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from eval.cli import add_eval_arguments, run_eval
from eval.elo import Rating
from eval.evaluate import EvalSettings, evaluate_checkpoint, load_ratings, ratings_path
from tests.helpers import fail_writes_under, stockfish_or_skip

TINY: Config = get_preset("tiny")
# Small enough for a CPU test: 2 games a pair, 8 simulations, games cut at 40 plies.
SMALL = EvalSettings(games_per_pair=2, simulations=8, stockfish_elos=(1400,), stockfish_depth=1, ply_limit=40)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    run, _ = RunDir.create_or_open(tmp_path / "run", TINY)
    return run


def _tb_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(folder))
    accumulator.Reload()
    return {tag: [(e.step, e.value) for e in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]}


def test_a_fresh_run_is_rated_against_stockfish(run: RunDir, capsys) -> None:
    stockfish_or_skip()
    ratings = evaluate_checkpoint(run, TINY, settings=SMALL, device="cpu", progress=False)
    assert "no checkpoint" in capsys.readouterr().err
    names = {"policy", "value", "search:8", "random", "stockfish:elo=1400"}
    assert set(ratings) == names
    assert ratings["stockfish:elo=1400"] == Rating(1400.0, 1400.0, 1400.0, 6)
    assert all(ratings[name].low <= ratings[name].elo <= ratings[name].high for name in names)
    payload = json.loads(ratings_path(run, 0).read_text())
    assert payload["step"] == 0 and payload["fresh_weights"] is True
    assert payload["anchors"] == {"stockfish:elo=1400": 1400.0}
    assert len(payload["matches"]) == 3 + 3 + 3
    assert load_ratings(ratings_path(run, 0)) == dict(ratings)
    scalars = _tb_scalars(run.tb / "eval")
    search = ratings["search:8"]
    # An agent that lost all its games to Stockfish has a bound, not a rating its games support: its own tag.
    tag, value = ("elo/search:8", search.elo) if search.bound is None else ("elo_bound/search:8", search.bound.elo)
    assert scalars[tag] == [(0, pytest.approx(value))]
    # The anchor is a flat line at its UCI_Elo beside the agents, so a flat agent curve reads as flat.
    assert scalars["elo/stockfish:elo=1400"] == [(0, 1400.0)]
    assert "elo/random" in scalars or "elo_bound/random" in scalars
    assert len(list((run.games / "eval" / "step_000000000").glob("*.pgn"))) == 9
    assert len(list((run.eval / "step_000000000").glob("*.jsonl"))) == 9


def test_what_a_network_runs_in_on_a_cpu_is_said_unless_the_caller_says_it_once(run: RunDir, capsys) -> None:
    from alphazero.store.sources import FRESH, NetworkSource, load_network

    load_network(NetworkSource(run.root, None, fallback=FRESH), device="cpu")
    assert "runs on the CPU in" in capsys.readouterr().err
    load_network(NetworkSource(run.root, None, fallback=FRESH), device="cpu", say_precision=False)
    assert "runs on the CPU in" not in capsys.readouterr().err


def test_the_cli_rates_a_named_checkpoint_and_prints_the_table(run: RunDir, capsys) -> None:
    stockfish_or_skip()
    model = AlphaZeroNet(TINY.network)
    for step in (200, 400):
        save_checkpoint(run.root, model, None, step, TINY)
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    run_eval(parser.parse_args(["--run", str(run.root), "--checkpoint", "200", "--quick", "--games", "2",
                                "--simulations", "4", "--stockfish-depth", "1", "--ply-limit", "30",
                                "--device", "cpu", "--no-random"]))
    out = capsys.readouterr().out
    for column in ("Agent", "Elo", "95% interval", "Games", "Score", "search:4", "anchor"):
        assert column in out
    payload = json.loads(ratings_path(run, 200).read_text())
    assert payload["network"] == "step 200" and "random" not in payload["ratings"]
    assert _tb_scalars(run.tb / "eval")["elo/policy"][0][0] == 200


def test_without_stockfish_random_is_the_anchor(run: RunDir) -> None:
    # Needs no Stockfish, so the machinery is tested everywhere.
    settings = EvalSettings(games_per_pair=2, simulations=4, stockfish_elos=(), ply_limit=30)
    ratings = evaluate_checkpoint(run, TINY, settings=settings, device="cpu", progress=True,
                                  console=Console(file=io.StringIO()))
    assert ratings["random"].elo == 0.0
    assert set(ratings) == {"policy", "value", "search:4", "random"}


def test_a_model_in_memory_is_rated_at_its_step(run: RunDir) -> None:
    settings = EvalSettings(games_per_pair=2, simulations=4, stockfish_elos=(), ply_limit=20)
    model = AlphaZeroNet(TINY.network).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    evaluate_checkpoint(run, TINY, 1000, model=model, settings=settings, progress=False)
    assert json.loads(ratings_path(run, 1000).read_text())["network"] == "step 1000"
    assert model.training  # the caller's model is left in training mode, its weights untouched
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_settings_and_errors(run: RunDir) -> None:
    quick = EvalSettings.quick(EvalConfig(stockfish_elos=(2000, 1400)))
    assert quick.stockfish_elos == (1400,) and quick.simulations < EvalConfig().simulations
    full = EvalSettings.full(EvalConfig())
    assert (full.games_per_pair, full.simulations, full.stockfish_elos) == (100, 400, (1400, 1700, 2000))
    with pytest.raises(UserError, match="no checkpoint at step 5"):
        evaluate_checkpoint(run, TINY, 5, settings=SMALL, device="cpu", progress=False)
    with pytest.raises(UserError, match="simulations"):
        evaluate_checkpoint(run, TINY, settings=dataclasses.replace(SMALL, simulations=0), device="cpu",
                            progress=False)
    with pytest.raises(UserError, match="anchor"):
        evaluate_checkpoint(run, TINY, settings=EvalSettings(2, 4, (), include_random=False), device="cpu",
                            progress=False)
    with pytest.raises(UserError, match="not a run directory"):
        parser = argparse.ArgumentParser()
        add_eval_arguments(parser)
        run_eval(parser.parse_args(["--run", str(run.root.parent / "nowhere")]))


def test_periodic_evaluation_rates_every_kth_checkpoint_one_at_a_time(tmp_path, monkeypatch, capsys):
    import threading
    from pathlib import Path

    import eval.evaluate as evaluate_module
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir

    calls: list[int] = []
    said: list[bool] = []  # whether each evaluation says what its networks run in: the run's first only
    release = threading.Event()

    def fake_evaluate(run, config, step, **kwargs):
        calls.append(step)
        said.append(kwargs["say_precision"])
        assert kwargs["progress"] is False and kwargs["report"] is False
        release.wait(5)
        if step == 300:
            raise RuntimeError("stockfish vanished")

    monkeypatch.setattr(evaluate_module, "evaluate_checkpoint", fake_evaluate)
    monkeypatch.setattr(evaluate_module, "find_stockfish", lambda: "/usr/games/stockfish")
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))
    # A time share of 1: the next evaluation may start as soon as the last one ends.
    periodic = evaluate_module.PeriodicEvaluation(run, config, every_steps=100, time_share=1.0)
    periodic(50, Path("x"))  # not due
    periodic(100, Path("x"))  # due: starts
    periodic(200, Path("x"))  # due, but one is running: skipped
    release.set()
    periodic.wait()
    periodic(250, Path("x"))  # step 200's slot was skipped, 250 is in the same slot: runs now
    periodic.wait()
    periodic(300, Path("x"))  # fails on its thread; the caller is not disturbed
    periodic.close()
    periodic(400, Path("x"))  # the run has ended: no new evaluation
    assert calls == [100, 250, 300] and said == [True, False, False]
    assert "evaluation of step 300 failed: stockfish vanished" in capsys.readouterr().err
    off = evaluate_module.PeriodicEvaluation(run, config, every_steps=0)
    off(1000, Path("x"))
    off.close()
    assert calls == [100, 250, 300]


NO_STOCKFISH = EvalSettings(games_per_pair=2, simulations=4, stockfish_elos=(), ply_limit=20)


def test_later_checkpoints_play_the_start_and_the_curve_shows_the_difference(run: RunDir) -> None:
    model = AlphaZeroNet(TINY.network)
    for step in (0, 200):  # the same weights: the start's twins must score exactly even
        save_checkpoint(run.root, model, None, step, TINY)
    settings = dataclasses.replace(NO_STOCKFISH, start_policy_games=6, start_search_games=4)
    ratings = evaluate_checkpoint(run, TINY, 200, settings=settings, device="cpu", progress=False,
                                  console=Console(file=io.StringIO()))
    assert {"start:policy", "start:search:4"} <= set(ratings) and "start:value" not in ratings
    assert set(ratings.vs_start) == {"policy", "search:4"}
    # Each opening with colours swapped and no noise: a network against itself scores exactly 50%.
    assert (ratings.vs_start["policy"].games, ratings.vs_start["policy"].score) == (6, 0.5)
    assert (ratings.vs_start["search:4"].games, ratings.vs_start["search:4"].score) == (4, 0.5)
    assert ratings.fallen() == []
    payload = json.loads(ratings_path(run, 200).read_text())
    assert payload["vs_start"]["policy"]["score"] == 0.5 and payload["fallen_below_start"] == []
    scalars = _tb_scalars(run.tb / "eval")
    assert scalars["vs_start/policy"] == [(200, 0.0)] and scalars["vs_start/fallen"] == [(200, 0.0)]
    assert "elo/start:policy" in scalars and "vs_start/search:4_low" in scalars
    # Step 0 is the start itself: no twin matches.
    assert evaluate_checkpoint(run, TINY, 0, settings=settings, device="cpu", progress=False,
                               report=False).vs_start == {}


def test_a_fall_below_the_start_is_reported_only_when_the_games_show_it() -> None:
    from eval.elo import Ratings, match_summary
    from eval.evaluate import CheckpointRatings

    plain = Ratings({}, 0.0)
    fell = CheckpointRatings(plain, {"policy": match_summary(10, 20, 62), "search:64": match_summary(1, 1, 2)}, 100)
    assert fell.fallen() == ["policy"]  # search:64 is 89 Elo down, but over 4 games that is noise
    (line,) = fell.fall_warnings()
    assert line.startswith("policy fell 2") and "92 games" in line
    assert fell.start_text() == "vs start: policy -223 (-304..-158), search:64 -89 (-inf..+221)"
    held = CheckpointRatings(plain, {"policy": match_summary(40, 10, 42)}, 100)
    assert held.fallen() == [] and held.fall_warnings() == []


def test_the_live_line_and_stderr_report_a_checkpoint_that_fell(tmp_path, monkeypatch, capsys) -> None:
    import eval.evaluate as evaluate_module
    from eval.elo import Ratings, match_summary

    def fake_evaluate(run, config, step, **kwargs):
        return evaluate_module.CheckpointRatings(Ratings({}, 0.0), {"policy": match_summary(0, 0, 92)}, 100)

    monkeypatch.setattr(evaluate_module, "evaluate_checkpoint", fake_evaluate)
    monkeypatch.setattr(evaluate_module, "find_stockfish", lambda: "/usr/games/stockfish")
    run, config = RunDir.create_or_open(tmp_path / "run", TINY)
    periodic = evaluate_module.PeriodicEvaluation(run, config, every_steps=100, time_share=1.0)
    periodic(100, Path("x"))
    periodic.close()
    assert "warning: step 100: policy fell" in capsys.readouterr().err
    assert "FELL BELOW THE START: policy" in periodic.status()


def test_unwritable_outputs_are_refused_before_the_first_game(run: RunDir, games_started: list[int]) -> None:
    import shutil

    shutil.rmtree(run.games)
    run.games.write_text("a file where the games folder should be")  # unwritable even for root
    with pytest.raises(UserError, match=f"cannot write the games in {run.games}"):
        evaluate_checkpoint(run, TINY, settings=NO_STOCKFISH, device="cpu", progress=False)
    assert games_started == []


def test_ratings_and_games_that_cannot_be_written_after_playing_go_to_temporary_folders(
        run: RunDir, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import re
    import shutil

    import eval.evaluate as evaluate_module
    import eval.match as match_module

    fail_writes_under(monkeypatch, match_module, run.root)
    fail_writes_under(monkeypatch, evaluate_module, run.root)
    ratings = evaluate_checkpoint(run, TINY, settings=NO_STOCKFISH, device="cpu", progress=False,
                                  console=Console(file=io.StringIO()))
    err = capsys.readouterr().err
    (ratings_file,) = re.findall(r"the ratings go to (\S+) instead", err)
    games_folders = re.findall(r"this match's games go to (\S+) instead", err)
    try:
        assert load_ratings(ratings_file) == dict(ratings)
        matches = json.loads(Path(ratings_file).read_text())["matches"]
        assert len(matches) == len(games_folders) == 6  # 3 pairs of network agents, 3 against random
        assert all(Path(match["pgn"]).parent.as_posix() in games_folders for match in matches)
        assert sum(len(Path(match["jsonl"]).read_text().splitlines()) for match in matches) == 12
    finally:
        for folder in {*games_folders, str(Path(ratings_file).parent)}:
            shutil.rmtree(folder)
    assert not ratings_path(run, 0).exists()
def test_periodic_evaluation_keeps_to_its_share_of_the_time(tmp_path, monkeypatch):
    from pathlib import Path

    import eval.evaluate as evaluate_module
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir

    now = [1000.0]
    calls: list[int] = []

    def fake_evaluate(run, config, step, **kwargs):
        calls.append(step)
        now[0] += 60.0  # each evaluation takes a minute

    monkeypatch.setattr(evaluate_module, "evaluate_checkpoint", fake_evaluate)
    monkeypatch.setattr(evaluate_module, "find_stockfish", lambda: "/usr/games/stockfish")
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))
    periodic = evaluate_module.PeriodicEvaluation(run, config, every_steps=10, time_share=0.1, clock=lambda: now[0])
    assert "next at step >= 10" in periodic.status()
    periodic(10, Path("x"))
    periodic.wait()
    # A minute of evaluation at a 10% share: the next may start 10 minutes after the last one started.
    assert "next at step >= 20 and in 9.0 min (at most 10% of the time)" in periodic.status()
    now[0] += 8 * 60.0
    periodic(20, Path("x"))  # due by step, but too soon
    periodic.wait()
    now[0] += 60.0
    periodic(21, Path("x"))  # the same slot of steps, now on time
    periodic.close()
    assert calls == [10, 21]


def test_the_end_of_a_run_stops_the_evaluation_in_progress_and_keeps_its_games(run: RunDir, monkeypatch,
                                                                              capsys) -> None:
    import threading

    import eval.evaluate as evaluate_module

    model = AlphaZeroNet(TINY.network)
    for step in (0, 100):
        save_checkpoint(run.root, model, None, step, TINY)
    # A stop set while the first match plays (as a run's deadline would): the evaluation ends there.
    stop = threading.Event()
    original = evaluate_module.play_match

    def stopped_during_the_first_match(*args, **kwargs):
        stop.set()
        return original(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, "play_match", stopped_during_the_first_match)
    with pytest.raises(evaluate_module.EvaluationStopped, match="stopped after 0 games") as stopped:
        evaluate_checkpoint(run, TINY, 100, settings=NO_STOCKFISH, device="cpu", progress=False, stop=stop)
    assert json.loads((stopped.value.folder / evaluate_module.SETTINGS_FILE).read_text())["simulations"] == 4
    assert not ratings_path(run, 100).exists()
    # The periodic evaluation: close() (the run's end) stops the one in progress instead of waiting for it.
    seen: list[bool] = []

    def waits_for_its_stop(run, config, step, **kwargs):
        seen.append(kwargs["stop"].wait(30))
        raise evaluate_module.EvaluationStopped(step, 3, run.eval)

    monkeypatch.setattr(evaluate_module, "evaluate_checkpoint", waits_for_its_stop)
    monkeypatch.setattr(evaluate_module, "find_stockfish", lambda: "/usr/games/stockfish")
    periodic = evaluate_module.PeriodicEvaluation(run, TINY, every_steps=100, time_share=1.0)
    periodic(100, run.checkpoints / "x")
    periodic.close()
    assert seen == [True]
    assert "stopped after 3 games" in capsys.readouterr().err


def test_without_stockfish_the_elo_curve_is_off_and_says_why_once(tmp_path, monkeypatch, capsys):
    from pathlib import Path

    import eval.evaluate as evaluate_module
    from alphazero.presets import get_preset
    from alphazero.store.rundir import RunDir

    monkeypatch.setattr(evaluate_module, "find_stockfish", lambda: None)
    monkeypatch.setattr(evaluate_module, "evaluate_checkpoint", lambda *args, **kwargs: pytest.fail("ran"))
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))
    periodic = evaluate_module.PeriodicEvaluation(run, config, every_steps=10)
    for step in (10, 20, 30):
        periodic(step, Path("x"))
    periodic.close()
    err = capsys.readouterr().err
    assert err.count("Elo curve off: Stockfish was not found") == 1 and "apt-get install" in err
    assert periodic.status().startswith("Elo curve off: Stockfish was not found")
