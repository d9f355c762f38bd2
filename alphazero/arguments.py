"""Argparse types for the command line's numbers: each refuses a value its flag cannot take, before any work.

Given as a flag's ``type=``, a refusal is argparse's one line and exit status
2 (``alphazero train: error: argument --minutes: must be a finite number above
0, got 'nan'``), said as the command line is read: a NaN, an infinity or a
count out of range passes a ``<= 0`` check and fails minutes later, deep
inside, as a traceback. Plain Python only: the command line is read without
torch.

>>> positive_float("1.5")
1.5
>>> positive_float("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: must be a finite number above 0, got 'nan'
>>> thread_count("0")
0
"""

from __future__ import annotations

import argparse
import math

from mcts_ext.params import C_INT_MAX  # the largest count a flag takes: counts reach the search as C ints

MAX_THREADS = 1024
"""The most CPU threads a --threads flag takes (the UCI engine's Threads option's maximum)."""
MAX_GPUS = 1024
"""The most GPUs a --gpus flag takes (Ray refuses a node's resource past 1e14, and a negative one)."""


def _float(text: str) -> float:
    """Reads a number (NaN and the infinities included: the callers bound it)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None


def _integer(text: str) -> int:
    """Reads an integer of any size (the callers bound it)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def positive_float(text: str) -> float:
    """A finite number above 0 (minutes, seconds, a rate); NaN and the infinities (1e309 reads as one) are not."""
    value = _float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number above 0, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """A finite number of 0 or more."""
    value = _float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number of 0 or more, got {text!r}")
    return value


def gpu_count(text: str) -> float:
    """GPUs, a share of one included: 0 (none) to MAX_GPUS."""
    value = nonnegative_float(text)
    if value > MAX_GPUS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_GPUS} GPUs, got {text!r}")
    return value


def _count(text: str, least: int) -> int:
    """Reads an integer from ``least`` to C_INT_MAX."""
    value = _integer(text)
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, got {text!r}")
    if value > C_INT_MAX:
        raise argparse.ArgumentTypeError(f"must be at most {C_INT_MAX}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer from 1 to C_INT_MAX (games, simulations, milliseconds)."""
    return _count(text, 1)


def nonnegative_int(text: str) -> int:
    """An integer from 0 (the default, or none) to C_INT_MAX."""
    return _count(text, 0)


def thread_count(text: str) -> int:
    """CPU threads: 0 (torch's choice) to MAX_THREADS, which also keeps the count inside a C int."""
    value = _integer(text)
    if not 0 <= value <= MAX_THREADS:
        raise argparse.ArgumentTypeError(f"must be 0 (torch's choice) to {MAX_THREADS}, got {text!r}")
    return value
