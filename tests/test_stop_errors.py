"""Every stop reports what it lost (issue 80): a full disk at the stop's flush names the error, the folder and the
games; a bug's traceback is shown once; a sink write that fails keeps its shard; an actor's OSError is the
machine's, not a bug; a failed weight push shows its traceback once."""

from __future__ import annotations

import errno
import logging
import os
import pickle
import traceback
import types
from pathlib import Path
from typing import Any

import pytest

from alphazero.config import Config, to_toml
from selfplay.records import ShardFile
from selfplay.worker import PlayStats, ShardsNotStored
from tests.helpers import fast_run, game_record

ray = pytest.importorskip("ray")
from ray.exceptions import RayTaskError  # noqa: E402 - after the skip: Ray is optional

FOLDER = "/runs/x/selfplay"


def _disk_full(games: int) -> ShardsNotStored:
    return ShardsNotStored(errno.ENOSPC, os.strerror(errno.ENOSPC), FOLDER, games)


def _average_of_nothing() -> float:
    return sum([]) / len([])  # ZeroDivisionError: the bug a traceback must point at


def _task_error(cause: BaseException, call: str = "SelfPlayWorker.flush") -> Exception:
    """What ray.get raises for an actor's call that raised ``cause``: through pickle, as Ray sends it."""
    try:
        raise cause
    except BaseException:  # noqa: BLE001 - only its traceback is wanted
        trace = traceback.format_exc()
    error = RayTaskError(call, trace, cause, proctitle=f"ray::{call}", pid=1, ip="10.0.0.2")
    return pickle.loads(pickle.dumps(error)).as_instanceof_cause()


def _bug() -> Exception:
    try:
        _average_of_nothing()
    except ZeroDivisionError as error:
        return _task_error(error)
    raise AssertionError("no bug")


class _Ref:
    """A call's answer: a value, or the error ray.get raises."""

    def __init__(self, value: Any = None, error: Exception | None = None) -> None:
        self.value, self.error = value, error


class _Handle:
    """An actor handle whose flush.remote() answers ``ref``."""

    def __init__(self, ref: _Ref) -> None:
        self.flush = types.SimpleNamespace(remote=lambda last: ref)


def _fake_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray's wait (every answer is in) and get (the answer, or its error) without a Ray cluster."""
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: (list(refs), []))

    def get(ref: _Ref, timeout: float | None = None) -> Any:
        if ref.error is not None:
            raise ref.error
        return ref.value

    monkeypatch.setattr(ray, "get", get)


def _losses(notes: list[str]) -> Any:
    from selfplay.driver import ActorLosses, Totals

    totals = Totals()
    return totals, ActorLosses(types.SimpleNamespace(sink=None), totals, notes.append)


# --- the driver's flush at the stop ----------------------------------------------------------------------------


def test_a_full_disk_at_the_stop_says_the_error_the_folder_and_the_games_lost_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from selfplay.driver import flush_actors

    _fake_ray(monkeypatch)
    notes: list[str] = []
    totals, losses = _losses(notes)
    handles = [_Handle(_Ref(error=_task_error(_disk_full(3)))), _Handle(_Ref(value=[f"{FOLDER}/a.npz"])),
               _Handle(_Ref(error=_task_error(_disk_full(4))))]
    flush_actors(handles, totals, losses)
    assert totals.shards == [f"{FOLDER}/a.npz"]
    assert notes == [f"self-play: 2 actors (0, 2) could not store their 7 finished games in {FOLDER} at the stop "
                     f"([Errno 28] No space left on device); they are lost: free space on the disk that holds "
                     f"{FOLDER}, then run again"]
    assert capsys.readouterr().err == ""  # the disk's error, not a bug: no traceback


def test_a_bug_in_the_stops_flush_shows_its_traceback_once_and_counts_each_actors_games(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from selfplay.driver import flush_actors

    _fake_ray(monkeypatch)
    notes: list[str] = []
    totals, losses = _losses(notes)
    for index in (0, 1):  # each finished 5 games and saw 2 stored
        losses.heard(index, PlayStats(incarnation=f"p{index}", host=f"w{index}", games=5, games_started=6,
                                      games_stored=2))
    flush_actors([_Handle(_Ref(error=_bug())), _Handle(_Ref(error=_bug()))], totals, losses)
    err = capsys.readouterr().err
    assert err.count("in _average_of_nothing") == 1  # the traceback, once for the same error
    assert "actor 0's flush at the stop raised an error that is a bug" in err
    assert (totals.lost_actors, totals.finished_lost) == (2, 6)
    assert "(its flush at the stop raised ZeroDivisionError: division by zero, a bug: its traceback is on stderr)" \
        in notes[0] and "3 finished but not stored" in notes[0]
    assert "as actor 0's did" in notes[1]


# --- an actor's errors --------------------------------------------------------------------------------------------


def test_an_actors_os_error_is_the_machines_with_what_to_do_not_a_bug(capsys: pytest.CaptureFixture[str]) -> None:
    from selfplay.driver import actor_failure

    error = actor_failure(_task_error(_disk_full(5), call="SelfPlayWorker.play"))
    assert str(error) == (f"a self-play actor failed with an error of its machine, not of self-play: cannot store 5 "
                          f"finished games in {FOLDER}: [Errno 28] No space left on device; free space on the disk "
                          f"that holds {FOLDER}, then run again")
    unwritable = OSError(errno.EACCES, os.strerror(errno.EACCES), "/runs/x/checkpoints/LATEST")
    text = str(actor_failure(_task_error(unwritable, call="SelfPlayWorker.play")))
    assert "Permission denied" in text and "make /runs/x/checkpoints/LATEST writable" in text
    assert "bug" not in text
    assert capsys.readouterr().err == ""  # no traceback: there is no bug to find


def test_a_worker_whose_disk_fills_says_at_the_stop_how_many_games_it_holds_and_where(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import selfplay.sink as sink
    from selfplay.worker import SelfPlayWorker

    run, config = fast_run(tmp_path / "run", "selfplay.cpu_forward=eager", "selfplay.cpu_precision=float32")
    assert isinstance(config, Config)
    worker = SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=2)

    def full(*args: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as a write() says it: no file name

    monkeypatch.setattr(sink, "store_shard_file", full)
    for number in range(3):
        worker.shard_writer.add({**game_record(0.1, -0.1, None), "game_id": f"g{number}"})
    with pytest.raises(ShardsNotStored) as raised:
        worker.flush()
    assert (raised.value.games, raised.value.folder, raised.value.errno) == (3, str(run.selfplay), errno.ENOSPC)
    assert str(raised.value) == f"cannot store 3 finished games in {run.selfplay}: [Errno 28] No space left on device"
    sent = pickle.loads(pickle.dumps(raised.value))  # as Ray carries it to the driver
    assert (type(sent), sent.games, sent.folder, str(sent)) == (ShardsNotStored, 3, str(run.selfplay),
                                                                str(raised.value))


# --- the sink ------------------------------------------------------------------------------------------------------


class _Sink:
    """A shard sink whose write answers with the errors the test gives, then with the shard's path."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.sent: list[str] = []
        self.write = types.SimpleNamespace(remote=self._write)

    def _write(self, shard: ShardFile, sender: str) -> _Ref:
        self.sent.append(shard.name)
        error = self.errors.pop(0) if self.errors else None
        return _Ref(value=f"{FOLDER}/{shard.name}", error=error)


def test_a_sink_write_that_fails_with_a_bug_keeps_its_shard_for_the_stops_flush(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from selfplay.sink import SinkSender

    _fake_ray(monkeypatch)
    bad_name = ValueError("not a shard file name: 'x'")
    target = _Sink([_task_error(bad_name, "ShardSink.write"), _task_error(bad_name, "ShardSink.write")])
    monkeypatch.setattr(ray, "get_actor", lambda name, namespace: target)
    sender = SinkSender("shardsink:x", window=4)
    shard = ShardFile("1-w-a.npz", b"data", None, 3)
    sender.put(shard)
    with pytest.raises(RayTaskError):
        sender.settle()
    assert (sender.unacknowledged, sender.games_held) == (1, 3)  # held, not dropped
    assert sender.settle() == [] and target.sent == [shard.name]  # not sent again while playing
    with pytest.raises(RayTaskError):
        sender.settle(wait=True)  # the stop sends it once more; it fails again, and stays held
    assert (sender.unacknowledged, sender.games_held) == (1, 3)
    assert sender.settle(wait=True) == [f"{FOLDER}/{shard.name}"]  # stored at last
    assert (sender.unacknowledged, sender.games_held, sender.games_stored) == (0, 0, 3)
    assert target.sent == [shard.name] * 3


def test_a_sink_write_left_unanswered_is_sent_again_through_a_fresh_look_up_and_stored_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    # After a worker's link was down, a write could go unanswered for good (neither stored nor failed), and the
    # actor's play() waited on it for the window's room until the driver gave up on the actor.
    from selfplay.sink import SinkSender

    _fake_ray(monkeypatch)
    unanswered = _Ref(value="never")
    monkeypatch.setattr(ray, "wait", lambda refs, num_returns, timeout: (
        [ref for ref in refs if ref is not unanswered][:num_returns], [ref for ref in refs if ref is unanswered]))
    target = _Sink([])
    first_write = target._write
    calls = iter([unanswered])

    def write(shard: ShardFile, sender: str) -> _Ref:
        first_write(shard, sender)
        return next(calls, None) or _Ref(value=f"{FOLDER}/{shard.name}")

    target.write = types.SimpleNamespace(remote=write)
    looked_up: list[str] = []
    monkeypatch.setattr(ray, "get_actor", lambda name, namespace: looked_up.append(name) or target)
    sender = SinkSender("shardsink:x", window=1, answer_s=0.0)  # unanswered at once: the test's clock
    one, two = ShardFile("1-w-a.npz", b"a", None, 2), ShardFile("2-w-a.npz", b"b", None, 3)
    with caplog.at_level(logging.WARNING, logger="selfplay.sink"):
        sender.put(one)
        sender.put(two)  # waits for room: the first write goes unanswered, is sent again, and is stored
    assert target.sent == [one.name, one.name, two.name] and len(looked_up) == 2
    assert "shard 1-w-a.npz: no answer from the sink in 0 s; sending it again" in caplog.text
    assert sender.settle(wait=True) == [f"{FOLDER}/{one.name}", f"{FOLDER}/{two.name}"]
    assert (sender.unacknowledged, sender.games_stored, sender.resent) == (0, 5, 1)


# --- weight pushes ---------------------------------------------------------------------------------------------------


def test_a_failed_weight_push_shows_its_traceback_the_first_time_and_one_line_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from selfplay import publish

    _fake_ray(monkeypatch)
    monkeypatch.setattr(publish, "connect_ray", lambda address, num_cpus: False)
    publisher = publish.WeightPublisher(tmp_path / "run", None)

    def refused() -> Exception:
        try:
            _average_of_nothing()
        except ZeroDivisionError as error:
            return _task_error(error, "SelfPlayWorker.set_weights")
        raise AssertionError("no bug")

    publisher.pending = [publish.Push(f"actor-{i}", 20, _Ref(error=refused())) for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="selfplay.publish"):
        assert publisher.collect(timeout=0.0) == 0
    assert publisher.failures == [f"actor-{i} did not take the weights of step 20: ZeroDivisionError: division by "
                                  f"zero" for i in range(3)]
    assert caplog.text.count("in _average_of_nothing") == 1  # the traceback, the first time only
    first, *later = [record.getMessage() for record in caplog.records]
    assert first.startswith(publisher.failures[0] + "; its error in full") and "\x1b[" not in first
    assert later == publisher.failures[1:]
