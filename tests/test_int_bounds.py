"""Integers too large for what they reach (a C int, mostly) are refused by name, with their range, in one line:
before a run's config.toml is written or any process starts, never as an OverflowError from deep inside; and a
self-play actor whose constructor raises stops self-play with one line instead of being restarted without end."""

from __future__ import annotations

import dataclasses
import re
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from alphazero.app import cli
from alphazero.config import SEED_RANGE, Config, apply_overrides, to_toml
from alphazero.errors import UserError
from alphazero.out_of_memory import out_of_memory_in
from alphazero.presets import get_preset
from alphazero.store.rundir import RunDir
from eval.agents import parse_player
from mcts_ext.params import C_INT_MAX, SearchParams, settings_of
from selfplay.driver import actor_start_failure

HUGE = "99999999999999999999999"
SEEDS = ("learner.seed", "pretrain.seed")


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The command's stderr, checked to be one line and no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


def _int_fields() -> list[str]:
    """Every integer field of the config (a list of integers too), as section.field."""
    config = Config()
    sections = [section.name for section in dataclasses.fields(config)
                if dataclasses.is_dataclass(getattr(config, section.name))]
    return [f"{section}.{f.name}" for section in sections
            for f in dataclasses.fields(getattr(config, section)) if f.type in ("int", "tuple[int, ...]")]


def test_a_perft_depth_past_its_range_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    for depth in (HUGE, str(cli.MAX_PERFT_DEPTH + 1)):
        assert cli.main(["perft", "startpos", depth]) == 2
        said = f"depth must lie in [1, {cli.MAX_PERFT_DEPTH}] (deeper counts would run for years), got {depth}"
        assert said in _one_line(capsys)


@pytest.mark.parametrize("dotted", [name for name in _int_fields() if name not in SEEDS])
def test_every_integer_field_is_bounded_by_a_c_int(dotted: str) -> None:
    value = f"[{C_INT_MAX + 1}]" if dotted == "learner.lr_boundaries" or dotted == "eval.stockfish_elos" \
        else str(C_INT_MAX + 1)
    with pytest.raises(UserError, match=rf"^{re.escape(dotted)}(\[0\])? must lie in \[-?\d+, {C_INT_MAX}\], "):
        apply_overrides(get_preset("small"), [f"{dotted}={value}"])


def test_integers_at_a_c_ints_largest_are_taken() -> None:
    config = apply_overrides(get_preset("small"), [f"search.simulations={C_INT_MAX}",
                                                    f"selfplay.max_games={C_INT_MAX}"])
    assert (config.search.simulations, config.selfplay.max_games) == (C_INT_MAX, C_INT_MAX)


@pytest.mark.parametrize("dotted", SEEDS)
def test_a_seed_takes_any_signed_64_bit_value_that_is_not_negative(dotted: str) -> None:
    config = apply_overrides(get_preset("small"), [f"{dotted}={SEED_RANGE[1]}"])
    assert getattr(config, dotted.split(".")[0]).seed == 2**63 - 1
    with pytest.raises(UserError, match=rf"{re.escape(dotted)} must lie in \[0, {2**63 - 1}\], got {2**63}"):
        apply_overrides(get_preset("small"), [f"{dotted}={2**63}"])
    with pytest.raises(UserError, match=rf"{re.escape(dotted)} must be at least 0, got -1"):
        apply_overrides(get_preset("small"), [f"{dotted}=-1"])  # numpy's generators refuse a negative seed


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(SearchParams) if type(f.default) is int])
def test_every_integer_search_setting_fits_its_c_int(name: str) -> None:
    spec = settings_of(SearchParams)[name]
    assert spec.maximum is not None and spec.maximum <= C_INT_MAX
    with pytest.raises(ValueError, match=rf"^{name} must lie in \[\d+, {C_INT_MAX}\], got {C_INT_MAX + 1}$"):
        SearchParams(**{name: C_INT_MAX + 1})


def test_train_refuses_a_huge_setting_before_it_writes_the_config(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    assert cli.main(["train", "--run", str(run), "--minutes", "0.05", "--set", f"search.simulations={HUGE}"]) == 2
    assert f"search.simulations must lie in [1, {C_INT_MAX}], got {HUGE}" in _one_line(capsys)
    assert not (run / "config.toml").exists()


def test_a_saved_config_with_a_huge_value_is_refused_where_it_is_read(tmp_path: Path) -> None:
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"))
    run.config_file.write_text(to_toml(config).replace(f"simulations = {config.search.simulations}\n",
                                                       f"simulations = {HUGE}\n", 1))
    with pytest.raises(UserError, match=rf"search\.simulations must lie in \[1, {C_INT_MAX}\]"):
        RunDir.open(run.root)


@pytest.mark.parametrize(("player", "said"), [
    (f"search:{HUGE}", f"search: sims must lie in [1, {C_INT_MAX}], got {HUGE}"),
    (f"gumbel:sims={C_INT_MAX + 1}", f"gumbel: sims must lie in [1, {C_INT_MAX}], got {C_INT_MAX + 1}"),
    (f"stockfish:depth={HUGE}", f"option depth='{HUGE}' must lie in [-2147483648, {C_INT_MAX}]"),
    (f"uci:leaves={HUGE}", f"option leaves='{HUGE}' must lie in [-2147483648, {C_INT_MAX}]"),
])
def test_a_players_huge_integer_is_refused_before_any_game(player: str, said: str, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["match", "random", "vs", player, "--games", "2", "--run", str(tmp_path / "run"),
                     "--no-progress"]) == 2
    assert said in _one_line(capsys)


def test_a_random_players_seed_takes_any_integer() -> None:
    assert parse_player(f"random:seed={HUGE}").name == f"random:seed={HUGE}"


def _died_in_constructor(error: BaseException) -> Exception:
    """The error Ray raises for a call to an actor whose constructor raised ``error`` (kept as text only)."""
    from ray.exceptions import ActorDiedError, RayTaskError

    try:
        raise error
    except BaseException as raised:
        text = traceback.format_exc()
        return ActorDiedError(cause=RayTaskError("SelfPlayWorker.__init__", text, raised))


def test_an_actor_constructors_user_error_is_its_message(capsys: pytest.CaptureFixture[str]) -> None:
    error = actor_start_failure(_died_in_constructor(UserError("search.simulations must lie in [1, 2147483647]")))
    assert str(error) == "a self-play actor failed: search.simulations must lie in [1, 2147483647]"
    assert capsys.readouterr().err == ""


def test_an_actor_constructors_bug_is_one_line_after_its_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    error = actor_start_failure(_died_in_constructor(OverflowError("Python int too large to convert to C long")))
    assert str(error) == ("a self-play actor failed as it started, with OverflowError: Python int too large to "
                          "convert to C long (its traceback is above)")
    err = capsys.readouterr().err
    assert "in _died_in_constructor" in err and err.rstrip().endswith("OverflowError: Python int too large to "
                                                                      "convert to C long")
    memory = actor_start_failure(_died_in_constructor(MemoryError("the search ran out of memory")))
    assert out_of_memory_in(memory) is not None  # the command line says what ran out and what to lower


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray = pytest.importorskip("ray")
    ray.init(address="local", num_cpus=2, include_dashboard=False, namespace="alphazero", logging_level="ERROR")
    yield
    ray.shutdown()


def test_an_actor_that_cannot_start_stops_selfplay_in_one_line(local_ray: None, tmp_path: Path) -> None:
    # Its constructor raised, and Ray restarted it again and again: self-play played no game until --minutes
    # ran out and ended as if all was well (train exited 0).
    from selfplay.driver import run_selfplay

    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"), ["selfplay.device=cpu"])
    # A value no check has seen (as an older version's config.toml): the actor's reading of it is the first.
    object.__setattr__(config.search, "simulations", int(HUGE))
    said = rf"^a self-play actor failed: search\.simulations must lie in \[1, {C_INT_MAX}\]"
    with pytest.raises(UserError, match=said):
        run_selfplay(run, config, actors=1, minutes=2, progress=False, chunk_seconds=0.5)


def test_a_batch_whose_move_indices_would_overflow_a_c_int_is_refused() -> None:
    from mcts_ext.search import MAX_BATCH_LEAVES, MultiGameSearch

    # Each leaf holds MAX_MOVES indices counted in C ints: games x leaves_per_game above this overflowed them.
    assert MAX_BATCH_LEAVES * 256 <= 2**31 - 1 < (MAX_BATCH_LEAVES + 1) * 256
    with pytest.raises(ValueError, match="games x leaves_per_game must be at most 8,388,607"):
        MultiGameSearch(MAX_BATCH_LEAVES // 8 + 1, SearchParams(leaves_per_game=8))
    assert MultiGameSearch(4, SearchParams(leaves_per_game=8)).max_batch == 32
