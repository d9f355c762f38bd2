"""The user's cache folder: what one process measured about this machine, kept for the next.

``$ALPHAZERO_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/alphazero``, else
``~/.cache/alphazero`` (where Inductor and pip keep theirs on Linux). Files
there are written whole to a temporary name and renamed (``write_atomic``),
so that a reader never sees half a file and two processes writing at once
leave one whole file; anything there may be deleted, and is measured again.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

CACHE_ENV = "ALPHAZERO_CACHE_DIR"


def user_cache_dir() -> Path:
    """The cache folder (see the module docstring); not created here."""
    given = os.environ.get(CACHE_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "alphazero"


def write_atomic(path: Path, text: str) -> None:
    """Writes ``text`` to ``path`` through a temporary file in the same folder and a rename (the folder is made).

    Raises OSError where the folder cannot be made or written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


__all__ = ["CACHE_ENV", "user_cache_dir", "write_atomic"]
