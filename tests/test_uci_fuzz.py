"""Fuzzed UCI input: malformed commands, FENs, moves and option values, in-process and over a pipe.

Whatever comes in, `isready` is answered within a second (the search runs on
its own thread and hears `stop` at once), every line out is a UCI line, and
every complaint is the engine's own `info string` (never the catch-all
`error in <command>: SomeException`, a failed search, or a traceback).
"""

from __future__ import annotations

import io
import queue
import random
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import chess
import pytest

from eval.uci import UciEngine
from tests.helpers import repo_env

ROOT = Path(__file__).resolve().parent.parent
HANG_S = 30.0
"""How long the subprocess test waits for a `readyok` before calling the engine hung. The promise, readyok
within a second whatever came before, holds because isready is answered as it is read, never behind a
search: the in-process test checks that, with no clock."""

FENS = [
    chess.STARTING_FEN,
    "r3k2r/p1ppqpb1/bn2pnp1/3PN3/1p2P3/2N2Q1p/PPPBBPPP/R3K2R w KQkq - 0 1",
    "rnbqkbnr/ppp1p1pp/8/3pPp2/8/8/PPPP1PPP/RNBQKBNR w KQkq f6 0 3",
    "k7/8/8/8/8/8/1R6/K7 w - - 99 100",  # every move ends the game
    "6k1/5ppp/8/8/8/8/8/R5K1 w - - 0 1",  # mate in one
    "7k/6Q1/6K1/8/8/8/8/8 b - - 0 1",  # checkmated
    "7k/8/6Q1/8/8/8/8/K7 b - - 0 1",  # stalemate
]
SPICE = ["²", "٣", "-1", "+5", "99999999999999999999", "0", "x", "/", "9", "K", "kk", "\u00e9", "\t", "e3", "-",
         "2147483648", "KQkq", "w", "b", "8", "p", "P"]
OPTION_NAMES = ["Nodes", "Weights", "Device", "MoveOverhead", "MovesToGo", "LeavesPerBatch", "MultiPV",
                "UCI_ShowWDL", "Ponder", "Threads", "NoSuchOption", "", "multipv", "Hash"]


def _mutated_fen(rng: random.Random) -> str:
    fen = rng.choice(FENS)
    for _ in range(rng.randint(0, 3)):
        kind = rng.randrange(5)
        i = rng.randrange(len(fen) + 1)
        if kind == 0 and fen:
            fen = fen[:i] + fen[i + 1:]
        elif kind == 1:
            fen = fen[:i] + rng.choice(SPICE) + fen[i:]
        elif kind == 2:
            fields = fen.split(" ")
            fields[rng.randrange(len(fields))] = rng.choice(SPICE)
            fen = " ".join(fields)
        elif kind == 3:
            fen = " ".join(fen.split(" ")[: rng.randint(1, 7)])
        else:
            fen = fen + " " + rng.choice(SPICE)
    return fen


def _moves(rng: random.Random, fen: str) -> str:
    """Some legal moves from the FEN (when python-chess reads it), then maybe garbage."""
    words = []
    try:
        board = chess.Board(fen)
        for _ in range(rng.randint(0, 6)):
            legal = list(board.legal_moves)
            if not legal:
                break
            move = rng.choice(legal)
            words.append(move.uci())
            board.push(move)
    except ValueError:
        pass
    if rng.random() < 0.4:
        words.append(rng.choice(["e2e5", "e7e8q", "a1a1", "0000", "e2e4e", "\u00e92e4", "h7h8k", "O-O"]))
    return " ".join(words)


def _go(rng: random.Random) -> str:
    # Every search is bounded (few nodes or milliseconds), or ended by a later stop.
    limit = rng.choice(["nodes 1", "nodes 7", f"nodes {rng.randint(1, 12)}", f"movetime {rng.randint(0, 40)}",
                        "depth 2", f"wtime {rng.randint(-50, 300)} btime {rng.randint(-50, 300)}",
                        "infinite", "ponder nodes 3", "ponder movetime 20", "nodes", "nodes -3 movetime x",
                        "mate 2 nodes 4", "searchmoves e2e4 nodes 4", "nodes 3 bogus", "movetime 99999999999999"])
    return f"go {limit}"


def _setoption(rng: random.Random) -> str:
    name = rng.choice(OPTION_NAMES)
    if name == "Nodes":
        value = rng.choice(["0", "-4", "abc", "3", "8", "999999999999", ""])
    elif name == "Threads":
        value = rng.choice(["-1", "x", "1", "5000"])  # only 1 thread, or values that are refused
    elif name == "Device":
        value = rng.choice(["cpu", "cuda:7", "", "gpu", "x" * 300])  # the network stays where it is
    else:
        value = rng.choice(["", "<empty>", "true", "false", "1", "3", "0", "-7", "300", "1e9", "x" * 300,
                            "/no/such/net.pt", "\u00b2", "a\x00b", "../" * 200])
    if rng.random() < 0.2:
        return f"setoption name {name}"
    return f"setoption name {name} value {value}"


def _position(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return f"position startpos moves {_moves(rng, chess.STARTING_FEN)}"
    fen = _mutated_fen(rng)
    return f"position fen {fen} moves {_moves(rng, fen)}" if rng.random() < 0.6 else f"position fen {fen}"


def _command(rng: random.Random) -> str:
    return rng.choice(["stop", "ponderhit", "ucinewgame", "debug on", "register later", "uci", "isready"])


def _malformed(rng: random.Random) -> str:
    return rng.choice(["position", "position fen", "position startpos moves", "go go go", "setoption value 3",
                       "position moves e2e4", "isready now", "x" * 20_000, "position fen " + "8/" * 500,
                       "go " + "nodes 1 " * 300])


def _noise(rng: random.Random) -> str:
    return "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randint(1, 40)))


# (weight, maker): positions and searches most, then stops, options and garbage.
_MAKERS = ((4, _position), (3, _go), (2, lambda rng: "stop"), (1, _setoption), (1, _command), (1, _malformed),
           (1, _noise))


# The cases the issue found, first, so that every run meets them: a search whose every
# line ends the game, stopped; a 300-character Weights; a Unicode digit in a FEN counter.
KNOWN_CASES = [
    "position fen k7/8/8/8/8/8/1R6/K7 w - - 99 100", "go infinite", "stop",
    "position fen k7/8/8/8/8/8/1R6/K7 w - - 99 100", "go movetime 1000", "stop",
    "setoption name Weights value " + "w" * 300, "position startpos", "go nodes 3",
    "position fen 4k3/8/8/8/8/8/8/4K3 w - - \u00b2 1", "go nodes 3",
]


def fuzz_lines(seed: int, count: int) -> list[str]:
    """KNOWN_CASES, then `count` UCI lines, some valid, most malformed; seeded."""
    rng = random.Random(seed)
    weights = [weight for weight, _ in _MAKERS]
    return KNOWN_CASES + [rng.choices(_MAKERS, weights)[0][1](rng) for _ in range(count)]


_MOVE = r"[a-h][1-8][a-h][1-8][qrbn]?"
_UCI_LINE = re.compile(rf"^(id name |id author |option name |uciok$|readyok$|info "
                       rf"|bestmove (0000|{_MOVE})( ponder {_MOVE})?$)")
_NOT_OURS = ("info string error in ", "info string search failed", "Traceback")


def _check_output(lines: list[str]) -> None:
    for line in lines:
        assert _UCI_LINE.match(line), f"not a UCI line: {line[:200]!r}"
        assert not line.startswith(_NOT_OURS), f"an error that is not the engine's own: {line[:300]!r}"


class _Lines(io.TextIOBase):
    """A thread-safe output stream that keeps the lines written."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self.lines.extend(text.splitlines())
        return len(text)


def _chunks(lines: list[str], size: int) -> Iterator[list[str]]:
    """The lines in groups of `size`, each to be followed by `isready`."""
    for i in range(0, len(lines), size):
        yield lines[i:i + size]


def test_fuzzed_lines_in_process(weights: Path, one_torch_thread: None) -> None:
    out = _Lines()
    engine = UciEngine(None, weights, "cpu", stdin=io.StringIO(""), stdout=out, nodes=8)
    engine.handle("isready")  # loads the network before the clock matters
    asked = 1
    try:
        for chunk in _chunks(fuzz_lines(seed=2024, count=400), 3):
            # The GUI sends the lines and isready at once: readyok comes while any search runs on,
            # so every isready is answered by the time the engine has read it.
            for line in chunk + ["isready"]:
                engine.handle(line)
                asked += line.split()[:1] == ["isready"]
            assert sum(line == "readyok" for line in list(out.lines)) == asked, f"an isready unanswered after {chunk}"
    finally:
        engine.stop_search()
    _check_output(out.lines)
    assert out.lines.count("readyok") == asked
    assert any(line.startswith("bestmove") for line in out.lines)


@pytest.fixture
def process(weights: Path, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    stderr = tmp_path / "stderr.txt"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "alphazero", "uci", "--weights", str(weights), "--device", "cpu",
             "--threads", "1", "--nodes", "8"],
            cwd=ROOT, env=repo_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    try:
        yield proc, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def test_fuzzed_lines_over_a_pipe(process: tuple[subprocess.Popen[bytes], Path]) -> None:
    proc, stderr = process
    assert proc.stdin is not None and proc.stdout is not None
    received: queue.Queue[str] = queue.Queue()
    stdout = proc.stdout

    def read() -> None:
        for raw in stdout:
            received.put(raw.decode("utf-8", "replace").rstrip("\n"))

    threading.Thread(target=read, daemon=True).start()
    seen: list[str] = []

    def until(prefix: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            line = received.get(timeout=max(deadline - time.monotonic(), 0.001))
            seen.append(line)
            if line.startswith(prefix):
                return

    def send(text: str) -> None:
        assert proc.stdin is not None
        proc.stdin.write(text.encode("utf-8", "surrogatepass") + b"\n")
        proc.stdin.flush()

    send("uci")
    until("uciok", 120)  # the interpreter and torch start first
    send("isready")
    until("readyok", 120)  # and the network loads
    for chunk in _chunks(fuzz_lines(seed=7, count=60) + ["\udcff\x00 \x80bytes"], 3):
        for line in chunk:
            if line.split()[:1] != ["isready"]:
                send(line)
        send("isready")
        try:
            until("readyok", HANG_S)
        except queue.Empty:
            pytest.fail(f"no readyok within {HANG_S:.0f} s after {[line[:100] for line in chunk]!r}")
    send("stop")
    send("quit")
    proc.wait(timeout=60)
    while not received.empty():
        seen.append(received.get())
    _check_output(seen)
    assert proc.returncode == 0
    assert "Traceback" not in stderr.read_text(encoding="utf-8", errors="replace")
