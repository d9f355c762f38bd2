"""Runs self-play on Ray: N actors (and, on GPUs, inference servers) filling a run directory.

Ray moves work and weights; the run directory keeps what matters. How shards
get there is ``selfplay.transport``:

- 'disk': each actor writes complete shards into the run directory itself,
  and polls it for new checkpoints and the resignation threshold. Every node
  must see the run directory (one machine, or shared storage).
- 'ray': the driver's fleet (selfplay.fleet) starts a shard sink (selfplay.sink) pinned to its own
  node, the one with the run directory; actors send it their finished shards
  and wait for its acknowledgements (a bounded window). The driver gives each
  actor its threshold when it starts and its first weights before its first
  play(), loads new checkpoints from the run directory and pushes them (as it
  pushes the threshold), and pushes both again to an actor that restarted.
  Actors never see the run directory, so no node but this one needs it.

A lost actor costs only its games in flight (and, with 'ray', the shards it
had not yet seen acknowledged). Actors restart after a crash (max_restarts),
the sink too; the driver resubmits their work.

Connecting to Ray is selfplay.ray_connect's; what the driver counts (Totals,
ActorLosses) is selfplay.totals'. Both are importable from here too.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FrameType
from typing import Any

from alphazero.config import Config
from alphazero.console import LiveDisplay, clock_text, fit_line
from alphazero.errors import UserError
from alphazero.out_of_memory import is_out_of_memory
from alphazero.selfplay_devices import for_gpus
from alphazero.stop_signals import handling_stop_signals
from alphazero.store.checkpoint import latest_checkpoint, load_checkpoint
from alphazero.store.resign import ResignCalibrator
from alphazero.store.rundir import RunDir, remove_stale_temporaries
from selfplay.fleet import Placement, SelfPlayFleet, actors_that_fit
from selfplay.ray_connect import connect_ray, ensure_ray_token
from selfplay.totals import ActorLosses, RepetitionWatch, Totals, why_died
from selfplay.worker import PlayStats, ShardsNotStored

__all__ = ["ActorLosses", "Totals", "actor_failure", "actor_start_failure", "check_checkpoint", "connect_ray",
           "ensure_ray_token", "flush_actors", "remote_traceback", "run_selfplay"]

log = logging.getLogger(__name__)


def check_checkpoint(run: RunDir, config: Config) -> int | None:
    """The step of the run's latest checkpoint after checking it loads into this architecture.

    Raises:
        UserError: the checkpoint is corrupt or of another architecture.
    """
    path = latest_checkpoint(run)
    if path is None:
        return None
    payload = load_checkpoint(path, "cpu", expected=config.network, mmap=True, check_optimizer=False)
    return int(payload["step"])


class _ResignFollower:
    """Recalibrates the resignation threshold from new shards and pushes a change to the actors."""

    def __init__(self, run: RunDir, config: Config, every_s: float = 10.0) -> None:
        self.calibrator = ResignCalibrator(run, config.search)
        self.every_s = every_s
        self.last = time.monotonic()
        self._refresh()  # before the actors start: they read run/resign.json

    def _refresh(self) -> bool:
        try:
            return self.calibrator.refresh()
        except OSError as error:
            log.warning("cannot write %s: %s", self.calibrator.path, error)
            return False

    def update(self, handles: list[Any], force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last < self.every_s:
            return
        self.last = now
        if self._refresh():
            for handle in handles:
                self.push(handle)

    def push(self, handle: Any) -> None:
        """Sends the threshold in force to one actor (not waited for: it takes it between play() calls)."""
        if self.calibrator.search.resign_mode == "calibrated":
            handle.set_resign_threshold.remote(self.calibrator.threshold)


class _Reporter:
    """The progress line on the terminal and the scalars in run/tb/selfplay."""

    def __init__(self, run: RunDir, progress: bool, every_s: float = 10.0,
                 extra_scalars: Callable[[], dict[str, float]] | None = None,
                 starting: str = "self-play: starting actors...") -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.extra_scalars = extra_scalars
        self.writer = SummaryWriter(str(run.tb / "selfplay"))
        self.every_s = every_s
        self.last = 0.0
        self.display = LiveDisplay(enabled=progress, text=starting, refresh_per_second=2).start()

    def update(self, totals: Totals, alive: int, actors: int, force: bool = False,
               suffix: Callable[[int | None], str] | None = None) -> None:
        if self.display.live:
            width = self.display.width
            lines = [totals.line(alive, actors, width)] + ([suffix(width)] if suffix is not None else [])
            self.display.show("\n".join(lines))  # a line that still overflows (a very narrow terminal) is cut
        now = time.monotonic()
        if force or now - self.last >= self.every_s:
            self.last = now
            scalars = totals.scalars()
            if self.extra_scalars is not None:
                scalars.update(self.extra_scalars())
            for tag, value in scalars.items():
                self.writer.add_scalar(tag, value, totals.games)
            self.writer.flush()

    def note(self, text: str) -> None:
        """Prints a line that stays: above the live line, or plainly without one."""
        if self.display.live:
            self.display.message(text)
        else:
            print(text, flush=True)

    def close(self) -> None:
        self.display.stop()
        self.writer.close()


def run_selfplay(run: RunDir, config: Config, *, actors: int, address: str | None = None, gpus: float = 0.0,
                 minutes: float | None = None, games: int | None = None, progress: bool = True,
                 stop: threading.Event | None = None, chunk_seconds: float = 2.0,
                 on_update: Callable[[Totals], None] | None = None,
                 status_suffix: Callable[[int | None], str] | None = None,
                 placement: Placement | None = None) -> Totals:
    """Plays self-play games on Ray until `minutes` pass, `games` finish, `stop` is set or Ctrl-C (or SIGTERM);
    sets `stop` when it ends for one of the others.

    Finished games are kept: at the end every actor writes the games it holds
    (with transport 'ray': sends them, and waits for the sink's
    acknowledgements). `status_suffix(width)` adds a second line, of at most
    `width` columns, to the live progress (alphazero train shows the
    learner's there). `placement(i)` gives extra Ray options for actor i
    (a scheduling strategy, resources).

    Raises:
        UserError: an unreachable Ray address, a corrupt checkpoint, an actor
            that fails (with a user error's message, its machine's error and
            what to do, or after a bug's traceback on stderr: actor_failure;
            an actor whose constructor raises too: actor_start_failure),
            bad arguments, or transport 'ray' through a Ray client (ray://),
            whose sink would write on the head. An actor that cannot store its
            games at the stop raises nothing: a line says what it lost and why.
    """
    import ray

    if config.selfplay.transport == "ray" and address is not None and address.startswith("ray://"):
        raise UserError(f"transport 'ray' writes the shards on the driver's node, and through {address} that is "
                        f"the cluster's head, not this machine: run alphazero selfplay on the head with "
                        f"--address auto (or use --transport disk with storage every node sees)")
    config = for_gpus(config, gpus)  # the device the GPUs imply; with GPUs: selfplay.gpu_games_per_actor
    quota = math.ceil(games / actors) if games and actors > 0 else None
    fleet = SelfPlayFleet(run, config, actors=actors, gpus=gpus, quota=quota, placement=placement)
    step = check_checkpoint(run, config)
    if step is None:
        print(f"self-play: no checkpoint in {run.checkpoints} yet: playing with freshly initialised weights",
              flush=True)
    remove_stale_temporaries(run.selfplay)
    resign = _ResignFollower(run, config)
    fleet.resign_threshold = resign.calibrator.threshold  # what transport 'ray' actors start with
    # A local Ray has the machine's cores, whatever was asked: Ray starts a process for every actor it can place,
    # and hundreds of them exhaust a laptop's memory.
    with _stops_remembered() as signalled:
        started_ray = connect_ray(address, num_cpus=os.cpu_count() or 1, num_gpus=gpus or None)
        try:
            _fit_actors(fleet, games, grows=address is not None and not gpus)
            with fleet:
                return _play(fleet, resign, Totals(start_step=step if step is not None else -1),
                             _Reporter(run, progress, extra_scalars=resign.calibrator.scalars,
                                       starting=_starting_text(config)),
                             _Until(games, time.monotonic() + minutes * 60 if minutes else None, stop),
                             chunk_seconds=chunk_seconds, on_update=on_update, status_suffix=status_suffix,
                             signal_seen=signalled)
        finally:
            if started_ray:
                ray.shutdown()


@contextlib.contextmanager
def _stops_remembered() -> Iterator[threading.Event]:
    """Makes Ctrl-C and SIGTERM raise KeyboardInterrupt in the main thread, as before, and sets the event it gives.

    The play loop raises it again while the event is set: a KeyboardInterrupt raised inside Ray's code while
    the actors started was lost under load, and the command played on for the 90 s a service manager waits
    (its stacks showed it in the play loop; EXPERIMENTS.md, "The suite green on a fresh clone, the tests that
    saturate the cores alone"). Off the main thread, where no handler can be set, the event stays clear, as it does
    for a signal the process was started ignoring (alphazero.stop_signals).
    """
    signalled = threading.Event()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        signalled.set()
        raise KeyboardInterrupt

    with handling_stop_signals(interrupt):
        yield signalled


def _fit_actors(fleet: SelfPlayFleet, games: int | None, grows: bool) -> None:
    """Starts no more actors than the cluster holds (one CPU and ACTOR_MEMORY_BYTES each): says so and lowers
    ``fleet.count`` (and the games each plays) when fewer fit than were asked. Where the cluster ``grows``
    (one reached by --address, without GPUs, whose shares are fixed at the start) the rest start as nodes join
    (_Growth); elsewhere the actors that fit are all there will be.

    Raises:
        UserError: not even one actor fits.
    """
    import ray

    fit, why = actors_that_fit(fleet.count, ray.cluster_resources(), servers=fleet.server_count)
    if fit < 1:
        raise UserError(f"no self-play actor fits: {why}")
    if fit < fleet.count:
        later = "the rest start as nodes join the cluster" if grows else \
            "more need more CPUs or memory: a cluster, or fewer actors"
        print(f"self-play: {why}; starting {fit} ({later})", flush=True)
        fleet.count = fit
        if not grows:
            fleet.asked = fit
        fleet.quota = math.ceil(games / fit) if games else None


def _starting_text(config: Config) -> str:
    """The live line until the actors' first results: on a CPU that compiles, why the start takes seconds."""
    if config.selfplay.device == "cpu" and config.selfplay.cpu_forward == "compile":
        return ("self-play: starting actors; each compiles its network first (seconds, fewer once cached; "
                "selfplay.cpu_forward)...")
    return "self-play: starting actors..."


@dataclass
class _Until:
    """When self-play stops: after `games` games, at `deadline` (time.monotonic) or when `stop` is set."""

    games: int | None
    deadline: float | None
    stop: threading.Event | None

    def reached(self, totals: Totals) -> bool:
        return bool((self.games and totals.games >= self.games)
                    or (self.deadline and time.monotonic() >= self.deadline)
                    or (self.stop is not None and self.stop.is_set()))

    def end(self) -> None:
        """Sets `stop` as self-play starts its end (the caller's other work, `alphazero train`'s learner, ends
        beside it, while the actors write their last games)."""
        if self.stop is not None:
            self.stop.set()

    def left_text(self) -> str:
        """What is left before the deadline, for the live line ('ends in 12:05'); '' without one."""
        return f"ends in {clock_text(self.deadline - time.monotonic())}" if self.deadline else ""


def _play(fleet: SelfPlayFleet, resign: _ResignFollower, totals: Totals, reporter: _Reporter, until: _Until, *,
          chunk_seconds: float, on_update: Callable[[Totals], None] | None,
          status_suffix: Callable[[int | None], str] | None, signal_seen: threading.Event | None = None) -> Totals:
    """Keeps every actor playing `chunk_seconds` calls until `until`; then flushes their games and reports."""
    import ray

    handles = fleet.actors  # grows when nodes join (_Growth)
    losses = ActorLosses(fleet, totals, reporter.note)
    growth = _Growth(fleet, reporter.note)
    collapse = RepetitionWatch()

    def suffix(width: int | None) -> str:
        left = until.left_text()
        lines = [fit_line([*([left] if left else []), resign.calibrator.status()], width),
                 *([status_suffix(width)] if status_suffix is not None else [])]
        return "\n".join(lines)

    signalled: float | None = None  # after a signal: when (time.monotonic) its drain and flush must be done
    pending: dict[Any, int] = {handle.play.remote(chunk_seconds): i for i, handle in enumerate(handles)}
    idle: set[int] = set()
    precisions: set[str] = set()  # what the actors' networks run in (bf16, float32), each said once
    try:
        while pending:
            if signal_seen is not None and signal_seen.is_set():
                raise KeyboardInterrupt  # a signal whose own KeyboardInterrupt was lost (_stops_remembered)
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in ready:
                index = pending.pop(ref)
                stats = _collect(ref, totals, index, idle, losses)
                if index in idle:
                    continue
                if stats is not None:
                    fleet.played(index, stats)
                    if (warning := collapse.add(stats)) is not None:
                        reporter.note(warning)
                    precision = stats.precision.split(" ", 1)[0]  # 'bf16' or 'float32': each actor timed its own
                    if precision and precision not in precisions:
                        precisions.add(precision)
                        reporter.note(f"self-play: the network runs {stats.precision}")
                elif fleet.lost(index):
                    # Transport 'ray': Ray restarted it with fresh weights (the newest went first, before its
                    # next play()) and the threshold it was created with.
                    resign.push(handles[index])
                if not until.reached(totals):
                    pending[handles[index].play.remote(chunk_seconds)] = index
            if not until.reached(totals):
                for index in growth.check():
                    resign.push(handles[index])
                    pending[handles[index].play.remote(chunk_seconds)] = index
            fleet.follow_weights()
            resign.update(handles)
            reporter.update(totals, fleet.count - len(idle), fleet.count, suffix=suffix)
            if on_update is not None:
                on_update(totals)
            if until.reached(totals):
                until.end()
                _drain(pending, totals, idle, losses, timeout=4 * chunk_seconds + 30)
                break
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (alphazero.app.cli): to this process, its group or every process
        until.end()
        signalled = time.monotonic() + SIGNAL_STOP_SECONDS
        print("\nself-play: stopping; writing the finished games", flush=True)
        # The calls in progress end within a chunk: their games (whose shards may already be stored) are counted.
        _drain(pending, totals, idle, losses, timeout=min(2 * chunk_seconds + 5, SIGNAL_STOP_SECONDS / 2))
    finally:
        flush_seconds = FLUSH_SECONDS if signalled is None else max(1.0, signalled - time.monotonic())
        flush_actors(handles, totals, losses, timeout=flush_seconds)
        resign.update([], force=True)
        totals.resign_status = resign.calibrator.status()
        reporter.update(totals, fleet.count - len(idle), fleet.count, force=True, suffix=suffix)
        reporter.close()
    return totals


GROW_CHECK_SECONDS = 5.0  # how often a driver with fewer actors than asked looks for nodes that joined


class _Growth:
    """Starts the actors asked for but not started for want of room, as nodes join the cluster."""

    def __init__(self, fleet: SelfPlayFleet, note: Callable[[str], None]) -> None:
        self.fleet, self.note = fleet, note
        self.checked = time.monotonic()

    def check(self) -> list[int]:
        """Every GROW_CHECK_SECONDS while actors are missing: starts those that now fit; returns their indices."""
        import ray

        if self.fleet.count >= self.fleet.asked or time.monotonic() - self.checked < GROW_CHECK_SECONDS:
            return []
        self.checked = time.monotonic()
        fit, _ = actors_that_fit(self.fleet.asked, ray.cluster_resources(), servers=self.fleet.server_count)
        if fit <= self.fleet.count:
            return []
        first = self.fleet.count
        self.fleet.grow(fit)
        self.note(f"self-play: the cluster grew; started actors {first}-{fit - 1} "
                  f"({fit} of the {self.fleet.asked} asked now run)")
        return list(range(first, fit))


def _collect(ref: Any, totals: Totals, index: int, idle: set[int], losses: ActorLosses) -> PlayStats | None:
    """Adds a finished play() call's statistics and returns them (None: the actor was lost); adds `index`
    to `idle` when that actor has nothing more to do.

    Raises:
        UserError: the actor's call raised (actor_failure: a user error's message, or a bug's after its
            traceback), or its constructor did (actor_start_failure).
    """
    import ray
    from ray.exceptions import RayActorError, RayTaskError

    try:
        stats: PlayStats = ray.get(ref)
    except RayActorError as error:
        if error.actor_init_failed:  # its constructor raised: so would every restart's, without end
            raise actor_start_failure(error)  # noqa: B904 - its cause, when set, is what ran out of memory
        # Killed, crashed or gone with its node: Ray restarts it; its stored shards are kept, its other games
        # are lost (and counted). Give it a moment and carry on.
        totals.lost_calls += 1
        losses.failed(index, error)
        time.sleep(0.5)
        return None
    except RayTaskError as error:
        raise actor_failure(error) from None
    losses.heard(index, stats)
    totals.add(stats)
    if stats.games == 0 and stats.batches == 0:
        idle.add(index)  # its game quota is played
    return stats


def actor_failure(error: Any) -> UserError:
    """The one-line error for an actor's call that raised (a RayTaskError).

    A UserError (a corrupt checkpoint, a setting the actor cannot honour) is
    the user's to fix, and its message says how: it is the whole report. An
    OSError (a full disk, an unwritable folder) is the machine's: its message
    and what to do. Anything else is a bug, and its one line cannot say where
    it is: the actor's traceback is printed on stderr first (the driver keeps
    no log file; a live display prints it above its line).
    """
    cause = _cause(error)
    if isinstance(cause, UserError) or (isinstance(cause, BaseException) and is_out_of_memory(cause)):
        # Out of memory is the user's to fix too: the CLI's one line says what ran out and what to lower.
        return UserError(f"a self-play actor failed: {cause}")
    if isinstance(cause, OSError):
        where = cause.folder if isinstance(cause, ShardsNotStored) else cause.filename
        return UserError(f"a self-play actor failed with an error of its machine, not of self-play: {cause}; "
                         f"{os_error_advice(cause.errno, where)}")
    print(f"self-play: an actor raised an error that is a bug, not a setting; its traceback:\n"
          f"{remote_traceback(error)}", file=sys.stderr, flush=True)
    return UserError(f"a self-play actor failed with {_what(error)} (its traceback is above)")


def actor_start_failure(error: Any) -> UserError:
    """The one-line error for an actor whose constructor raised (a RayActorError with actor_init_failed).

    Ray would restart it for ever, each restart raising again, and keeps only the error's text, its traceback,
    whose last line says what was raised. A UserError's message is the whole report, as actor_failure's; any
    other error's traceback is printed on stderr first; out of memory becomes the error's cause, which the
    command line says as what ran out.
    """
    lines = _COLOUR.sub("", str(error)).strip().splitlines()
    last = lines[-1].strip() if lines else type(error).__name__
    kind, _, message = last.partition(": ")
    name = kind.rsplit(".", 1)[-1]
    if name == "UserError":
        return UserError(f"a self-play actor failed: {message}")
    print(f"self-play: an actor raised an error as it started; its traceback:\n{remote_traceback(error)}",
          file=sys.stderr, flush=True)
    failure = UserError(f"a self-play actor failed as it started, with {last} (its traceback is above)")
    if name in ("MemoryError", "OutOfMemoryError"):
        failure.__cause__ = MemoryError(message)
    return failure


def _cause(error: Any) -> Any:
    """The exception an actor's call raised, under the RayTaskErrors of the calls that waited on it."""
    from ray.exceptions import RayTaskError

    cause = error.cause
    while isinstance(cause, RayTaskError):  # raised in a call that the actor's call made
        cause = cause.cause
    return cause


def _what(error: Any) -> str:
    """An actor's error in one line: 'ZeroDivisionError: division by zero'."""
    cause = _cause(error)
    return f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(error).splitlines()[-1]


def os_error_advice(code: int | None, where: Any = None) -> str:
    """What to do about an OSError of the machine, by its errno ``code`` (``where``: the folder or file it was
    about, if known)."""
    place = str(where) if where else "the run directory"
    advice = {
        errno.ENOSPC: f"free space on the disk that holds {place}, then run again",
        errno.EDQUOT: f"the disk quota of {place} is used up: free space or raise the quota, then run again",
        errno.EACCES: f"make {place} writable by the user that runs self-play",
        errno.EPERM: f"make {place} writable by the user that runs self-play",
        errno.EROFS: f"{place} is on a read-only file system: put the run on a writable disk",
        errno.ENOENT: f"{place} is gone: check that the run directory exists and is mounted on every node",
        errno.EMFILE: "the process ran out of open files: raise the limit (ulimit -n)",
        errno.ENFILE: "the machine ran out of open files: close other programs or raise fs.file-max",
        errno.EIO: f"the disk that holds {place} failed a read or write: check it (dmesg) before running again",
    }
    return advice.get(code or 0, f"check the disk and the machine that hold {place}, then run again")


_COLOUR = re.compile(r"\x1b\[[0-9;]*m")
_MARKERS = re.compile(r"\s*[\^~]+\s*")  # the carets under a traceback's source line


def remote_traceback(error: Any) -> str:
    """The actor's traceback as Ray formats it (its own frames hidden), without the terminal colours and the
    carets that Ray's hidden frames leave under no source line: a log file reads it too."""
    lines: list[str] = []
    for line in _COLOUR.sub("", str(error)).splitlines():
        under_source = bool(lines) and lines[-1].startswith("    ") and not _MARKERS.fullmatch(lines[-1])
        if under_source or not _MARKERS.fullmatch(line):
            lines.append(line)
    return "\n".join(lines)


def _drain(pending: dict[Any, int], totals: Totals, idle: set[int], losses: ActorLosses, timeout: float) -> None:
    """Waits for the play() calls in progress (they end within a chunk) and counts them."""
    import ray

    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=timeout)
    for ref in ready:
        _collect(ref, totals, pending.pop(ref), idle, losses)


FLUSH_SECONDS = 60.0  # the most an end (the deadline, the games done) waits for the actors to write their games
SIGNAL_STOP_SECONDS = 6.0
"""The most a signalled stop (Ctrl-C, SIGTERM) waits for the play calls in progress and the actors' last games,
together: `docker stop` sends SIGKILL 10 s after SIGTERM, and Ray's shutdown and the learner's save need the rest
(issue 80). A play call ends within a chunk, and a flush behind it writes a shard or two."""


def flush_actors(handles: list[Any], totals: Totals, losses: ActorLosses, *, timeout: float = FLUSH_SECONDS) -> None:
    """Asks every actor to write the finished games it still holds; says what each that cannot lost, and why."""
    import ray
    from ray.exceptions import RayActorError, RayError, RayTaskError

    # One deadline for all: an actor still starting (or lost) holds no game, and must not hold up the stop.
    refs = {handle.flush.remote(last=True): index for index, handle in enumerate(handles)}
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
    failed = _FlushFailures(losses)
    for ref in ready:
        try:
            totals.shards.extend(ray.get(ref))
        except RayActorError as error:
            losses.gone(refs[ref], why_died(error))
        except RayTaskError as error:
            failed.add(refs[ref], error)
        except RayError as error:  # its answer was lost (an object or its owner): so were the games it held
            losses.gone(refs[ref], f"the stop's flush failed: {_first_line(error)}")
    for ref in late:
        losses.gone(refs[ref], f"no answer to the stop's flush within {timeout:.0f} s")
    failed.report()


class _FlushFailures:
    """The actors whose flush at the stop raised: the disk's errors said once per folder and error with the
    finished games they cost; a bug's traceback printed once, and the games of each actor it hit counted."""

    def __init__(self, losses: ActorLosses) -> None:
        self.losses = losses
        # (folder, errno, error) -> each actor's index and its lost games (None: not said)
        self.disk: dict[tuple[str, int | None, str], list[tuple[int, int | None]]] = {}
        self.bugs: dict[str, int] = {}  # an error's line -> the first actor that raised it

    def add(self, index: int, error: Any) -> None:
        cause = _cause(error)
        if isinstance(cause, OSError):
            where = cause.folder if isinstance(cause, ShardsNotStored) else str(cause.filename or "")
            games = cause.games if isinstance(cause, ShardsNotStored) else None
            reason = f"[Errno {cause.errno}] {cause.strerror}" if cause.errno is not None else str(cause)
            self.disk.setdefault((where, cause.errno, reason), []).append((index, games))
            return
        what = _what(error)
        first = self.bugs.setdefault(what, index)
        if first == index:
            print(f"self-play: actor {index}'s flush at the stop raised an error that is a bug; its traceback:\n"
                  f"{remote_traceback(error)}", file=sys.stderr, flush=True)
            self.losses.gone(index, f"its flush at the stop raised {what}, a bug: its traceback is on stderr")
        else:
            self.losses.gone(index, f"its flush at the stop raised {what}, as actor {first}'s did")

    def report(self) -> None:
        """Says each disk error once, with the actors it hit and the finished games it cost them."""
        for (where, code, reason), hit in self.disk.items():
            known = [games for _, games in hit if games is not None]
            indices = [str(index) for index, _ in hit]
            who, whose = (f"actor {indices[0]}", "its") if len(hit) == 1 else \
                (f"{len(hit)} actors ({', '.join(indices[:8])}{', ...' if len(hit) > 8 else ''})", "their")
            games = f"{whose} {sum(known)} finished games" if len(known) == len(hit) else f"{whose} finished games"
            place = f" in {where}" if where else ""
            self.losses.note(f"self-play: {who} could not store {games}{place} at the stop ({reason}); they are "
                             f"lost: {os_error_advice(code, where or None)}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0]}" if text else type(error).__name__
