"""Recipes: the data and the training of a pretrained network as one TOML file, read into typed values.

A recipe (alphazero/weights/recipes/NAME.toml, which ``--recipe NAME`` names;
``builtin`` is the built-in network's and a whole example) names each source
of data, the labelling and the training schedule. ``load_recipe`` finds and
reads one, checking every key: an unknown key is refused with the nearest
known one, and each message names the file and the key. Running a recipe on
a data folder and a run (the plan, the dry run, the sources, the links, the
training, resuming): learner.recipe_run.

The format::

    about = "one line the dry run shows"

    [labelling]              # the run's [pretrain] settings, for every source
    nodes = 1500             # Stockfish's nodes per position where a source names none
    shard_positions = 1024   # any other key is a pretrain field (pretrain.KEY)

    [training]
    preset = "small"         # the run's preset: its [pretrain] section shapes the data too
    steps = 16000
    mix_share = 0.45         # with sources into "mix": the share of each batch drawn from them
    export = "net.pt"        # relative to the run folder (--export overrides it)
    notice = "..."           # the data's attribution in the exported file; whitespace runs become a space
    [training.set]           # config overrides, as --set; learner.mix_*, training_steps and pretrain.* have
    learner.batch_size = 256 # their own keys above

    [[sources]]
    name = "games"           # its folder: RUN/sources/games/
    kind = "pgn"             # or "stockfish"
    download = "what to get, from where"    # the message when a file is missing says it
    licence = "CC0"
    files = ["pgn/**/*.pgn"] # globs relative to --data, read in the order of their paths
    size_below = 4194304     # optional: files of this many bytes or more are left out
    into = "main"            # RUN/pretrain/, the data trained on; or "mix": RUN/mix/, mix_share of each batch
    shards = 4900            # or "all" (the default): the first N in the source's order

    [[sources]]              # a stockfish source: the same first keys, then
    kind = "stockfish"
    positions = 300000
    nodes = 1500             # optional: [labelling].nodes
    seed = 1                 # optional, random-opening games only: pretrain.seed
    positions_from = ["endgames.epd"]   # optional: these files' positions, not random-opening games
    label_value = false      # optional: pretrain.label_value
    [sources.puzzle_filter]  # optional, instead of positions_from: a Lichess puzzle CSV (or .csv.zst),
    file = "lichess_db_puzzle.csv.zst"  # its rows with any of the themes, written to RUN/sources/NAME/OUTPUT
    themes = ["fork", "pin"]
    sort = true              # the rows as `LC_ALL=C sort` orders them (by PuzzleId); false: the file's order
    output = "subset.csv"    # the name its positions' game ids carry

``download`` and ``licence`` are required of a source that reads files.
"""

from __future__ import annotations

import difflib
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import alphazero
from alphazero.config import apply_overrides, field_hints
from alphazero.errors import UserError
from alphazero.presets import PRESET_NAMES, get_preset

__all__ = ["MIX_DIR", "RECIPES_DIR", "PuzzleFilter", "Recipe", "Source", "Training", "find_recipe", "load_recipe",
           "read_recipe"]

Kind = Literal["pgn", "stockfish"]
Into = Literal["main", "mix"]

RECIPES_DIR = Path(alphazero.__file__).resolve().parent / "weights" / "recipes"
"""The recipes that ship: ``--recipe NAME`` reads RECIPES_DIR/NAME.toml."""
MIX_DIR = "mix"  # RUN/mix/: the shards of the sources into "mix" (learner.mix_dir, relative to the run)

KINDS: tuple[str, ...] = ("pgn", "stockfish")
INTO: tuple[str, ...] = ("main", "mix")

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_OWN_KEYS = {"learner.mix_dir": "the mix folder is the run's own (RUN/mix)",
             "learner.mix_share": "use training.mix_share", "learner.training_steps": "use training.steps"}
"""[training.set] keys the recipe says elsewhere, each with where."""

_TOP_KEYS = ("about", "labelling", "training", "sources")
_TRAINING_KEYS = ("preset", "steps", "mix_share", "export", "notice", "set")
_COMMON_KEYS = ("name", "kind", "download", "licence", "into", "shards")
_SOURCE_KEYS: dict[str, tuple[str, ...]] = {
    "pgn": (*_COMMON_KEYS, "files", "size_below"),
    "stockfish": (*_COMMON_KEYS, "positions", "nodes", "seed", "positions_from", "size_below", "label_value",
                  "puzzle_filter"),
}
_FILTER_KEYS = ("file", "themes", "sort", "output")


# --- the recipe -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PuzzleFilter:
    """The rows of a Lichess puzzle CSV whose Themes hold any of ``themes``, written as ``output``."""

    file: str  # relative to the data folder
    themes: tuple[str, ...]
    sort: bool  # the rows as `LC_ALL=C sort` orders lines; False: the file's order
    output: str  # a file name, in the source's folder


@dataclass(frozen=True)
class Source:
    """One source of a recipe: what it reads and makes, and what of it the network learns from."""

    name: str
    kind: Kind
    download: str  # what to get and from where ('' for a source that reads no file)
    licence: str
    into: Into
    shards: int | None  # the first N of its shards, or None: all
    files: tuple[str, ...] = ()  # pgn: the games; stockfish: positions_from (globs relative to the data)
    size_below: int | None = None  # files of this many bytes or more are left out
    positions: int = 0  # stockfish: positions to label
    nodes: int = 0  # stockfish: nodes per position
    seed: int | None = None  # stockfish, random-opening games: pretrain.seed
    label_value: bool | None = None  # stockfish: pretrain.label_value (None: the run's)
    puzzle_filter: PuzzleFilter | None = None


@dataclass(frozen=True)
class Training:
    """The training schedule: the run's preset and overrides, the steps, the mix share, the export."""

    preset: str
    steps: int
    mix_share: float
    overrides: tuple[str, ...]  # section.key=value, as --set
    export: str | None  # relative to the run folder
    notice: str | None  # whitespace normalised


@dataclass(frozen=True)
class Recipe:
    """A whole recipe, read from ``path``."""

    name: str
    path: Path
    about: str
    labelling: tuple[str, ...]  # pretrain.key=value overrides of the run
    sources: tuple[Source, ...]
    training: Training

    def run_overrides(self) -> list[str]:
        """Gets the overrides the recipe gives its run: the labelling, the training's, the mix."""
        mix = [f"learner.mix_dir={MIX_DIR}", f"learner.mix_share={self.training.mix_share!r}"] \
            if any(source.into == "mix" for source in self.sources) else []
        return [*self.labelling, *self.training.overrides, *mix]


# --- reading a recipe ---------------------------------------------------------------------------------------


def find_recipe(name_or_path: str) -> Path:
    """Finds the recipe file ``name_or_path`` names: a file, or a bare name of RECIPES_DIR (``builtin``).

    Raises:
        UserError: no such file, or no such recipe (the message lists those that ship).
    """
    path = Path(name_or_path).expanduser()
    if path.is_file():
        return path
    if _NAME.fullmatch(name_or_path) and not name_or_path.endswith(".toml"):
        shipped = RECIPES_DIR / f"{name_or_path}.toml"
        if shipped.is_file():
            return shipped
        names = sorted(p.stem for p in RECIPES_DIR.glob("*.toml"))
        close = difflib.get_close_matches(name_or_path, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UserError(f"no recipe {name_or_path!r}{hint}; those that ship: {', '.join(names) or 'none'}; "
                        f"or give a recipe file's path")
    what = "is a directory, not a recipe file" if path.is_dir() else "does not exist"
    raise UserError(f"recipe {name_or_path} {what}")


def load_recipe(name_or_path: str) -> Recipe:
    """Reads the recipe ``name_or_path`` names (find_recipe, read_recipe).

    Raises:
        UserError: as find_recipe and read_recipe.
    """
    return read_recipe(find_recipe(name_or_path))


def read_recipe(path: Path) -> Recipe:
    """Reads and checks a recipe file.

    Raises:
        UserError: the file is unreadable or not TOML, or a key is unknown,
            missing, of the wrong type or out of range; the message names the
            file and the key (an unknown one with the nearest known key).
    """
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise UserError(f"cannot read recipe {path}: {error.strerror or error}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise UserError(f"{path}: not a TOML file: {error}") from None
    top = _Table(path, "", data, _TOP_KEYS)
    about = top.text("about") or ""
    labelling_table = top.table("labelling", ("nodes", *field_hints("pretrain")))
    training = _read_training(path, top.table("training", _TRAINING_KEYS, required=True))
    nodes = 0
    labelling: tuple[str, ...] = ()
    if labelling_table is not None:
        nodes = labelling_table.whole("nodes", minimum=1) or 0
        labelling = tuple(f"pretrain.{key}={_override_text(value)}" for key, value in labelling_table.rest())
    raw_sources = top.value("sources", required=True)
    if not isinstance(raw_sources, list) or not raw_sources:
        raise UserError(f"{path}: sources must be one [[sources]] table or more")
    sources = tuple(_read_source(path, index, raw, nodes) for index, raw in enumerate(raw_sources, 1))
    recipe = Recipe(path.stem, path, about, labelling, sources, training)
    _check_recipe(recipe)
    return recipe


def _read_training(path: Path, table: _Table | None) -> Training:
    """Reads [training].

    Raises:
        UserError: as read_recipe.
    """
    assert table is not None  # required
    preset = table.text("preset", required=True) or ""
    if preset not in PRESET_NAMES:
        raise table.error("preset", f"must be one of {', '.join(PRESET_NAMES)}, got {preset!r}")
    steps = table.whole("steps", minimum=1, required=True) or 0
    mix_share = table.number("mix_share")
    if mix_share is not None and not 0 < mix_share < 1:
        raise table.error("mix_share", f"must lie between 0 and 1 (a share of each batch), got {mix_share}")
    export = table.text("export")
    notice = table.text("notice")
    if notice is not None:
        notice = " ".join(notice.split())
        if not notice:
            raise table.error("notice", "must not be empty")
    overrides: list[str] = []
    settings = table.value("set")
    if settings is not None:
        if not isinstance(settings, dict):
            raise table.error("set", "must be a table of config overrides (section.key = value)")
        for key, value in _flatten(settings):
            section = key.partition(".")[0]
            if key in _OWN_KEYS or section == "pretrain":
                why = _OWN_KEYS.get(key, "pretrain settings go in [labelling]")
                raise UserError(f"{path}: training.set.{key} is not set here: {why}")
            overrides.append(f"{key}={_override_text(value)}")
    return Training(preset, steps, mix_share or 0.0, tuple(overrides), export, notice)


def _read_source(path: Path, index: int, raw: object, default_nodes: int) -> Source:
    """Reads the ``index``-th [[sources]] table.

    Raises:
        UserError: as read_recipe.
    """
    probe = _Table(path, f"source {index}: ", raw, None)
    name = probe.text("name", required=True) or ""
    if not _NAME.fullmatch(name):
        raise probe.error("name", f"must be letters, digits, '.', '-' or '_' (it names a folder), got {name!r}")
    probe = _Table(path, f"source {index} ({name}): ", raw, None)
    kind = probe.text("kind", required=True) or ""
    if kind not in KINDS:
        raise probe.error("kind", f"must be one of {', '.join(KINDS)}, got {kind!r}")
    table = _Table(path, probe.prefix, raw, _SOURCE_KEYS[kind])
    into = table.text("into", required=True) or ""
    if into not in INTO:
        raise table.error("into", f"must be one of {', '.join(INTO)}, got {into!r}")
    shards_value = table.value("shards")
    if shards_value is None or shards_value == "all":
        shards = None
    elif isinstance(shards_value, int) and not isinstance(shards_value, bool) and shards_value >= 1:
        shards = shards_value
    else:
        raise table.error("shards", f'must be "all" or a whole number of at least 1, got {shards_value!r}')
    size_below = table.whole("size_below", minimum=1)
    fields: dict[str, Any] = {}
    if kind == "pgn":
        fields["files"] = table.patterns("files", required=True)
    else:
        fields["positions"] = table.whole("positions", minimum=1, required=True)
        fields["nodes"] = table.whole("nodes", minimum=1) or default_nodes
        if not fields["nodes"]:
            raise table.error("nodes", "is missing: give it here or as [labelling].nodes")
        fields["files"] = table.patterns("positions_from")
        fields["seed"] = table.whole("seed", minimum=0)
        fields["label_value"] = table.flag("label_value")
        fields["puzzle_filter"] = _read_filter(table)
        reads = bool(fields["files"]) or fields["puzzle_filter"] is not None
        if fields["files"] and fields["puzzle_filter"] is not None:
            raise table.error("puzzle_filter", "and positions_from exclude each other: the filter's CSV is the "
                                               "positions file")
        if fields["seed"] is not None and reads:
            raise table.error("seed", "shapes random-opening games; a source that reads files has none")
        if size_below is not None and not fields["files"]:
            raise table.error("size_below", "bounds the files of positions_from; this source has none")
    reads_files = bool(fields.get("files")) or fields.get("puzzle_filter") is not None
    download = table.text("download", required=reads_files) or ""
    licence = table.text("licence", required=reads_files) or ""
    return Source(name, cast(Kind, kind), download, licence, cast(Into, into), shards, size_below=size_below,
                  **fields)


def _read_filter(table: _Table) -> PuzzleFilter | None:
    """Reads a stockfish source's [sources.puzzle_filter], if any.

    Raises:
        UserError: as read_recipe.
    """
    sub = table.table("puzzle_filter", _FILTER_KEYS)
    if sub is None:
        return None
    file = sub.relative("file", sub.text("file", required=True) or "")
    themes = sub.texts("themes", required=True)
    bad = [theme for theme in themes if not theme or " " in theme or "," in theme]
    if bad:
        raise sub.error("themes", f"must be theme names (no spaces or commas), got {bad[0]!r}")
    sort = sub.flag("sort")
    output = sub.text("output", required=True) or ""
    if not _NAME.fullmatch(output) or not output.endswith(".csv"):
        raise sub.error("output", f"must be a file name ending in .csv, got {output!r}")
    return PuzzleFilter(file, themes, bool(sort), output)


def _check_recipe(recipe: Recipe) -> None:
    """Checks what the tables say together: unique names, main data, a mix share with mix sources and
    overrides the preset takes.

    Raises:
        UserError: the message names the file.
    """
    path, names = recipe.path, [source.name for source in recipe.sources]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise UserError(f"{path}: two sources are named {twice[0]!r}: each names a folder of its own")
    if not any(source.into == "main" for source in recipe.sources):
        raise UserError(f"{path}: no source goes into \"main\": the network trains on the main data")
    mixed = any(source.into == "mix" for source in recipe.sources)
    if mixed != (recipe.training.mix_share > 0):
        raise UserError(f"{path}: training.mix_share goes with sources into \"mix\": "
                        + ("give the share of each batch they get" if mixed else "no source goes into \"mix\""))
    try:
        apply_overrides(get_preset(recipe.training.preset), recipe.run_overrides())
    except UserError as error:
        raise UserError(f"{path}: {error}") from None


def _flatten(table: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """Flattens TOML tables into (dotted key, value): ``learner.batch_size = 1`` as ``[learner] batch_size = 1``."""
    items: list[tuple[str, Any]] = []
    for key, value in table.items():
        if isinstance(value, dict):
            items += _flatten(value, f"{prefix}{key}.")
        else:
            items.append((f"{prefix}{key}", value))
    return items


def _override_text(value: object) -> str:
    """Writes a TOML value as a --set value (lists as a,b,c)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(_override_text(item) for item in value)
    return repr(value) if isinstance(value, float) else str(value)


class _Table:
    """A TOML table being read, each key with its type checked; keys that ``known`` lacks are refused first.

    ``prefix`` names the table in messages: '' (the top), 'training.', 'source 2 (book): '.

    Raises:
        UserError: (on construction) not a table, or a key ``known`` lacks, named with the nearest known one.
    """

    def __init__(self, path: Path, prefix: str, data: object, known: Sequence[str] | None) -> None:
        if not isinstance(data, dict):
            raise UserError(f"{path}: {prefix.rstrip('.: ') or 'the recipe'} must be a table, got {data!r}")
        self.path, self.prefix = path, prefix
        self._data: dict[str, Any] = data
        self._taken: set[str] = set()
        for key in data:
            if known is not None and key not in known:
                close = difflib.get_close_matches(key, known, n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise self.error(key, f"is not a key here{hint}; it has: {', '.join(known)}")

    def error(self, key: str, text: str) -> UserError:
        """Makes the error of ``key``: the file, the table and the key, then ``text``."""
        return UserError(f"{self.path}: {self.prefix}{key} {text}")

    def value(self, key: str, *, required: bool = False) -> Any:
        self._taken.add(key)
        if key not in self._data and required:
            raise self.error(key, "is missing")
        return self._data.get(key)

    def text(self, key: str, *, required: bool = False) -> str | None:
        value = self.value(key, required=required)
        if value is not None and (not isinstance(value, str) or (required and not value.strip())):
            raise self.error(key, f"must be a string{' (not empty)' if required else ''}, got {value!r}")
        return value

    def whole(self, key: str, *, minimum: int, required: bool = False) -> int | None:
        value = self.value(key, required=required)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < minimum):
            raise self.error(key, f"must be a whole number of at least {minimum}, got {value!r}")
        return value

    def number(self, key: str) -> float | None:
        value = self.value(key)
        if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool)):
            raise self.error(key, f"must be a number, got {value!r}")
        return None if value is None else float(value)

    def flag(self, key: str) -> bool | None:
        value = self.value(key)
        if value is not None and not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def texts(self, key: str, *, required: bool = False) -> tuple[str, ...]:
        value = self.value(key, required=required)
        if value is None:
            return ()
        if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
            raise self.error(key, f"must be a list of strings, got {value!r}")
        return tuple(value)

    def patterns(self, key: str, *, required: bool = False) -> tuple[str, ...]:
        """Reads a list of file names or globs relative to the data folder."""
        return tuple(self.relative(key, pattern) for pattern in self.texts(key, required=required))

    def relative(self, key: str, pattern: str) -> str:
        """Checks that ``pattern`` is a path relative to the data folder, inside it."""
        if not pattern or Path(pattern).is_absolute() or ".." in Path(pattern).parts:
            raise self.error(key, f"takes paths relative to the data folder (--data), got {pattern!r}")
        return pattern

    def table(self, key: str, known: Sequence[str], *, required: bool = False) -> _Table | None:
        value = self.value(key, required=required)
        return None if value is None else _Table(self.path, f"{self.prefix}{key}.", value, known)

    def rest(self) -> list[tuple[str, Any]]:
        """Takes every key not taken yet, in the file's order."""
        items = [(key, value) for key, value in self._data.items() if key not in self._taken]
        self._taken.update(key for key, _ in items)
        return items
