"""Self-play shard files: the training data that self-play writes and the learner reads.

A shard holds the training samples of a few complete games in one compressed
numpy archive (``.npz``, no pickles). Version 1 holds, for S samples and P
policy entries:

=================  ========  ==========  ==============================================
array              dtype     shape       meaning
=================  ========  ==========  ==============================================
version            int64     [1]         SHARD_VERSION
planes             uint64    [S, 112]    compact input bitboards (see docs/encodings.md)
scalars            float32   [S, 7]      compact input scalars (raw, unscaled)
policy_offsets     int64     [S + 1]     sample i's policy is entries offsets[i]:offsets[i+1]
policy_indices     int16     [P]         policy index (0..4671) of each legal move
policy_probs       float32   [P]         its share of the root's visits (0 if unvisited; sums to 1)
results            int8      [S]         the game's result for the sample's side to move
game               int32     [S]         the sample's game, an index into ``games``
ply                int16     [S]         the sample's ply in its game
root_values        float32   [S]         the search's value of the position for its mover
games              uint8     [bytes]     JSON list, one object per game (see GAME_KEYS)
meta               uint8     [bytes]     JSON object: writer, created_at, ...
policy_wins        float32   [P]         optional: the mover's win probability after each move
weights_steps      int32     [S]         optional: the network step that searched each sample
policy_surprise    float32   [S]         optional: KL(policy target || the search's prior), nats
=================  ========  ==========  ==============================================

``policy_wins`` (added within version 1) is written by Stockfish labels
(learner.labels): Stockfish's win probability for the mover after each legal
move, NaN where it scored none. It is what a policy's regret is measured
against (eval.probe). Self-play writes it where the run's network has an
action-value head: the search's (1 + Q) / 2 of each move it visited, NaN
where it visited none; other self-play shards and older labels lack it.

``weights_steps`` (added within version 1) is written by self-play: the
learner step of the weights the actor searched each sample with (-1: fresh
weights). Actors take new weights between moves, so a game's samples may
name several steps, never decreasing; older shards and labels lack it.

``policy_surprise`` (added within version 1) is written by self-play: how
far each sample's policy target lies from the prior its search started from
(the root's, with its noise), KL in nats; the learner's policy surprise
weighting (learner.policy_surprise_weight) reads it. Older shards and labels
lack it.

Each game's JSON object holds GAME_KEYS. Added within version 1 (older
shards lack them, and readers take that): ``game_id`` (a uuid stamped by the
actor; ``game_ids`` derives one from the file name and the game's index for
older shards), ``resign_threshold`` (the threshold the game was played under,
null when it could not resign), ``resign_values`` ({"white": m, "black": m},
see alphazero.store.resign) and ``resign_consecutive`` (the k that m was computed
with).

The value target is ``results`` unless ``meta["value_target"]`` is
``"root_values"`` (VALUE_FROM_ROOT): then the learner trains the value on
``root_values``, a value in [-1, 1] (Stockfish labels, which have no game
result; their ``results`` hold the nearest result class, nearest_results), or ``"none"``
(VALUE_NONE): the shard's positions have no value target (NaN) and train the
policy alone; their ``root_values`` may still hold a value for analysis. See value_targets.

Files are written to a temporary name and renamed (alphazero.store.rundir), so a
reader sees whole shards or none; readers list only ``*.npz`` names that are
not temporary. Names start with the write time in nanoseconds, so sorting
them sorts them by age.
"""

from __future__ import annotations

import io
import json
import os
import time
import uuid
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from alphazero.chess.moves import NUM_MOVES
from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS
from alphazero.store.rundir import atomic_write_bytes, complete_files

SHARD_VERSION = 1
SHARD_SUFFIX = ".npz"
LAB_KIND = "stockfish"  # meta["kind"] of Stockfish-labelled shards (learner.labels)
VALUE_FROM_ROOT = "root_values"  # meta["value_target"] of shards whose value target is root_values
VALUE_NONE = "none"  # meta["value_target"] of shards without a value target (the learner trains their policy alone)
DRAW_BAND = 1.0 / 3.0
"""A value within this of 0 has the result class "draw" (the nearest of 1, 0, -1): labels' results, and the
learner's value accuracy of a scalar head."""

# name -> (dtype, trailing shape) of the per-sample and per-entry arrays.
SAMPLE_ARRAYS: dict[str, tuple[np.dtype, tuple[int, ...]]] = {
    "planes": (np.dtype(np.uint64), (COMPACT_PLANES,)),
    "scalars": (np.dtype(np.float32), (NUM_SCALARS,)),
    "results": (np.dtype(np.int8), ()),
    "game": (np.dtype(np.int32), ()),
    "ply": (np.dtype(np.int16), ()),
    "root_values": (np.dtype(np.float32), ()),
}
POLICY_ARRAYS: dict[str, np.dtype] = {
    "policy_indices": np.dtype(np.int16),
    "policy_probs": np.dtype(np.float32),
}
# Keys of each game's metadata object (JSON); writers may add more.
GAME_KEYS = ("start_fen", "moves", "result", "winner", "termination", "plies", "resign_enabled",
             "would_resign_ply", "would_resign_side", "weights_step", "samples", "game_id", "resign_threshold",
             "resign_values", "resign_consecutive")
# Record keys that are not game metadata: the sample arrays, and per-move
# arrays the metadata summarises (move_values -> resign_values).
_RECORD_ARRAYS = {"planes", "scalars", "plies_of_samples", "root_values", "policy_offsets", "policy_indices",
                  "policy_probs", "policy_wins", "weights_steps", "policy_surprise", "results", "full_search",
                  "move_values"}
POLICY_WINS = "policy_wins"
WEIGHTS_STEPS = "weights_steps"
POLICY_SURPRISE = "policy_surprise"


class ShardError(ValueError):
    """A shard that cannot be read or breaks the format; the message names the file and the problem."""


@dataclass(frozen=True)
class Shard:
    """The samples of a few complete games (see the module docstring for the arrays)."""

    planes: np.ndarray
    scalars: np.ndarray
    policy_offsets: np.ndarray
    policy_indices: np.ndarray
    policy_probs: np.ndarray
    results: np.ndarray
    game: np.ndarray
    ply: np.ndarray
    root_values: np.ndarray
    games: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    policy_wins: np.ndarray | None = None  # float32 [P], see the module docstring
    weights_steps: np.ndarray | None = None  # int32 [S], see the module docstring
    policy_surprise: np.ndarray | None = None  # float32 [S], see the module docstring

    def __len__(self) -> int:
        return len(self.results)

    def dense_policy(self, rows: np.ndarray | Sequence[int]) -> np.ndarray:
        """The policy targets of samples ``rows`` as float32 [len(rows), 4672] (zeros off the visited moves)."""
        rows = np.asarray(rows, dtype=np.int64)
        out = np.zeros((len(rows), NUM_MOVES), dtype=np.float32)
        starts, ends = self.policy_offsets[rows], self.policy_offsets[rows + 1]
        lengths = ends - starts
        entries = np.repeat(starts, lengths) + _ranges(lengths)
        out[np.repeat(np.arange(len(rows)), lengths), self.policy_indices[entries]] = self.policy_probs[entries]
        return out


def nearest_results(values: np.ndarray) -> np.ndarray:
    """Gets the result class (1, 0, -1, int8) nearest to each value in [-1, 1] (DRAW_BAND around 0 is a draw).

    >>> nearest_results(np.array([0.9, 0.2, -0.5])).tolist()
    [1, 0, -1]
    """
    return np.where(values > DRAW_BAND, 1, np.where(values < -DRAW_BAND, -1, 0)).astype(np.int8)


def _ranges(lengths: np.ndarray) -> np.ndarray:
    """Concatenated aranges: [0..l0), [0..l1), ... for lengths l."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.cumsum(lengths)
    return np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)


def shard_from_records(records: Sequence[Mapping[str, Any]], meta: Mapping[str, Any] | None = None) -> Shard:
    """Builds a shard from finished-game records (MultiGameSearch.take_record(), plus metadata keys).

    Every key of a record that is not one of its sample arrays goes into the
    game's metadata object (weights_step, actor, ...).
    """
    offsets = [np.zeros(1, dtype=np.int64)]
    base = 0
    games = []
    for record in records:
        record_offsets = np.asarray(record["policy_offsets"], dtype=np.int64)
        offsets.append(record_offsets[1:] + base)
        base += int(record_offsets[-1])
        info = {key: _jsonable(value) for key, value in record.items() if key not in _RECORD_ARRAYS}
        info["samples"] = len(record["results"])
        games.append(info)

    def join(key: str, dtype: np.dtype, width: tuple[int, ...] = ()) -> np.ndarray:
        parts = [np.asarray(r[key], dtype=dtype).reshape((-1, *width)) for r in records]
        return np.concatenate(parts) if parts else np.zeros((0, *width), dtype=dtype)

    return Shard(
        planes=join("planes", np.dtype(np.uint64), (COMPACT_PLANES,)),
        scalars=join("scalars", np.dtype(np.float32), (NUM_SCALARS,)),
        policy_offsets=np.concatenate(offsets),
        policy_indices=join("policy_indices", np.dtype(np.int16)),
        policy_probs=join("policy_probs", np.dtype(np.float32)),
        results=join("results", np.dtype(np.int8)),
        game=np.concatenate([np.full(len(r["results"]), i, np.int32) for i, r in enumerate(records)])
        if records else np.zeros(0, np.int32),
        ply=join("plies_of_samples", np.dtype(np.int16)),
        root_values=join("root_values", np.dtype(np.float32)),
        games=games,
        meta=dict(meta or {}),
        policy_wins=join("policy_wins", np.dtype(np.float32))
        if records and all("policy_wins" in r for r in records) else None,
        weights_steps=join(WEIGHTS_STEPS, np.dtype(np.int32))
        if records and all(WEIGHTS_STEPS in r for r in records) else None,
        policy_surprise=join(POLICY_SURPRISE, np.dtype(np.float32))
        if records and all(POLICY_SURPRISE in r for r in records) else None,
    )


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def encode_shard(shard: Shard) -> bytes:
    """The shard as the bytes of a compressed .npz file."""
    meta = {"version": SHARD_VERSION, "created_at": time.time(), **shard.meta}
    arrays = {
        "version": np.array([SHARD_VERSION], dtype=np.int64),
        **{name: getattr(shard, name) for name in (*SAMPLE_ARRAYS, *POLICY_ARRAYS, "policy_offsets")},
        "games": np.frombuffer(json.dumps(shard.games).encode(), dtype=np.uint8),
        "meta": np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8),
    }
    if shard.policy_wins is not None:
        arrays[POLICY_WINS] = shard.policy_wins
    if shard.weights_steps is not None:
        arrays[WEIGHTS_STEPS] = shard.weights_steps
    if shard.policy_surprise is not None:
        arrays[POLICY_SURPRISE] = shard.policy_surprise
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def write_shard(path: str | os.PathLike[str], shard: Shard) -> None:
    """Writes the shard atomically (temporary name, then rename); checks it first.

    Raises:
        ShardError: the shard breaks the format (a bug in the writer).
    """
    validate(shard, str(path))
    atomic_write_bytes(path, encode_shard(shard))


def shard_name(writer: str) -> str:
    """A fresh shard file name: write time (ns), the writer's name, a random tag."""
    safe = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in writer)[:40] or "writer"
    return f"{time.time_ns():020d}-{safe}-{uuid.uuid4().hex[:8]}{SHARD_SUFFIX}"


def list_shards(directory: str | os.PathLike[str]) -> list[Path]:
    """Complete shard files in ``directory``, oldest first (temporary files are skipped)."""
    if not Path(directory).is_dir():
        return []
    return sorted(complete_files(directory, f"*{SHARD_SUFFIX}"), key=lambda p: p.name)


def read_shard(path: str | os.PathLike[str]) -> Shard:
    """Reads and checks a shard file.

    Raises:
        ShardError: the file is missing, truncated, not a shard, of another
            version, or breaks the format; the message says which.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise ShardError(f"{path}: not a readable shard ({type(error).__name__}: {error})") from None
    version = arrays.get("version")
    if version is None or version.shape != (1,) or int(version[0]) != SHARD_VERSION:
        raise ShardError(f"{path}: shard version {None if version is None else version.tolist()}, "
                         f"this program reads version {SHARD_VERSION}")
    missing = [name for name in (*SAMPLE_ARRAYS, *POLICY_ARRAYS, "policy_offsets", "games", "meta")
               if name not in arrays]
    if missing:
        raise ShardError(f"{path}: missing arrays {missing}")
    try:
        games = json.loads(arrays["games"].tobytes().decode())
        meta = json.loads(arrays["meta"].tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ShardError(f"{path}: unreadable metadata ({error})") from None
    shard = Shard(**{name: arrays[name] for name in (*SAMPLE_ARRAYS, *POLICY_ARRAYS, "policy_offsets")},
                  games=games, meta=meta, policy_wins=arrays.get(POLICY_WINS),
                  weights_steps=arrays.get(WEIGHTS_STEPS), policy_surprise=arrays.get(POLICY_SURPRISE))
    validate(shard, str(path))
    return shard


def read_shard_games(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Reads only the game list of a shard (no sample array is decompressed).

    Raises:
        ShardError: the file is missing, not a shard, of another version, or
            its game list is unreadable.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            version = archive["version"] if "version" in archive.files else None
            raw = archive["games"] if "games" in archive.files else None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise ShardError(f"{path}: not a readable shard ({type(error).__name__}: {error})") from None
    if version is None or version.shape != (1,) or int(version[0]) != SHARD_VERSION:
        raise ShardError(f"{path}: shard version {None if version is None else version.tolist()}, "
                         f"this program reads version {SHARD_VERSION}")
    if raw is None:
        raise ShardError(f"{path}: missing arrays ['games']")
    try:
        games = json.loads(raw.tobytes().decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ShardError(f"{path}: unreadable metadata ({error})") from None
    if not isinstance(games, list) or not all(isinstance(game, dict) for game in games):
        raise ShardError(f"{path}: the game list is not a list of objects")
    return games


def game_ids(games: Sequence[Mapping[str, Any]], shard_file: str) -> list[str]:
    """Gets each game's stable id: its ``game_id``, else (older shards) ``<file name>#<index>``.

    Older pretraining shards stamped the id as ``id``; it is read too, so their
    games keep their side of the validation split.
    """
    return [str(game.get("game_id") or game.get("id") or f"{shard_file}#{index}") for index, game in enumerate(games)]


def read_shard_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Reads only the ``meta`` object of a shard file (cheap: one small member of the archive).

    Raises:
        ShardError: the file is missing, not a shard, or its meta is unreadable.
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            raw = archive["meta"]
        meta = json.loads(raw.tobytes().decode())
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError, UnicodeDecodeError) as error:
        raise ShardError(f"{path}: no readable shard meta ({type(error).__name__}: {error})") from None
    if not isinstance(meta, dict):
        raise ShardError(f"{path}: the shard meta is not a JSON object")
    return meta


def value_targets(shard: Shard) -> np.ndarray:
    """Gets the value target of every sample [S]: ``results`` (int8), or ``root_values`` (float32) when
    the shard's meta says so, or NaN (float32) for a shard without value targets (see the module docstring)."""
    if shard.meta.get("value_target") == VALUE_NONE:
        return np.full(len(shard.results), np.nan, dtype=np.float32)
    if shard.meta.get("value_target") == VALUE_FROM_ROOT:
        return np.clip(shard.root_values, -1.0, 1.0).astype(np.float32)
    return shard.results


def validate(shard: Shard, source: str = "shard") -> None:
    """Checks dtypes, shapes and the invariants of the format.

    Raises:
        ShardError: naming ``source`` and the broken rule.
    """
    samples = len(shard.results)
    for name, (dtype, width) in SAMPLE_ARRAYS.items():
        array = getattr(shard, name)
        if array.dtype != dtype or array.shape != (samples, *width):
            raise ShardError(f"{source}: {name} is {array.dtype}{list(array.shape)}, "
                             f"expected {dtype}{[samples, *width]}")
    offsets = shard.policy_offsets
    if offsets.dtype != np.int64 or offsets.shape != (samples + 1,) or offsets[0] != 0 \
            or np.any(np.diff(offsets) < 1):
        raise ShardError(f"{source}: policy_offsets must start at 0 and grow by at least 1 per sample")
    entries = int(offsets[-1])
    for name, dtype in POLICY_ARRAYS.items():
        array = getattr(shard, name)
        if array.dtype != dtype or array.shape != (entries,):
            raise ShardError(f"{source}: {name} is {array.dtype}{list(array.shape)}, expected {dtype}[{entries}]")
    wins = shard.policy_wins
    if wins is not None and (wins.dtype != np.float32 or wins.shape != (entries,)):
        raise ShardError(f"{source}: {POLICY_WINS} is {wins.dtype}{list(wins.shape)}, expected float32[{entries}]")
    steps = shard.weights_steps
    if steps is not None and (steps.dtype != np.int32 or steps.shape != (samples,)):
        raise ShardError(f"{source}: {WEIGHTS_STEPS} is {steps.dtype}{list(steps.shape)}, expected int32[{samples}]")
    surprise = shard.policy_surprise
    if surprise is not None and (surprise.dtype != np.float32 or surprise.shape != (samples,)
                                 or not np.all(surprise >= 0)):  # (NaN fails too)
        raise ShardError(f"{source}: {POLICY_SURPRISE} must be float32[{samples}] of values >= 0, got "
                         f"{surprise.dtype}{list(surprise.shape)}")
    if entries and (shard.policy_indices.min() < 0 or shard.policy_indices.max() >= NUM_MOVES):
        raise ShardError(f"{source}: a policy index lies outside 0..{NUM_MOVES - 1}")
    if samples:
        sums = np.add.reduceat(shard.policy_probs.astype(np.float64), offsets[:-1])
        if not np.all(np.abs(sums - 1.0) < 1e-3) or np.any(shard.policy_probs < 0):
            raise ShardError(f"{source}: a policy does not sum to 1")
    if not np.isin(shard.results, (-1, 0, 1)).all():
        raise ShardError(f"{source}: results must be -1, 0 or 1")
    if samples and (shard.game.min() < 0 or shard.game.max() >= len(shard.games)):
        raise ShardError(f"{source}: a sample points at a game that is not in the shard")


def concatenate(shards: Iterable[Shard]) -> Shard:
    """One shard holding the samples and games of several (game indices renumbered).

    Its meta keeps ``value_target`` when every shard has the same (so value_targets reads the joined
    shard as it reads each part).

    Raises:
        ShardError: the shards have different value targets (join their value_targets instead).
    """
    shards = list(shards)
    games: list[dict[str, Any]] = []
    offsets = [np.zeros(1, dtype=np.int64)]
    game_columns, base = [], 0
    for shard in shards:
        offsets.append(shard.policy_offsets[1:] + base)
        base += int(shard.policy_offsets[-1])
        game_columns.append(shard.game + len(games))
        games.extend(shard.games)

    def join(name: str) -> np.ndarray:
        dtype, width = SAMPLE_ARRAYS[name] if name in SAMPLE_ARRAYS else (POLICY_ARRAYS[name], ())
        parts = [getattr(s, name) for s in shards]
        return np.concatenate(parts) if parts else np.zeros((0, *width), dtype=dtype)

    arrays: dict[str, Any] = {name: join(name) for name in (*SAMPLE_ARRAYS, *POLICY_ARRAYS) if name != "game"}
    wins = [s.policy_wins for s in shards if s.policy_wins is not None]
    steps = [s.weights_steps for s in shards if s.weights_steps is not None]
    surprise = [s.policy_surprise for s in shards if s.policy_surprise is not None]
    targets = {s.meta.get("value_target") for s in shards}
    if len(targets) > 1:
        raise ShardError(f"cannot join shards with different value targets: {sorted(map(str, targets))}")
    meta = {"value_target": targets.pop()} if targets and None not in targets else {}
    return Shard(
        **arrays,
        game=np.concatenate(game_columns) if game_columns else np.zeros(0, np.int32),
        policy_offsets=np.concatenate(offsets),
        games=games,
        policy_wins=np.concatenate(wins) if wins and len(wins) == len(shards) else None,
        weights_steps=np.concatenate(steps) if steps and len(steps) == len(shards) else None,
        policy_surprise=np.concatenate(surprise) if surprise and len(surprise) == len(shards) else None,
        meta=meta,
    )
