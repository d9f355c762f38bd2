"""Finished self-play games to disk: shard files for the learner, PGN for people.

A GameWriter collects the records of finished games and writes them, a
shard's worth at a time, to ``run/selfplay/`` (the training data) and
``run/games/`` (the same games as PGN), each written to a temporary name and
renamed. Games not yet written are lost if the process dies; a file on disk
is always whole.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from alphazero.pgn import termination_tags
from alphazero.rundir import RunDir, atomic_write_text
from alphazero.shards import shard_from_records, shard_name, write_shard


def game_to_pgn(record: Mapping[str, Any], *, event: str = "alphazero self-play", round_number: int = 1) -> str:
    """The game of a self-play record as PGN text (headers, moves, result; the end as alphazero.pgn says)."""
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


class GameWriter:
    """Buffers finished games and writes them as one shard (and one PGN file) per ``shard_games`` games."""

    def __init__(self, run: RunDir, writer: str, *, shard_games: int, save_pgn: bool = True) -> None:
        self.run = run
        self.writer = writer
        self.shard_games = shard_games
        self.save_pgn = save_pgn
        self.pending: list[dict[str, Any]] = []
        self.shards_written = 0
        self.games_written = 0

    def add(self, record: dict[str, Any]) -> Path | None:
        """Adds a finished game; returns the shard's path when this completes one."""
        self.pending.append(record)
        if len(self.pending) >= self.shard_games:
            return self.flush()
        return None

    def flush(self) -> Path | None:
        """Writes whatever games are buffered (none: nothing); returns the shard's path."""
        if not self.pending:
            return None
        name = shard_name(self.writer)
        path = self.run.selfplay / name
        write_shard(path, shard_from_records(self.pending, {"writer": self.writer}))
        if self.save_pgn:
            pgn = "\n\n".join(game_to_pgn(record, round_number=self.games_written + i + 1)
                              for i, record in enumerate(self.pending))
            atomic_write_text(self.run.games / name.replace(".npz", ".pgn"), pgn + "\n")
        self.games_written += len(self.pending)
        self.shards_written += 1
        self.pending = []
        return path

