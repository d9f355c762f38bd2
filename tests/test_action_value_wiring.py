"""The action-value head's values reach the searches that read them (alphazero.search_action_values): self-play's
worker (its own network, its thread pool, an inference server), the `search:N` players and the UCI engine; a
search that does not read them never asks; a network without the head is said in one line and searched as before.

The networks are the tiny preset's with a `logit` head. Where a played move must show the head's values, the
network's policy and value layers are zeroed: every prior is equal and every value 0, so one PUCT simulation with
fpu_mode = "action_value" visits (and plays) the move the head rates highest, where the first-play reduction
ties every move and visits the first (``zeroed_model``).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from pathlib import Path
from typing import Any

import chess
import chess.engine
import numpy as np
import pytest
import torch

from alphazero.config import Config, apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.nn.action_values import has_action_values as model_has_head
from alphazero.nn.forward import Evaluator
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.sources import Network
from eval.agents import parse_player
from eval.network_agents import SearchAgent, to_mcts_board
from mcts_ext import Board
from mcts_ext.encode import encode_boards, legal_move_indices, new_batch
from mcts_ext.search import MultiGameSearch
from selfplay.inference import InferenceServer
from selfplay.worker import PlayStats, SelfPlayWorker
from tests.helpers import ROOT, engine_with_spies, fast_run, go_nodes, repo_env, spy_legal_passes, zeroed_model

TINY = get_preset("tiny")  # its search.algorithm is gumbel
HEAD = "network.action_value_head=logit"
PUCT_READS = ("search.algorithm=puct", "search.fpu_mode=action_value")
GUMBEL_READS = ("search.algorithm=gumbel", "search.gumbel_unvisited=action_value")
CHEAP = ("selfplay.cpu_precision=float32", "selfplay.cpu_forward=eager", "selfplay.save_pgn=false",
         "search.ply_limit=16")
"""Self-play's network in float32 (the tree's values and a reference pass agree to its rounding) and eager (no
compilation at start), short games."""
MISSING = "has no action-value head (network.action_value_head = 'none')"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- helpers ------------------------------------------------------------------------------------------


def _fast_run(path: Path, *extra: str) -> tuple[RunDir, Config]:
    run, config = fast_run(path, *extra)
    assert isinstance(config, Config)
    return run, config


def _head_wins(evaluator: Evaluator, board: Board) -> dict[str, float]:
    """The head's win probability of each legal move of ``board`` (with its history), by UCI."""
    planes, scalars = new_batch(1)
    encode_boards([board], planes, scalars)
    wins = evaluator.evaluate_action_values(planes, scalars)[0]
    return {uci: float(wins[index]) for uci, index in zip(board.legal_moves(), legal_move_indices(board))}


def _assert_tree_holds_the_head(search: MultiGameSearch, slot: int, evaluator: Evaluator) -> None:
    """The root of ``slot`` keeps 2p - 1 of the head's p for every legal move."""
    wins = _head_wins(evaluator, search.board(slot))
    kept = search.action_values(slot)
    assert kept.keys() == wins.keys() and None not in kept.values()
    for uci, win in wins.items():
        assert kept[uci] == pytest.approx(2 * win - 1, abs=1e-5), uci


def _one_batch(worker: SelfPlayWorker) -> None:
    """Sends every lane's first leaves (its games' roots) to the network and backs them up."""
    stats = PlayStats()
    for lane in worker.lanes:
        worker._step(lane, stats, submit=True)
    for lane in worker.lanes:
        worker._receive(lane, stats)


def _network(model: torch.nn.Module, *overrides: str) -> Network:
    config = apply_overrides(TINY, [HEAD, *overrides] if model_has_head(model) else list(overrides))
    return Network(Evaluator(model, "cpu", precision="float32"), "zeroed net", "zeroed", None, None, False, config)


def _head_choice(model: torch.nn.Module, board: chess.Board) -> str:
    """The legal move the head rates highest (what one simulation that reads the head visits)."""
    wins = _head_wins(Evaluator(model, "cpu", precision="float32"), to_mcts_board(board))
    ranked = sorted(wins, key=wins.__getitem__, reverse=True)
    assert wins[ranked[0]] - wins[ranked[1]] > 1e-3, "the head's best move must stand out: choose another seed"
    return ranked[0]


def _plain_choice(board: chess.Board) -> str:
    """The move one PUCT simulation visits where every move ties (the first-play reduction, equal priors)."""
    return to_mcts_board(board).legal_moves()[0]


# --- self-play's worker -------------------------------------------------------------------------------


@pytest.mark.parametrize(("reads", "overlap"), [(PUCT_READS, "off"), (PUCT_READS, "on"), (GUMBEL_READS, "off")],
                         ids=["puct-submit_legal", "puct-thread_pool", "gumbel-submit_legal"])
def test_the_selfplay_worker_backs_up_the_heads_values_where_its_search_reads_them(
        tmp_path: Path, reads: tuple[str, ...], overlap: str) -> None:
    run, config = _fast_run(tmp_path / "run", HEAD, *CHEAP, f"selfplay.overlap={overlap}", *reads)
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=2)
    assert worker.action_values and (worker.pool is not None) == (overlap == "on")
    assert worker.evaluator is not None
    asked = spy_legal_passes(worker.evaluator)
    _one_batch(worker)
    for lane in worker.lanes:
        for slot in range(lane.search.games):
            _assert_tree_holds_the_head(lane.search, slot, worker.evaluator)
    worker.play(120)  # and the games play on to their ends with them
    worker.flush()
    assert worker.idle() and asked and all(asked)


def test_a_selfplay_search_that_does_not_read_them_never_asks(tmp_path: Path) -> None:
    run, config = _fast_run(tmp_path / "run", HEAD, *CHEAP, "search.algorithm=puct")
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=2)
    assert worker.evaluator is not None and worker.evaluator.has_action_values and not worker.action_values
    asked = spy_legal_passes(worker.evaluator)
    _one_batch(worker)
    assert asked and not any(asked)
    assert set(worker.search.action_values(0).values()) == {None}


def test_selfplay_without_the_head_says_so_once_and_plays_with_the_reduction(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run, config = _fast_run(tmp_path / "run", *CHEAP, *PUCT_READS)
    with caplog.at_level(logging.WARNING, logger="selfplay.worker"):
        worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=2)
        assert not worker.action_values
        asked = spy_legal_passes(worker.evaluator)  # type: ignore[arg-type]
        stats = worker.play(120)
        worker.flush()
    said = [record.getMessage() for record in caplog.records if "action-value head" in record.getMessage()]
    assert len(said) == 1 and "\n" not in said[0] and MISSING in said[0]
    assert "search.fpu_mode = 'action_value'" in said[0] and "first-play reduction" in said[0]
    assert worker.idle() and stats.games == 2 and asked and not any(asked)


class _Method:
    """An actor method called in this process: ``remote()`` runs it at once and gives what ray.get returns;
    each call's name and keyword arguments go to ``calls``."""

    def __init__(self, name: str, method: Any, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.name, self.method, self.calls = name, method, calls

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((self.name, kwargs))
        result = self.method(*args, **kwargs)
        return asyncio.run(result) if inspect.iscoroutine(result) else result


class _InProcessServer:
    """An InferenceServer as a worker's Ray handle sees it, without Ray (with ray.get patched to pass results on)."""

    def __init__(self, server: InferenceServer) -> None:
        self.server = server
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str) -> _Method:
        return _Method(name, getattr(self.server, name), self.calls)


def test_the_inference_server_path_asks_the_server_once_and_backs_up_its_values(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    monkeypatch.setattr(ray, "get", lambda ref: ref)
    run, config = _fast_run(tmp_path / "run", HEAD, *CHEAP, "selfplay.inference=server", "selfplay.device=cpu",
                           *PUCT_READS)
    server = InferenceServer(str(run.root), to_toml(config), device="cpu", wait_ms=0)
    handle = _InProcessServer(server)
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=2, server=handle)
    assert worker.action_values and len(worker.lanes) == 2  # a lane per game, both in flight
    _one_batch(worker)
    for lane in worker.lanes:
        _assert_tree_holds_the_head(lane.search, 0, server.evaluator)
    stats = worker.play(120)
    worker.flush()
    assert worker.idle() and stats.games == 2
    names = [name for name, _ in handle.calls]
    assert names.count("has_action_values") == 1 and names[0] == "has_action_values"  # once, at the start
    passes = [kwargs for name, kwargs in handle.calls if name == "evaluate_legal"]
    assert passes and all(kwargs == {"action_values": True} for kwargs in passes)


def test_the_inference_server_merges_and_splits_the_action_values_of_the_requests_that_ask(tmp_path: Path) -> None:
    run, config = _fast_run(tmp_path / "run", HEAD, *CHEAP)
    server = InferenceServer(str(run.root), to_toml(config), device="cpu", max_batch=8, wait_ms=50)
    rng = np.random.default_rng(0)
    requests = []
    for rows, width, asks in ((3, 20, True), (3, 31, False), (2, 7, True)):
        planes = rng.integers(0, 2**63, size=(rows, 112), dtype=np.uint64)
        scalars = rng.integers(0, 50, size=(rows, 7)).astype(np.float32)
        counts = rng.integers(1, width + 1, size=rows).astype(np.int32)
        indices = rng.integers(0, 1858, size=(rows, width)).astype(np.int32)
        requests.append(((planes, scalars, indices, counts), asks))

    async def all_at_once() -> list[Any]:
        return await asyncio.gather(*(server.evaluate_legal(*arrays, action_values=asks)
                                      for arrays, asks in requests))

    answers = asyncio.run(all_at_once())
    assert server.stats()["passes"] == 1
    for ((planes, scalars, indices, counts), asks), answer in zip(requests, answers):
        assert len(answer) == (4 if asks else 3) and answer[2] == -1
        if asks:
            _, _, alone = server.evaluator.evaluate_legal(planes, scalars, indices, counts, action_values=True)
            assert answer[3].shape == (len(planes), counts.max())
            for row, count in enumerate(counts):
                np.testing.assert_allclose(answer[3][row, :count], alone[row, :count], rtol=1e-5, atol=1e-6)
    headless, headless_config = _fast_run(tmp_path / "headless", *CHEAP)
    plain = InferenceServer(str(headless.root), to_toml(headless_config), device="cpu", max_batch=8)
    assert not plain.has_action_values()
    with pytest.raises(Exception, match="no action-value head"):
        asyncio.run(plain.evaluate_legal(*requests[0][0], action_values=True))


# --- the search players -------------------------------------------------------------------------------


def test_a_search_player_plays_the_move_only_the_heads_values_explain() -> None:
    board = chess.Board()
    model = zeroed_model()
    best = _head_choice(model, board)
    assert best != _plain_choice(board)
    reading = _network(model, *PUCT_READS)
    with parse_player("search:1", network=reading) as agent:
        assert isinstance(agent, SearchAgent)
        [choice] = agent.choose([board])
        assert choice.move.uci() == best
        assert agent._search is not None
        _assert_tree_holds_the_head(agent._search, 0, reading.evaluator)
    with parse_player("search:1", network=_network(model, "search.algorithm=puct")) as agent:
        assert agent.choose([board])[0].move.uci() == _plain_choice(board)


def test_a_search_players_fpu_and_unvisited_keys_replace_the_runs_settings() -> None:
    # A checkpoint from another run searches with the settings it carries, so a match between two settings of
    # one network names them in the players (issue 68's equal-node matches played the same player twice before).
    board = chess.Board()
    model = zeroed_model()
    plain = _network(model, "search.algorithm=puct")  # its run reads no head: fpu_mode "reduction"
    with parse_player("search:1,fpu=action_value", network=plain) as agent:
        assert isinstance(agent, SearchAgent) and agent.search_config.fpu_mode == "action_value"
        assert agent.choose([board])[0].move.uci() == _head_choice(model, board)
        assert "fpu=action_value" in agent.name
    reading = _network(model, *PUCT_READS)
    with parse_player("search:1,fpu=reduction", network=reading) as agent:
        assert agent.choose([board])[0].move.uci() == _plain_choice(board)
    with parse_player("gumbel:8,unvisited=action_value", network=plain) as agent:
        assert isinstance(agent, SearchAgent) and agent.search_config.gumbel_unvisited == "action_value"
        agent.choose([board])
        assert agent._search is not None and agent._search.reads_action_values
    with pytest.raises(UserError, match=r"option fpu='first' must be one of reduction, absolute, action_value"):
        parse_player("search:1,fpu=first", network=plain)


@pytest.mark.parametrize("reads", [PUCT_READS, GUMBEL_READS], ids=["puct", "gumbel"])
def test_a_search_player_asks_for_the_values_only_where_its_settings_read_them(reads: tuple[str, ...]) -> None:
    model = zeroed_model()
    for overrides, wanted in ((reads, True), (reads[:1], False)):
        network = _network(model, *overrides)
        asked = spy_legal_passes(network.evaluator)
        with parse_player("search:8", network=network) as agent:
            assert isinstance(agent, SearchAgent)
            agent.choose([chess.Board(), chess.Board("4k3/8/8/3q4/8/8/3R4/4K3 w - - 0 1")])
            assert agent._search is not None and agent._search.reads_action_values == wanted
            assert asked and set(asked) == {wanted}
            if wanted:
                _assert_tree_holds_the_head(agent._search, 1, network.evaluator)


def test_a_search_player_without_the_head_warns_once_and_searches_as_before(
        capsys: pytest.CaptureFixture[str]) -> None:
    board = chess.Board()
    network = _network(zeroed_model(head=False), *PUCT_READS)
    asked = spy_legal_passes(network.evaluator)
    with parse_player("search:1", network=network) as agent:
        for _ in range(2):
            assert agent.choose([board])[0].move.uci() == _plain_choice(board)
    err = [line for line in capsys.readouterr().err.splitlines() if "action-value head" in line]
    assert len(err) == 1 and err[0].startswith("warning: search:1@zeroed: search.fpu_mode = 'action_value'")
    assert MISSING in err[0] and asked and not any(asked)


# --- the UCI engine -------------------------------------------------------------------------------------


def _engine_run(path: Path, model: torch.nn.Module, *overrides: str) -> RunDir:
    """A run whose config holds ``overrides`` (the engine's search settings) and whose checkpoint is ``model``."""
    head = [HEAD] if model_has_head(model) else []
    run, config = RunDir.create_or_open(path, TINY, [*head, *overrides])
    assert isinstance(config, Config)
    save_checkpoint(run, model, None, 1, config)
    return run


@pytest.fixture(scope="module")
def zeroed() -> torch.nn.Module:
    return zeroed_model()


@pytest.mark.slow  # two engine processes
def test_the_engine_through_python_chess_plays_the_move_only_the_heads_values_explain(
        tmp_path: Path, zeroed: torch.nn.Module) -> None:
    board = chess.Board()
    best = _head_choice(zeroed, board)
    assert best != _plain_choice(board)
    for name, overrides, expected in (("reads", PUCT_READS, best),
                                      ("plain", ("search.algorithm=puct",), _plain_choice(board))):
        run = _engine_run(tmp_path / name, zeroed, *overrides)
        command = [sys.executable, "-m", "alphazero", "uci", "--run", str(run.root), "--device", "cpu",
                   "--threads", "1"]
        with chess.engine.SimpleEngine.popen_uci(command, cwd=ROOT, env=repo_env(), timeout=60) as engine:
            engine.configure({"Precision": "float32"})
            result = engine.play(board, chess.engine.Limit(nodes=1), info=chess.engine.INFO_ALL)
            assert result.move is not None and result.move.uci() == expected, name
            engine.quit()


def test_the_engine_backs_up_the_heads_values_only_where_its_settings_read_them(
        tmp_path: Path, zeroed: torch.nn.Module, monkeypatch: pytest.MonkeyPatch) -> None:
    fen = chess.STARTING_FEN
    for name, overrides, wanted in (("reads", PUCT_READS, True), ("gumbel", GUMBEL_READS, True),
                                    ("plain", ("search.algorithm=puct",), False)):
        engine, out, spies = engine_with_spies(_engine_run(tmp_path / name, zeroed, *overrides), monkeypatch)
        go_nodes(engine, fen, 16)
        assert out.getvalue().splitlines()[-1].startswith("bestmove "), name
        search = engine._search
        assert search is not None and search.reads_action_values == wanted
        [asked] = spies
        assert asked and set(asked) == {wanted}, name
        if wanted:
            network = engine._network
            assert network is not None
            _assert_tree_holds_the_head(search, 0, network.evaluator)
        assert "action-value head" not in out.getvalue()
        engine.run()  # its input is empty: it stops at once and closes its network thread


def test_the_engine_without_the_head_says_so_in_one_info_string_and_searches(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = _engine_run(tmp_path / "run", zeroed_model(head=False), *PUCT_READS)
    engine, out, spies = engine_with_spies(run, monkeypatch)
    for _ in range(2):
        go_nodes(engine, chess.STARTING_FEN, 1)
    lines = out.getvalue().splitlines()
    said = [line for line in lines if "action-value head" in line]
    assert len(said) == 1 and said[0].startswith("info string warning: search.fpu_mode = 'action_value' reads")
    assert MISSING in said[0]
    assert [line.split()[1] for line in lines if line.startswith("bestmove")] == [_plain_choice(chess.Board())] * 2
    [asked] = spies
    assert asked and not any(asked)
    engine.run()
