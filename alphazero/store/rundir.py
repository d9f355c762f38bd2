"""The run directory: the durable contract between self-play, learner and evaluator.

Layout::

    runs/NAME/config.toml     the full config, written once when the run is created
    runs/NAME/checkpoints/    step_000012000.pt files and LATEST (see alphazero.store.checkpoint)
    runs/NAME/selfplay/       shard files of self-play positions
    runs/NAME/pretrain/       shard files of supervised positions (alphazero pretrain; made when used)
    runs/NAME/games/          PGN of self-play and match games
    runs/NAME/tb/             TensorBoard event files
    runs/NAME/eval/           match results (JSON lines) and rating tables
    runs/NAME/learner.lock    held (flock) by the one learner of the run; says its pid and host

Hand-off contract (every process may be killed at any moment):

- Writers never write a final name directly. They write ``DIR/.NAME.<pid>.<random>.tmp``,
  flush and fsync it, then ``os.replace`` it onto ``DIR/NAME`` (atomic on POSIX
  file systems), so a final name always holds a complete file.
- Readers skip every name that starts with '.' or ends with '.tmp' (``is_temporary``);
  ``complete_files`` lists a folder that way.
- Temporaries left by killed writers are removed by ``remove_stale_temporaries``
  once they are old enough that no live writer can still own them.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import fcntl
import os
import secrets
import socket
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from alphazero.config import DEFAULT_PRESET, Config, apply_overrides, to_toml
from alphazero.config_compat import describe_differences, incompatible_fields
from alphazero.errors import UserError
from alphazero.presets import from_toml, get_preset

CONFIG_NAME = "config.toml"
LEARNER_LOCK_NAME = "learner.lock"
SUBDIRECTORIES = ("checkpoints", "selfplay", "games", "tb", "eval")


def is_temporary(path: str | os.PathLike[str]) -> bool:
    """Checks whether ``path`` names a file in progress (name starts with '.' or ends with '.tmp')."""
    name = Path(path).name
    return name.startswith(".") or name.endswith(".tmp")


def _temporary_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _fsync_directory(directory: Path) -> None:
    # Makes the rename itself durable; some file systems cannot open a folder, which is harmless.
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_temporary(path: Path, data: bytes) -> Path:
    temporary = _temporary_name(path)
    try:
        with open(temporary, "xb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _remove_quietly(temporary)
        raise
    return temporary


def _remove_quietly(temporary: Path) -> None:
    """Removes a temporary file after a failed write; the write's own error is the one to report (a path
    under a file, say, fails the removal too)."""
    with contextlib.suppress(OSError):
        temporary.unlink(missing_ok=True)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Writes ``data`` to ``path`` so that readers see the old file or the whole new one.

    Raises:
        OSError: the folder is missing or unwritable, or the disk is full; no
            temporary file is left behind.
    """
    path = Path(path)
    temporary = _write_temporary(path, data)
    try:
        os.replace(temporary, path)
    except BaseException:
        _remove_quietly(temporary)
        raise
    _fsync_directory(path.parent)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Writes ``text`` (UTF-8) to ``path`` atomically, as ``atomic_write_bytes``.

    Raises:
        OSError: as atomic_write_bytes.
    """
    atomic_write_bytes(path, text.encode("utf-8"))


def write_once(path: str | os.PathLike[str], data: bytes) -> bool:
    """Creates ``path`` with ``data`` atomically unless it exists; returns whether this call created it.

    Of several processes racing to create the same file exactly one wins, and
    none sees a partial file (a hard link of a complete temporary).

    Raises:
        OSError: the folder is missing or unwritable.
    """
    path = Path(path)
    temporary = _write_temporary(path, data)
    try:
        os.link(temporary, path)
        created = True
    except FileExistsError:
        created = False
    except OSError as error:
        if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        # No hard links on this file system: the check and the rename may race,
        # in which case the last writer wins with a complete file.
        created = not path.exists()
        if created:
            os.replace(temporary, path)
    finally:
        _remove_quietly(temporary)
    _fsync_directory(path.parent)
    return created


def complete_files(directory: str | os.PathLike[str], pattern: str = "*") -> list[Path]:
    """Lists the files matching ``pattern`` in ``directory`` that are not temporaries, sorted by name.

    A missing folder gives an empty list.
    """
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob(pattern) if not is_temporary(p) and p.is_file())


def remove_stale_temporaries(directory: str | os.PathLike[str], older_than_s: float = 3600.0) -> list[Path]:
    """Deletes temporaries in ``directory`` not modified for ``older_than_s`` seconds; returns them.

    Only names this module writes (``.NAME.<pid>.<random>.tmp``) are touched.
    """
    removed = []
    cutoff = time.time() - older_than_s
    for path in Path(directory).glob(".*.tmp"):
        try:
            if path.stat().st_mtime < cutoff:
                path.unlink()
                removed.append(path)
        except FileNotFoundError:
            pass  # another process cleaned it up first
    return removed


def _describe_os_error(error: OSError) -> str:
    return error.strerror or str(error)


def check_writable_directory(directory: str | os.PathLike[str], what: str) -> None:
    """Creates ``directory`` where missing and checks, by writing a temporary file there, that files can be
    written in it: work whose results go there can then refuse to start instead of failing at the end.

    Raises:
        UserError: the folder cannot be created or written (``what`` says what would go there).
    """
    directory = Path(directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        _write_temporary(directory / ".write-check", b"").unlink()
    except OSError as error:
        raise UserError(f"cannot write {what} in {directory}: {_describe_os_error(error)}") from None


class RunDir:
    """The folders and files of one run (nothing is created until ``create_or_open``).

    Example::

        run, config = RunDir.create_or_open("runs/x", get_preset("tiny"), ["search.simulations=100"])
        run.checkpoints  # Path("runs/x/checkpoints")
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.root = Path(path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def selfplay(self) -> Path:
        return self.root / "selfplay"

    @property
    def pretrain(self) -> Path:
        return self.root / "pretrain"

    @property
    def games(self) -> Path:
        return self.root / "games"

    @property
    def tb(self) -> Path:
        return self.root / "tb"

    @property
    def eval(self) -> Path:
        return self.root / "eval"

    def exists(self) -> bool:
        """Checks whether the run has been created (its config.toml exists)."""
        return self.config_file.is_file()

    def read_config(self) -> Config:
        """Reads the run's saved config.toml.

        Raises:
            UserError: no config.toml, or it is unreadable or invalid.
        """
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"{self.root} is a file, not a run directory")
        try:
            text = self.config_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UserError(f"{self.root} is not a run directory (no {CONFIG_NAME}); "
                            f"create it with `alphazero train --run {self.root}`") from None
        except (OSError, UnicodeDecodeError) as error:
            raise UserError(f"cannot read {self.config_file}: {error}") from None
        if not text.strip():  # written whole when the run was made: an empty one lost the run's settings
            raise UserError(f"{self.config_file} is empty, so the run's settings are lost: restore it (or write "
                            f"the settings the run was made with), or start a new run")
        try:
            return from_toml(text)
        except UserError as error:
            raise UserError(f"{self.config_file}: {error}") from None

    def make_layout(self) -> None:
        """Creates the run folder and its subfolders where missing.

        Raises:
            UserError: the path or a parent is not a folder, or is not writable.
        """
        if self.root.exists() and not self.root.is_dir():
            raise UserError(f"run directory {self.root} exists and is not a directory")
        try:
            for name in SUBDIRECTORIES:
                (self.root / name).mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UserError(f"cannot create run directory {self.root}: {_describe_os_error(error)}") from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise UserError(f"run directory {self.root} is not writable")

    @classmethod
    def open(cls, path: str | os.PathLike[str], overrides: Iterable[str] = ()) -> tuple[RunDir, Config]:
        """Opens an existing run: reads its config and applies ``overrides`` (not saved).

        Raises:
            UserError: not a run directory, an invalid config, a bad override, or
                an override of a fixed field (see alphazero.config_compat.FIXED_FIELDS).
        """
        run = cls(path)
        saved = run.read_config()
        return run, _reopened_config(run, saved, None, list(overrides))

    @classmethod
    def create_or_open(
        cls, path: str | os.PathLike[str], config: Config | None = None, overrides: Iterable[str] = ()
    ) -> tuple[RunDir, Config]:
        """Creates a run at ``path`` or reopens the one there; returns it and the config to use.

        A new run gets ``config`` (the tiny preset when None) with ``overrides``
        applied, and that is written to config.toml. An existing run keeps its
        saved config: ``overrides`` apply to it for this process only, and
        ``config``, when given, must agree with it on the fixed fields.

        Raises:
            UserError: the path is not a writable folder; the saved config is
                invalid; a bad override; or ``config`` or the overrides change
                fixed fields (the message names them with both values).
        """
        run = cls(path)
        overrides = list(overrides)
        # A bad override is refused before the folder is made: no empty run is left behind.
        fresh = None if run.exists() else apply_overrides(config if config is not None else get_preset(DEFAULT_PRESET),
                                                          overrides)
        run.make_layout()
        if fresh is not None:
            try:
                created = write_once(run.config_file, to_toml(fresh).encode("utf-8"))
            except OSError as error:
                raise UserError(f"cannot write {run.config_file}: {_describe_os_error(error)}") from None
            if created:
                return run, fresh
        # The run existed, or another process created it a moment ago.
        return run, _reopened_config(run, run.read_config(), config, overrides)


def _reopened_config(run: RunDir, saved: Config, config: Config | None, overrides: list[str]) -> Config:
    """Applies ``overrides`` to the saved config after checking that nothing fixed changes.

    Raises:
        UserError: ``config`` or the overrides differ from ``saved`` on fixed fields.
    """
    if config is not None:
        _check_compatible(run, saved, apply_overrides(config, overrides))
    requested = apply_overrides(saved, overrides)
    _check_compatible(run, saved, requested)
    return requested


def _check_compatible(run: RunDir, saved: Config, requested: Config) -> None:
    names = incompatible_fields(saved, requested)
    if names:
        raise UserError(f"run {run.root} was created with a different configuration, and these fields cannot "
                        f"change: {describe_differences(saved, requested, names)}. Use a new run directory, "
                        f"or drop the options that change them")


# --- one learner per run --------------------------------------------------------------

def _describe_holder(lock_path: Path) -> str:
    """Reads who holds a learner lock ('process 123 on host h (alphazero train)'), waiting briefly
    for a holder that has the lock but has not written its name yet."""
    for _ in range(20):
        try:
            words = lock_path.read_text(encoding="utf-8").split(maxsplit=2)
        except (OSError, UnicodeDecodeError):
            words = []
        if len(words) >= 2 and words[0].isdigit():
            command = f" ({words[2].strip()})" if len(words) == 3 else ""
            return f"process {words[0]} on host {words[1]}{command}"
        time.sleep(0.05)
    return "another process"


@contextlib.contextmanager
def learner_lock(run: RunDir, command: str) -> Iterator[Path]:
    """Holds the run's learner lock while the block runs: one learner per run; yields the lock file.

    ``command`` ('alphazero train') is written beside the pid and host, for
    the message another learner gets.

    The lock is the kernel's (flock on ``run/learner.lock``), so it goes with
    the process however that ends, SIGKILL included: the file itself may stay
    behind, naming the last holder, and never blocks a later learner.
    Self-play actors, eval and match take no lock and may share the run.

    Raises:
        UserError: another process holds the lock (the message names its pid
            and host), or the lock file cannot be created.
    """
    lock_path = run.root / LEARNER_LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:
        raise UserError(f"cannot create the learner lock {lock_path}: {_describe_os_error(error)}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"run {run.root} already has a learner: {_describe_holder(lock_path)} holds "
                            f"{lock_path}; stop it first (one learner per run; self-play and eval may share "
                            f"it)") from None
        except OSError as error:  # a file system without locks
            raise UserError(f"cannot lock {lock_path}: {_describe_os_error(error)}") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()} {command}\n".encode(), 0)
        yield lock_path
    finally:
        os.close(fd)  # releases the lock


# --- the command-line options that open a run ------------------------------------

DEFAULT_RUN_DIR = Path("runs/default")
"""The run every command uses without --run."""


def add_run_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup,
                   role: str = "run directory") -> None:
    """Adds --run DIR (a Path, default runs/default): one spelling, type and default for every command;
    ``role`` says what the command does with the run."""
    parser.add_argument("--run", type=Path, default=DEFAULT_RUN_DIR, metavar="DIR",
                        help=f"{role} (default {DEFAULT_RUN_DIR})")


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --run, --preset and --set: the options of every command that opens a run."""
    from alphazero.config import DEFAULT_PRESET
    from alphazero.presets import PRESET_NAMES

    add_run_option(parser, "run directory, created with --preset when it has no config.toml")
    parser.add_argument("--preset", choices=PRESET_NAMES, default=None,
                        help=f"preset of a new run (default: {DEFAULT_PRESET}, the CPU preset); "
                             "an existing run keeps its own")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config field, e.g. --set search.simulations=100 (repeatable); "
                             "on an existing run, for this process only")


def open_run_from_args(args: argparse.Namespace, extra_overrides: Iterable[str] = (),
                       *, defaults: Iterable[str] = (), announce: bool = True) -> tuple[RunDir, Config]:
    """Creates or reopens the run named by --run, with --preset and the --set overrides.

    ``defaults`` are overrides applied before the --set ones (which may
    change them); ``extra_overrides`` after them (they win).

    Raises:
        UserError: see RunDir.create_or_open.
    """
    from alphazero.presets import get_preset

    existed = RunDir(args.run).exists()
    preset = get_preset(args.preset) if args.preset else None
    run, config = RunDir.create_or_open(args.run, preset, [*defaults, *args.overrides, *extra_overrides])
    if not existed and announce:
        print(f"created run {run.root} (preset {config.preset})", flush=True)
    return run, config
