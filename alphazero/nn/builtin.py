"""The networks that ship inside the package: their files, and the names that stand for them.

``alphazero/weights/builtin.pt`` is a model file (alphazero.store.checkpoint.save_model)
trained by ``alphazero pretrain`` (its card: ``alphazero/weights/README.md``).
``alphazero uci`` and ``alphazero match`` play it when their run has no
checkpoint; ``--weights builtin``, ``weights=builtin`` in a player spec and
``alphazero train --init builtin`` name it. A network that shipped before it
stays in the same folder as ``builtin-DATE.pt`` (DATE: the day it was
replaced) and is named ``builtin-DATE`` the same ways, for comparisons.
Weights named any way (a file, a run, ``builtin``) are found and read by
alphazero.store.sources.

>>> is_builtin("builtin"), is_builtin("builtin-2026-11-25"), is_builtin("runs/default")
(True, True, False)
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from alphazero.errors import UserError

BUILTIN = "builtin"  # the name that stands for the shipped network
EARLIER_NAME = r"builtin-[A-Za-z0-9][A-Za-z0-9._-]*"  # a network that shipped before: builtin-DATE
BUILTIN_FILE = Path(__file__).resolve().parents[1] / "weights" / "builtin.pt"
TRAIN_HINT = "train one with the command in the README's section \"Start from knowledge\""


def is_builtin(spec: str | os.PathLike[str] | None) -> bool:
    """Checks whether a weights option names a shipped network: 'builtin', or 'builtin-NAME' for an earlier one
    (unless a file or folder of that name is where the option points)."""
    if spec is None:
        return False
    name = str(spec).strip()
    if name == BUILTIN:
        return True
    return bool(re.fullmatch(EARLIER_NAME, name)) and not Path(name).exists()


def shipped_networks() -> dict[str, Path]:
    """Gets the shipped networks by name: 'builtin' (when this installation has it) and each earlier one."""
    folder = BUILTIN_FILE.parent
    found = {BUILTIN: BUILTIN_FILE} if BUILTIN_FILE.is_file() else {}
    earlier = sorted(folder.glob(f"{BUILTIN}-*.pt")) if folder.is_dir() else []
    return found | {path.stem: path for path in earlier if re.fullmatch(EARLIER_NAME, path.stem)}


def builtin_path() -> Path | None:
    """Gets the shipped network's file, or None when this installation has none."""
    return BUILTIN_FILE if BUILTIN_FILE.is_file() else None


def require_builtin(name: str | os.PathLike[str] = BUILTIN) -> Path:
    """Gets the file of the shipped network ``name`` ('builtin' or 'builtin-NAME').

    Raises:
        UserError: this installation has no network of that name (the message lists those it has).
    """
    name = str(name).strip()
    path = shipped_networks().get(name)
    if path is not None:
        return path
    if name == BUILTIN:
        raise UserError(f"this installation has no built-in network ({BUILTIN_FILE} is missing); {TRAIN_HINT}")
    names = ", ".join(shipped_networks()) or "none"
    raise UserError(f"no shipped network is named {name!r} (this installation has: {names}; they are the files "
                    f"of {BUILTIN_FILE.parent})")
