"""Simulated machines for the fault tests between hosts (PERF-12): network namespaces
reaching the test database through PgBouncer, and wrong clocks (agentruns/bench/hosts.py).
`make test` installs the tools they need (`make host-tools`); they need root, as `make test`
runs here."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from agentruns.bench.hosts import PREFIX, SimulatedHosts, leftovers, missing_tools
from agentruns.cluster.process import ClusterProcess
from agentruns.models import Run
from agentruns.store.connection import database_url


def simulated_hosts(count: int, **options: Any) -> Iterator[SimulatedHosts]:
    """The body of a `hosts` fixture: every namespace, cgroup and PgBouncer is gone after
    the test, whatever happened (the clusters' fixture must depend on it, so the clusters
    die first)."""
    require_host_tools()
    with SimulatedHosts(database_url(), count, **options) as hosts:
        yield hosts


def require_host_tools() -> None:
    """Skip without root; fail without the tools, which `make test` installs."""
    if os.geteuid() != 0:
        pytest.skip("simulated hosts need root (make test runs as root here)")
    missing = missing_tools()
    if missing:
        pytest.fail(f"simulated hosts need {', '.join(missing)}: run `make host-tools`")


def left_behind() -> list[str]:
    """Namespaces and cgroups this process made and did not remove."""
    return [name for name in leftovers() if name.startswith(f"{PREFIX}{os.getpid()}-")]


def owner_pid(lease_owner: str) -> int | None:
    """The worker process in a lease's owner (`host:pid:claim`)."""
    parts = lease_owner.split(":")
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


def held_by(cluster: ClusterProcess, ids: list[int]) -> set[int]:
    """The runs among `ids` running under a lease one of the cluster's processes holds."""
    pids = set(cluster.pids())
    rows = Run.objects.filter(pk__in=ids, status=Run.Status.RUNNING)
    return {pk for pk, owner in rows.values_list("pk", "lease_owner") if owner_pid(owner) in pids}
