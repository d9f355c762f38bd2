"""Run directory: layout, config written once and checked on reopen, atomic writes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alphazero.config import to_toml
from alphazero.errors import UserError
from alphazero.presets import get_preset
from alphazero.store.rundir import (
    RunDir,
    atomic_write_bytes,
    atomic_write_text,
    complete_files,
    is_temporary,
    remove_stale_temporaries,
    write_once,
)


def test_create_makes_the_layout_and_writes_the_config(tmp_path: Path) -> None:
    run, config = RunDir.create_or_open(tmp_path / "run", get_preset("tiny"), ["search.simulations=10"])
    for folder in (run.checkpoints, run.selfplay, run.games, run.tb, run.eval):
        assert folder.is_dir()
    assert config.search.simulations == 10
    assert run.read_config() == config
    assert run.config_file.read_text() == to_toml(config)


def test_create_without_a_config_uses_the_tiny_preset(tmp_path: Path) -> None:
    _, config = RunDir.create_or_open(tmp_path / "run")
    assert config == get_preset("tiny")


def test_reopen_keeps_the_saved_config_and_applies_overrides_in_memory(tmp_path: Path) -> None:
    RunDir.create_or_open(tmp_path, get_preset("tiny"), ["search.simulations=10"])
    run, config = RunDir.create_or_open(tmp_path, None, ["selfplay.actors=7"])
    assert config.search.simulations == 10 and config.selfplay.actors == 7
    assert run.read_config().selfplay.actors == 0  # overrides are not written back
    _, same = RunDir.open(tmp_path)
    assert same == run.read_config()


def test_reopen_with_an_incompatible_config_names_the_fields(tmp_path: Path) -> None:
    RunDir.create_or_open(tmp_path, get_preset("tiny"))
    with pytest.raises(UserError, match=r"network\.blocks: run has 1, requested 6") as error:
        RunDir.create_or_open(tmp_path, get_preset("small"))
    assert "network.filters" in str(error.value)
    with pytest.raises(UserError, match=r"network\.value_head.*learner\.optimizer"):
        RunDir.create_or_open(tmp_path, None, ["network.value_head=wdl", "learner.optimizer=adam"])


def test_open_without_a_run_raises(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not a run directory"):
        RunDir.open(tmp_path)


def test_a_corrupt_saved_config_raises_naming_the_file(tmp_path: Path) -> None:
    RunDir.create_or_open(tmp_path)
    (tmp_path / "config.toml").write_text("preset = \n")
    with pytest.raises(UserError, match="config.toml"):
        RunDir.create_or_open(tmp_path)


@pytest.mark.parametrize("text", ["", "\n  \n"])
def test_an_emptied_saved_config_is_refused_not_replaced_by_the_defaults(tmp_path: Path, text: str) -> None:
    RunDir.create_or_open(tmp_path, get_preset("small"))
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(UserError, match="config.toml is empty, so the run's settings are lost"):
        RunDir.create_or_open(tmp_path)
    assert (tmp_path / "config.toml").read_text() == text  # left as it was, for the user to mend


def test_unwritable_or_non_directory_path_raises(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(UserError, match="not a directory"):
        RunDir.create_or_open(a_file)
    with pytest.raises(UserError, match="cannot create run directory"):
        RunDir.create_or_open(a_file / "run")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(UserError):
            RunDir.create_or_open(locked / "run")


def test_atomic_writes_replace_whole_and_leave_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "data.bin"
    atomic_write_bytes(target, b"old" * 1000)
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    atomic_write_text(tmp_path / "note.txt", "h\u00e9llo\n")
    assert (tmp_path / "note.txt").read_text(encoding="utf-8") == "h\u00e9llo\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "note.txt"]


def test_a_failed_write_leaves_no_temporary(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        atomic_write_bytes(tmp_path / "missing" / "x", b"data")
    (tmp_path / "target").mkdir()
    with pytest.raises(OSError):
        atomic_write_bytes(tmp_path / "target", b"data")  # cannot replace a folder
    assert [p.name for p in tmp_path.iterdir()] == ["target"]


def test_write_once_creates_only_once(tmp_path: Path) -> None:
    assert write_once(tmp_path / "f", b"first") is True
    assert write_once(tmp_path / "f", b"second") is False
    assert (tmp_path / "f").read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_readers_skip_temporaries(tmp_path: Path) -> None:
    for name in ("a.shard", ".b.shard.12.ab.tmp", "c.shard.tmp", ".hidden", "d.shard"):
        (tmp_path / name).write_bytes(b"")
    assert is_temporary(tmp_path / ".b.shard.12.ab.tmp") and is_temporary("x.tmp") and not is_temporary("a.shard")
    assert [p.name for p in complete_files(tmp_path)] == ["a.shard", "d.shard"]
    assert complete_files(tmp_path / "absent") == []


def test_stale_temporaries_are_removed(tmp_path: Path) -> None:
    old, new = tmp_path / ".x.1.aa.tmp", tmp_path / ".y.1.bb.tmp"
    old.write_bytes(b"")
    new.write_bytes(b"")
    os.utime(old, (0, 0))
    assert remove_stale_temporaries(tmp_path, older_than_s=60) == [old]
    assert new.exists()
