"""What self-play counts: the totals of every actor's play() calls, and the games lost with an actor's process.

The driver (selfplay.driver) adds each call's PlayStats to Totals, which
give the progress line, the TensorBoard scalars and the summary; ActorLosses
follows each actor's process and counts its games when it is lost.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from alphazero.chess.pgn import REPETITIONS
from alphazero.console import compact_number, fit_line
from selfplay.fleet import SelfPlayFleet
from selfplay.worker import PlayStats

__all__ = ["ActorLosses", "RepetitionWatch", "SINK_ASK_SECONDS", "Totals", "why_died"]


@dataclass
class Totals:
    """Self-play statistics summed over actors and play() calls."""

    started: float = field(default_factory=time.monotonic)
    games: int = 0
    moves: int = 0
    samples: int = 0
    evaluations: int = 0
    batches: int = 0
    network_seconds: float = 0.0
    sink_wait_seconds: float = 0.0
    actor_seconds: float = 0.0
    plies: list[int] = field(default_factory=list)
    results: dict[str, int] = field(default_factory=lambda: {"white": 0, "draw": 0, "black": 0})
    terminations: dict[str, int] = field(default_factory=dict)
    shards: list[str] = field(default_factory=list)
    resigned: int = 0
    played_through: int = 0
    would_have_resigned: int = 0
    false_resignations: int = 0
    lost_calls: int = 0
    # each actor's weights at its latest report (-1: fresh): not the highest ever seen, which a rewound
    # learner (learn --from-checkpoint) would leave showing the abandoned network's step
    actor_steps: dict[str, int] = field(default_factory=dict)
    start_step: int = -1  # the newest checkpoint's step when self-play started: shown until an actor reports
    resign_status: str = ""  # the resignation calibration's last status line
    first_game_time: float | None = None  # time.time() when the first game of any actor ended
    lost_actors: int = 0     # actor processes lost (crashed, killed, or with their host) and restarted by Ray
    games_lost: int = 0      # their games started but never stored (finished or in flight)
    finished_lost: int = 0   # ... of which they had finished (counted in `games` when they reported them)

    def add(self, stats: PlayStats) -> None:
        self.games += stats.games
        self.moves += stats.moves
        self.samples += stats.samples
        self.evaluations += stats.evaluations
        self.batches += stats.batches
        self.network_seconds += stats.network_seconds
        self.sink_wait_seconds += stats.sink_wait_seconds
        self.actor_seconds += stats.wall_seconds
        self.plies.extend(stats.game_plies)
        for key, count in stats.results.items():
            self.results[key] += count
        for key, count in stats.terminations.items():
            self.terminations[key] = self.terminations.get(key, 0) + count
        self.shards.extend(stats.shards)
        self.resigned += stats.resigned
        self.played_through += stats.played_through
        self.would_have_resigned += stats.would_have_resigned
        self.false_resignations += stats.false_resignations
        self.actor_steps[stats.worker] = stats.weights_step
        if stats.first_game_time is not None:
            self.first_game_time = min(self.first_game_time or stats.first_game_time, stats.first_game_time)

    def weights_text(self) -> str:
        """What the actors play: 'weights step 1,200', 'weights steps 1,000-1,200' while they change, or
        'fresh weights'."""
        steps = set(self.actor_steps.values()) or {self.start_step}
        if steps == {-1}:
            return "fresh weights"
        low, high = min(steps), max(steps)
        if low == high:
            return f"weights step {high:,}"
        return f"weights steps {'fresh' if low < 0 else format(low, ',')}-{high:,}"

    @property
    def elapsed(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)

    def scalars(self) -> dict[str, float]:
        """The TensorBoard scalars of self-play (cumulative rates since the start)."""
        decided = max(self.games, 1)
        values = {
            "selfplay/positions_per_s": self.moves / self.elapsed,
            "selfplay/games_per_hour": self.games / self.elapsed * 3600,
            "selfplay/evaluations_per_s": self.evaluations / self.elapsed,
            "selfplay/average_batch": self.evaluations / max(self.batches, 1),
            "selfplay/network_share": self.network_seconds / max(self.actor_seconds, 1e-9),
            "selfplay/sink_wait_share": self.sink_wait_seconds / max(self.actor_seconds, 1e-9),
            "selfplay/games": self.games,
            "results/white_wins": self.results["white"] / decided,
            "results/draws": self.results["draw"] / decided,
            "results/black_wins": self.results["black"] / decided,
            "resign/resigned_share": self.resigned / decided,
            "selfplay/games_lost": self.games_lost,
        }
        if self.plies:
            values["selfplay/game_length"] = sum(self.plies) / len(self.plies)
        return values

    def line(self, actors_alive: int, actors: int, width: int | None = None) -> str:
        """The live progress line, fitted to ``width`` columns (the least telling parts go first)."""
        weights = self.weights_text()
        return fit_line([
            f"self-play {self.games:,} games",
            f"{compact_number(self.moves)} positions ({compact_number(self.moves / self.elapsed)}/s)",
            weights,
            f"W/D/B {self.results['white']}/{self.results['draw']}/{self.results['black']}",
            f"{actors_alive}/{actors} actors" + (f", {self.games_lost} games lost" if self.lost_actors else ""),
            f"{compact_number(self.evaluations / self.elapsed)} evals/s",
            f"batch {self.evaluations / max(self.batches, 1):.1f}",
        ], width)


    def lost_text(self) -> str:
        """The summary's words on lost actors ('' when none was lost)."""
        if not self.lost_actors:
            return ""
        return (f"{self.lost_actors} actor processes lost (and restarted), with {self.games_lost} games: "
                f"{self.finished_lost} finished but not yet stored, the rest unfinished")


# A run whose recent games are this drawn, this often by repetition, has collapsed: its value target says
# draw everywhere and its policy learns its own loops (EXPERIMENTS.md, "Forced playouts at PUCT
# from zero"; issue 12's PUCT with 16 simulations did the same). Strong self-play draws often, but by
# material, the ply limit or the fifty-move rule as much as by repetition.
COLLAPSE_GAMES = 1_000
COLLAPSE_DRAW_SHARE = 0.95
COLLAPSE_REPETITION_SHARE = 0.8


class RepetitionWatch:
    """Says once when self-play's recent games have collapsed into repetition draws.

    Judged on at least COLLAPSE_GAMES of the newest games (whole play()
    calls, oldest dropped first): a warning, not a stop, since the run may
    climb out of it and the user decides.
    """

    def __init__(self, games: int = COLLAPSE_GAMES) -> None:
        self.games = games
        self.recent: deque[tuple[int, int, int]] = deque()  # (games, draws, repetitions) of each play() call
        self.said = False

    def add(self, stats: PlayStats) -> str | None:
        """Takes a play() call's answer; the warning the first time the recent games look collapsed."""
        if self.said or not stats.games:
            return None
        repetitions = sum(stats.terminations.get(name, 0) for name in REPETITIONS)
        self.recent.append((stats.games, stats.results.get("draw", 0), repetitions))
        while sum(games for games, _, _ in self.recent) - self.recent[0][0] >= self.games:
            self.recent.popleft()
        games = sum(games for games, _, _ in self.recent)
        draws = sum(draws for _, draws, _ in self.recent)
        repeated = sum(repeated for _, _, repeated in self.recent)
        if games < self.games or draws < COLLAPSE_DRAW_SHARE * games or repeated < COLLAPSE_REPETITION_SHARE * games:
            return None
        self.said = True
        return (f"self-play: {draws / games:.0%} of the last {games:,} games were draws, {repeated / games:.0%} by "
                f"repetition: self-play has likely collapsed into repetition loops, its value target a draw "
                f"everywhere. PUCT with few simulations does this from zero (EXPERIMENTS.md, \"Forced "
                f"playouts at PUCT from zero\"); search.algorithm=gumbel, or more search.simulations, keeps games "
                f"decisive")


@dataclass
class _ActorProcess:
    """What the driver last heard from one actor process (Ray's restart of an actor is a new one)."""

    incarnation: str = ""
    host: str = ""
    started: int = 0    # games it started
    finished: int = 0   # games it reported finished (summed over its play() calls)
    stored: int = 0     # games in shards it saw stored
    unreachable: bool = False  # said so already
    lost_at: float | None = None  # time.monotonic() when the actor at its index was lost, until its restart reports


class ActorLosses:
    """Follows each actor's process: says which was lost, on which host, with how many games, and its restart.

    A process is lost when a call to it fails with ActorDiedError (its
    process, or its node, died) or when a restart answers in its place. Its
    lost games are those it had started by its last answer (every
    ``chunk_seconds``) minus those the sink stored from it (the sink counts
    by process; with transport 'disk', what it reported stored): its games in
    flight and its finished games not yet stored. Games it started after its
    last answer were never known here and are not counted. A host that is
    unreachable for a while (ActorUnavailableError) loses nothing until Ray
    declares its node dead.
    """

    def __init__(self, fleet: SelfPlayFleet, totals: Totals, note: Callable[[str], None]) -> None:
        self.fleet, self.totals, self.note = fleet, totals, note
        self.processes: dict[int, _ActorProcess] = {}

    def heard(self, index: int, stats: PlayStats) -> None:
        """Takes a play() call's answer from actor ``index``."""
        process = self.processes.setdefault(index, _ActorProcess())
        if stats.incarnation != process.incarnation:
            if process.incarnation:  # a restart answered before a failed call said the process was gone
                self._count(index, process, "unreachable, then replaced" if process.unreachable else "replaced",
                            restarted_on=stats.host)
            elif process.lost_at is not None:
                self.note(f"self-play: actor {index} restarted on {stats.host}, "
                          f"{time.monotonic() - process.lost_at:.0f} s after it was lost")
            process = self.processes[index] = _ActorProcess(stats.incarnation, stats.host)
        process.finished += stats.games
        process.started, process.stored = stats.games_started, stats.games_stored

    def failed(self, index: int, error: Exception) -> None:
        """Takes a failed call to actor ``index`` (a RayActorError)."""
        from ray.exceptions import ActorUnavailableError

        process = self.processes.setdefault(index, _ActorProcess())
        if isinstance(error, ActorUnavailableError):
            if process.incarnation and not process.unreachable:
                process.unreachable = True
                self.note(f"self-play: actor {index} on {process.host} is unreachable; its games are kept if it "
                          f"comes back before Ray declares its node dead")
            return
        if not process.incarnation:
            if process.lost_at is None:  # never heard from: it held no finished game the driver knew of
                self.note(f"self-play: actor {index} was lost before its first answer ({why_died(error)}); "
                          f"Ray restarts it")
                process.lost_at = time.monotonic()
            return
        self._count(index, process, why_died(error))

    def gone(self, index: int, why: str) -> None:
        """Counts the games of actor ``index`` as lost, whatever the error (at the stop: no more chances)."""
        process = self.processes.get(index)
        if process is not None and process.incarnation:
            self._count(index, process, why, restarts=False)

    def _count(self, index: int, process: _ActorProcess, why: str, restarts: bool = True,
               restarted_on: str = "") -> None:
        stored = self._stored(process)
        lost, finished = max(0, process.started - stored), max(0, process.finished - stored)
        self.totals.lost_actors += 1
        self.totals.games_lost += lost
        self.totals.finished_lost += finished
        then = f"; Ray restarted it on {restarted_on}" if restarted_on else \
            "; Ray restarts it where a CPU is free" if restarts else ""
        self.note(f"self-play: lost actor {index} on {process.host} ({why}): {lost} games lost ({finished} "
                  f"finished but not stored, the rest unfinished; counted to its last answer){then}")
        self.processes[index] = _ActorProcess(lost_at=time.monotonic())

    def _stored(self, process: _ActorProcess) -> int:
        """The games the sink stored from the process (it may have stored more since its last answer)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayError

        if self.fleet.sink is None:
            return process.stored
        try:
            return max(process.stored, int(ray.get(self.fleet.sink.games_stored.remote(process.incarnation),
                                                   timeout=SINK_ASK_SECONDS)))
        except (RayError, GetTimeoutError):
            return process.stored


SINK_ASK_SECONDS = 10.0  # how long the driver waits for the sink's count of a lost actor's stored games


def why_died(error: Exception) -> str:
    """Why Ray says an actor died, in a few words."""
    text = str(error)
    if "node" in text and ("died" in text or "dead" in text):
        return "its node died"
    if "killed" in text:
        return "it was killed"
    return "its process died"
