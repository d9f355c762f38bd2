"""`alphazero pretrain --recipe`: a recipe file read and checked, its sources made, resumed after a kill without a
shard repeated or lost, linked into the main and mix data, trained and exported; the built-in network's recipe
against the commands its card gave."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import chess
import numpy as np
import pytest

import learner.recipe_run
from alphazero.app import cli
from alphazero.config import apply_overrides
from alphazero.presets import get_preset
from alphazero.store.shards import list_shards, read_shard, read_shard_meta
from alphazero.store.sources import read_weights
from learner.recipe import MIX_DIR, load_recipe, read_recipe
from learner.recipe_run import STATE_NAME, filter_puzzles
from tests.helpers import ROOT, kill_at_first_shard, stockfish_or_skip

GAMES = ROOT / "tests" / "data" / "pretrain_games.pgn"
POSITIONS = ROOT / "tests" / "data" / "pretrain_positions.epd"
CARD = ROOT / "alphazero" / "weights" / "README.md"
NOTICE = "Test games (public domain) and made-up puzzles (CC0) scored by Stockfish."
PUZZLE_HEADER = "PuzzleId,FEN,Moves,Rating,RatingDeviation,Popularity,NbPlays,Themes,GameUrl,OpeningTags"
# Made-up puzzles, out of id order: (id, themes). A filter on fork and pin keeps whole themes only.
PUZZLES = [("p0009", "fork short"), ("p0003", "pin"), ("p0007", "forks long"), ("p0001", "endgame fork"),
           ("p0005", "mate"), ("p0002", "pinned")]
KEPT = ["p0001", "p0003", "p0009"]  # the puzzles with fork or pin, sorted by id

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL_RECIPE = """
about = "a small network from test data"

[labelling]
nodes = 20
shard_positions = 4

[training]
preset = "tiny"
steps = 24
mix_share = 0.25
export = "net.pt"
notice = \"\"\"
Test games (public domain) and made-up
puzzles (CC0) scored by Stockfish.
\"\"\"

[training.set]
learner.batch_size = 16
learner.log_every = 12
learner.checkpoint_every = 12

[[sources]]
name = "games"
kind = "pgn"
download = "the test games"
licence = "public domain"
files = ["games/*.pgn"]
into = "main"
shards = "all"

[[sources]]
name = "sf-epd"
kind = "stockfish"
download = "the test positions"
licence = "public domain"
positions = 6
positions_from = ["positions.epd"]
into = "mix"
shards = "all"

[[sources]]
name = "sf-puzzles"
kind = "stockfish"
download = "made-up puzzles"
licence = "CC0"
positions = 12
label_value = false
into = "mix"
shards = 2

[sources.puzzle_filter]
file = "puzzles.csv"
themes = ["fork", "pin"]
sort = true
output = "subset.csv"
"""


def _puzzle_rows() -> list[str]:
    """Rows of made-up puzzles: a position after a few random plies, then four legal moves."""
    rng = random.Random(7)
    rows = []
    for number, (puzzle_id, themes) in enumerate(PUZZLES):
        board = chess.Board()
        moves: list[str] = []
        for ply in range(6 + number + 4):
            legal = sorted(board.legal_moves, key=chess.Move.uci)
            assert legal, "a made-up puzzle ended early"
            move = rng.choice(legal)
            if ply == 6 + number:
                fen = board.fen()
            if ply >= 6 + number:
                moves.append(move.uci())
            board.push(move)
        assert any(board.legal_moves)
        rows.append(f"{puzzle_id},{fen},{' '.join(moves)},1500,75,90,100,{themes},https://lichess.org/x{number},")
    return rows


def _data(folder: Path, *, copies: int = 1) -> Path:
    """Makes a data folder for SMALL_RECIPE: games/a.pgn (the test games, ``copies`` times), positions.epd and
    puzzles.csv."""
    (folder / "games").mkdir(parents=True)
    text = GAMES.read_text().rstrip() + "\n\n"
    (folder / "games" / "a.pgn").write_text(text * copies)
    shutil.copyfile(POSITIONS, folder / "positions.epd")
    (folder / "puzzles.csv").write_text("\n".join([PUZZLE_HEADER, *_puzzle_rows()]) + "\n")
    return folder


def _recipe(folder: Path, text: str = SMALL_RECIPE, name: str = "small") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.toml"
    path.write_text(text)
    return path


def _state(run: Path, source: str) -> dict:
    return json.loads((run / "sources" / source / STATE_NAME).read_text())


def _source_shards(run: Path, source: str) -> list[Path]:
    """A done source's shards in its order, as its state lists them."""
    return [run / "sources" / source / name for name in _state(run, source)["shards"]]


def _fingerprint(path: Path) -> str:
    """A digest of what a shard holds (its arrays, games and meta but the time it was written), whatever its
    name."""
    shard = read_shard(path)
    digest = hashlib.sha256()
    for field in dataclasses.fields(shard):
        value = getattr(shard, field.name)
        if isinstance(value, np.ndarray):
            digest.update(field.name.encode() + value.tobytes())
    meta = {key: value for key, value in shard.meta.items() if key != "created_at"}
    digest.update(json.dumps([shard.games, meta], sort_keys=True, default=str).encode())
    return digest.hexdigest()


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("alphazero pretrain: error: "), err
    return err


# --- a small recipe, end to end ------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_small_recipe_builds_a_network_through_the_cli(tmp_path: Path, capsys) -> None:
    stockfish_or_skip()
    data, run = _data(tmp_path / "data"), tmp_path / "run"
    recipe = _recipe(tmp_path / "recipes")
    args = ["pretrain", "--recipe", str(recipe), "--data", str(data), "--run", str(run), "--workers", "1",
            "--quiet"]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    for number, name in enumerate(("games", "sf-epd", "sf-puzzles"), 1):
        assert f"recipe small: source {number}/3 {name}: done: " in out
    # The filter keeps whole themes, in PuzzleId order; the puzzles' positions carry no value target.
    subset = (run / "sources" / "sf-puzzles" / "subset.csv").read_text().splitlines()
    assert subset[0] == PUZZLE_HEADER and [row.split(",")[0] for row in subset[1:]] == KEPT
    puzzles = _source_shards(run, "sf-puzzles")
    assert [read_shard_meta(path)["chunk"] for path in puzzles] == [0, 1, 2]  # 12 positions, 4 a shard
    assert all(read_shard_meta(path)["value_target"] == "none" for path in puzzles)
    # The main data is every shard of the games; the mix, the positions' and the puzzles' first two.
    main = sorted(list_shards(run / "pretrain"))
    assert [path.name for path in main] == sorted(path.name for path in _source_shards(run, "games"))
    mix = [*_source_shards(run, "sf-epd"), *puzzles[:2]]
    assert sorted(path.name for path in list_shards(run / MIX_DIR)) == sorted(path.name for path in mix)
    assert all((run / MIX_DIR / path.name).samefile(path) for path in mix)  # hard links, not copies
    weights = read_weights(run / "net.pt")
    assert weights.step == 24 and weights.notice == NOTICE  # the notice's line breaks are spaces
    # A rerun finds every source done and makes nothing again.
    before = {path.name for path in run.rglob("*.npz")}
    assert cli.main([*args, "--data-only"]) == 0
    assert capsys.readouterr().out.count(": done before: ") == 3
    assert {path.name for path in run.rglob("*.npz")} == before


def test_links_fall_back_to_copies(tmp_path: Path, monkeypatch, capsys) -> None:
    import errno

    link = os.link

    def no_links(source: str, target: str) -> None:  # as across file systems, for the links of the shards
        if Path(target).parent.name in ("pretrain", MIX_DIR):
            raise OSError(errno.EXDEV, os.strerror(errno.EXDEV))
        link(source, target)

    data, run = _data(tmp_path / "data"), tmp_path / "run"
    recipe = _recipe(tmp_path / "recipes", SMALL_RECIPE.split("[[sources]]\nname = \"sf-epd\"")[0]
                     .replace("mix_share = 0.25\n", ""))
    monkeypatch.setattr(learner.recipe_run.os, "link", no_links)
    assert cli.main(["pretrain", "--recipe", str(recipe), "--data", str(data), "--run", str(run), "--data-only",
                     "--quiet"]) == 0
    shards = _source_shards(run, "games")
    assert shards and all(not (run / "pretrain" / path.name).samefile(path) for path in shards)
    assert all((run / "pretrain" / path.name).read_bytes() == path.read_bytes() for path in shards)
    assert not [path for path in (run / "pretrain").iterdir() if path.name.startswith(".")]  # no temporaries


# --- killed and resumed ----------------------------------------------------------------------------------------

KILL_RECIPE = """
[labelling]
nodes = 20
shard_positions = 4

[training]
preset = "tiny"
steps = 1
mix_share = 0.5

[[sources]]
name = "games"
kind = "pgn"
download = "the test games"
licence = "public domain"
files = ["games/*.pgn"]
into = "main"
shards = "all"

[[sources]]
name = "sf"
kind = "stockfish"
positions = 96
seed = 3
into = "mix"
shards = 20
"""


@pytest.mark.slow
def test_a_killed_recipe_resumes_without_repeating_or_losing_a_shard(tmp_path: Path, capsys) -> None:
    stockfish_or_skip()
    data = _data(tmp_path / "data", copies=50)  # games enough that the kill lands while they are converted
    recipe = _recipe(tmp_path / "recipes", KILL_RECIPE, "kill")
    common = ["pretrain", "--recipe", str(recipe), "--data", str(data), "--workers", "1", "--data-only", "--quiet"]
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert cli.main([*common, "--run", str(whole)]) == 0  # the uninterrupted run
    command = [*common, "--run", str(killed)]
    kill_at_first_shard(command, killed / "sources" / "games")  # while converting the games
    assert not _state(killed, "games")["done"] and not (killed / "sources" / "sf").exists()
    kept = {path.name: path.read_bytes() for path in list_shards(killed / "sources" / "games")}
    capsys.readouterr()
    assert cli.main([*common, "--run", str(killed), "--dry-run"]) == 0  # the plan says how far each source is
    states = [line.rsplit("; ", 1)[1] for line in capsys.readouterr().out.splitlines() if line.startswith("source ")]
    assert states == [f"started: {len(kept):,} shards so far", "not started"]
    kill_at_first_shard(command, killed / "sources" / "sf")  # while labelling
    assert _state(killed, "games")["done"] and not _state(killed, "sf")["done"]
    assert all((killed / "sources" / "games" / name).read_bytes() == data for name, data in kept.items())
    assert cli.main([*common, "--run", str(killed)]) == 0
    for source in ("games", "sf"):  # each source's shards, in order, hold what the uninterrupted run's do
        assert [_fingerprint(path) for path in _source_shards(killed, source)] == \
            [_fingerprint(path) for path in _source_shards(whole, source)]
    assert sorted(read_shard_meta(path)["chunk"] for path in _source_shards(killed, "sf")) == list(range(24))
    for folder in ("pretrain", MIX_DIR):  # the same shards chosen, each once
        assert sorted(_fingerprint(path) for path in list_shards(killed / folder)) == \
            sorted(_fingerprint(path) for path in list_shards(whole / folder))
    assert len(list_shards(killed / MIX_DIR)) == 20


def test_a_source_made_with_other_settings_is_refused(tmp_path: Path, capsys) -> None:
    data, run = _data(tmp_path / "data"), tmp_path / "run"
    text = SMALL_RECIPE.split("[[sources]]\nname = \"sf-epd\"")[0].replace("mix_share = 0.25\n", "")
    recipe = _recipe(tmp_path / "recipes", text)
    args = ["pretrain", "--recipe", str(recipe), "--data", str(data), "--run", str(run), "--data-only", "--quiet"]
    assert cli.main(args) == 0
    capsys.readouterr()
    (data / "games" / "b.pgn").write_text(GAMES.read_text())
    assert cli.main(args) == 2  # a file more: the source's shards are not what the recipe now makes
    err = _one_line_error(capsys)
    assert "source 1/1 games" in err and "other settings (they differ in files)" in err
    (data / "games" / "b.pgn").unlink()
    (run / "pretrain" / "00000000000000000000-stray-00000000.npz").write_bytes(
        next(iter(list_shards(run / "sources" / "games"))).read_bytes())
    assert cli.main(args) == 2  # a shard the recipe did not choose would be learnt too
    assert "shards the recipe did not choose" in _one_line_error(capsys)
    # A source started from files at other paths is not resumed from these: convert_pgn knows a file by its
    # full path, and would read the games again.
    state = _state(run, "games")
    (run / "sources" / "games" / STATE_NAME).write_text(json.dumps({**state, "done": False}))
    moved = shutil.copytree(data, tmp_path / "moved")
    assert cli.main([*args[:4], str(moved), *args[5:]]) == 2
    assert "was started with its files elsewhere" in _one_line_error(capsys)


# --- the built-in network's recipe against its card's commands ------------------------------------------------

# What the card's commands chose: `find tcecgames/master-archive -name '*.pgn' -size -4194304c | sort`, the
# first 4900 of the book's shards, Stockfish at 1500 nodes on endgames.epd (157846), seeds 1 and 2 (300000
# each), the puzzles of 18 themes in PuzzleId order (300000, the first 212 shards, no value), then:
CARD_TRAINING = ["learner.batch_size=256", "learner.scale_lr=false", "learner.learning_rates=0.05,0.01,0.002",
                 "learner.lr_boundaries=10000,14000", "learner.mix_dir=mix", "learner.mix_share=0.45",
                 "learner.compile=true"]  # mix_dir: the card's runs/builtin-mix, here the run's own mix/
CARD_THEMES = ("hangingPiece deflection attraction quietMove backRankMate mateIn3 mateIn4 mateIn5 skewer trappedPiece "
               "clearance intermezzo capturingDefender doubleCheck interference xRayAttack smotheredMate zugzwang")
CARD_SOURCES = {  # name: (kind, into, shards taken, positions, nodes, seed, label_value)
    "tcec": ("pgn", "main", None, 0, 0, None, None),
    "book": ("pgn", "main", 4900, 0, 0, None, None),
    "sf-endgames": ("stockfish", "mix", None, 157846, 1500, None, None),
    "sf-play": ("stockfish", "mix", None, 300000, 1500, 1, None),
    "sf-play2": ("stockfish", "mix", None, 300000, 1500, 2, None),
    "sf-puzzles": ("stockfish", "mix", 212, 300000, 1500, None, False),
}
ARCHIVE = "tcecgames/master-archive"
TCEC_FILES = {  # stand-ins and their sizes; those below 4 MiB are read
    "TCEC_Season_1_-_Superfinal.pgn": 5000, "TCEC_Season_25_-_League_1.pgn": 4194303,
    "TCEC_Season_26_-_Superfinal.pgn": 4194304, "TCEC_Season_21_-_Premier.pgn": 9_000_000,
    "cup/TCEC_Cup_7_-_Final.pgn": 123, "README.md": 10,
}
TCEC_READ = [f"{ARCHIVE}/{name}" for name in ("TCEC_Season_1_-_Superfinal.pgn", "TCEC_Season_25_-_League_1.pgn",
                                               "cup/TCEC_Cup_7_-_Final.pgn")]


def _builtin_data(folder: Path) -> Path:
    """A data folder of stand-ins with the real names; big files are sparse."""
    for name, size in TCEC_FILES.items():
        path = folder / ARCHIVE / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as handle:
            handle.truncate(size)
    for name in ("book_1.02.pgn", "endgames.epd", "lichess_db_puzzle.csv.zst"):
        (folder / name).write_bytes(b"stand-in")
    return folder


def test_the_builtin_recipe_chooses_what_its_card_s_commands_chose(tmp_path: Path, capsys) -> None:
    data, run = _builtin_data(tmp_path / "data"), tmp_path / "runs" / "builtin"
    assert cli.main(["pretrain", "--recipe", "builtin", "--data", str(data), "--run", str(run), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert not run.exists()  # a dry run writes nothing
    reads: dict[str, list[str]] = {}
    taken: dict[str, str] = {}
    for line in out.splitlines():
        if match := re.match(r"source \d/6 (\S+): .*; (all its shards|the first [\d,]+ of its shards) into (\w+);",
                             line):
            name = match.group(1)
            reads[name], taken[name] = [], f"{match.group(2)} into {match.group(3)}"
        elif match := re.match(r"  reads (\S+) \(", line):
            reads[name].append(match.group(1))
    assert list(reads) == list(CARD_SOURCES)
    assert reads["tcec"] == TCEC_READ
    if shutil.which("find"):  # the card's own selection, by find's -size -4194304c
        found = subprocess.run(["find", ARCHIVE, "-name", "*.pgn", "-size", "-4194304c"], cwd=data, check=True,
                               capture_output=True, text=True).stdout.split()
        assert sorted(found) == sorted(reads["tcec"])
    assert reads["book"] == ["book_1.02.pgn"] and reads["sf-endgames"] == ["endgames.epd"]
    assert reads["sf-play"] == reads["sf-play2"] == [] and reads["sf-puzzles"] == ["lichess_db_puzzle.csv.zst"]
    assert taken == {"tcec": "all its shards into main", "book": "the first 4,900 of its shards into main",
                     "sf-endgames": "all its shards into mix", "sf-play": "all its shards into mix",
                     "sf-play2": "all its shards into mix", "sf-puzzles": "the first 212 of its shards into mix"}
    recipe = load_recipe("builtin")
    for source in recipe.sources:
        assert (source.kind, source.into, source.shards, source.positions, source.nodes, source.seed,
                source.label_value) == CARD_SOURCES[source.name], source.name
    puzzle_filter = recipe.sources[-1].puzzle_filter
    assert puzzle_filter is not None and " ".join(puzzle_filter.themes) == CARD_THEMES and puzzle_filter.sort
    assert puzzle_filter.output == "lichess_puzzles_subset.csv"  # the card's file name: its game ids
    assert recipe.sources[2].files == ("endgames.epd",) and recipe.labelling == ()  # the preset's labelling
    assert recipe.training.preset == "small" and recipe.training.steps == 16000
    assert apply_overrides(get_preset("small"), recipe.run_overrides()) == \
        apply_overrides(get_preset("small"), CARD_TRAINING)
    quoted = " ".join(line.removeprefix("> ") for line in CARD.read_text().splitlines() if line.startswith("> "))
    assert recipe.training.notice == quoted  # the notice the card quotes and the shipped file carries
    assert f"  notice {quoted}" in out.splitlines()
    assert f"  export {run / 'builtin.pt'}" in out.splitlines()


def test_the_card_names_the_recipe_and_its_command() -> None:
    card = CARD.read_text()
    trained = card.split("## How it was trained", 1)[1].split("\n## ", 1)[0]
    assert "alphazero/weights/recipes/builtin.toml" in trained
    assert "alphazero pretrain --recipe builtin --data DIR --run runs/builtin" in trained
    assert "zstdcat" not in trained and "xargs" not in trained  # the commands it replaced


def test_the_puzzle_filter_selects_what_the_card_s_pipeline_did(tmp_path: Path) -> None:
    rows = _puzzle_rows()
    plain = tmp_path / "puzzles.csv"
    plain.write_text("\n".join([PUZZLE_HEADER, *rows]) + "\n")
    assert filter_puzzles(plain, tmp_path / "a.csv", ["fork", "pin"], sort=True) == (6, 3)
    assert (tmp_path / "a.csv").read_text().splitlines() == [PUZZLE_HEADER, *sorted(
        row for row in rows if row.split(",")[0] in KEPT)]
    assert filter_puzzles(plain, tmp_path / "b.csv", ["fork", "pin"], sort=False) == (6, 3)
    assert [row.split(",")[0] for row in (tmp_path / "b.csv").read_text().splitlines()[1:]] == \
        ["p0009", "p0003", "p0001"]  # the file's order
    if not (shutil.which("zstd") and shutil.which("awk") and shutil.which("bash")):
        return
    subprocess.run(["zstd", "-q", str(plain), "-o", str(tmp_path / "puzzles.csv.zst")], check=True)
    assert filter_puzzles(tmp_path / "puzzles.csv.zst", tmp_path / "c.csv", ["fork", "pin"], sort=True) == (6, 3)
    # The card's pipeline, on the same file with these themes.
    pipeline = ("zstdcat puzzles.csv.zst | awk -F, 'NR==1 || $8 ~ /(^| )(fork|pin)( |$)/' | "
                "(read -r header; echo \"$header\"; LC_ALL=C sort)")
    expected = subprocess.run(["bash", "-c", pipeline], cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout
    assert (tmp_path / "c.csv").read_text() == expected


# --- bad recipes and missing data ---------------------------------------------------------------------------

VALID = """
[training]
preset = "tiny"
steps = 5

[[sources]]
name = "games"
kind = "pgn"
download = "the test games"
licence = "public domain"
files = ["games/*.pgn"]
into = "main"
"""


@pytest.mark.parametrize(("change", "message"), [
    (lambda t: "sourcs = 1\n" + t, "sourcs is not a key here (did you mean sources?)"),
    (lambda t: t.replace("steps = 5", "stpes = 5"), "training.stpes is not a key here (did you mean steps?)"),
    (lambda t: t.replace('into = "main"', 'into = "main"\nshard = 3'),
     "source 1 (games): shard is not a key here (did you mean shards?)"),
    (lambda t: t.replace('kind = "pgn"', 'kind = "lichess"'), "source 1 (games): kind must be one of pgn, stockfish"),
    (lambda t: t.replace('into = "main"', 'into = "main"\nshards = 0'), 'shards must be "all" or a whole number'),
    (lambda t: t.replace('into = "main"\n', ""), "source 1 (games): into is missing"),
    (lambda t: t.replace("steps = 5", "steps = "), "not a TOML file"),
    (lambda t: t.replace('files = ["games/*.pgn"]', 'files = ["/etc/*.pgn"]'), "relative to the data folder"),
    (lambda t: t.replace('preset = "tiny"', 'preset = "huge"'), "training.preset must be one of"),
    (lambda t: t + "[labelling]\ntemprature = 0.1\n", "labelling.temprature is not a key here (did you mean "
                                                       "temperature?)"),
    (lambda t: t.replace("steps = 5", "steps = 5\n[training.set]\nlearner.batchsize = 8"),
     "did you mean learner.batch_size?"),
    (lambda t: t.replace("steps = 5", "steps = 5\n[training.set]\nlearner.mix_share = 0.5"), "use training.mix_share"),
    (lambda t: t.replace('into = "main"', 'into = "mix"'), "no source goes into \"main\""),
    (lambda t: t + t[t.index("[[sources]]"):].replace('into = "main"', 'into = "mix"'), "two sources are named"),
    (lambda t: t + '[[sources]]\nname = "sf"\nkind = "stockfish"\npositions = 9\nnodes = 5\ninto = "mix"\n',
     "training.mix_share goes with sources into \"mix\""),
    (lambda t: t + '[[sources]]\nname = "sf"\nkind = "stockfish"\npositions = 9\ninto = "main"\n',
     "source 2 (sf): nodes is missing"),
    (lambda t: t + '[[sources]]\nname = "sf"\nkind = "stockfish"\npositions = 9\nnodes = 5\nseed = 1\n'
                   'positions_from = ["a.epd"]\ndownload = "x"\nlicence = "y"\ninto = "main"\n',
     "seed shapes random-opening games"),
])
def test_a_bad_recipe_is_one_line_naming_the_file_and_key(tmp_path: Path, capsys, change, message: str) -> None:
    path = _recipe(tmp_path / "recipes", change(VALID))
    (tmp_path / "data" / "games").mkdir(parents=True)
    assert cli.main(["pretrain", "--recipe", str(path), "--data", str(tmp_path / "data"), "--run",
                     str(tmp_path / "run"), "--dry-run"]) == 2
    err = _one_line_error(capsys)
    assert str(path) in err and message in err
    assert not (tmp_path / "run").exists()


def test_the_valid_recipe_of_the_bad_ones_reads(tmp_path: Path) -> None:
    recipe = read_recipe(_recipe(tmp_path, VALID))
    assert recipe.sources[0].shards is None and recipe.training.mix_share == 0 and recipe.run_overrides() == []


def test_missing_data_names_what_to_download(tmp_path: Path, capsys) -> None:
    (tmp_path / "data").mkdir()
    assert cli.main(["pretrain", "--recipe", "builtin", "--data", str(tmp_path / "data"), "--run",
                     str(tmp_path / "run")]) == 2
    err = _one_line_error(capsys)
    for needed in ("tcecgames/master-archive/**/*.pgn", "github.com/TCEC-Chess/tcecgames", "book_1.02.pgn",
                   "gnuchess-book", "endgames.epd", "official-stockfish/books", "lichess_db_puzzle.csv.zst",
                   "database.lichess.org"):
        assert needed in err
    assert not (tmp_path / "run").exists()  # refused before anything was written
    _builtin_data(tmp_path / "data")
    for name in TCEC_FILES:  # only files of 4 MiB or more: none below the bound
        path = tmp_path / "data" / ARCHIVE / name
        if path.stat().st_size < 4194304:
            path.unlink()
    assert cli.main(["pretrain", "--recipe", "builtin", "--data", str(tmp_path / "data"), "--dry-run"]) == 2
    assert "(no file below 4,194,304 bytes matches)" in _one_line_error(capsys)


@pytest.mark.parametrize(("options", "message"), [
    (["--pgn", str(GAMES)], "--recipe names its own data and preset: drop --pgn"),
    (["--stockfish", "10", "--positions", "5"], "drop --stockfish, --positions"),
    (["--positions-from", str(POSITIONS)], "drop --positions-from"),
    (["--preset", "small"], "drop --preset"),
    (["--no-data"], "--recipe needs --data FOLDER"),
    (["--no-recipe"], "--data and --dry-run go with --recipe"),
])
def test_recipe_options_are_checked(tmp_path: Path, capsys, options: list[str], message: str) -> None:
    (tmp_path / "data").mkdir()
    base = ["pretrain", "--run", str(tmp_path / "run"), "--dry-run"]
    if "--no-recipe" not in options:
        base += ["--recipe", "builtin"]
    if "--no-data" not in options:
        base += ["--data", str(tmp_path / "data")]
    assert cli.main([*base, *(option for option in options if not option.startswith("--no-"))]) == 2
    assert message in _one_line_error(capsys)


def test_an_unknown_recipe_name_says_which_ship(capsys) -> None:
    assert cli.main(["pretrain", "--recipe", "bulitin", "--data", ".", "--dry-run"]) == 2
    assert "no recipe 'bulitin' (did you mean builtin?); those that ship: builtin" in _one_line_error(capsys)
