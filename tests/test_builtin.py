"""The network that ships (alphazero/weights), `--weights builtin`, the fallback of runs without checkpoints,
and `alphazero train --init`."""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import re
import tomllib
from pathlib import Path

import chess
import pytest
import torch

import alphazero.nn.builtin
from alphazero.app import cli
from alphazero.config import NetworkConfig
from alphazero.errors import UserError
from alphazero.nn.builtin import BUILTIN_FILE
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint, save_model
from alphazero.store.rundir import RunDir
from alphazero.store.sources import FRESH, NetworkCache, NetworkSource, load_network, read_weights, resolve_source
from eval.agents import parse_player
from eval.network_agents import PolicyAgent
from eval.uci import UciEngine

ROOT = Path(__file__).resolve().parent.parent
TINY = get_preset("tiny")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def empty_run(tmp_path: Path) -> Path:
    RunDir.create_or_open(tmp_path / "run", TINY)
    return tmp_path / "run"


def test_the_builtin_network_ships_with_its_card_and_is_package_data() -> None:
    assert BUILTIN_FILE.is_file() and BUILTIN_FILE.stat().st_size < 8_000_000  # a few MB
    card = BUILTIN_FILE.with_name("README.md").read_text()
    readme = (ROOT / "README.md").read_text()
    recipe = re.search(r"## Start from knowledge.*?```bash\n(.*?)\n```", readme, flags=re.S)
    assert recipe is not None and "--export alphazero/weights/builtin.pt" in recipe.group(1)
    assert recipe.group(1) in card  # the card shows the command the README documents
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = pyproject["tool"]["setuptools"]["package-data"]["alphazero"]
    for name in ("weights/builtin.pt", "weights/README.md"):
        assert any(fnmatch.fnmatch(name, pattern) for pattern in patterns), name


def test_the_builtin_network_carries_its_card_s_notice_and_the_one_before_stays_by_name() -> None:
    # The licence of part of its data (CC BY-SA) asks for the attribution to travel with the weights: the file
    # carries the notice the card quotes, which `alphazero uci` says as `info string network notice: ...`.
    card = BUILTIN_FILE.with_name("README.md").read_text()
    quoted = " ".join(line.removeprefix("> ") for line in card.splitlines() if line.startswith("> "))
    assert "CC BY-SA 3.0" in quoted and read_weights("builtin").notice == quoted
    shipped = alphazero.nn.builtin.shipped_networks()
    replaced = {"builtin-2026-11-25", "builtin-2026-11-28", "builtin-2026-11-29"}
    assert {"builtin"} | replaced <= set(shipped)  # those it replaced, by name
    assert len({path.read_bytes() for path in shipped.values()}) == len(shipped)  # each a network of its own


def test_weights_builtin_loads_and_plays(tmp_path: Path) -> None:
    network = load_network(NetworkSource(tmp_path / "nowhere", weights=Path("builtin")), device="cpu")
    assert network.label == "built-in network" and network.tag == "builtin" and not network.fresh
    assert network.config is not None  # the file carries the config it was trained with
    agent = parse_player("policy:weights=builtin", device="cpu", networks=NetworkCache())
    assert isinstance(agent, PolicyAgent) and agent.name == "policy@builtin"
    board = chess.Board()
    assert agent.choose([board])[0].move in board.legal_moves


def test_a_run_without_checkpoints_plays_the_builtin_network_and_says_so(empty_run: Path, tmp_path: Path,
                                                                         capsys) -> None:
    network = load_network(NetworkSource(empty_run), device="cpu")
    said = capsys.readouterr().err
    assert network.tag == "builtin" and "no checkpoint yet; playing with the built-in network" in said
    missing = load_network(NetworkSource(tmp_path / "missing"), device="cpu")
    assert missing.tag == "builtin" and "does not exist; playing with the built-in network" in capsys.readouterr().err
    assert load_network(NetworkSource(empty_run, fallback=FRESH), device="cpu").fresh
    save_checkpoint(empty_run, AlphaZeroNet(TINY.network), None, 7, TINY)
    assert load_network(NetworkSource(empty_run), device="cpu").label == "step 7"  # a checkpoint comes first


def test_without_a_builtin_network_the_fallback_is_fresh_and_builtin_is_refused(empty_run: Path, monkeypatch,
                                                                                capsys) -> None:
    monkeypatch.setattr(alphazero.nn.builtin, "BUILTIN_FILE", empty_run / "no-such.pt")
    assert load_network(NetworkSource(empty_run), device="cpu").fresh
    assert "freshly initialised" in capsys.readouterr().err
    with pytest.raises(UserError, match="no built-in network"):
        load_network(NetworkSource(weights=Path("builtin")), device="cpu")


def test_a_network_that_shipped_before_is_named_builtin_and_its_date(tmp_path: Path, monkeypatch,
                                                                     capsys) -> None:
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "builtin.pt").write_bytes(BUILTIN_FILE.read_bytes())
    (weights / "builtin-2026-11-25.pt").write_bytes(BUILTIN_FILE.read_bytes())
    monkeypatch.setattr(alphazero.nn.builtin, "BUILTIN_FILE", weights / "builtin.pt")
    assert resolve_source(NetworkSource(weights=Path("builtin-2026-11-25"))).path == weights / "builtin-2026-11-25.pt"
    network = load_network(NetworkSource(tmp_path / "nowhere", weights=Path("builtin-2026-11-25")), device="cpu")
    assert network.tag == "builtin-2026-11-25" and network.label == "built-in network builtin-2026-11-25"
    agent = parse_player("policy:weights=builtin-2026-11-25", device="cpu", networks=NetworkCache())
    assert agent.name == "policy@builtin-2026-11-25"
    with pytest.raises(UserError, match=r"no shipped network is named 'builtin-1999'.*has: builtin, "
                                        r"builtin-2026-11-25"):
        resolve_source(NetworkSource(weights=Path("builtin-1999")))
    # A file of that name where the option points is that file, not a shipped network.
    monkeypatch.chdir(tmp_path)
    save_model(tmp_path / "builtin-mine", AlphaZeroNet(TINY.network), step=1, summary="a user's net")
    assert resolve_source(NetworkSource(weights=Path("builtin-mine"))).path == Path("builtin-mine")


def test_uci_plays_the_builtin_network(empty_run: Path) -> None:
    for run, weights in ((None, "builtin"), (empty_run, None)):
        out, err = io.StringIO(), io.StringIO()
        commands = "uci\nisready\nposition startpos moves e2e4\ngo nodes 8\nquit\n"
        UciEngine(run, weights, "cpu", stdin=io.StringIO(commands), stdout=out, stderr=err, threads=1).run()
        lines = out.getvalue().splitlines()
        # and what it runs in (issue 32: bf16 where native and measured faster, else float32), and why
        assert any(re.match(r"info string network: built-in network on cpu \(1 thread[^)]*\), (bf16|float32) \(",
                            line) for line in lines), lines
        best = [line for line in lines if line.startswith("bestmove")][0].split()[1]
        board = chess.Board()
        board.push_uci("e2e4")
        assert chess.Move.from_uci(best) in board.legal_moves


def test_weights_are_named_by_file_run_or_builtin(empty_run: Path, tmp_path: Path) -> None:
    def resolve_weights(spec: str | Path) -> Path | None:
        return resolve_source(NetworkSource(weights=Path(spec))).path

    assert resolve_weights("builtin") == BUILTIN_FILE
    with pytest.raises(UserError, match="no checkpoint"):
        resolve_weights(empty_run)
    model = AlphaZeroNet(TINY.network)
    path = save_checkpoint(empty_run, model, None, 12, TINY)
    assert resolve_weights(empty_run) == path
    by_run = read_weights(empty_run)
    assert by_run.network == TINY.network and by_run.step == 12
    save_model(tmp_path / "net.pt", model, step=3, summary="a test net")
    by_file = read_weights(tmp_path / "net.pt")
    assert by_file.step == 3 and "a test net" in by_file.summary
    with pytest.raises(UserError, match="does not exist"):
        read_weights(tmp_path / "nothing.pt")


# --- alphazero train --init ---------------------------------------------------------------------------


def test_init_refuses_a_run_with_checkpoints(empty_run: Path, tmp_path: Path, capsys) -> None:
    save_checkpoint(empty_run, AlphaZeroNet(TINY.network), None, 5, TINY)
    assert cli.main(["train", "--run", str(empty_run), "--init", "builtin", "--minutes", "0.01", "--quiet"]) == 2
    assert "already has checkpoints" in capsys.readouterr().err


@pytest.mark.slow
def test_train_init_starts_from_the_given_weights(tmp_path: Path) -> None:
    pytest.importorskip("ray")
    from tests.helpers import TRAIN_FAST

    # An architecture unlike the preset's: the new run takes the init's.
    network = NetworkConfig(blocks=1, filters=16, policy_filters=16, policy_kernel=1, value_filters=4,
                            value_hidden=32)
    torch.manual_seed(123)
    model = AlphaZeroNet(network)
    save_model(tmp_path / "init.pt", model)
    run = tmp_path / "run"
    overrides = [item for override in TRAIN_FAST for item in ("--set", override)]
    assert cli.main(["train", "--run", str(run), "--init", str(tmp_path / "init.pt"), "--minutes", "0.05",
                     "--actors", "1", "--quiet", *overrides]) == 0
    # The training-only heads are the preset's (tiny trains a reply head: issue 79), the rest the weights'.
    assert RunDir(run).read_config().network == dataclasses.replace(network, reply_policy_head=True)
    first = load_checkpoint(run / "checkpoints" / "step_000000000.pt")
    for name, tensor in model.state_dict().items():
        assert torch.equal(first["model"][name], tensor), name
    assert latest_checkpoint(run) is not None


def test_init_takes_fine_tuning_defaults_and_the_learning_rate_its_weights_ended_at(tmp_path: Path) -> None:
    import argparse

    from alphazero.app.train import init_defaults
    from alphazero.config import apply_overrides, to_toml
    from alphazero.presets import INIT_DEFAULTS
    from alphazero.store.rundir import open_run_from_args

    builtin = read_weights("builtin")
    trained = builtin.trained_with.learner
    ended = trained.learning_rate(builtin.step - 1)
    defaults = init_defaults(builtin, None, [])
    assert defaults[:len(INIT_DEFAULTS)] == list(INIT_DEFAULTS)
    # Tiny's batch is the pretraining's (256): the rate goes on where pretraining left it, held constant.
    assert f"learner.learning_rates={ended:.6g}" in defaults and "learner.lr_boundaries=" in defaults
    assert f"learner.learning_rates={ended * 512 / trained.batch_size:.6g}" in init_defaults(
        builtin, None, ["learner.batch_size=512"])  # the same step per sample at another batch size
    assert init_defaults(builtin, None, ["learner.learning_rates=0.01"]) == list(INIT_DEFAULTS)
    # A --set that is only valid beside the defaults (it needs frozen batch norm) is read beside them.
    assert init_defaults(builtin, None, ["learner.trainable=policy_head"])[:len(INIT_DEFAULTS)] == list(INIT_DEFAULTS)
    args = argparse.Namespace(run=tmp_path / "run", preset=None,
                              overrides=["search.simulations=100", "learner.freeze_batch_norm=false"])
    _, config = open_run_from_args(args, builtin.overrides(), defaults=defaults, announce=False)
    assert config.network == dataclasses.replace(builtin.network, reply_policy_head=True)  # tiny's, fresh
    assert config.search.algorithm == "puct" and config.learner.value_target_short_term_weight == 0
    assert config.search.simulations == 100 and not config.learner.freeze_batch_norm  # --set wins
    assert config.learner.learning_rate(0) == config.learner.learning_rate(10**6) == pytest.approx(ended)
    assert config.learner.value_target_q_weight == 1.0
    # Weights that do not say how they were trained (a bare model file) keep the preset's schedule.
    save_model(tmp_path / "bare.pt", AlphaZeroNet(TINY.network))
    assert init_defaults(read_weights(tmp_path / "bare.pt"), None, []) == list(INIT_DEFAULTS)
    assert apply_overrides(TINY, INIT_DEFAULTS) != TINY and "freeze_batch_norm = true" in to_toml(
        apply_overrides(TINY, INIT_DEFAULTS))
