"""Resignation calibrated from played-through games: the per-side values, the threshold, the run's file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from alphazero.config import apply_overrides
from alphazero.presets import get_preset
from alphazero.store.resign import (
    ResignCalibrator,
    ResignCase,
    calibrate,
    game_cases,
    game_resign_fields,
    is_played_through,
    measured_cases,
    resign_path,
    side_resign_values,
    threshold_for_actors,
    wilson_interval,
)
from alphazero.store.rundir import RunDir
from alphazero.store.shards import shard_name
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch
from tests.helpers import game_record, play_games, write_games

# --- one side's value: min over windows of k own moves of the max ------------------------------------

def test_side_values_take_the_min_over_windows_of_the_max() -> None:
    # White's own moves: 0.1, -0.95, -0.92, -0.97, 0.3; Black's: -0.2, 0.5, -0.6, 0.0.
    values = [0.1, -0.2, -0.95, 0.5, -0.92, -0.6, -0.97, 0.0, 0.3]
    assert side_resign_values(values, "white", 1) == {"white": pytest.approx(-0.97), "black": pytest.approx(-0.6)}
    # k = 3: White's windows' maxima are -0.92, -0.92, 0.3; Black's (-0.2, 0.5, -0.6), (0.5, -0.6, 0.0): 0.5, 0.5.
    assert side_resign_values(values, "white", 3) == {"white": pytest.approx(-0.92), "black": pytest.approx(0.5)}
    # Black moved first: the same values belong to the other sides.
    assert side_resign_values(values, "black", 3) == {"black": pytest.approx(-0.92), "white": pytest.approx(0.5)}
    # Fewer own moves than k: that side could never resign.
    assert side_resign_values([-1.0, -1.0, -1.0], "white", 2) == {"white": -1.0, "black": None}
    with pytest.raises(ValueError, match="consecutive"):
        side_resign_values(values, "white", 0)


# --- the threshold -------------------------------------------------------------------------------------

def synthetic_cases() -> list[ResignCase]:
    """200 lost sides at -0.9, 10 sides that did not lose at -0.85, 100 that did not lose at -0.5.

    Below -0.9 nothing counts; from -0.89 to -0.85, 200 cases and no false
    positive; from -0.84 to -0.50, 210 cases and 10 false positives (4.8%);
    above -0.5, 310 cases and 110 false positives (35%).
    """
    return ([ResignCase(-0.9, lost=True)] * 200 + [ResignCase(-0.85, lost=False)] * 10
            + [ResignCase(-0.5, lost=False)] * 100)


def test_the_highest_threshold_within_the_false_positive_target_is_chosen() -> None:
    calibration = calibrate(synthetic_cases(), target=0.05, min_cases=100)
    assert calibration.threshold == -0.5  # a side resigns below -0.5: the 210 cases under it, 10 not lost
    assert (calibration.cases, calibration.false_positives, calibration.total_cases) == (210, 10, 310)
    assert calibration.false_positive_rate == pytest.approx(10 / 210)
    strict = calibrate(synthetic_cases(), target=0.0, min_cases=100)
    assert (strict.threshold, strict.cases, strict.false_positives) == (-0.85, 200, 0)
    # The order of the cases does not matter.
    shuffled = list(np.random.default_rng(0).permutation(np.array(synthetic_cases(), dtype=object)))
    assert calibrate(shuffled, target=0.05, min_cases=100) == calibration


def test_nobody_resigns_without_enough_cases() -> None:
    # 99 sure losses: a perfect threshold, but one case short of the minimum.
    assert calibrate([ResignCase(-0.95, lost=True)] * 99, target=0.05, min_cases=100).threshold is None
    assert calibrate([ResignCase(-0.95, lost=True)] * 100, target=0.05, min_cases=100).threshold == -0.01
    # Enough cases only where the false-positive rate is too high: none, and the figures say why.
    none = calibrate(synthetic_cases(), target=0.05, min_cases=300)
    assert (none.threshold, none.cases, none.false_positives) == (None, 310, 110)
    empty = calibrate([], target=0.05, min_cases=1)
    assert (empty.threshold, empty.cases, empty.false_positives) == (None, 0, 0)


def played_through_game(white: float | None, black: float | None, winner: str | None, *,
                        threshold: float | None = None, enabled: bool = False) -> dict:
    return {"winner": winner, "resign_enabled": enabled, "resign_threshold": threshold, "resign_consecutive": 3,
            "resign_values": {"white": white, "black": black}}


def test_cases_come_from_played_through_games_only() -> None:
    assert game_cases(played_through_game(-0.95, 0.9, "black"), 3) == [ResignCase(-0.95, True),
                                                                        ResignCase(0.9, False)]
    assert game_cases(played_through_game(-0.95, None, None), 3) == [ResignCase(-0.95, False)]  # a draw
    resigned = played_through_game(-0.95, 0.9, "black", threshold=-0.9, enabled=True)
    assert not is_played_through(resigned) and game_cases(resigned, 3) == []  # it could resign: biased
    assert game_cases(played_through_game(-0.95, 0.9, "black"), 2) == []  # values of another k
    # A played-through game under a threshold: measured against the threshold it ran under.
    game = played_through_game(-0.95, -0.92, "black", threshold=-0.93)
    assert is_played_through(game) and measured_cases(game) == (1, 0)  # White below, and White lost
    assert measured_cases(played_through_game(-0.95, -0.92, None, threshold=-0.9)) == (2, 2)  # a draw: both wrong
    assert measured_cases(played_through_game(-0.95, -0.92, None)) == (0, 0)  # no threshold in force


def test_wilson_interval_matches_published_values() -> None:
    # Newcombe (1998), Table I: 0/10 -> 0 to 0.2775; 5/100 -> 0.0215 to 0.1118.
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.2775), abs=1e-4)
    assert wilson_interval(5, 100) == pytest.approx((0.0215, 0.1118), abs=1e-4)
    assert wilson_interval(0, 0) == (0.0, 1.0)


# --- the search records what the calibration needs ---------------------------------------------------------

def hopeless_for_white(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of -0.95 for White to move and +0.95 for Black (scalars[:, 0] is 1 with White to move)."""
    values = np.where(scalars[:, 0] > 0.5, -0.95, 0.95).astype(np.float32)
    return np.zeros((len(planes), 4672), np.float32), values


def test_move_values_decide_for_any_threshold_what_the_search_does() -> None:
    kwargs = dict(simulations=8, resign_consecutive=2, ply_limit=40)
    # Played through with a threshold: the side the search says would have resigned is the one whose
    # m lies below it, and a side with m >= threshold never is.
    seen = set()
    for threshold in (-0.99, -0.9, -0.5, 0.2):
        params = SearchParams(resign_disabled_fraction=1.0, resign_threshold=threshold, **kwargs)
        search = MultiGameSearch(3, params, seed=5)
        for record in play_games(search, hopeless_for_white):
            seen.add(record["would_resign_side"])
            assert record["resign_threshold"] == threshold and not record["resign_enabled"]
            assert len(record["move_values"]) == record["plies"]
            m = game_resign_fields(record, 2)["resign_values"]
            below = {side for side, value in m.items() if value is not None and value < threshold}
            if record["would_resign_side"] is None:
                assert not below
            else:
                assert record["would_resign_side"] in below
    assert seen == {None, "white"}  # White's values lie about -0.95: below every threshold but -0.99
    # Resigning for real: the loser's m (the resigning move's value included) lies below the threshold.
    search = MultiGameSearch(3, SearchParams(resign_disabled_fraction=0.0, resign_threshold=-0.9, **kwargs), seed=5)
    for record in play_games(search, hopeless_for_white):
        assert record["termination"] == "resignation" and record["winner"] == "black"
        assert len(record["move_values"]) == record["plies"] + 1
        assert game_resign_fields(record, 2)["resign_values"]["white"] < -0.9


def test_sample_root_values_are_the_move_values_of_fully_searched_moves() -> None:
    search = MultiGameSearch(2, SearchParams(simulations=8, ply_limit=20, playout_cap_fraction=0.5,
                                             playout_cap_simulations=2), seed=1)
    for record in play_games(search, hopeless_for_white):
        full = np.flatnonzero(record["full_search"])
        np.testing.assert_array_equal(record["plies_of_samples"], full)
        np.testing.assert_array_equal(record["root_values"], record["move_values"][full])


def test_a_new_threshold_applies_to_the_games_started_after_it() -> None:
    search = MultiGameSearch(2, SearchParams(simulations=4, ply_limit=6), seed=2)  # both games start with no threshold
    assert search.resign_threshold is None
    search.set_resign_threshold(-0.7)
    assert search.resign_threshold == -0.7
    first = play_games(search, hopeless_for_white)
    assert [r["resign_threshold"] for r in first] == [None, None]
    assert all(not r["resign_enabled"] for r in first)  # no threshold: every game is played through
    search.start_game(0)
    (record,) = play_games(search, hopeless_for_white)
    assert record["resign_threshold"] == -0.7
    search.set_resign_threshold(None)
    search.start_game(1)
    assert play_games(search, hopeless_for_white)[0]["resign_threshold"] is None
    with pytest.raises(ValueError, match="resign_threshold"):
        search.set_resign_threshold(1.5)


# --- the run's resign.json ---------------------------------------------------------------------------------

def calibrated_run(tmp_path: Path, *overrides: str) -> tuple[RunDir, object]:
    return RunDir.create_or_open(tmp_path / "run", apply_overrides(get_preset("tiny"), [
        "search.resign_min_cases=100", *overrides]))


def test_the_calibrator_writes_the_threshold_the_actors_read(tmp_path: Path) -> None:
    run, config = calibrated_run(tmp_path)
    calibrator = ResignCalibrator(run, config.search)
    assert not calibrator.refresh() and calibrator.threshold is None  # no shards yet
    # 100 played-through games in which White falls to -0.95 and loses: White's side is a case each time.
    write_games(run, [game_record(-0.95, 0.9, "black") for _ in range(60)])
    assert not calibrator.refresh() and threshold_for_actors(run, config.search) is None  # 60 cases only
    write_games(run, [game_record(-0.95, 0.9, "black") for _ in range(40)])
    assert calibrator.refresh() and calibrator.threshold == -0.01
    assert threshold_for_actors(run, config.search) == -0.01
    state = json.loads(resign_path(run).read_text())
    assert state["threshold"] == -0.01 and state["calibration"]["cases"] == 100
    scalars = calibrator.scalars()
    assert scalars["resign/threshold"] == -0.01 and scalars["resign/calibration_cases"] == 100
    # Ten games played through under that threshold; in two of them White did not lose.
    write_games(run, [game_record(-0.95, 0.9, "black", threshold=-0.01) for _ in range(8)]
                + [game_record(-0.95, 0.9, None, threshold=-0.01) for _ in range(2)])
    calibrator.refresh()
    assert (calibrator.measured_cases, calibrator.measured_false_positives) == (10, 2)
    assert calibrator.scalars()["resign/false_positive_rate"] == pytest.approx(0.2)
    # A restart reads the counts back and counts no shard twice.
    again = ResignCalibrator(run, config.search)
    assert again.threshold == -0.01
    again.refresh()
    assert (again.measured_cases, again.measured_false_positives) == (10, 2)
    assert again.calibration == calibrator.calibration


def test_fixed_and_off_modes_ignore_the_calibration(tmp_path: Path) -> None:
    run, config = calibrated_run(tmp_path)
    write_games(run, [game_record(-0.95, 0.9, "black") for _ in range(100)])
    ResignCalibrator(run, config.search).refresh()
    assert threshold_for_actors(run, config.search) == -0.01
    fixed = dataclasses.replace(config.search, resign_mode="fixed", resign_threshold=-0.8)
    off = dataclasses.replace(config.search, resign_mode="off")
    assert threshold_for_actors(run, fixed) == -0.8 and threshold_for_actors(run, off) is None
    calibrator = ResignCalibrator(run, off)
    calibrator.refresh()
    assert calibrator.threshold is None and calibrator.calibration.threshold == -0.01  # measured, not used


def test_an_unreadable_file_or_shard_means_nobody_resigns(tmp_path: Path) -> None:
    run, config = calibrated_run(tmp_path)
    resign_path(run).write_text("{not json")
    assert threshold_for_actors(run, config.search) is None
    (run.selfplay / shard_name("broken")).write_bytes(b"garbage")
    calibrator = ResignCalibrator(run, config.search)
    calibrator.refresh()
    assert calibrator.corrupt_shards == 1 and calibrator.threshold is None
