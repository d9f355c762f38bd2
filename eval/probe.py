"""`alphazero probe`: what a network knows, measured on positions Stockfish labelled.

The probe set is a folder of Stockfish labels, as ``alphazero pretrain
--data-only`` writes them to ``RUN/pretrain/`` (learner.labels): for every
position, Stockfish's policy over the legal moves, the mover's win
probability after each move (``policy_wins``) and the value of the best one.
Keep it out of the training data of the networks it probes (a run of its own,
with its own ``pretrain.seed``).

Each network is read in eval mode, float32, as the search reads it (the
prior at temperature 1: the raw network), and measured on every position:

- ``top1``: the share of positions whose most likely legal move under the
  network is one of Stockfish's best (the largest label share);
- ``regret``: the win probability the network's most likely move loses
  against Stockfish's best, averaged (0 = always a best move; a move Stockfish
  left unscored counts as its worst scored one);
- ``value_mse``: the squared error of the value against Stockfish's
  (``2 w - 1`` of its best move's win probability w, the mover's view);
- ``entropy``: the prior's entropy over the legal moves, in nats (a prior that
  grows sharp narrows a search: EXPERIMENTS.md, "Self-play from the
  built-in network, and why it lost strength", part 7);
- ``cross_entropy``: of the prior against Stockfish's policy;
- ChessBench's metrics of each predictor (eval.probe_predictors: ``bc``, the
  policy's ranking of the moves; ``sv``, minus the value after each move;
  ``av``, the action-value head's, for a network with one): **action
  accuracy** (its top move is one of Stockfish's best) and **Kendall's tau**
  (tau-b) between its ranking and Stockfish's over the moves Stockfish
  scored. They need the labels' win probabilities; ``sv`` also needs each
  position rebuilt from its game (start and moves, checked against the
  stored input) and the positions after its moves evaluated, so only
  ``alphazero probe`` measures it (``score_positions(..., state_values=True)``).

With more than one network, each later one is also compared with the first
position by position (``paired_differences``: the mean difference of top-1,
regret and value error with a 95% interval), so a checkpoint's probe against
its start tells a real change from the noise of 8,192 positions.

The same figures go to TensorBoard as ``probe/<figure>`` under
``RUN/tb/probe/`` at each checkpoint's step: ``alphazero probe`` writes them
for the checkpoints it measures, and the run's periodic evaluation for every
checkpoint it rates when ``eval.probe_data`` names a probe set.

Example::

    data = ProbeSet.load("runs/sfprobe/pretrain")
    figures = probe_network(load_network(NetworkSource(weights=Path("builtin")), device="cpu").evaluator.model, data)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from alphazero.errors import UserError
from alphazero.nn.planes import compact_to_torch
from alphazero.store.rundir import RunDir, atomic_write_text
from alphazero.store.shards import LAB_KIND, ShardError, concatenate, list_shards, read_shard
from eval.action_values import output_action_values
from eval.probe_defaults import DEFAULT_PROBE_POSITIONS
from eval.probe_predictors import (
    PREDICTOR_NAMES,
    PREDICTORS,
    PredictorFigures,
    PredictorScores,
    predictor_scores,
    state_value_scores,
)
from mcts_ext import Board, ChessError
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch

PROBE_FIGURES = ("top1", "regret", "value_mse", "entropy", "cross_entropy")
PROBE_BATCH = 256
TB_SUBDIR = "probe"


@dataclass(frozen=True)
class ProbeSet:
    """The labelled positions a probe measures on: compact inputs, each position's legal moves (flat
    entries with offsets), Stockfish's policy share and win probability of each, and its value."""

    planes: np.ndarray  # uint64 [N, 112]
    scalars: np.ndarray  # float32 [N, 7]
    offsets: np.ndarray  # int64 [N + 1]: position i's moves are entries offsets[i]:offsets[i + 1]
    indices: np.ndarray  # int64 [E] move index of each entry
    label_policy: np.ndarray  # float64 [E]
    wins: np.ndarray | None  # float64 [E], NaN where unscored; None for labels made before policy_wins
    values: np.ndarray  # float64 [N] in [-1, 1]
    source: Path
    games: tuple[dict[str, Any], ...] = ()  # the labelled games (start_fen, moves), to rebuild the positions
    game: np.ndarray | None = None  # int [N]: each position's game, an index into games
    ply: np.ndarray | None = None  # int [N]: the moves of its game played before it

    def __len__(self) -> int:
        return len(self.values)

    def boards(self) -> list[Board | None]:
        """Rebuilds each position from its game's start and moves (SV evaluates the positions after its
        moves); None where that cannot be done: no game recorded, or a board whose input planes, scalars or
        legal moves differ from the stored ones."""
        rebuilt: list[Board | None] = [None] * len(self)
        if self.game is None or self.ply is None:
            return rebuilt
        for i, (g, ply) in enumerate(zip(self.game.tolist(), self.ply.tolist())):
            record = self.games[g] if 0 <= g < len(self.games) else {}
            fen, moves = record.get("start_fen"), record.get("moves")
            if not fen or not isinstance(moves, list) or not 0 <= ply <= len(moves):
                continue
            try:
                rebuilt[i] = Board.from_moves(moves[:ply], fen, ply_limit=None)
            except (ChessError, ValueError):
                continue
        built = [i for i, board in enumerate(rebuilt) if board is not None]
        planes, scalars = new_batch(len(built))
        encode_boards([rebuilt[i] for i in built], planes, scalars)
        for row, i in enumerate(built):
            board = rebuilt[i]
            assert board is not None
            same = np.array_equal(planes[row], self.planes[i]) and np.array_equal(scalars[row], self.scalars[i]) \
                and np.array_equal(legal_move_indices(board), self.indices[self.offsets[i]:self.offsets[i + 1]])
            if not same:
                rebuilt[i] = None
        return rebuilt

    @classmethod
    def load(cls, directory: str | os.PathLike[str], positions: int | None = DEFAULT_PROBE_POSITIONS) -> ProbeSet:
        """Reads the first ``positions`` positions (None: all) of a folder of Stockfish labels, in the order
        of their chunks.

        Raises:
            UserError: no such folder, no shards, an unreadable shard, or shards that are not labels.
        """
        folder = Path(directory).expanduser()
        if (folder / "pretrain").is_dir() and not list_shards(folder):
            folder = folder / "pretrain"  # a run directory: its labels
        paths = list_shards(folder)
        if not paths:
            raise UserError(f"{folder} holds no shards: give a folder of Stockfish labels, such as the pretrain/ "
                            f"folder that `alphazero pretrain --run R --stockfish NODES --positions P --data-only` "
                            f"writes")
        try:
            shards = [read_shard(path) for path in paths]
        except ShardError as error:
            raise UserError(f"cannot read the probe set: {error}") from None
        if any(shard.meta.get("kind") != LAB_KIND for shard in shards):
            raise UserError(f"{folder} holds shards that are not Stockfish labels (self-play games?): the probe "
                            f"measures against Stockfish's labels, from `alphazero pretrain --data-only`")
        shards.sort(key=lambda shard: (int(shard.meta.get("chunk", 0)), shard.meta.get("created_at", 0)))
        try:
            shard = concatenate(shards)
        except ShardError as error:
            raise UserError(f"cannot read the probe set: {error}") from None
        count = len(shard) if positions is None else min(positions, len(shard))
        end = int(shard.policy_offsets[count])
        wins = shard.policy_wins
        return cls(shard.planes[:count], shard.scalars[:count], shard.policy_offsets[:count + 1].copy(),
                   shard.policy_indices[:end].astype(np.int64), shard.policy_probs[:end].astype(np.float64),
                   None if wins is None else wins[:end].astype(np.float64),
                   # Stockfish's value, also where the labels train no value (VALUE_NONE)
                   np.clip(shard.root_values[:count], -1.0, 1.0).astype(np.float64), folder,
                   tuple(shard.games), shard.game[:count].astype(np.int64), shard.ply[:count].astype(np.int64))


@dataclass(frozen=True)
class ProbeFigures:
    """One network's figures on a probe set (see the module docstring); regret is NaN without win
    probabilities in the labels."""

    top1: float
    regret: float
    value_mse: float
    entropy: float
    cross_entropy: float
    positions: int
    predictors: dict[str, PredictorFigures] = dataclasses.field(default_factory=dict)  # by PREDICTORS' names

    def as_dict(self) -> dict[str, Any]:
        """The figures for JSON: NaN (no regret) as None; ``predictors`` holds those measured."""
        figures: dict[str, Any] = {
            field.name: None if isinstance(value, float) and math.isnan(value) else value
            for field in dataclasses.fields(self) if field.name != "predictors"
            for value in (getattr(self, field.name),)}
        figures["predictors"] = {name: f.as_dict() for name, f in self.predictors.items()}
        return figures

    def text(self) -> str:
        """One line: 'top-1 30.3%, regret 4.36%, value MSE 0.116, entropy 2.76 nats'."""
        regret = "n/a" if math.isnan(self.regret) else f"{100 * self.regret:.2f}%"
        return (f"top-1 {100 * self.top1:.1f}%, regret {regret}, value MSE {self.value_mse:.4f}, "
                f"entropy {self.entropy:.2f} nats, cross-entropy {self.cross_entropy:.3f}")


def _segment_ids(offsets: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(len(offsets) - 1), np.diff(offsets))


def _first_max(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Gets the entry index of each segment's largest value (the first, on ties)."""
    starts = offsets[:-1]
    largest = np.maximum.reduceat(values, starts)
    is_max = values >= np.repeat(largest, np.diff(offsets))
    hits = np.flatnonzero(is_max)
    _, first = np.unique(_segment_ids(offsets)[hits], return_index=True)
    return hits[first]


@dataclass(frozen=True)
class _Outputs:
    """The model's outputs over a probe set, at its entries (legal moves) and positions."""

    logits: np.ndarray  # float64 [E]: each legal move's policy logit
    values: np.ndarray  # float64 [N]: each position's value
    action_values: np.ndarray | None  # float64 [E]: the head's win probability after each move; None: no head
    state_values: np.ndarray | None  # float64 [E]: SV's score of each move (NaN: not rebuilt); None: not asked


@torch.no_grad()
def _outputs(model: torch.nn.Module, data: ProbeSet, device: torch.device, state_values: bool) -> _Outputs:
    """Runs the model over the probe set (and, with ``state_values``, over the positions after each move)."""
    logits = np.empty(len(data.indices), dtype=np.float64)
    values = np.empty(len(data), dtype=np.float64)
    action_values: np.ndarray | None = np.empty(len(data.indices), dtype=np.float64)
    sv = None
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(data), PROBE_BATCH):
            end = min(start + PROBE_BATCH, len(data))
            planes, scalars = compact_to_torch(data.planes[start:end], data.scalars[start:end], device)
            out = model(planes, scalars)
            first, last = int(data.offsets[start]), int(data.offsets[end])
            rows = torch.from_numpy(_segment_ids(data.offsets[start:end + 1] - first)).to(device)
            moves = torch.from_numpy(data.indices[first:last]).to(device)
            logits[first:last] = out.policy_logits.float()[rows, moves].double().cpu().numpy()
            values[start:end] = out.value.float().double().cpu().numpy()
            head = output_action_values(out)
            if head is None:
                action_values = None
            elif action_values is not None:
                action_values[first:last] = head.float()[rows, moves].double().cpu().numpy()
        if state_values:
            sv = state_value_scores(model, data.boards(), data.offsets, device, PROBE_BATCH)
    finally:
        model.train(was_training)
    return _Outputs(logits, values, action_values, sv)


@dataclass(frozen=True)
class PositionScores:
    """One network's figures at each position of the probe set; their means are its ProbeFigures (regret
    None without win probabilities in the labels)."""

    top1: np.ndarray  # float64 [N]: 1 where the most likely move is one of Stockfish's best
    regret: np.ndarray | None  # float64 [N]
    value_error: np.ndarray  # float64 [N]: the value's squared error
    entropy: np.ndarray  # float64 [N]
    cross_entropy: np.ndarray  # float64 [N]
    predictors: dict[str, PredictorScores] = dataclasses.field(default_factory=dict)  # those measured

    def figures(self) -> ProbeFigures:
        """The means: the network's figures."""
        regret = math.nan if self.regret is None else float(np.mean(self.regret))
        return ProbeFigures(float(np.mean(self.top1)), regret, float(np.mean(self.value_error)),
                            float(np.mean(self.entropy)), float(np.mean(self.cross_entropy)), len(self.top1),
                            {name: scores.figures() for name, scores in self.predictors.items()})


def score_positions(model: torch.nn.Module, data: ProbeSet, device: str | torch.device | None = None, *,
                    state_values: bool = False) -> PositionScores:
    """Measures one network at every position of the probe set (see the module docstring); the model is left
    as it was. ChessBench's metrics need the labels' win probabilities: ``bc``, and ``av`` for a model whose
    output has action values, come with the same pass; ``state_values`` adds ``sv`` (a pass over the
    positions after every move: about 30 times the work)."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    outputs = _outputs(model, data, device, state_values and data.wins is not None)
    logits, values = outputs.logits, outputs.values
    offsets, starts, lengths = data.offsets, data.offsets[:-1], np.diff(data.offsets)
    shifted = logits - np.repeat(np.maximum.reduceat(logits, starts), lengths)
    log_p = shifted - np.repeat(np.log(np.add.reduceat(np.exp(shifted), starts)), lengths)
    p = np.exp(log_p)
    chosen = _first_max(logits, offsets)
    best_share = np.repeat(np.maximum.reduceat(data.label_policy, starts), lengths)
    top1 = (data.label_policy[chosen] >= best_share[chosen]).astype(np.float64)
    regret = None
    predictors: dict[str, PredictorScores] = {}
    if data.wins is not None:
        wins = data.wins
        best = np.fmax.reduceat(wins, starts)  # fmax and fmin skip NaN: moves Stockfish did not score
        worst = np.fmin.reduceat(wins, starts)
        regret = best - np.where(np.isnan(wins[chosen]), worst, wins[chosen])
        ranked = {"bc": logits, "sv": outputs.state_values, "av": outputs.action_values}
        predictors = {name: predictor_scores(scores, wins, offsets) for name in PREDICTORS
                      if (scores := ranked[name]) is not None}
    return PositionScores(top1, regret, (values - data.values) ** 2, -np.add.reduceat(p * log_p, starts),
                          -np.add.reduceat(data.label_policy * log_p, starts), predictors)


def probe_network(model: torch.nn.Module, data: ProbeSet, device: str | torch.device | None = None, *,
                  state_values: bool = False) -> ProbeFigures:
    """Measures one network on the probe set (see the module docstring and score_positions); the model is
    left as it was."""
    return score_positions(model, data, device, state_values=state_values).figures()


@dataclass(frozen=True)
class PairedDifference:
    """A figure of one network minus another's over the same positions, with its 95% interval (the
    normal approximation of the mean of the per-position differences)."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, ours: np.ndarray, theirs: np.ndarray) -> PairedDifference:
        differences = ours - theirs
        half = 1.96 * float(np.std(differences, ddof=1)) / math.sqrt(len(differences)) if len(differences) > 1 \
            else math.nan
        mean = float(np.mean(differences))
        return cls(mean, mean - half, mean + half)

    def text(self, scale: float = 1.0, digits: int = 2) -> str:
        """'+0.11 (-0.04..+0.25)', the figures times ``scale``."""
        return (f"{scale * self.mean:+.{digits}f} ({scale * self.low:+.{digits}f}.."
                f"{scale * self.high:+.{digits}f})")


@dataclass(frozen=True)
class PairedFigures:
    """Top-1, regret (None without win probabilities) and value error of one network minus another's."""

    top1: PairedDifference
    regret: PairedDifference | None
    value_mse: PairedDifference


def paired_differences(ours: PositionScores, theirs: PositionScores) -> PairedFigures:
    """``ours`` minus ``theirs``, position by position (the probe of a checkpoint against the network it
    started from: is it worse, or only noisier?)."""
    regret = None if ours.regret is None or theirs.regret is None else PairedDifference.of(ours.regret,
                                                                                         theirs.regret)
    return PairedFigures(PairedDifference.of(ours.top1, theirs.top1), regret,
                         PairedDifference.of(ours.value_error, theirs.value_error))


def write_probe_tensorboard(run: RunDir, step: int, figures: ProbeFigures) -> None:
    """Adds ``probe/<figure>`` scalars at ``step`` under run/tb/probe/ (regret as a share, NaN left out).

    Raises:
        OSError: the events cannot be written.
    """
    from torch.utils.tensorboard import SummaryWriter  # slow to import; only needed here

    writer = SummaryWriter(log_dir=str(run.tb / TB_SUBDIR))
    try:
        scalars = {name: float(getattr(figures, name)) for name in PROBE_FIGURES}
        for predictor, f in figures.predictors.items():
            scalars[f"{predictor}_action_accuracy"] = f.action_accuracy
            scalars[f"{predictor}_kendall_tau"] = f.kendall_tau
        for name, value in scalars.items():
            if math.isfinite(value):
                writer.add_scalar(f"probe/{name}", value, step)
    finally:
        writer.close()


# --- the command -------------------------------------------------------------------------------


def _steps(text: str, available: Sequence[int]) -> list[int]:
    """Reads --steps against the run's checkpoints. Raises UserError on an unknown step or a bad list."""
    text = text.strip()
    if text == "all":
        return list(available)
    if text == "latest":
        return list(available[-1:])
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--steps takes 'all', 'latest' or steps such as 0,400,1000; got {text!r}") from None
    missing = [step for step in steps if step not in available]
    if missing:
        have = ", ".join(str(step) for step in available) or "none"
        raise UserError(f"the run has no checkpoint at step {missing[0]} (its checkpoints: {have})")
    return steps


def run_probe(args: argparse.Namespace) -> None:
    """Probes the chosen networks, prints a table, writes TensorBoard for the run's checkpoints and --json."""
    from rich.console import Console
    from rich.table import Table

    from alphazero.store.checkpoint import checkpoint_steps
    from alphazero.store.sources import NetworkSource, load_network

    if args.positions < 0:
        raise UserError(f"--positions must be 0 or more, got {args.positions}")
    run = RunDir(args.run)
    config = run.read_config() if run.exists() else None
    data_dir = args.data or (config.eval.probe_data if config is not None else "")
    if not data_dir:
        raise UserError("no probe set: give --data DIR (a folder of Stockfish labels from `alphazero pretrain "
                        "--data-only`), or set eval.probe_data in the run's config")
    data_path = Path(data_dir).expanduser()
    if not data_path.is_absolute() and not data_path.exists() and run.exists():
        data_path = run.root / data_path  # eval.probe_data may be relative to the run
    data = ProbeSet.load(data_path, args.positions or None)
    available = checkpoint_steps(run) if run.exists() else []
    steps = _steps(args.steps, available) if available or args.steps not in ("all", "latest") else []
    if not steps and not args.weights:
        raise UserError(f"nothing to probe: {run.root} has no checkpoints; give --run with a run that has, or "
                        f"--weights FILE")
    console = Console()
    console.print(f"probe set: {len(data):,} positions of {data.source}"
                  + ("" if data.wins is not None else " (labels without win probabilities: no regret; "
                                                       "relabel with this version to measure it)"))
    rows: list[tuple[str, int | None, ProbeFigures]] = []
    against: list[tuple[str, PairedFigures]] = []
    first: tuple[str, PositionScores] | None = None
    sources: list[tuple[str, int | None, NetworkSource]]
    sources = [(f"step {step:,}", step, NetworkSource(run.root, str(step))) for step in steps]
    sources += [(spec, None, NetworkSource(run.root, weights=Path(spec))) for spec in args.weights]
    for label, step, source in sources:
        network = load_network(source, device=args.device, precision="float32", warn=sys.stderr)
        scores = score_positions(network.evaluator.model, data, state_values=args.state_values)
        figures = scores.figures()
        rows.append((label, step, figures))
        if first is None:
            first = (label, scores)
        else:
            against.append((label, paired_differences(scores, first[1])))
        console.print(f"{label}: {figures.text()}")
        if step is not None:
            try:
                write_probe_tensorboard(run, step, figures)
            except OSError as error:
                print(f"warning: cannot write TensorBoard events in {run.tb / TB_SUBDIR}: "
                      f"{error.strerror or error}", file=sys.stderr)
    table = Table(title=f"What the networks know: {len(data):,} positions of {data.source}")
    for column in ("network", "top-1", "regret", "value MSE", "entropy (nats)", "cross-entropy"):
        table.add_column(column, justify="left" if column == "network" else "right")
    for label, _, f in rows:
        regret = "n/a" if math.isnan(f.regret) else f"{100 * f.regret:.2f}%"
        table.add_row(label, f"{100 * f.top1:.1f}%", regret, f"{f.value_mse:.4f}", f"{f.entropy:.3f}",
                      f"{f.cross_entropy:.3f}")
    console.print(table)
    if data.wins is not None:
        console.print(_predictor_table(rows, len(data)))
        if any(f.predictors["sv"].positions == 0 for _, _, f in rows if "sv" in f.predictors):
            console.print(SV_NOT_MEASURED)
    if first is not None and against:
        console.print(_paired_table(first[0], against, len(data)))
    if args.json is not None:
        paired = {label: dataclasses.asdict(differences) for label, differences in against}
        payload = {"data": str(data.source), "positions": len(data),
                   "networks": [{"network": label, "step": step, **f.as_dict(),
                                 **({"against_first": paired[label]} if label in paired else {})}
                                for label, step, f in rows]}
        text = json.dumps(payload, indent=2)
        try:
            atomic_write_text(args.json, text + "\n")
        except OSError as error:
            raise UserError(f"cannot write {args.json}: {error.strerror or error}") from None
        console.print(f"figures written to {args.json}")


_NOT_MEASURED = {"sv": "--no-sv", "av": "no head"}
SV_NOT_MEASURED = "SV n/a: no position of the probe set could be rebuilt from its game (labels without their games)"


def _predictor_table(rows: Sequence[tuple[str, int | None, ProbeFigures]], positions: int) -> Any:
    """ChessBench's metrics, a row per network and predictor (eval.probe_predictors)."""
    from rich.table import Table

    table = Table(title=f"ChessBench's metrics on {positions:,} positions",
                  caption="action accuracy: the predictor's top move is one of Stockfish's best; Kendall's tau: "
                          "tau-b against Stockfish's ranking of the moves it scored")
    for column in ("network", "predictor", "action accuracy", "Kendall's tau", "positions (tau)"):
        table.add_column(column, justify="left" if column in ("network", "predictor") else "right")
    for label, _, f in rows:
        for name in PREDICTORS:
            measured = f.predictors.get(name)
            if measured is None or measured.positions == 0:
                table.add_row(label, PREDICTOR_NAMES[name], "n/a" if measured is not None else _NOT_MEASURED[name],
                              "", "")
                continue
            tau = "n/a" if math.isnan(measured.kendall_tau) else f"{measured.kendall_tau:.3f}"
            table.add_row(label, PREDICTOR_NAMES[name], f"{100 * measured.action_accuracy:.1f}%", tau,
                          f"{measured.positions:,} ({measured.tau_positions:,})")
    return table


def _paired_table(first: str, against: Sequence[tuple[str, PairedFigures]], positions: int) -> Any:
    from rich.table import Table

    table = Table(title=f"Against {first}, position by position over the same {positions:,} (95% intervals)")
    for column in ("network", "top-1 (points)", "regret (points)", "value MSE"):
        table.add_column(column, justify="left" if column == "network" else "right")
    for label, paired in against:
        table.add_row(label, paired.top1.text(100, 1), "n/a" if paired.regret is None else paired.regret.text(100, 2),
                      paired.value_mse.text(1, 4))
    return table


__all__ = [
    "DEFAULT_PROBE_POSITIONS", "PREDICTORS", "PROBE_FIGURES", "PairedDifference", "PairedFigures", "PositionScores",
    "ProbeFigures", "ProbeSet", "paired_differences", "probe_network", "run_probe", "score_positions",
    "write_probe_tensorboard",
]
