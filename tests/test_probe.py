"""`alphazero probe`: a network's agreement, regret, value error and entropy on Stockfish-labelled positions."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from alphazero.app.cli import main
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet, NetOutput
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.shards import LAB_KIND, VALUE_FROM_ROOT, shard_from_records, shard_name, write_shard
from eval.probe import ProbeSet, paired_differences, probe_network, score_positions
from tests.helpers import add_shard, random_compact

# Two positions: their legal moves' indices, Stockfish's policy over them, the win probability after each
# (NaN: not scored) and Stockfish's value.
INDICES = [[0, 1, 2], [5, 6]]
LABELS = [[0.7, 0.2, 0.1], [0.5, 0.5]]
WINS = [[0.6, 0.5, 0.3], [0.4, np.nan]]
VALUES = [0.2, -0.2]


def _write_labels(folder: Path, *, wins: bool = True) -> None:
    planes, scalars = random_compact(len(VALUES))
    record = {
        "game_id": "g", "start_fen": "", "moves": [], "result": "*", "winner": None, "termination": "label",
        "plies": 2, "planes": planes, "scalars": scalars, "plies_of_samples": np.arange(2, dtype=np.int16),
        "root_values": np.array(VALUES, dtype=np.float32),
        "policy_offsets": np.array([0, 3, 5], dtype=np.int64),
        "policy_indices": np.array(sum(INDICES, []), dtype=np.int16),
        "policy_probs": np.array(sum(LABELS, []), dtype=np.float32),
        "results": np.zeros(2, dtype=np.int8),
    }
    if wins:
        record["policy_wins"] = np.array(sum(WINS, []), dtype=np.float32)
    shard = shard_from_records([record], {"kind": LAB_KIND, "chunk": 0, "value_target": VALUE_FROM_ROOT})
    folder.mkdir(parents=True, exist_ok=True)
    write_shard(folder / shard_name("sf"), shard)


class _FixedNetwork(torch.nn.Module):
    """Returns the same logits and value for every position."""

    def __init__(self, logits: dict[int, float], value: float) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.logits = torch.zeros(4672)
        for index, logit in logits.items():
            self.logits[index] = logit
        self.value = value

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor) -> NetOutput:
        rows = planes.shape[0]
        return NetOutput(self.logits.expand(rows, -1) * self.scale, torch.full((rows,), self.value), None)


def test_the_figures_match_a_hand_computation(tmp_path: Path) -> None:
    _write_labels(tmp_path / "labels")
    data = ProbeSet.load(tmp_path / "labels")
    assert len(data) == 2
    # The network's favourites: move 1 in the first position (Stockfish's share 0.2, not its best: a miss,
    # regret 0.6 - 0.5) and move 6 in the second (tied best share: a hit; unscored, so it counts as the
    # worst scored move, 0.4: regret 0).
    model = _FixedNetwork({1: 2.0, 6: 1.0}, value=0.0)
    figures = probe_network(model, data)
    assert figures.top1 == pytest.approx(0.5)
    assert figures.regret == pytest.approx(0.05)
    assert figures.value_mse == pytest.approx((0.2 ** 2 + 0.2 ** 2) / 2)
    expected_entropy, expected_ce = [], []
    for index, label in zip(INDICES, LABELS, strict=True):
        logits = np.array([model.logits[i].item() for i in index])
        p = np.exp(logits - logits.max())
        p /= p.sum()
        expected_entropy.append(-(p * np.log(p)).sum())
        expected_ce.append(-(np.array(label) * np.log(p)).sum())
    assert figures.entropy == pytest.approx(np.mean(expected_entropy))
    assert figures.cross_entropy == pytest.approx(np.mean(expected_ce))
    assert figures.positions == 2 and model.training  # the model is left in its mode


def test_a_network_against_another_is_measured_position_by_position(tmp_path: Path) -> None:
    _write_labels(tmp_path / "labels")
    data = ProbeSet.load(tmp_path / "labels")
    hit_and_miss = score_positions(_FixedNetwork({1: 2.0, 6: 1.0}, value=0.0), data)
    best_twice = score_positions(_FixedNetwork({0: 2.0, 6: 1.0}, value=0.2), data)
    same = paired_differences(hit_and_miss, hit_and_miss)
    assert (same.top1.mean, same.top1.low, same.top1.high) == (0.0, 0.0, 0.0)
    paired = paired_differences(best_twice, hit_and_miss)
    figures, start = best_twice.figures(), hit_and_miss.figures()
    assert paired.top1.mean == pytest.approx(figures.top1 - start.top1)
    assert paired.regret is not None and paired.regret.mean == pytest.approx(figures.regret - start.regret)
    assert paired.value_mse.mean == pytest.approx(figures.value_mse - start.value_mse)
    assert paired.regret.low < paired.regret.mean < paired.regret.high  # two positions: a wide interval
    assert paired.regret.text(100) == f"{100 * paired.regret.mean:+.2f} ({100 * paired.regret.low:+.2f}.." \
                                      f"{100 * paired.regret.high:+.2f})"


def test_labels_without_win_probabilities_have_no_regret_and_other_shards_are_refused(tmp_path: Path) -> None:
    _write_labels(tmp_path / "old", wins=False)
    figures = probe_network(_FixedNetwork({0: 1.0}, value=0.2), ProbeSet.load(tmp_path / "old"))
    assert math.isnan(figures.regret) and figures.top1 == pytest.approx(1.0)
    assert figures.as_dict()["regret"] is None and "regret n/a" in figures.text()
    with pytest.raises(UserError, match="holds no shards"):
        ProbeSet.load(tmp_path / "missing")
    add_shard(tmp_path / "selfplay", range(2))
    with pytest.raises(UserError, match="not Stockfish labels"):
        ProbeSet.load(tmp_path / "selfplay")


def test_the_command_probes_checkpoints_and_writes_tensorboard_and_json(tmp_path: Path, capsys) -> None:
    config = get_preset("tiny")
    run, _ = RunDir.create_or_open(tmp_path / "run", config)
    _write_labels(tmp_path / "probe" / "pretrain")
    torch.manual_seed(0)
    for step in (0, 10):
        save_checkpoint(run.root, AlphaZeroNet(config.network), None, step, config)
    out = tmp_path / "probe.json"
    assert main(["probe", "--run", str(run.root), "--data", str(tmp_path / "probe"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "step 10" in text and "top-1" in text
    payload = json.loads(out.read_text())
    assert [row["step"] for row in payload["networks"]] == [0, 10] and payload["positions"] == 2
    assert "Against step 0" in text  # the later checkpoint, position by position against the first
    assert "against_first" not in payload["networks"][0]
    assert set(payload["networks"][1]["against_first"]) == {"top1", "regret", "value_mse"}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run.tb / "probe"))
    events.Reload()
    assert [event.step for event in events.Scalars("probe/regret")] == [0, 10]
    # Bad input: clear errors, exit 2.
    assert main(["probe", "--run", str(run.root)]) == 2
    assert "no probe set" in capsys.readouterr().err
    assert main(["probe", "--run", str(run.root), "--data", str(tmp_path / "probe"), "--steps", "7"]) == 2
    assert "no checkpoint at step 7" in capsys.readouterr().err
