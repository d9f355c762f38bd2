"""Self-play on a local Ray: shards and PGN that the learner and python-chess accept."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import chess
import chess.pgn
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from alphazero.app import cli
from alphazero.chess.pgn import STANDARD_TERMINATIONS
from alphazero.config import apply_overrides
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.shards import list_shards, read_shard
from selfplay.worker import PlayStats, SelfPlayWorker
from tests.helpers import SELFPLAY_FAST, check_shard_invariants, fast_run, game_record, write_games

ray = pytest.importorskip("ray")

@pytest.fixture(scope="module")
def local_ray():
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="alphazero", logging_level="ERROR")
    yield
    ray.shutdown()


def test_selfplay_command_writes_shards_and_pgn(local_ray, tmp_path, capsys):
    args = ["selfplay", "--run", str(tmp_path / "run"), "--actors", "2", "--games", "4", "--quiet"]
    assert cli.main(args + [item for pair in (("--set", o) for o in SELFPLAY_FAST) for item in pair]) == 0
    out = capsys.readouterr().out
    assert "freshly initialised weights" in out
    # Issue 32: what the actors' networks run in, said once each (every actor chooses as a user's does, 'auto',
    # by its own timing: on a loaded machine one may take bf16 and the other float32)
    said = [line.split()[4] for line in out.splitlines() if line.startswith("self-play: the network runs ")]
    assert said and len(said) == len(set(said)) and set(said) <= {"bf16", "float32"}
    run = RunDir(tmp_path / "run")
    shards = list_shards(run.selfplay)
    assert len(shards) >= 4
    for path in shards:
        check_shard_invariants(path)
    pgn_files = sorted(run.games.glob("*.pgn"))
    assert len(pgn_files) == len(shards)
    games = [game for path in shards for game in read_shard(path).games]
    for path, record in zip(pgn_files, games):
        game = chess.pgn.read_game(io.StringIO(path.read_text()))
        assert game is not None and not game.errors
        board = game.end().board()
        assert game.headers["Result"] in ("1-0", "0-1", "1/2-1/2")
        assert game.headers["TerminationDetail"] == record["termination"]
        assert game.headers["Termination"] in STANDARD_TERMINATIONS
        if game.headers["TerminationDetail"] not in ("ply_limit", "resignation"):
            assert board.outcome(claim_draw=True).result() == game.headers["Result"]
    assert list((run.tb / "selfplay").iterdir())


@pytest.mark.parametrize(
    ("termination", "result", "standard"),
    [("checkmate", "1-0", "normal"), ("fifty_moves", "1/2-1/2", "normal"),
     ("threefold_repetition", "1/2-1/2", "normal"), ("resignation", "0-1", "normal"),
     ("ply_limit", "1/2-1/2", "adjudication")],
)
def test_pgn_tags_say_how_a_game_ended_as_match_games_do(termination, result, standard):
    from eval.match import GameRecord
    from selfplay.records import game_to_pgn

    record = {"start_fen": chess.STARTING_FEN, "moves": ["e2e4"], "result": result, "termination": termination,
              "plies": 1, "weights_step": 3}
    selfplay_game = chess.pgn.read_game(io.StringIO(game_to_pgn(record)))
    match_game = GameRecord("m", 1, "start", 0, "a", "b", True, result, termination, ["e2e4"], [None], "2026-01-01",
                            "2026-01-01").to_pgn()
    for game in (selfplay_game, match_game):
        assert game.headers["Termination"] == standard  # a value the PGN standard defines
        assert game.headers["TerminationDetail"] == termination  # the one custom tag, in both
        assert "Reason" not in game.headers


def test_new_checkpoint_is_picked_up_mid_run(local_ray, tmp_path):
    from selfplay.driver import run_selfplay

    run, config = fast_run(tmp_path / "run")
    written, stop = [], threading.Event()

    def steps_on_disk():
        return [game["weights_step"] for path in list_shards(run.selfplay) for game in read_shard(path).games]

    def publish(totals):
        if totals.games >= 2 and not written:
            model = AlphaZeroNet(config.network)
            save_checkpoint(run, model, torch.optim.SGD(model.parameters(), lr=0.1), 77, config)
            written.append(totals.games)
        elif written and 77 in steps_on_disk():
            stop.set()  # the event this test waits for, however fast the machine plays

    # The game bound only stops a run whose actor never picks the checkpoint up.
    run_selfplay(run, config, actors=1, games=200, progress=False, chunk_seconds=0.5, on_update=publish, stop=stop)
    steps = steps_on_disk()
    assert written and -1 in steps and 77 in steps
    assert steps.index(77) > steps.index(-1)  # the newer weights came later


MID_CALL_MARKER = "actor0-waits-mid-call"
WOKE_MARKER = "actor0-woke-up"


class StopsMidCall(SelfPlayWorker):
    """A self-play worker whose first actor, once per run, stops inside a play() call to be killed there.

    It finishes a game (a shard is written), then, with games still in flight,
    claims the marker file beside the run directory and waits. The restarted
    actor finds the marker taken and plays on, so the test's kill provably
    lands mid-call, whatever the game lengths and timings.
    """

    def _collect(self, stats: PlayStats, lane: Any) -> None:
        super()._collect(stats, lane)
        if not (self.name.startswith("actor0-") and stats.games and self.search.searching()):
            return
        try:
            (self.run.root.parent / MID_CALL_MARKER).open("x").close()
        except FileExistsError:
            return  # the restarted actor: play on
        time.sleep(300)  # the test kills this process as soon as it sees the marker
        (self.run.root.parent / WOKE_MARKER).touch()  # never reached when the kill landed here


def test_a_killed_actor_costs_no_partial_shard(local_ray, tmp_path, monkeypatch):
    from selfplay import driver, fleet

    monkeypatch.setattr(fleet, "SelfPlayWorker", StopsMidCall)
    run, config = fast_run(tmp_path / "run")
    killed = []

    def kill_one(totals):
        if (tmp_path / MID_CALL_MARKER).exists() and not killed:
            ray.kill(ray.get_actor(f"{fleet.actor_name_prefix(run)}0", namespace="alphazero"), no_restart=False)
            killed.append(True)

    totals = driver.run_selfplay(run, config, actors=2, games=8, progress=False, chunk_seconds=0.5,
                                 on_update=kill_one)
    assert killed and not (tmp_path / WOKE_MARKER).exists()  # the kill landed inside play()
    assert totals.lost_calls >= 1 and totals.games >= 8
    for path in list_shards(run.selfplay):
        check_shard_invariants(path)  # every complete file is a whole shard


def test_a_ctrl_c_whose_interrupt_is_swallowed_on_the_way_still_stops_selfplay(local_ray, tmp_path, monkeypatch,
                                                                              capsys, ctrl_c_heard):
    # Under load, Ctrl-C's KeyboardInterrupt raised inside Ray's code while the actors started was lost, and the
    # command played on (its stacks: the play loop, 90 s after the signal). The driver remembers the signal and
    # stops at its next look, as on Ctrl-C.
    from selfplay import driver
    from selfplay import fleet as fleet_module

    run, config = fast_run(tmp_path / "run")
    start = fleet_module.SelfPlayFleet.start

    def start_and_swallow(self):
        started = start(self)
        try:
            signal.raise_signal(signal.SIGINT)
        except KeyboardInterrupt:
            pass  # as code between the signal and the driver once did
        return started

    monkeypatch.setattr(fleet_module.SelfPlayFleet, "start", start_and_swallow)
    driver.run_selfplay(run, config, actors=1, minutes=3, progress=False, chunk_seconds=0.5)
    assert "self-play: stopping; writing the finished games" in capsys.readouterr().out


def test_inference_server_path_plays_the_same_kind_of_games(local_ray, tmp_path):
    from selfplay.fleet import SelfPlayFleet

    run, config = fast_run(tmp_path / "run", "selfplay.inference=server", "selfplay.device=cpu")
    # One worker and one server: the test's Ray has two CPUs.
    with SelfPlayFleet(run, config, actors=1, inference="server", quota=3) as fleet:
        handles, servers = fleet.actors, fleet.servers
        assert len(servers) == 1
        for _ in range(40):
            stats = ray.get([h.play.remote(0.5) for h in handles])
            if sum(len(s.shards) for s in stats) and all(ray.get(h.idle.remote()) for h in handles):
                break
        served = ray.get(servers[0].stats.remote())
        assert served["passes"] > 0 and served["positions"] >= served["passes"]
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
    run, config = fast_run(tmp_path / "run", "search.resign_mode=fixed", "search.resign_disabled_fraction=1.0",
                           "search.resign_threshold=0.5", "search.resign_consecutive=1")
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=3)
    stats = worker.play(120)
    worker.flush(last=True)  # the stop's: the writer's thread ends with it
    assert worker.idle() and stats.games == 3
    assert not [t for t in threading.enumerate() if t.name.startswith(f"shard-writer-{worker.writer.writer}")]
    games = [game for path in list_shards(run.selfplay) for game in read_shard(path).games]
    assert len(games) == 3
    assert stats.resigned == 0 and stats.played_through == 3 and stats.would_have_resigned == 3
    opponent = {"white": "black", "black": "white"}
    expected = sum(game["winner"] != opponent[game["would_resign_side"]] for game in games)
    assert stats.false_resignations == expected
    assert all(game["would_resign_ply"] in (0, 1) for game in games)
    # What the learner and the calibration read: a stable id, the threshold, each side's value.
    assert len({game["game_id"] for game in games}) == 3
    assert all(game["resign_threshold"] == 0.5 and game["resign_consecutive"] == 1 for game in games)
    assert all(set(game["resign_values"]) == {"white", "black"} for game in games)
    assert all(game["resign_values"][game["would_resign_side"]] < 0.5 for game in games)


def test_the_live_line_fits_an_80_column_terminal():
    from selfplay.driver import Totals

    a_day_ago = time.monotonic() - 86_400
    totals = Totals(started=a_day_ago, games=123_456, moves=98_765_432, evaluations=10**10, batches=10**8,
                    actor_steps={"0": 1_234_000}, results={"white": 40_000, "draw": 43_456, "black": 40_000})
    full = totals.line(256, 256)
    assert len(full) > 80 and "115.7k evals/s" in full and "batch 100.0" in full  # everything, given room
    line = totals.line(256, 256, width=80)
    assert len(line) <= 80
    assert line.startswith("self-play 123,456 games | 98.8M positions (1,143/s) | weights step 1,234,000")


def _call(games: int, draws: int, termination: str, ended_by: int) -> PlayStats:
    decided = games - draws
    return PlayStats(games=games, results={"white": decided // 2, "draw": draws, "black": decided - decided // 2},
                     terminations={termination: ended_by, "checkmate": decided})


def test_self_play_that_collapses_into_repetition_draws_is_said_once():
    """Issue 79's PUCT arms drew 99% of their games by repetition within minutes and nothing said so."""
    from selfplay.totals import RepetitionWatch

    repetition = chess.Termination.THREEFOLD_REPETITION.name.lower()  # the worker's name is python-chess's
    watch = RepetitionWatch(games=1_000)
    assert watch.add(_call(64, 6, repetition, 6)) is None  # a healthy start: 9% draws
    for _ in range(15):  # 960 games of the collapse beside 64 healthy ones: not yet 95% drawn
        assert watch.add(_call(64, 64, repetition, 60)) is None
    warning = watch.add(_call(64, 64, repetition, 60))  # the healthy call dropped: 1,024 games, all drawn
    assert warning is not None
    assert "100% of the last 1,024 games were draws, 94% by repetition" in warning
    assert "search.algorithm=gumbel" in warning
    assert watch.add(_call(64, 64, repetition, 64)) is None  # said once


def test_drawn_self_play_that_does_not_repeat_is_not_a_collapse():
    from selfplay.totals import RepetitionWatch

    watch = RepetitionWatch(games=1_000)
    for detail in ("insufficient_material", "fifty_moves", "ply_limit") * 10:  # strong play draws too
        assert watch.add(_call(64, 64, detail, 64)) is None
    repetition = chess.Termination.THREEFOLD_REPETITION.name.lower()
    watch = RepetitionWatch(games=1_000)
    for _ in range(30):  # repetitions, but 90% drawn: decisive games still teach the value
        assert watch.add(_call(64, 58, repetition, 58)) is None


def test_the_live_line_shows_the_weights_the_actors_play_after_a_rewound_learner():
    from selfplay.driver import Totals

    assert "fresh weights" in Totals().line(2, 2)
    totals = Totals(start_step=1_200)
    assert "weights step 1,200" in totals.line(2, 2)  # before any actor reports: the newest checkpoint's
    for worker, step in (("0", 1_200), ("1", 1_200), ("0", 800)):  # learn --from-checkpoint 800: actor 0 follows
        totals.add(PlayStats(worker=worker, weights_step=step))
        last = totals.line(2, 2)
    assert "weights steps 800-1,200" in last
    totals.add(PlayStats(worker="1", weights_step=800))
    assert "weights step 800 " in totals.line(2, 2) + " "  # not the highest step ever seen


def _answer(incarnation: str, host: str, *, games: int, started: int, stored: int) -> PlayStats:
    return PlayStats(incarnation=incarnation, host=host, games=games, games_started=started, games_stored=stored)


def test_the_driver_names_a_lost_actor_its_host_its_games_and_its_restart():
    from ray.exceptions import ActorDiedError

    from selfplay.driver import ActorLosses, Totals

    notes: list[str] = []
    totals = Totals()
    losses = ActorLosses(types.SimpleNamespace(sink=None), totals, notes.append)  # transport 'disk': no sink to ask
    losses.heard(0, _answer("a", "w1 (10.0.0.2)", games=5, started=7, stored=3))
    losses.heard(0, _answer("a", "w1 (10.0.0.2)", games=1, started=8, stored=4))  # 6 finished, 4 stored, 2 playing
    losses.failed(0, ActorDiedError())
    assert (totals.lost_actors, totals.games_lost, totals.finished_lost) == (1, 4, 2)
    assert re.search(r"lost actor 0 on w1 \(10.0.0.2\) \(its process died\): 4 games lost \(2 finished", notes[-1])
    losses.failed(0, ActorDiedError())  # the restart's first call fails too: nothing more was known to be lost
    assert totals.games_lost == 4
    losses.heard(0, _answer("b", "w3 (10.0.0.4)", games=0, started=2, stored=0))
    assert notes[-1].startswith("self-play: actor 0 restarted on w3 (10.0.0.4), ")
    assert totals.lost_text().startswith("1 actor processes lost (and restarted), with 4 games: 2 finished")


def test_an_unreachable_actor_loses_nothing_until_a_restart_answers_for_it():
    from ray.exceptions import ActorUnavailableError

    from selfplay.driver import ActorLosses, Totals

    notes: list[str] = []
    totals = Totals()
    losses = ActorLosses(types.SimpleNamespace(sink=None), totals, notes.append)
    losses.heard(1, _answer("a", "w2 (10.0.0.3)", games=3, started=5, stored=3))
    losses.failed(1, ActorUnavailableError("the link is down", None))
    losses.failed(1, ActorUnavailableError("the link is down", None))
    assert totals.lost_actors == 0 and len(notes) == 1 and "w2 (10.0.0.3) is unreachable" in notes[0]
    losses.heard(1, _answer("a", "w2 (10.0.0.3)", games=1, started=6, stored=4))  # back: the same process
    assert totals.lost_actors == 0
    losses.failed(1, ActorUnavailableError("down again", None))
    losses.heard(1, _answer("b", "w2 (10.0.0.3)", games=0, started=2, stored=0))  # Ray replaced it meanwhile
    assert (totals.lost_actors, totals.games_lost, totals.finished_lost) == (1, 2, 0)
    assert re.search(r"lost actor 1 on w2 .* \(unreachable, then replaced\): 2 games lost .*; Ray restarted it on "
                     r"w2 \(10.0.0.3\)$", notes[-1])


def test_the_sink_counts_each_senders_stored_games_once(tmp_path):
    from selfplay.records import build_shard_file
    from selfplay.sink import ShardSink

    run = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))[0]
    sink = ShardSink(str(run.root))
    shard = build_shard_file([game_record(0.1, -0.1, None), game_record(0.2, -0.2, "white")], "actor0-1")
    sink.write(shard, "a")
    sink.write(shard, "a")  # sent again after a lost acknowledgement: the same file, counted once
    sink.write(build_shard_file([game_record(0.1, -0.1, None)], "actor1-1"), "b")
    assert (sink.games_stored("a"), sink.games_stored("b"), sink.games_stored("c")) == (2, 1, 0)


@pytest.mark.slow
def test_a_local_ray_starts_with_token_authentication_and_without_its_banner():
    """Also: without --address the command starts a Ray of its own, even where RAY_ADDRESS names a cluster (one
    that is gone, here); Ray reads /tmp/ray/ray_current_cluster, which another process's cluster writes (as
    under `pytest -n 2`), the same way."""
    if not hasattr(ray._raylet, "get_authentication_mode"):
        pytest.skip(f"ray {ray.__version__} has no token authentication")
    code = ("from selfplay.driver import connect_ray; import ray; connect_ray(None, 1); "
            "from ray._raylet import AuthenticationMode, get_authentication_mode; "
            "print('token' if get_authentication_mode() == AuthenticationMode.TOKEN else 'no token'); ray.shutdown()")
    repo = Path(__file__).resolve().parents[1]
    env = {name: value for name, value in os.environ.items() if name != "RAY_AUTH_MODE"}  # Ray's own default
    env["RAY_ADDRESS"] = "127.0.0.1:9"  # a cluster no longer there
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(repo), os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-1] == "token"  # the security stays on
    assert "Token authentication" not in done.stdout + done.stderr


def test_the_first_local_ray_token_is_written_whole_and_never_replaced(tmp_path, monkeypatch):
    """Two commands starting their first local Ray at once (two test workers on a fresh machine) keep one
    token: Ray itself writes ~/.ray/auth_token in place, so a cluster's processes could read its rival's."""
    from selfplay.driver import ensure_ray_token

    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / ".ray" / "auth_token"
    ensure_ray_token(path)
    token = path.read_text()
    assert re.fullmatch(r"[0-9a-f]{64}", token) and path.stat().st_mode & 0o777 == 0o600
    ensure_ray_token(path)  # the second command
    assert path.read_text() == token and list(path.parent.iterdir()) == [path]
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # no token wanted: none written
    ensure_ray_token(tmp_path / "other" / "auth_token")
    assert not (tmp_path / "other").exists()


def test_the_calibrated_threshold_reaches_new_games(local_ray, tmp_path):
    from selfplay.driver import run_selfplay

    run, config = fast_run(tmp_path / "run", "search.resign_min_cases=100", "search.resign_disabled_fraction=0")
    # 100 played-through games in which White fell to -0.95 and lost: calibrated, White resigns below -0.01.
    old = write_games(run, [game_record(-0.95, 0.9, "black") for _ in range(100)])
    run_selfplay(run, config, actors=1, games=2, progress=False, chunk_seconds=0.5)
    new_games = [game for path in list_shards(run.selfplay) if path != old for game in read_shard(path).games]
    assert len(new_games) >= 2
    assert all(game["resign_threshold"] == -0.01 and game["resign_enabled"] for game in new_games)
    events = EventAccumulator(str(run.tb / "selfplay"))
    events.Reload()
    assert events.Scalars("resign/threshold")[-1].value == pytest.approx(-0.01)


def test_a_pushed_threshold_applies_to_the_games_started_after_it(tmp_path):
    from alphazero.config import to_toml
    from selfplay.worker import SelfPlayWorker

    run, config = fast_run(tmp_path / "run", "search.resign_disabled_fraction=1.0")
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=3)  # two games start now
    worker.set_resign_threshold(-0.5)  # as the driver pushes it through Ray
    worker.play(120)
    worker.flush()
    thresholds = [game["resign_threshold"] for path in list_shards(run.selfplay) for game in read_shard(path).games]
    assert sorted(thresholds, key=str) == [-0.5, None, None]


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
            *(item for pair in (("--set", o) for o in SELFPLAY_FAST) for item in pair)]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert "2 games each (2 lanes)" in out and "server inference on the CPU" in out
    assert re.search(r"average batch [\d.]+ per request, [\d.]+ per server pass", out)
    assert "GPU busy (the device's own utilisation, sampled): -" in out
    assert re.search(r"at batch \d+: [\d.]+k? evaluations/s; self-play reaches [\d.]+x of it \(all actors", out)


# --- the GPU path's plumbing on the CPU (issue 23) -------------------------------------------------


def test_an_inference_server_sized_from_its_lanes_merges_several_actors_in_one_pass(tmp_path):
    # Issue 23, defect 6: at the GPU presets one lane's request was as large as server_batch_size, so each
    # pass served one actor.
    import asyncio

    from alphazero.config import to_toml
    from alphazero.selfplay_devices import for_gpus
    from selfplay.inference import InferenceServer, server_batch_size

    small = for_gpus(get_preset("small"), 1)
    # A lane's request (half the games, each with its leaves): the old server_batch_size.
    assert small.selfplay.games_per_actor // 2 * small.search.leaves_per_game == 1024
    assert server_batch_size(small, actors=15) == 15 * 2048
    assert server_batch_size(apply_overrides(small, ["selfplay.server_batch_size=4096"]), actors=15) == 4096
    run, config = fast_run(tmp_path / "run", "selfplay.games_per_actor=8")  # lanes of 4 positions
    server = InferenceServer(str(run.root), to_toml(config), device="cpu", wait_ms=50, actors=2)
    assert server.max_batch == 16
    rng = np.random.default_rng(0)
    lanes = [(rng.integers(0, 2**63, size=(4, 112), dtype=np.uint64),
              rng.integers(0, 50, size=(4, 7)).astype(np.float32),
              rng.integers(0, 4672, size=(4, 20)).astype(np.int32), np.full(4, 20, np.int32)) for _ in range(4)]

    async def every_lane_at_once():
        return await asyncio.gather(*(server.evaluate_legal(*lane) for lane in lanes))

    answers = asyncio.run(every_lane_at_once())
    assert server.stats()["passes"] == 1 and server.stats()["positions"] == 16
    assert [legal.shape for legal, _, _ in answers] == [(4, 20)] * 4


def test_workers_and_servers_warm_their_buckets_at_start(tmp_path, monkeypatch):
    # Issue 23, defect 10: a bucket met mid-run was captured or compiled then, stalling the actor.
    from alphazero.config import to_toml
    from alphazero.nn.forward import Evaluator
    from selfplay.inference import InferenceServer

    warmed: list[str] = []
    monkeypatch.setattr(Evaluator, "warm_up", lambda self: warmed.append(self.forward_mode))
    run, config = fast_run(tmp_path / "run")
    _worker(run, config, max_games=2)
    InferenceServer(str(run.root), to_toml(config), device="cpu")
    assert warmed == ["compile", "compile"]  # a CPU compiles its one bucket at start too (selfplay.cpu_forward)


class _FakeActorClass:
    """Stands for ray.remote(cls): records each actor's options and constructor arguments."""

    def __init__(self, cls: type, started: list[tuple[str, dict, tuple, dict]]) -> None:
        self.cls, self.started, self.chosen = cls, started, {}

    def options(self, **options: Any) -> _FakeActorClass:
        chosen = _FakeActorClass(self.cls, self.started)
        chosen.chosen = options
        return chosen

    def remote(self, *args: Any, **kwargs: Any) -> Any:
        self.started.append((self.cls.__name__, self.chosen, args, kwargs))
        return types.SimpleNamespace(name=self.cls.__name__)


@pytest.fixture
def started_actors(monkeypatch) -> list[tuple[str, dict, tuple, dict]]:
    started: list[tuple[str, dict, tuple, dict]] = []
    monkeypatch.setattr(ray, "remote", lambda cls: _FakeActorClass(cls, started))
    return started


def test_a_fractional_gpu_server_asks_ray_for_its_share(tmp_path, started_actors, monkeypatch):
    # Issue 23, defect 8: --gpus 0.5 --inference server asked Ray for a whole GPU and waited for ever
    # (and a local Ray refused 0.5 GPUs outright).
    from selfplay.driver import connect_ray
    from selfplay.fleet import SelfPlayFleet, server_gpus

    run, config = fast_run(tmp_path / "run")
    SelfPlayFleet(run, config, actors=3, gpus=0.5, inference="server").start()
    server = [entry for entry in started_actors if entry[0] == "InferenceServer"]
    assert server[0][1]["num_gpus"] == 0.5 and server[0][3]["actors"] == 3
    assert [server_gpus(g, n) for g, n in ((0.5, 1), (2, 2), (2.5, 2), (0, 1))] == [0.5, 1.0, 1.0, 0.0]
    inits: list[dict] = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kwargs: inits.append(kwargs))
    assert connect_ray(None, num_cpus=2, num_gpus=0.5)
    assert inits[0]["num_gpus"] == 1  # a node's resources are whole numbers


@pytest.mark.parametrize(("gpus", "inference"), [(0, "local"), (1, "server"), (1, "local")])
def test_actors_without_a_gpu_see_none(tmp_path, started_actors, gpus, inference):
    # Issue 23, defect 2: Ray no longer hides the GPUs from actors that reserve none.
    from selfplay.fleet import SelfPlayFleet

    run, config = fast_run(tmp_path / "run")
    SelfPlayFleet(run, config, actors=2, gpus=gpus, inference=inference).start()
    for kind, options, _, _ in started_actors:
        holds_gpu = options.get("num_gpus", 0) > 0
        assert holds_gpu == (gpus > 0 and (kind == "InferenceServer" or inference == "local"))
        hidden = options["runtime_env"]["env_vars"].get("CUDA_VISIBLE_DEVICES")
        assert hidden == (None if holds_gpu else ""), kind
        if kind == "SelfPlayWorker":  # and an actor compiles with one thread, as it runs torch
            assert options["runtime_env"]["env_vars"]["TORCHINDUCTOR_COMPILE_THREADS"] == "1"


@ray.remote
class _Player:
    def __init__(self) -> None:
        self.calls = 0

    def play(self, seconds: float) -> int:
        self.calls += 1
        time.sleep(0.05)
        return self.calls

    def count(self) -> int:
        return self.calls


def test_bench_selfplay_measures_after_the_warm_up(local_ray):
    # Issue 23, defect 9: the server's snapshot was taken before the warm-up, which then counted as work.
    from alphazero.app.bench.selfplay import _measure

    players = [_Player.remote() for _ in range(2)]
    at_snapshot: list[int] = []
    stats, wall = _measure(players, 0.3, lambda: at_snapshot.extend(ray.get([p.count.remote() for p in players])))
    assert at_snapshot == [1, 1]  # each actor's warm-up call had ended, and no measured call had started
    assert min(stats) == 2 and wall >= 0.3  # the warm-up call's stats are not among the measured ones


def test_the_devices_own_busy_share_is_sampled_and_averaged(monkeypatch):
    # Issue 23, defect 9: the busy share came from CUDA events summed over actors, and passed 100%.
    import alphazero.app.bench.selfplay as bench

    monkeypatch.setattr(bench, "SAMPLE_SECONDS", 0.01)
    readings = iter([0.5, 1.0] * 4 + [0.75] * 1000)  # then readings at the mean, should more be taken
    eight_read = threading.Event()

    def read(index: int) -> float:
        value = next(readings)
        if value == 0.75:
            eight_read.set()
        return value

    busy = bench.DeviceBusy(2, read=read)
    busy.start()
    assert eight_read.wait(30)  # four samples of two GPUs taken
    busy.stop()
    assert busy.share() == pytest.approx(0.75) and bench._busy_text(busy, 2) == "75.0%"
    assert bench._busy_text(None, 0) == "-"

    def unreadable(index: int) -> float:
        raise RuntimeError("cannot read GPU 0's utilisation: no nvidia-smi")

    failing = bench.DeviceBusy(1, read=unreadable)
    failing.start()
    failing._thread.join()  # the sampler ends at its first failed reading
    failing.stop()
    assert bench._busy_text(failing, 1) == "unavailable (cannot read GPU 0's utilisation: no nvidia-smi)"



# --- latency: games reach the learner early, actors switch networks mid-game (issue 48) -----------


def test_a_shard_goes_out_with_the_first_game_and_when_its_oldest_game_has_waited():
    from selfplay.records import GameWriter

    now = [0.0]
    sent: list[int] = []
    writer = GameWriter(lambda shard: sent.append(shard.games), "w", shard_games=4, save_pgn=False,
                        shard_seconds=20.0, clock=lambda: now[0])
    writer.add(game_record(0, 0, None))
    assert sent == [1]  # the writer's first game goes out alone: the learner's first data
    writer.add(game_record(0, 0, None))
    now[0] = 19.0
    writer.add(game_record(0, 0, None))
    assert writer.tick() is None and sent == [1]  # the oldest has waited 19 s of 20
    now[0] = 20.0
    assert writer.tick() is not None and sent == [1, 2]
    for _ in range(4):
        writer.add(game_record(0, 0, None))
    assert sent == [1, 2, 4]  # a full shard at once, whatever the clock
    patient = GameWriter(lambda shard: sent.append(shard.games), "p", shard_games=4, shard_seconds=0.0,
                         clock=lambda: now[0])
    patient.add(game_record(0, 0, None))
    patient.add(game_record(0, 0, None))
    now[0] = 1e9
    assert patient.tick() is None and sent == [1, 2, 4, 1]  # shard_seconds 0: only full shards after the first


def test_a_game_that_changes_network_mid_game_records_the_step_of_each_position(tmp_path):
    run, config = fast_run(tmp_path / "run", "search.ply_limit=60", "selfplay.games_per_actor=3",
                           "selfplay.shard_games=8", "selfplay.shard_seconds=0")
    worker = _worker(run, config, max_games=6)
    assert worker.step == -1
    while min(worker.search.game_plies()) < 6:  # every game a few moves in
        worker.play(0.05)
    switched_at = worker.search.game_plies().copy()
    model = AlphaZeroNet(config.network)
    worker.set_weights(9, model.state_dict())  # as the driver pushes a checkpoint, between play() calls
    _play_out(worker)
    games = [(shard, number, game) for path in list_shards(run.selfplay)
             for shard in [read_shard(path)] for number, game in enumerate(shard.games)]
    assert len(games) == 6
    spanning = 0
    for shard, number, game in games:
        rows = np.flatnonzero(shard.game == number)
        steps, plies = shard.weights_steps[rows], shard.ply[rows]
        assert steps[0] == game["weights_step_first"] and steps[-1] == game["weights_step"] == 9
        assert np.all(np.diff(steps) >= 0)  # never back to older weights
        if game["weights_step_first"] == -1:  # one of the three games in flight at the switch
            spanning += 1
            first_new = int(plies[steps == 9].min())
            assert first_new in switched_at.tolist()  # the game's ply when the weights came
            assert np.all(steps[plies < first_new] == -1) and np.all(steps[plies >= first_new] == 9)
        else:
            assert np.all(steps == 9)  # started after the switch
    assert spanning == 3


def test_an_idle_inference_server_takes_what_is_ready_without_waiting_for_a_full_batch(tmp_path):
    import asyncio

    from alphazero.config import to_toml
    from selfplay.inference import InferenceServer

    run, config = fast_run(tmp_path / "run")
    server = InferenceServer(str(run.root), to_toml(config), device="cpu", max_batch=1024)  # selfplay.server_wait_ms
    rng = np.random.default_rng(0)
    request = (rng.integers(0, 2**63, size=(3, 112), dtype=np.uint64), np.zeros((3, 7), np.float32),
               rng.integers(0, 4672, size=(3, 5)).astype(np.int32), np.full(3, 5, np.int32))

    async def one_request():
        answer = asyncio.ensure_future(server.evaluate_legal(*request))
        for _ in range(3):  # the request is queued, then the batcher runs: no timer in between
            await asyncio.sleep(0)
        taken = not server.pending
        return taken, await answer

    taken, (legal, values, _) = asyncio.run(one_request())
    assert taken  # a waiting server would still hold it, for company that may never come
    assert server.stats()["passes"] == 1 and server.stats()["positions"] == 3
    assert legal.shape == (3, 5) and values.shape == (3,)
