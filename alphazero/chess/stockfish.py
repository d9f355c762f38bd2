"""Finds the Stockfish binary (Debian's `stockfish` package puts it in /usr/games), and Fairy-Stockfish's.

Fairy-Stockfish (Debian's `fairy-stockfish`, 11.1) plays the ladder's rungs
below Stockfish's weakest level: its Skill Level goes down to -20.
"""

from __future__ import annotations

import os
import shutil

from alphazero.errors import UserError

INSTALL_HINT = "install it with `sudo apt-get install -y stockfish` (Debian/Ubuntu) or put `stockfish` on PATH"
FAIRY_INSTALL_HINT = ("install it with `sudo apt-get install -y fairy-stockfish` (Debian/Ubuntu) or put "
                      "`fairy-stockfish` on PATH (or name it in $FAIRY_STOCKFISH)")


def _first_executable(candidates: list[str | None]) -> str | None:
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def find_stockfish() -> str | None:
    """The path of a Stockfish binary: $STOCKFISH, then PATH, then /usr/games; None if absent."""
    return _first_executable([os.environ.get("STOCKFISH"), shutil.which("stockfish"), "/usr/games/stockfish"])


def require_stockfish() -> str:
    """Like find_stockfish(), but raises UserError saying how to install it."""
    path = find_stockfish()
    if path is None:
        raise UserError(f"Stockfish was not found; {INSTALL_HINT}")
    return path


def find_fairy_stockfish() -> str | None:
    """The path of a Fairy-Stockfish binary: $FAIRY_STOCKFISH, then PATH, then /usr/games; None if absent."""
    return _first_executable([os.environ.get("FAIRY_STOCKFISH"), shutil.which("fairy-stockfish"),
                              "/usr/games/fairy-stockfish"])


def require_fairy_stockfish() -> str:
    """Like find_fairy_stockfish(), but raises UserError saying how to install it."""
    path = find_fairy_stockfish()
    if path is None:
        raise UserError(f"Fairy-Stockfish was not found; {FAIRY_INSTALL_HINT}")
    return path
