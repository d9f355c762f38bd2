"""Learner checkpoints in ``run/checkpoints/``: what the learner resumes from and actors load.

Files:

- ``step_000012000.pt``: a dict saved by torch (loads with ``weights_only=True``)::

      format "alphazero-checkpoint", version 1, step,
      network (the NetworkConfig as a dict), architecture_hash,
      config_toml, config_hash (the run config the learner used),
      model (state dict, CPU), optimizer (state dict or None),
      rng {python, numpy, torch[, cuda]}, plus any extra entries.

- ``LATEST``: one line, the file name of the newest complete checkpoint.

Order of writes: the step file is written atomically first, then LATEST
(atomically), so LATEST never names a missing or partial file. Readers that
find LATEST missing or stale fall back to the highest step file present.

Thinning (``thin_checkpoints``) keeps the newest ``keep`` step files and, when
``keep_every`` > 0, every older file whose step is a multiple of it (a sparse
history for Elo curves); it never deletes the file LATEST names.

``load_model`` in alphazero.network also opens checkpoints (weights only).
"""

from __future__ import annotations

import dataclasses
import io
import os
import random
import re
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from alphazero.config import Config, NetworkConfig, architecture_hash, config_hash, to_toml
from alphazero.errors import UserError
from alphazero.network import (
    AlphaZeroNet, check_architecture, cpu_state_dict, load_weights, network_config_of, read_payload,
)
from alphazero.rundir import RunDir, atomic_write_bytes, atomic_write_text, complete_files, remove_stale_temporaries

CHECKPOINT_FORMAT = "alphazero-checkpoint"
FORMAT_VERSION = 1
LATEST_NAME = "LATEST"
_STEP_FILE = re.compile(r"^step_(\d+)\.pt$")


def checkpoint_name(step: int) -> str:
    """Gets the file name of the checkpoint of ``step`` ('step_000012000.pt')."""
    return f"step_{step:09d}.pt"


def step_of(path: str | os.PathLike[str]) -> int | None:
    """Gets the step in a checkpoint file name, or None for any other name."""
    match = _STEP_FILE.match(Path(path).name)
    return int(match.group(1)) if match else None


def _checkpoint_dir(run_dir: RunDir | str | os.PathLike[str]) -> Path:
    return run_dir.checkpoints if isinstance(run_dir, RunDir) else RunDir(run_dir).checkpoints


# --- random number generators ------------------------------------------------------

def rng_states() -> dict[str, Any]:
    """Gets the states of Python's, numpy's and torch's global generators as plain data."""
    numpy_state = np.random.get_state(legacy=False)
    assert isinstance(numpy_state, dict)
    states: dict[str, Any] = {
        "python": random.getstate(),
        # numpy arrays do not load under weights_only; a tensor of the same words does.
        "numpy": {**numpy_state, "state": {"key": torch.from_numpy(numpy_state["state"]["key"].astype(np.int64)),
                                           "pos": int(numpy_state["state"]["pos"])}},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Restores generator states saved by ``rng_states`` (CUDA only when the device count matches)."""
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    numpy_state = dict(states["numpy"])
    key = np.asarray(numpy_state["state"]["key"].numpy(), dtype=np.uint32)
    numpy_state["state"] = {"key": key, "pos": int(numpy_state["state"]["pos"])}
    np.random.set_state(numpy_state)
    torch.set_rng_state(states["torch"])
    cuda = states.get("cuda")
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


# --- writing ----------------------------------------------------------------------------

def save_checkpoint(
    run_dir: RunDir | str | os.PathLike[str],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None,
    step: int,
    config: Config,
    **extra: Any,
) -> Path:
    """Writes ``step_<step>.pt`` atomically, then points LATEST at it; returns the file's path.

    ``extra`` entries (plain data) are stored beside the standard ones.

    Raises:
        UserError: the checkpoints folder cannot be written.
    """
    directory = _checkpoint_dir(run_dir)
    path = directory / checkpoint_name(step)
    network = getattr(model, "_orig_mod", model).config
    payload = {
        **extra,
        "format": CHECKPOINT_FORMAT,
        "version": FORMAT_VERSION,
        "step": int(step),
        "network": dataclasses.asdict(network),
        "architecture_hash": architecture_hash(network),
        "config_toml": to_toml(config),
        "config_hash": config_hash(config),
        "model": cpu_state_dict(model),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "rng": rng_states(),
    }
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    try:
        atomic_write_bytes(path, buffer.getvalue())
        atomic_write_text(directory / LATEST_NAME, path.name + "\n")
    except OSError as error:
        raise UserError(f"cannot write checkpoint {path}: {error.strerror or error}") from None
    return path


def thin_checkpoints(directory: str | os.PathLike[str], keep: int, *, keep_every: int = 0) -> list[Path]:
    """Deletes old step files in ``directory``; returns the deleted paths.

    Keeps the newest ``keep``, every older one whose step is a multiple of
    ``keep_every`` (when > 0), and the one LATEST names. Also removes
    temporaries left for over an hour by killed writers.

    Raises:
        ValueError: ``keep`` < 1.
    """
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    directory = Path(directory)
    latest = _read_latest_name(directory)
    found = sorted((step_of(p), p) for p in complete_files(directory, "step_*.pt") if step_of(p) is not None)
    deleted = []
    for step, path in found[:-keep]:
        assert step is not None
        if (keep_every > 0 and step % keep_every == 0) or path.name == latest:
            continue
        path.unlink(missing_ok=True)
        deleted.append(path)
    remove_stale_temporaries(directory)
    return deleted


# --- reading ------------------------------------------------------------------------------

def _read_latest_name(directory: Path) -> str | None:
    try:
        name = (directory / LATEST_NAME).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if step_of(name) is not None else None  # only a bare step file name, never a path


def latest_checkpoint(run_dir: RunDir | str | os.PathLike[str]) -> Path | None:
    """Gets the newest checkpoint of the run at ``run_dir`` (its root), or None when there is none.

    Trusts LATEST when it names an existing file; otherwise takes the highest step file.
    """
    directory = _checkpoint_dir(run_dir)
    name = _read_latest_name(directory)
    if name is not None and (directory / name).is_file():
        return directory / name
    found = [(step_of(p), p) for p in complete_files(directory, "step_*.pt") if step_of(p) is not None]
    return max(found)[1] if found else None


def load_checkpoint(
    path: str | os.PathLike[str],
    map_location: torch.device | str = "cpu",
    *,
    expected: NetworkConfig | None = None,
    mmap: bool = False,
) -> dict[str, Any]:
    """Reads a checkpoint file into a dict (see the module docstring for its entries).

    With ``expected``, checks that the checkpoint's network is that architecture.
    ``mmap=True`` maps the file instead of reading it all (for weights only).

    Raises:
        UserError: missing, truncated or corrupt file, a file that is not a
            learner checkpoint, or another architecture (naming the fields).
    """
    payload = read_payload(path, map_location, mmap=mmap)
    if payload.get("format") != CHECKPOINT_FORMAT or not isinstance(payload.get("step"), int):
        raise UserError(f"{path} is corrupt or not a checkpoint: it is not a learner checkpoint "
                        f"(format {payload.get('format')!r})")
    if payload.get("version", 0) > FORMAT_VERSION:
        raise UserError(f"{path} was written by a newer alphazero (checkpoint version {payload['version']}, "
                        f"this one reads up to {FORMAT_VERSION})")
    network = network_config_of(payload, path)
    if expected is not None:
        check_architecture(network, expected, path)
    return payload


def restore_checkpoint(
    payload: dict[str, Any],
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    restore_rng: bool = True,
) -> int:
    """Loads a checkpoint's weights (and optimizer and RNG states) into live objects; returns its step.

    Raises:
        UserError: the weights or optimizer state do not fit.
    """
    load_weights(model, payload["model"], f"checkpoint step {payload['step']}")
    if optimizer is not None and payload.get("optimizer") is not None:
        try:
            optimizer.load_state_dict(payload["optimizer"])
        except (ValueError, KeyError, RuntimeError) as error:
            raise UserError(f"checkpoint step {payload['step']}: the optimizer state does not fit: {error}") from None
    if restore_rng and payload.get("rng"):
        restore_rng_states(payload["rng"])
    return int(payload["step"])


def load_latest_weights(
    run_dir: RunDir | str | os.PathLike[str], model: AlphaZeroNet | nn.Module, *, newer_than: int = -1
) -> int | None:
    """Loads the newest checkpoint's weights into ``model`` in place; returns that checkpoint's step.

    Returns None, leaving the model alone, when the run has no checkpoint newer
    than step ``newer_than``; actors poll with ``newer_than=current_step`` and
    only pay for a load when there is something new. The file is memory-mapped,
    so the optimizer state in it is never read.

    Raises:
        UserError: the newest checkpoint is corrupt or of another architecture.
    """
    expected = getattr(model, "_orig_mod", model).config
    for attempt in range(3):
        path = latest_checkpoint(run_dir)
        if path is None or (step_of(path) or 0) <= newer_than:
            return None
        try:
            payload = load_checkpoint(path, "cpu", expected=expected, mmap=True)
        except UserError:
            if path.exists() or attempt == 2:
                raise
            continue  # thinned between listing and opening: look again
        load_weights(model, payload["model"], path)
        return int(payload["step"])
    return None
