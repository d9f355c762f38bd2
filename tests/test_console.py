"""Live progress lines that fit the terminal (alphazero.console)."""

from __future__ import annotations

from alphazero.console import compact_number, fit_line


def test_parts_that_do_not_fit_are_left_out_from_the_end() -> None:
    parts = ["step 1,200", "loss 3.210", "948 samples/s"]
    assert fit_line(parts, None) == "step 1,200 | loss 3.210 | 948 samples/s"
    assert fit_line(parts, 23) == "step 1,200 | loss 3.210"
    assert fit_line(parts, 22) == "step 1,200"
    assert fit_line(parts, 5) == "step…"  # the first part is always there, cut short if it must be
    assert fit_line([], 80) == ""


def test_compact_numbers() -> None:
    assert [compact_number(v) for v in (5, 45.6, 950, 12_345, 123_456, 999_999, 98_765_432, 5e9)] == [
        "5", "45.6", "950", "12,345", "123.5k", "1.0M", "98.8M", "5.0G"]
