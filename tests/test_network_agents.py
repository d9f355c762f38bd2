"""Network agents (policy, value, search:N), their network sources and specs, and `alphazero match`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import chess
import numpy as np
import pytest
import torch

import eval.agents
from alphazero.chess.moves import move_to_index as policy_index
from alphazero.config import Config
from alphazero.errors import UserError
from alphazero.nn.forward import Evaluator
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint, save_model
from alphazero.store.rundir import DEFAULT_RUN_DIR, RunDir
from alphazero.store.sources import (
    FRESH,
    Network,
    NetworkCache,
    NetworkSource,
    load_network,
    resolve_source,
)
from eval.agents import Agent, Choice, parse_player
from eval.cli import add_match_arguments, parse_versus, run_match
from eval.network_agents import PolicyAgent, SearchAgent, ValueAgent, to_mcts_board
from eval.uci import OPTIONS
from mcts_ext.encode import encode_boards, new_batch, uci_to_index
from tests.helpers import repo_env, stockfish_or_skip

TINY: Config = get_preset("tiny")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def network() -> Network:
    torch.manual_seed(1)
    model = AlphaZeroNet(TINY.network)
    return Network(Evaluator(model, "cpu"), "test net", "test", None, None, False, TINY)


def _random_boards(count: int, seed: int) -> list[chess.Board]:
    """Returns boards reached by random playouts (some from a FEN root), none of them over."""
    rng = random.Random(seed)
    boards = []
    fens = [chess.STARTING_FEN, "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
            "8/2p5/3p4/KP5r/1R3p1k/8/4P1P1/8 w - - 0 1", "4k3/1P6/8/8/8/8/6p1/4K3 b - - 0 1"]
    while len(boards) < count:
        board = chess.Board(rng.choice(fens))
        for _ in range(rng.randrange(0, 80)):
            if board.is_game_over():
                break
            board.push(rng.choice(list(board.legal_moves)))
        if not board.is_game_over():
            boards.append(board)
    return boards


def _check_choices(agent: Agent, boards: list[chess.Board]) -> None:
    before = [(b.fen(), len(b.move_stack)) for b in boards]
    choices = agent.choose(boards)
    assert len(choices) == len(boards)
    for board, choice, (fen, plies) in zip(boards, choices, before):
        assert (board.fen(), len(board.move_stack)) == (fen, plies), "the agent changed a board"
        assert board.is_legal(choice.move), f"{agent.name} chose {choice.move} in {board.fen()}"
        assert choice.value is not None and math.isfinite(choice.value) and -1.0 <= choice.value <= 1.0
        json.dumps(choice.info)
        assert choice.info["nodes"] >= 1


# --- the agents -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda net: PolicyAgent(net, "policy"),
    lambda net: ValueAgent(net, "value"),
    lambda net: SearchAgent(net, 8, "search:8"),
], ids=["policy", "value", "search"])
def test_agents_play_only_legal_moves_on_random_positions(network: Network, make) -> None:
    agent = make(network)
    for seed in range(3):
        _check_choices(agent, _random_boards(12, seed))
    _check_choices(agent, _random_boards(1, 99))  # one board, and a smaller batch than before
    assert agent.choose([]) == []


def test_value_agent_picks_mate_in_one_without_the_network(network: Network) -> None:
    board = chess.Board("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1")
    [choice] = ValueAgent(network, "value").choose([board])
    assert choice.move == chess.Move.from_uci("a1a8")
    assert choice.value == 1.0


def test_value_agent_scores_draws_exactly_and_avoids_a_stalemate(network: Network) -> None:
    # Qc7 stalemates (exactly 0, no network); the network calls every other position -0.5 for Black.
    board = chess.Board("k7/8/8/1K6/8/8/8/2Q5 w - - 0 1")
    boards = [board]
    calls: list[int] = []

    def evaluate(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append(len(planes))
        return np.zeros((len(planes), 4672), np.float32), np.full(len(planes), -0.5, np.float32)

    fake = Network(network.evaluator, "fake", "fake", None, None, False, None)
    fake.evaluate = evaluate  # type: ignore[method-assign]
    [choice] = ValueAgent(fake, "value").choose(boards)
    assert choice.move != chess.Move.from_uci("c1c7")
    assert choice.value == pytest.approx(0.5)
    assert calls == [board.legal_moves.count() - 1]  # the stalemate never reached the network


def test_value_agent_evaluates_all_games_in_one_batch(network: Network) -> None:
    boards = _random_boards(6, 3)
    calls: list[int] = []
    real = network.evaluate

    def counting(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        calls.append(len(planes))
        return real(planes, scalars)

    fake = Network(network.evaluator, "fake", "fake", None, None, False, None)
    fake.evaluate = counting  # type: ignore[method-assign]
    ValueAgent(fake, "value").choose(boards)
    assert len(calls) == 1
    assert calls[0] <= sum(b.legal_moves.count() for b in boards)


@pytest.mark.parametrize("fen, uci", [
    (chess.STARTING_FEN, "g1f3"),
    ("rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq - 0 1", "b8c6"),  # Black: oriented indices
])
def test_policy_agent_plays_the_top_prior_among_legal_moves(network: Network, fen: str, uci: str) -> None:
    board = chess.Board(fen)
    wanted = uci_to_index(to_mcts_board(board), uci)

    def evaluate(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits = np.zeros((len(planes), 4672), np.float32)
        logits[:, wanted] = 5.0
        logits[:, 0] = 50.0  # plane 0 from a1 (oriented): north by 1, blocked by our own pawn: illegal
        return logits, np.full(len(planes), 0.25, np.float32)

    fake = Network(network.evaluator, "fake", "fake", None, None, False, None)
    fake.evaluate = evaluate  # type: ignore[method-assign]
    [choice] = PolicyAgent(fake, "policy").choose([board])
    assert choice.move == chess.Move.from_uci(uci)
    assert choice.value == pytest.approx(0.25)
    assert choice.info["prior"] > 1.0 / board.legal_moves.count()


def _network_preferring(network: Network, board: chess.Board, ucis: list[str], value: float) -> Network:
    """A fake network whose policy ranks `ucis` first to last on `board`, and whose value is `value`."""
    position = to_mcts_board(board)
    logits = np.zeros(4672, np.float32)
    for rank, uci in enumerate(ucis):
        logits[uci_to_index(position, uci)] = 10.0 - rank

    def evaluate(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return np.tile(logits, (len(planes), 1)), np.full(len(planes), value, np.float32)

    fake = Network(network.evaluator, "fake", "fake", None, None, False, None)
    fake.evaluate = evaluate  # type: ignore[method-assign]
    return fake


def _policy_moves(network: Network, board: chess.Board) -> tuple[str, str]:
    """The moves of the rules-aware policy agent and of the bare argmax on `board`."""
    [knowing] = PolicyAgent(network, "policy").choose([board])
    [bare] = PolicyAgent(network, "policy:rules=off", rules=False).choose([board])
    return knowing.move.uci(), bare.move.uci()


@pytest.mark.parametrize("value", [0.9, 0.0, -0.9])
def test_policy_agent_takes_a_mate_in_one_the_policy_ranks_second(network: Network, value: float) -> None:
    board = chess.Board("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1")
    fake = _network_preferring(network, board, ["a1a2", "a1a8"], value)
    knowing, bare = _policy_moves(fake, board)
    assert (knowing, bare) == ("a1a8", "a1a2")
    board.push_uci(knowing)
    assert board.is_checkmate()  # python-chess agrees


def test_policy_agent_avoids_a_stalemate_when_ahead_and_seeks_it_when_behind(network: Network) -> None:
    board = chess.Board("k7/8/8/1K6/8/8/8/2Q5 w - - 0 1")
    ranking = ["c1c7", "c1c2"]  # Qc7 stalemates
    ahead = _network_preferring(network, board, ranking, 0.8)
    assert _policy_moves(ahead, board) == ("c1c2", "c1c7")
    behind = _network_preferring(network, board, list(reversed(ranking)), -0.8)
    assert _policy_moves(behind, board) == ("c1c7", "c1c2")
    board.push_uci("c1c7")
    assert board.is_stalemate()


def test_policy_agent_does_not_go_back_to_a_position_when_ahead(network: Network) -> None:
    board = chess.Board()
    for uci in ("g1f3", "g8f6", "f3g1"):
        board.push_uci(uci)
    ranking = ["f6g8", "b8c6"]  # Ng8 brings back the start position
    ahead = _network_preferring(network, board, ranking, 0.5)
    assert _policy_moves(ahead, board) == ("b8c6", "f6g8")
    behind = _network_preferring(network, board, ranking, -0.5)
    assert _policy_moves(behind, board) == ("f6g8", "f6g8")
    board.push_uci("f6g8")
    assert board.is_repetition(2)


def test_the_policy_spec_switches_the_rules(run_dir: Path) -> None:
    context = {"run": run_dir, "device": "cpu", "networks": NetworkCache()}
    knowing, bare = parse_player("policy", **context), parse_player("policy:rules=off", **context)
    assert isinstance(knowing, PolicyAgent) and knowing.rules
    assert isinstance(bare, PolicyAgent) and not bare.rules and bare.name == "policy:rules=off@builtin"
    with pytest.raises(UserError, match="rules='maybe' must be on or off"):
        parse_player("policy:rules=maybe", **context)


def test_search_agent_batches_the_leaves_of_all_games(network: Network, monkeypatch: pytest.MonkeyPatch) -> None:
    boards = _random_boards(5, 7)
    rows: list[int] = []
    real = network.evaluator.evaluate_legal

    def counting(planes: np.ndarray, scalars: np.ndarray, indices: np.ndarray,
                 counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        rows.append(len(planes))
        return real(planes, scalars, indices, counts)

    # The search hands the network only the legal moves (evaluate_legal).
    monkeypatch.setattr(network.evaluator, "evaluate_legal", counting)
    choices = SearchAgent(network, 16, "search:16").choose(boards)
    assert max(rows) == len(boards)
    assert len(rows) <= 16 + 1  # the roots, then one leaf per game per step
    assert all(c.info["nodes"] == 16 for c in choices)
    assert all(c.info["pv"][0] == c.move.uci() for c in choices)


def test_search_agent_finds_mate_in_one(network: Network) -> None:
    board = chess.Board("6k1/5ppp/8/8/8/8/5PPP/R5K1 w - - 0 1")
    [choice] = SearchAgent(network, 200, "search:200").choose([board])
    assert choice.move == chess.Move.from_uci("a1a8")


def _legal_softmax(network: Network, board: chess.Board, temperature: float) -> dict[str, float]:
    """The oracle's priors: python-chess's legal moves, numpy's softmax of the network's logits / T."""
    logits, _ = network.evaluate_boards([to_mcts_board(board)])
    legal = list(board.legal_moves)
    scaled = np.array([logits[0, policy_index(move, board.turn)] for move in legal], np.float64) / temperature
    weights = np.exp(scaled - scaled.max())
    return dict(zip([move.uci() for move in legal], weights / weights.sum(), strict=True))


@pytest.mark.parametrize("run_temperature, option, used", [(1.0, None, 1.0), (1.5, None, 1.5), (1.5, 3.0, 3.0)])
def test_the_search_agents_prior_takes_the_runs_policy_temperature_or_its_option(
        network: Network, run_temperature: float, option: float | None, used: float) -> None:
    config = dataclasses.replace(TINY, search=dataclasses.replace(TINY.search, policy_temperature=run_temperature))
    agent = SearchAgent(dataclasses.replace(network, config=config), 4, "search:4", policy_temperature=option)
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")
    agent.choose([board])
    assert agent._search is not None
    priors, expected = agent._search.priors(0), _legal_softmax(network, board, used)
    assert sorted(priors) == sorted(expected)
    np.testing.assert_allclose([priors[uci] for uci in expected], list(expected.values()), rtol=1e-4, atol=1e-6)


def test_the_ptemp_option_sets_the_search_players_policy_temperature(run_dir: Path) -> None:
    context = {"run": run_dir, "device": "cpu", "networks": NetworkCache()}
    agent = parse_player("search:8,ptemp=2", **context)
    assert isinstance(agent, SearchAgent) and agent.policy_temperature == 2.0 and "ptemp=2" in agent.name
    assert parse_player("gumbel:8,ptemp=1.5", **context).policy_temperature == 1.5  # type: ignore[attr-defined]
    assert parse_player("search:8", **context).policy_temperature is None  # type: ignore[attr-defined]
    for bad in ("0", "-1", "inf", "warm"):
        with pytest.raises(UserError, match="ptemp"):
            parse_player(f"search:8,ptemp={bad}", **context)
        with pytest.raises(UserError, match="ptemp"):
            parse_player(f"uci:weights=builtin,ptemp={bad}", **context)


def test_the_cpuct_option_sets_the_engines_cpuct_and_is_checked_before_it_starts(
        run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[dict[str, object]] = []

    class EngineNotStarted(Agent):
        def __init__(self, **kwargs: object) -> None:
            super().__init__(str(kwargs["name"]))
            started.append(kwargs)

        def choose(self, boards: Sequence[chess.Board]) -> list[Choice]:
            raise AssertionError("not played")

    monkeypatch.setattr(eval.agents, "UciAgent", EngineNotStarted)
    context = {"run": run_dir, "device": "cpu", "networks": NetworkCache()}
    agent = parse_player("uci:weights=builtin,cpuct=2.5", **context)
    assert started[-1]["options"] == {"CPuct": "2.5"} and "cpuct=2.5" in agent.name
    assert "CPuct" in {option.name for option in OPTIONS}  # the engine declares what the player sets
    for bad in ("-0.5", "nan", "wide"):
        with pytest.raises(UserError, match="cpuct"):
            parse_player(f"uci:weights=builtin,cpuct={bad}", **context)
    assert len(started) == 1


def test_boards_are_rebuilt_with_their_history() -> None:
    board = chess.Board("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3")
    for uci in ("f1c4", "g8f6", "f3g5"):
        board.push_uci(uci)
    rebuilt = to_mcts_board(board)
    assert rebuilt.fen() == board.fen()
    assert rebuilt.move_stack == [m.uci() for m in board.move_stack]
    with_history, without = new_batch(1), new_batch(1)
    encode_boards([rebuilt], *with_history)
    encode_boards([to_mcts_board(chess.Board(board.fen()))], *without)
    assert (with_history[0][0, :14] == without[0][0, :14]).all()  # the same current position
    assert with_history[0][0, 14:].any() and not without[0][0, 14:].any()  # history planes only with history


# --- where the weights come from --------------------------------------------------------------


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    RunDir.create_or_open(tmp_path / "run", TINY)
    return tmp_path / "run"


def test_a_run_without_checkpoints_plays_fresh_seeded_weights_and_says_so(run_dir: Path, capsys) -> None:
    first = load_network(NetworkSource(run_dir, fallback=FRESH), device="cpu")
    assert first.fresh and first.step == 0
    assert "no checkpoint" in capsys.readouterr().err
    second = load_network(NetworkSource(run_dir, fallback=FRESH), device="cpu")
    for a, b in zip(first.evaluator.model.parameters(), second.evaluator.model.parameters()):
        assert torch.equal(a, b)


def test_checkpoint_step_path_and_weights_sources(run_dir: Path, tmp_path: Path) -> None:
    model = AlphaZeroNet(TINY.network)
    for step in (100, 200):
        save_checkpoint(run_dir, model, None, step, TINY)
    assert load_network(NetworkSource(run_dir), device="cpu").step == 200
    assert load_network(NetworkSource(run_dir, "100"), device="cpu").label == "step 100"
    by_path = load_network(NetworkSource(run_dir, str(run_dir / "checkpoints" / "step_000000100.pt")), device="cpu")
    assert by_path.step == 100
    save_model(tmp_path / "net.pt", model)
    by_file = load_network(NetworkSource(weights=tmp_path / "net.pt"), device="cpu")
    assert by_file.tag == "net" and not by_file.fresh
    with pytest.raises(UserError, match="no checkpoint at step 150.*100, 200"):
        load_network(NetworkSource(run_dir, "150"), device="cpu")
    with pytest.raises(UserError, match="not both"):
        load_network(NetworkSource(run_dir, "100", tmp_path / "net.pt"), device="cpu")
    with pytest.raises(UserError, match="does not exist"):
        load_network(NetworkSource(weights=tmp_path / "missing.pt"), device="cpu")


def test_player_specs_share_one_network(run_dir: Path) -> None:
    context = {"run": run_dir, "device": "cpu", "networks": NetworkCache(), "simulations": 12}
    policy = parse_player("policy", **context)
    search = parse_player("search", **context)
    search_8 = parse_player("search:8", **context)
    named = parse_player("search:sims=4,name=mine", **context)
    # The run has no checkpoint: the built-in network plays (tests/test_builtin.py).
    assert isinstance(search, SearchAgent) and search.simulations == 12 and search.name == "search:12@builtin"
    assert isinstance(search_8, SearchAgent) and search_8.simulations == 8
    assert named.name == "mine"
    assert isinstance(policy, PolicyAgent) and policy.network is search.network
    with pytest.raises(UserError, match="at least 1 simulation"):
        parse_player("search:0", **context)
    with pytest.raises(UserError, match="unknown option"):
        parse_player("policy:sims=3", **context)


def test_every_command_that_opens_a_run_defaults_to_the_same_one() -> None:
    from alphazero.app.cli import build_parser

    commands = next(action for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction))
    defaults = {name: action.default for name, command in commands.choices.items()
                for action in command._actions if "--run" in action.option_strings}
    assert len(defaults) >= 10  # train, selfplay, learn, pretrain, eval, match, curve, probe, puzzles, epd, uci
    assert defaults.pop("uci") is None  # the engine: runs/default when it exists, else the built-in network
    assert set(defaults.values()) == {DEFAULT_RUN_DIR} and DEFAULT_RUN_DIR == Path("runs/default")


# --- alphazero match ----------------------------------------------------------------------------


def test_versus_parsing() -> None:
    assert parse_versus(["vs", "stockfish"], "search:400") == ("search:400", "stockfish")
    assert parse_versus(["policy", "VS", "value"], "x") == ("policy", "value")
    for bad in (["policy", "value"], ["a", "b", "vs", "c"], ["vs"], ["a", "vs", "b", "vs", "c"]):
        with pytest.raises(UserError):
            parse_versus(bad, "x")


def _match_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_match_arguments(parser)
    return parser.parse_args(list(argv))


def test_elo_needs_a_bare_stockfish(run_dir: Path) -> None:
    with pytest.raises(UserError, match="bare `stockfish`"):
        run_match(_match_args("policy", "vs", "random", "--elo", "1500", "--run", str(run_dir)))


def test_a_network_agent_plays_stockfish_and_the_match_is_written(run_dir: Path, capsys) -> None:
    stockfish_or_skip()
    model = AlphaZeroNet(TINY.network)
    save_checkpoint(run_dir, model, None, 300, TINY)
    run_match(_match_args("vs", "stockfish:depth=1", "--games", "2", "--simulations", "4", "--run", str(run_dir),
                          "--device", "cpu", "--ply-limit", "60", "--no-progress", "--match-id", "m1"))
    out = capsys.readouterr().out
    assert "search:4@step300 vs stockfish" in out
    pgn = run_dir / "games" / "m1.pgn"
    records = [json.loads(line) for line in (run_dir / "eval" / "m1.jsonl").read_text().splitlines()]
    assert len(records) == 2 and pgn.is_file()
    assert {r["agent_a"] for r in records} == {"search:4@step300"}
    assert pgn.read_text().count("[Event \"m1\"]") == 2


def test_unusable_paths_are_user_errors_with_the_system_reason(tmp_path: Path) -> None:
    # Regression: a 300-character name raised OSError (File name too long) out of resolve_source.
    loop = tmp_path / "loop.pt"
    loop.symlink_to(tmp_path / "loop.pt")
    cases = [
        (NetworkSource(weights=Path("w" * 300)), "File name too long"),
        (NetworkSource(run=tmp_path / ("r" * 300)), "File name too long"),
        (NetworkSource(run=tmp_path, checkpoint="c" * 300), "File name too long"),
        (NetworkSource(weights=loop), "Too many levels of symbolic links"),
        (NetworkSource(weights=Path("net\x00.pt")), "null byte"),
    ]
    for source, reason in cases:
        with pytest.raises(UserError, match=reason) as caught:
            resolve_source(source)
        assert len(str(caught.value)) < 300  # the name is cut, not repeated in full


def test_a_fresh_match_command_knows_the_network_players(tmp_path: Path) -> None:
    # Regression: the network players registered themselves only when something had imported
    # eval.network_agents first; in a fresh process `match policy vs random` did not know `policy`.
    command = [sys.executable, "-m", "alphazero", "match", "policy:weights=builtin", "vs", "random", "--games",
               "2", "--run", str(tmp_path / "run"), "--device", "cpu", "--no-progress"]
    done = subprocess.run(command, env=repo_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "policy@builtin vs random" in done.stdout


def test_a_run_the_player_names_must_exist(tmp_path: Path) -> None:
    # A typo in run= had played the built-in network with only a note; the command's own run still falls back.
    with pytest.raises(UserError, match=r"run=.*nope: no such run directory"):
        eval.agents.parse_player(f"policy:run={tmp_path / 'nope'}", device="cpu")
    with eval.agents.parse_player("policy", run=str(tmp_path / "nope"), device="cpu") as agent:
        assert agent.name == "policy@builtin"
