"""Hosts for tests: Linux namespaces joined by a bridge, each one a machine of its own (tests/test_hosts.py).

A host is a network namespace (its own address on a bridge that lives in a
namespace of its own, so nothing touches this machine's network) with its
own mount, PID, UTS and IPC namespaces: its own /tmp, /dev/shm and ~/.ray
(empty tmpfs), its own process table (so `ray stop` on one host stops that
host's Ray and nothing else on this machine) and hostname. The rest of the
file system (Python, this repository) all hosts share, as machines made
from one image would. This machine reads a host's files through
/proc/PID/root (Host.path). Each host's first process is this file run as a
script: the namespace's init, which reaps orphans (Ray's daemons) and exits
when its stdin closes; the kernel then kills every process of the host.

Commands run on a host through nsenter (Host.command).
Everything here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); where a
namespace is refused, Network raises HostsUnavailable with the reason.
"""

from __future__ import annotations

import ipaddress
import os
import random
import secrets
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

KEEP_ROOT = Path("/run/alphazero-test-hosts")  # mount points that hold paths under /tmp aside (see _start_init)
HANG_BOUND_S = 60.0  # a host's init is ready in well under a second; this only stops a hang
REFUSALS = ("Operation not permitted", "Permission denied")  # what a step the machine refuses says


class HostsUnavailable(Exception):
    """This machine refuses what the hosts need (not root, namespaces refused, a tool missing): one line why."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=HANG_BOUND_S)
    if check and done.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {(done.stderr or done.stdout).strip()}")
    return done


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (this kernel may lack /proc/PID/task/TID/children)."""
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                children.append(int(entry))
    return children


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.213.0.0/16 that no address or route of this namespace is in."""
    taken = [ipaddress.ip_interface(word).network for line in _ip("-o", "-4", "addr").stdout.splitlines()
             for word in line.split()[3:4]]
    routes = [ipaddress.ip_network(line.split()[0]) for line in _ip("-4", "route").stdout.splitlines()
              if line.split()[0] != "default"]
    for third in random.sample(range(1, 255), 254):
        subnet = ipaddress.ip_network(f"10.213.{third}.0/24")
        if not any(subnet.overlaps(other) for other in [*taken, *routes]):
            return subnet
    raise HostsUnavailable("no free /24 in 10.213.0.0/16 for the test hosts")


@dataclass
class Host:
    """One host: its name, network namespace, address and init process."""

    name: str
    netns: str
    address: str
    init: subprocess.Popen[bytes] | None = None
    pid: int = 0  # the init's process id in this machine's PID namespace

    def command(self, args: Sequence[str], cwd: str | Path = "/") -> list[str]:
        """The command line that runs ``args`` on this host (in all its namespaces), in ``cwd``."""
        return ["nsenter", f"--target={self.pid}", "--net", "--mount", "--pid", "--uts", "--ipc", f"--wd={cwd}",
                "--", *args]

    def path(self, path: str | Path) -> Path:
        """Where this machine sees the host's file at ``path`` (an absolute path on the host)."""
        return Path(f"/proc/{self.pid}/root") / Path(path).relative_to("/")



@dataclass
class Network:
    """Hosts on one bridge, made on entry and taken apart on exit (also when the body fails).

    ``logs``: a folder for each host's init's stderr.
    """

    names: Sequence[str]
    logs: Path | None = None
    prefix: str = field(default_factory=lambda: f"az-{secrets.token_hex(3)}")
    hosts: dict[str, Host] = field(default_factory=dict)
    _subnet: ipaddress.IPv4Network = ipaddress.IPv4Network("10.213.0.0/24")  # the bridge's, chosen on entry
    _made: list[str] = field(default_factory=list)  # network namespaces made, to delete

    @property
    def bridge_netns(self) -> str:
        return f"{self.prefix}-br"

    def __enter__(self) -> Network:
        self._check_allowed()
        try:
            self._make()
        except BaseException as error:
            self.close()
            if isinstance(error, RuntimeError) and any(word in str(error) for word in REFUSALS):
                raise HostsUnavailable(str(error).splitlines()[0]) from error
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_allowed(self) -> None:
        if sys.platform != "linux":
            raise HostsUnavailable(f"network namespaces need Linux, not {sys.platform}")
        if os.geteuid() != 0:
            raise HostsUnavailable("network namespaces need root")
        missing = [tool for tool in ("ip", "unshare", "nsenter", "mount") if shutil.which(tool) is None]
        if missing:
            raise HostsUnavailable(f"missing {', '.join(missing)}")
        done = _ip("netns", "add", self.bridge_netns, check=False)
        if done.returncode:
            raise HostsUnavailable(f"ip netns add refused: {(done.stderr or done.stdout).strip().splitlines()[0]}")
        self._made.append(self.bridge_netns)

    def _make(self) -> None:
        self._subnet = _free_subnet()
        _ip("-n", self.bridge_netns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge_netns, "link", "set", "br0", "up")
        for name in self.names:
            self.add_host(name)

    def add_host(self, name: str) -> Host:
        """Makes host ``name`` on the bridge, its init started (a machine that joins the network)."""
        subnet = self._subnet
        host = Host(name, f"{self.prefix}-{name}", str(subnet[len(self.hosts) + 1]))
        _ip("netns", "add", host.netns)
        self._made.append(host.netns)
        self.hosts[name] = host
        # One veth pair: eth0 in the host, its peer on the bridge, both made inside namespaces of ours.
        _ip("-n", self.bridge_netns, "link", "add", f"v-{name}", "type", "veth", "peer", "name", "eth0",
            "netns", host.netns)
        _ip("-n", self.bridge_netns, "link", "set", f"v-{name}", "master", "br0", "up")
        _ip("-n", host.netns, "addr", "add", f"{host.address}/{subnet.prefixlen}", "dev", "eth0")
        _ip("-n", host.netns, "link", "set", "eth0", "up")
        _ip("-n", host.netns, "link", "set", "lo", "up")
        # A default route, as a machine has, by which Ray finds the host's own address; beyond the bridge
        # nothing answers.
        _ip("-n", host.netns, "route", "add", "default", "dev", "eth0")
        self._start_init(host)
        return host

    def set_link(self, name: str, up: bool) -> None:
        """Takes host ``name``'s link to the bridge down (its packets are lost, as on a pulled cable) or up."""
        _ip("-n", self.bridge_netns, "link", "set", f"v-{name}", "up" if up else "down")

    def kill(self, name: str) -> None:
        """Kills every process of host ``name`` at once, as a power cut would: its init exits, and the kernel
        SIGKILLs the rest of its PID namespace. Its address stays on the bridge, unanswered."""
        host = self.hosts[name]
        self._stop_init(host)
        self._kill_all_in(host.netns)  # the nsenter parents of its commands, outside its PID namespace
        host.pid = 0

    def _start_init(self, host: Host) -> None:
        home_ray = Path.home() / ".ray"
        home_ray.mkdir(exist_ok=True)  # the mount point of each host's own ~/.ray (Ray makes it anyway)
        tag = f"{self.prefix}-{host.name}"
        # What the host runs but that lies under /tmp (a checkout or a virtualenv there, as in a CI's clone) is
        # held aside before /tmp is covered by the host's own, then bound back at the same path.
        kept = _under_tmp([Path(__file__).resolve().parents[1], Path(sys.prefix).resolve(),
                           *(Path(entry).resolve() for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                             if entry)])
        holds = [KEEP_ROOT / f"{tag}-{index}" for index in range(len(kept))]
        mounts = [*(f'mkdir -p "{hold}" && mount --bind "{path}" "{hold}"' for path, hold in zip(kept, holds)),
                  f"mount -t tmpfs -o size=1g,mode=1777 {tag}-tmp /tmp",
                  *(f'mkdir -p "{path}" && mount --bind "{hold}" "{path}"' for path, hold in zip(kept, holds)),
                  f"mount -t tmpfs -o size=1g,mode=1777 {tag}-shm /dev/shm",
                  f"mount -t tmpfs -o size=16m,mode=0700 {tag}-ray {home_ray}",
                  f"hostname {tag}"]
        script = " && ".join([*mounts, f'exec "{sys.executable}" "{Path(__file__).resolve()}" init'])
        log = self.logs / f"{host.name}-init.log" if self.logs else Path(os.devnull)
        with log.open("wb") as stderr:
            host.init = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, "unshare", "--mount", "--pid", "--uts", "--ipc", "--fork",
                 "--mount-proc", "--propagation", "private", "sh", "-c", script],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True)
        assert host.init.stdout is not None
        ready, _, _ = select.select([host.init.stdout], [], [], HANG_BOUND_S)
        line = host.init.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            said = log.read_text().strip() if self.logs else ""
            raise RuntimeError(f"host {host.name}'s init did not start: {said or line!r}")
        (host.pid,) = children_of(host.init.pid)

    def close(self) -> None:
        """Stops every host (its init, then anything left in its network namespace) and deletes the namespaces."""
        for host in self.hosts.values():
            self._stop_init(host)
        for netns in self._made:
            self._kill_all_in(netns)
            _ip("netns", "del", netns, check=False)
        self._made.clear()
        for hold in KEEP_ROOT.glob(f"{self.prefix}-*"):  # empty out here: the binds were the hosts' own
            hold.rmdir()

    @staticmethod
    def _stop_init(host: Host) -> None:
        if host.init is not None and host.init.poll() is None:
            assert host.init.stdin is not None
            host.init.stdin.close()  # the init exits; the kernel kills the rest of its PID namespace
            try:
                host.init.wait(HANG_BOUND_S)
            except subprocess.TimeoutExpired:
                os.killpg(host.init.pid, signal.SIGKILL)
                host.init.wait(HANG_BOUND_S)
        if host.init is not None and host.init.stdout is not None:
            host.init.stdout.close()

    @staticmethod
    def _kill_all_in(netns: str) -> None:
        """Kills what is left in a network namespace (nsenter's own processes, say): only processes of ours."""
        deadline = time.monotonic() + HANG_BOUND_S
        while pids := [int(pid) for pid in _ip("netns", "pids", netns, check=False).stdout.split()]:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes {pids} outlived SIGKILL in {netns}")
            time.sleep(0.05)


def _under_tmp(paths: Sequence[Path]) -> list[Path]:
    """Gets the paths under /tmp among ``paths``, none inside another."""
    tmp = Path("/tmp")
    inside = sorted({path for path in paths if tmp in path.parents})
    return [path for path in inside if not any(other in path.parents for other in inside)]


def _init() -> None:
    """A host's first process (PID 1 of its namespace): reaps every orphan until its stdin closes."""

    def reap(*_: object) -> None:
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return

    signal.signal(signal.SIGCHLD, reap)
    print("ready", flush=True)
    while sys.stdin.buffer.read(1024):
        pass


if __name__ == "__main__" and sys.argv[1:] == ["init"]:
    _init()
