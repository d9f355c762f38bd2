"""The probe's defaults, in a module that imports nothing: `alphazero probe --help` (eval.cli) shows them
without loading torch, and eval.probe uses them."""

from __future__ import annotations

DEFAULT_PROBE_POSITIONS = 8192
"""The default size of a probe set: the positions of it that a probe measures on."""
