"""What the terminal shows while work runs: live lines and progress bars that fit it, and numbers in a few characters.

Every live display of the commands (self-play's and the learner's status
lines, pretraining's and the match runner's bars) is a LiveDisplay: rich,
on stderr unless told otherwise, drawing nothing when disabled.

A live line that wraps on a narrow terminal is redrawn as a growing smear, so
lines are built from parts, most important first, and the parts that do not
fit the console's width are left out, from the end.

Example::

    fit_line(["step 1,200", "loss 3.210", "948 samples/s"], width=24)  # 'step 1,200 | loss 3.210'
    with LiveDisplay(bar=("label", "bar", "count", "text", "elapsed"), label="labels", total=500) as bar:
        bar.update(completed=20, text="12.5 positions/s")
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

SEPARATOR = " | "
ELLIPSIS = "…"


def compact_number(value: float, *, exact_below: float = 100_000) -> str:
    """Formats a count or rate in a few characters: 45.6, 950, 12,345, 123.5k, 98.8M, 1.2G, 460.7T.

    Values below ``exact_below`` are written out (thousands separated); the
    benchmarks' tables pass 1,000, so that 12,345 is '12.3k' there.

    >>> compact_number(12_345), compact_number(12_345, exact_below=1_000), compact_number(999_999)
    ('12,345', '12.3k', '1.0M')
    >>> compact_number(5.13e13), compact_number(4.607e14)   # a GPU's FLOP/s: 51,287 G is 51.3T
    ('51.3T', '460.7T')
    """
    if abs(value) < exact_below:
        return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.1f}"
    for divisor, suffix in ((1e3, "k"), (1e6, "M"), (1e9, "G")):
        if abs(round(value / divisor, 1)) < 1000:  # 999,999 is 1.0M, not 1000.0k
            return f"{value / divisor:.1f}{suffix}"
    return f"{value / 1e12:.1f}T"


def clock_text(seconds: float) -> str:
    """Formats a duration as a clock does: m:ss below an hour, h:mm:ss from one; negatives read 0:00.

    >>> clock_text(125.9), clock_text(3601), clock_text(-5)
    ('2:05', '1:00:01', '0:00')
    """
    whole = max(0, int(seconds))
    if whole >= 3600:
        return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"
    return f"{whole // 60}:{whole % 60:02d}"


def fit_line(parts: Sequence[str], width: int | None, *, separator: str = SEPARATOR) -> str:
    """Joins ``parts`` (most important first) with ``separator`` into at most ``width`` characters.

    Parts that would overflow are left out from the end; the first is always
    kept, cut short with an ellipsis when it alone is too long. ``width``
    None keeps every part.
    """
    if not parts:
        return ""
    line = parts[0]
    if width is None:
        return separator.join(parts)
    if len(line) > width:
        return line[:max(width - 1, 0)] + ELLIPSIS
    for part in parts[1:]:
        if len(line) + len(separator) + len(part) > width:
            break
        line += separator + part
    return line


BAR_COLUMNS = ("label", "bar", "percent", "count", "text", "elapsed", "remaining")
"""What a LiveDisplay's progress bar may show, in the order given: its label, the bar, the percentage, done of
total, the text of the last update, the time elapsed or the time remaining."""


class LiveDisplay:
    """A live area on the terminal, redrawn in place: status lines (show) or a progress bar (update).

    With ``bar`` (names from BAR_COLUMNS) it is a rich progress bar of ``total``
    steps; without, lines of text that are cut, never wrapped, at the
    terminal's width, with messages printed above them (message). Nothing is
    drawn when ``enabled`` is false, nor with ``terminal_only`` when the output
    is not a terminal (``live`` says whether it draws). ``transient`` areas
    vanish when stopped; ``stderr=False`` draws on stdout.
    """

    def __init__(self, *, enabled: bool = True, bar: Sequence[str] = (), label: str = "", total: float | None = None,
                 bar_width: int | None = None, text: str = "", stderr: bool = True, transient: bool = False,
                 refresh_per_second: float | None = None, terminal_only: bool = False) -> None:
        unknown = [name for name in bar if name not in BAR_COLUMNS]
        if unknown:
            raise ValueError(f"unknown bar columns {unknown}; the columns are {', '.join(BAR_COLUMNS)}")
        self._live: Any = None
        self._task: Any = None
        self._line_after = not transient and not bar  # rich leaves the cursor at the end of a lasting Live
        refresh: dict[str, Any] = {} if refresh_per_second is None else {"refresh_per_second": refresh_per_second}
        if not enabled:
            return
        from rich.console import Console

        console = Console(stderr=stderr)
        if terminal_only and not console.is_terminal:
            return
        if bar:
            from rich.progress import Progress

            self._live = Progress(*_bar_columns(bar, bar_width), console=console, transient=transient, **refresh)
            self._task = self._live.add_task(label, total=total, text=text)
        else:
            from rich.live import Live

            self._live = Live(_unwrapped(text), console=console, transient=transient, **refresh)

    @property
    def live(self) -> bool:
        """Whether anything is drawn."""
        return self._live is not None

    @property
    def width(self) -> int | None:
        """The terminal's width in columns; None when nothing is drawn (printed lines may be long)."""
        return self._live.console.width if self._live is not None else None

    def start(self) -> LiveDisplay:
        if self._live is not None:
            self._live.start()
        return self

    def show(self, text: str) -> None:
        """Shows ``text`` (lines) as the live area, each line cut at the terminal's width."""
        if self._live is not None:
            self._live.update(_unwrapped(text))

    def update(self, *, completed: float | None = None, advance: float | None = None, total: float | None = None,
               text: str | None = None) -> None:
        """Moves the progress bar: to ``completed`` or by ``advance`` steps, a new ``total``, a new ``text``."""
        if self._live is None:
            return
        fields: dict[str, Any] = {} if text is None else {"text": text}
        self._live.update(self._task, completed=completed, advance=advance, total=total, **fields)

    def message(self, text: str) -> None:
        """Prints a line that stays, above the live area."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)

    def stop(self) -> None:
        """Stops redrawing; a lasting area stays, and what is printed next starts on a line of its own."""
        if self._live is not None:
            self._live.stop()
            if self._line_after:
                self._live.console.line()
            self._live = None

    def __enter__(self) -> LiveDisplay:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()


def _unwrapped(text: str) -> Any:
    from rich.text import Text

    # no_wrap: a line too long for the terminal is cut, never wrapped into a smear.
    return Text(text, no_wrap=True, overflow="ellipsis")


def _bar_columns(names: Sequence[str], bar_width: int | None) -> list[Any]:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    made = {
        "label": lambda: TextColumn("{task.description}"),
        "bar": lambda: BarColumn(bar_width=bar_width) if bar_width is not None else BarColumn(),
        "percent": lambda: TextColumn("{task.percentage:>3.0f}%"),
        "count": MofNCompleteColumn,
        "text": lambda: TextColumn("{task.fields[text]}"),
        "elapsed": TimeElapsedColumn,
        "remaining": TimeRemainingColumn,
    }
    return [made[name]() for name in names]
