"""Where a network's weights come from: the one resolver of runs, checkpoints, model files and ``builtin``.

Every command that plays or starts from a network names it the same way, as a
NetworkSource, and it is found here (resolve_source) and loaded here
(load_network for a playing Network, read_weights for `train --init`):

- a run's latest checkpoint (the default); a run with none yet plays the
  built-in network (alphazero.nn.builtin) or, with ``fallback=FRESH``, freshly
  initialised, seeded weights, and says so on stderr;
- ``checkpoint=STEP`` (a step of the run) or ``checkpoint=PATH`` (any checkpoint file);
- ``weights=FILE`` (a model file or any checkpoint), ``weights=DIR`` (another
  run's latest checkpoint) or ``weights=builtin`` (the network that ships).

The file formats are alphazero.store.checkpoint's; the run's own checkpoints, which
the learner and the actors follow, are read there (latest_weights). Users:
the agents (eval.network_agents), the UCI engine (eval.uci), ``train --init``
and ``doctor`` (read_weights), ``bench uci``.

Example::

    network = load_network(NetworkSource(weights=Path("builtin")), device="cpu")
    weights = read_weights("runs/pretrained")  # its architecture and state dict, no model built
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

from alphazero.config import DEFAULT_PRESET, Config, NetworkConfig, SearchConfig
from alphazero.errors import UserError
from alphazero.nn.action_values import features_only
from alphazero.nn.builtin import BUILTIN, builtin_path, is_builtin, require_builtin
from alphazero.nn.forward import Evaluator
from alphazero.nn.kept_precision import KeptPrecisions
from alphazero.nn.network import build_network, pick_device
from alphazero.nn.planes import compact_to_torch
from alphazero.presets import from_toml, get_preset
from alphazero.store.checkpoint import (
    checkpoint_name,
    latest_checkpoint,
    load_model,
    network_config_of,
    read_payload,
    require_archive,
    step_of,
)
from alphazero.store.rundir import DEFAULT_RUN_DIR, RunDir, complete_files
from mcts_ext import Board
from mcts_ext.encode import encode_boards, new_batch

FRESH = "fresh"
"""NetworkSource.fallback for seeded random weights when a run has no checkpoint (BUILTIN is the default)."""

PathLike = str | os.PathLike[str]


# --- naming and finding ------------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkSource:
    """Names a network: a run's latest checkpoint, one of its checkpoints, or a weights file.

    At most one of `checkpoint` (a step number like "1200", or a path) and
    `weights` (a model file or checkpoint, a run directory, or 'builtin') may be set; with
    neither, the run's latest checkpoint is used. `fallback` says what plays
    when the run has no checkpoint: 'builtin' (the shipped network, when this
    installation has one; else fresh weights) or 'fresh' (seeded random weights).
    """

    run: Path = DEFAULT_RUN_DIR
    checkpoint: str | None = None
    weights: Path | None = None
    fallback: str = BUILTIN


@dataclass(frozen=True)
class ResolvedSource:
    """A source resolved to a file (None: fresh weights), before anything is loaded.

    `from_run` marks a file of the run (its latest or a step), which must fit
    the run's architecture; `config` is the run's config when it has one.
    """

    path: Path | None
    step: int | None
    config: Config | None
    from_run: bool
    builtin: bool = False  # the path is the built-in network's
    note: str | None = None  # why the built-in network stands in for the run's (said when loading)


def _is_file(path: Path, what: str) -> bool:
    """Checks whether `path` is a file; an unusable path (too long, a symlink loop,
    no permission, ...) is a UserError naming `what` and the system's reason."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False  # a parent of the path is a file
    except OSError as error:
        raise UserError(f"{what} {_shown(path)} cannot be used: {error.strerror or error}") from None
    except ValueError as error:  # an embedded NUL byte
        raise UserError(f"{what} {_shown(path)} cannot be used: {error}") from None
    return path.is_file()


def _shown(path: Path | str, limit: int = 120) -> str:
    """Quotes a path for a message, cut to `limit` characters (a 300-character name is no help)."""
    text = str(path)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _run_config(run: RunDir) -> Config | None:
    """Reads the run's config, or returns None when the run does not exist. Raises UserError if invalid."""
    return run.read_config() if run.exists() else None


def _checkpoint_path(run: RunDir, checkpoint: str) -> tuple[Path, int | None]:
    """Turns `checkpoint=STEP` or `checkpoint=PATH` into a file. Raises UserError if there is none."""
    text = checkpoint.strip()
    if text.isdigit():
        path = run.checkpoints / checkpoint_name(int(text))
        if not path.is_file():
            steps = [step_of(p) for p in complete_files(run.checkpoints, "step_*.pt")]
            have = ", ".join(str(s) for s in steps if s is not None) or "none"
            raise UserError(f"run {run.root} has no checkpoint at step {int(text)} (its checkpoints: {have})")
        return path, int(text)
    path = Path(text).expanduser()
    if not _is_file(path, "checkpoint"):
        raise UserError(f"checkpoint {_shown(text)} is neither a step of run {run.root} nor an existing file")
    return path, step_of(path)


def resolve_source(source: NetworkSource) -> ResolvedSource:
    """Finds the file a source names without loading it (cheap; for checking options early).

    Raises UserError when both checkpoint and weights are given, a named file
    or step does not exist, a path cannot be used at all (too long, a symlink
    loop, no permission: any OSError), or the run's config is invalid.
    """
    if source.checkpoint is not None and source.weights is not None:
        raise UserError("give a network as checkpoint=... or weights=..., not both")
    if source.fallback not in (BUILTIN, FRESH):
        raise UserError(f"fallback must be {BUILTIN!r} or {FRESH!r}, got {source.fallback!r}")
    if is_builtin(source.weights):
        return ResolvedSource(require_builtin(str(source.weights)), None, None, from_run=False, builtin=True)
    if source.weights is not None:
        return _resolve_weights(Path(source.weights).expanduser())
    try:
        return _resolve_in_run(source)
    except OSError as error:
        raise UserError(f"run {_shown(source.run)} cannot be used: {error.strerror or error}") from None


def _resolve_weights(path: Path) -> ResolvedSource:
    """resolve_source for `weights=`: a model or checkpoint file, or a run directory (its latest checkpoint).

    Either carries its own config; neither is held to a run's architecture.
    """
    if not _is_file(path, "weights file") and path.is_dir():
        latest = latest_checkpoint(RunDir(path))
        if latest is None:
            raise UserError(f"run {_shown(path)} has no checkpoint to take weights from")
        return ResolvedSource(latest, step_of(latest), None, from_run=False)
    if not path.is_file():
        raise UserError(f"weights file {_shown(path)} does not exist (give a model file, a checkpoint, a run "
                        f"directory or {BUILTIN!r})")
    try:
        require_archive(path)  # a file that is no model at all is refused here, not at its load
    except OSError as error:
        raise UserError(f"weights file {_shown(path)} cannot be read: {error.strerror or error}") from None
    return ResolvedSource(path, step_of(path), None, from_run=False)


def _resolve_in_run(source: NetworkSource) -> ResolvedSource:
    """resolve_source for a run's latest checkpoint or `checkpoint=`; OSErrors pass through."""
    run = RunDir(source.run)
    _is_file(run.root, "run")  # an unusable run path fails here, with the system's reason
    config = _run_config(run)
    if source.checkpoint is not None:
        path, step = _checkpoint_path(run, source.checkpoint)
        if not source.checkpoint.strip().isdigit():  # a file from anywhere: it carries its own config
            return ResolvedSource(path, step, None, from_run=False)
        return ResolvedSource(path, step, config, from_run=True)
    latest = latest_checkpoint(run)
    builtin = builtin_path() if source.fallback == BUILTIN else None
    if latest is None and builtin is not None:
        why = f"run {run.root} has no checkpoint yet" if config is not None else f"run {run.root} does not exist"
        return ResolvedSource(builtin, None, config, from_run=False, builtin=True,
                              note=f"{why}; playing with the built-in network ({builtin})")
    return ResolvedSource(latest, step_of(latest) if latest else 0, config, from_run=True)


# --- loading ------------------------------------------------------------------------------------


def _encode(boards: Sequence[Board]) -> tuple[np.ndarray, np.ndarray]:
    planes, scalars = new_batch(len(boards))
    encode_boards(list(boards), planes, scalars)
    return planes, scalars


@dataclass
class Network:
    """A loaded network and what it is: `label` ('step 1200', 'fresh weights', 'weights net.pt') for
    people, `tag` ('step1200', 'fresh', 'net') for agent names.

    `step` is the learner step (0 for fresh weights, None for a weights file
    without one); `config` is the run's config when known (its `search`
    section sets the PUCT constants of search agents).
    """

    evaluator: Evaluator
    label: str
    tag: str
    step: int | None
    path: Path | None
    fresh: bool
    config: Config | None = None
    notice: str = ""  # what the weights file asks be shown with it: its data's attribution and licence

    def evaluate(self, planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates compact positions: (logits [B, 4672], values [B]) for each side to move."""
        return self.evaluator.evaluate(planes, scalars)

    def evaluate_boards(self, boards: Sequence[Board]) -> tuple[np.ndarray, np.ndarray]:
        """Evaluates positions with their history: (logits [B, 4672], values [B]) for each side to move."""
        return self.evaluate(*_encode(boards))

    def draw_probability(self, board: Board) -> float | None:
        """Returns the network's probability that `board`'s game is drawn, from a 'wdl' value
        head (one extra network call), or None for a scalar head, which has no such output."""
        evaluator = self.evaluator
        if evaluator.config.value_head != "wdl":
            return None
        planes, scalars = _encode([board])
        planes_t, scalars_t = compact_to_torch(planes, scalars, evaluator.device)
        with torch.inference_mode():
            wdl_logits = features_only(evaluator.model)(planes_t, scalars_t).wdl_logits
        assert wdl_logits is not None
        return float(torch.softmax(wdl_logits.float(), dim=-1)[0, 1])

    @property
    def search_config(self) -> SearchConfig:
        return self.config.search if self.config is not None else SearchConfig()




def _config_in_file(extra: Mapping[str, Any]) -> Config | None:
    """Reads the run config a learner checkpoint carries, or None (model files carry none)."""
    text = extra.get("config_toml")
    if not isinstance(text, str):
        return None
    try:
        return from_toml(text)
    except UserError:
        return None


def _fresh_model(config: Config) -> torch.nn.Module:
    """Builds the config's network with weights seeded by learner.seed (global RNGs left alone)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.learner.seed)
        return build_network(config.network)


def load_network(
    source: NetworkSource,
    *,
    device: str | torch.device = "auto",
    warn: TextIO | None = None,
    precision: str = "auto",
    forward: str = "eager",
    max_batch: int | None = None,
    say_precision: bool = True,
    keep: KeptPrecisions | None = None,
) -> Network:
    """Loads the network a source names onto `device` ('auto' picks CUDA when present), to run in `precision`
    ('auto', 'bf16', 'float32': alphazero.nn.precision); on a CPU, what it runs in is said on `warn` (unless
    ``say_precision`` is false: a caller that loads network after network says it once).
    `forward` and `max_batch` are the Evaluator's: how a CUDA pass runs ('graphs': a CUDA graph per
    batch-size bucket) and the largest batch the caller sends; `keep` (the UCI engine's) keeps a CPU's `auto`
    precision across processes (alphazero.nn.kept_precision).

    A run with no checkpoint yet gives the built-in network (source.fallback
    'builtin', when this installation has one) or freshly initialised weights
    (seeded by the run's learner.seed; the tiny preset's network when the run
    does not exist), and says which on `warn` (default stderr).

    Raises UserError for a missing or corrupt file, an unknown step, an
    architecture that differs from the run's, or an unusable device.
    """
    resolved = resolve_source(source)
    torch_device = device if isinstance(device, torch.device) else pick_device(device)
    precision = _checked_precision(precision)
    if resolved.path is None:
        return _fresh_network(source.run, resolved.config, torch_device, warn, precision, forward, max_batch,
                              say_precision, keep)
    expected = resolved.config.network if resolved.from_run and resolved.config is not None else None
    model, extra = load_model(resolved.path, torch_device, expected=expected)
    step = extra.get("step") if isinstance(extra.get("step"), int) else resolved.step
    config = resolved.config if resolved.config is not None else _config_in_file(extra)
    if resolved.note is not None:
        print(f"note: {resolved.note}", file=warn if warn is not None else sys.stderr, flush=True)
    if resolved.builtin and resolved.path.stem != BUILTIN:
        label, tag = f"built-in network {resolved.path.stem}", resolved.path.stem  # one that shipped before
    elif resolved.builtin:
        label, tag = "built-in network", BUILTIN
    elif step is not None and resolved.from_run:
        label, tag = f"step {step}", f"step{step}"
    else:
        label, tag = f"weights {resolved.path.name}", resolved.path.stem
    evaluator = Evaluator(model, torch_device, precision=precision, forward=forward, max_batch=max_batch,
                          name=f"the {label}" if resolved.builtin else str(resolved.path), keep=keep)
    return _said(Network(evaluator, label, tag, step, resolved.path, False, config, notice_of(extra)), warn,
                 say_precision)


def _checked_precision(precision: str) -> str:
    from alphazero.nn.precision import check_precision

    try:
        return check_precision(precision)
    except ValueError as error:
        raise UserError(str(error)) from None


def _said(network: Network, warn: TextIO | None, say: bool = True) -> Network:
    """Says once, on `warn` (default stderr), what a network on the CPU runs in (bf16 or float32, and why);
    nothing when ``say`` is false."""
    evaluator = network.evaluator
    if say and not evaluator.use_cuda:
        print(f"note: the network ({network.label}) runs on the CPU in {evaluator.precision_text()}",
              file=warn if warn is not None else sys.stderr, flush=True)
    return network


def _fresh_network(run: Path, config: Config | None, device: torch.device, warn: TextIO | None,
                   precision: str = "auto", forward: str = "eager", max_batch: int | None = None,
                   say_precision: bool = True, keep: KeptPrecisions | None = None) -> Network:
    out = warn if warn is not None else sys.stderr
    if config is None:
        config = get_preset(DEFAULT_PRESET)
        where = f"run {run} does not exist"
        what = f"the {DEFAULT_PRESET} preset's network"
    else:
        where = f"run {run} has no checkpoint yet"
        what = "the run's network"
    print(f"warning: {where}; playing with freshly initialised weights ({what}, seed "
          f"{config.learner.seed}), i.e. about as strong as random", file=out, flush=True)
    model = _fresh_model(config)
    evaluator = Evaluator(model, device, precision=precision, forward=forward, max_batch=max_batch,
                          name="the fresh weights", keep=keep)
    return _said(Network(evaluator, "fresh weights", "fresh", 0, None, True, config), warn, say_precision)


class NetworkCache:
    """Shares loaded networks between agents: one load per (source, device).

    Put one in parse_player's context (`networks=NetworkCache()`) so that
    `policy`, `value` and `search:400` of the same checkpoint share one model.
    """

    def __init__(self, *, warn: TextIO | None = None) -> None:
        self._networks: dict[tuple[NetworkSource, str, str], Network] = {}
        self._warn = warn

    def get(self, source: NetworkSource, device: str = "auto", precision: str = "auto") -> Network:
        """Returns the cached network for (source, device, precision), loading it the first time (load_network)."""
        key = (source, device, precision)
        if key not in self._networks:
            self._networks[key] = load_network(source, device=device, warn=self._warn, precision=precision)
        return self._networks[key]




@dataclass(frozen=True)
class Weights:
    """A network's weights read from a file: where from, its architecture, its state dict, its metadata."""

    path: Path
    network: NetworkConfig
    state: dict[str, Any]
    step: int | None
    summary: str  # one line for people: what the weights are
    trained_with: Config | None = None  # the config they were trained with, when the file says
    notice: str = ""  # the data's attribution and licence, when the file carries them (pretrain --notice)

    def overrides(self) -> list[str]:
        """Gets ``network.KEY=VALUE`` overrides that give a new run this architecture.

        Weights without an action-value head (or a reply-policy or moves-left
        head) leave its fields to the run (a ``--set network.action_value_head=...`` adds one,
        which starts fresh: alphazero.nn.network.load_weights). So do weights
        without squeeze-and-excitation or global pooling, but a ``--set
        network.se_ratio=N`` or ``network.global_pool_channels=N`` on them
        fails to load (there is no fresh start for the tower's blocks).
        """
        defaults = NetworkConfig()
        left = {name for group in NetworkConfig.CANONICAL_AT_DEFAULT  # a group's first field: its head, or none
                if getattr(self.network, group[0]) == getattr(defaults, group[0]) for name in group}
        return [f"network.{f.name}={getattr(self.network, f.name)}" for f in dataclasses.fields(self.network)
                if f.name not in left]

    def final_learning_rate(self, batch_size: int) -> float | None:
        """Gets the learning rate the weights were last trained at, scaled linearly to ``batch_size``
        (per-sample steps stay the same); None when the file does not say how they were trained."""
        if self.trained_with is None or self.step is None:
            return None
        learner = self.trained_with.learner
        return learner.learning_rate(max(self.step - 1, 0)) * batch_size / learner.batch_size


def read_weights(spec: PathLike) -> Weights:
    """Reads the weights ``spec`` names (a model or checkpoint file, a run directory, 'builtin'; see
    resolve_source), without building a model.

    Raises:
        UserError: as resolve_source, or a corrupt file.
    """
    resolved = resolve_source(NetworkSource(weights=Path(spec)))
    assert resolved.path is not None  # weights= always names a file
    path = resolved.path
    payload = read_payload(path)
    network = network_config_of(payload, path)
    extra: dict[str, Any] = payload["extra"] if isinstance(payload.get("extra"), dict) else payload
    step = extra.get("step") if isinstance(extra.get("step"), int) else None
    summary = extra.get("summary") if isinstance(extra.get("summary"), str) else ""
    trained_with = None
    if isinstance(extra.get("config_toml"), str):
        try:
            trained_with = from_toml(extra["config_toml"])
        except UserError:
            pass  # a config this version cannot read: the weights still load
    shape = f"{network.blocks}x{network.filters}"
    name = ("the built-in network" + ("" if path.stem == BUILTIN else f" {path.stem}")) if resolved.builtin \
        else str(path)
    described = f"{name} ({shape}{f', step {step}' if step is not None else ''}{f'; {summary}' if summary else ''})"
    return Weights(path, network, payload["model"], step, described, trained_with, notice_of(extra))


def notice_of(extra: dict[str, Any]) -> str:
    """Gets the notice a weights file carries (its data's attribution and licence), or ''."""
    notice = extra.get("notice")
    return notice.strip() if isinstance(notice, str) else ""
