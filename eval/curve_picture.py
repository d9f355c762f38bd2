"""The curve's pictures: one run's Elo over its time (``RUN/curve/curve.png``), and several runs side by side
on one Elo scale (``curve --beside``), each from the points its ``curve.json`` holds."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from alphazero.errors import UserError
from alphazero.store.rundir import atomic_write_bytes

CURVE_JSON = Path("curve") / "curve.json"
MINUTES_BELOW_HOURS = 1.5
"""A run shorter than this many hours is drawn against its minutes."""
LOG_TIME_SPAN = 9.0
"""Checkpoints whose times (after the start) span this factor or more, two triplings, are drawn on a log-scaled
time axis: a run that triples its time gains about as much each time, which a log axis shows as a line."""
START_HOURS = 1.0 / 3600.0
"""A checkpoint written within the run's first second is its start (step 0, written before any game): a log axis
draws it as a line, not at a time of its own."""
TIME_AXES = ("auto", "log", "linear")
"""The time axis a curve may ask for: auto (log where the times span LOG_TIME_SPAN), or either scale."""


@dataclass(frozen=True)
class Panel:
    """One run's curve as drawn: its title, its points (CurvePoint) and the fixed players' lines (name -> Elo)."""

    title: str
    points: Sequence[Any]
    lines: dict[str, float]


def _is_line(name: str, anchors: Any, random_name: str) -> bool:
    """Whether a rated player is drawn as a horizontal line: an anchor that is no checkpoint, or random."""
    return (name in anchors and not name.startswith("step")) or name == random_name


def fixed_lines(ratings: dict[str, Any], anchors: dict[str, float], random_name: str) -> dict[str, float]:
    """The horizontal lines of a curve: its anchors (Stockfish levels) and random, at their fitted Elo."""
    return {name: rating.elo for name, rating in ratings.items() if _is_line(name, anchors, random_name)}


def draw_curve(path: Path, panel: Panel, *, relative: bool, axis: str = "auto") -> None:
    """Draws Elo against the run's hours, 95% intervals as error bars, the anchors and random as lines
    (``relative``: no anchor, the start is 0); on a log-scaled time axis where the checkpoints' times span two
    triplings or more, or as ``axis`` says (time_axis). The title is kept in the PNG's ``Title`` text too."""
    draw_panels(path, [panel], ylabel="Elo" + (" (the start = 0)" if relative else ""), width=7.0, axis=axis)


def draw_panels(path: Path, panels: Sequence[Panel], *, ylabel: str = "Elo", width: float | None = None,
                axis: str = "auto") -> None:
    """Draws the panels side by side on one Elo axis (shared: the same anchors line up across them), each on the
    time axis ``axis`` chooses (time_axis)."""
    import matplotlib

    matplotlib.use("Agg")  # no screen: render to a file
    from matplotlib import pyplot as plt

    figure, axes_row = plt.subplots(1, len(panels), figsize=(width or 5.0 * len(panels), 4.5), sharey=True,
                                    squeeze=False)
    try:
        for axes, panel in zip(axes_row[0], panels):
            _draw_panel(axes, panel, axis)
        axes_row[0][0].set_ylabel(ylabel)
        buffer = io.BytesIO()
        title = " | ".join(panel.title for panel in panels)
        figure.savefig(buffer, format="png", dpi=120, bbox_inches="tight", metadata={"Title": title})
    finally:
        plt.close(figure)
    atomic_write_bytes(path, buffer.getvalue())


def time_axis(hours: Sequence[float], axis: str = "auto") -> str:
    """Gets the time axis's scale for points at these hours: ``axis`` where it names one, else 'log' where the
    times after the start (START_HOURS) span LOG_TIME_SPAN or more, else 'linear'.

    >>> time_axis([0.0, 0.17, 0.5, 1.5, 3.0]), time_axis([0.0, 0.5, 1.0, 1.5]), time_axis([1e-6, 0.36, 1, 3])
    ('log', 'linear', 'linear')
    >>> time_axis([0.0, 0.36, 1.0, 3.0], "log")
    'log'
    """
    if axis not in TIME_AXES:
        raise UserError(f"the time axis is one of {', '.join(TIME_AXES)}, got {axis!r}")
    if axis != "auto":
        return axis
    after_start = [h for h in hours if h > START_HOURS]
    return "log" if after_start and max(after_start) >= LOG_TIME_SPAN * min(after_start) else "linear"


def _draw_panel(axes: Any, panel: Panel, axis: str) -> None:
    longest = max((point.hours for point in panel.points), default=0.0)
    scale, unit = (60.0, "minutes") if longest < MINUTES_BELOW_HOURS else (1.0, "hours")
    points = panel.points
    if time_axis([point.hours for point in points], axis) == "log":
        # The start has no place on a log axis: a line at its rating stands for it.
        for point in points:
            if point.hours <= START_HOURS and getattr(point, "bound", None) is None:
                axes.axhline(point.elo, linestyle=":", linewidth=0.8, color="tab:blue")
                axes.annotate("the start", (0, point.elo), xycoords=("axes fraction", "data"),
                              textcoords="offset points", xytext=(2, 3), fontsize=8, color="tab:blue")
        points = [point for point in points if point.hours > START_HOURS]
        axes.set_xscale("log")
    rated = [point for point in points if getattr(point, "bound", None) is None]
    times = [scale * point.hours for point in rated]
    elos = [point.elo for point in rated]
    errors = [[point.elo - point.low for point in rated], [point.high - point.elo for point in rated]]
    axes.errorbar(times, elos, yerr=errors, marker="o", capsize=3, label="the run's search")
    _draw_bounds(axes, [point for point in points if getattr(point, "bound", None) is not None], scale)
    for name, elo in panel.lines.items():
        axes.axhline(elo, linestyle="--", linewidth=0.8, color="grey")
        axes.annotate(name, (0, elo), xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(2, 3),
                      fontsize=8, color="grey")
    if axes.get_xscale() == "log":  # ticks at the checkpoints' own times, plainly written
        from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

        ticks = sorted(set(times))
        axes.xaxis.set_major_locator(FixedLocator(ticks[::-(-len(ticks) // 8)]))  # at most 8, the first kept
        axes.xaxis.set_major_formatter(lambda value, _: f"{value:.2g}" if value < 10 else f"{value:.0f}")
        axes.xaxis.set_minor_locator(NullLocator())
        axes.xaxis.set_minor_formatter(NullFormatter())
    axes.set_xlabel(f"{unit} of the run" + (" (log scale)" if axes.get_xscale() == "log" else ""))
    axes.set_title(panel.title, fontsize=10)
    axes.grid(alpha=0.3)


def _draw_bounds(axes: Any, points: Sequence[Any], scale: float) -> None:
    """Draws the points whose games support only a bound ('below 1320') as a triangle at the bound, pointing
    the way the rating lies, with no interval: the games give no number."""
    for side, marker in (("below", "v"), ("above", "^")):
        chosen = [point for point in points if point.bound.startswith(side)]
        if chosen:
            axes.scatter([scale * point.hours for point in chosen], [float(point.bound.split()[1]) for point in chosen],
                         marker=marker, color="tab:red", zorder=3, label=f"{side} the anchors it met (all games "
                                                                        f"{'lost' if side == 'below' else 'won'})")


def read_panel(run_root: Path, point_type: type, random_name: str) -> Panel:
    """A run's panel from its ``curve/curve.json`` (written by `alphazero curve`), titled by the run's folder.

    Raises:
        UserError: the run has no curve.json, or one that cannot be read.
    """
    path = run_root / CURVE_JSON
    try:
        payload = json.loads(path.read_text())
        names = {field.name for field in fields(point_type)}
        points = [point_type(**{key: value for key, value in point.items() if key in names})
                  for point in payload["points"]]
        ratings, anchors = payload["ratings"], payload["anchors"]
        lines = {name: float(rating["elo"]) for name, rating in ratings.items() if _is_line(name, anchors, random_name)}
    except FileNotFoundError:
        raise UserError(f"{path}: no curve there; run `alphazero curve --run {run_root}` first") from None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f"{path} cannot be read as a curve ({type(error).__name__}: {error})") from None
    name = run_root.name or run_root.resolve().name
    return Panel(f"{name}: search:{payload.get('settings', {}).get('simulations', '?')}", points, lines)
