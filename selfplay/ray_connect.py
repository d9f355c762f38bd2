"""Connecting to Ray: a cluster's address checked first, or a local Ray of this machine's cores started.

Around ray.init: a local Ray's authentication token written whole before it
starts (``ensure_ray_token``), its banner about that token kept off the
terminal, and this process's SIGTERM handler put back afterwards. A local
Ray's processes start with SIGTERM blocked, as Ray starts them with SIGINT
blocked: a SIGTERM sent to every process of the command (``timeout``,
systemd's ``KillMode=control-group``) stops the command as Ctrl-C does,
and the command ends its Ray itself (``_sigterm_to_this_process``).

Example::

    started = connect_ray(None, num_cpus=os.cpu_count() or 1)
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import secrets
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

from alphazero.errors import UserError
from selfplay import NAMESPACE

__all__ = ["connect_ray", "ensure_ray_token"]


def connect_ray(address: str | None, num_cpus: int, num_gpus: float | None = None) -> bool:
    """Connects to the Ray cluster at `address`, or starts a local one; returns True if it started one.

    Reuses a connection that already exists in this process (tests, `alphazero train`).

    Raises:
        UserError: the address cannot be reached.
    """
    import ray

    if address:
        _check_reachable(address)
    if ray.is_initialized():
        return False
    _quiet_ray_auth_banner()
    if not address:
        ensure_ray_token()
    with _sigterm_to_this_process(starts_ray=not address):
        if address:
            try:
                ray.init(address=address, namespace=NAMESPACE, logging_level=logging.WARNING)
            except (ConnectionError, RuntimeError, ValueError) as error:
                raise UserError(f"cannot connect to the Ray cluster at {address}: {error}") from None
            return True
        # A node's resources are whole numbers: --gpus 0.5 declares one GPU, of which self-play asks half.
        # "local": a Ray of its own, as --address's help says; with no address Ray would join the cluster that
        # RAY_ADDRESS or the newest `ray start` on this machine names, and refuse num_cpus there.
        ray.init(address="local", num_cpus=num_cpus, num_gpus=math.ceil(num_gpus) if num_gpus else None,
                 include_dashboard=False, namespace=NAMESPACE, logging_level=logging.WARNING)
        _end_without_sigterm()  # before a SIGTERM held back meanwhile can interrupt this process
    return True


@contextlib.contextmanager
def _sigterm_to_this_process(starts_ray: bool) -> Iterator[None]:
    """Around ray.init: this process's SIGTERM handler put back afterwards, and (``starts_ray``) the processes
    of the local Ray it starts left deaf to SIGTERM.

    ray.init replaces the handler with its own (a stack dump, then an abort 3 s later; ray-project/ray
    issues 37288 and 64829): SIGTERM stops our commands as Ctrl-C does (alphazero.app.cli), with the
    finished work saved.

    A SIGTERM sent to every process of the command (``timeout`` signals its process group, systemd with
    ``KillMode=control-group`` the whole cgroup) also reached the GCS and the raylet: the GCS hung in its
    own shutdown, the raylet went, and the driver waited on calls they never answered until Ray's own
    timeout ended it, without its summary (EXPERIMENTS.md, "SIGTERM to the whole command").
    Ray blocks SIGINT in the processes it starts, which is why Ctrl-C to the group works; blocking SIGTERM
    in this thread while they start does the same for SIGTERM, since a child inherits its parent's signal
    mask (and the raylet passes it on to the workers it forks). The driver then stops as on Ctrl-C and
    ends its Ray itself (_end_without_sigterm); were the driver to die, they would die with it (Ray's
    kill-on-parent-death is SIGKILL, which no mask holds back). The handler is put back before the mask,
    so that a SIGTERM that came meanwhile reaches ours.
    """
    handler = signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None
    blocks = starts_ray and hasattr(signal, "pthread_sigmask")  # not on Windows
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM}) if blocks else None
    try:
        yield
    finally:
        if handler is not None:  # None: installed outside Python, or not the main thread: nothing of ours
            signal.signal(signal.SIGTERM, handler)
        if mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _end_without_sigterm() -> None:
    """Makes ray.shutdown (and Ray's own exit hook) end the local Ray's processes, and theirs, at once with SIGKILL.

    Ray ends its processes with SIGTERM and a second's wait for each before its SIGKILL; with SIGTERM blocked
    in them (_sigterm_to_this_process) each wait would be spent in full, and the raylet, killed, would leave its
    agents behind (the dashboard's and the runtime environments', which it ends only on a SIGTERM; they linger
    long after: EXPERIMENTS.md, "SIGTERM to the whole command"). So every descendant of Ray's
    processes is killed with them. Ray's node object is internal: where it is not as expected, shutdowns keep
    Ray's way (slower, and its agents may linger).
    """
    import ray

    node = getattr(getattr(getattr(ray, "_private", None), "worker", None), "_global_node", None)
    kill = getattr(node, "kill_all_processes", None)
    if node is None or kill is None or not isinstance(getattr(node, "all_processes", None), dict):
        return

    def kill_all_processes(check_alive: bool = True, allow_graceful: bool = False, wait: bool = False) -> None:
        started = [getattr(info, "process", None) for infos in node.all_processes.values() for info in infos]
        family = _descendants({process.pid for process in started if process is not None})
        kill(check_alive=check_alive, allow_graceful=False, wait=wait)
        for pid in family:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    node.kill_all_processes = kill_all_processes


def _descendants(roots: set[int]) -> list[int]:
    """Gets the processes descended from ``roots`` (not themselves); none where neither /proc nor ps answers."""
    parents = _parents()
    found: list[int] = []
    level = set(roots)
    while level:
        level = {pid for pid, parent in parents.items() if parent in level}
        found.extend(sorted(level))
    return found


def _parents() -> dict[int, int]:
    """Gets every process's parent: from /proc (Linux), else from ps (macOS)."""
    parents: dict[int, int] = {}
    if Path("/proc/self/stat").is_file():
        for entry in Path("/proc").glob("[0-9]*"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                # /proc/PID/stat: 'PID (COMMAND) STATE PPID ...'; the command may hold spaces and parentheses.
                parents[int(entry.name)] = int(entry.joinpath("stat").read_text().rpartition(")")[2].split()[1])
        return parents
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listing = subprocess.run(["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True, text=True,
                                 timeout=10, check=True).stdout
        for line in listing.splitlines():
            with contextlib.suppress(ValueError):
                pid, parent = map(int, line.split())
                parents[pid] = parent
    return parents


_RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"
_RAY_AUTH_BANNER = "Token authentication is enabled for this Ray cluster"


class _DropRayAuthBanner(logging.Filter):
    """Drops Ray's note that it turned token authentication on (every other record passes)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_RAY_AUTH_BANNER)


def _quiet_ray_auth_banner() -> None:
    """Keeps Ray's token-authentication banner off the terminal, and the authentication on.

    Ray (2.5x and later) turns token authentication on for a cluster that
    ray.init starts (and for a local one found by 'auto' when a token exists),
    then logs a warning saying so on every start. Only that one record is
    dropped; the security stays as Ray sets it, and its warning that
    authentication is OFF still shows.
    """
    logger = logging.getLogger(_RAY_AUTH_LOGGER)
    if not any(isinstance(f, _DropRayAuthBanner) for f in logger.filters):
        logger.addFilter(_DropRayAuthBanner())


def ensure_ray_token(path: Path | None = None) -> None:
    """Writes the token of a local Ray's authentication (~/.ray/auth_token) when there is none, under a
    temporary name linked into place, where ray.init would write it in place: two commands starting their
    first Ray at once (two test workers on a fresh machine) could each write one, and a cluster's processes
    read its rival's. The token is Ray's kind (32 random bytes in hex), readable by this user alone."""
    if os.environ.get("RAY_AUTH_MODE", "").lower() == "disabled" or "RAY_AUTH_TOKEN" in os.environ \
            or "RAY_AUTH_TOKEN_PATH" in os.environ:
        return  # no token wanted, or the user's own
    path = path if path is not None else Path.home() / ".ray" / "auth_token"
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
        file.write(secrets.token_hex(32))
    try:
        os.link(temporary, path)  # never replaces: the first command's token stands
    except FileExistsError:
        pass
    finally:
        temporary.unlink()


def _check_reachable(address: str) -> None:
    """Fails fast, with a clear message, on a host:port nobody listens at (ray.init would retry for long)."""
    if address == "auto" or "://" in address and not address.startswith("ray://"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"a Ray address is HOST:PORT, ray://HOST:PORT or 'auto', got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as error:
        raise UserError(f"cannot reach the Ray cluster at {address}: {error.strerror or error}") from None
