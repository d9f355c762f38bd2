"""The network that ships inside the package, and weights named by a file, a run or ``builtin``.

``alphazero/weights/builtin.pt`` is a model file (alphazero.checkpoint.save_model)
trained by ``alphazero pretrain`` (its card: ``alphazero/weights/README.md``).
``alphazero uci`` and ``alphazero match`` play it when their run has no
checkpoint; ``--weights builtin``, ``weights=builtin`` in a player spec and
``alphazero train --init builtin`` name it.

Example::

    path = resolve_weights("builtin")          # or a model file, a checkpoint, a run directory
    weights = read_weights("runs/pretrained")  # its network config and state dict
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alphazero.errors import UserError

BUILTIN = "builtin"  # the name that stands for the shipped network
BUILTIN_FILE = Path(__file__).resolve().parent / "weights" / "builtin.pt"
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


def resolve_weights(spec: str | os.PathLike[str]) -> Path:
    """Finds the file that ``spec`` names: 'builtin', a model or checkpoint file, or a run (its latest checkpoint).

    Raises:
        UserError: no such file or run, or a run without checkpoints.
    """
    if is_builtin(spec):
        return require_builtin()
    from alphazero.checkpoint import latest_checkpoint
    from alphazero.rundir import RunDir

    path = Path(spec).expanduser()
    if path.is_dir():
        latest = latest_checkpoint(RunDir(path))
        if latest is None:
            raise UserError(f"run {path} has no checkpoint to take weights from")
        return latest
    if not path.is_file():
        raise UserError(f"weights {str(spec)!r} name no file, no run directory and not {BUILTIN!r}")
    return path


@dataclass(frozen=True)
class Weights:
    """A network's weights read from a file: where from, its architecture, its state dict, its metadata."""

    path: Path
    network: Any  # alphazero.config.NetworkConfig
    state: dict[str, Any]
    step: int | None
    summary: str  # one line for people: what the weights are
    trained_with: Any = None  # the alphazero.config.Config they were trained with, when the file says

    def overrides(self) -> list[str]:
        """Gets ``network.KEY=VALUE`` overrides that give a new run this architecture."""
        import dataclasses

        return [f"network.{f.name}={getattr(self.network, f.name)}" for f in dataclasses.fields(self.network)]

    def final_learning_rate(self, batch_size: int) -> float | None:
        """Gets the learning rate the weights were last trained at, scaled linearly to ``batch_size``
        (per-sample steps stay the same); None when the file does not say how they were trained."""
        if self.trained_with is None or self.step is None:
            return None
        learner = self.trained_with.learner
        return learner.learning_rate(max(self.step - 1, 0)) * batch_size / learner.batch_size


def read_weights(spec: str | os.PathLike[str]) -> Weights:
    """Reads the weights ``spec`` names (see resolve_weights), without building a model.

    Raises:
        UserError: as resolve_weights, or a corrupt file.
    """
    from alphazero.checkpoint import network_config_of, read_payload
    from alphazero.config import from_toml

    path = resolve_weights(spec)
    payload = read_payload(path)
    network = network_config_of(payload, path)
    extra = payload.get("extra") if isinstance(payload.get("extra"), dict) else payload
    step = extra.get("step") if isinstance(extra.get("step"), int) else None
    summary = extra.get("summary") if isinstance(extra.get("summary"), str) else ""
    trained_with = None
    if isinstance(extra.get("config_toml"), str):
        try:
            trained_with = from_toml(extra["config_toml"])
        except UserError:
            pass  # a config this version cannot read: the weights still load
    shape = f"{network.blocks}x{network.filters}"
    name = "the built-in network" if is_builtin(spec) else str(path)
    described = f"{name} ({shape}{f', step {step}' if step is not None else ''}{f'; {summary}' if summary else ''})"
    return Weights(path, network, payload["model"], step, described, trained_with)
