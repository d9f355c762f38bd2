"""What a match leaves: each game's record (its JSON line and PGN game) and the match's result.

eval.match plays the games and writes these records to `<match_id>.jsonl`
and `<match_id>.pgn` (the files' text is pgn_text's and jsonl_text's, added
game by game with append_text); a MatchResult counts them from agent A's
side, and format_summary puts its score and Elo difference on one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chess
import chess.pgn

from alphazero.chess.pgn import termination_tags
from eval.elo import Summary, match_summary

DRAW = "1/2-1/2"


@dataclass
class GameRecord:
    """One finished game of a match, from the initial position (opening moves included).

    `values[i]` is the value the mover reported for ply i (None for opening
    moves and agents without values); `started`/`finished` are ISO 8601 UTC.
    """

    match_id: str
    round: int
    opening: str
    opening_plies: int
    white: str
    black: str
    a_is_white: bool
    result: str
    termination: str
    moves: list[str]
    values: list[float | None]
    started: str
    finished: str
    seconds: list[float | None] = field(default_factory=list)  # clocked games: each move's time, else empty
    clocks: list[float | None] = field(default_factory=list)  # ... and the mover's clock after it
    time_control: str | None = None  # the clock, e.g. '10+0.1'
    start_fen: str = chess.STARTING_FEN  # where `moves` start: an EPD or PGN book's position, else the initial one

    @property
    def plies(self) -> int:
        return len(self.moves)

    @property
    def score_a(self) -> float:
        """Returns agent A's points: 1, 0.5 or 0."""
        white_points = {"1-0": 1.0, "0-1": 0.0, DRAW: 0.5}[self.result]
        return white_points if self.a_is_white else 1.0 - white_points

    def to_json(self) -> dict[str, Any]:
        """Returns the JSON-lines object for this game."""
        return {
            "match_id": self.match_id,
            "round": self.round,
            "white": self.white,
            "black": self.black,
            "agent_a": self.white if self.a_is_white else self.black,
            "agent_b": self.black if self.a_is_white else self.white,
            "a_colour": "white" if self.a_is_white else "black",
            "opening": self.opening,
            "opening_plies": self.opening_plies,
            "result": self.result,
            "score_a": self.score_a,
            "termination": self.termination,
            "plies": self.plies,
            "moves": self.moves,
            "values": self.values,
            "started": self.started,
            "finished": self.finished,
            **({"time_control": self.time_control, "seconds": self.seconds, "clocks": self.clocks}
               if self.time_control is not None else {}),
            **({"start_fen": self.start_fen} if self.start_fen != chess.STARTING_FEN else {}),
        }

    def to_pgn(self) -> chess.pgn.Game:
        """Returns the game as a python-chess PGN game with the match headers."""
        game = chess.pgn.Game()
        if self.start_fen != chess.STARTING_FEN:
            game.setup(self.start_fen)  # the FEN and SetUp headers
        game.headers.update(
            {
                "Event": self.match_id,
                "Date": self.started[:10].replace("-", "."),
                "Round": str(self.round),
                "White": self.white,
                "Black": self.black,
                "Result": self.result,
                "Opening": self.opening,
                **termination_tags(self.termination),
                "PlyCount": str(self.plies),
                **({"TimeControl": self.time_control} if self.time_control else {}),
            }
        )
        node: chess.pgn.GameNode = game
        for ply, uci in enumerate(self.moves):
            node = node.add_variation(chess.Move.from_uci(uci))
            if ply < len(self.clocks) and self.clocks[ply] is not None:
                node.set_clock(self.clocks[ply])
        return game


def pgn_text(records: Sequence[GameRecord]) -> str:
    """The PGN file's text for these games, in this order (a blank line after each game)."""
    return "".join(str(r.to_pgn()) + "\n\n" for r in records)


def jsonl_text(records: Sequence[GameRecord]) -> str:
    """The JSON-lines file's text for these games, in this order (one line each)."""
    return "".join(json.dumps(r.to_json()) + "\n" for r in records)


def read_game_records(path: Path) -> list[dict[str, Any]]:
    """The games of a match's JSONL file (``agent_a``, ``agent_b``, ``score_a`` and the rest), [] without the file;
    a line cut by a crash is left out (its game is played again)."""
    records = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and {"agent_a", "agent_b", "score_a"} <= record.keys():
            records.append(record)
    return records


def append_text(path: Path, text: str) -> None:
    """Adds ``text`` (whole games or lines) at the end of the file ``path`` in one write, synced to the disk.

    One write of complete records (O_APPEND) is what lets a reader of the
    file see whole records only, and a failed or short write (a full disk) is
    cut off again, so that the next record does not start in the middle of a
    torn one.

    Raises:
        OSError: the file is missing or cannot be written (its filename is ``path``).
    """
    data = text.encode("utf-8")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    except OSError as error:
        raise OSError(error.errno, error.strerror, str(path)) from None
    try:
        size = os.fstat(fd).st_size
        try:
            if os.write(fd, data) != len(data):  # only a full disk writes less to a file
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
            os.fsync(fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise OSError(error.errno, error.strerror, str(path)) from None
    finally:
        os.close(fd)


@dataclass
class MatchResult:
    """A finished (or interrupted) match: the games in round order, counted from agent A's side."""

    match_id: str
    agent_a: str
    agent_b: str
    games: list[GameRecord]
    pgn_path: Path | None = None
    jsonl_path: Path | None = None

    @property
    def wins(self) -> int:
        return sum(g.score_a == 1.0 for g in self.games)

    @property
    def draws(self) -> int:
        return sum(g.score_a == 0.5 for g in self.games)

    @property
    def losses(self) -> int:
        return sum(g.score_a == 0.0 for g in self.games)

    @property
    def summary(self) -> Summary:
        return match_summary(self.wins, self.draws, self.losses)


def _format_elo(x: float | None) -> str:
    if x is None:
        return "?"
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return f"{round(x):+d}"  # round first: f"{-0.3:+.0f}" would print "-0"


def format_summary(result: MatchResult) -> str:
    """Formats a result on one line.

    Example: "A vs B: +12 =5 -3, score 67.5%, Elo +127 (95%: +38..+231), LOS 99.4%".
    """
    s = result.summary
    head = f"{result.agent_a} vs {result.agent_b}: +{result.wins} ={result.draws} -{result.losses}"
    if s.score is None:
        return f"{head}, no games"
    return (
        f"{head}, score {100 * s.score:.1f}%, Elo {_format_elo(s.elo)} "
        f"(95%: {_format_elo(s.elo_low)}..{_format_elo(s.elo_high)}), LOS {100 * s.los:.1f}%"
    )
