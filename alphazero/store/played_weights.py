"""The weights self-play plays, named by what they are: a checkpoint's identity and the poll that follows LATEST.

Actors (selfplay.worker, selfplay.inference) and the Ray feed (selfplay.fleet,
selfplay.publish) take whatever weights LATEST names once they differ from the
ones in use, not only those of a higher step: ``learn --from-checkpoint N``
points LATEST back at step N (rewind_checkpoints), and the learner then writes
new steps N+1, ... that are other networks than the abandoned ones of the same
steps. So weights are named by their identity (``weights_identity``): the
step and the SHA-256 of the model saved with them (the ``model`` checksum every
checkpoint since checksums carries), or for an older file without checksums the
file itself (name, size, modification time, inode: files are written
atomically, a new file each time, and never changed in place).

A poll reads a checkpoint only when LATEST names another file than the one
last read (``file_key``), so an unchanged run costs a stat per poll.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from alphazero.config import NetworkConfig
from alphazero.errors import UserError
from alphazero.store.checkpoint import latest_checkpoint, load_checkpoint
from alphazero.store.rundir import RunDir


@dataclass(frozen=True)
class CheckpointWeights:
    """A checkpoint's weights as the actors take them."""

    step: int
    identity: str                      # weights_identity: equal identities, equal weights
    state: dict[str, torch.Tensor]     # the model's state dict (memory-mapped, CPU)
    path: Path
    file_key: str                      # the file as read (file_key): the same key is not read again


def file_key(path: Path) -> str | None:
    """Gets a key of the checkpoint file at ``path`` as it is now (None when it is missing), without reading it."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}:{stat.st_ino}"


def weights_identity(payload: dict[str, Any], key: str | None) -> str:
    """Names a checkpoint's weights by what they are: its step and the SHA-256 of its model (the checksum saved
    with it), or for a file from before checksums its step and its file's key."""
    digest = (payload.get("checksums") or {}).get("model")
    if isinstance(digest, str) and digest:
        return f"step {payload['step']} sha256 {digest[:16]}"
    return f"step {payload['step']} file {key}"


def read_checkpoint_weights(path: Path, expected: NetworkConfig | None = None) -> CheckpointWeights:
    """Reads the weights of checkpoint ``path`` with their identity (memory-mapped, no optimizer state).

    Raises:
        UserError: the file is corrupt, not a checkpoint, or not of architecture ``expected``.
    """
    key = file_key(path)
    payload = load_checkpoint(path, "cpu", expected=expected, mmap=True, check_optimizer=False)
    return CheckpointWeights(int(payload["step"]), weights_identity(payload, key), payload["model"], path,
                             key or "")


def poll_latest_weights(run_dir: RunDir | str | os.PathLike[str], expected: NetworkConfig, *,
                        seen_file: str | None = None) -> CheckpointWeights | None:
    """Reads the weights LATEST names, unless that file is the one last read (``seen_file``, its file_key).

    Returns None when the run has no checkpoint, or LATEST still names the
    file read before. The caller compares the identity with its own: the same
    weights may come back in another file.

    Raises:
        UserError: the checkpoint LATEST names is corrupt or not of architecture ``expected``.
    """
    for attempt in range(3):
        path = latest_checkpoint(run_dir)
        if path is None:
            return None
        key = file_key(path)
        if key is not None and key == seen_file:
            return None
        try:
            return read_checkpoint_weights(path, expected)
        except UserError:
            if path.exists() or attempt == 2:
                raise
            continue  # thinned between listing and opening: look again
    return None


__all__ = ["CheckpointWeights", "file_key", "poll_latest_weights", "read_checkpoint_weights", "weights_identity"]
