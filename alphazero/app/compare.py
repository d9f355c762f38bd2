"""`alphazero compare`: self-play settings compared from zero, at equal wall-clock, by games.

The one from-zero protocol (issue 79) that any change can rerun on its own
machine::

    alphazero compare --dir runs/cmp --minutes 30 --arm base \\
        --arm "pcr search.playout_cap_fraction=0.25 search.simulations=32 search.playout_cap_simulations=8"

1. Each arm, one after the other, trains from random weights: `alphazero
   train --run DIR/NAME --preset P --minutes M` with the arm's overrides (and
   ``eval.every_steps=0``, so that no arm spends its minutes on evaluation
   games: the protocol's matches measure them all alike). Its log goes to
   ``DIR/NAME.log``.
2. Every other arm's last network plays the first arm's (the baseline) at
   ``search:N`` (the run's own search settings otherwise, as `alphazero
   curve` plays it) from an opening book with colours swapped, and every arm
   plays Stockfish at each ``--stockfish`` level (a UCI_Elo, or a skill level
   for the anchors below Stockfish 15.1's lowest UCI_Elo, 1350).
3. ``DIR/summary.md``: the arms (minutes, learner steps), how each arm's
   self-play games ended (from its shards: draws and repetition draws over the whole run, its
   first tenth and its last: a search collapsing into repetitions shows
   there), and each pairing's result with its Elo difference and 95% interval.

Resumable as train is: ``DIR/arms.json`` holds the arms as given (a rerun
may add arms after them, and is refused other changes, so that every arm of a
folder meets the same baseline on the same machine); ``DIR/sittings.jsonl`` holds each training
sitting's start and end, so a stopped arm trains on for the minutes it
lacks (a sitting cut off counts up to its newest checkpoint); an arm made by
hand with `alphazero train` before the protocol took it counts its learner's
time. Matches are played in chunks of 20 games, each its own match id under
``DIR/matches/eval/``; a rerun plays only the chunks not complete.

Every step runs the `alphazero` command line in a subprocess, as a user would.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from alphazero.errors import UserError
from alphazero.presets import PRESET_NAMES
from alphazero.store.rundir import atomic_write_text, check_writable_directory
from eval.match_records import read_game_records
from selfplay.endings import Ending, is_draw, is_repetition, read_endings, share, split

ARMS_FILE = "arms.json"
SITTINGS_FILE = "sittings.jsonl"
SUMMARY_FILE = "summary.md"
MATCH_DIR = "matches"
CHUNK_GAMES = 20  # games per match id: a stop loses at most one chunk's games in flight
DEFAULT_BOOK = Path(__file__).resolve().parents[2] / "eval" / "books" / "balanced-400.pgn"
DONE_SLACK_MINUTES = 1.0  # an arm that has trained and is this close to its minutes is done: a sitting shorter
# than Ray's start is waste
# Stockfish 15.1's UCI_Elo starts at 1350, so its skill level 0 stands in for the weaker anchors.
DEFAULT_LEVELS = "skill=0,1400"
ELO_RANGE = (1350, 2850)
# Every arm trains without the periodic evaluation: its games would take the arm's cores for minutes.
ARM_DEFAULTS = ("eval.every_steps=0",)


@dataclass(frozen=True)
class Arm:
    """One arm of the comparison: its name (the run's folder) and its config overrides."""

    name: str
    overrides: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> Arm:
        """Reads ``"NAME section.field=value ..."``.

        Raises:
            UserError: no name, a name that is not a plain folder name, or an override without '='.
        """
        words = shlex.split(text)
        if not words:
            raise UserError("--arm needs a name, then its overrides: --arm \"pcr search.playout_cap_fraction=0.25\"")
        name, overrides = words[0], tuple(words[1:])
        if "=" in name or "/" in name or name.startswith(".") or name == MATCH_DIR:
            raise UserError(f"--arm {text!r}: the first word names the arm's run folder (letters, digits, - or _), "
                            f"got {name!r}")
        for item in overrides:
            if "=" not in item or "." not in item.split("=", 1)[0]:
                raise UserError(f"--arm {name}: {item!r} is not an override section.field=value")
        return cls(name, overrides)

    def check(self, preset: str) -> None:
        """Checks the arm's overrides against the preset's config, as its `alphazero train` will apply them.

        Raises:
            UserError: an unknown field or a value the field refuses (the message names the arm).
        """
        from alphazero.config import apply_overrides
        from alphazero.presets import get_preset

        try:
            apply_overrides(get_preset(preset), [*ARM_DEFAULTS, *self.overrides])
        except UserError as error:
            raise UserError(f"--arm {self.name}: {error}") from None

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "overrides": list(self.overrides)}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", required=True, help="the comparison's folder: one run per arm, matches, summary")
    parser.add_argument("--arm", action="append", default=[], metavar="\"NAME [section.field=value ...]\"",
                        help="an arm: its name, then its overrides; the first arm is the baseline (give two or more)")
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of `alphazero train` per arm (default 30)")
    parser.add_argument("--preset", default="tiny", choices=PRESET_NAMES, help="every arm's preset (default tiny)")
    parser.add_argument("--games", type=int, default=100,
                        help="games of each arm against the baseline (default 100, rounded up to 20s)")
    parser.add_argument("--stockfish", default=DEFAULT_LEVELS,
                        help="Stockfish levels every arm plays, comma-separated: a UCI_Elo (Debian's Stockfish 15.1 "
                             "takes 1350..2850) or skill=N (0..20, weaker than any UCI_Elo); '' for none "
                             f"(default {DEFAULT_LEVELS})")
    parser.add_argument("--stockfish-games", type=int, default=100,
                        help="games of each arm against each level (default 100, rounded up to 20s)")
    parser.add_argument("--simulations", type=int, default=64, help="simulations of the arms' search in the matches "
                                                                    "(default 64)")
    parser.add_argument("--ply-limit", type=int, default=200,
                        help="plies after which a match game is drawn (default 200, as `alphazero curve`)")
    parser.add_argument("--openings", default=str(DEFAULT_BOOK), metavar="FILE",
                        help="opening book of the matches (default: the 400-line balanced book)")
    parser.add_argument("--matches-only", action="store_true", help="play and summarise; train nothing more")


def run(args: argparse.Namespace) -> None:
    """Trains each arm to its minutes, plays the matches, writes and prints the summary.

    Raises:
        UserError: bad options, arms other than the ones the folder was started with, or a step that failed.
    """
    arms = [Arm.parse(text) for text in args.arm]
    if len(arms) < 2:
        raise UserError("give two arms or more (--arm base --arm \"name section.field=value ...\"); the first is "
                        "the baseline")
    if len({arm.name for arm in arms}) != len(arms):
        raise UserError(f"arm names repeat: {[arm.name for arm in arms]}")
    if not 0 < args.minutes < math.inf or min(args.games, args.stockfish_games, args.simulations, args.ply_limit) < 1:
        raise UserError("--minutes, --games, --stockfish-games, --simulations and --ply-limit must be positive "
                        "(and --minutes finite)")
    for arm in arms:
        arm.check(args.preset)
    levels = stockfish_levels(args.stockfish)
    if not Path(args.openings).is_file():
        raise UserError(f"--openings {args.openings}: no such file")
    root = Path(args.dir)
    check_writable_directory(root, "the comparison's folder")
    _check_arms(root, arms, args.preset)
    if not args.matches_only:
        for arm in arms:
            _train_arm(root, arm, args.preset, args.minutes)
    for arm in arms:
        if not (root / arm.name / "checkpoints").is_dir():
            raise UserError(f"arm {arm.name} has no checkpoints yet: run without --matches-only first"
                            if args.matches_only else
                            f"arm {arm.name} has no checkpoints after its training: give it more --minutes "
                            f"(its log: {root / (arm.name + '.log')})")
    for pairing in _pairings(arms, levels, args.games, args.stockfish_games):
        _play(root, pairing, args.simulations, args.openings, args.ply_limit)
    text = summary_text(root, arms, levels, args.minutes, args.simulations)
    atomic_write_text(root / SUMMARY_FILE, text)
    print(text, end="")
    print(f"compare: the summary is in {root / SUMMARY_FILE}")


def stockfish_levels(text: str) -> list[str]:
    """Reads --stockfish into the players' keys: ``elo=E`` for a number, ``skill=N`` as given.

    >>> stockfish_levels("skill=0, 1400")
    ['skill=0', 'elo=1400']

    Raises:
        UserError: a level that is neither, out of Stockfish's range, or repeated.
    """
    levels = []
    for word in (word.strip() for word in text.split(",")):
        if not word:
            continue
        key, _, value = word.rpartition("=")
        if key not in ("", "elo", "skill") or not value.isdigit():
            raise UserError(f"--stockfish takes levels separated by commas, each a UCI_Elo or skill=N, e.g. "
                            f"{DEFAULT_LEVELS}; got {word!r}")
        number = int(value)
        if key == "skill" and number > 20:
            raise UserError(f"--stockfish {word}: Stockfish's skill levels are 0..20")
        if key != "skill" and not ELO_RANGE[0] <= number <= ELO_RANGE[1]:
            raise UserError(f"--stockfish {word}: Stockfish 15.1 takes UCI_Elo {ELO_RANGE[0]}..{ELO_RANGE[1]}; "
                            f"below it use skill=N (0..20)")
        levels.append(f"{key or 'elo'}={number}")
    if len(set(levels)) != len(levels):
        raise UserError(f"--stockfish levels repeat: {levels}")
    return levels


def _check_arms(root: Path, arms: Sequence[Arm], preset: str) -> None:
    """Writes DIR/arms.json on the first start; on a rerun adds arms given after the saved ones and refuses any
    other change (an arm changed, removed or moved, or another preset)."""
    path = root / ARMS_FILE
    wanted = {"preset": preset, "arms": [arm.to_json() for arm in arms]}
    if not path.exists():
        atomic_write_text(path, json.dumps(wanted, indent=1) + "\n")
        return
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise UserError(f"{path} cannot be read ({error}): move it away to start the comparison again") from None
    kept = saved.get("arms", []) if isinstance(saved, dict) else None
    if saved == wanted:
        return
    if not isinstance(kept, list) or saved.get("preset") != preset or wanted["arms"][:len(kept)] != kept:
        raise UserError(f"{root} compares other arms: {path} holds {json.dumps(saved)}; give the same --arm and "
                        f"--preset options (new arms may follow them), or another --dir")
    print(f"compare: adds the arms {', '.join(arm.name for arm in arms[len(kept):])} to {root}", flush=True)
    atomic_write_text(path, json.dumps(wanted, indent=1) + "\n")


# --- training -----------------------------------------------------------------------

def trained_minutes(root: Path, arm: str) -> float:
    """Minutes of `alphazero train` the arm has had: its sittings in DIR/sittings.jsonl (one cut off ends at its
    newest checkpoint's time), or, with none recorded, its learner's time at its newest checkpoint."""
    path = root / SITTINGS_FILE
    entries = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line torn by a stop
        if isinstance(entry, dict) and entry.get("arm") == arm:
            entries.append(entry)
    if not entries:
        return _learner_minutes(root / arm)
    starts: list[float] = []
    total = 0.0
    for entry in entries:
        if "start" in entry:
            starts.append(float(entry["start"]))
        elif "end" in entry and starts:
            total += float(entry["end"]) - starts.pop()
    newest = _newest_checkpoint_time(root / arm)
    for start in starts:  # sittings that never wrote their end
        if newest is not None and newest > start:
            total += newest - start
    return total / 60.0


def _newest_checkpoint_time(run: Path) -> float | None:
    files = list((run / "checkpoints").glob("step_*.pt"))
    return max(path.stat().st_mtime for path in files) if files else None


def _learner_minutes(run: Path) -> float:
    from alphazero.store.checkpoint import latest_checkpoint, read_payload

    path = latest_checkpoint(run) if (run / "checkpoints").is_dir() else None
    if path is None:
        return 0.0
    seconds = read_payload(path, check_optimizer=False).get("run_seconds")
    return float(seconds) / 60.0 if isinstance(seconds, (int, float)) else 0.0


def _note_sitting(root: Path, entry: dict[str, object]) -> None:
    from eval.match_records import append_text

    path = root / SITTINGS_FILE
    if not path.exists():
        atomic_write_text(path, "")
    append_text(path, json.dumps(entry) + "\n")


def _train_arm(root: Path, arm: Arm, preset: str, minutes: float) -> None:
    """Trains the arm for the minutes it still lacks (none when it has them)."""
    trained = trained_minutes(root, arm.name)
    left = minutes - trained
    if trained > 0 and left < DONE_SLACK_MINUTES:
        print(f"compare: arm {arm.name} has trained its {minutes:g} minutes", flush=True)
        return
    command = [sys.executable, "-m", "alphazero", "train", "--run", str(root / arm.name), "--preset", preset,
               "--minutes", f"{left:.2f}", "--no-progress"]
    for item in (*ARM_DEFAULTS, *arm.overrides):
        command += ["--set", item]
    print(f"compare: arm {arm.name} trains {left:.1f} minutes: {shlex.join(command[3:])} "
          f"(log: {root / (arm.name + '.log')})", flush=True)
    _note_sitting(root, {"arm": arm.name, "start": time.time()})
    with open(root / f"{arm.name}.log", "a") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT)
    _note_sitting(root, {"arm": arm.name, "end": time.time()})
    if code != 0:
        raise UserError(f"arm {arm.name}'s `alphazero train` failed (exit {code}): see {root / (arm.name + '.log')}")


# --- matches ------------------------------------------------------------------------

@dataclass(frozen=True)
class Pairing:
    """Two players of the protocol's matches: ``a`` an arm, ``b`` an arm or ``stockfish:LEVEL``."""

    a: str
    b: str
    games: int

    @property
    def b_is_arm(self) -> bool:
        return not self.b.startswith("stockfish")

    @property
    def label(self) -> str:
        return f"{self.a}-vs-{self.b.replace(':', '').replace('=', '')}"


def _pairings(arms: Sequence[Arm], levels: Sequence[str], games: int, stockfish_games: int) -> list[Pairing]:
    base = arms[0].name
    pairings = [Pairing(arm.name, base, games) for arm in arms[1:]]
    pairings += [Pairing(arm.name, f"stockfish:{level}", stockfish_games) for level in levels for arm in arms]
    return pairings


def _chunk_ids(pairing: Pairing) -> list[tuple[str, int]]:
    """The pairing's match ids and the first opening of each (CHUNK_GAMES games, CHUNK_GAMES / 2 openings)."""
    chunks = -(-pairing.games // CHUNK_GAMES)
    return [(f"{pairing.label}-{k * CHUNK_GAMES // 2:03d}", k * CHUNK_GAMES // 2) for k in range(chunks)]


def _player(root: Path, name: str, simulations: int) -> str:
    return f"search:{simulations},run={root / name},name={name}"


def _play(root: Path, pairing: Pairing, simulations: int, openings: str, ply_limit: int) -> None:
    """Plays the pairing's chunks that are not complete (a torn one again from its start)."""
    out = root / MATCH_DIR
    for match_id, seed in _chunk_ids(pairing):
        path = out / "eval" / f"{match_id}.jsonl"
        if len(read_game_records(path)) >= CHUNK_GAMES:
            continue
        for stale in (path, out / "games" / f"{match_id}.pgn"):
            stale.unlink(missing_ok=True)
        b = _player(root, pairing.b, simulations) if pairing.b_is_arm else pairing.b
        command = [sys.executable, "-m", "alphazero", "match", _player(root, pairing.a, simulations), "vs", b,
                   "--run", str(out), "--games", str(CHUNK_GAMES), "--openings", openings, "--seed", str(seed),
                   "--ply-limit", str(ply_limit), "--match-id", match_id, "--no-progress"]
        print(f"compare: {match_id}", flush=True)
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            tail = (result.stderr or result.stdout).strip().splitlines()[-5:]
            raise UserError(f"the match {match_id} failed (exit {result.returncode}): " + " | ".join(tail))


def pairing_counts(root: Path, pairing: Pairing) -> tuple[int, int, int]:
    """Wins, draws and losses of ``pairing.a`` over all the pairing's finished games: every chunk on disk, however
    many games the run that played them asked for."""
    wins = draws = losses = 0
    name_a = pairing.a
    chunk = re.compile(re.escape(pairing.label) + r"-\d{3}")
    for path in sorted((root / MATCH_DIR / "eval").glob("*.jsonl")):
        if not chunk.fullmatch(path.stem):
            continue
        for record in read_game_records(path):
            score = float(record["score_a"]) if record.get("agent_a") == name_a else 1.0 - float(record["score_a"])
            wins += score == 1.0
            draws += score == 0.5
            losses += score == 0.0
    return wins, draws, losses


def summary_text(root: Path, arms: Sequence[Arm], levels: Sequence[str], minutes: float, simulations: int) -> str:
    """The summary: each arm's minutes and steps, then each pairing's result and Elo (95% interval)."""
    from alphazero.store.checkpoint import checkpoint_steps
    from eval.elo import match_summary

    lines = [f"# Comparison in {root}", "",
             f"Each arm {minutes:g} minutes of `alphazero train` from zero, one after the other; matches at "
             f"search:{simulations}, colours swapped.", "",
             "| arm | overrides | minutes trained | learner steps |", "|---|---|---|---|"]
    for arm in arms:
        steps = checkpoint_steps(root / arm.name) if (root / arm.name / "checkpoints").is_dir() else []
        lines.append(f"| {arm.name} | {' '.join(arm.overrides) or '(the preset)'} | "
                     f"{trained_minutes(root, arm.name):.1f} | {steps[-1] if steps else 0:,} |")
    lines += ["", "Self-play's games, in the order they were written: the share drawn and drawn by repetition, over "
              "the whole run; its first tenth; its last tenth.", "",
              "| arm | games | drawn | by repetition |", "|---|---|---|---|"]
    for arm in arms:
        endings, _ = read_endings(root / arm.name / "selfplay")
        lines.append(f"| {arm.name} | {len(endings):,} | {_shares(endings, is_draw)} | "
                     f"{_shares(endings, is_repetition)} |")
    lines += ["", "| pairing | games | +W =D -L | score | Elo | 95% |", "|---|---|---|---|---|---|"]
    for pairing in _pairings(arms, levels, 1, 1):
        wins, draws, losses = pairing_counts(root, pairing)
        s = match_summary(wins, draws, losses)
        if s.games == 0:
            lines.append(f"| {pairing.a} vs {pairing.b} | 0 | | | | |")
            continue
        lines.append(f"| {pairing.a} vs {pairing.b} | {s.games} | +{wins} ={draws} -{losses} | {s.score:.1%} | "
                     f"{_elo(s.elo)} | {_elo(s.elo_low)}..{_elo(s.elo_high)} |")
    return "\n".join(lines) + "\n"


def _shares(endings: Sequence[Ending], kind: Callable[[Ending], bool]) -> str:
    """Gets 'whole; first tenth; last tenth' shares of the endings of that kind."""
    if not endings:
        return "-"
    tenths = split(endings, 10)  # as `alphazero games` cuts them
    return "; ".join(f"{share(part, kind):.0%}" for part in (endings, tenths[0], tenths[-1]))


def _elo(value: float | None) -> str:
    if value is None:
        return "?"
    if value in (float("inf"), float("-inf")):
        return "+inf" if value > 0 else "-inf"
    return f"{value:+.0f}"
