"""`alphazero compare`: issue 79's from-zero protocol: its arms, their sittings, the matches in chunks, the summary."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from alphazero.app.cli import main
from alphazero.app.compare import (
    ARMS_FILE,
    CHUNK_GAMES,
    SITTINGS_FILE,
    SUMMARY_FILE,
    Arm,
    stockfish_levels,
    summary_text,
    trained_minutes,
)
from alphazero.errors import UserError
from alphazero.nn.network import AlphaZeroNet
from alphazero.presets import get_preset
from alphazero.store.checkpoint import save_checkpoint
from alphazero.store.rundir import RunDir
from alphazero.store.shards import write_shard
from tests.helpers import real_games, stockfish_or_skip

TINY = get_preset("tiny")

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _arm_run(root: Path, name: str, *, minutes: float, seed: int) -> Path:
    """An arm trained 'by hand' before the protocol took it: a run whose checkpoint says how long its learner ran."""
    run, _ = RunDir.create_or_open(root / name, TINY)
    torch.manual_seed(seed)
    save_checkpoint(run.root, AlphaZeroNet(TINY.network), None, 10, TINY, run_seconds=60.0 * minutes)
    return run.root


@pytest.mark.parametrize(("text", "message"), [
    ("", "needs a name"),
    ("search.simulations=8", "names the arm's run folder"),
    ("a/b", "names the arm's run folder"),
    ("matches", "names the arm's run folder"),
    ("pcr simulations", "is not an override"),
    ("pcr simulations=8", "is not an override"),
])
def test_an_arm_is_a_folder_name_then_overrides_and_anything_else_is_refused(text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        Arm.parse(text)
    assert Arm.parse("pcr search.playout_cap_fraction=0.25 'learner.lr_boundaries=1,2'") == \
        Arm("pcr", ("search.playout_cap_fraction=0.25", "learner.lr_boundaries=1,2"))


def test_stockfish_levels_are_uci_elos_in_stockfishs_range_or_skill_levels() -> None:
    assert stockfish_levels("skill=0,1400, elo=2000") == ["skill=0", "elo=1400", "elo=2000"]
    assert stockfish_levels("") == []
    with pytest.raises(UserError, match="below it use skill=N"):
        stockfish_levels("1000")  # Debian's Stockfish 15.1 refuses UCI_Elo below 1350
    with pytest.raises(UserError, match="0..20"):
        stockfish_levels("skill=21")
    with pytest.raises(UserError, match="repeat"):
        stockfish_levels("1400,elo=1400")
    with pytest.raises(UserError, match="a UCI_Elo or skill=N"):
        stockfish_levels("depth=3")


def test_bad_options_end_with_a_message_and_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = str(tmp_path / "cmp")
    assert main(["compare", "--dir", folder, "--arm", "base"]) == 2
    assert "give two arms or more" in capsys.readouterr().err
    assert main(["compare", "--dir", folder, "--arm", "base", "--arm", "base"]) == 2
    assert "arm names repeat" in capsys.readouterr().err
    assert main(["compare", "--dir", folder, "--arm", "base", "--arm", "b", "--openings", str(tmp_path / "no")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert main(["compare", "--dir", folder, "--arm", "base", "--arm", "b", "--stockfish", "900"]) == 2
    assert "skill=N" in capsys.readouterr().err


@pytest.mark.parametrize(("arm", "message"), [
    ("b bogus.x=1", "--arm b: unknown"),
    ("b search.simulations=0", "--arm b: "),
    ("b search.nonsense=3", "--arm b: "),
])
def test_an_arm_the_config_refuses_is_refused_before_the_folder_takes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], arm: str, message: str) -> None:
    root = tmp_path / "cmp"
    assert main(["compare", "--dir", str(root), "--arm", "base", "--arm", arm]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (root / ARMS_FILE).exists()  # a corrected --arm is not refused as "other arms" later


@pytest.mark.parametrize("minutes", ["nan", "inf", "0"])
def test_minutes_that_are_no_time_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               minutes: str) -> None:
    assert main(["compare", "--dir", str(tmp_path / "cmp"), "--arm", "a", "--arm", "b", "--minutes", minutes]) == 2
    assert "--minutes" in capsys.readouterr().err


def test_an_arm_shorter_than_the_slack_still_trains_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import alphazero.app.compare as compare

    commands: list[list[str]] = []
    monkeypatch.setattr(compare.subprocess, "call", lambda command, **_: commands.append(command) or 0)
    compare._train_arm(tmp_path, Arm("short", ()), "tiny", 0.05)  # nothing trained yet: it trains
    assert len(commands) == 1 and commands[0][commands[0].index("--minutes") + 1] == "0.05"
    _arm_run(tmp_path, "done", minutes=0.5, seed=0)
    compare._train_arm(tmp_path, Arm("done", ()), "tiny", 1.0)  # trained, and within the slack: done
    assert len(commands) == 1


def test_a_rerun_with_other_arms_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cmp"
    root.mkdir()
    (root / ARMS_FILE).write_text(json.dumps({"preset": "tiny", "arms": [{"name": "base", "overrides": []},
                                                                          {"name": "b", "overrides": []}]}))
    argv = ["compare", "--dir", str(root), "--arm", "base", "--arm", "b search.simulations=8", "--matches-only"]
    assert main(argv) == 2
    assert "compares other arms" in capsys.readouterr().err
    moved = ["compare", "--dir", str(root), "--arm", "base", "--arm", "c", "--arm", "b", "--matches-only"]
    assert main(moved) == 2
    assert "compares other arms" in capsys.readouterr().err
    other_preset = ["compare", "--dir", str(root), "--arm", "base", "--arm", "b", "--preset", "small", "--matches-only"]
    assert main(other_preset) == 2
    assert "compares other arms" in capsys.readouterr().err


def test_a_rerun_may_add_arms_after_the_saved_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "cmp"
    root.mkdir()
    saved = [{"name": "base", "overrides": []}, {"name": "b", "overrides": []}]
    (root / ARMS_FILE).write_text(json.dumps({"preset": "tiny", "arms": saved}))
    argv = ["compare", "--dir", str(root), "--arm", "base", "--arm", "b", "--arm", "c search.simulations=8",
            "--matches-only"]
    assert main(argv) == 2  # no arm has trained: --matches-only stops, after the arms are taken
    assert "has no checkpoints yet" in capsys.readouterr().err
    arms = json.loads((root / ARMS_FILE).read_text())["arms"]
    assert arms == [*saved, {"name": "c", "overrides": ["search.simulations=8"]}]


def test_trained_minutes_count_the_sittings_a_cut_off_one_up_to_its_newest_checkpoint(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    run = _arm_run(root, "a", minutes=99.0, seed=0)  # the sittings, not the checkpoint's own time, count
    checkpoint = next((run / "checkpoints").glob("step_*.pt"))
    os.utime(checkpoint, (2_300.0, 2_300.0))
    lines = [{"arm": "a", "start": 1_000.0}, {"arm": "a", "end": 1_600.0},  # 10 minutes
             {"arm": "other", "start": 1_000.0},
             {"arm": "a", "start": 2_000.0}]  # cut off: counts to the checkpoint written at 2,300 (5 minutes)
    (root / SITTINGS_FILE).write_text("\n".join(json.dumps(line) for line in lines) + '\n{"arm": "a", "en')
    assert trained_minutes(root, "a") == pytest.approx(15.0)
    # An arm with no sittings recorded (made with `alphazero train` by hand) counts its learner's time.
    _arm_run(root, "hand", minutes=31.5, seed=1)
    assert trained_minutes(root, "hand") == pytest.approx(31.5)
    assert trained_minutes(root, "none") == 0.0


def test_arms_play_the_baseline_and_stockfish_in_chunks_and_a_rerun_plays_nothing_twice(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stockfish_or_skip()
    root = tmp_path / "cmp"
    for seed, name in enumerate(("base", "wide")):
        _arm_run(root, name, minutes=2.0, seed=seed)  # trained their minutes already: the protocol trains nothing
    argv = ["compare", "--dir", str(root), "--minutes", "1", "--arm", "base", "--arm", "wide search.simulations=8",
            "--games", "40", "--stockfish", "skill=0", "--stockfish-games", "20", "--simulations", "2",
            "--ply-limit", "16"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "arm base has trained its 1 minutes" in out and "arm wide has trained its 1 minutes" in out
    assert out.count("compare: ") >= 4 + 2  # four chunks, and the summary's lines
    chunks = sorted((root / "matches" / "eval").glob("*.jsonl"))
    assert [path.stem for path in chunks] == ["base-vs-stockfishskill0-000", "wide-vs-base-000", "wide-vs-base-010",
                                              "wide-vs-stockfishskill0-000"]
    assert all(len(path.read_text().splitlines()) == CHUNK_GAMES for path in chunks)
    summary = (root / SUMMARY_FILE).read_text()
    rows = {line.split(" | ")[0].lstrip("| "): line for line in summary.splitlines() if " vs " in line}
    assert set(rows) == {"wide vs base", "base vs stockfish:skill=0", "wide vs stockfish:skill=0"}
    for row in rows.values():
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        wins, draws, losses = (int(part[1:]) for part in cells[2].split())
        games = 40 if row.startswith("| wide vs base") else 20  # every chunk of the pairing counts
        assert cells[1] == str(games) and wins + draws + losses == games and ".." in cells[5]
    # The rerun: every chunk is complete, so no game is played again and the summary is the same.
    mtimes = [path.stat().st_mtime_ns for path in chunks]
    assert main(argv) == 0
    again = capsys.readouterr().out
    assert not [line for line in again.splitlines() if line.startswith("compare: ") and line.endswith("-000")]
    assert (root / SUMMARY_FILE).read_text() == summary
    assert [path.stat().st_mtime_ns for path in chunks] == mtimes
    assert json.loads((root / ARMS_FILE).read_text())["arms"][1] == {"name": "wide",
                                                                     "overrides": ["search.simulations=8"]}


def test_the_summary_counts_how_self_play_games_ended_oldest_first(tmp_path: Path) -> None:
    root = tmp_path / "cmp"
    run = _arm_run(root, "base", minutes=1.0, seed=0)
    games = real_games()  # two games of the real search, their ends set below
    # 20 games in ten shards named by write time: the first tenth (2 games) decisive, the last tenth repetitions.
    ends = [[("1-0", "checkmate"), ("0-1", "checkmate")]] + [[("1/2-1/2", "ply_limit")] * 2] * 8 \
        + [[("1/2-1/2", "threefold_repetition")] * 2]
    for index in reversed(range(10)):  # written newest first: the names order them
        metadata = [{**game, "result": result, "termination": termination}
                    for game, (result, termination) in zip(games.games, ends[index], strict=True)]
        write_shard(run / "selfplay" / f"{index:020d}-test-00000000.npz", dataclasses.replace(games, games=metadata))
    (run / "selfplay" / f"{99:020d}-test-broken.npz").write_bytes(b"not a shard")  # skipped
    summary = summary_text(root, [Arm("base", ())], [], 1.0, 8)
    assert "| base | 20 | 90%; 0%; 100% | 10%; 0%; 100% |" in summary
