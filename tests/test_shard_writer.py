"""The self-play actor's shard writer thread (selfplay.shard_writer): off the search thread, in order, bounded,
its errors raised on the next call, and nothing lost at a stop."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import selfplay.records as records
import selfplay.sink as sink
from alphazero.config import Config, to_toml
from alphazero.store.rundir import RunDir
from alphazero.store.shards import list_shards, read_shard
from selfplay.records import GameWriter, ShardFile
from selfplay.shard_writer import ShardWriter
from selfplay.worker import SelfPlayWorker
from tests.helpers import fast_run, game_record

Built = list[tuple[list[str], int]]  # each shard built: its games' ids, and the thread that built it
WAIT_S = 60.0  # bounds a hang only: every wait below ends on an event


def _disk_full() -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "run/selfplay/.x.npz.tmp")


class HeldOutput:
    """An output in memory whose put() waits for ``release``, noting who called it and the shards' order."""

    def __init__(self) -> None:
        self.arrived = threading.Event()  # set by the first put()
        self.release = threading.Event()
        self.release.set()
        self.fail: OSError | None = None  # raised by put() while set
        self.names: list[str] = []
        self.threads: set[int] = set()
        self._stored: list[str] = []

    def put(self, shard: ShardFile) -> None:
        self.threads.add(threading.get_ident())
        self.arrived.set()
        assert self.release.wait(WAIT_S)
        if self.fail is not None:
            raise self.fail
        self.names.append(shard.name)
        self._stored.append(shard.name)

    def settle(self, wait: bool = False) -> list[str]:
        stored, self._stored = self._stored, []
        return stored


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Built:
    """Each shard built: its games' ids and the thread that built it (PGN, validation, compression)."""
    seen: Built = []
    real = records.build_shard_file

    def build(games: list[dict[str, Any]], *args: Any, **kwargs: Any) -> ShardFile:
        seen.append(([game["game_id"] for game in games], threading.get_ident()))
        return real(games, *args, **kwargs)

    monkeypatch.setattr(records, "build_shard_file", build)
    return seen


def _game(number: int) -> dict[str, Any]:
    return {**game_record(0.1, -0.1, None), "game_id": f"g{number}"}


def _writer(output: HeldOutput, *, shard_games: int = 1, max_games: int = 8, shard_seconds: float = 0.0,
            clock: Any = None) -> ShardWriter:
    games = GameWriter(output.put, "w", shard_games=shard_games, save_pgn=True, shard_seconds=shard_seconds,
                       **({"clock": clock} if clock is not None else {}))
    return ShardWriter(games, output, max_games=max_games)


def test_games_are_built_and_stored_off_the_calling_thread_and_flush_returns_every_shard_in_order(built: Built) -> None:
    output = HeldOutput()
    writer = _writer(output, shard_games=2)
    for number in range(6):
        writer.add(_game(number))
    names = writer.stored(wait=True) + writer.flush()  # flush: the last game, buffered alone
    assert names == output.names and len(names) == 4
    # The first game goes out alone (GameWriter), then pairs, then what the flush found buffered: in order.
    assert [ids for ids, _ in built] == [["g0"], ["g1", "g2"], ["g3", "g4"], ["g5"]]
    writers = {thread for _, thread in built} | output.threads
    assert len(writers) == 1 and threading.get_ident() not in writers
    assert writer.flush() == []


def test_a_full_queue_holds_the_caller_until_the_writer_makes_room(built: Built) -> None:
    output = HeldOutput()
    output.release.clear()
    writer = _writer(output, max_games=2)
    writer.add(_game(0))
    assert output.arrived.wait(WAIT_S)  # the writer holds game 0 in its (slow) store: one of the two places
    writer.add(_game(1))                 # the second place
    handed = threading.Event()

    def third() -> None:
        writer.add(_game(2))
        handed.set()

    adder = threading.Thread(target=third)
    adder.start()
    assert writer.holding.wait(WAIT_S)  # no room: the caller waits (with no bound it would never say so)
    assert not handed.is_set() and output.names == []
    output.release.set()
    adder.join(WAIT_S)
    assert handed.is_set()
    assert writer.flush() == output.names and [ids for ids, _ in built] == [["g0"], ["g1"], ["g2"]]
    assert writer.held_seconds > 0


def test_a_write_error_is_raised_on_the_next_call_and_its_games_are_written_later(built: Built) -> None:
    output = HeldOutput()
    output.fail = _disk_full()
    writer = _writer(output)
    writer.add(_game(0))
    with pytest.raises(OSError) as raised:
        writer.stored(wait=True)
    assert raised.value is output.fail  # the write's own error, so its message (the CLI's line) is today's
    assert writer.stored(wait=True) == []  # raised once
    writer.add(_game(1))
    with pytest.raises(OSError, match="No space left on device"):
        writer.flush()  # the stop's flush tries again, and says so again
    output.fail = None
    assert writer.flush() == output.names and len(output.names) == 1
    assert built[-1][0] == ["g0", "g1"]  # the failed shard's games stayed buffered: none lost


def test_a_stop_with_games_queued_behind_a_slow_disk_loses_none(built: Built) -> None:
    output = HeldOutput()
    output.release.clear()
    writer = _writer(output, shard_games=2)
    for number in range(8):
        writer.add(_game(number))
    assert output.arrived.wait(WAIT_S)  # the first shard is in the store; the other games wait behind it
    flushed: list[list[str]] = []
    stopper = threading.Thread(target=lambda: flushed.append(writer.flush()))
    stopper.start()
    output.release.set()
    stopper.join(WAIT_S)
    assert flushed == [output.names] and len(output.names) == 5  # the last shard: one game, buffered at the stop
    assert [game for ids, _ in built for game in ids] == [f"g{number}" for number in range(8)]


def test_close_writes_the_games_handed_in_and_ends_the_writer_thread(built: Built) -> None:
    output = HeldOutput()
    output.release.clear()
    writer = _writer(output)
    for number in range(3):
        writer.add(_game(number))
    assert output.arrived.wait(WAIT_S)  # game 0 is in the (slow) store, the others queued behind it
    output.release.set()
    assert writer.close() == output.names and len(output.names) == 3  # the queued games went out first
    writers = {thread for _, thread in built}
    assert len(writers) == 1 and not [thread for thread in threading.enumerate() if thread.ident in writers]
    assert writer.close() == []
    with pytest.raises(RuntimeError):
        writer.add(_game(3))


def test_a_shard_due_early_goes_out_when_the_search_thread_ticks(built: Built) -> None:
    now = [0.0]
    output = HeldOutput()
    writer = _writer(output, shard_games=8, shard_seconds=20.0, clock=lambda: now[0])
    writer.add(_game(0))  # the writer's first game goes out at once
    writer.add(_game(1))
    assert len(writer.stored(wait=True)) == 1
    now[0] = 19.0
    writer.tick()
    assert writer.stored(wait=True) == []  # waited 19 s of 20
    now[0] = 20.0
    writer.tick()
    assert len(writer.stored(wait=True)) == 1 and [ids for ids, _ in built] == [["g0"], ["g1"]]


# --- in the actor -------------------------------------------------------------------------------------------


def _worker(tmp_path: Path) -> tuple[RunDir, SelfPlayWorker]:
    run, config = fast_run(tmp_path / "run")  # a shard per game
    assert isinstance(config, Config)
    return run, SelfPlayWorker(str(run.root), to_toml(config), "w", seed=1, max_games=3)


def _play_out(worker: SelfPlayWorker) -> list[str]:
    names: list[str] = []
    for _ in range(400):
        if worker.idle():
            break
        names += worker.play(0.5).shards
    return names + worker.flush()


def test_the_actor_searches_on_one_thread_and_builds_and_stores_its_shards_on_another(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, built: Built) -> None:
    run, worker = _worker(tmp_path)
    searching: set[int] = set()
    storing: set[int] = set()
    receive, store = worker._receive, sink.store_shard_file

    def spied_receive(*args: Any) -> None:  # the batch's backup: the search thread
        searching.add(threading.get_ident())
        receive(*args)

    def spied_store(*args: Any) -> Any:  # the temporary file, its fsync and rename
        storing.add(threading.get_ident())
        return store(*args)

    monkeypatch.setattr(worker, "_receive", spied_receive)
    monkeypatch.setattr(sink, "store_shard_file", spied_store)
    names = _play_out(worker)
    assert searching == {threading.get_ident()}
    writing = storing | {thread for _, thread in built}
    assert len(writing) == 1 and not writing & searching
    assert sorted(names) == sorted(map(str, list_shards(run.selfplay)))
    assert sum(len(read_shard(path).games) for path in list_shards(run.selfplay)) == 3


def test_an_actor_whose_disk_fills_raises_the_os_error_and_keeps_its_games(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    run, worker = _worker(tmp_path)
    full = [True]
    store = sink.store_shard_file

    def store_unless_full(*args: Any) -> Any:
        if full[0]:
            raise _disk_full()
        return store(*args)

    monkeypatch.setattr(sink, "store_shard_file", store_unless_full)
    with pytest.raises(OSError, match="No space left on device"):
        _play_out(worker)  # raised at the end of a play() call, at the latest once every game is played
    full[0] = False
    _play_out(worker)
    assert sum(len(read_shard(path).games) for path in list_shards(run.selfplay)) == 3
