"""The action-value player `av` (eval.network_agents), where players go, the UCI engine's searchless modes
(its Mode option), and Kendall's tau (eval.probe_predictors).

The action-value head itself is alphazero.nn's; these tests hold the players to its contract through a
stand-in: an Evaluator whose head gives one win probability to every move but those it is told to prefer
(``HeadEvaluator``), and in a subprocess engine the same stand-in patched onto alphazero.nn.forward.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import math
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path

import chess
import chess.engine
import numpy as np
import pytest
import torch
from rich.console import Console

import eval.uci as uci_module
from alphazero.app.cli import main
from alphazero.chess.moves import NUM_MOVES, move_to_index
from alphazero.config import Config
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet, build_network
from alphazero.nn.planes import compact_to_torch
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_model
from alphazero.store.rundir import RunDir
from alphazero.store.sources import Network, NetworkSource, load_network
from eval.agents import RandomAgent, describe_players, parse_player, players
from eval.evaluate import EvalSettings, evaluate_checkpoint
from eval.match import play_match
from eval.network_agents import ActionValueAgent, PolicyAgent, to_mcts_board
from eval.probe_predictors import kendall_tau, predictor_scores
from eval.puzzles import read_puzzles, solve_puzzles
from eval.scores import value_to_centipawns
from eval.uci import OPTIONS, UciEngine
from eval.uci_options import MODES
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch, uci_to_index
from tests.helpers import ROOT, WatchedOutput, repo_env

TINY: Config = get_preset("tiny")
HANGING_QUEEN = "4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1"  # Rxd5 wins the queen: the one winning move
HANGING_QUEEN_BLACK = "4k3/3r4/8/8/3Q4/8/8/4K3 b - - 0 1"  # Rxd4, the same for Black (oriented indices)
MATE_IN_ONE = "6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1"  # Ra8#
PUZZLES = ROOT / "eval" / "data" / "lichess_puzzles_sample.csv"
OTHER_WIN = 0.3  # the stand-in head's win probability of every move it does not prefer

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class HeadEvaluator(Evaluator):
    """An Evaluator with a stand-in action-value head (alphazero.nn.forward's contract): every move's win
    probability is OTHER_WIN but for the policy indices ``preferred`` maps to their own; ``calls`` counts
    the positions of each call."""

    def __init__(self, model: torch.nn.Module, preferred: Mapping[int, float] | None = None) -> None:
        super().__init__(model, "cpu")
        self.preferred = dict(preferred or {})
        self.calls: list[int] = []

    @property
    def has_action_values(self) -> bool:
        return True

    def evaluate_action_values(self, planes: np.ndarray, scalars: np.ndarray) -> np.ndarray:
        self.calls.append(len(planes))
        values = np.full((len(planes), NUM_MOVES), OTHER_WIN, np.float32)
        for index, win in self.preferred.items():
            values[:, index] = win
        return values


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(3)
    return AlphaZeroNet(TINY.network)


def _head_network(model: torch.nn.Module, preferred: Mapping[int, float] | None = None) -> Network:
    return Network(HeadEvaluator(model, preferred), "head net", "head", None, None, False, TINY)


def _index(fen: str, uci: str) -> int:
    return int(uci_to_index(to_mcts_board(chess.Board(fen)), uci))


# --- the agent --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fen, winning", [(HANGING_QUEEN, "d2d5"), (HANGING_QUEEN_BLACK, "d7d4")])
def test_av_plays_the_move_of_highest_head_value_in_a_position_with_one_winning_move(
        model: torch.nn.Module, fen: str, winning: str) -> None:
    board = chess.Board(fen)
    legal = legal_move_indices(to_mcts_board(board))
    illegal = next(index for index in range(NUM_MOVES) if index not in legal)
    # The head rates the winning move 0.95 and an illegal move higher still: only legal moves count.
    network = _head_network(model, {_index(fen, winning): 0.95, illegal: 0.99})
    [choice] = ActionValueAgent(network, "av").choose([board])
    assert choice.move == chess.Move.from_uci(winning)
    assert choice.value == pytest.approx(2 * 0.95 - 1) and choice.info["win"] == pytest.approx(0.95)
    assert board.fen() == fen  # the board is left as it was


def test_av_breaks_ties_by_legal_order_and_asks_once_for_all_games(model: torch.nn.Module) -> None:
    boards = [chess.Board(), chess.Board(HANGING_QUEEN), chess.Board(HANGING_QUEEN_BLACK)]
    network = _head_network(model)  # every move OTHER_WIN: all tied
    choices = ActionValueAgent(network, "av").choose(boards)
    assert [choice.move.uci() for choice in choices] == [to_mcts_board(b).legal_moves()[0] for b in boards]
    assert network.evaluator.calls == [3]  # type: ignore[attr-defined]
    assert ActionValueAgent(network, "av").choose([]) == []


def test_av_is_refused_in_one_line_naming_the_weights_and_the_setting(weights: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    for spec, named in ((f"av:weights={weights},device=cpu", "net.pt"), ("av:weights=builtin,device=cpu",
                                                                          "builtin.pt")):
        with pytest.raises(UserError) as caught:
            parse_player(spec)
        message = str(caught.value)
        assert "\n" not in message and named in message
        assert "network.action_value_head = 'none'" in message and message.startswith("av needs an action-value head")
    # The commands that take players: one line, exit 2.
    assert main(["puzzles", str(PUZZLES), "--player", "av:weights=builtin,device=cpu", "--limit", "1",
                 "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "av needs an action-value head" in err[-1] and "builtin.pt" in err[-1]
    assert main(["match", "av:weights=builtin,device=cpu", "vs", "random", "--games", "2"]) == 2
    assert "av needs an action-value head" in capsys.readouterr().err


def test_av_is_a_player_beside_policy_and_value(model: torch.nn.Module, tmp_path: Path) -> None:
    kinds = players()
    assert {"policy", "value", "av"} <= kinds.keys()
    assert kinds["av"].options == kinds["value"].options  # weights=, checkpoint=, run=, device=, precision=
    assert "  av: " in describe_players()
    network = _head_network(model, {_index(HANGING_QUEEN, "d2d5"): 0.95})
    with parse_player("av", network=network) as agent:
        assert isinstance(agent, ActionValueAgent) and agent.name == "av@head"
        result = play_match(agent, RandomAgent(1), games=2, ply_limit=16, out_dir=tmp_path / "eval",
                            pgn_dir=tmp_path / "games", progress=False)
        assert len(result.games) == 2
        report = solve_puzzles(agent, read_puzzles(PUZZLES, limit=4), concurrency=4)
        assert len(report.results) == 4
    assert parse_player("av:name=head-av", network=network).name == "head-av"


def test_eval_rates_av_where_the_head_is_and_says_in_one_line_why_not_elsewhere(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import eval.evaluate as evaluate_module

    settings = EvalSettings(games_per_pair=2, simulations=2, stockfish_elos=(), ply_limit=8)
    run, _ = RunDir.create_or_open(tmp_path / "plain", TINY)
    shown = io.StringIO()
    ratings = evaluate_checkpoint(run, TINY, settings=settings, device="cpu", progress=False,
                                  console=Console(file=shown, width=400))
    assert "av" not in ratings and {"policy", "value", "search:2"} <= set(ratings)
    [line] = [line for line in shown.getvalue().splitlines() if "av is not rated" in line]
    assert "network.action_value_head = 'none'" in line
    # With the head (the stand-in), av joins the rated agents.
    monkeypatch.setattr(evaluate_module, "Evaluator", HeadEvaluator)
    run, _ = RunDir.create_or_open(tmp_path / "head", TINY)
    torch.manual_seed(0)
    ratings = evaluate_checkpoint(run, TINY, 10, model=AlphaZeroNet(TINY.network), settings=settings,
                                  device="cpu", progress=False, report=False)
    assert {"policy", "value", "av", "search:2", "random"} == set(ratings)


def _real_head_network(kind: str = "logit") -> torch.nn.Module:
    """The tiny preset's network with alphazero.nn's action-value head (skips where the config has none)."""
    if "action_value_head" not in {field.name for field in dataclasses.fields(TINY.network)}:
        pytest.skip("alphazero.nn has no action-value head yet (network.action_value_head)")
    torch.manual_seed(4)
    return build_network(dataclasses.replace(TINY.network, action_value_head=kind))


def _train_head_to_prefer(model: torch.nn.Module, fen: str, winning: str, steps: int = 60) -> None:
    """Trains the head on one position: the winning move's win probability 0.95, every other move's 0.2."""
    position = to_mcts_board(chess.Board(fen))
    legal = torch.from_numpy(legal_move_indices(position).astype(np.int64))
    target = torch.full((len(legal),), 0.2)
    target[position.legal_moves().index(winning)] = 0.95
    planes, scalars = new_batch(1)
    encode_boards([position], planes, scalars)
    inputs = compact_to_torch(planes, scalars, "cpu")
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.eval()  # batch norm's running statistics, as the Evaluator runs it
    for _ in range(steps):
        wins = model(*inputs).action_values[0, legal].clamp(1e-6, 1 - 1e-6)
        loss = torch.nn.functional.binary_cross_entropy(wins, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


@pytest.mark.slow  # 60 training steps
def test_av_with_a_trained_head_plays_the_one_winning_move_and_reads_the_head_in_legal_order(
        tmp_path: Path) -> None:
    model = _real_head_network()
    _train_head_to_prefer(model, HANGING_QUEEN, "d2d5")
    network = Network(Evaluator(model, "cpu"), "trained head", "trained", None, None, False, TINY)
    boards = [chess.Board(HANGING_QUEEN), chess.Board(HANGING_QUEEN_BLACK), chess.Board()]
    choices = ActionValueAgent(network, "av").choose(boards)
    assert choices[0].move == chess.Move.from_uci("d2d5")
    # Every choice is the argmax of the head's row over the legal moves, indexed by python-chess's geometry.
    planes, scalars = new_batch(len(boards))
    encode_boards([to_mcts_board(board) for board in boards], planes, scalars)
    rows = network.evaluator.evaluate_action_values(planes, scalars)  # type: ignore[attr-defined]
    for row, board, choice in zip(rows, boards, choices, strict=True):
        moves = sorted(board.legal_moves, key=lambda move: to_mcts_board(board).legal_moves().index(move.uci()))
        wins = [row[move_to_index(move, board.turn)] for move in moves]
        assert choice.move == moves[int(np.argmax(wins))]
        assert choice.info["win"] == pytest.approx(max(wins))
    # Saved and loaded, as players and the engine load it.
    path = tmp_path / "head.pt"
    save_model(path, model)
    with parse_player(f"av:weights={path},device=cpu") as agent:
        assert agent.choose([chess.Board(HANGING_QUEEN)])[0].move == chess.Move.from_uci("d2d5")
    engine, out = _in_process(path, "Mode value av")
    engine.handle(f"position fen {HANGING_QUEEN}")
    engine.handle("go nodes 500")
    engine.wait()
    assert out.getvalue().splitlines()[-1] == "bestmove d2d5" and "refused" not in out.getvalue()


# --- the UCI engine's searchless modes --------------------------------------------------------------------


STAND_IN_ENGINE = """
import os, sys
import numpy as np
from alphazero.nn.forward import Evaluator
preferred = {int(k): float(v) for k, v in (item.split(':') for item in os.environ['AV_PREFERRED'].split(','))}
def evaluate_action_values(self, planes, scalars):
    values = np.full((len(planes), 4672), %r, np.float32)
    for index, win in preferred.items():
        values[:, index] = win
    return values
Evaluator.has_action_values = property(lambda self: True)
Evaluator.evaluate_action_values = evaluate_action_values
from alphazero.app.cli import main
sys.exit(main(sys.argv[1:]))
""".replace("%r", repr(OTHER_WIN))
"""The engine with the stand-in head patched onto alphazero.nn.forward's Evaluator (AV_PREFERRED: index:win,...)."""


def _engine_command(weights: Path, *, stand_in: bool = False) -> list[str]:
    start = [sys.executable, "-c", STAND_IN_ENGINE] if stand_in else [sys.executable, "-m", "alphazero"]
    return [*start, "uci", "--weights", str(weights), "--device", "cpu", "--threads", "1"]


@pytest.fixture(scope="module")
def engine(weights: Path) -> Iterator[chess.engine.SimpleEngine]:
    uci = chess.engine.SimpleEngine.popen_uci(_engine_command(weights), cwd=ROOT, env=repo_env(), timeout=60)
    try:
        # As this process's float32 references (tests/conftest.py): 'auto' takes bf16 where the processor has it
        # and it times faster, whose values (and now and then moves) differ.
        uci.configure({"Precision": "float32"})
        yield uci
    finally:
        uci.quit()
        uci.close()


def _in_mode(engine: chess.engine.SimpleEngine, mode: str, board: chess.Board,
             limit: chess.engine.Limit) -> chess.engine.PlayResult:
    engine.configure({"Mode": mode})
    try:
        return engine.play(board, limit, info=chess.engine.INFO_ALL, game=object())
    finally:
        engine.configure({"Mode": "search"})


def test_the_mode_option_is_declared_once_with_search_first(engine: chess.engine.SimpleEngine) -> None:
    option = engine.options["Mode"]
    assert option.type == "combo" and option.default == "search" and tuple(option.var) == MODES
    assert [o.name for o in OPTIONS].count("Mode") == 1


def test_mode_policy_answers_at_once_with_the_policy_players_move(engine: chess.engine.SimpleEngine,
                                                                  weights: Path) -> None:
    board = chess.Board()
    for uci in ("e2e4", "c7c5", "g1f3"):
        board.push_uci(uci)
    result = _in_mode(engine, "policy", board, chess.engine.Limit(nodes=100_000))  # the nodes are ignored
    network = load_network(NetworkSource(Path("unused"), weights=weights), device="cpu", precision="float32")
    [expected] = PolicyAgent(network, "policy").choose([board])
    assert result.move == expected.move and result.info["nodes"] == 1
    assert expected.value is not None
    assert result.info["score"].relative == chess.engine.Cp(round(value_to_centipawns(expected.value)))
    assert result.info["pv"] == [expected.move]


def test_mode_value_plays_a_mate_in_one_and_reports_mate_1_on_a_clock(engine: chess.engine.SimpleEngine) -> None:
    board = chess.Board(MATE_IN_ONE)
    clock = chess.engine.Limit(white_clock=600, black_clock=600, white_inc=5, black_inc=5)
    result = _in_mode(engine, "value", board, clock)
    assert result.move == chess.Move.from_uci("a1a8")
    assert result.info["score"].relative == chess.engine.Mate(1)
    assert result.info["nodes"] == board.legal_moves.count()  # every move's position, no more
    # Back to the search: it searches by the limit again.
    assert engine.analyse(chess.Board(), chess.engine.Limit(nodes=16))["nodes"] == 16


@pytest.mark.slow  # an engine process of its own
def test_mode_av_through_python_chess_with_a_head(weights: Path) -> None:
    env = {**repo_env(), "AV_PREFERRED": f"{_index(HANGING_QUEEN, 'd2d5')}:0.95"}
    with chess.engine.SimpleEngine.popen_uci(_engine_command(weights, stand_in=True), cwd=ROOT, env=env,
                                             timeout=60) as uci:
        uci.configure({"Mode": "av", "UCI_ShowWDL": True})
        result = uci.play(chess.Board(HANGING_QUEEN), chess.engine.Limit(nodes=5000), info=chess.engine.INFO_ALL)
        assert result.move == chess.Move.from_uci("d2d5")
        assert result.info["score"].relative == chess.engine.Cp(round(value_to_centipawns(2 * 0.95 - 1)))
        assert result.info["wdl"].relative.total() == 1000
        uci.quit()


def _in_process(weights: Path, *options: str) -> tuple[UciEngine, WatchedOutput]:
    out = WatchedOutput()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out)
    for option in options:
        engine.handle(f"setoption name {option}")
    return engine, out


def test_mode_av_without_the_head_is_refused_in_one_line_and_searches(weights: Path) -> None:
    engine, out = _in_process(weights, "Mode value av")
    engine.handle(f"position fen {HANGING_QUEEN}")
    engine.handle("go nodes 8")
    engine.wait()
    lines = out.getvalue().splitlines()
    [refusal] = [line for line in lines if "Mode av" in line]
    assert refusal.startswith("info string Mode av refused, searching instead: Mode av needs an action-value head")
    assert "net.pt" in refusal and "network.action_value_head = 'none'" in refusal
    assert lines[-1].startswith("bestmove ") and engine.last_report is not None and engine.last_report.nodes == 8


def test_a_searchless_go_infinite_withholds_bestmove_until_stop(weights: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    real = uci_module.load_network

    def with_head(*args: object, **kwargs: object) -> Network:
        network = real(*args, **kwargs)  # type: ignore[arg-type]
        network.evaluator = HeadEvaluator(network.evaluator.model, {_index(HANGING_QUEEN, "d2d5"): 0.95})
        return network

    monkeypatch.setattr(uci_module, "load_network", with_head)
    engine, out = _in_process(weights, "Mode value av")
    engine.handle(f"position fen {HANGING_QUEEN}")
    engine.handle("go infinite")
    assert out.seen.wait(60)  # the answer's info line (the bound only stops a hang)
    assert " pv d2d5" in out.getvalue() and "bestmove" not in out.getvalue() and engine.searching()
    engine.handle("stop")
    assert out.getvalue().splitlines()[-1] == "bestmove d2d5"


# --- Kendall's tau ----------------------------------------------------------------------------------------


def _pair_count_tau(x: list[float], y: list[float]) -> float:
    """Kendall's tau-b by counting the pairs one by one."""
    concordant = discordant = tied_x = tied_y = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        tied_x += dx == 0
        tied_y += dy == 0
        if dx * dy > 0:
            concordant += 1
        elif dx * dy < 0:
            discordant += 1
    pairs = len(x) * (len(x) - 1) // 2
    denominator = math.sqrt((pairs - tied_x) * (pairs - tied_y))
    return (concordant - discordant) / denominator if denominator else math.nan


def _small_cases() -> Iterator[tuple[list[float], list[float]]]:
    """Orders of 2 to 7 items, scored from a few values so that ties are common, and hand-made ones."""
    rng = np.random.default_rng(68)
    yield [1, 2, 3, 4], [1, 2, 3, 4]
    yield [1, 2, 3, 4], [4, 3, 2, 1]
    yield [1, 1, 2, 3], [1, 2, 2, 3]
    yield [0.5, 0.5, 0.5], [1, 2, 3]  # all tied in x: undefined
    for _ in range(200):
        n = int(rng.integers(2, 8))
        yield rng.integers(0, 4, n).tolist(), rng.integers(0, 4, n).tolist()


def test_kendall_tau_is_the_tau_b_of_a_pair_count_with_ties() -> None:
    for x, y in _small_cases():
        expected = _pair_count_tau(x, y)
        got = kendall_tau(np.array(x, float), np.array(y, float))
        assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected), (x, y)
    assert kendall_tau(np.array([1.0, 2.0]), np.array([3.0, 4.0])) == 1.0
    assert math.isnan(kendall_tau(np.array([1.0]), np.array([1.0])))  # fewer than two items
    with pytest.raises(ValueError, match="one length"):
        kendall_tau(np.array([1.0, 2.0]), np.array([1.0]))


@pytest.mark.slow  # scipy's import
def test_kendall_tau_agrees_with_scipy() -> None:
    stats = pytest.importorskip("scipy.stats")
    for x, y in _small_cases():
        expected = float(stats.kendalltau(x, y).statistic)  # tau-b, its default
        got = kendall_tau(np.array(x, float), np.array(y, float))
        assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(expected), (x, y)


def test_action_accuracy_and_tau_at_each_position_as_chessbench_counts_them() -> None:
    # Position 0: the predictor's top move (the first of its two tied bests) is one of Stockfish's two tied
    # bests; position 1: its top move was not scored (a miss), tau over the scored two; position 2: one legal
    # move (tau 1); position 3: every scored move tied (tau undefined, left out).
    predicted = np.array([0.9, 0.9, 0.1, 0.2, 0.8, 0.5, 0.4, 0.7, 0.3, 0.6])
    wins = np.array([0.6, 0.6, 0.2, 0.9, np.nan, 0.4, 0.3, 0.5, 0.5, np.nan])
    offsets = np.array([0, 3, 6, 7, 10])
    scores = predictor_scores(predicted, wins, offsets)
    assert scores.accuracy.tolist() == [1.0, 0.0, 1.0, 1.0]
    assert scores.tau[0] == pytest.approx(_pair_count_tau([0.9, 0.9, 0.1], [0.6, 0.6, 0.2]))
    assert scores.tau[1] == pytest.approx(_pair_count_tau([0.2, 0.5], [0.9, 0.4]))
    assert scores.tau[2] == 1.0 and math.isnan(scores.tau[3])
    figures = scores.figures()
    assert (figures.positions, figures.tau_positions) == (4, 3)
    assert figures.kendall_tau == pytest.approx(np.mean(scores.tau[:3]))
    assert json.loads(json.dumps(figures.as_dict()))["action_accuracy"] == pytest.approx(0.75)
