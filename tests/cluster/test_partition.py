"""PERF-12, CLU-2, CLU-3, TOOL-4: a cluster host cut off from PostgreSQL for 30 s mid-batch.

Two hosts, each a network namespace reaching the test database only through PgBouncer in
transaction mode (agentruns/bench/hosts.py). A firewall rule in one host's namespace drops
every packet it sends to PgBouncer, as a broken link would: its connections hang, with no
reset to tell it. PgBouncer drops a client that sits in a transaction (its
`idle_transaction_timeout`), which rolls back and frees the row locks it held. The other
host's sweeper reclaims the cut host's runs once their leases lapse on the database clock;
when the link comes back the cut host learns it lost them and writes nothing."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentruns.bench.hosts import SimulatedHosts, host_env
from agentruns.models import Run
from tests.support.clusters import (
    Clusters,
    assert_effects_once,
    assert_log_consistent,
    configuration,
    effect_lines,
    running_clusters,
    wait_statuses,
)
from tests.support.hosts import held_by, simulated_hosts
from tests.support.runs import submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNS = 16
TURNS = 6
LATENCY_MS = 1000
PARTITION_SECONDS = 30
# Eight runs at once a host (2 workers x 4 threads): both hosts hold some.
HOST = {"AGENTRUNS_EXECUTOR_THREADS": "4"}


@pytest.fixture
def hosts() -> Iterator[SimulatedHosts]:
    yield from simulated_hosts(2, server_pool=8, idle_transaction_seconds=2)


@pytest.fixture
def clusters(transactional_db: None, hosts: SimulatedHosts, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def write_turn(n: int) -> dict:
    return {"tool_calls": [{"name": "test.external_write", "arguments": {"value": f"w{n}"}}]}


def test_perf12_a_host_cut_off_for_30_s_loses_its_runs_and_writes_nothing_back(clusters, hosts):
    """PERF-12, CLU-2, CLU-3: 16 runs of six write turns on two hosts behind PgBouncer; one
    host is cut off from the database for 30 s while it holds leases. The other reclaims
    every run the cut host held (one attempt each) while the link is still down. Healed,
    the cut host finishes the batch and four more runs alone once the other host has
    stopped, and of the runs it lost it writes nothing (its workers stuck on the dead link
    are restarted by q2, or fenced by their epoch): every run completes, each log is
    consistent, each write happened exactly once, and no other run spent an attempt."""
    cut_host, other_host = hosts.hosts
    config = configuration(
        "partition",
        [*(write_turn(n) for n in range(TURNS)), {"text": "done"}],
        latency_ms=LATENCY_MS,
        exempt=["test.external_write"],
    )
    cut = clusters.start("cut", prefix=cut_host.prefix(), **host_env(cut_host, **HOST))
    other = clusters.start("other", prefix=other_host.prefix(), **host_env(other_host, **HOST))
    runs = submit_batch(config, RUNS)
    ids = [run.pk for run in runs]
    clusters.wait(lambda: len(held_by(cut, ids)) >= 3, timeout=120, what="the host to hold runs")

    cut_host.partition()
    healed_at = time.monotonic() + PARTITION_SECONDS
    try:
        taken = held_by(cut, ids)

        def reclaimed() -> bool:
            # A run may have ended in the instant between reading its owner and the cut.
            left = Run.objects.filter(pk__in=taken, attempts=0).exclude(status__in=Run.TERMINAL)
            return not left.exists()

        clusters.wait(reclaimed, timeout=PARTITION_SECONDS, what="the cut host's runs reclaimed")
        assert cut.alive()
        # The partition's length is the fault itself, not a wait for anything.
        time.sleep(max(0.0, healed_at - time.monotonic()))
    finally:
        cut_host.heal()

    # Back, the host must finish the work alone: the other stops gracefully (its runs go
    # back to the queue, no attempt spent) and more runs come in.
    # A run the other host cannot hand back within its shutdown wait is reclaimed too.
    stopped = held_by(other, ids)
    other.stop(timeout=60)
    later = submit_batch(config, RUNS // 4)
    later_ids = [run.pk for run in later]
    runs += later
    wait_statuses(runs, "completed", timeout=240, clusters=clusters)

    assert cut.alive()
    assert_log_consistent(runs)
    assert_effects_once(runs, effect_lines(clusters.effect_file), TURNS)
    spent = set(Run.objects.filter(pk__in=ids, attempts__gt=0).values_list("pk", flat=True))
    assert spent & taken and spent <= taken | stopped, (spent, taken, clusters.logs())
    assert not Run.objects.filter(pk__in=ids, attempts__gt=1).exists(), clusters.logs()
    assert not Run.objects.filter(pk__in=later_ids, attempts__gt=0).exists(), clusters.logs()
