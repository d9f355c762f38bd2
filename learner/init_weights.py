"""A run's learner started from given weights (``--init FILE_OR_RUN``), as `alphazero pretrain --init` does it.

- ``read_init``: the weights (a model file, a checkpoint, a run's newest
  checkpoint, ``builtin``: alphazero.store.sources.read_weights), refusing a
  run that already has checkpoints, which resumes from its own (the refusal
  of ``alphazero train --init``, alphazero/app/train.py).
- ``check_init_settings``: what the weights would silently overrule is
  refused: a preset of another network kind, a ``--set network.FIELD``
  that differs from the weights' own.
- ``adopt_network``: a run that exists without a checkpoint yet (its
  pretrain/ data written by ``pretrain --data-only``, say) takes the
  architecture the init weights and the --set overrides give it: its
  config.toml's network section is rewritten, since no checkpoint depends on
  it. A fresh run gets it when it is created.
- ``start_from``: the weights loaded into the learner's network before its
  step-0 checkpoint (alphazero.nn.network.load_weights: weights without an
  action-value head load into a network with a fresh one, with one warning).

Example::

    init = read_init("builtin", "runs/r")
    note = adopt_network(RunDir("runs/r"), [*user_overrides, *init.overrides()])
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from alphazero.config import apply_overrides, to_toml
from alphazero.config_compat import describe_differences, incompatible_fields
from alphazero.errors import UserError
from alphazero.store.rundir import RunDir, atomic_write_text

if TYPE_CHECKING:
    from torch import nn

    from alphazero.store.sources import Weights

__all__ = ["adopt_network", "check_init_settings", "read_init", "start_from"]


def read_init(spec: str, run: str | os.PathLike[str]) -> Weights:
    """Reads the --init weights, refusing a run that already has checkpoints.

    Raises:
        UserError: the run has checkpoints, or the weights cannot be read.
    """
    from alphazero.store.checkpoint import latest_checkpoint
    from alphazero.store.sources import read_weights

    latest = latest_checkpoint(run)
    if latest is not None:
        raise UserError(f"--init starts a new run, but {run} already has checkpoints (newest {latest.name}); "
                        f"use a new --run directory, or leave out --init to resume this run")
    return read_weights(spec)


def check_init_settings(init: Weights, preset: str | None, overrides: Sequence[str]) -> None:
    """Refuses the settings the --init weights would overrule without a word: a ``--preset`` of another network
    kind (its other sections are made for that kind), and a ``--set network.FIELD=V`` where the weights have
    another value (their architecture wins: init.overrides() come last).

    Raises:
        UserError: naming the kinds, or each field with both values.
    """
    from alphazero.config import DEFAULT_PRESET
    from alphazero.presets import get_preset

    base = get_preset(preset or DEFAULT_PRESET)
    if preset is not None and base.network.kind != init.network.kind:
        raise UserError(f"the --init weights are a {init.network.kind!r} network, and --preset {preset} is made "
                        f"for a {base.network.kind!r} one: give a preset of the weights' kind, or no --preset")
    theirs = dict(item.split("=", 1) for item in init.overrides())
    asked = [item for item in overrides if item.split("=", 1)[0].strip() in theirs]
    if not asked:
        return
    mine = apply_overrides(base, asked).network
    wanted = apply_overrides(base, init.overrides()).network
    differ = [name.split(".", 1)[1] for name in theirs
              if getattr(mine, name.split(".", 1)[1]) != getattr(wanted, name.split(".", 1)[1])]
    if differ:
        shown = ", ".join(f"network.{name}={getattr(mine, name)} (the weights' {getattr(wanted, name)})"
                          for name in differ)
        raise UserError(f"--init takes the network from its weights, and --set asks for another: {shown}; "
                        f"leave out those --set options")


def adopt_network(run: RunDir, overrides: Sequence[str]) -> str | None:
    """Gives a run that exists without checkpoints the network ``overrides`` make of its saved config (the
    --set ones, then the init weights' network.*); returns a line saying what changed, or None (no run yet, or
    no change).

    Only the network section is saved: other --set overrides stay this process's, as on any reopened run.

    Raises:
        UserError: the run has checkpoints (read_init refuses it first), a bad override, config.toml unwritable.
    """
    from alphazero.store.checkpoint import latest_checkpoint

    if not run.exists():
        return None
    if latest_checkpoint(run.root) is not None:
        raise UserError(f"run {run.root} has checkpoints: its network stays the one they were trained as")
    saved = run.read_config()
    adopted = dataclasses.replace(saved, network=apply_overrides(saved, overrides).network)
    changed = [name for name in incompatible_fields(saved, adopted) if name.startswith("network.")]
    if not changed:
        return None
    try:
        atomic_write_text(run.config_file, to_toml(adopted))
    except OSError as error:
        raise UserError(f"cannot write {run.config_file}: {error.strerror or error}") from None
    return (f"run {run.root} has no checkpoint yet, so it takes the --init network: "
            f"{describe_differences(saved, adopted, changed)}")


def start_from(model: nn.Module, init: Weights) -> list[str]:
    """Loads the init weights into ``model`` (a learner's network that resumed nothing); returns the lines
    to print (what they are, and their notice when they carry one).

    Raises:
        UserError: the weights do not fit the model.
    """
    from alphazero.nn.network import load_weights

    load_weights(model, init.state, init.path)
    return [f"starting from {init.summary}", *([f"the weights' notice: {init.notice}"] if init.notice else [])]
