"""Finished self-play games as files: shard files for the learner, PGN for people.

A GameWriter collects the records of finished games and turns each shard's
worth into a ShardFile: its name (chosen here, once), the bytes of its
``.npz`` file and the PGN text of its games. Where the file goes is the
caller's choice: ``store_shard_file`` writes it into ``run/selfplay/`` (the
training data) and ``run/games/`` (the PGN), each written to a temporary name
and renamed, in the actor itself (transport 'disk') or in the shard sink
that the actors send it to through Ray (transport 'ray', selfplay.sink).
An actor runs its GameWriter on a thread of its own, never on the thread
that searches (selfplay.shard_writer).
Games not yet written are lost if the process dies; a file on disk is always
whole, and writing the same ShardFile twice leaves one file.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from alphazero.chess.pgn import termination_tags
from alphazero.store.rundir import RunDir, atomic_write_bytes, atomic_write_text, is_temporary
from alphazero.store.shards import (
    SHARD_SUFFIX,
    encode_shard,
    shard_from_records,
    shard_name,
    validate,
)


def game_to_pgn(record: Mapping[str, Any], *, event: str = "alphazero self-play", round_number: int = 1) -> str:
    """The game of a self-play record as PGN text (headers, moves, result; the end as alphazero.chess.pgn says)."""
    game = chess.pgn.Game()
    board = chess.Board(record["start_fen"])
    if record["start_fen"] != chess.STARTING_FEN:
        game.setup(board)
    step = record.get("weights_step", 0)
    game.headers.update({
        "Event": event,
        "Site": "alphazero",
        "Date": datetime.date.today().strftime("%Y.%m.%d"),
        "Round": str(round_number),
        "White": f"alphazero step {step}",
        "Black": f"alphazero step {step}",
        "Result": record["result"],
        **termination_tags(record["termination"]),
        "PlyCount": str(record["plies"]),
    })
    game.headers["WeightsStep"] = str(step)
    node: chess.pgn.GameNode = game
    for uci in record["moves"]:
        node = node.add_variation(chess.Move.from_uci(uci))
    return str(game)


@dataclass(frozen=True)
class ShardFile:
    """A finished shard as it travels: its file name in run/selfplay, its .npz bytes and its games' PGN."""

    name: str            # '<time ns>-<writer>-<random>.npz' (alphazero.store.shards.shard_name)
    data: bytes          # the .npz file, as alphazero.store.shards.write_shard writes it
    pgn: str | None      # the games as PGN for run/games/<stem>.pgn; None: no PGN file
    games: int


def build_shard_file(records: Sequence[Mapping[str, Any]], writer: str, *, first_round: int = 1,
                     save_pgn: bool = True) -> ShardFile:
    """Builds the shard file of finished-game records, named now, checked before it is encoded.

    Raises:
        ShardError: the records break the shard format (a bug in the writer).
    """
    name = shard_name(writer)
    shard = shard_from_records(records, {"writer": writer})
    validate(shard, name)
    pgn = None
    if save_pgn:
        pgn = "\n\n".join(game_to_pgn(record, round_number=first_round + i) for i, record in enumerate(records)) + "\n"
    return ShardFile(name, encode_shard(shard), pgn, len(records))


def check_shard_file_name(name: str) -> None:
    """Checks that ``name`` is a complete shard's plain file name (no folder, not a temporary).

    Raises:
        ValueError: anything else (a name that would write outside run/selfplay, or be skipped by readers).
    """
    if not name.endswith(SHARD_SUFFIX) or Path(name).name != name or name in (".", "..") or is_temporary(name):
        raise ValueError(f"not a shard file name: {name!r}")


def store_shard_file(run: RunDir, shard: ShardFile) -> Path:
    """Writes the shard into run/selfplay and its PGN into run/games, each atomically; returns the shard's path.

    Idempotent: storing the same ShardFile again replaces both files with the same bytes.

    Raises:
        ValueError: the name is not a plain shard file name.
        OSError: the folders are missing or unwritable, or the disk is full.
    """
    check_shard_file_name(shard.name)
    path = run.selfplay / shard.name
    atomic_write_bytes(path, shard.data)
    if shard.pgn is not None:
        atomic_write_text(run.games / shard.name.replace(SHARD_SUFFIX, ".pgn"), shard.pgn)
    return path


class GameWriter:
    """Buffers finished games and hands them to ``output`` as one ShardFile per ``shard_games`` games.

    A shard goes out early, with the games it has, when it holds the writer's
    first game (the learner's first data as soon as it exists) or when its
    oldest game has waited ``shard_seconds`` (checked by ``add`` and ``tick``;
    0: never early).
    """

    def __init__(self, output: Callable[[ShardFile], None], writer: str, *, shard_games: int,
                 save_pgn: bool = True, shard_seconds: float = 0.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.output = output
        self.writer = writer
        self.shard_games = shard_games
        self.save_pgn = save_pgn
        self.shard_seconds = shard_seconds
        self.clock = clock
        self.pending: list[dict[str, Any]] = []
        self.oldest = 0.0  # clock() when the oldest pending game was added
        self.shards_written = 0
        self.games_written = 0

    def add(self, record: dict[str, Any]) -> ShardFile | None:
        """Adds a finished game; returns the shard handed to the output when this completes one (or sends it
        early: the first game, or one that waited too long)."""
        if not self.pending:
            self.oldest = self.clock()
        self.pending.append(record)
        if len(self.pending) >= self.shard_games or self.games_written == 0:
            return self.flush()
        return self.tick()

    def tick(self) -> ShardFile | None:
        """Hands the buffered games to the output when the oldest has waited ``shard_seconds``; returns that
        shard, else None."""
        if self.pending and self.shard_seconds > 0 and self.clock() - self.oldest >= self.shard_seconds:
            return self.flush()
        return None

    def flush(self) -> ShardFile | None:
        """Hands whatever games are buffered to the output (none: nothing); returns that shard."""
        if not self.pending:
            return None
        shard = build_shard_file(self.pending, self.writer, first_round=self.games_written + 1,
                                 save_pgn=self.save_pgn)
        self.output(shard)
        self.games_written += len(self.pending)
        self.shards_written += 1
        self.pending = []
        return shard
