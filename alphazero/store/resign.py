"""Resignation calibrated as in AlphaGo Zero: the threshold comes from the games played through.

A side resigns when its root value stays below the threshold t for
``search.resign_consecutive`` = k consecutive own moves. For one side of a
finished game, let m be the smallest, over every window of k consecutive own
moves, of the largest root value in the window. Then the side would have
resigned at threshold t exactly when t > m: the game's record answers the
question for every threshold at once. Self-play stamps m of both sides on
each game (``resign_values``, from the search's per-move root values).

Played-through games are those in which no side could resign: the
``search.resign_disabled_fraction`` of games drawn to play on, and every game
played while no threshold was in force. Each of their sides with an m is a
*case* at every threshold above m; a case is a *false positive* when that side
did not lose. The calibration picks the highest threshold (on a 0.01 grid,
below 0) whose false-positive rate over the newest played-through games is at
most ``search.resign_false_positive_target``, with at least
``search.resign_min_cases`` cases behind it; until then nobody resigns.

The measured false-positive rate is the honest figure: over the played-through
games that ran while a threshold was in force, the sides that would have
resigned under *that* threshold and did not lose.

``search.resign_mode``: ``calibrated`` (the above), ``fixed``
(``search.resign_threshold``) or ``off``. The self-play driver runs a
ResignCalibrator over the run's shards and writes the threshold in force to
``run/resign.json`` (atomically); actors read it at start and when it changes
(pushed through Ray, and polled), and a restart reads it back.

Example::

    calibration = calibrate(cases, target=0.05, min_cases=100)
    calibration.threshold        # -0.83, or None: not enough cases yet
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from alphazero.config import SearchConfig
from alphazero.store.rundir import RunDir, atomic_write_text, is_temporary
from alphazero.store.shards import SHARD_SUFFIX, ShardError, read_shard_games

__all__ = [
    "CALIBRATION_GAMES", "Calibration", "ResignCalibrator", "ResignCase", "THRESHOLD_GRID", "calibrate",
    "game_cases", "game_resign_fields", "is_played_through", "measured_cases", "resign_path",
    "side_resign_values", "threshold_for_actors", "threshold_in_file", "wilson_interval",
]

log = logging.getLogger(__name__)

RESIGN_FILE = "resign.json"
RESIGN_FORMAT = "alphazero-resign"
# Candidate thresholds: -0.99, -0.98, ..., -0.01. Below -1 nobody resigns (values
# are clamped to [-1, 1]); at 0 or above a side would resign a position it does
# not think lost.
THRESHOLD_GRID: tuple[float, ...] = tuple(round(-1.0 + i / 100, 2) for i in range(1, 100))
# The calibration uses the newest played-through games only: the value head
# changes as the run goes on, and old games describe an older network.
CALIBRATION_GAMES = 2000
NO_RESIGNATION = -1.0  # what TensorBoard shows as the threshold while nobody resigns
Z95 = 1.959963984540054
SIDES = ("white", "black")


# --- one game -------------------------------------------------------------------------------

def first_mover(start_fen: str) -> str:
    """Gets 'white' or 'black', the side to move in ``start_fen``."""
    fields = start_fen.split()
    return "black" if len(fields) > 1 and fields[1] == "b" else "white"


def side_resign_values(move_values: Sequence[float] | np.ndarray, first: str,
                       consecutive: int) -> dict[str, float | None]:
    """Gets each side's m: the min over windows of ``consecutive`` own moves of the max root value in it.

    ``move_values`` are the root values of the game's moves in order, each for
    its mover; ``first`` moved first. A side with fewer own moves than
    ``consecutive`` gets None (it could never resign).

    Raises:
        ValueError: consecutive < 1 or an unknown side.
    """
    if consecutive < 1:
        raise ValueError(f"consecutive must be at least 1, got {consecutive}")
    if first not in SIDES:
        raise ValueError(f"first must be 'white' or 'black', got {first!r}")
    values = np.asarray(move_values, dtype=np.float64)
    out: dict[str, float | None] = {}
    for offset, side in enumerate(SIDES if first == "white" else SIDES[::-1]):
        own = values[offset::2]
        if len(own) < consecutive:
            out[side] = None
            continue
        windows = np.lib.stride_tricks.sliding_window_view(own, consecutive)
        out[side] = float(windows.max(axis=1).min())
    return out


def game_resign_fields(record: Mapping[str, Any], consecutive: int) -> dict[str, Any]:
    """Gets the keys self-play stamps on a finished game for the calibration (from its move_values)."""
    return {"resign_values": side_resign_values(record["move_values"], first_mover(record["start_fen"]),
                                                consecutive),
            "resign_consecutive": consecutive}


def is_played_through(game: Mapping[str, Any]) -> bool:
    """Checks whether no side could resign in ``game``: resignation disabled for it, or no threshold in force."""
    return not game.get("resign_enabled", True) or ("resign_threshold" in game and game["resign_threshold"] is None)


@dataclass(frozen=True)
class ResignCase:
    """One side of a played-through game: it would have resigned at every threshold above ``value``."""

    value: float
    lost: bool


def game_cases(game: Mapping[str, Any], consecutive: int) -> list[ResignCase]:
    """Gets the cases of a played-through game recorded with ``consecutive``; [] for any other game."""
    values = game.get("resign_values")
    if not is_played_through(game) or not isinstance(values, dict) or game.get("resign_consecutive") != consecutive:
        return []
    winner = game.get("winner")
    return [ResignCase(float(values[side]), lost=winner is not None and winner != side)
            for side in SIDES if values.get(side) is not None]


def measured_cases(game: Mapping[str, Any]) -> tuple[int, int]:
    """Gets (cases, false positives) of ``game`` under the threshold in force when it was played.

    Counts only games played through while a threshold was in force (the
    resign-disabled share): the sides whose m lies below that threshold, and
    of those the ones that did not lose.
    """
    threshold, values = game.get("resign_threshold"), game.get("resign_values")
    if threshold is None or game.get("resign_enabled", True) or not isinstance(values, dict):
        return 0, 0
    cases = false_positives = 0
    for side in SIDES:
        value = values.get(side)
        if value is not None and value < threshold:
            cases += 1
            false_positives += game.get("winner") in (side, None)
    return cases, false_positives


# --- the calibration --------------------------------------------------------------------------

def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """Gets the Wilson score interval of a proportion (95% by default); (0, 1) without trials."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denominator = 1.0 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Calibration:
    """The chosen threshold (None: nobody resigns) and the cases behind it.

    ``cases`` and ``false_positives`` are counted at the threshold when there
    is one, else at the highest grid threshold (the one with the most cases),
    so the figures say how far the calibration is from a threshold.
    ``total_cases`` counts every side with a value, at any threshold.
    """

    threshold: float | None
    cases: int
    false_positives: int
    total_cases: int

    @property
    def false_positive_rate(self) -> float:
        return self.false_positives / self.cases if self.cases else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.false_positives, self.cases)


def calibrate(cases: Iterable[ResignCase], *, target: float, min_cases: int,
              grid: Sequence[float] = THRESHOLD_GRID) -> Calibration:
    """Picks the highest threshold of ``grid`` whose false-positive rate is at most ``target``.

    A threshold t counts the cases with value < t; it qualifies with at least
    ``min_cases`` of them and at most ``target`` of those not lost. None when
    no threshold qualifies.
    """
    cases = list(cases)
    values = np.sort(np.array([c.value for c in cases], dtype=np.float64))
    not_lost = np.cumsum([not c.lost for c in sorted(cases, key=lambda c: c.value)], dtype=np.int64)
    descending = sorted(grid, reverse=True)
    counts = np.searchsorted(values, descending, side="left")  # cases below each threshold
    for threshold, count in zip(descending, counts.tolist()):
        if count >= max(min_cases, 1) and not_lost[count - 1] <= target * count:
            return Calibration(float(threshold), count, int(not_lost[count - 1]), len(cases))
    # None qualifies: the figures at the highest threshold, the one with the most cases.
    top = int(counts[0]) if len(counts) else 0
    return Calibration(None, top, int(not_lost[top - 1]) if top else 0, len(cases))


# --- the run's resign.json ------------------------------------------------------------------------

def resign_path(run: RunDir) -> Path:
    """Gets the file holding the threshold in force: run/resign.json."""
    return run.root / RESIGN_FILE


def read_resign_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """Reads resign.json; None when it is missing or unreadable (logged: nobody resigns then)."""
    try:
        state = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        log.warning("ignoring unreadable %s (%s)", path, error)
        return None
    if not isinstance(state, dict) or state.get("format") != RESIGN_FORMAT:
        log.warning("ignoring %s: not a resignation file", path)
        return None
    return state


def threshold_in_file(run: RunDir) -> tuple[bool, float | None]:
    """Reads the threshold in force from run/resign.json: (whether the file was read, the threshold or None)."""
    state = read_resign_state(resign_path(run))
    if state is None:
        return False, None
    threshold = state.get("threshold")
    if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and -1.0 <= threshold <= 1.0:
        return True, float(threshold)
    return True, None


def threshold_for_actors(run: RunDir, search: SearchConfig) -> float | None:
    """Gets the threshold new self-play games start with, by ``search.resign_mode`` (calibrated: the file's)."""
    if search.resign_mode == "fixed":
        return search.resign_threshold
    if search.resign_mode == "off":
        return None
    return threshold_in_file(run)[1]


def _scan_names(directory: Path) -> list[str]:
    try:
        with os.scandir(directory) as entries:
            return sorted(e.name for e in entries
                          if e.name.endswith(SHARD_SUFFIX) and not is_temporary(e.name) and e.is_file())
    except FileNotFoundError:
        return []


class ResignCalibrator:
    """Follows a run's shards, calibrates the threshold and keeps run/resign.json up to date.

    Reads only each shard's game list, once per shard. The calibration uses
    the newest CALIBRATION_GAMES played-through games; the measured rate counts
    every played-through game with a threshold, over restarts (the counts and
    the newest shard counted are kept in resign.json).
    """

    def __init__(self, run: RunDir, search: SearchConfig) -> None:
        self.run = run
        self.search = search
        self.path = resign_path(run)
        self.calibration = Calibration(None, 0, 0, 0)
        self.measured_cases = 0
        self.measured_false_positives = 0
        self.measured_games = 0
        self.corrupt_shards = 0
        self._window: deque[list[ResignCase]] = deque(maxlen=CALIBRATION_GAMES)
        self._known: set[str] = set()
        self._newest = ""
        state = read_resign_state(self.path) or {}
        measured = state.get("measured") or {}
        try:
            self.measured_cases = int(measured.get("cases", 0))
            self.measured_false_positives = int(measured.get("false_positives", 0))
            self.measured_games = int(measured.get("games", 0))
            self._counted_up_to = str(state.get("newest_shard", ""))
        except (TypeError, ValueError):
            self.measured_cases = self.measured_false_positives = self.measured_games = 0
            self._counted_up_to = ""
        saved = state.get("threshold")
        self.threshold: float | None = float(saved) if isinstance(saved, (int, float)) else None
        if search.resign_mode != "calibrated":
            self.threshold = threshold_for_actors(run, search)

    @property
    def measured_rate(self) -> float:
        return self.measured_false_positives / self.measured_cases if self.measured_cases else 0.0

    def refresh(self) -> bool:
        """Reads the new shards, recalibrates and writes resign.json; returns whether the threshold changed.

        Raises:
            OSError: resign.json cannot be written.
        """
        new = [name for name in _scan_names(self.run.selfplay) if name not in self._known]
        if not new:
            return False
        self._known.update(new)
        read: list[tuple[str, list[dict[str, Any]]]] = []
        played_through = 0
        for name in reversed(new):  # newest first: old shards only matter for counts not yet kept
            if played_through >= CALIBRATION_GAMES and name <= self._counted_up_to:
                continue
            games = self._read(name)
            read.append((name, games))
            played_through += sum(is_played_through(g) for g in games)
        for name, games in reversed(read):
            self._add(name, games)
        self.calibration = calibrate((c for cases in self._window for c in cases),
                                     target=self.search.resign_false_positive_target,
                                     min_cases=self.search.resign_min_cases)
        before = self.threshold
        if self.search.resign_mode == "calibrated":
            self.threshold = self.calibration.threshold
        self._save()
        return self.threshold != before

    def _read(self, name: str) -> list[dict[str, Any]]:
        try:
            return read_shard_games(self.run.selfplay / name)
        except ShardError as error:
            if (self.run.selfplay / name).exists():
                self.corrupt_shards += 1
                log.warning("resignation calibration: skipping unreadable shard (%s)", error)
            return []

    def _add(self, name: str, games: list[dict[str, Any]]) -> None:
        for game in games:
            if is_played_through(game):
                self._window.append(game_cases(game, self.search.resign_consecutive))
            if name > self._counted_up_to:
                cases, false_positives = measured_cases(game)
                self.measured_cases += cases
                self.measured_false_positives += false_positives
                self.measured_games += game.get("resign_threshold") is not None and not game.get("resign_enabled")
        self._newest = max(self._newest, name)

    def state(self) -> dict[str, Any]:
        """Gets the content of resign.json."""
        c = self.calibration
        return {
            "format": RESIGN_FORMAT,
            "version": 1,
            "mode": self.search.resign_mode,
            "threshold": self.threshold,
            "calibration": {"threshold": c.threshold, "cases": c.cases, "false_positives": c.false_positives,
                            "total_cases": c.total_cases, "games": len(self._window),
                            "target": self.search.resign_false_positive_target,
                            "min_cases": self.search.resign_min_cases,
                            "consecutive": self.search.resign_consecutive},
            "measured": {"cases": self.measured_cases, "false_positives": self.measured_false_positives,
                         "games": self.measured_games},
            "newest_shard": max(self._newest, self._counted_up_to),
            "updated_at": time.time(),
        }

    def _save(self) -> None:
        atomic_write_text(self.path, json.dumps(self.state(), indent=1) + "\n")

    def scalars(self) -> dict[str, float]:
        """Gets the TensorBoard scalars: resign/threshold (-1: nobody resigns), rates with 95% intervals."""
        low, high = wilson_interval(self.measured_false_positives, self.measured_cases)
        c = self.calibration
        c_low, c_high = c.interval
        values = {
            "resign/threshold": self.threshold if self.threshold is not None else NO_RESIGNATION,
            "resign/calibration_false_positive_rate": c.false_positive_rate,
            "resign/calibration_false_positive_rate_low": c_low,
            "resign/calibration_false_positive_rate_high": c_high,
            "resign/calibration_cases": c.cases,
            "resign/measured_cases": self.measured_cases,
        }
        if self.measured_cases:
            values.update({"resign/false_positive_rate": self.measured_rate,
                           "resign/false_positive_rate_low": low, "resign/false_positive_rate_high": high})
        return values

    def status(self) -> str:
        """Gets a short text for the live line: the threshold in force and the measured rate."""
        mode = self.search.resign_mode
        if self.threshold is None:
            if mode == "off":
                text = "resign off"
            else:
                c = self.calibration
                text = (f"resign: none yet ({c.cases} cases, {c.false_positive_rate:.0%} false positives "
                        f"below {max(THRESHOLD_GRID):+.2f}; needs {self.search.resign_min_cases} at "
                        f"<= {self.search.resign_false_positive_target:.0%})")
        else:
            text = f"resign < {self.threshold:+.2f} ({mode})"
        if self.measured_cases:
            low, high = wilson_interval(self.measured_false_positives, self.measured_cases)
            text += (f", false positives {self.measured_false_positives}/{self.measured_cases} "
                     f"= {self.measured_rate:.1%} (95% {low:.1%}-{high:.1%}) in {self.measured_games} games "
                     f"played through under a threshold")
        return text
