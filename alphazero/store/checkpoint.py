"""Model files and learner checkpoints: how they are written, and the one place that reads them.

Files:

- ``run/checkpoints/step_000012000.pt``: a learner checkpoint, a dict saved by
  torch (loads with ``weights_only=True``)::

      format "alphazero-checkpoint", version 1, step,
      network (the NetworkConfig as a dict), architecture_hash,
      config_toml, config_hash (the run config the learner used),
      model (state dict, CPU), optimizer (state dict or None),
      rng {python, numpy, torch[, cuda]}, checksums, plus any extra entries.

- ``run/checkpoints/LATEST``: one line, the file name of the newest complete checkpoint.

- a model file (``save_model``): format "alphazero-model", version 1,
  network, model, extra, checksums.

The ``network`` entry holds every NetworkConfig field the writer had; a field
missing from an older file takes its default (files from before
``network.action_value_head`` load as networks without that head).

``checksums`` holds a SHA-256 of each part of the payload as it was saved:
``model`` (every weight), ``optimizer`` (every tensor and number of its
state) and ``other`` (every other entry). ``read_payload``, which every
reader goes through (the learner's resume, the actors' weight polls, eval,
match and uci), recomputes them and names the file when one differs, so a
file damaged on disk is never trained on or played with. Files written
before checksums existed still load, unchecked.

Order of writes: the step file is written atomically first, then LATEST
(atomically), so LATEST never names a missing or partial file. Readers that
find LATEST missing or stale fall back to the highest step file present.

Thinning (``thin_checkpoints``) keeps the newest ``keep`` step files and, when
``keep_every`` > 0, every older file whose step is a multiple of it (a sparse
history for Elo curves); it never deletes the file LATEST names.
``rewind_checkpoints`` (``--from-checkpoint STEP``) moves the step files
newer than STEP into a folder of their own and points LATEST at STEP; it
deletes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import pickle
import random
import re
import zipfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from alphazero.config import Config, NetworkConfig, network_config_from_dict, to_toml
from alphazero.config_compat import architecture_hash, config_hash
from alphazero.errors import UserError
from alphazero.nn.network import build_network, check_architecture, cpu_state_dict, load_weights, model_config
from alphazero.store.rundir import (
    RunDir,
    atomic_write_bytes,
    atomic_write_text,
    complete_files,
    remove_stale_temporaries,
)

CHECKPOINT_FORMAT = "alphazero-checkpoint"
FORMAT_VERSION = 1
MODEL_FORMAT = "alphazero-model"  # the "format" entry of files written by save_model
MODEL_VERSION = 1
LATEST_NAME = "LATEST"
KEPT_NAME = "KEPT"  # steps kept whatever the thinning: one per learner.keep_every_minutes of the run
CHECKSUM_ALGORITHM = "sha256"
_CHECKED_PARTS = ("model", "optimizer")  # the parts with their own checksum; "other" holds the rest
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


# --- checksums ---------------------------------------------------------------------------

def _feed(digest: Any, value: Any) -> None:
    """Adds ``value`` to ``digest`` in a form that survives torch.save and torch.load unchanged.

    Tensors count by dtype, shape and bytes; dicts by their entries in key
    order; lists and tuples alike (a tuple may come back as a list); other
    plain values by type and repr (a float's repr is exact).
    """
    if isinstance(value, torch.Tensor):
        tensor = value.detach().to("cpu").contiguous()
        digest.update(f"T{tensor.dtype}{tuple(tensor.shape)}".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy())  # the bytes in place, no copy
    elif isinstance(value, dict):
        digest.update(f"D{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def _checksum(value: Any) -> str:
    digest = hashlib.sha256()
    _feed(digest, value)
    return digest.hexdigest()


def payload_checksums(payload: dict[str, Any], parts: tuple[str, ...] = (*_CHECKED_PARTS, "other")) -> dict[str, str]:
    """Computes the SHA-256 of each of ``parts`` of a payload: 'model', 'optimizer' and 'other' (the rest).

    A part missing from the payload hashes as None.
    """
    sums = {}
    for part in parts:
        value: Any
        if part == "other":
            value = {k: v for k, v in payload.items() if k not in (*_CHECKED_PARTS, "checksums")}
        else:
            value = payload.get(part)
        sums[part] = _checksum(value)
    return sums


def _with_checksums(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "checksums": {"algorithm": CHECKSUM_ALGORITHM, **payload_checksums(payload)}}


def _verify_checksums(payload: dict[str, Any], path: Path, *, check_optimizer: bool) -> None:
    """Compares a loaded payload with the checksums saved in it (none saved: nothing to check).

    Raises:
        UserError: a part differs; the message names the file and the part.
    """
    saved = payload.get("checksums")
    if saved is None:
        return  # written before checksums existed
    if not isinstance(saved, dict) or saved.get("algorithm") != CHECKSUM_ALGORITHM:
        raise UserError(f"{path} is corrupt: its checksums entry is unreadable")
    parts = ("model", "other", "optimizer") if check_optimizer else ("model", "other")
    actual = payload_checksums(payload, parts)
    damaged = [part for part in parts if saved.get(part) != actual[part]]
    if damaged:
        what = {"model": "weights", "optimizer": "optimizer state", "other": "metadata"}
        raise UserError(f"{path} is corrupt: the checksum of its {' and '.join(what[p] for p in damaged)} does not "
                        f"match the one saved in it (the file changed after it was written)")


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
    network = model_config(model)
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
    torch.save(_with_checksums(payload), buffer)
    try:
        atomic_write_bytes(path, buffer.getvalue())
        atomic_write_text(directory / LATEST_NAME, path.name + "\n")
    except OSError as error:
        raise UserError(f"cannot write checkpoint {path}: {error.strerror or error}") from None
    return path


def save_model(path: str | os.PathLike[str], model: nn.Module, **extra: Any) -> None:
    """Saves the model's weights and NetworkConfig (plus ``extra`` entries) to ``path`` atomically.

    ``extra`` values must be plain data (numbers, strings, lists, dicts, tensors)
    so that the file loads with torch.load(weights_only=True).

    Raises:
        OSError: the folder is missing or unwritable.
    """
    payload = {
        "format": MODEL_FORMAT,
        "version": MODEL_VERSION,
        "network": dataclasses.asdict(model_config(model)),
        "model": cpu_state_dict(model),
        "extra": extra,
    }
    buffer = io.BytesIO()
    torch.save(_with_checksums(payload), buffer)
    atomic_write_bytes(path, buffer.getvalue())


def kept_steps(directory: str | os.PathLike[str]) -> set[int]:
    """Reads the steps the KEPT file of a checkpoints folder names (kept by time: keep_step)."""
    try:
        text = (Path(directory) / KEPT_NAME).read_text(encoding="utf-8")
    except OSError:
        return set()
    return {int(line) for line in text.split() if line.isdigit()}


def keep_step(directory: str | os.PathLike[str], step: int) -> None:
    """Adds ``step`` to the folder's KEPT file, whose checkpoints thin_checkpoints never deletes.

    Raises:
        OSError: the file cannot be written.
    """
    steps = kept_steps(directory) | {step}
    atomic_write_text(Path(directory) / KEPT_NAME, "".join(f"{s}\n" for s in sorted(steps)))


def thin_checkpoints(directory: str | os.PathLike[str], keep: int, *, keep_every: int = 0) -> list[Path]:
    """Deletes old step files in ``directory``; returns the deleted paths.

    Keeps the newest ``keep``, every older one whose step is a multiple of
    ``keep_every`` (when > 0) or that the KEPT file names (keep_step: one per
    learner.keep_every_minutes of the run), step 0 (the run's start, which
    evaluations compare with), and the one LATEST names. Also removes
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
    kept = kept_steps(directory)
    for step, path in found[:-keep]:
        assert step is not None
        if step == 0 or (keep_every > 0 and step % keep_every == 0) or path.name == latest or step in kept:
            continue
        path.unlink(missing_ok=True)
        deleted.append(path)
    remove_stale_temporaries(directory)
    return deleted


# --- reading ------------------------------------------------------------------------------

def _first_useful_line(error: BaseException) -> str:
    # torch's weights-only refusal opens with paragraphs of advice; the line
    # naming the refused object is the one that tells what the file holds.
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for line in lines:
        if "Unsupported global" in line or "Unsupported operand" in line:
            return line.split(" Please use")[0]
    return lines[0] if lines else type(error).__name__


def require_archive(path: Path) -> None:
    """Checks that ``path`` is a whole zip archive, as torch.save writes them (cheap: its end is read).

    A truncated archive has lost its central directory at the end, so this
    also catches files cut short. OSErrors (a missing file) pass through.

    Raises:
        UserError: the file is not a complete zip archive.
    """
    if not zipfile.is_zipfile(path):
        size = path.stat().st_size
        raise UserError(f"{path} is corrupt or not a checkpoint: not a complete torch archive ({size} bytes)")


def read_payload(path: str | os.PathLike[str], map_location: torch.device | str = "cpu",
                 *, mmap: bool = False, check_optimizer: bool = True) -> dict[str, Any]:
    """Reads a model or checkpoint file into a dict and checks it against its checksums.

    Weights only: no code in the file is run. ``mmap=True`` maps the file
    instead of reading it all; with ``check_optimizer=False`` the optimizer
    state is neither checked nor touched (a weights-only load).

    Raises:
        UserError: the file is missing, unreadable, truncated, not a torch
            file, or no longer matches its checksums (the message names it).
    """
    path = Path(path)
    try:
        if path.is_dir():
            raise IsADirectoryError(path)
        require_archive(path)
        payload = torch.load(path, map_location=map_location, weights_only=True, mmap=mmap)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not a checkpoint") from None
    except PermissionError as error:
        raise UserError(f"cannot read {path}: {error.strerror}") from None
    except (RuntimeError, pickle.UnpicklingError, zipfile.BadZipFile, EOFError, ValueError, OSError,
            KeyError, AttributeError, TypeError, IndexError) as error:
        raise UserError(f"{path} is corrupt or not a checkpoint: {_first_useful_line(error)}") from None
    if not isinstance(payload, dict) or "network" not in payload or "model" not in payload:
        raise UserError(f"{path} is corrupt or not a checkpoint: it holds no network config and weights")
    _verify_checksums(payload, path, check_optimizer=check_optimizer)
    return payload


def network_config_of(payload: dict[str, Any], source: str | os.PathLike[str]) -> NetworkConfig:
    """Gets the NetworkConfig saved in a model or checkpoint payload.

    Raises:
        UserError: the saved network config is invalid.
    """
    try:
        return network_config_from_dict(payload["network"])
    except UserError as error:
        raise UserError(f"{source} is corrupt or not a checkpoint: {error}") from None


def _read_latest_name(directory: Path) -> str | None:
    try:
        name = (directory / LATEST_NAME).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name if step_of(name) is not None else None  # only a bare step file name, never a path


def _steps_in(directory: Path) -> list[int]:
    return sorted(step for p in complete_files(directory, "step_*.pt") if (step := step_of(p)) is not None)


def checkpoint_steps(run_dir: RunDir | str | os.PathLike[str]) -> list[int]:
    """Lists the steps of the run's complete checkpoint files, lowest first."""
    return _steps_in(_checkpoint_dir(run_dir))


def latest_checkpoint(run_dir: RunDir | str | os.PathLike[str]) -> Path | None:
    """Gets the newest checkpoint of the run at ``run_dir`` (its root), or None when there is none.

    Trusts LATEST when it names an existing file; otherwise takes the highest step file.
    """
    directory = _checkpoint_dir(run_dir)
    name = _read_latest_name(directory)
    if name is not None and (directory / name).is_file():
        return directory / name
    steps = _steps_in(directory)
    return directory / checkpoint_name(steps[-1]) if steps else None


def load_checkpoint(
    path: str | os.PathLike[str],
    map_location: torch.device | str = "cpu",
    *,
    expected: NetworkConfig | None = None,
    mmap: bool = False,
    check_optimizer: bool = True,
) -> dict[str, Any]:
    """Reads a checkpoint file into a dict (see the module docstring for its entries).

    With ``expected``, checks that the checkpoint's network is that architecture.
    ``mmap=True`` maps the file instead of reading it all; with
    ``check_optimizer=False`` as well, the optimizer state is never read.

    Raises:
        UserError: missing, truncated or corrupt file (checksums included), a
            file that is not a learner checkpoint, or another architecture
            (naming the fields).
    """
    payload = read_payload(path, map_location, mmap=mmap, check_optimizer=check_optimizer)
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


def load_model(
    path: str | os.PathLike[str], device: torch.device | str = "cpu", *, expected: NetworkConfig | None = None
) -> tuple[nn.Module, dict[str, Any]]:
    """Loads a model file (save_model) or a learner checkpoint into a new network (build_network) in eval mode.

    Returns the model on ``device`` and the file's other entries: ``extra`` of a
    model file, or the checkpoint's metadata (step, config_toml, ...) without
    weights and optimizer state.

    Raises:
        UserError: the file is missing or corrupt (checksums included), or its
            architecture differs from ``expected`` (the message names each
            differing field).
    """
    payload = read_payload(path, mmap=True, check_optimizer=False)
    network = network_config_of(payload, path)
    if expected is not None:
        check_architecture(network, expected, path)
    model = build_network(network)
    load_weights(model, payload["model"], path)
    model.to(device).eval()
    if payload.get("format") == MODEL_FORMAT:
        extra = dict(payload.get("extra") or {})
    else:
        extra = {k: v for k, v in payload.items() if k not in ("model", "optimizer", "rng", "checksums")}
    return model, extra


def rewind_checkpoints(run_dir: RunDir | str | os.PathLike[str], step: int) -> list[Path]:
    """Makes checkpoint ``step`` the run's newest: moves every newer step file aside, then points LATEST at it.

    The newer files go, untouched, to ``checkpoints/after_step_<step>_<UTC time>/``
    (readers and thinning look only at the checkpoints folder itself), so a
    learner resumed from ``step`` neither trains towards their names nor has
    them thinned away. Returns their new paths, lowest step first.

    Raises:
        UserError: the run has no checkpoint at ``step``, or the files cannot be moved.
    """
    directory = _checkpoint_dir(run_dir)
    target = directory / checkpoint_name(step)
    if not target.is_file():
        raise UserError(f"{directory} has no checkpoint at step {step}")
    newer = [s for s in _steps_in(directory) if s > step]
    moved = []
    try:
        atomic_write_text(directory / LATEST_NAME, target.name + "\n")
        if newer:
            stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
            aside = directory / f"after_{checkpoint_name(step).removesuffix('.pt')}_{stamp}"
            aside.mkdir(exist_ok=True)
            for newer_step in newer:
                source = directory / checkpoint_name(newer_step)
                os.replace(source, aside / source.name)
                moved.append(aside / source.name)
    except OSError as error:
        raise UserError(f"cannot set aside the checkpoints after step {step} in {directory}: "
                        f"{error.strerror or error}") from None
    return moved


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


def latest_weights(
    run_dir: RunDir | str | os.PathLike[str], expected: NetworkConfig, *, newer_than: int = -1
) -> tuple[int, dict[str, torch.Tensor], Path] | None:
    """Reads the newest checkpoint's weights: (its step, its model state dict, its path).

    Returns None when the run has no checkpoint newer than step ``newer_than``.
    The file is memory-mapped, so the optimizer state in it is never read.

    Raises:
        UserError: the newest checkpoint is corrupt or not of architecture ``expected``.
    """
    for attempt in range(3):
        path = latest_checkpoint(run_dir)
        if path is None or (step_of(path) or 0) <= newer_than:
            return None
        try:
            payload = load_checkpoint(path, "cpu", expected=expected, mmap=True, check_optimizer=False)
        except UserError:
            if path.exists() or attempt == 2:
                raise
            continue  # thinned between listing and opening: look again
        return int(payload["step"]), payload["model"], path
    return None


def load_latest_weights(
    run_dir: RunDir | str | os.PathLike[str], model: nn.Module, *, newer_than: int = -1
) -> int | None:
    """Loads the newest checkpoint's weights into ``model`` in place; returns that checkpoint's step.

    Returns None, leaving the model alone, when the run has no checkpoint newer
    than step ``newer_than``; actors poll with ``newer_than=current_step`` and
    only pay for a load when there is something new. The file is memory-mapped,
    so the optimizer state in it is never read.

    Raises:
        UserError: the newest checkpoint is corrupt or of another architecture.
    """
    found = latest_weights(run_dir, model_config(model), newer_than=newer_than)
    if found is None:
        return None
    step, state, path = found
    load_weights(model, state, path)
    return step
