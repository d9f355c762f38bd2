"""Self-play on a local Ray: shards and PGN that the learner and python-chess accept."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import chess
import chess.pgn
import numpy as np
import pytest
import torch

from alphazero import cli
from alphazero.checkpoint import save_checkpoint
from alphazero.config import get_preset
from alphazero.moves import legal_move_indices
from alphazero.network import AlphaZeroNet
from alphazero.rundir import RunDir
from alphazero.shards import list_shards, read_shard

ray = pytest.importorskip("ray")

FAST = ["search.simulations=8", "search.ply_limit=40", "selfplay.games_per_actor=2", "selfplay.shard_games=1",
        "selfplay.weights_poll_seconds=0.1"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, namespace="alphazero", logging_level="ERROR")
    yield
    ray.shutdown()


def fast_run(path: Path, *extra: str) -> tuple[RunDir, object]:
    return RunDir.create_or_open(path, get_preset("tiny"), [*FAST, *extra])


def check_shard_invariants(path: Path) -> None:
    shard = read_shard(path)
    assert shard.planes.shape == (len(shard), 112) and shard.scalars.shape == (len(shard), 7)
    for game_number, game in enumerate(shard.games):
        rows = np.flatnonzero(shard.game == game_number)
        board = chess.Board(game["start_fen"])
        for row, uci in zip(rows, game["moves"]):
            assert shard.ply[row] == board.ply()
            start, end = shard.policy_offsets[row], shard.policy_offsets[row + 1]
            # The visit distribution covers exactly the legal moves and sums to 1.
            assert sorted(shard.policy_indices[start:end]) == sorted(legal_move_indices(board))
            assert shard.policy_probs[start:end].sum() == pytest.approx(1.0, abs=1e-5)
            board.push_uci(uci)
        results = shard.results[rows]
        assert set(results.tolist()) <= {-1, 0, 1}
        if game["winner"] is None:
            assert not results.any()
        else:
            assert np.all(results[:-1] == -results[1:])  # alternate with the mover
            assert results[-1] == 1 or game["termination"] == "resignation"


def test_selfplay_command_writes_shards_and_pgn(local_ray, tmp_path, capsys):
    args = ["selfplay", "--run", str(tmp_path / "run"), "--actors", "2", "--games", "4", "--quiet"]
    assert cli.main(args + [item for pair in (("--set", o) for o in FAST) for item in pair]) == 0
    assert "freshly initialised weights" in capsys.readouterr().out
    run = RunDir(tmp_path / "run")
    shards = list_shards(run.selfplay)
    assert len(shards) >= 4
    for path in shards:
        check_shard_invariants(path)
    pgn_files = sorted(run.games.glob("*.pgn"))
    assert len(pgn_files) == len(shards)
    games = [game for path in shards for game in read_shard(path).games]
    for path, game_record in zip(pgn_files, games):
        game = chess.pgn.read_game(io.StringIO(path.read_text()))
        assert game is not None and not game.errors
        board = game.end().board()
        assert game.headers["Result"] in ("1-0", "0-1", "1/2-1/2")
        if game.headers["Reason"] not in ("ply_limit", "resignation"):
            assert board.outcome(claim_draw=True).result() == game.headers["Result"]
    assert list((run.tb / "selfplay").iterdir())


def test_new_checkpoint_is_picked_up_mid_run(local_ray, tmp_path):
    from selfplay.driver import run_selfplay

    run, config = fast_run(tmp_path / "run")
    written = []

    def publish(totals):
        if totals.games >= 2 and not written:
            model = AlphaZeroNet(config.network)
            save_checkpoint(run, model, torch.optim.SGD(model.parameters(), lr=0.1), 77, config)
            written.append(totals.games)

    run_selfplay(run, config, actors=1, games=10, progress=False, chunk_seconds=0.5, on_update=publish)
    steps = [game["weights_step"] for path in list_shards(run.selfplay) for game in read_shard(path).games]
    assert written and -1 in steps and 77 in steps
    assert steps.index(77) > steps.index(-1)  # the newer weights came later


def test_a_killed_actor_costs_no_partial_shard(local_ray, tmp_path):
    from selfplay.driver import actor_name_prefix, run_selfplay

    run, config = fast_run(tmp_path / "run")
    killed = []

    def kill_one(totals):
        if totals.games >= 1 and not killed:
            ray.kill(ray.get_actor(f"{actor_name_prefix(run)}0", namespace="alphazero"), no_restart=False)
            killed.append(True)

    totals = run_selfplay(run, config, actors=2, games=8, progress=False, chunk_seconds=0.5, on_update=kill_one)
    assert killed and totals.lost_calls >= 1 and totals.games >= 8
    for path in list_shards(run.selfplay):
        check_shard_invariants(path)  # every complete file is a whole shard


def test_inference_server_path_plays_the_same_kind_of_games(local_ray, tmp_path):
    from selfplay.driver import _start_actors

    run, config = fast_run(tmp_path / "run", "selfplay.inference=server", "selfplay.device=cpu")
    # One worker and one server: the test's Ray has two CPUs.
    handles, servers = _start_actors(run, config, actors=1, gpus=0, inference="server", servers_wanted=1, quota=3)
    try:
        for _ in range(40):
            stats = ray.get([h.play.remote(0.5) for h in handles])
            if sum(len(s.shards) for s in stats) and all(ray.get(h.idle.remote()) for h in handles):
                break
        served = ray.get(servers[0].stats.remote())
        assert served["passes"] > 0 and served["positions"] >= served["passes"]
    finally:
        for handle in [*handles, *servers]:
            ray.kill(handle)
    for path in list_shards(run.selfplay):
        check_shard_invariants(path)


def test_unknown_preset_is_refused_by_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["selfplay", "--run", str(tmp_path / "run"), "--preset", "huge"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'huge'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--address", "127.0.0.1:1"], "cannot reach the Ray cluster at 127.0.0.1:1"),
        (["--address", "nonsense"], "a Ray address is HOST:PORT"),
        (["--set", "search.simulations=zero"], "search.simulations"),
        (["--set", "search.simulation=5"], "search.simulation"),
    ],
)
def test_bad_arguments_give_one_line_errors(tmp_path, capsys, args, message):
    assert cli.main(["selfplay", "--run", str(tmp_path / "run"), "--games", "1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_unwritable_run_directory_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    assert cli.main(["selfplay", "--run", str(blocker / "run"), "--games", "1"]) == 2
    assert "run directory" in capsys.readouterr().err


def test_corrupt_checkpoint_is_a_clear_error(tmp_path, capsys):
    run, _ = fast_run(tmp_path / "run")
    (run.checkpoints / "step_000000010.pt").write_bytes(b"garbage")
    (run.checkpoints / "LATEST").write_text("step_000000010.pt")
    assert cli.main(["selfplay", "--run", str(run.root), "--games", "1"]) == 2
    assert "corrupt" in capsys.readouterr().err


def test_worker_without_ray_measures_false_resignations(tmp_path):
    from alphazero.config import to_toml
    from selfplay.worker import SelfPlayWorker

    # A threshold of +0.5 puts every root value below it: each game "would resign"
    # at once, and in these played-through games no side may actually resign.
    run, config = fast_run(tmp_path / "run", "search.resign_disabled_fraction=1.0", "search.resign_threshold=0.5",
                           "search.resign_consecutive=1")
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=3)
    stats = worker.play(120)
    worker.flush()
    assert worker.idle() and stats.games == 3
    games = [game for path in list_shards(run.selfplay) for game in read_shard(path).games]
    assert len(games) == 3
    assert stats.resigned == 0 and stats.played_through == 3 and stats.would_have_resigned == 3
    opponent = {"white": "black", "black": "white"}
    expected = sum(game["winner"] != opponent[game["would_resign_side"]] for game in games)
    assert stats.false_resignations == expected
    assert all(game["would_resign_ply"] in (0, 1) for game in games)


def _worker(run, config, *, max_games: int, seed: int = 1):
    from alphazero.config import to_toml
    from selfplay.worker import SelfPlayWorker

    return SelfPlayWorker(str(run.root), to_toml(config), f"w{seed}", seed=seed, max_games=max_games)


def _play_out(worker) -> None:
    for _ in range(200):
        if worker.idle():
            break
        worker.play(0.5)
    worker.flush()


def _shard_kind(run) -> tuple:
    """What a shard holds, without the values: its arrays' dtypes and trailing shapes, its games' keys."""
    shards = [read_shard(path) for path in list_shards(run.selfplay)]
    arrays = {name: (value.dtype, value.shape[1:]) for name, value in vars(shards[0]).items()
              if isinstance(value, np.ndarray)}
    keys = {key for shard in shards for game in shard.games for key in game}
    return arrays, keys, sum(len(shard.games) for shard in shards)


@pytest.mark.parametrize("network", ["thread", "queued"])
def test_two_lanes_keep_one_batch_in_the_network_while_the_other_is_searched(tmp_path, network):
    # "thread": the CPU's overlap (the network in a thread); "queued": the CUDA
    # path's order (submit_legal, then wait), computed at once on the CPU.
    single_run, config = fast_run(tmp_path / "single")
    _play_out(_worker(single_run, config, max_games=4))
    run, config = fast_run(tmp_path / "double", "selfplay.games_per_actor=4", "selfplay.overlap=on")
    worker = _worker(run, config, max_games=4)
    assert [lane.search.games for lane in worker.lanes] == [2, 2]
    real = worker.evaluator.evaluate_legal
    seen_both_in_flight = []

    def evaluate_legal(*arrays, lane):
        if lane == 0 and not seen_both_in_flight:
            # The actor searches lane 1 and sends its leaves while lane 0's are in the network.
            deadline = time.monotonic() + 60
            while worker.lanes[1].waiting is None and time.monotonic() < deadline:
                time.sleep(0.001)
            seen_both_in_flight.append(worker.lanes[1].waiting is not None)
        return real(*arrays, lane=lane)

    if network == "thread":
        assert worker.pool is not None
        worker.evaluator.evaluate_legal = evaluate_legal
    else:
        worker.pool = None
    stats = worker.play(0.5)
    assert all(lane.waiting is None for lane in worker.lanes)  # play() returns with nothing in flight
    assert stats.batches > 0
    _play_out(worker)
    if network == "thread":
        assert seen_both_in_flight == [True]
    for path in list_shards(run.selfplay):
        check_shard_invariants(path)
    assert _shard_kind(run) == _shard_kind(single_run)
    assert _shard_kind(run)[2] == 4


def test_inference_server_merges_waiting_requests_into_one_pass(tmp_path):
    import asyncio

    from alphazero.config import to_toml
    from selfplay.inference import InferenceServer

    run, config = fast_run(tmp_path / "run")
    server = InferenceServer(str(run.root), to_toml(config), device="cpu", max_batch=8, wait_ms=50)
    rng = np.random.default_rng(0)
    requests = []
    for rows, width in ((3, 20), (3, 31), (2, 7)):
        planes = rng.integers(0, 2**63, size=(rows, 112), dtype=np.uint64)
        scalars = rng.integers(0, 50, size=(rows, 7)).astype(np.float32)
        counts = rng.integers(1, width + 1, size=rows).astype(np.int32)
        indices = rng.integers(0, 4672, size=(rows, width)).astype(np.int32)
        requests.append((planes, scalars, indices, counts))

    async def all_at_once():
        return await asyncio.gather(*(server.evaluate_legal(*request) for request in requests))

    answers = asyncio.run(all_at_once())
    assert server.stats()["passes"] == 1 and server.stats()["positions"] == 8
    for (planes, scalars, indices, counts), (legal, values, step) in zip(requests, answers):
        alone, alone_values = server.evaluator.evaluate_legal(planes, scalars, indices, counts)
        assert legal.shape == (len(planes), counts.max()) and step == -1
        for row, count in enumerate(counts):
            np.testing.assert_allclose(legal[row, :count], alone[row, :count], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(values, alone_values, rtol=1e-5, atol=1e-6)


def test_gpus_pick_the_gpu_fields_for_actor_count_and_games_per_actor():
    import argparse
    import os

    from selfplay.cli import actor_count, overrides_from

    cores = os.cpu_count() or 1
    assert actor_count(None, 0) == cores
    assert actor_count(None, 0, gpus=1, gpu_configured=0) == max(cores - 1, 1)  # a core feeds the GPU
    assert actor_count(None, 3, gpus=1, gpu_configured=15) == 15
    assert actor_count(4, 3, gpus=1, gpu_configured=15) == 4  # --actors wins
    flags = argparse.Namespace(games_per_actor=512, sims=None, inference=None, gpus=1.0)
    assert overrides_from(flags) == ["selfplay.gpu_games_per_actor=512"]
    flags.gpus = 0.0
    assert overrides_from(flags) == ["selfplay.games_per_actor=512"]


@pytest.mark.slow
def test_bench_selfplay_with_an_inference_server_on_the_cpu(local_ray, capsys):
    args = ["bench", "selfplay", "--inference", "server", "--seconds", "1",
            *(item for pair in (("--set", o) for o in FAST) for item in pair)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "2 games each (2 lanes)" in out and "server inference on the CPU" in out
    assert re.search(r"average batch [\d.]+ per request, [\d.]+ per server pass", out)
    assert "GPU busy (CUDA events around each pass): -" in out
    assert re.search(r"at batch \d+: [\d.]+k? evaluations/s; self-play reaches [\d.]+x of it \(all actors", out)
