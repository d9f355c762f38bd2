"""Finds the Stockfish binary (Debian's `stockfish` package puts it in /usr/games)."""

from __future__ import annotations

import os
import shutil

from alphazero.errors import UserError

INSTALL_HINT = "install it with `sudo apt-get install -y stockfish` (Debian/Ubuntu) or put `stockfish` on PATH"


def find_stockfish() -> str | None:
    """The path of a Stockfish binary: $STOCKFISH, then PATH, then /usr/games; None if absent."""
    candidates = [os.environ.get("STOCKFISH"), shutil.which("stockfish"), "/usr/games/stockfish"]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def require_stockfish() -> str:
    """Like find_stockfish(), but raises UserError saying how to install it."""
    path = find_stockfish()
    if path is None:
        raise UserError(f"Stockfish was not found; {INSTALL_HINT}")
    return path
