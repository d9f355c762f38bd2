"""Stockfish labels: positions scored by Stockfish's MultiPV search, written as shards that resume.

Each position gets, from one Stockfish search of ``nodes`` nodes with MultiPV
over every legal move (``pretrain.multipv``, 0 = all):

- the win probability of each scored move for the mover, as Lichess turns
  centipawns into one: ``w = 1/2 + 1/2 * (2 / (1 + exp(-0.00368208 cp)) - 1)``;
  a mate for the mover is 1, against it 0 (alphazero.chess.scores.win_probability);
- the policy target, a softmax of w / ``pretrain.temperature`` over the scored
  moves (0: all on the best move); moves Stockfish left unscored get 0. Every
  mate has w = 1, so w alone cannot tell a mate in one from a mate in nine:
  a mate in N < ``MATE_HORIZON`` moves gets ``pretrain.mate_preference`` x
  (MATE_HORIZON - N) more logits (and being mated in N as many fewer), so the
  policy learns to finish a won game, not to wander among winning moves until
  a repetition or a stalemate ends it;
- w itself for every legal move (NaN where Stockfish scored none), stored as
  the shard's ``policy_wins``: what eval.probe measures a policy's regret by;
- the value target, the best move's w mapped to [-1, 1] (``2 w - 1``), stored as
  the shard's ``root_values`` with ``meta["value_target"] = "root_values"``
  (alphazero.store.shards.value_targets); ``results`` hold its nearest result class.
  With ``pretrain.label_value`` false the shard says ``"none"`` instead
  (VALUE_NONE): the learner trains only the policy on its positions, and the
  value stays in ``root_values`` for analysis (eval.probe).

Where positions come from:

- **random-opening play** (the default): games that open with 0 to
  ``pretrain.opening_plies`` uniformly random plies, then play a move drawn
  from each position's own label (a share ``pretrain.random_move_fraction``
  uniformly at random instead), until the game ends or reaches
  ``pretrain.game_plies``; every position before a move is labelled. In a
  share ``pretrain.random_side_fraction`` of the games one side (White or
  Black by a coin) plays uniformly random moves throughout: lopsided games
  whose positions teach how a won game is won (a lone king mated, not
  stalemated), which games between two label players seldom reach. A share
  ``pretrain.endgame_fraction`` of the games starts instead from a random
  won endgame (``endgame_start``: a king with a queen or a rook, maybe more
  pieces and pawns, against a king with at most two pawns), so the policy
  sees how a lone king is mated, the ending a weak opponent leaves it in;
  when such a game is lopsided, the defending side is the random one.
- **files** (``--positions-from``): the mainline positions of PGN games (with
  their history), the positions of EPD lines, and the positions of Lichess
  puzzles (a CSV with ``FEN`` and ``Moves`` columns: the position before the
  opponent's move and each one after it but the last, with their history; with
  ``pretrain.puzzle_alternatives`` K > 0, after a puzzle's own positions, the
  positions after up to K other legal moves of the solver in each of its
  positions, drawn by a generator seeded by the puzzle's id and ply), in
  file order. Puzzles of the ``held_out`` CSVs (the puzzle yardstick, by
  default) are left out, matched by ``PuzzleId`` and by every position, so a
  network trained on the labels is still tested on puzzles it never saw.

Positions are cut into chunks of ``pretrain.shard_positions`` (the last one
shorter); chunk c is one shard, written when complete, by whichever
Stockfish process labelled it. Random-opening games of chunk c are drawn from
a generator seeded by (``pretrain.seed``, c), so a chunk is the same whoever
labels it and whenever. Stockfish runs with one thread, a fixed hash that is
cleared (``ucinewgame``) before every position, and a node limit, so its
scores do not depend on timing: the same seed, nodes and Stockfish binary
give the same shards. A restart reads the chunks already on disk (from their
shards' meta) and labels only the others; a killed labeller loses only the
chunks in flight. Settings that change the labels (nodes, temperature, the
source, Stockfish's version, ...) may not change between restarts.

Example::

    settings = LabelSettings.of(config.pretrain, nodes=1000, positions=100_000)
    report = label_positions(run.root / "pretrain", settings, workers=4)
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import queue
import random
import select
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import chess
import chess.engine
import numpy as np

from alphazero.chess.pgn_reader import READ_ERRORS, PgnGame, open_text, read_games
from alphazero.chess.puzzles import puzzle_rows, solution_boards
from alphazero.chess.scores import WIN_SLOPE, win_probability
from alphazero.chess.stockfish import require_stockfish
from alphazero.config import PretrainConfig
from alphazero.errors import UserError
from alphazero.store.shards import (
    LAB_KIND,
    VALUE_FROM_ROOT,
    VALUE_NONE,
    ShardError,
    list_shards,
    nearest_results,
    read_shard_meta,
    shard_from_records,
    shard_name,
    write_shard,
)
from mcts_ext import Board, ChessError
from mcts_ext.encode import encode_board, legal_move_indices, new_batch

__all__ = [
    "LAB_KIND", "MATE_HORIZON", "LabelReport", "LabelSettings", "Labeller", "endgame_start", "label_positions",
    "puzzle_keys",
    "WIN_SLOPE", "mate_bonus", "policy_target", "win_probability",
]

MATE_HORIZON = 10  # mates in this many moves or more count as plain wins in the policy target
START_SECONDS = 30.0  # the most Stockfish may take to start and answer the UCI handshake
ANSWER_SECONDS = 120.0  # the most one position's search may take (a few ms at the usual node counts)


# --- scores to targets ---------------------------------------------------------------------------


def mate_bonus(mates: np.ndarray, preference: float) -> np.ndarray:
    """Gets the logits each move's mate distance adds to its policy logit.

    ``mates`` holds Stockfish's mate distance in moves for each move (N > 0:
    the mover mates in N; N < 0: the mover is mated in -N; 0: no mate found).
    A mate in N < MATE_HORIZON gets ``preference`` x (MATE_HORIZON - N), being
    mated in N as much taken away; longer mates and other moves get 0.
    """
    nearness = np.maximum(MATE_HORIZON - np.abs(mates), 0).astype(np.float64)
    return preference * np.sign(mates) * np.where(mates != 0, nearness, 0.0)


def policy_target(wins: np.ndarray, scored: np.ndarray, temperature: float,
                  bonus: np.ndarray | None = None) -> np.ndarray:
    """Gets the policy over the legal moves: softmax(w / temperature + bonus) over the ``scored`` ones, 0 elsewhere.

    ``bonus`` (mate_bonus, default none) orders moves of equal w. A
    temperature of 0 puts everything on the first best move (highest w, then
    highest bonus). ``scored`` needs one True.
    """
    bonus = np.zeros(len(wins)) if bonus is None else np.asarray(bonus, dtype=np.float64)
    probs = np.zeros(len(wins), dtype=np.float64)
    candidates = np.flatnonzero(scored)
    if temperature <= 0.0:
        order = np.lexsort((-candidates, bonus[candidates], wins[candidates]))  # last key first; ties: first move
        probs[candidates[order[-1]]] = 1.0
    else:
        logits = wins[candidates] / temperature + bonus[candidates]
        # Subtracting the largest keeps every exponent <= 0: no overflow at small temperatures.
        weights = np.exp(logits - logits.max())
        probs[candidates] = weights / weights.sum()
    return probs.astype(np.float32)


# --- settings -----------------------------------------------------------------------------------


LABEL_FIELDS = ("temperature", "multipv", "hash_mb", "seed", "opening_plies", "random_move_fraction", "game_plies",
                "shard_positions", "mate_preference", "random_side_fraction", "endgame_fraction",
                "puzzle_alternatives", "label_value")
"""The PretrainConfig fields that shape Stockfish labels (pgn_smoothing shapes PGN targets only)."""

_RANDOM_PLAY_FIELDS = ("seed", "opening_plies", "random_move_fraction", "game_plies", "random_side_fraction",
                       "endgame_fraction")
"""The fields of random-opening play, which labels from files do not use."""

_NEWER_FIELDS = ("mate_preference", "random_side_fraction", "endgame_fraction", "puzzle_alternatives")
"""Fields added after the first labels were made: at 0 (off) they are left out of the identity."""


@dataclass(frozen=True)
class LabelSettings:
    """What to label: ``positions`` positions at ``nodes`` nodes, drawn as the run's ``pretrain`` section says.

    ``files`` (PGN, EPD or puzzle CSV paths) replace random-opening play as
    the source; the puzzles of the ``held_out`` CSVs are left out of them.
    """

    nodes: int
    positions: int
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    files: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()

    @classmethod
    def of(cls, config: PretrainConfig, *, nodes: int, positions: int, files: Sequence[str | os.PathLike[str]] = (),
           held_out: Sequence[str | os.PathLike[str]] = ()) -> LabelSettings:
        """Builds the settings from the run's pretrain section and the command's figures.

        Raises:
            UserError: nodes or positions below 1.
        """
        if nodes < 1:
            raise UserError(f"--stockfish takes the nodes per position, at least 1, got {nodes}")
        if positions < 1:
            raise UserError(f"--positions must be at least 1, got {positions}")
        return cls(nodes, positions, config, tuple(str(Path(f).resolve()) for f in files),
                   tuple(str(Path(f).resolve()) for f in held_out) if files else ())

    @property
    def chunks(self) -> int:
        return -(-self.positions // self.pretrain.shard_positions)

    def chunk_size(self, chunk: int) -> int:
        """Positions of chunk ``chunk``: shard_positions, less for the last."""
        return min(self.pretrain.shard_positions, self.positions - chunk * self.pretrain.shard_positions)

    def identity(self, engine: str) -> dict[str, Any]:
        """Everything that shapes the labels (all but ``positions``), as saved in each shard's meta."""
        fields: dict[str, Any] = {"nodes": self.nodes}
        for name in LABEL_FIELDS:
            fields[name] = getattr(self.pretrain, name)
            if name == "shard_positions":
                fields["files"] = list(self.files)
        if self.files:  # random-play settings do not apply
            for name in _RANDOM_PLAY_FIELDS:
                del fields[name]
        else:  # nor do those of files to random play
            del fields["puzzle_alternatives"]
        if self.held_out:  # absent when none: labels made before puzzles were read still resume
            fields["held_out"] = list(self.held_out)
        for name in _NEWER_FIELDS:
            if fields.get(name) == 0:
                del fields[name]  # off: the labels of the settings before these existed, which still resume
        if self.pretrain.label_value:
            del fields["label_value"]  # likewise: labels with a value are the labels made before the choice
        return {**fields, "engine": engine}


@dataclass
class LabelReport:
    """What a labelling call did and found."""

    labelled: int = 0  # positions labelled by this call
    on_disk: int = 0  # positions in labelled shards before this call
    chunks_written: int = 0
    skipped: Counter[str] = field(default_factory=Counter)  # source games or lines skipped, by reason
    exhausted: bool = False  # the files held fewer positions than asked for

    @property
    def total(self) -> int:
        return self.labelled + self.on_disk


# --- one Stockfish ---------------------------------------------------------------------------------


class Labeller:
    """One Stockfish process (one thread, fixed hash) that labels positions one at a time.

    It speaks UCI itself and reads of each MultiPV line only its last score
    and first move: python-chess's client parses every move of every line of
    every depth, which cost more than Stockfish's search (fewer positions a
    second, the same labels: EXPERIMENTS.md, "Issue 49").
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


# --- games and chunks ----------------------------------------------------------------------------------


class _Stopped(Exception):
    """Raised inside a worker when the labelling is asked to stop."""


@dataclass
class _GameLabels:
    """The labelled positions of one game as they are collected, then a shard record."""

    game_id: str
    start_fen: str
    history: list[str]  # moves before the first labelled position
    played: list[str] = field(default_factory=list)
    # (planes, scalars, policy indices, policy, value, each move's win probability) per position
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float, np.ndarray]] = field(default_factory=list)
    termination: str = "label"

    def record(self) -> dict[str, Any]:
        count = len(self.rows)
        lengths = [len(row[2]) for row in self.rows]
        values = np.array([row[4] for row in self.rows], dtype=np.float32)
        return {
            "game_id": self.game_id,
            "start_fen": self.start_fen,
            "moves": self.history + self.played,
            "result": "*",
            "winner": None,
            "termination": self.termination,
            "plies": len(self.history) + len(self.played),
            "planes": np.concatenate([row[0] for row in self.rows]),
            "scalars": np.concatenate([row[1] for row in self.rows]),
            "plies_of_samples": np.arange(len(self.history), len(self.history) + count, dtype=np.int16),
            "root_values": values,
            "policy_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "policy_indices": np.concatenate([row[2] for row in self.rows]).astype(np.int16),
            "policy_probs": np.concatenate([row[3] for row in self.rows]),
            "policy_wins": np.concatenate([row[5] for row in self.rows]),
            "results": nearest_results(values),
        }


Chooser = Callable[[Board, list[str], np.ndarray], str | None]  # (board, legal, policy) -> next move or None


def _label_game(labeller: Labeller, game: _GameLabels, choose: Chooser, room: int, stop: threading.Event,
                on_position: Callable[[], None], *, draw_rules_end: bool) -> None:
    """Labels the positions of one game from its start (after its history) until ``choose`` says None,
    the game ends, or ``room`` positions are labelled.

    With ``draw_rules_end`` False only checkmate and stalemate end the game
    (a PGN game goes on after a repetition nobody claimed).
    """
    board = Board.from_moves(game.history, game.start_fen, ply_limit=None)
    while len(game.rows) < room:
        if stop.is_set():
            raise _Stopped
        termination = board.termination()
        legal = board.legal_moves()
        if termination is not None and (draw_rules_end or not legal):
            game.termination = termination
            return
        policy, value, wins = labeller.label(game.start_fen, game.history + game.played, legal)
        planes, scalars = new_batch(1)
        encode_board(board, planes, scalars)
        game.rows.append((planes, scalars, legal_move_indices(board), policy, value, wins))
        on_position()
        move = choose(board, legal, policy)
        if move is None:
            return
        board.push_uci(move)
        game.played.append(move)


def _random_play_chunk(labeller: Labeller, chunk: int, size: int, stop: threading.Event,
                       on_position: Callable[[], None]) -> list[_GameLabels]:
    """Labels ``size`` positions of random-opening games drawn from the generator of (seed, chunk)."""
    settings = labeller.settings
    rng = np.random.default_rng([settings.pretrain.seed, chunk])
    games: list[_GameLabels] = []
    labelled = 0
    while labelled < size:
        opening = int(rng.integers(0, settings.pretrain.opening_plies + 1))
        # The side (0 White, 1 Black) that moves at random all game, or -1. No draws when the share is 0,
        # so labels made before lopsided games existed are drawn the same.
        random_side = -1
        if settings.pretrain.random_side_fraction > 0 and rng.random() < settings.pretrain.random_side_fraction:
            random_side = int(rng.integers(2))
        start_fen = chess.STARTING_FEN
        if settings.pretrain.endgame_fraction > 0 and rng.random() < settings.pretrain.endgame_fraction:
            start_fen, defender = endgame_start(rng)
            opening = 0
            # Plies count from the start position's mover: the defender moves on even plies if it moves first.
            first = chess.WHITE if start_fen.split()[1] == "w" else chess.BLACK
            random_side = (0 if defender == first else 1) if random_side >= 0 else -1
        game = _GameLabels(f"sf:{settings.pretrain.seed}:{chunk}:{len(games)}", start_fen, [])

        def choose(board: Board, legal: list[str], policy: np.ndarray, game: _GameLabels = game,
                   opening: int = opening, random_side: int = random_side) -> str | None:
            ply = len(game.played)
            if ply + 1 >= settings.pretrain.game_plies:
                return None
            if ply < opening or ply % 2 == random_side or rng.random() < settings.pretrain.random_move_fraction:
                return legal[int(rng.integers(len(legal)))]
            shares = policy.astype(np.float64)
            return legal[int(rng.choice(len(legal), p=shares / shares.sum()))]

        _label_game(labeller, game, choose, size - labelled, stop, on_position, draw_rules_end=True)
        if game.rows:
            games.append(game)
            labelled += len(game.rows)
    return games


_PIECES_BESIDE_THE_MAJOR = (chess.QUEEN, chess.ROOK, chess.BISHOP, chess.KNIGHT)


def endgame_start(rng: np.random.Generator) -> tuple[str, chess.Color]:
    """Draws a random legal, unfinished won endgame from ``rng``: (its FEN, the defending colour).

    The attacker (White or Black by a coin) has its king, a queen (or, half
    as often, a rook), 0 to 2 more pieces and 0 to 3 pawns; the defender a
    king and 0 to 2 pawns. Either side may be to move.
    """
    while True:
        attacker = bool(rng.integers(2))
        pieces = [chess.Piece(chess.KING, attacker), chess.Piece(chess.KING, not attacker)]
        pieces.append(chess.Piece(chess.QUEEN if rng.random() < 2 / 3 else chess.ROOK, attacker))
        extras = rng.integers(3)
        pieces += [chess.Piece(_PIECES_BESIDE_THE_MAJOR[int(rng.integers(4))], attacker) for _ in range(extras)]
        pieces += [chess.Piece(chess.PAWN, attacker)] * int(rng.integers(4))
        pieces += [chess.Piece(chess.PAWN, not attacker)] * int(rng.integers(3))
        board = chess.Board(None)
        squares = iter(rng.permutation(64).tolist())
        for piece in pieces:
            square = next(squares)
            while piece.piece_type == chess.PAWN and chess.square_rank(square) in (0, 7):
                square = next(squares)  # 64 squares hold the at most 10 pieces, pawns off the back ranks
            board.set_piece_at(square, piece)
        board.turn = bool(rng.integers(2))
        if board.is_valid() and not board.is_game_over(claim_draw=False):
            return board.fen(), not attacker


@dataclass(frozen=True)
class _Segment:
    """Consecutive positions of one source game: after ``history``, then after each of ``moves`` but the last."""

    game_id: str
    start_fen: str
    history: list[str]
    moves: list[str]  # the moves played from the first labelled position; len(moves) positions


def _segments_chunk(labeller: Labeller, segments: list[_Segment], stop: threading.Event,
                    on_position: Callable[[], None]) -> list[_GameLabels]:
    """Labels the positions of file segments, in order."""
    games = []
    for segment in segments:
        game = _GameLabels(segment.game_id, segment.start_fen, list(segment.history))

        def choose(board: Board, legal: list[str], policy: np.ndarray, game: _GameLabels = game,
                   moves: list[str] = segment.moves) -> str | None:
            step = len(game.played) + 1  # positions labelled so far in this segment
            return moves[step - 1] if step < len(moves) else None

        _label_game(labeller, game, choose, len(segment.moves), stop, on_position, draw_rules_end=False)
        if game.rows:
            games.append(game)
    return games


# --- positions from files ---------------------------------------------------------------------------------


def _file_positions(paths: Sequence[str], skipped: Counter[str], held_out: frozenset[str] = frozenset(),
                    alternatives: int = 0) -> Iterator[tuple[str, str, list[str], str]]:
    """Yields (game id, start FEN, moves before the position, next move or '') for every position of the files.

    PGN games give each position before a mainline move; EPD lines (files
    named .epd, optionally compressed; a whole FEN on a line is read too)
    one position each; puzzle CSVs (named .csv) each puzzle's positions but
    those of ``held_out`` (puzzle_keys), each followed by the positions after
    up to ``alternatives`` other moves of the solver. Skipped games, lines and puzzles are
    counted in ``skipped``; a damaged file is reported and left.
    """
    for path in paths:
        name = Path(path).name
        suffixes = Path(path).suffixes
        try:
            with open_text(path) as handle:
                if ".csv" in suffixes:
                    yield from _puzzle_file_positions(handle, name, skipped, held_out, alternatives)
                elif ".epd" in suffixes:
                    yield from _epd_file_positions(handle, name, skipped)
                else:
                    for item in read_games(handle):
                        if not isinstance(item, PgnGame):
                            skipped[item] += 1
                            continue
                        try:
                            Board(item.start_fen)
                        except ChessError:
                            skipped["unsupported start position"] += 1
                            continue
                        for ply, move in enumerate(item.moves):
                            yield f"{name}:{item.number}", item.start_fen, item.moves[:ply], move
        except READ_ERRORS as error:
            skipped["damaged file"] += 1
            print(f"warning: stopped reading {path}: {error}", flush=True)


def _epd_file_positions(handle: TextIO, name: str, skipped: Counter[str]) -> Iterator[tuple[str, str, list[str], str]]:
    """Yields each readable EPD line's position (file_positions' items)."""
    for number, line in enumerate(handle, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            board = _epd_board(text)
            Board(board.fen())
        except (ValueError, ChessError):
            skipped["unreadable EPD line"] += 1
            continue
        if not any(board.legal_moves) or board.chess960:
            skipped["EPD position without a move to label"] += 1
            continue
        yield f"{name}:{number}", board.fen(), [], ""


def _puzzle_position_keys(boards: Sequence[chess.Board]) -> list[str]:
    """The positions of a puzzle before each of its moves (solution_boards), without clocks (``board.epd()``):
    what a held-out puzzle is recognised by, whatever its id."""
    return ["position " + board.epd() for board in boards]


def puzzle_keys(paths: Sequence[str | os.PathLike[str]]) -> frozenset[str]:
    """Reads the ids and positions of the puzzles in these CSVs: the keys that leave a puzzle out of labelling.

    Raises:
        UserError: a file cannot be read or is not a puzzle CSV.
    """
    keys: set[str] = set()
    for path in paths:
        try:
            with open_text(path) as handle:
                for puzzle_id, _, row in puzzle_rows(handle, Path(path).name):
                    keys.add("id " + puzzle_id)
                    with contextlib.suppress(ValueError):
                        boards = solution_boards(row["FEN"] or "", (row["Moves"] or "").split(), standard=True)
                        keys.update(_puzzle_position_keys(boards))
        except READ_ERRORS as error:
            raise UserError(f"cannot read the held-out puzzles {path}: {error}") from None
    return frozenset(keys)


def _puzzle_file_positions(handle: TextIO, name: str, skipped: Counter[str], held_out: frozenset[str],
                           alternatives: int = 0) -> Iterator[tuple[str, str, list[str], str]]:
    """Yields the positions of each puzzle (before each of its moves) not held out, then those after up to
    ``alternatives`` other moves of the solver in each of its positions (file_positions' items)."""
    for puzzle_id, _, row in puzzle_rows(handle, name):
        fen, moves = (row["FEN"] or "").strip(), (row["Moves"] or "").split()
        try:
            if not moves:
                raise ValueError("no moves")
            boards = solution_boards(fen, moves, standard=True)
            Board(fen)
        except (ValueError, ChessError):
            skipped["unreadable puzzle"] += 1
            continue
        if "id " + puzzle_id in held_out or any(key in held_out for key in _puzzle_position_keys(boards)):
            skipped["held-out puzzle"] += 1
            continue
        for ply, move in enumerate(moves):
            yield f"{name}:{puzzle_id}", fen, moves[:ply], move
        for ply in range(1, len(moves), 2) if alternatives > 0 else ():  # the solver moves at odd plies
            for other in _other_moves(boards[ply], moves[ply], alternatives, f"{puzzle_id}:{ply}"):
                yield f"{name}:{puzzle_id}", fen, [*moves[:ply], other], ""


def _other_moves(board: chess.Board, played: str, count: int, seed: str) -> list[str]:
    """Up to ``count`` legal moves of ``board`` other than ``played``, drawn at random by a generator seeded
    by ``seed``, that do not end the game (a position without a move has nothing to label)."""
    others = sorted(move.uci() for move in board.legal_moves if move.uci() != played)
    random.Random(seed).shuffle(others)
    chosen: list[str] = []
    for uci in others:
        if len(chosen) == count:
            break
        board.push_uci(uci)
        if any(board.legal_moves):
            chosen.append(uci)
        board.pop()
    return chosen


def _epd_board(text: str) -> chess.Board:
    """Reads an EPD line, or a whole FEN on the line: the official-stockfish books' endgames.epd and UHO_*
    files write the halfmove clock and move number where EPD puts its operations.

    Raises:
        ValueError: neither.
    """
    fields = text.split()
    if len(fields) == 6 and fields[4].isdigit() and fields[5].isdigit():
        return chess.Board(text)
    return chess.Board.from_epd(text)[0]


def _segments(items: list[tuple[str, str, list[str], str]]) -> list[_Segment]:
    """Groups consecutive positions of the same game into segments."""
    segments: list[_Segment] = []
    for game_id, fen, history, move in items:
        last = segments[-1] if segments else None
        if last is not None and last.game_id == game_id and last.start_fen == fen \
                and history == last.history + last.moves:
            last.moves.append(move)
            continue
        segments.append(_Segment(game_id, fen, list(history), [move]))
    return segments


# --- resuming --------------------------------------------------------------------------------------------


def _chunks_on_disk(directory: Path, identity: dict[str, Any], settings: LabelSettings) -> dict[int, int]:
    """Reads the chunks already labelled in ``directory``: chunk -> positions.

    Raises:
        UserError: the shards were labelled with other settings, or a chunk's
            size is not what these settings make it.
    """
    done: dict[int, int] = {}
    for path in list_shards(directory):
        try:
            meta = read_shard_meta(path)
        except ShardError:
            continue  # the learner reports unreadable shards; this chunk is labelled again
        if meta.get("kind") != LAB_KIND:
            continue
        saved = meta.get("labels")
        if saved != identity:
            changed = sorted(k for k in {**identity, **(saved or {})} if (saved or {}).get(k) != identity.get(k))
            raise UserError(f"{directory} holds Stockfish labels made with other settings (they differ in "
                            f"{', '.join(changed)}); rerun with the same settings, or use a new run directory")
        chunk, size = int(meta.get("chunk", -1)), int(meta.get("positions", -1))
        short_files = bool(meta.get("files_ended")) and size < settings.chunk_size(chunk)
        if chunk < settings.chunks and size != settings.chunk_size(chunk) and not short_files:
            raise UserError(f"{path.name} holds {size} positions of chunk {chunk}, but --positions "
                            f"{settings.positions} makes that chunk {settings.chunk_size(chunk)}: it was "
                            f"labelled with another --positions; use the same one, or a new run directory")
        done[chunk] = size
    return done


# --- all of it ----------------------------------------------------------------------------------------


class _Counter:
    def __init__(self) -> None:
        self.value = 0
        self._lock = threading.Lock()

    def add(self) -> None:
        with self._lock:
            self.value += 1


def label_positions(directory: str | os.PathLike[str], settings: LabelSettings, *, workers: int | None = None,
                    progress: Callable[[int, int], None] | None = None, stockfish: str | None = None,
                    stop: threading.Event | None = None) -> LabelReport:
    """Labels the chunks of ``settings`` not yet in ``directory`` with ``workers`` Stockfish processes.

    ``progress(done, total)`` is called from this thread about four times a
    second with the positions labelled (on disk included) and the target.
    Each chunk's shard is written as soon as it is complete.

    Raises:
        UserError: Stockfish is missing or fails; the directory holds labels of
            other settings; it cannot be written.
        KeyboardInterrupt: after Ctrl-C (chunks in flight are dropped; written ones stay).
    """
    directory = Path(directory)
    stop = stop if stop is not None else threading.Event()
    if not directory.parent.is_dir():
        raise UserError(f"cannot label into {directory}: {directory.parent} is not a folder")
    workers = max(1, workers or os.cpu_count() or 1)
    path = stockfish or require_stockfish()
    first = Labeller(settings, path)
    labellers: queue.Queue[Labeller] = queue.Queue()
    labellers.put(first)
    identity = settings.identity(first.name)
    report = LabelReport()
    counter = _Counter()
    try:
        done = _chunks_on_disk(directory, identity, settings)
        report.on_disk = sum(done.values())
        if progress is not None:
            progress(report.on_disk, settings.positions)
        pending = [c for c in range(settings.chunks) if c not in done]
        if not pending:
            return report
        directory.mkdir(parents=True, exist_ok=True)
        for _ in range(min(workers, len(pending)) - 1):
            labellers.put(Labeller(settings, path))

        def work(job: _Job) -> int:
            labeller = labellers.get()
            try:
                if job.segments is None:
                    games = _random_play_chunk(labeller, job.chunk, settings.chunk_size(job.chunk), stop,
                                               counter.add)
                else:
                    games = _segments_chunk(labeller, job.segments, stop, counter.add)
                return _write_chunk(directory, job, games, identity)
            finally:
                labellers.put(labeller)

        _run_jobs(_jobs(settings, pending, report), work, workers, report, counter, stop,
                  lambda done: progress(done, settings.positions) if progress is not None else None)
    finally:
        stop.set()
        while not labellers.empty():
            labellers.get().close()
    return report


@dataclass(frozen=True)
class _Job:
    """One chunk to label: its number, and its file segments (None for random-opening play)."""

    chunk: int
    segments: list[_Segment] | None = None
    files_ended: bool = False  # the files ended inside this chunk: it is shorter than the others


def _jobs(settings: LabelSettings, pending: list[int], report: LabelReport) -> Iterator[_Job]:
    """Yields the jobs of the pending chunks, in order (reading the files, when they are the source)."""
    if not settings.files:
        for chunk in pending:
            yield _Job(chunk)
        return
    wanted = set(pending)
    items: list[tuple[str, str, list[str], str]] = []
    filled = chunk = 0
    held_out = puzzle_keys(settings.held_out) if settings.held_out else frozenset()
    for item in _file_positions(settings.files, report.skipped, held_out, settings.pretrain.puzzle_alternatives):
        if chunk >= settings.chunks:
            break
        filled += 1
        if chunk in wanted:
            items.append(item)
        if filled == settings.chunk_size(chunk):
            if chunk in wanted:
                yield _Job(chunk, _segments(items))
            items, filled, chunk = [], 0, chunk + 1
    if chunk < settings.chunks:
        report.exhausted = True
        if items and chunk in wanted:
            yield _Job(chunk, _segments(items), files_ended=True)


def _run_jobs(jobs: Iterator[_Job], work: Callable[[_Job], int], workers: int, report: LabelReport,
              counter: _Counter, stop: threading.Event, progress: Callable[[int], object]) -> None:
    """Runs the jobs on ``workers`` threads, taking a few more jobs than there are threads at a time;
    reports the positions labelled about four times a second.

    Raises:
        Whatever a job raised (the others are stopped first).
    """
    in_flight: set[concurrent.futures.Future[int]] = set()
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="labeller")
    try:
        more = True
        while True:
            while more and len(in_flight) < 2 * workers:
                job = next(jobs, None)
                if job is None:
                    more = False
                else:
                    in_flight.add(executor.submit(work, job))
            if not in_flight:
                break
            finished, in_flight = concurrent.futures.wait(in_flight, timeout=0.25,
                                                          return_when=concurrent.futures.FIRST_COMPLETED)
            for future in finished:
                report.labelled += future.result()  # a job's error is raised here
                report.chunks_written += 1
            progress(report.on_disk + counter.value)
    except BaseException:
        stop.set()  # the jobs in flight stop at their next position
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


def _write_chunk(directory: Path, job: _Job, games: list[_GameLabels], identity: dict[str, Any]) -> int:
    """Writes one chunk's shard; returns its positions.

    Raises:
        UserError: the folder cannot be written.
    """
    positions = sum(len(game.rows) for game in games)
    meta = {"writer": "alphazero pretrain", "kind": LAB_KIND, "chunk": job.chunk, "positions": positions,
            "files_ended": job.files_ended, "labels": identity,
            "value_target": VALUE_FROM_ROOT if identity.get("label_value", True) else VALUE_NONE}
    shard = shard_from_records([game.record() for game in games], meta)
    try:
        write_shard(directory / shard_name(f"sf-c{job.chunk:06d}"), shard)
    except OSError as error:
        raise UserError(f"cannot write labels into {directory}: {error.strerror or error}") from None
    return positions
