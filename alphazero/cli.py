"""The `alphazero` command line.

Each subcommand is declared once here, with its help text; the work lives in
the package that owns it and is imported only when that subcommand runs, so
`alphazero perft` never loads torch or Ray.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from alphazero import __version__
from alphazero.errors import UserError


def _cmd_perft(args: argparse.Namespace) -> None:
    from mcts_ext import Board

    board = Board(args.fen)
    if args.divide:
        total = 0
        for uci, nodes in sorted(board.perft_divide(args.depth)):
            print(f"{uci}: {nodes}")
            total += nodes
        print(f"\nNodes searched: {total}")
    else:
        print(board.perft(args.depth))


def _cmd_bench(args: argparse.Namespace) -> None:
    from alphazero.bench import run_bench

    run_bench(args)


def _add_perft(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("perft", help="count leaf nodes of the move tree (checks the move generator)")
    p.add_argument("fen", help="position as FEN, or 'startpos'")
    p.add_argument("depth", type=int, help="depth in plies (at least 1)")
    p.add_argument("--divide", action="store_true", help="print the count under each legal move, in UCI")
    p.set_defaults(func=_cmd_perft)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    from alphazero.bench import add_bench_arguments

    p = sub.add_parser("bench", help="measure speed against a baseline run side by side")
    add_bench_arguments(p)
    p.set_defaults(func=_cmd_bench)


SUBCOMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [_add_perft, _add_bench]


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    from mcts_ext import ChessError

    try:
        _validate(args)
        args.func(args)
    except (UserError, ChessError) as error:
        print(f"alphazero {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"alphazero {args.command}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
