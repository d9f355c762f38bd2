"""Live progress lines that fit the terminal they are drawn on.

A live line that wraps on a narrow terminal is redrawn as a growing smear, so
lines are built from parts, most important first, and the parts that do not
fit the console's width are left out, from the end.

Example::

    fit_line(["step 1,200", "loss 3.210", "948 samples/s"], width=24)  # 'step 1,200 | loss 3.210'
"""

from __future__ import annotations

from collections.abc import Sequence

SEPARATOR = " | "
ELLIPSIS = "…"


def compact_number(value: float) -> str:
    """Formats a count or rate in a few characters: 45.6, 950, 12,345, 123.5k, 98.8M, 1.2G."""
    if abs(value) < 100_000:
        return f"{value:,.0f}" if abs(value) >= 100 or float(value).is_integer() else f"{value:.1f}"
    for divisor, suffix in ((1e3, "k"), (1e6, "M")):
        if abs(round(value / divisor, 1)) < 1000:  # 999,999 is 1.0M, not 1000.0k
            return f"{value / divisor:.1f}{suffix}"
    return f"{value / 1e9:.1f}G"


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
