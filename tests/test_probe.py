"""`alphazero probe`: a network's agreement, regret, value error and entropy on Stockfish-labelled positions."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, NamedTuple

import chess
import numpy as np
import pytest
import torch

from alphazero.app.cli import main
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, NetOutput, build_network
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.shards import LAB_KIND, VALUE_FROM_ROOT, shard_from_records, shard_name, write_shard
from alphazero.store.sources import Network
from eval.network_agents import to_mcts_board
from eval.probe import ProbeSet, paired_differences, probe_network, score_positions
from eval.probe_predictors import kendall_tau
from mcts_ext import Board
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch
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


# --- ChessBench's metrics: BC, SV and AV ------------------------------------------------------------------

# Games whose positions are labelled: (start, moves, the plies labelled). The last two: a mate in one (SV
# scores the mate exactly) and a position with one legal move (tau 1, as ChessBench counts it).
GAMES = [
    (chess.STARTING_FEN, ["e2e4", "e7e5", "g1f3", "b8c6"], [1, 2, 3]),
    ("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1", [], [0]),
    ("7k/8/8/8/8/8/6q1/7K w - - 0 1", [], [0]),
]


def _write_game_labels(folder: Path, seed: int = 0) -> list[chess.Board]:
    """Writes labels of real positions (made-up win probabilities, some tied, one unscored); returns the
    positions as python-chess boards with their moves."""
    rng = np.random.default_rng(seed)
    records, boards = [], []
    for number, (fen, moves, plies) in enumerate(GAMES):
        positions = [Board.from_moves(moves[:ply], fen, ply_limit=None) for ply in plies]
        planes, scalars = new_batch(len(positions))
        encode_boards(positions, planes, scalars)
        indices = [legal_move_indices(position) for position in positions]
        wins = [rng.choice([0.1, 0.3, 0.5, 0.5, 0.7, 0.9], len(index)).astype(np.float32) for index in indices]
        if number == 0:
            wins[0][1] = np.nan  # a move Stockfish did not score
        shares = [np.exp(8 * np.nan_to_num(w)) / np.exp(8 * np.nan_to_num(w)).sum() for w in wins]
        values = np.array([2 * np.nanmax(w) - 1 for w in wins], dtype=np.float32)
        records.append({
            "game_id": f"g{number}", "start_fen": fen, "moves": moves, "result": "*", "winner": None,
            "termination": "label", "plies": len(moves), "planes": planes, "scalars": scalars,
            "plies_of_samples": np.array(plies, dtype=np.int16), "root_values": values,
            "policy_offsets": np.concatenate([[0], np.cumsum([len(i) for i in indices])]).astype(np.int64),
            "policy_indices": np.concatenate(indices).astype(np.int16),
            "policy_probs": np.concatenate(shares).astype(np.float32),
            "policy_wins": np.concatenate(wins), "results": np.zeros(len(plies), dtype=np.int8),
        })
        for ply in plies:
            board = chess.Board(fen)
            for uci in moves[:ply]:
                board.push_uci(uci)
            boards.append(board)
    shard = shard_from_records(records, {"kind": LAB_KIND, "chunk": 0, "value_target": VALUE_FROM_ROOT})
    folder.mkdir(parents=True, exist_ok=True)
    write_shard(folder / shard_name("sf"), shard)
    return boards


class _HeadOutput(NamedTuple):
    """A NetOutput with action values (alphazero.nn.heads' contract: its last field)."""

    policy_logits: torch.Tensor
    value: torch.Tensor
    wdl_logits: torch.Tensor | None
    action_values: torch.Tensor | None


class _WithHead(torch.nn.Module):
    """A network plus a stand-in action-value head: one fixed win probability per policy index."""

    def __init__(self, inner: torch.nn.Module, table: torch.Tensor) -> None:
        super().__init__()
        self.inner, self.table = inner, table

    def forward(self, planes: torch.Tensor, scalars: torch.Tensor) -> Any:
        out = self.inner(planes, scalars)
        head = self.table.expand(planes.shape[0], -1)
        if "action_values" in NetOutput._fields:
            return NetOutput(out.policy_logits, out.value, out.wdl_logits, head)  # type: ignore[call-arg]
        return _HeadOutput(out.policy_logits, out.value, out.wdl_logits, head)


def _expected(network: Network, table: np.ndarray, boards: list[chess.Board], wins: list[np.ndarray]
              ) -> dict[str, tuple[float, float]]:
    """Each predictor's (action accuracy, Kendall's tau) by hand: the moves' scores from the Evaluator and
    python-chess, one position at a time."""
    per: dict[str, list[tuple[float, float]]] = {"bc": [], "sv": [], "av": []}
    for board, win in zip(boards, wins, strict=True):
        position = to_mcts_board(board)
        index = legal_move_indices(position)
        logits, _ = network.evaluate_boards([position])
        children = []
        for uci in position.legal_moves():
            child = board.copy()
            child.push_uci(uci)
            children.append(child)
        _, values = network.evaluate_boards([to_mcts_board(child) for child in children])
        sv = [1.0 if child.is_checkmate() else 0.0 if child.is_game_over() else -float(value)
              for child, value in zip(children, values, strict=True)]
        scored = ~np.isnan(win)
        for name, scores in (("bc", logits[0, index]), ("sv", np.array(sv)), ("av", table[index])):
            top = int(np.argmax(scores))
            hit = float(bool(scored[top]) and win[top] == np.nanmax(win))
            tau = 1.0 if len(index) == 1 else kendall_tau(scores[scored], win[scored])
            per[name].append((hit, tau))
    return {name: (float(np.mean([h for h, _ in rows])), float(np.mean([t for _, t in rows])))
            for name, rows in per.items()}


@pytest.mark.usefixtures("one_torch_thread")
def test_chessbench_metrics_of_the_three_predictors_match_a_hand_computation(tmp_path: Path) -> None:
    boards = _write_game_labels(tmp_path / "labels")
    data = ProbeSet.load(tmp_path / "labels")
    assert all(board is not None for board in data.boards())  # every position rebuilt from its game
    torch.manual_seed(5)
    inner = AlphaZeroNet(get_preset("tiny").network)
    table = torch.rand(4672)
    assert data.wins is not None
    wins = [data.wins[data.offsets[i]:data.offsets[i + 1]] for i in range(len(data))]
    expected = _expected(Network(Evaluator(inner, "cpu"), "t", "t", None, None, False), table.double().numpy(),
                         boards, wins)
    figures = probe_network(_WithHead(inner, table), data, state_values=True)
    assert set(figures.predictors) == {"bc", "sv", "av"}
    for name, (accuracy, tau) in expected.items():
        measured = figures.predictors[name]
        assert (measured.positions, measured.tau_positions) == (5, 5)
        assert measured.action_accuracy == pytest.approx(accuracy), name
        assert measured.kendall_tau == pytest.approx(tau), name
    # The mate in one: SV finds it (exactly +1) whatever the value head says.
    assert expected["sv"][0] >= 0.2
    # Without state_values (the periodic evaluation's probe) there is no SV; a model without the head has no AV.
    assert set(probe_network(inner, data).predictors) == {"bc"}


@pytest.mark.usefixtures("one_torch_thread")
def test_av_reads_alphazero_nns_action_value_head(tmp_path: Path) -> None:
    config = get_preset("tiny")
    if "action_value_head" not in {field.name for field in dataclasses.fields(config.network)}:
        pytest.skip("alphazero.nn has no action-value head yet (network.action_value_head)")
    boards = _write_game_labels(tmp_path / "labels")
    data = ProbeSet.load(tmp_path / "labels")
    torch.manual_seed(6)
    model = build_network(dataclasses.replace(config.network, action_value_head="logit"))
    evaluator = Evaluator(model, "cpu")
    assert data.wins is not None
    expected = []
    for i, board in enumerate(boards):
        planes, scalars = new_batch(1)
        encode_boards([to_mcts_board(board)], planes, scalars)
        row = evaluator.evaluate_action_values(planes, scalars)[0]  # type: ignore[attr-defined]
        wins = data.wins[data.offsets[i]:data.offsets[i + 1]]
        scores = row[data.indices[data.offsets[i]:data.offsets[i + 1]]].astype(np.float64)
        scored = ~np.isnan(wins)
        expected.append(1.0 if len(scores) == 1 else kendall_tau(scores[scored], wins[scored]))
    av = probe_network(model, data).predictors["av"]
    assert av.kendall_tau == pytest.approx(np.mean(expected), abs=1e-6) and av.positions == 5


@pytest.mark.usefixtures("one_torch_thread")
def test_sv_scores_no_move_with_the_action_value_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SV needs the children's values alone: a network with the head scores every move (all 4672) only in
    the probe's own pass, for AV, never for the ~30 children of each position."""
    _write_game_labels(tmp_path / "labels")
    data = ProbeSet.load(tmp_path / "labels")
    torch.manual_seed(7)
    model = build_network(dataclasses.replace(get_preset("tiny").network, action_value_head="logit"))
    scored: list[int] = []
    all_values = model.action_value.all_values

    def counted(features: torch.Tensor) -> torch.Tensor:
        scored.append(features.shape[0])
        return all_values(features)

    monkeypatch.setattr(model.action_value, "all_values", counted)
    figures = probe_network(model, data, state_values=True)
    assert set(figures.predictors) == {"bc", "sv", "av"} and figures.predictors["sv"].positions == 5
    assert sum(scored) == len(data)  # the probe's positions, once each; no child


@pytest.mark.usefixtures("one_torch_thread")
def test_a_position_that_does_not_match_its_game_is_left_out_of_sv(tmp_path: Path) -> None:
    _write_game_labels(tmp_path / "labels")
    data = ProbeSet.load(tmp_path / "labels")
    altered = ProbeSet(data.planes.copy(), *[getattr(data, f) for f in ("scalars", "offsets", "indices",
                       "label_policy", "wins", "values", "source", "games", "game", "ply")])
    altered.planes[1, 0] ^= 1  # its input no longer is its game's position
    assert [board is None for board in altered.boards()] == [False, True, False, False, False]
    sv = score_positions(AlphaZeroNet(get_preset("tiny").network), altered, state_values=True).predictors["sv"]
    assert math.isnan(sv.accuracy[1]) and sv.figures().positions == 4


@pytest.mark.usefixtures("one_torch_thread")
def test_the_command_prints_and_writes_the_predictors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = get_preset("tiny")
    run, _ = RunDir.create_or_open(tmp_path / "run", config)
    _write_game_labels(tmp_path / "probe" / "pretrain")
    _write_labels(tmp_path / "fake" / "pretrain")  # positions without their games
    torch.manual_seed(0)
    save_checkpoint(run.root, AlphaZeroNet(config.network), None, 0, config)
    out = tmp_path / "probe.json"
    for data in ("probe", "fake"):
        assert main(["probe", "--run", str(run.root), "--data", str(tmp_path / data), "--json", str(out)]) == 0
        text = capsys.readouterr().out
        assert "ChessBench's metrics" in text and "Kendall's tau" in text
        assert "no head" in text  # the AV row of a network without the head
        predictors = json.loads(out.read_text())["networks"][0]["predictors"]
        assert set(predictors) == {"bc", "sv"}
        assert 0.0 <= predictors["bc"]["action_accuracy"] <= 1.0 and -1.0 <= predictors["bc"]["kendall_tau"] <= 1.0
        if data == "probe":
            assert predictors["sv"]["positions"] == 5
        else:
            assert predictors["sv"]["positions"] == 0 and "SV n/a: no position" in text
    assert main(["probe", "--run", str(run.root), "--data", str(tmp_path / "probe"), "--json", str(out),
                 "--no-sv"]) == 0
    assert "--no-sv" in capsys.readouterr().out
    assert set(json.loads(out.read_text())["networks"][0]["predictors"]) == {"bc"}
