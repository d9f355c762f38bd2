"""`alphazero book OUT`: a balanced opening book made here, reproducibly, with Stockfish.

Each line starts from the initial position and plays ``plies`` moves, each
drawn uniformly (from a generator seeded by ``seed`` and the line's number)
among the moves Stockfish rates within ``window_cp`` centipawns of its best
(MultiPV ``candidates`` at ``pick_nodes`` nodes a move): the openings people
play, and their sidelines. The line is kept when Stockfish, at ``judge_nodes``
nodes, rates the final position within ``max_cp`` of even, the game is not
over, and no earlier line reached the same position. Stockfish runs on one
thread with its hash cleared before every search, and searches a fixed number
of nodes, so the same seed and Stockfish binary make the same book.

The book is PGN (eval.openings reads it for ``--openings``): PGN keeps each
line's moves, which the network's input planes need as history, where an
EPD position would not. Each game's headers name the line and give
Stockfish's judgement (``[BookEval "+0.12"]``, White's view, in pawns).

Example::

    lines = make_book(BookSettings(lines=400, seed=0))
    write_book("book.pgn", lines, settings)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import chess
import chess.engine
import chess.pgn

from alphazero.chess.stockfish import require_stockfish
from alphazero.errors import UserError
from alphazero.store.rundir import atomic_write_text


@dataclass(frozen=True)
class BookSettings:
    """How a book is made (see the module docstring); every field is recorded in the book's header comment."""

    lines: int = 400
    plies: int = 8
    seed: int = 0
    candidates: int = 5
    window_cp: int = 60
    pick_nodes: int = 20_000
    judge_nodes: int = 200_000
    max_cp: int = 40

    def check(self) -> None:
        if min(self.lines, self.plies, self.candidates, self.pick_nodes, self.judge_nodes) < 1:
            raise UserError("lines, plies, candidates and nodes must each be at least 1")
        if self.window_cp < 0 or self.max_cp < 0:
            raise UserError("the centipawn windows must be 0 or more")


@dataclass(frozen=True)
class BookLine:
    """A kept line: its moves (UCI) and Stockfish's judgement of the final position (centipawns, White's view)."""

    moves: tuple[str, ...]
    centipawns: int


def _centipawns(score: chess.engine.PovScore) -> int:
    return score.white().score(mate_score=100_000) or 0


def _search(engine: chess.engine.SimpleEngine, board: chess.Board, nodes: int,
            multipv: int) -> list[chess.engine.InfoDict]:
    # A new game object makes python-chess send ucinewgame: the hash is cleared, so each search
    # depends on the position and the node count alone.
    return engine.analyse(board, chess.engine.Limit(nodes=nodes), multipv=multipv, game=object())


def _draw_line(engine: chess.engine.SimpleEngine, settings: BookSettings, rng: random.Random) -> chess.Board:
    board = chess.Board()
    for _ in range(settings.plies):
        infos = _search(engine, board, settings.pick_nodes, settings.candidates)
        scored = [(info["pv"][0], info["score"].relative.score(mate_score=100_000) or 0)
                  for info in infos if info.get("pv") and "score" in info]
        if not scored:
            break
        best = max(score for _, score in scored)
        choices = sorted((move.uci() for move, score in scored if score >= best - settings.window_cp))
        board.push_uci(rng.choice(choices))
        if board.is_game_over(claim_draw=True):
            break
    return board


def make_book(settings: BookSettings, *, stockfish: str | None = None,
              on_line: Callable[[int, int], object] | None = None) -> list[BookLine]:
    """Makes the book's lines (see the module docstring). ``on_line(kept, tried)`` reports progress.

    Raises:
        UserError: bad settings, no Stockfish, or too few balanced lines found (50 tries a line).
    """
    settings.check()
    path = stockfish or require_stockfish()
    kept: list[BookLine] = []
    seen: set[str] = set()
    tries = 0
    with contextlib.closing(chess.engine.SimpleEngine.popen_uci(path, timeout=30)) as engine:
        engine.configure({"Threads": 1, "Hash": 16})
        while len(kept) < settings.lines:
            if tries >= 50 * settings.lines:
                raise UserError(f"only {len(kept)} balanced lines in {tries} tries: widen --max-cp or --window-cp")
            rng = random.Random(f"{settings.seed}:{tries}")
            tries += 1
            board = _draw_line(engine, settings, rng)
            key = board.epd()
            if len(board.move_stack) < settings.plies or board.is_game_over(claim_draw=True) or key in seen:
                continue
            seen.add(key)
            info = _search(engine, board, settings.judge_nodes, 1)[0]
            centipawns = _centipawns(info["score"])
            if abs(centipawns) <= settings.max_cp:
                kept.append(BookLine(tuple(move.uci() for move in board.move_stack), centipawns))
            if on_line is not None:
                on_line(len(kept), tries)
    return kept


def book_pgn(lines: list[BookLine], settings: BookSettings, engine_name: str = "Stockfish") -> str:
    """The book as PGN text: one game a line, its judgement in a header."""
    made = ", ".join(f"{key}={value}" for key, value in dataclasses.asdict(settings).items())
    games = []
    for number, line in enumerate(lines, start=1):
        game = chess.pgn.Game()
        game.headers.update({"Event": "alphazero balanced book", "Site": "?", "Date": "????.??.??",
                             "Round": str(number), "White": "?", "Black": "?", "Result": "*",
                             "Opening": f"balanced {number:03d}", "BookEval": f"{line.centipawns / 100:+.2f}",
                             "Annotator": f"{engine_name}; {made}"})
        node: chess.pgn.GameNode = game
        for uci in line.moves:
            node = node.add_variation(chess.Move.from_uci(uci))
        games.append(str(game))
    return "\n\n".join(games) + "\n"


def run_book(args: argparse.Namespace) -> None:
    """Runs `alphazero book OUT`: makes the lines (a progress bar), writes the PGN."""
    from alphazero.console import LiveDisplay

    settings = BookSettings(lines=args.lines, plies=args.plies, seed=args.seed, max_cp=args.max_cp,
                            window_cp=args.window_cp, pick_nodes=args.pick_nodes, judge_nodes=args.judge_nodes)
    path = require_stockfish()
    with contextlib.closing(chess.engine.SimpleEngine.popen_uci(path, timeout=30)) as engine:
        name = str(engine.id.get("name", "Stockfish"))
    with LiveDisplay(enabled=not args.no_progress, label="book", bar=("label", "bar", "count", "text", "elapsed"),
                     total=settings.lines, stderr=False) as bar:
        lines = make_book(settings, stockfish=path,
                          on_line=lambda kept, tried: bar.update(completed=kept, text=f"{tried} tried"))
    try:
        atomic_write_text(Path(args.out), book_pgn(lines, settings, name))
    except OSError as error:
        raise UserError(f"cannot write {args.out}: {error.strerror or error}") from None
    print(f"book: {len(lines)} lines of {settings.plies} plies within {settings.max_cp} cp of even "
          f"({name}) written to {args.out}")
