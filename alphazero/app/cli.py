"""The `alphazero` command line.

Each subcommand is declared once here, with its help text; the work lives in
the package that owns it and is imported only when that subcommand runs, so
`alphazero perft` never loads torch or Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TypeVar

from alphazero import __version__
from alphazero.errors import UserError
from alphazero.out_of_memory import OUT_OF_MEMORY_STATUS, out_of_memory_in, out_of_memory_message
from alphazero.stop_signals import handling_stop_signals

Counted = TypeVar("Counted")
# The start position's perft(15) is about 2e21 leaves: a deeper count never ends, but may be started and stopped.
MAX_PERFT_DEPTH = 32


def _cmd_perft(args: argparse.Namespace) -> None:
    from mcts_ext import Board

    board = Board(args.fen)
    if args.divide:
        total = 0
        for uci, nodes in sorted(_stoppable(lambda stop: board.perft_divide(args.depth, stop=stop))):
            print(f"{uci}: {nodes}")
            total += nodes
        print(f"\nNodes searched: {total}")
    else:
        print(_stoppable(lambda stop: board.perft(args.depth, stop=stop)))


def _stoppable(count: Callable[[bytearray], Counted]) -> Counted:
    """Runs ``count(stop)`` (a count without the GIL that ends when ``stop[0]`` is set) in a thread of its own.

    Only the main thread runs Python's signal handlers, and not while it is inside the count: so the count runs
    beside it, and Ctrl-C or SIGTERM (a KeyboardInterrupt here) sets the flag, waits for the count to end and is
    raised again. A deep perft is minutes or years; it stops at once either way.
    """
    stop = bytearray(1)
    outcome: list[Counted | BaseException] = []
    # An event, not Thread.join: on Python 3.11 a join that Ctrl-C interrupts while the thread still runs marks
    # it ended (threading's _wait_for_tstate_lock, bpo-45274's handler, releases the thread's lock), and the join
    # after it would return at once.
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append(count(stop))
        except BaseException as error:  # raised in the main thread, where main() reports it
            outcome.append(error)
        finally:
            done.set()

    worker = threading.Thread(target=run, name="perft", daemon=True)
    try:
        worker.start()
        done.wait()
    except KeyboardInterrupt:
        stop[0] = 1
        if worker.is_alive():  # else it never ran, or it runs next and finds the flag set at its first look
            done.wait()
        raise
    counted = outcome[0]
    if isinstance(counted, BaseException):
        raise counted
    return counted


def _cmd_bench(args: argparse.Namespace) -> None:
    from alphazero.app.bench import run_bench

    run_bench(args)


def _perft_depth(text: str) -> int:
    """Parses perft's depth; 'w' or 'b' there is the side to move of an unquoted FEN.

    Raises:
        argparse.ArgumentTypeError: not an integer (with the hint to quote the FEN).
    """
    try:
        return int(text)
    except ValueError:
        hint = ""
        if text in ("w", "b"):
            hint = ("; a FEN has spaces, so put it in quotes: "
                    "alphazero perft \"rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1\" 3")
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}{hint}") from None


def _add_perft(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perft", help="count leaf nodes of the move tree (checks the move generator)")
    p.add_argument("fen", help="position as FEN in quotes, or 'startpos'")
    p.add_argument("depth", type=_perft_depth, help=f"depth in plies (1 to {MAX_PERFT_DEPTH})")
    p.add_argument("--divide", action="store_true", help="print the count under each legal move, in UCI")
    p.set_defaults(func=_cmd_perft)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    from alphazero.app.bench import add_bench_arguments

    p = sub.add_parser("bench", help="measure speed against a baseline run side by side")
    add_bench_arguments(p)
    p.set_defaults(func=_cmd_bench)


def _add_selfplay(sub: argparse._SubParsersAction) -> None:
    from selfplay.cli import add_arguments

    p = sub.add_parser("selfplay", help="self-play actors filling a run directory (local Ray or a cluster)")
    add_arguments(p)
    p.set_defaults(func=_lazy("selfplay.cli", "run"))


def _lazy(module: str, function: str) -> Callable[[argparse.Namespace], int | None]:
    """A subcommand handler that imports its module only when it runs; it returns what the function returns
    (an exit status, or None for 0)."""

    def handler(args: argparse.Namespace) -> int | None:
        import importlib

        return getattr(importlib.import_module(module), function)(args)

    return handler


def _add_learn(sub: argparse._SubParsersAction) -> None:
    from learner.cli import add_arguments

    p = sub.add_parser("learn", help="the central learner: trains on the run's games, publishes checkpoints")
    add_arguments(p)
    p.add_argument("--address", default=None,
                   help="Ray cluster address: also push each new checkpoint to the run's self-play actors there")
    p.set_defaults(func=_cmd_learn)


def _cmd_learn(args: argparse.Namespace) -> None:
    """Runs the learner; its checkpoints go to the actors (--address) and to evaluation (eval.every_steps)."""
    from alphazero.app.train import checkpoint_hooks
    from alphazero.store.rundir import open_run_from_args
    from learner.cli import run

    run_dir, config = open_run_from_args(args, announce=False)
    with checkpoint_hooks(run_dir, config, publish=args.address is not None, address=args.address) as hooks:
        run(args, on_checkpoint=hooks)


def _add_train(sub: argparse._SubParsersAction) -> None:
    from alphazero.app.train import add_arguments

    p = sub.add_parser("train", help="self-play and the learner together on this machine (the main job)")
    add_arguments(p)
    p.set_defaults(func=_lazy("alphazero.app.train", "run"))


def _add_compare(sub: argparse._SubParsersAction) -> None:
    from alphazero.app.compare import add_arguments

    p = sub.add_parser("compare", help="self-play settings compared from zero at equal wall-clock: each arm's "
                                       "`train`, one after the other, then matches and a summary (resumable)")
    add_arguments(p)
    p.set_defaults(func=_lazy("alphazero.app.compare", "run"))


def _add_games(sub: argparse._SubParsersAction) -> None:
    from selfplay.endings import add_arguments

    p = sub.add_parser("games", help="how the run's self-play games ended, from its first games to its last: "
                                     "results, repetition draws, ply limits, lengths")
    add_arguments(p)
    p.set_defaults(func=_lazy("selfplay.endings", "run"))


def _puzzle_yardstick() -> Path:
    """The shipped puzzle yardstick (eval/data), found without importing eval: labelling leaves its puzzles out."""
    spec = importlib.util.find_spec("eval")
    assert spec is not None and spec.origin is not None, "the eval package is part of this distribution"
    return Path(spec.origin).parent / "data" / "lichess_puzzles_sample.csv"


def _add_pretrain(sub: argparse._SubParsersAction) -> None:
    from learner.cli import add_pretrain_arguments

    p = sub.add_parser("pretrain", help="supervised training from PGN games or Stockfish-labelled positions")
    add_pretrain_arguments(p)
    p.set_defaults(held_out=[str(_puzzle_yardstick())])
    p.set_defaults(func=_lazy("learner.cli", "run_pretrain"))


def _add_doctor(sub: argparse._SubParsersAction) -> None:
    from alphazero.app.doctor import add_arguments

    p = sub.add_parser("doctor", help="check this machine's forward passes (CPU, and each GPU mode) against "
                                      "float32 eager: speed, errors, a verdict; run it first on a new machine")
    add_arguments(p)
    p.set_defaults(func=_lazy("alphazero.app.doctor", "run"))


# The measuring commands (eval/): name, help, the eval.cli function that adds the arguments, and the
# module and function that run it (imported only when the command runs).
_EVAL_COMMANDS = (
    ("eval", "rate a checkpoint's policy, value and search agents against Stockfish (Elo)",
     "add_eval_arguments", "eval.cli", "run_eval"),
    ("match", "play a match: alphazero match [A] vs B (e.g. vs stockfish --elo 1500)",
     "add_match_arguments", "eval.cli", "run_match"),
    ("curve", "the run's Elo over its training: checkpoints against each other, the start, random and "
              "Stockfish, one fit, a table and curve.png", "add_curve_arguments", "eval.curve", "run_curve_command"),
    ("ladder", "the ladder of rungs below Stockfish's weakest level and their calibrated Elo: show it, or "
               "calibrate: play the rungs against each other and fit", "add_ladder_arguments", "eval.ladder",
     "run_ladder_command"),
    ("probe", "what a run's checkpoints know: policy agreement, regret, value error and entropy on "
              "Stockfish-labelled positions", "add_probe_arguments", "eval.probe", "run_probe"),
    ("book", "make a balanced opening book (PGN) with Stockfish, reproducibly, for --openings",
     "add_book_arguments", "eval.book", "run_book"),
    ("puzzles", "accuracy on Lichess puzzles by rating, as ChessBench measures it",
     "add_puzzles_arguments", "eval.cli", "run_puzzles"),
    ("epd", "an EPD test suite: bm/am found, STS points, per theme", "add_epd_arguments", "eval.cli", "run_epd"),
    ("uci", "a UCI engine on the run's latest network, for chess GUIs and lichess-bot",
     "add_uci_arguments", "eval.cli", "run_uci_command"),
)


def _add_eval_commands(sub: argparse._SubParsersAction) -> None:
    import eval.cli

    for name, help_text, add, module, function in _EVAL_COMMANDS:
        p = sub.add_parser(name, help=help_text)
        getattr(eval.cli, add)(p)
        p.set_defaults(func=_lazy(module, function))


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_train, _add_selfplay, _add_learn, _add_pretrain, _add_compare, _add_games, _add_eval_commands, _add_perft,
    _add_bench, _add_doctor,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="alphazero",
        description="AlphaZero self-play for chess: train, measure and play against a network.",
    )
    parser.add_argument("--version", action="version", version=f"alphazero {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def _validate(args: argparse.Namespace) -> None:
    if getattr(args, "fen", None) == "startpos":
        from mcts_ext import STARTING_FEN

        args.fen = STARTING_FEN
    if args.command == "perft" and args.depth < 1:
        raise UserError(f"depth must be at least 1, got {args.depth}")
    if args.command == "perft" and args.depth > MAX_PERFT_DEPTH:
        raise UserError(f"depth must lie in [1, {MAX_PERFT_DEPTH}] (deeper counts would run for years), "
                        f"got {args.depth}")


@contextlib.contextmanager
def _interrupt_on_sigterm() -> Iterator[None]:
    """Makes SIGTERM (a scheduler, `kill`) stop cleanly, as Ctrl-C does: finished work is saved."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    with handling_stop_signals(interrupt, (signal.SIGTERM,)):
        yield


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
    except KeyboardInterrupt:  # Ctrl-C while the subcommands' modules load (numpy's, say): a line, no traceback
        print("alphazero: interrupted", file=sys.stderr)
        return 130
    if args.command is None:
        parser.print_help()
        return 2
    from mcts_ext import ChessError

    try:
        _validate(args)
        with _interrupt_on_sigterm():
            status = args.func(args)
    except KeyboardInterrupt:
        print(f"alphazero {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:
        # Out of memory is said as what ran out and what to lower, not as a traceback; it wins over a one-line
        # error that wraps it (a self-play actor's, say), whose message cannot say what to lower.
        exhausted = out_of_memory_in(error)
        if exhausted is not None:
            print(f"alphazero {args.command}: error: {out_of_memory_message(exhausted, args.command)}",
                  file=sys.stderr)
            return OUT_OF_MEMORY_STATUS
        if not isinstance(error, (UserError, ChessError)):
            raise
        print(f"alphazero {args.command}: error: {error}", file=sys.stderr)
        return 2
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
