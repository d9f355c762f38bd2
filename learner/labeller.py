"""The labeller: one Stockfish process, spoken to over UCI, that scores a position's moves and labels it.

Stockfish runs with one thread, a fixed hash that is cleared (``ucinewgame``)
before every position, and a node limit, so its scores do not depend on
timing: the same position, nodes and Stockfish binary give the same label.
learner.label_targets turns its scores into targets.

Example::

    labeller = Labeller(LabelSettings(nodes=40, positions=1))
    legal = [move.uci() for move in chess.Board().legal_moves]
    policy, value, wins = labeller.label(chess.STARTING_FEN, [], legal)
    labeller.close()
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import time
from collections.abc import Sequence

import chess
import chess.engine
import numpy as np

from alphazero.chess.scores import win_probability
from alphazero.chess.stockfish import require_stockfish
from alphazero.errors import UserError
from learner.label_settings import LabelSettings
from learner.label_targets import mate_bonus, policy_target

__all__ = ["ANSWER_SECONDS", "START_SECONDS", "Labeller"]

START_SECONDS = 30.0  # the most Stockfish may take to start and answer the UCI handshake
ANSWER_SECONDS = 120.0  # the most one position's search may take (far more than the usual node counts need)


class Labeller:
    """One Stockfish process (one thread, fixed hash) that labels positions one at a time.

    It speaks UCI itself and reads of each MultiPV line only its last score
    and first move: python-chess's client parses every move of every line of
    every depth, which cost more than Stockfish's search, for the same labels
    (EXPERIMENTS.md, "A stronger built-in network, the data").
    The tests hold its labels to python-chess's ``chess.engine.analyse``.

    Raises:
        UserError: Stockfish is missing or does not start.
    """

    def __init__(self, settings: LabelSettings, path: str | None = None) -> None:
        self.settings = settings
        path = path or require_stockfish()
        self._multipv = 0
        self._pending = b""  # what Stockfish wrote after the last line a caller waited for
        try:
            self._process = subprocess.Popen([path], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, bufsize=0)
        except OSError as error:
            raise UserError(f"Stockfish at {path} did not start: {error.strerror or error}") from None
        try:
            self._send("uci")
            ids = self._until("uciok", START_SECONDS)
            self._send(f"setoption name Threads value 1\nsetoption name Hash value {settings.pretrain.hash_mb}")
        except UserError as error:
            self.close()
            raise UserError(f"Stockfish at {path} did not start: {error}") from None
        names = [line[len("id name "):].strip() for line in ids if line.startswith("id name ")]
        self.name = names[0] if names else "unknown engine"

    def _send(self, text: str) -> None:
        assert self._process.stdin is not None
        try:
            self._process.stdin.write((text + "\n").encode())
        except OSError:
            raise UserError("it exited") from None

    def _until(self, prefix: str, seconds: float) -> list[str]:
        """Reads lines up to the first that starts with ``prefix``; returns them, that one included.

        Reads the pipe in large pieces and splits them in one call: a search writes hundreds of lines, and
        a line at a time through Python cost more than Stockfish's search.
        """
        assert self._process.stdout is not None
        descriptor, wanted = self._process.stdout.fileno(), prefix.encode()
        deadline = time.monotonic() + seconds
        text = self._pending
        while (end := _end_of_line_starting(text, wanted)) < 0:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([descriptor], [], [], remaining)[0]:
                raise UserError(f"no {prefix!r} in {seconds:g} s")
            piece = os.read(descriptor, 1 << 16)
            if not piece:
                raise UserError("it exited")
            text += piece
        self._pending = text[end + 1:]
        return text[:end].decode(errors="replace").splitlines()

    def close(self) -> None:
        with contextlib.suppress(OSError, UserError):
            self._send("quit")
        with contextlib.suppress(OSError):
            if self._process.stdin is not None:
                self._process.stdin.close()
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()

    def label(self, start_fen: str, moves: Sequence[str], legal: Sequence[str]) -> tuple[np.ndarray, float, np.ndarray]:
        """Scores the position after ``moves`` from ``start_fen`` (Stockfish is given the moves, so it knows
        repetitions), whose legal moves are ``legal`` (UCI, in the order of the result).

        Returns (policy over ``legal`` float32, value in [-1, 1] for the mover, the mover's win
        probability after each move of ``legal``, float32, NaN where Stockfish scored none).

        Raises:
            UserError: Stockfish died or answered nothing usable (the message names the position).
        """
        wanted = self.settings.pretrain.multipv
        multipv = len(legal) if wanted <= 0 else min(wanted, len(legal))
        position = f"position fen {start_fen}" + (f" moves {' '.join(moves)}" if moves else "")
        try:
            if multipv != self._multipv:
                self._send(f"setoption name MultiPV value {multipv}")
                self._multipv = multipv
            # ucinewgame clears the hash and histories: the result does not depend on what this process
            # searched before (what python-chess sends for a new game, isready included).
            self._send("ucinewgame\nisready")
            self._until("readyok", ANSWER_SECONDS)
            self._send(f"{position}\ngo nodes {self.settings.nodes}")
            lines = self._until("bestmove", ANSWER_SECONDS)
        except UserError as error:
            raise UserError(f"Stockfish failed on {position}: {error}") from None
        index = {uci: i for i, uci in enumerate(legal)}
        wins = np.zeros(len(legal), dtype=np.float64)
        mates = np.zeros(len(legal), dtype=np.int64)
        scored = np.zeros(len(legal), dtype=bool)
        for move, score in _last_lines(lines, multipv).values():
            if move in index:
                wins[index[move]], scored[index[move]] = win_probability(score), True
                mates[index[move]] = score.mate() or 0
        if not scored.any():
            raise UserError(f"Stockfish scored no move of {position} at {self.settings.nodes} nodes")
        pretrain = self.settings.pretrain
        bonus = mate_bonus(mates, pretrain.mate_preference)
        policy = policy_target(wins, scored, pretrain.temperature, bonus)
        return policy, 2.0 * float(wins[scored].max()) - 1.0, np.where(scored, wins, np.nan).astype(np.float32)


def _end_of_line_starting(text: bytes, prefix: bytes) -> int:
    """Gets the index of the newline that ends the first line of ``text`` starting with ``prefix``, or -1."""
    start = 0 if text.startswith(prefix) else text.find(b"\n" + prefix)
    return -1 if start < 0 else text.find(b"\n", start + 1)


def _last_lines(lines: Sequence[str], multipv: int) -> dict[int, tuple[str, chess.engine.Score]]:
    """Gets, per MultiPV line, the first move and the score (for the side to move) of its last report."""
    last: dict[int, tuple[str, chess.engine.Score]] = {}
    for line in reversed(lines):  # the newest report of each line first; the older ones are never parsed
        if len(last) == multipv:
            break
        if not line.startswith("info ") or " pv " not in line or " score " not in line:
            continue
        tokens = line.split()
        try:
            rank = int(tokens[tokens.index("multipv") + 1]) if "multipv" in tokens else 1
            at = tokens.index("score")
            kind, number = tokens[at + 1], int(tokens[at + 2])
            move = tokens[tokens.index("pv") + 1]
        except (ValueError, IndexError):
            continue  # a line this reader does not understand scores nothing
        if kind in ("cp", "mate") and rank not in last:
            last[rank] = (move, chess.engine.Cp(number) if kind == "cp" else chess.engine.Mate(number))
    return last
