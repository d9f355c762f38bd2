"""The values of config fields: a field's type checked and widened, parsed from command-line text, written as TOML.

alphazero.config's sections declare their fields with Python types (bool, int,
float, str, tuple[T, ...]); these functions know those types and nothing of
the sections.

>>> coerce("search.c_init", 2, float), parse_text("learner.lr_boundaries", "[500, 900]", tuple[int, ...])
(2.0, (500, 900))
>>> toml_value((0.1, "a\\b"))
'[0.1, "a\\\\b"]'
"""

from __future__ import annotations

import functools
import math
import typing
from typing import Any

from alphazero.errors import UserError
from mcts_ext.params import C_INT_MAX

INT_RANGE = (-C_INT_MAX - 1, C_INT_MAX)
"""The range of an integer field without bounds of its own: a C int's, what the search and the chess core take
(mcts_ext.params.C_INT_MAX), so that a huge value is refused by name before anything runs or is written."""


@functools.cache
def type_hints(cls: Any) -> dict[str, Any]:
    """Gets the resolved field types of a section class (cached: every config made reads them)."""
    return typing.get_type_hints(cls)


def describe(hint: Any) -> str:
    """Names a field type for a message: 'an integer', 'a list of numbers'."""
    if typing.get_origin(hint) is tuple:
        return f"a list of {describe(typing.get_args(hint)[0])}s"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def coerce(dotted: str, value: Any, hint: Any) -> Any:
    """Checks ``value`` against the field type ``hint``; widens int to float and lists to tuples.

    Raises:
        UserError: the value has the wrong type; the message names ``dotted``.
    """
    if typing.get_origin(hint) is tuple:
        if isinstance(value, (list, tuple)):
            item = typing.get_args(hint)[0]
            return tuple(coerce(f"{dotted}[{i}]", v, item) for i, v in enumerate(value))
    elif hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    raise UserError(f"{dotted} must be {describe(hint)}, got {value!r}")


def check_range(dotted: str, value: Any, hint: Any, low: float | None = None, high: float | None = None) -> None:
    """Checks a number field's value (each item of a list's) against ``low`` and ``high`` (inclusive; None:
    unbounded, and for an integer field INT_RANGE's end).

    Raises:
        UserError: out of range; the message names ``dotted`` and the range.
    """
    if typing.get_origin(hint) is tuple:
        for i, item in enumerate(value):
            check_range(f"{dotted}[{i}]", item, typing.get_args(hint)[0], low, high)
        return
    if hint not in (int, float):
        return
    if low is not None and value < low:
        raise UserError(f"{dotted} must be at least {low:g}, got {value!r}")
    if hint is int:
        low, high = INT_RANGE[0] if low is None else low, INT_RANGE[1] if high is None else high
    if high is not None and (value > high or (low is not None and value < low)):
        where = f"lie in [{_bound(low)}, {_bound(high)}]" if low is not None else f"be at most {_bound(high)}"
        raise UserError(f"{dotted} must {where}, got {value!r}")


def _bound(value: float) -> str:
    """Writes a bound of a range: an integer in full (2147483647, not %g's 2.14748e+09)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})


def parse_text(dotted: str, text: str, hint: Any) -> Any:
    """Parses a command-line value for a field of type ``hint``.

    Raises:
        UserError: ``text`` does not parse as that type.
    """
    text = text.strip()
    if typing.get_origin(hint) is tuple:
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        items = [part for part in (p.strip() for p in inner.split(",")) if part]
        return tuple(parse_text(f"{dotted}[{i}]", part, typing.get_args(hint)[0]) for i, part in enumerate(items))
    if hint is bool:
        if text.lower() in _TRUE_WORDS | _FALSE_WORDS:
            return text.lower() in _TRUE_WORDS
    elif hint is int:
        try:
            return int(text)
        except ValueError:
            pass
    elif hint is float:
        try:
            return float(text)
        except ValueError:
            pass
    elif hint is str:
        if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
            return text[1:-1]
        return text
    raise UserError(f"{dotted} must be {describe(hint)}, got {text!r}")




def _toml_string(text: str) -> str:
    escapes = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    out = []
    for char in text:
        if char in escapes:
            out.append(escapes[char])
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)  # shortest text that reads back to the same float ('0.0001', '1e-05')
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} as a TOML value: {value!r}")
