"""The `alphazero` command line: version, perft, benchmarks, errors."""

from __future__ import annotations

import re
import signal
import subprocess
import sys

import pytest

from alphazero import __version__
from alphazero.app import cli


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"alphazero {__version__}"


def test_perft_prints_the_count(capsys):
    assert cli.main(["perft", "startpos", "3"]) == 0
    assert capsys.readouterr().out.strip() == "8902"


def test_perft_divide_prints_each_move_like_stockfish(capsys):
    kiwipete = "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1"
    assert cli.main(["perft", kiwipete, "2", "--divide"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    per_move = dict(line.split(": ") for line in lines if re.fullmatch(r"[a-h][1-8][a-h][1-8][qrbn]?: \d+", line))
    assert len(per_move) == 48 and per_move["e1g1"] == "43" and per_move["e1c1"] == "43"
    assert lines[-1] == "Nodes searched: 2039"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["perft", "8/8/8/8/8/8/8/8 w - - 0 1", "2"], "white has 0 kings"),
        (["perft", "startpos", "0"], "depth must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, args, message):
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


# The command in a process of its own, as a terminal starts it (the suite's workers carry the SIGTERM handler earlier
# tests' ray.init left behind, and a suite started in the background ignores SIGINT, which its children inherit),
# saying "counting" once its count has begun, so that the signal is sent at that event.
ANNOUNCED_PERFT = """
import signal
import sys
from alphazero.app import cli

signal.signal(signal.SIGINT, signal.default_int_handler)

count_beside = cli._stoppable

def announced(count):
    def counting(stop):
        print("counting", flush=True)
        return count(stop)
    return count_beside(counting)

cli._stoppable = announced
sys.exit(cli.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.parametrize("divide", [[], ["--divide"]], ids=["count", "divide"])
def test_ctrl_c_and_sigterm_stop_a_deep_perft(signum, divide):
    # Depth 30 from the start is years of counting without the GIL: before, neither signal reached the command.
    command = subprocess.Popen([sys.executable, "-c", ANNOUNCED_PERFT, "perft", "startpos", "30", *divide],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert command.stdout is not None and command.stdout.readline() == "counting\n"
        command.send_signal(signum)
        out, err = command.communicate(timeout=120)
    finally:
        command.kill()
    assert command.returncode == 130 and out == "", (command.returncode, out, err)
    assert err.strip() == "alphazero perft: interrupted"


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_exit_130(capsys, monkeypatch):
    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["perft", "startpos", "1"]) == 130
    assert capsys.readouterr().err.strip() == "alphazero: interrupted"


def test_a_stopped_count_is_no_count():
    from mcts_ext import STARTING_FEN, Board

    board = Board(STARTING_FEN)
    assert board.perft(3, stop=bytearray(1)) == 8902  # a flag never set changes nothing
    with pytest.raises(InterruptedError):
        board.perft(3, stop=bytearray(b"\x01"))
    with pytest.raises(InterruptedError):
        board.perft_divide(3, stop=bytearray(b"\x01"))
    with pytest.raises(TypeError, match="bytearray of one byte"):
        board.perft(3, stop=bytearray(2))


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "usage: alphazero" in capsys.readouterr().out


def test_perft_does_not_load_torch_or_ray():
    code = "import sys; from alphazero.app.cli import main; main(['perft', 'startpos', '1']); " \
           "print('torch' in sys.modules, 'ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[-2:] == ["False", "False"]


def test_bench_movegen_and_search_print_ratios(capsys):
    assert cli.main(["bench", "movegen", "--quick", "--no-stockfish"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"bulk-counted perft: Cython .* \d+\.\dx python-chess", out)
    assert cli.main(["bench", "search", "--games", "4", "--simulations", "50", "--seconds", "0.5"]) == 0
    assert re.search(r"Cython / plain Python: \d+\.\dx", capsys.readouterr().out)


def test_perft_with_a_unicode_digit_in_a_counter_is_one_line_and_exit_2(capsys):
    # Regression: '²' passed str.isdigit() and then int() raised a bare ValueError (a traceback).
    assert cli.main(["perft", "4k3/8/8/8/8/8/8/4K3 w - - ² 1", "1"]) == 2
    err = capsys.readouterr().err
    assert "half-move clock must be a whole number from 0 to 2147483647" in err and "Traceback" not in err


def test_an_unquoted_fen_to_perft_gets_a_hint_to_quote_it(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["perft", "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR", "w", "KQkq", "-", "0", "1", "3"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "invalid int value: 'w'; a FEN has spaces, so put it in quotes" in err and "Traceback" not in err


def test_bench_network_shows_where_a_pass_goes(capsys):
    args = ["bench", "network", "--preset", "tiny", "--batch-sizes", "1,4", "--seconds", "0.05", "--device", "cpu"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    assert all(column in out for column in ("input ms", "forward ms", "output ms"))
    assert re.search(r"tiny on cpu: [\d.]+ MFLOP/eval, best [\d.]+k? evals/s at batch [14]", out)


def test_bench_uci_prints_the_engine_beside_the_network_at_each_leaves_per_batch(capsys, tmp_path):
    import torch

    from alphazero.nn.network import AlphaZeroNet
    from alphazero.presets import get_preset
    from alphazero.store.checkpoint import save_model

    torch.manual_seed(0)
    save_model(tmp_path / "net.pt", AlphaZeroNet(get_preset("tiny").network))
    threads = torch.get_num_threads()
    try:
        args = ["bench", "uci", "--weights", str(tmp_path / "net.pt"), "--leaves", "1,4", "--seconds", "0.3",
                "--threads", "1", "--game-plies", "4", "--game-movetime", "50", "--visits-per-leaf", "8"]
        assert cli.main(args) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert all(column in out for column in ("engine nodes/s", "network evals/s", "engine / network"))
    assert re.search(r"│ +1 │ .*│ +1\.0 │", out) and "(default)" in out
    assert re.search(r"network's best: [\d.]+k? evals/s at batch \d+; the engine's default \(LeavesPerBatch \d+, "
                     r"VisitsPerLeaf 8\): "
                     r"[\d.]+k? nodes/s = \d+% of it", out)
    assert re.search(r"in a game \(the engine against itself, \d+ plies at movetime \d+ ms, the tree kept between "
                     r"moves\): [\d.]+k? nodes/s at [\d.]+ leaves a call = \d+% of the network's best", out)
