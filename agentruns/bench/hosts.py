"""Cluster "hosts" simulated on one machine (PERF-12), for `bench_scaleout` and the fault
tests between machines.

Each host is a network namespace joined to this one by a veth pair, its processes held to a
fixed CPU quota by a cgroup of their own (v2 `cpu.max`, or v1's `cpu.cfs_quota_us` where
the machine mounts v1, as this one does). A host reaches PostgreSQL only through one
PgBouncer in transaction mode, which listens on the veth pairs' host ends and connects to
the server over this namespace's loopback: from a host, the database is as far away as it
would be from another machine, and cutting a host off (`partition`) is a firewall rule in
its own namespace that touches nothing else.

Linux, root, `ip`, and Debian's `pgbouncer` and `iptables` (`make host-tools`). Everything
made here is named after this process (`ar-so-<pid>-<n>`), removed on `close`, and what a
killed earlier process left behind is removed on the next `SimulatedHosts` (`sweep_stale`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

PREFIX = "ar-so-"
PGBOUNCER_PORT = 6432
CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1_CPU = Path("/sys/fs/cgroup/cpu")
NETNS_DIR = Path("/run/netns")
CPU_PERIOD_US = 100_000


class HostsUnavailable(RuntimeError):
    """The machine cannot simulate hosts (not Linux, not root, a tool missing)."""


def missing_tools() -> list[str]:
    """What `make host-tools` would install, or the sandbox lacks (root, `ip`)."""
    missing = [tool for tool in ("ip", "pgbouncer", "iptables") if shutil.which(tool) is None]
    if os.geteuid() != 0:
        missing.append("root")
    return missing


def cgroup_version() -> int:
    return 2 if (CGROUP_V2 / "cgroup.controllers").exists() else 1


def _run(*args: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    if done.returncode:
        raise HostsUnavailable(f"{' '.join(args)}: {done.stderr.strip()}")


def _quiet(*args: str) -> None:
    """Best-effort teardown: what is already gone is fine."""
    subprocess.run(args, capture_output=True, timeout=30, check=False)


@dataclass
class Host:
    """One simulated machine: its namespace, addresses, cgroup and database URL."""

    name: str
    netns: str
    outer_ip: str  # the veth's end in this namespace, where PgBouncer listens
    inner_ip: str
    cgroup: Path | None
    database_url: str

    def prefix(self) -> list[str]:
        """Run a command inside the host: first into its cgroup (before `ip netns exec`
        remounts /sys and hides the cgroup tree), then into its namespace. `exec` keeps
        the process id, so the caller's process group is the command's."""
        enter = ["ip", "netns", "exec", self.netns]
        if self.cgroup is None:
            return enter
        script = 'echo $$ > "$0" && exec "$@"'
        return ["sh", "-c", script, str(self.cgroup / "cgroup.procs"), *enter]

    def partition(self) -> None:
        """Cut the host off from the database: its packets to PgBouncer are dropped, as a
        broken link would (no reset; its connections hang until they time out)."""
        _run(*self._iptables("-A"))

    def heal(self) -> None:
        _run(*self._iptables("-D"))

    def _iptables(self, action: str) -> list[str]:
        return ["ip", "netns", "exec", self.netns, "iptables", action, "OUTPUT", "-d",
                f"{self.outer_ip}/32", "-j", "DROP"]  # fmt: skip


class SimulatedHosts:
    """`count` hosts and the PgBouncer they share; a context manager that removes them all.

    `cpus`: each host's CPU quota in cores (None: no quota). `server_pool`: PgBouncer's
    server connections to the database (its `default_pool_size`, one database and user).
    `idle_transaction_seconds`: PgBouncer drops a client that sits in a transaction this
    long, so a host cut off mid-transaction does not keep its row locks (and the runs it
    held) from the others; below the lease, or its runs wait for it."""

    def __init__(
        self,
        database_url: str,
        count: int,
        *,
        cpus: float | None = None,
        server_pool: int = 20,
        idle_transaction_seconds: float = 5.0,
    ) -> None:
        missing = missing_tools()
        if missing:
            raise HostsUnavailable(f"simulated hosts need {', '.join(missing)} (make host-tools)")
        self.database_url = database_url
        self.count, self.cpus = count, cpus
        self.server_pool = server_pool
        self.idle_transaction_seconds = idle_transaction_seconds
        self.tag = f"{PREFIX}{os.getpid()}"
        self.hosts: list[Host] = []
        self.pgbouncer: subprocess.Popen[bytes] | None = None
        self.workdir: Path | None = None

    def __enter__(self) -> SimulatedHosts:
        sweep_stale()
        try:
            self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
            self.hosts = [self._add_host(i) for i in range(self.count)]
            self._start_pgbouncer()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- building -----------------------------------------------------------------------

    def _subnet(self, index: int) -> tuple[str, str]:
        """A /30 of 10.254.0.0/16 per host, chosen by this process's id so two runs at once
        do not share addresses."""
        block = (os.getpid() % 1024) * 16 + index  # 16 hosts a process at most
        third, fourth = divmod(block * 4, 256)
        base = f"10.254.{third % 256}"
        return f"{base}.{fourth + 1}", f"{base}.{fourth + 2}"

    def _add_host(self, index: int) -> Host:
        netns = f"{self.tag}-{index}"
        # veth names are at most 15 characters.
        outer, inner = f"ars{os.getpid() % 10**6}o{index}", f"ars{os.getpid() % 10**6}i{index}"
        outer_ip, inner_ip = self._subnet(index)
        _run("ip", "netns", "add", netns)
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
        _run("ip", "link", "set", inner, "netns", netns)
        _run("ip", "addr", "add", f"{outer_ip}/30", "dev", outer)
        _run("ip", "link", "set", outer, "up")
        inside = ["ip", "netns", "exec", netns, "ip"]
        _run(*inside, "addr", "add", f"{inner_ip}/30", "dev", inner)
        _run(*inside, "link", "set", inner, "up")
        _run(*inside, "link", "set", "lo", "up")
        return Host(
            name=f"host{index + 1}",
            netns=netns,
            outer_ip=outer_ip,
            inner_ip=inner_ip,
            cgroup=self._cgroup(netns),
            database_url=_via(self.database_url, outer_ip, PGBOUNCER_PORT),
        )

    def _cgroup(self, name: str) -> Path | None:
        if self.cpus is None:
            return None
        quota = int(self.cpus * CPU_PERIOD_US)
        if cgroup_version() == 2:
            control = CGROUP_V2 / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():  # a child gets no cpu.max without
                control.write_text("+cpu\n")
            path = CGROUP_V2 / name
            path.mkdir()
            (path / "cpu.max").write_text(f"{quota} {CPU_PERIOD_US}\n")
        else:
            path = CGROUP_V1_CPU / name
            path.mkdir()
            (path / "cpu.cfs_period_us").write_text(f"{CPU_PERIOD_US}\n")
            (path / "cpu.cfs_quota_us").write_text(f"{quota}\n")
        return path

    def _start_pgbouncer(self) -> None:
        assert self.workdir is not None
        server = urlsplit(self.database_url)
        user = server.username or "postgres"
        users = self.workdir / "users.txt"
        users.write_text(f'"{user}" ""\n')
        log = self.workdir / "pgbouncer.log"
        log.touch()
        config = self.workdir / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"* = host={server.hostname or '127.0.0.1'} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = {','.join(host.outer_ip for host in self.hosts)}\n"
            f"listen_port = {PGBOUNCER_PORT}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {users}\n"
            "pool_mode = transaction\n"
            f"default_pool_size = {self.server_pool}\n"
            "max_client_conn = 5000\n"
            # psycopg's and Django's startup options (jit=off) cannot follow a client
            # from server connection to server connection; set them on the database.
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"idle_transaction_timeout = {self.idle_transaction_seconds:g}\n"
            f"logfile = {log}\n"
            "user = postgres\n"
        )
        for path in (self.workdir, users, config, log):
            shutil.chown(path, user="postgres")
        self.pgbouncer = subprocess.Popen(
            ["pgbouncer", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._wait_listening()

    def _wait_listening(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.pgbouncer is not None
            if self.pgbouncer.poll() is not None:
                raise HostsUnavailable(f"pgbouncer exited: {self.pgbouncer_log()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.hosts[0].outer_ip, PGBOUNCER_PORT), timeout=1),
            ):
                return
            if time.monotonic() > deadline:
                raise HostsUnavailable(f"pgbouncer did not listen: {self.pgbouncer_log()}")
            time.sleep(0.05)

    def pgbouncer_log(self) -> str:
        if self.workdir is None:
            return ""
        with contextlib.suppress(OSError):
            return (self.workdir / "pgbouncer.log").read_text(errors="replace")
        return ""

    def pgbouncer_pids(self) -> list[int]:
        return [self.pgbouncer.pid] if self.pgbouncer and self.pgbouncer.poll() is None else []

    # ---- tearing down -------------------------------------------------------------------

    def close(self) -> None:
        """Stop PgBouncer, remove every namespace (and with it its veth pair and rules) and
        cgroup. The hosts' own processes must be gone first (their callers stop them)."""
        if self.pgbouncer is not None:
            if self.pgbouncer.poll() is None:
                self.pgbouncer.terminate()
                try:
                    self.pgbouncer.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.pgbouncer.kill()
                    self.pgbouncer.wait(timeout=10)
            self.pgbouncer = None
        _remove(self.tag)
        self.hosts = []
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None


def _via(url: str, host: str, port: int) -> str:
    """The same database URL, reached at host:port."""
    parts = urlsplit(url)
    user = f"{parts.username}@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=f"{user}{host}:{port}"))


def _namespaces() -> list[str]:
    return sorted(p.name for p in NETNS_DIR.glob(f"{PREFIX}*")) if NETNS_DIR.exists() else []


def _cgroups() -> list[Path]:
    root = CGROUP_V2 if cgroup_version() == 2 else CGROUP_V1_CPU
    return sorted(root.glob(f"{PREFIX}*"))


def _remove(tag: str) -> None:
    """Every namespace and cgroup named after `tag` (a process's `ar-so-<pid>`)."""
    for netns in _namespaces():
        if netns.startswith(f"{tag}-"):
            _quiet("ip", "netns", "del", netns)
    for cgroup in _cgroups():
        if cgroup.name.startswith(f"{tag}-"):
            for pid in _pids_in(cgroup):  # a host process its caller failed to stop
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _rmdir_when_empty(cgroup)


def _pids_in(cgroup: Path) -> list[int]:
    with contextlib.suppress(OSError):
        return [int(pid) for pid in (cgroup / "cgroup.procs").read_text().split()]
    return []


def _rmdir_when_empty(cgroup: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            cgroup.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # killed processes take a moment to leave
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def leftovers() -> list[str]:
    """The names of every simulated host's namespace and cgroup that exist now."""
    return [*_namespaces(), *(cgroup.name for cgroup in _cgroups())]


def sweep_stale() -> list[str]:
    """Remove what a process that died without closing its hosts left (its id is gone)."""
    owners: set[str] = set()
    for name in leftovers():
        pid = name[len(PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            owners.add(f"{PREFIX}{pid}")
    for tag in owners:
        _remove(tag)
    return sorted(owners)


def host_env(host: Host, **extra: str) -> dict[str, str]:
    """What a cluster on `host` needs: the database through PgBouncer, nothing prepared,
    and no LISTEN (it would land on whichever server connection PgBouncer lent; the
    workers claim on their heartbeat and q2's pusher polls instead)."""
    return {
        "DATABASE_URL": host.database_url,
        "AGENTRUNS_PREPARE": "0",
        "AGENTRUNS_WAKE_LISTEN": "0",
        **extra,
    }


def faketime_env(offset: str) -> dict[str, str]:
    """Run a process with its clock moved by `offset` ("+5m", "-5m"): Debian's libfaketime,
    preloaded (the multi-threaded variant; the workers run hundreds of threads)."""
    for lib in _faketime_libraries():
        if lib.exists():
            # The monotonic clock moves by the same offset (harmless: only its differences
            # count). Kept true (FAKETIME_DONT_FAKE_MONOTONIC=1), libfaketime 0.9.10 turns
            # Python's sleeps (clock_nanosleep to an absolute monotonic time) into EINVAL.
            return {"LD_PRELOAD": str(lib), "FAKETIME": offset}
    raise HostsUnavailable("libfaketime is not installed (make host-tools)")


def _faketime_libraries() -> Sequence[Path]:
    return sorted(Path("/usr/lib").glob("*/faketime/libfaketimeMT.so.1"))
