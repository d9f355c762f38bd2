"""Connecting to Ray: a cluster's address checked first, or a local Ray of this machine's cores started.

Around ray.init: a local Ray's authentication token written whole before it
starts (``ensure_ray_token``), its banner about that token kept off the
terminal, and this process's SIGTERM handler put back afterwards.

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
    with _keeping_sigterm_handler():
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
    return True


@contextlib.contextmanager
def _keeping_sigterm_handler() -> Iterator[None]:
    """Puts back this process's SIGTERM handler after ray.init, which replaces it with abseil's failure handler
    (a stack dump, then an abort 3 s later; ray-project/ray issues 37288 and 64829): SIGTERM stops our commands
    as Ctrl-C does (alphazero.app.cli), with the finished work saved."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handler = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if handler is not None:  # None: installed outside Python, nothing of ours to put back
            signal.signal(signal.SIGTERM, handler)


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
