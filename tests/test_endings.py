"""`alphazero games`: how a run's self-play games ended, read back from its shards in the order written."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from alphazero.app.cli import main
from alphazero.store.shards import write_shard
from selfplay.endings import read_endings, split
from tests.helpers import real_games

# Ten shards of two games each, oldest first: the first two decisive, then ply-limit draws, the newest
# repetitions; the weights' step grows by 100 a shard.
ENDS = ([("1-0", "checkmate"), ("0-1", "resignation")], *[[("1/2-1/2", "ply_limit")] * 2] * 7,
        *[[("1/2-1/2", "threefold_repetition")] * 2] * 2)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("games") / "run"
    (run / "selfplay").mkdir(parents=True)
    games = real_games()
    for index in reversed(range(10)):  # written newest first: the names (write times) order them
        metadata = [{**game, "result": result, "termination": termination, "weights_step": 100 * index}
                    for game, (result, termination) in zip(games.games, ENDS[index], strict=True)]
        write_shard(run / "selfplay" / f"{index:020d}-test-00000000.npz", dataclasses.replace(games, games=metadata))
    (run / "selfplay" / f"{99:020d}-test-broken.npz").write_bytes(b"not a shard")
    odd = [{**game, "plies": "many"} for game in games.games]  # a game list no actor of ours writes
    write_shard(run / "selfplay" / f"{98:020d}-test-00000000.npz", dataclasses.replace(games, games=odd))
    return run


def test_the_games_are_read_oldest_first_and_a_broken_shard_is_counted(run: Path) -> None:
    endings, unreadable = read_endings(run / "selfplay")
    assert unreadable == 2
    assert [(e.result, e.termination) for e in endings] == [end for shard in ENDS for end in shard]
    assert [e.weights_step for e in endings[::2]] == list(range(0, 1000, 100))
    assert all(e.plies == 12 for e in endings)  # real_games' ply limit
    assert read_endings(run / "nowhere") == ([], 0)


def test_split_keeps_the_order_and_every_game() -> None:
    assert [list(part) for part in split(list(range(7)), 3)] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [list(part) for part in split(list(range(2)), 5)] == [[0], [1]]


def test_the_command_prints_each_part_and_writes_json(run: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report_path = run.parent / "endings.json"
    assert main(["games", "--run", str(run), "--parts", "5", "--json", str(report_path)]) == 0
    out = capsys.readouterr().out
    assert "20 self-play games, oldest first (2 unreadable shards skipped)" in out
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert rows["1 of 5"] == "| 1 of 5 | 4 | 0..100 | 12 | 25% / 50% / 25% | 0% | 50% | 25% | 25% |"
    assert rows["5 of 5"] == "| 5 of 5 | 4 | 800..900 | 12 | 0% / 100% / 0% | 100% | 0% | 0% | 0% |"
    assert rows["whole run"] == "| whole run | 20 | 0..900 | 12 | 5% / 90% / 5% | 20% | 70% | 5% | 5% |"
    assert "Ended by: ply_limit 14 (70.0%), threefold_repetition 4 (20.0%)" in out
    report = json.loads(report_path.read_text())
    assert report["games"] == 20 and report["unreadable_shards"] == 2 and len(report["parts"]) == 5
    assert report["parts"][4]["repetition_draws"] == 1.0 and report["terminations"]["checkmate"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--parts", "0"], "--parts must be at least 1"),
    (["--run", "{tmp}/nowhere"], "no such run directory"),
    (["--run", "{tmp}"], "no self-play games"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                                         message: str) -> None:
    argv = ["games", *[arg.format(tmp=tmp_path) for arg in args]]
    if "--run" not in argv:
        argv += ["--run", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("where", ["a folder", "under a file"])
def test_a_json_path_that_cannot_be_written_is_one_line_and_exit_2(run: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str],
                                                                  where: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.mkdir() if where == "a folder" else blocker.write_text("a file")
    target = blocker if where == "a folder" else blocker / "endings.json"
    assert main(["games", "--run", str(run), "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {target}" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert [path.name for path in tmp_path.iterdir()] == ["blocker"]  # no temporary left beside it
