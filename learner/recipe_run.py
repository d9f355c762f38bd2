"""Running a recipe (learner.recipe) on a data folder and a run, resuming after a kill at any point.

``alphazero pretrain --recipe NAME_OR_FILE --data DIR --run RUN`` (learner.cli)
checks that DIR holds every file the recipe reads (``plan_recipe``: one
message says what to download; ``describe_plan`` is the dry run), then
``run_recipe``:

1. makes each source's shards, in the recipe's order, in a folder of its own,
   ``RUN/sources/NAME/``: PGN games (learner.pgn_data.convert_pgn) or
   Stockfish labels (learner.pretrain.label_stockfish), after a puzzle
   filter's CSV where the source has one (``filter_puzzles``);
2. links (hard links, else copies) the shards each source gives into
   ``RUN/pretrain/`` (``into = "main"``) or ``RUN/mix/`` (``into = "mix"``:
   ``learner.mix_dir = "mix"``, ``training.mix_share`` of each batch);
3. trains the run's network with the recipe's schedule and exports it
   (learner.pretrain.pretrain_network).

A source's order, which ``shards = N`` takes the first of: a PGN source's
shards by file (in path order), then by game; a Stockfish source's by chunk,
the order of its positions, whichever process labelled each.

Resuming: each source folder holds ``source.json``, what the source is made
of (its settings, the files it reads by name and size, the run's settings
that shape its shards), written before its first shard and rewritten, with
``"done": true`` and its shards in order, after its last. A rerun skips a
done source, continues a started one (convert_pgn goes on after the last
file and game it wrote, label_positions labels the chunks not on disk: a
kill loses only the shard in progress, and the rerun writes it whole, as an
uninterrupted run would), and refuses a source whose settings changed, or a
started one whose files now lie elsewhere (convert_pgn knows a file by its
full path: a resume from another folder would read its games again). Links
already made are kept; shards in RUN/pretrain/ or RUN/mix/ that the recipe
did not choose are refused, so the network learns the recipe's data alone.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from alphazero.config import Config, PretrainConfig
from alphazero.errors import UserError
from alphazero.store.rundir import RunDir, atomic_write_text, remove_stale_temporaries
from learner.recipe import MIX_DIR, Recipe, Source

if TYPE_CHECKING:
    from learner.labels import LabelSettings

__all__ = ["SOURCES_DIR", "STATE_NAME", "Plan", "SourcePlan", "describe_plan", "filter_puzzles", "plan_recipe",
           "run_recipe"]

SOURCES_DIR = "sources"  # RUN/sources/NAME/: one folder per source
STATE_NAME = "source.json"  # in each source folder: what it is made of, and whether it is done
PGN_FIELDS = ("shard_positions", "pgn_smoothing", "pgn_value")
"""The pretrain fields that shape PGN shards (the others shape Stockfish labels)."""


# --- the plan ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SourcePlan:
    """A source as it will run: its folder under the run and the files of the data folder it reads."""

    source: Source
    number: int  # 1-based
    folder: Path  # RUN/sources/NAME
    files: tuple[Path, ...]  # the games, the positions files, or the puzzle CSV to filter (absolute)

    @property
    def positions_files(self) -> list[Path]:
        """The files a stockfish source labels the positions of (a filter's output, or its files)."""
        puzzle_filter = self.source.puzzle_filter
        return [self.folder / puzzle_filter.output] if puzzle_filter is not None else list(self.files)


@dataclass(frozen=True)
class Plan:
    """A recipe on a data folder and a run: what each source reads."""

    recipe: Recipe
    data: Path
    run: Path
    sources: tuple[SourcePlan, ...]


def plan_recipe(recipe: Recipe, data: Path, run: Path) -> Plan:
    """Finds the files each source reads in ``data``.

    Raises:
        UserError: ``data`` is not a folder, or lacks files the recipe needs:
            one message for all of them, with what to download.
    """
    if not data.is_dir():
        raise UserError(f"--data {data} is not a folder (it holds the files the recipe names)")
    data = data.resolve()
    plans, missing = [], []
    for number, source in enumerate(recipe.sources, 1):
        patterns = [source.puzzle_filter.file] if source.puzzle_filter is not None else list(source.files)
        files, lacking = _match(data, patterns, source.size_below)
        if lacking:
            missing.append(f"{source.name} needs {'; '.join(lacking)} (download: {source.download})")
        plans.append(SourcePlan(source, number, run / SOURCES_DIR / source.name, tuple(files)))
    if missing:
        raise UserError(f"recipe {recipe.name}: {data} lacks files it reads: {'; '.join(missing)}")
    return Plan(recipe, data, run, tuple(plans))


def _match(data: Path, patterns: Sequence[str], size_below: int | None) -> tuple[list[Path], list[str]]:
    """Gets the files of ``data`` that ``patterns`` match (each pattern's in path order, none twice) and
    what each pattern that matched none asked for."""
    files: list[Path] = []
    lacking: list[str] = []
    for pattern in patterns:
        found = sorted((p for p in data.glob(pattern) if p.is_file()), key=lambda p: p.relative_to(data).as_posix())
        kept = [p for p in found if size_below is None or p.stat().st_size < size_below]
        if not kept:
            bound = f" below {size_below:,} bytes" if size_below is not None and found else ""
            lacking.append(pattern + (f" (no file{bound} matches)" if any(c in pattern for c in "*?[") or bound
                                      else ""))
        files += [p for p in kept if p not in files]
    return files, lacking


def describe_plan(plan: Plan, *, held_out: Sequence[str] = (), export: Path | None = None,
                  notice: str | None = None) -> list[str]:
    """Describes the plan as lines: each source's files, state and shards taken, then the training."""
    recipe, count = plan.recipe, len(plan.sources)
    lines = [f"recipe {recipe.name} ({recipe.path})" + (f": {recipe.about}" if recipe.about else ""),
             f"data {plan.data}; run {plan.run}"]
    for item in plan.sources:
        source = item.source
        taken = "all its shards" if source.shards is None else f"the first {source.shards:,} of its shards"
        lines.append(f"source {item.number}/{count} {source.name}: {_what(item)}; {taken} into {source.into}; "
                     f"{_state_text(item.folder)}")
        if source.licence:
            lines.append(f"  licence: {source.licence}")
        lines += [f"  reads {path.relative_to(plan.data).as_posix()} ({path.stat().st_size:,} bytes)"
                  for path in item.files]
        if source.puzzle_filter is not None:
            puzzle_filter = source.puzzle_filter
            lines.append(f"  keeps the rows with any of {len(puzzle_filter.themes)} themes"
                         f"{', sorted' if puzzle_filter.sort else ''}, as {puzzle_filter.output}: "
                         f"{' '.join(puzzle_filter.themes)}")
        if source.kind == "stockfish" and item.files and held_out:
            lines.append(f"  holds out the puzzles of {', '.join(held_out)}")
    training = recipe.training
    lines.append(f"training: preset {training.preset}, {training.steps:,} steps"
                 + (f", {training.mix_share:g} of each batch from {plan.run / MIX_DIR}" if training.mix_share else ""))
    lines += [f"  set {override}" for override in recipe.run_overrides()]
    export = export if export is not None else plan.run / training.export if training.export else None
    lines.append(f"  export {export}" if export is not None else "  no export")
    notice = notice if notice is not None else training.notice
    if notice:
        lines.append(f"  notice {notice}")
    return lines


def _what(item: SourcePlan) -> str:
    """Says what a source makes, in a few words."""
    source = item.source
    files = _files(len(item.files))
    if source.kind == "pgn":
        bound = f" below {source.size_below:,} bytes" if source.size_below is not None else ""
        return f"pgn games of {files} ({', '.join(source.files)}{bound})"
    text = f"stockfish at {source.nodes:,} nodes, {source.positions:,} positions of "
    if source.puzzle_filter is not None:
        text += f"{source.puzzle_filter.output} (puzzles of {source.puzzle_filter.file})"
    elif item.files:
        text += files
    else:
        text += "random-opening games" + (f", seed {source.seed}" if source.seed is not None else "")
    return text + (", no value target" if source.label_value is False else "")


def _files(count: int) -> str:
    return f"{count:,} file{'s' if count != 1 else ''}"


# --- running it -------------------------------------------------------------------------------------------


def run_recipe(plan: Plan, run: RunDir, config: Config, *, held_out: Sequence[str], workers: int,
               train: bool = True, steps: int | None = None, minutes: float | None = None,
               device: str | None = None, export: Path | None = None, notice: str | None = None,
               progress: bool = True) -> None:
    """Makes every source's shards (skipping those done), links the chosen ones into RUN/pretrain and
    RUN/mix, then (with ``train``) trains to the recipe's steps (or ``steps``, or ``minutes``) and exports
    to ``export`` (default: the recipe's, in the run) with ``notice`` (default: the recipe's).

    ``config`` is the run's, opened with the recipe's run_overrides.

    Raises:
        UserError: a source made with other settings or from another folder,
            Stockfish missing, files that changed, shards the recipe did not
            choose in RUN/pretrain or RUN/mix, a full disk; as pretrain_network.
        KeyboardInterrupt: after Ctrl-C (written shards and the last training step are kept).
    """
    recipe = plan.recipe
    chosen = [_make_source(item, plan, config.pretrain, held_out=held_out, workers=workers, progress=progress)
              for item in plan.sources]
    main, mix = _link_shards(plan, chosen, run)
    print(f"recipe {recipe.name}: {main:,} shards in {run.pretrain}"
          + (f", {mix:,} in {run.root / MIX_DIR}" if mix else ""), flush=True)
    if not train:
        return
    from learner.pretrain import pretrain_network

    if export is None and recipe.training.export:
        export = run.root / recipe.training.export
    steps = steps if steps is not None else recipe.training.steps
    print(f"recipe {recipe.name}: training to step {steps:,} (preset {recipe.training.preset})"
          + (f", then the export to {export}" if export is not None else ""), flush=True)
    pretrain_network(run, config, steps=steps, minutes=minutes, device=device,
                     export=export, notice=notice if notice is not None else recipe.training.notice,
                     progress=progress)


def _make_source(item: SourcePlan, plan: Plan, pretrain: PretrainConfig, *, held_out: Sequence[str], workers: int,
                 progress: bool) -> list[Path]:
    """Makes one source's shards in its folder, or finds them made; returns those the recipe takes, in order.

    Raises:
        UserError: as run_recipe.
    """
    source, folder = item.source, item.folder
    say = f"recipe {plan.recipe.name}: source {item.number}/{len(plan.sources)} {source.name}"
    settings = _source_pretrain(source, pretrain)
    held = list(held_out) if source.kind == "stockfish" and (item.files or source.puzzle_filter) else []
    identity = _identity(item, plan.data, settings, held)
    location = {"data": str(plan.data), "folder": str(folder.resolve()), "held_out": held}
    state = _read_state(folder)
    if state is not None:
        if state.get("identity") != identity:
            changed = sorted(key for key in {**identity, **state.get("identity", {})}
                             if state.get("identity", {}).get(key) != identity.get(key))
            raise UserError(f"{say}: {folder} was made with other settings (they differ in {', '.join(changed)}); "
                            f"restore them, or delete {folder} to make it again")
        if state.get("done"):
            shards = [folder / name for name in state.get("shards", [])]
            lost = [path.name for path in shards if not path.is_file()]
            if lost:
                raise UserError(f"{say}: {folder} lacks {len(lost):,} of its shards ({lost[0]}, ...); delete "
                                f"{folder} to make it again")
            print(f"{say}: done before: {len(shards):,} shards ({state.get('positions', 0):,} positions)", flush=True)
            return _taken(source, shards)
        then = state.get("location", {})
        if then != location and (item.files or source.puzzle_filter is not None):
            raise UserError(f"{say}: {folder} was started with its files elsewhere (data {then.get('data')}, "
                            f"source folder {then.get('folder')}): a resume must read the same paths; rerun "
                            f"from there, or delete {folder} to make it again")
    else:
        from alphazero.store.shards import list_shards

        if list_shards(folder):
            raise UserError(f"{say}: {folder} holds shards but no {STATE_NAME}: not a recipe's; delete it or use "
                            f"a new run directory")
    folder.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(folder, older_than_s=0)  # a killed writer's: the run's lock keeps out live ones
    record = {"recipe": plan.recipe.name, "source": source.name, "identity": identity, "location": location}
    _write_state(folder, {**record, "done": False})
    if source.kind == "pgn":
        _make_pgn(item, settings, say, progress=progress)
    else:
        _make_labels(item, _label_settings(item, settings, held), say, workers=workers, progress=progress)
    shards, positions = _ordered_shards(item, say)
    _write_state(folder, {**record, "done": True, "shards": [path.name for path in shards], "positions": positions})
    print(f"{say}: done: {len(shards):,} shards ({positions:,} positions)", flush=True)
    return _taken(source, shards)


def _taken(source: Source, shards: list[Path]) -> list[Path]:
    return shards if source.shards is None else shards[:source.shards]


def _source_pretrain(source: Source, pretrain: PretrainConfig) -> PretrainConfig:
    """The run's pretrain section with the source's own seed and label_value."""
    changes: dict[str, Any] = {}
    if source.seed is not None:
        changes["seed"] = source.seed
    if source.label_value is not None:
        changes["label_value"] = source.label_value
    return dataclasses.replace(pretrain, **changes)


def _identity(item: SourcePlan, data: Path, pretrain: PretrainConfig, held_out: Sequence[str]) -> dict[str, Any]:
    """What a source's shards are made of, wherever its files lie: its settings, its files by name and size,
    the pretrain fields that shape them, and the held-out files by name and size."""
    from learner.labels import LABEL_FIELDS

    source = item.source
    fields = PGN_FIELDS if source.kind == "pgn" else LABEL_FIELDS
    settings = {key: value for key, value in dataclasses.asdict(source).items()
                if key not in ("name", "download", "licence", "into", "shards")}
    identity = {
        "source": settings,
        "files": [[path.relative_to(data).as_posix(), path.stat().st_size] for path in item.files],
        "pretrain": {name: getattr(pretrain, name) for name in fields},
        "held_out": [[Path(path).name, Path(path).stat().st_size] for path in held_out],
    }
    return cast("dict[str, Any]", json.loads(json.dumps(identity)))  # as source.json holds it: lists, not tuples


def _read_state(folder: Path) -> dict[str, Any] | None:
    """Reads a source folder's source.json (None when there is none).

    Raises:
        UserError: it is unreadable.
    """
    path = folder / STATE_NAME
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise UserError(f"cannot read {path} ({error}); delete {folder} to make the source again") from None
    if not isinstance(state, dict):
        raise UserError(f"{path} is not a recipe's source state; delete {folder} to make the source again")
    return state


def _write_state(folder: Path, state: dict[str, Any]) -> None:
    """Writes source.json (temporary name, then rename).

    Raises:
        UserError: the folder cannot be written.
    """
    try:
        atomic_write_text(folder / STATE_NAME, json.dumps(state, indent=1) + "\n")
    except OSError as error:
        raise UserError(f"cannot write {folder / STATE_NAME}: {error.strerror or error}") from None


def _make_pgn(item: SourcePlan, pretrain: PretrainConfig, say: str, *, progress: bool) -> None:
    """Converts a pgn source's games (resuming after the last file and game written)."""
    from learner.pgn_data import convert_pgn

    print(f"{say}: pgn games of {_files(len(item.files))} into {item.folder}", flush=True)
    report = convert_pgn(item.folder, [str(path) for path in item.files], smoothing=pretrain.pgn_smoothing,
                         shard_positions=pretrain.shard_positions, progress=progress,
                         use_evals=pretrain.pgn_value == "eval")
    print(report.summary(item.folder), flush=True)


def _label_settings(item: SourcePlan, pretrain: PretrainConfig, held_out: Sequence[str]) -> LabelSettings:
    from learner.labels import LabelSettings

    return LabelSettings.of(pretrain, nodes=item.source.nodes, positions=item.source.positions,
                            files=item.positions_files, held_out=held_out)


def _make_labels(item: SourcePlan, settings: LabelSettings, say: str, *, workers: int, progress: bool) -> None:
    """Labels a stockfish source's positions (the chunks not yet on disk), filtering its puzzles first."""
    from learner.pretrain import label_stockfish

    puzzle_filter = item.source.puzzle_filter
    if puzzle_filter is not None:
        output = item.folder / puzzle_filter.output
        if output.is_file():
            print(f"{say}: {output.name} was filtered before", flush=True)
        else:
            print(f"{say}: filtering {item.files[0].name} to the puzzles of {len(puzzle_filter.themes)} themes",
                  flush=True)
            read, kept = filter_puzzles(item.files[0], output, puzzle_filter.themes, sort=puzzle_filter.sort)
            print(f"{say}: {kept:,} of {read:,} puzzles kept in {output}", flush=True)
    print(f"{say}: {settings.positions:,} positions at {settings.nodes:,} nodes into {item.folder}", flush=True)
    label_stockfish(item.folder, settings, workers=workers, progress=progress)


def _ordered_shards(item: SourcePlan, say: str) -> tuple[list[Path], int]:
    """Lists a made source's shards in its order (pgn: by file, then game; stockfish: by chunk) with their
    positions.

    Raises:
        UserError: a shard is unreadable, or not of this source.
    """
    from alphazero.store.shards import ShardError, list_shards, read_shard_meta

    order = {str(path.resolve()): number for number, path in enumerate(item.files)}
    keyed: list[tuple[tuple[int, ...], Path]] = []
    positions = 0
    for path in list_shards(item.folder):
        try:
            meta = read_shard_meta(path)
            positions += int(meta.get("positions", 0))
            key: tuple[int, ...]
            if item.source.kind == "pgn":
                key = (order[str(meta["file"])], int(meta["games_from"]), int(meta["games_to"]))
            else:
                key = (int(meta["chunk"]),)
        except (ShardError, KeyError, TypeError, ValueError) as error:
            raise UserError(f"{say}: {path} is not one of this source's shards ({error}); delete {item.folder} "
                            f"to make it again") from None
        keyed.append((key, path))
    keyed.sort()
    return [path for _, path in keyed], positions


def filter_puzzles(source: Path, output: Path, themes: Sequence[str], *, sort: bool) -> tuple[int, int]:
    """Writes to ``output`` the header of the puzzle CSV ``source`` (plain or compressed) and its rows whose
    Themes column holds any of ``themes``, in the file's order or, with ``sort``, as `LC_ALL=C sort` orders
    lines (by PuzzleId, which opens each row); returns (rows read, rows kept).

    It selects what ``awk -F, 'NR==1 || $8 ~ /(^| )(THEMES)( |$)/'`` selects (Themes is the 8th column of
    Lichess's file); the output is written to a temporary name, then renamed.

    Raises:
        UserError: the file is unreadable, damaged, or has no Themes column; the output cannot be written.
    """
    from alphazero.chess.pgn_reader import READ_ERRORS, open_text

    wanted = frozenset(themes)
    kept: list[str] = []
    read = 0
    try:
        with open_text(source) as handle:
            header = handle.readline().rstrip("\n")
            columns = header.split(",")
            if "Themes" not in columns:
                raise UserError(f"{source} is not a Lichess puzzle CSV: its header lacks Themes (got {header!r})")
            column = columns.index("Themes")
            for line in handle:
                read += 1
                fields = line.rstrip("\n").split(",")
                if len(fields) > column and not wanted.isdisjoint(fields[column].split(" ")):
                    kept.append(line.rstrip("\n"))
    except READ_ERRORS as error:
        raise UserError(f"cannot read {source}: {error}") from None
    if sort:
        kept.sort()  # code point order, which is UTF-8's byte order: LC_ALL=C sort's
    temporary = output.with_name(f".{output.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(temporary, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(header + "\n")
            handle.writelines(line + "\n" for line in kept)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, output)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise UserError(f"cannot write {output}: {error.strerror or error}") from None
    return read, len(kept)


def _link_shards(plan: Plan, chosen: list[list[Path]], run: RunDir) -> tuple[int, int]:
    """Links each source's chosen shards into RUN/pretrain or RUN/mix (links already there kept); returns how
    many each holds.

    Raises:
        UserError: a folder holds shards the recipe did not choose, or cannot be written.
    """
    from alphazero.store.shards import list_shards

    folders = {"main": run.pretrain, "mix": run.root / MIX_DIR}
    wanted: dict[str, list[Path]] = {"main": [], "mix": []}
    for item, shards in zip(plan.sources, chosen, strict=True):
        wanted[item.source.into] += shards
    for into, folder in folders.items():
        names = {path.name for path in wanted[into]}
        extra = [path.name for path in list_shards(folder) if path.name not in names]
        if extra:
            raise UserError(f"{folder} holds {len(extra):,} shards the recipe did not choose ({extra[0]}, ...): "
                            f"the network would learn them too; use a new run directory, or delete {folder}")
        if not wanted[into]:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        for path in wanted[into]:
            _link(path, folder / path.name)
    return len(wanted["main"]), len(wanted["mix"])


def _link(source: Path, target: Path) -> None:
    """Hard-links ``source`` as ``target``, or copies it (temporary name, then rename) where the file system
    cannot; a ``target`` already there is kept.

    Raises:
        UserError: neither works.
    """
    if target.exists():
        return
    try:
        os.link(source, target)
        return
    except FileExistsError:
        return
    except OSError as error:
        if error.errno not in (errno.EXDEV, errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise UserError(f"cannot link {source} into {target.parent}: {error.strerror or error}") from None
    temporary = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        shutil.copyfile(source, temporary)
        os.replace(temporary, target)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise UserError(f"cannot copy {source} into {target.parent}: {error.strerror or error}") from None


def _state_text(folder: Path) -> str:
    """Says how far a source folder is: not started, started (shards so far), or done (its shards)."""
    from alphazero.store.shards import list_shards

    try:
        state = _read_state(folder)
    except UserError:
        return "its folder's state is unreadable"
    if state is None:
        return "not started"
    if state.get("done"):
        return f"done: {len(state.get('shards', [])):,} shards ({state.get('positions', 0):,} positions)"
    return f"started: {len(list_shards(folder)):,} shards so far"
