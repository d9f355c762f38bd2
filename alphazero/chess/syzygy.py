"""Syzygy endgame tablebases through python-chess (chess.syzygy): a SyzygyPath opened, a position's result,
Stockfish's ranking of root moves by distance to zeroing, and a game adjudicated by the tables.

WDL (win/draw/loss) is the result for the side to move: 2 a win, 1 a win
that the fifty-move rule turns into a draw (cursed), 0 a draw, -1 a loss
saved by the fifty-move rule (blessed), -2 a loss. DTZ is the distance in
plies to the next zeroing move (a capture or a pawn move) of a perfect game,
positive when the side to move wins. The tables hold positions of a few
pieces, kings included, without castling rights: `Tables.open(path).wdl(board)`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import chess
import chess.syzygy

from alphazero.errors import UserError

MAX_DTZ = 1 << 18
"""Stockfish's MAX_DTZ: the rank scale of root moves (Tablebases::root_probe)."""

RULE50_PLIES = 100
"""Plies without a zeroing move after which a game is drawn (the fifty-move rule)."""

TABLE_SUFFIX = ".rtbw"
"""The WDL table files whose names give the tables' material, e.g. KQvK.rtbw."""


class SyzygyPathError(UserError):
    """A SyzygyPath names a folder that does not exist, cannot be read, or holds no tables."""


def split_path(text: str) -> list[str]:
    """Splits a SyzygyPath into its folders: separated by os.pathsep (':', or ';' on Windows) as Stockfish's.

    >>> split_path("/tb/345" + os.pathsep + "/tb/6" + os.pathsep)
    ['/tb/345', '/tb/6']
    """
    return [part.strip() for part in text.split(os.pathsep) if part.strip()]


def piece_count(board: chess.BaseBoard) -> int:
    """The pieces on the board, kings and pawns included."""
    return chess.popcount(board.occupied)


def dtz_before_zeroing(wdl: int) -> int:
    """The DTZ of a zeroing move that leads to a position of ``wdl`` for the mover (Stockfish's
    dtz_before_zeroing): a win zeroes at once (1), a cursed one after the counter's reset (101).

    >>> [dtz_before_zeroing(wdl) for wdl in (2, 1, 0, -1, -2)]
    [1, 101, 0, -101, -1]
    """
    return {2: 1, 1: 101, 0: 0, -1: -101, -2: -1}[wdl]


def rank_of(dtz: int, rule50: int, repeated: bool) -> int:
    """Stockfish's rank of a root move of ``dtz`` (the mover's, counted from the root) at a fifty-move counter of
    ``rule50`` (Tablebases::root_probe, ranking by DTZ): wins within the rule first, the faster the better; then
    wins the rule spoils, draws, losses the rule saves, and losses, the slower the better.

    >>> rank_of(3, 0, False) > rank_of(5, 0, False) > rank_of(60, 50, False) > rank_of(0, 0, False)
    True
    >>> rank_of(0, 0, False) > rank_of(-101, 0, False) > rank_of(-9, 0, False) > rank_of(-3, 0, False)
    True
    """
    if dtz > 0:
        if dtz + rule50 <= RULE50_PLIES - 1 and not repeated:
            return MAX_DTZ - dtz
        return MAX_DTZ // 2 - (dtz + rule50)
    if dtz < 0:
        if -dtz * 2 + rule50 < RULE50_PLIES:
            return -MAX_DTZ - dtz
        return -MAX_DTZ // 2 + (-dtz + rule50)
    return 0


def wdl_of_rank(rank: int) -> int:
    """The result for the mover that a root move's rank stands for, under the fifty-move rule: 1 a win, 0 a
    draw (wins the rule spoils and losses it saves included), -1 a loss.

    >>> wdl_of_rank(MAX_DTZ - 3), wdl_of_rank(MAX_DTZ // 2 - 120), wdl_of_rank(0), wdl_of_rank(-MAX_DTZ + 9)
    (1, 0, 0, -1)
    """
    if rank > MAX_DTZ // 2:
        return 1
    if rank < -MAX_DTZ // 2:
        return -1
    return 0


@dataclass(frozen=True)
class RootProbe:
    """What the tables say of a root position: the moves that keep its best result (UCI, the root's legal
    moves' order), that result for the side to move under the fifty-move rule (1, 0 or -1), the kept moves'
    DTZ from the root (0 for a draw), and the table probes it took."""

    moves: tuple[str, ...]
    result: int
    dtz: int
    probes: int


class Tables:
    """Syzygy tables opened from one or more folders; counts its probes (`hits`, the engine's tbhits).

    Open them with Tables.open; probing is python-chess's, by Ronald de Man's
    algorithm. Not thread-safe: probe from one thread at a time.
    """

    def __init__(self, tablebase: chess.syzygy.Tablebase, folders: list[str], max_pieces: int) -> None:
        self._tablebase = tablebase
        self.folders = folders
        self.max_pieces = max_pieces
        """The most pieces of a position the tables hold (the largest table's, kings included)."""
        self.hits = 0

    @classmethod
    def open(cls, path: str | Path) -> Tables:
        """Opens every table in the folders of a SyzygyPath (os.pathsep-separated).

        Raises:
            SyzygyPathError: the path is empty, a folder does not exist or cannot be read, or no folder holds a
                table.
        """
        folders = split_path(str(path))
        if not folders:
            raise SyzygyPathError("the Syzygy path is empty")
        tablebase = chess.syzygy.Tablebase()
        names: list[str] = []
        for folder in folders:
            names += _table_names(folder)
            tablebase.add_directory(folder)
        if not names:
            tablebase.close()
            raise SyzygyPathError(f"no Syzygy tables (*{TABLE_SUFFIX}) in {str(path)!r}")
        return cls(tablebase, folders, max(len(name) - 1 for name in names))  # 'KQvK': 3 pieces and a 'v'

    def describe(self) -> str:
        """Says what was opened, e.g. `Syzygy tables up to 4 pieces from /tb`."""
        return f"Syzygy tables up to {self.max_pieces} pieces from {os.pathsep.join(self.folders)}"

    def covers(self, board: chess.Board) -> bool:
        """Checks whether the tables can hold the position: few enough pieces and no castling rights."""
        return piece_count(board) <= self.max_pieces and not board.castling_rights

    def wdl(self, board: chess.Board) -> int | None:
        """The position's WDL for the side to move, or None where no table holds it (a hit counted otherwise)."""
        if not self.covers(board):
            return None
        found = self._tablebase.get_wdl(board)
        self.hits += found is not None
        return found

    def dtz(self, board: chess.Board) -> int | None:
        """The position's DTZ for the side to move, or None where no table holds it (a hit counted otherwise)."""
        if not self.covers(board):
            return None
        found = self._tablebase.get_dtz(board)
        self.hits += found is not None
        return found

    def root(self, board: chess.Board) -> RootProbe | None:
        """Ranks the root's moves as Stockfish does (rank_of) and keeps those of the best rank; None where the
        tables do not hold the position or a move's position.

        The moves' WDL is probed first (cheap), and DTZ only for the moves of the best WDL, where the ranks
        differ: the DTZ of a python-chess probe costs milliseconds, the WDL a tenth of one.
        """
        moves = list(board.legal_moves)
        if not moves or not self.covers(board):
            return None
        before = self.hits
        results = {move: self._mover_wdl(board, move) for move in moves}
        if any(result is None for result in results.values()):
            return None
        best = max(result for result in results.values() if result is not None)
        ranks: dict[chess.Move, int] = {}
        for move, result in results.items():
            if result != best:
                continue
            dtz = self._mover_dtz(board, move) if best != 0 else 0
            if dtz is None:
                return None
            ranks[move] = rank_of(dtz, board.halfmove_clock, board.is_repetition(2))
        top = max(ranks.values())
        kept = tuple(move.uci() for move in moves if ranks.get(move) == top)
        return RootProbe(kept, wdl_of_rank(top), _dtz_of_rank(top), self.hits - before)

    def _mover_wdl(self, board: chess.Board, move: chess.Move) -> int | None:
        """The WDL of the position after ``move`` for the side that made it (a mate is a win)."""
        board.push(move)
        try:
            if board.is_checkmate():
                return 2
            found = self.wdl(board)
            return None if found is None else -found
        finally:
            board.pop()

    def _mover_dtz(self, board: chess.Board, move: chess.Move) -> int | None:
        """The DTZ of ``move`` for its mover, counted from before it (Stockfish's root_probe)."""
        board.push(move)
        try:
            if board.is_checkmate():
                return 1
            if board.halfmove_clock == 0:  # a zeroing move: its DTZ is the result it leads to
                found = self.wdl(board)
                return None if found is None else dtz_before_zeroing(-found)
            if board.is_repetition(3) or board.halfmove_clock >= RULE50_PLIES:
                return 0
            found = self.dtz(board)
            if found is None:
                return None
            return -found + 1 if found < 0 else -found - 1 if found > 0 else 0
        finally:
            board.pop()

    def outcome(self, board: chess.Board) -> chess.Outcome | None:
        """The result the tables give a game at this position under the fifty-move rule (for adjudication), or
        None where they do not hold it. A win is a win only if its DTZ fits in the moves the rule leaves."""
        found = self.wdl(board)
        if found is None:
            return None
        winner: chess.Color | None = None
        if abs(found) == 2:
            dtz = self.dtz(board)
            if dtz is not None and abs(dtz) + board.halfmove_clock <= RULE50_PLIES:
                winner = board.turn if found > 0 else not board.turn
        return chess.Outcome(chess.Termination.VARIANT_WIN if winner is not None else chess.Termination.VARIANT_DRAW,
                             winner)

    def close(self) -> None:
        """Closes the table files."""
        self._tablebase.close()


def _dtz_of_rank(rank: int) -> int:
    """The DTZ a rank of rank_of stands for where it was ranked by DTZ (wins and losses within the rule), else 0."""
    if rank > MAX_DTZ // 2:
        return MAX_DTZ - rank
    if rank < -MAX_DTZ // 2:
        return -(MAX_DTZ + rank)
    return 0


def _table_names(folder: str) -> list[str]:
    """The tables' material names (KQvK) of the WDL files in a folder.

    Raises:
        SyzygyPathError: the folder does not exist or cannot be read.
    """
    try:
        entries: Iterable[str] = os.listdir(folder)
    except FileNotFoundError:
        raise SyzygyPathError(f"no such folder: {folder!r}") from None
    except NotADirectoryError:
        raise SyzygyPathError(f"not a folder: {folder!r}") from None
    except OSError as error:
        raise SyzygyPathError(f"cannot read {folder!r}: {error.strerror or error}") from None
    return [name[: -len(TABLE_SUFFIX)] for name in entries if name.endswith(TABLE_SUFFIX)]


__all__ = ["MAX_DTZ", "RootProbe", "SyzygyPathError", "Tables", "dtz_before_zeroing", "piece_count", "rank_of",
           "split_path", "wdl_of_rank"]
