"""The network that ships inside the package: its file, and the name ``builtin`` that stands for it.

``alphazero/weights/builtin.pt`` is a model file (alphazero.store.checkpoint.save_model)
trained by ``alphazero pretrain`` (its card: ``alphazero/weights/README.md``).
``alphazero uci`` and ``alphazero match`` play it when their run has no
checkpoint; ``--weights builtin``, ``weights=builtin`` in a player spec and
``alphazero train --init builtin`` name it. Weights named any way (a file, a
run, ``builtin``) are found and read by alphazero.store.sources.

>>> is_builtin("builtin"), is_builtin("runs/default")
(True, False)
"""

from __future__ import annotations

import os
from pathlib import Path

from alphazero.errors import UserError

BUILTIN = "builtin"  # the name that stands for the shipped network
BUILTIN_FILE = Path(__file__).resolve().parents[1] / "weights" / "builtin.pt"
TRAIN_HINT = "train one with the command in the README's section \"Start from knowledge\""


def is_builtin(spec: str | os.PathLike[str] | None) -> bool:
    """Checks whether a weights option names the shipped network ('builtin')."""
    return spec is not None and str(spec).strip() == BUILTIN


def builtin_path() -> Path | None:
    """Gets the shipped network's file, or None when this installation has none."""
    return BUILTIN_FILE if BUILTIN_FILE.is_file() else None


def require_builtin() -> Path:
    """Gets the shipped network's file.

    Raises:
        UserError: this installation has no built-in network.
    """
    path = builtin_path()
    if path is None:
        raise UserError(f"this installation has no built-in network ({BUILTIN_FILE} is missing); {TRAIN_HINT}")
    return path
