"""The labelling games: a chunk's positions played or replayed on a board and labelled one by one.

A chunk comes from one of two sources:

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
  when such a game is lopsided, the defending side is the random one. The
  games of chunk c are drawn from a generator seeded by (``pretrain.seed``,
  c), so a chunk is the same whoever labels it and whenever.
- **file segments** (learner.position_files): the positions of each segment,
  replayed in order.

Each chunk's games come back as GameLabels, one shard record each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import chess
import numpy as np

from alphazero.store.shards import nearest_results
from learner.labeller import Labeller
from learner.position_files import Segment
from mcts_ext import Board
from mcts_ext.encode import encode_board, legal_move_indices, new_batch

__all__ = ["GameLabels", "endgame_start", "random_play_chunk", "segments_chunk"]

class _Stopped(Exception):
    """Raised inside a worker when the labelling is asked to stop."""


@dataclass
class GameLabels:
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


def _label_game(labeller: Labeller, game: GameLabels, choose: Chooser, room: int, stop: threading.Event,
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


def random_play_chunk(labeller: Labeller, chunk: int, size: int, stop: threading.Event,
                       on_position: Callable[[], None]) -> list[GameLabels]:
    """Labels ``size`` positions of random-opening games drawn from the generator of (seed, chunk)."""
    settings = labeller.settings
    rng = np.random.default_rng([settings.pretrain.seed, chunk])
    games: list[GameLabels] = []
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
        game = GameLabels(f"sf:{settings.pretrain.seed}:{chunk}:{len(games)}", start_fen, [])

        def choose(board: Board, legal: list[str], policy: np.ndarray, game: GameLabels = game,
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


def segments_chunk(labeller: Labeller, segments: list[Segment], stop: threading.Event,
                    on_position: Callable[[], None]) -> list[GameLabels]:
    """Labels the positions of file segments, in order."""
    games = []
    for segment in segments:
        game = GameLabels(segment.game_id, segment.start_fen, list(segment.history))

        def choose(board: Board, legal: list[str], policy: np.ndarray, game: GameLabels = game,
                   moves: list[str] = segment.moves) -> str | None:
            step = len(game.played) + 1  # positions labelled so far in this segment
            return moves[step - 1] if step < len(moves) else None

        _label_game(labeller, game, choose, len(segment.moves), stop, on_position, draw_rules_end=False)
        if game.rows:
            games.append(game)
    return games
