"""Helpers shared by the test modules (test modules import this, never each other).

Stockfish, synthetic shards and game records, fast run configs, evaluators
for the search, random network inputs, damaged files. Fixtures live in
conftest.py.
"""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import chess
import numpy as np
import pytest
import torch

from alphazero.chess.moves import NUM_MOVES, legal_move_indices
from alphazero.chess.stockfish import INSTALL_HINT, find_stockfish
from alphazero.config import Config, apply_overrides
from alphazero.nn.network import build_network
from alphazero.nn.planes import COMPACT_PLANES, NUM_SCALARS, compact_to_torch
from alphazero.presets import get_preset
from alphazero.store.rundir import RunDir
from alphazero.store.shards import Shard, read_shard, shard_from_records, shard_name, write_shard
from learner.game_targets import GameTargets
from learner.replay import Batch
from learner.replay_store import Block, Store
from mcts_ext.driver import run, uniform_evaluator
from mcts_ext.params import SearchParams
from mcts_ext.search import MultiGameSearch

ROOT = Path(__file__).resolve().parent.parent
"""The repository's root."""

SYZYGY_TABLES = ROOT / "tests" / "data" / "syzygy"
"""The few Syzygy tables the tests use (their source and terms: its README)."""
KQVK = "8/8/8/3k4/8/8/8/KQ6 w - - 0 1"
KRVK = "8/8/8/3k4/8/8/8/KR6 w - - 0 1"
KVKP_ONLY_KC2_HOLDS = "8/8/8/8/2p5/8/4k3/1K6 w - - 0 1"
"""White to move draws only by Kc2 (the king reaches the pawn's path); every other move loses."""


def repo_env() -> dict[str, str]:
    """Gets this process's environment with the repository first on PYTHONPATH, for a subprocess."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


# --- Stockfish ------------------------------------------------------------------------------------

REQUIRE_ENV = "ALPHAZERO_REQUIRE_STOCKFISH"


def python_stacks(pid: int) -> str:
    """The Python stacks of every thread of process ``pid`` (py-spy, the test extra's), for the message of a
    test whose command did not end in time: where it waits, read before it is killed."""
    try:
        dump = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60,
                              check=False)
    except FileNotFoundError:
        return "(no stacks: py-spy, of the test extra, is not installed)"
    except subprocess.TimeoutExpired:
        return f"(no stacks: py-spy took over 60 s on process {pid})"
    return dump.stdout if dump.returncode == 0 else f"(no stacks of process {pid}: {dump.stderr.strip()})"


# The command in a process of its own that SIGKILLs itself as the first shard lands in a folder: the kill comes
# at that event however busy the machine is (a test that polled for the shard could be starved until the command
# had finished the folder, or the whole run).
_KILLED_AT_FIRST_SHARD = """
import os
import signal
import sys
from pathlib import Path

import alphazero.store.shards as shards

folder = Path(sys.argv[1]).resolve()
write = shards.write_shard

def write_then_die(path, shard):
    write(path, shard)
    if Path(path).resolve().parent == folder:
        os.kill(os.getpid(), signal.SIGKILL)

shards.write_shard = write_then_die  # before the commands' modules import it
from alphazero.app import cli
sys.exit(cli.main(sys.argv[2:]))
"""


def kill_at_first_shard(args: list[str], folder: Path, *, bound_s: float = 300.0) -> None:
    """Runs ``alphazero ARGS`` in a process of its own, SIGKILLed as soon as its first shard in ``folder`` is
    written (renamed into place): a kill mid-run, with the command's other work in flight.

    The bound only stops a hang. Fails if the command ends otherwise.
    """
    process = subprocess.run([sys.executable, "-c", _KILLED_AT_FIRST_SHARD, str(folder), *args], cwd=ROOT,
                             env=repo_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=bound_s)
    assert process.returncode == -signal.SIGKILL, process.stderr.decode()


def stockfish_or_skip(find: Callable[[], str | None] = find_stockfish) -> str:
    """Returns Stockfish's path; skips the test without it, or FAILS it when CI requires it."""
    path = find()
    if path is None:
        if os.environ.get(REQUIRE_ENV, "") not in ("", "0"):
            pytest.fail(f"Stockfish is required ({REQUIRE_ENV}=1) but was not found; {INSTALL_HINT}")
        pytest.skip(f"Stockfish not found; {INSTALL_HINT}")
    return path


# --- files that fail ------------------------------------------------------------------------------


def fail_writes_under(monkeypatch: pytest.MonkeyPatch, module: object, folder: Path) -> None:
    """Makes ``module``'s atomic_write_text fail for files under ``folder``, as a disk gone read-only would."""
    import errno

    from alphazero.store.rundir import atomic_write_text

    def write(path, text):
        if Path(path).resolve().is_relative_to(folder.resolve()):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        atomic_write_text(path, text)

    monkeypatch.setattr(module, "atomic_write_text", write)


def overwrite_inside(path: Path, tensor: torch.Tensor, size: int = 4096) -> None:
    """Overwrites ``size`` bytes in the middle of ``tensor``'s data in a torch file, as a bad disk block would."""
    import zipfile

    data = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    assert len(data) > size
    with zipfile.ZipFile(path) as archive:
        entries = [info for info in archive.infolist() if archive.read(info) == data]
    assert len(entries) == 1, "the tensor is stored once, uncompressed"
    raw = bytearray(path.read_bytes())
    header = entries[0].header_offset
    name_length, extra_length = int.from_bytes(raw[header + 26:header + 28], "little"), \
        int.from_bytes(raw[header + 28:header + 30], "little")
    start = header + 30 + name_length + extra_length + (len(data) - size) // 2
    assert raw[start:start + size] == data[(len(data) - size) // 2:][:size]
    raw[start:start + size] = np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))


# --- runs -----------------------------------------------------------------------------------------

SELFPLAY_FAST = ["search.simulations=8", "search.playout_cap_fraction=0", "search.ply_limit=40",
                 "selfplay.games_per_actor=2", "selfplay.shard_games=1", "selfplay.weights_poll_seconds=0.1"]
"""Overrides for quick self-play: short, cheap games, a shard per game, every move a training target."""

TRAIN_FAST = ["search.simulations=8", "search.playout_cap_fraction=0", "search.ply_limit=30",
              "selfplay.games_per_actor=4", "selfplay.shard_games=2",
              "selfplay.weights_poll_seconds=1", "learner.batch_size=32", "learner.min_window_positions=64",
              "learner.window_positions=5000", "learner.checkpoint_every=5", "learner.log_every=5",
              "learner.max_sample_reuse=50"]
"""Overrides for a quick `alphazero train`: self-play as SELFPLAY_FAST, a learner that starts at once."""


def old_tiny() -> Config:
    """The tiny preset as it was before issue 79's defaults (2026-12-05): 2 blocks, no reply head, short-term
    value target or playout cap, 16 simulations. Its network hashes as every checkpoint of such a run carries."""
    return apply_overrides(get_preset("tiny"), [
        "network.blocks=2", "network.reply_policy_head=false", "learner.reply_policy_weight=0",
        "learner.value_target_short_term_weight=0",
        "search.simulations=16", "search.playout_cap_fraction=0", "search.playout_cap_simulations=100"])


def without_game_targets(config: Config) -> Config:
    """``config`` with a learner that trains no target beside each position's own (no reply, short-term value
    or moves left): for tests whose batches are made by hand, without the games those targets come from."""
    return apply_overrides(config, ["learner.reply_policy_weight=0", "learner.value_target_short_term_weight=0",
                                    "learner.moves_left_weight=0"])


OLD_TINY_HASH = "0f5ff143f79d54704f879fd3632e58943a50687df070518d93d1b88fc933e693"
"""architecture_hash(old_tiny()): networks without the heads and blocks added since hash as before them."""


def fast_run(path: Path, *extra: str) -> tuple[RunDir, object]:
    """Creates (or opens) a tiny-preset run with SELFPLAY_FAST and ``extra`` overrides."""
    return RunDir.create_or_open(path, get_preset("tiny"), [*SELFPLAY_FAST, *extra])


def check_shard_invariants(path: Path) -> None:
    shard = read_shard(path)
    assert shard.planes.shape == (len(shard), 112) and shard.scalars.shape == (len(shard), 7)
    for game_number, game in enumerate(shard.games):
        rows = np.flatnonzero(shard.game == game_number)
        board = chess.Board(game["start_fen"])
        for row, uci in zip(rows, game["moves"]):
            assert shard.ply[row] == board.ply()
            start, end = shard.policy_offsets[row], shard.policy_offsets[row + 1]
            # The visit distribution covers exactly the legal moves and sums to 1.
            assert sorted(shard.policy_indices[start:end]) == sorted(legal_move_indices(board))
            assert shard.policy_probs[start:end].sum() == pytest.approx(1.0, abs=1e-5)
            board.push_uci(uci)
        results = shard.results[rows]
        assert set(results.tolist()) <= {-1, 0, 1}
        if game["winner"] is None:
            assert not results.any()
        else:
            assert np.all(results[:-1] == -results[1:])  # alternate with the mover
            assert results[-1] == 1 or game["termination"] == "resignation"


# --- search ---------------------------------------------------------------------------------------


def play_games(search: MultiGameSearch, evaluate=uniform_evaluator) -> list[dict]:
    records: list[dict] = []
    run(search, evaluate, on_step=lambda rows: records.extend(r for _, r in search.take_finished()))
    return records


def material_evaluator(planes: np.ndarray, scalars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Uniform priors; value = material balance for the side to move (P1 N3 B3 R5 Q9), squashed."""
    worth = np.array([1, 3, 3, 5, 9, 0], dtype=np.float64)
    counts = np.array([[bin(int(b)).count("1") for b in row[:12]] for row in planes], dtype=np.float64)
    balance = counts[:, :6] @ worth - counts[:, 6:12] @ worth
    return np.zeros((len(planes), NUM_MOVES), np.float32), np.tanh(balance / 5).astype(np.float32)


# --- synthetic shards and game records ------------------------------------------------------------

LEGAL_MOVES = 20
PER_GAME = 10


def make_shard(ids: range, seed: int = 0, legal: int = LEGAL_MOVES) -> Shard:
    """Builds a shard of synthetic positions whose scalars[:, 1] (the move number) is the position's id.

    Each position has ``legal`` random legal moves and a random visit share over them.
    """
    rng = np.random.default_rng([seed, ids.start])
    n = len(ids)
    scalars = rng.random((n, 7), dtype=np.float32)
    scalars[:, 1] = np.asarray(ids, dtype=np.float32)
    indices = np.concatenate([rng.choice(NUM_MOVES, legal, replace=False) for _ in range(n)]).astype(np.int16)
    probs = rng.dirichlet(np.full(legal, 0.5), size=n).astype(np.float32).reshape(-1)
    return Shard(
        planes=rng.integers(0, np.iinfo(np.uint64).max, size=(n, 112), dtype=np.uint64, endpoint=True),
        scalars=scalars,
        policy_offsets=np.arange(n + 1, dtype=np.int64) * legal,
        policy_indices=indices,
        policy_probs=probs,
        results=rng.integers(-1, 2, n).astype(np.int8),
        game=np.zeros(n, np.int32),
        ply=np.arange(n, dtype=np.int16),
        root_values=rng.uniform(-1, 1, n).astype(np.float32),
        games=[{"samples": n}],
    )


def add_shard(directory: Path, ids: range, seed: int = 0) -> Path:
    """Writes a synthetic shard of positions ``ids`` into ``directory``; returns its path (names sort by age)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / shard_name("test")
    write_shard(path, make_shard(ids, seed))
    return path


def games_shard(first_game: int, games: int, *, ids: bool = True) -> Shard:
    """A shard of ``games`` games of PER_GAME positions; position id // PER_GAME is the game's number."""
    shard = make_shard(range(first_game * PER_GAME, (first_game + games) * PER_GAME))
    return dataclasses.replace(
        shard, game=np.repeat(np.arange(games), PER_GAME).astype(np.int32),
        games=[{"samples": PER_GAME, **({"game_id": f"game-{first_game + i}"} if ids else {})}
               for i in range(games)])


def add_games(directory: Path, first_game: int, games: int, *, ids: bool = True) -> Path:
    """Writes a games_shard; without ids under a fixed old name, so the split of its games is fixed too."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (shard_name("test") if ids else f"{first_game:020d}-old-shard.npz")
    write_shard(path, games_shard(first_game, games, ids=ids))
    return path


WHITE_START = "rnbqkbnr/pppppppp/8/8/8/8/PPPPPPPP/RNBQKBNR w KQkq - 0 1"


def game_record(white: float, black: float, winner: str | None, *, threshold: float | None = None,
                enabled: bool = False) -> dict:
    """A minimal finished-game record with one training sample and the calibration's keys."""
    return {
        "start_fen": WHITE_START, "moves": ["e2e4"], "result": "1/2-1/2", "winner": winner, "termination": "x",
        "plies": 1, "resign_enabled": enabled, "resign_threshold": threshold, "resign_consecutive": 3,
        "resign_values": {"white": white, "black": black},
        "planes": np.zeros((1, 112), np.uint64), "scalars": np.zeros((1, 7), np.float32),
        "plies_of_samples": np.zeros(1, np.int16), "root_values": np.zeros(1, np.float32),
        "policy_offsets": np.array([0, 1], np.int32), "policy_indices": np.array([7], np.int16),
        "policy_probs": np.ones(1, np.float32), "results": np.zeros(1, np.int8),
    }


def write_games(run: RunDir, records: list[dict]) -> Path:
    path = run.selfplay / shard_name("test")
    write_shard(path, shard_from_records(records))
    return path


# --- network inputs and weights -------------------------------------------------------------------


def random_compact(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gets ``n`` random compact inputs (planes uint64 [n, 112], scalars float32 [n, 7]): not positions, but
    the network takes any bits."""
    rng = np.random.default_rng(seed)
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(n, COMPACT_PLANES), dtype=np.uint64, endpoint=True)
    scalars = rng.integers(0, 100, size=(n, NUM_SCALARS)).astype(np.float32)
    return planes, scalars


def trained_a_little(model: torch.nn.Module) -> torch.nn.Module:
    """Moves weights, batch-norm statistics and zero-initialized scales off their defaults, so outputs differ;
    returns the model in eval mode."""
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    model.train()
    model(*compact_to_torch(*random_compact(8, seed=3), "cpu"))
    return model.eval()


def batch_from_dense(planes: np.ndarray, scalars: np.ndarray, policy: np.ndarray, legal: np.ndarray,
                     z: np.ndarray, q: np.ndarray | None = None, action_values: np.ndarray | None = None) -> Batch:
    """Builds a batch from dense targets (float32 [B, 4672] visit shares, bool [B, 4672] legal moves, and
    float32 [B, 4672] win probabilities, NaN where none, or None).

    Raises:
        ValueError: a visit share or a win probability off the legal moves (the entries are the legal moves).
    """
    if np.any(policy[~legal]):
        raise ValueError("a batch's visit shares must be zero off its legal moves")
    rows, moves = np.nonzero(legal)  # row-major: each position's moves in ascending order
    offsets = np.concatenate([np.zeros(1, np.int64), np.cumsum(np.count_nonzero(legal, axis=1))])
    batch = Batch(planes, scalars, offsets, moves.astype(np.int16), policy[rows, moves].astype(np.float32), z, q)
    return batch_with_action_values(batch, action_values)


def batch_with_action_values(batch: Batch, action_values: np.ndarray | None) -> Batch:
    """Gets ``batch`` with other win probabilities: dense float32 [B, 4672], NaN where none, or None.

    Raises:
        ValueError: a win probability off the legal moves.
    """
    wins = None
    if action_values is not None:
        if np.isfinite(action_values[~batch.legal]).any():
            raise ValueError("a batch's win probabilities must be NaN off its legal moves")
        wins = action_values[batch.rows, batch.moves.astype(np.int64)].astype(np.float32)
    return dataclasses.replace(batch, wins=wins)  # (a new instance: the cached dense arrays stay behind)


def fixed_batch(size: int = 48, seed: int = 0) -> Batch:
    """Random positions, each with 10 legal moves and a peaked target over them."""
    rng = np.random.default_rng(seed)
    legal = np.zeros((size, 4672), dtype=bool)
    policy = np.zeros((size, 4672), dtype=np.float32)
    for row in range(size):
        moves = rng.choice(4672, 10, replace=False)
        legal[row, moves] = True
        policy[row, moves] = rng.dirichlet(np.full(10, 0.3))
    planes = rng.integers(0, np.iinfo(np.uint64).max, size=(size, 112), dtype=np.uint64, endpoint=True)
    scalars = rng.random((size, 7), dtype=np.float32)
    return batch_from_dense(planes, scalars, policy, legal, rng.integers(-1, 2, size).astype(np.float32))


class WatchedOutput(io.StringIO):
    """An in-process engine's output that sets ``seen`` once a written piece holds ``wanted``: a test waits on the
    event, not on a clock."""

    def __init__(self, wanted: str = " pv ") -> None:
        super().__init__()
        self.wanted = wanted
        self.seen = threading.Event()

    def write(self, text: str) -> int:
        written = super().write(text)
        if self.wanted in text:
            self.seen.set()
        return written


def spy_legal_passes(evaluator: Any) -> list[bool]:
    """Records, for each legal pass asked of ``evaluator`` (an alphazero.nn.forward.Evaluator), whether it asked
    for the head's action values."""
    asked: list[bool] = []
    for name in ("submit_legal", "evaluate_legal"):
        real = getattr(evaluator, name)

        def spy(*args: Any, _real: Any = real, **kwargs: Any) -> Any:
            asked.append(bool(kwargs.get("action_values", False)))
            return _real(*args, **kwargs)

        setattr(evaluator, name, spy)
    return asked


def engine_with_spies(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, io.StringIO, list[list[bool]]]:
    """An in-process UCI engine on ``run`` (float32) with empty input and, per network it loads, its legal passes
    (spy_legal_passes)."""
    import eval.uci as uci_module

    load_network = uci_module.load_network
    spies: list[list[bool]] = []

    def spied(*args: Any, **kwargs: Any) -> Any:
        network = load_network(*args, **kwargs)
        spies.append(spy_legal_passes(network.evaluator))
        return network

    monkeypatch.setattr(uci_module, "load_network", spied)
    out = io.StringIO()
    engine = uci_module.UciEngine(run.root, None, "cpu", stdin=io.StringIO(""), stdout=out)
    engine.handle("setoption name Precision value float32")
    return engine, out, spies


def go_nodes(engine: Any, fen: str, nodes: int) -> None:
    """Has an in-process engine search ``fen`` for ``nodes`` nodes and waits for its answer."""
    engine.handle(f"position fen {fen}")
    engine.handle(f"go nodes {nodes}")
    engine.wait()


def zeroed_model(*, head: bool = True, seed: int = 6) -> torch.nn.Module:
    """The tiny network with equal priors and values 0 everywhere (its policy and value layers zeroed) and, with
    ``head``, a 'logit' head whose win probabilities differ from move to move (its weights perturbed): one
    simulation then visits the move the head rates highest where the search reads the head, the first otherwise."""
    torch.manual_seed(seed)
    model = build_network(dataclasses.replace(get_preset("tiny").network,
                                              action_value_head="logit" if head else "none"))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.startswith("action_value"):
                parameter.add_(torch.randn_like(parameter))
            elif name.startswith(("policy_out", "value_out")):
                parameter.zero_()
    return model.eval()


# --- a game's targets: the positions of a shard in order, and two hand-made games -------------------------------

def every_position(shard: Shard, targets: GameTargets) -> Batch:
    """Gets the shard's positions in its order, as the replay store gathers them with ``targets``."""
    store = Store(len(shard))
    store.append_block(Block.of("shard", 0, shard, np.arange(len(shard)), targets=targets))
    return store.gather(np.arange(len(shard)))


HAND_GAME = [0, 1, 0, 0, 1, 0, 0, 1, 0, 1]
"""The game of each sample of hand_made_shard: two games, their samples interleaved as shards may hold them."""
HAND_PLY = [0, 0, 1, 2, 1, 3, 4, 2, 5, 4]
"""The ply of each sample of hand_made_shard (game 1's ply 3 not written: a playout cap's cheap move)."""
HAND_ROOT = [0.1, 0.2, -0.2, 0.3, 0.1, -0.4, 0.5, -0.3, -0.6, 0.7]
HAND_RESULT = [1, 0, -1, 1, 0, -1, 1, 0, -1, 0]


def hand_made_shard() -> Shard:
    """The two games above; a sample's scalars[:, 1] is its row, so that a batch says which sample each row is."""
    shard = make_shard(range(len(HAND_GAME)), seed=5)
    return dataclasses.replace(shard, game=np.array(HAND_GAME, np.int32), ply=np.array(HAND_PLY, np.int16),
                               root_values=np.array(HAND_ROOT, np.float32),
                               results=np.array(HAND_RESULT, np.int8),
                               games=[{"samples": 6, "game_id": "g0"}, {"samples": 4, "game_id": "g1"}])


# --- a tower's variant on real positions and the CPU's fast paths ---------------------------------------------------

def assert_evaluates_real_positions(model: torch.nn.Module) -> None:
    """Checks that ``model`` evaluates three real positions: shapes, finite logits, values within [-1, 1], and
    boards told apart."""
    from alphazero.nn.planes import encode_position

    parts = [encode_position(), encode_position("r1bqkbnr/pppp1ppp/2n5/4p3/4P3/5N2/PPPP1PPP/RNBQKB1R w KQkq - 2 3"),
             encode_position(moves=["e2e4", "c7c5", "g1f3"])]
    planes = np.concatenate([p for p, _ in parts])
    scalars = np.concatenate([s for _, s in parts])
    with torch.no_grad():
        out = model(*compact_to_torch(planes, scalars, "cpu"))
    assert out.policy_logits.shape == (3, NUM_MOVES) and out.value.shape == (3,)
    assert bool(torch.isfinite(out.policy_logits).all()) and bool((out.value.abs() <= 1).all())
    assert not torch.allclose(out.policy_logits[0], out.policy_logits[1])


def assert_runs_folded_bf16_and_compiled(model: torch.nn.Module) -> None:
    """Checks that ``model`` (a resnet) gives its outputs folded (the evaluator's inference copy), in channels_last
    under bf16 autocast (as a CPU with native bf16 runs it: alphazero.nn.precision) and through torch.compile's
    Dynamo as one graph (fullgraph: no break, no data-dependent branch; the eager backend, quick here)."""
    import torch.nn.functional as F

    from alphazero.nn.network import fold_batch_norm

    inputs = compact_to_torch(*random_compact(6, seed=5), "cpu")
    with torch.no_grad():
        reference = model(*inputs)
        folded = fold_batch_norm(model)
        assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in folded.tower.modules())
        torch.testing.assert_close(folded(*inputs).policy_logits, reference.policy_logits, atol=1e-4, rtol=1e-4)
        fast = fold_batch_norm(model).to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = fast(*inputs)
        torch.testing.assert_close(low.value, reference.value, atol=0.05, rtol=0.05)
        assert (F.softmax(low.policy_logits, 1) - F.softmax(reference.policy_logits, 1)).abs().max() < 0.05
        compiled = torch.compile(model, backend="eager", fullgraph=True)
        torch.testing.assert_close(compiled(*inputs).policy_logits, reference.policy_logits)


def assert_a_tower_setting_hashes_apart(name: str, values: tuple[int, ...]) -> None:
    """Checks that network.``name`` (a setting of the tower, 0 for off) changes the architecture hash with each of
    ``values``, that 0 keeps the old tiny's hash (its checkpoints carry it), and that a config.toml written before
    the setting existed reads as 0."""
    from alphazero.config import to_toml
    from alphazero.config_compat import architecture_hash
    from alphazero.presets import from_toml

    tiny = old_tiny()
    assert getattr(tiny.network, name) == 0 and architecture_hash(tiny) == OLD_TINY_HASH
    hashes = {architecture_hash(apply_overrides(tiny, [f"network.{name}={value}"])) for value in (0, *values)}
    assert len(hashes) == 1 + len(values)
    old_text = "\n".join(line for line in to_toml(tiny).splitlines() if name not in line)
    assert name in to_toml(tiny) and from_toml(old_text) == tiny


def real_games(*, playout_cap_fraction: float = 0.0, seed: int = 3) -> Shard:
    """Two short self-play games of the real search (12 plies each); with playout_cap_fraction, cheap moves
    write no sample."""
    params = SearchParams(simulations=8, ply_limit=12, playout_cap_fraction=playout_cap_fraction,
                          playout_cap_simulations=2)
    search = MultiGameSearch(2, params, seed=seed)
    for slot in range(2):
        search.start_game(slot)
    records: list[dict] = []
    run(search, uniform_evaluator, on_step=lambda rows: records.extend(r for _, r in search.take_finished()))
    return shard_from_records(records)
