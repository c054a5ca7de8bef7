"""PERF-12, CLU-2, CLU-3: cluster hosts whose clocks are five minutes wrong, beside a correct
one (Debian's libfaketime preloaded into each, `make host-tools`).

Leases live on the database's clock: a claim sets `expiry = now() + lease` in PostgreSQL,
a renewal pushes it out the same way, a sweeper takes only what `now()` there says has
expired, and every write names the epoch it holds. A host judging leases by its own clock
would steal every lease early if it ran ahead (they would all look five minutes expired)
and keep its own five minutes too long if it ran behind; it would write after losing a
lease if it trusted its own reading over the epoch."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentruns.bench.hosts import faketime_env
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
from tests.support.hosts import held_by
from tests.support.runs import submit_batch

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RUNS = 24
TURNS = 4
LATENCY_MS = 1000  # a third of the lease: each turn outlives one renewal at least
AHEAD, BEHIND = "+5m", "-5m"
# Eight runs at once a host (2 workers x 4 threads): no host can take the whole batch.
HOST = {"AGENTRUNS_EXECUTOR_THREADS": "4"}


@pytest.fixture
def clusters(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    yield from running_clusters(tmp_path)


def write_turn(n: int) -> dict:
    return {"tool_calls": [{"name": "test.external_write", "arguments": {"value": f"w{n}"}}]}


def skewed_clusters(clusters: Clusters) -> dict[str, object]:
    try:
        ahead, behind = faketime_env(AHEAD), faketime_env(BEHIND)
    except RuntimeError as missing:
        pytest.fail(f"{missing}")
    return {
        "ahead": clusters.start("ahead", **ahead, **HOST),
        "behind": clusters.start("behind", **behind, **HOST),
        "true": clusters.start("true", **HOST),
    }


def batch(clusters: Clusters, slug: str) -> list[Run]:
    config = configuration(
        slug,
        [*(write_turn(n) for n in range(TURNS)), {"text": "done"}],
        latency_ms=LATENCY_MS,
        exempt=["test.external_write"],
    )
    return submit_batch(config, RUNS)


def test_perf12_hosts_five_minutes_ahead_and_behind_steal_no_lease(clusters):
    """PERF-12, CLU-2: 24 runs of four write turns on three hosts, one five minutes ahead,
    one five minutes behind, one right. Each host holds leases (all three take part), no
    run is ever reclaimed from a live host (no attempt spent: nothing stolen early), every
    run completes with a consistent log, and every write happened exactly once."""
    hosts = skewed_clusters(clusters)
    runs = batch(clusters, "skew-steal")
    ids = [run.pk for run in runs]
    seen: set[str] = set()

    def everyone_took_part() -> bool:
        seen.update(name for name, cluster in hosts.items() if held_by(cluster, ids))
        return seen == set(hosts)

    clusters.wait(everyone_took_part, timeout=120, what="every host to hold a lease")
    wait_statuses(runs, "completed", timeout=180, clusters=clusters)

    assert_log_consistent(runs)
    assert_effects_once(runs, effect_lines(clusters.effect_file), TURNS)
    attempts = list(Run.objects.filter(pk__in=ids).values_list("attempts", flat=True))
    assert attempts == [0] * RUNS, clusters.logs()


def test_perf12_skewed_hosts_keep_no_lease_late_and_write_nothing_once_fenced(clusters):
    """PERF-12, CLU-2, CLU-3: the host five minutes ahead dies (SIGKILL, its leases last
    written by its renewals) and the one five minutes behind freezes (SIGSTOP, a paused
    VM) while both hold leases. The correct host reclaims every one of their runs within
    a minute, far inside the five minutes either clock would grant. Thawed, the host
    behind learns it lost its leases and writes nothing: every run completes once, each
    log consistent, each write exactly once, and only the reclaimed runs spent an attempt."""
    hosts = skewed_clusters(clusters)
    runs = batch(clusters, "skew-late")
    ids = [run.pk for run in runs]
    ahead, behind = hosts["ahead"], hosts["behind"]
    clusters.wait(
        lambda: held_by(ahead, ids) and held_by(behind, ids),
        timeout=120,
        what="both skewed hosts to hold leases",
    )
    # Both stop before their leases are read, so neither claims a run after the reading;
    # the host ahead is then killed where it stands.
    os.killpg(behind.pid, signal.SIGSTOP)
    os.killpg(ahead.pid, signal.SIGSTOP)
    frozen = held_by(behind, ids)
    killed = held_by(ahead, ids)
    ahead.kill()
    assert frozen and killed
    taken = frozen | killed

    def reclaimed_or_ended() -> bool:
        # A run may have ended in the instant between reading its owner and the signal.
        unreclaimed = Run.objects.filter(pk__in=taken, attempts=0).exclude(status__in=Run.TERMINAL)
        return not unreclaimed.exists()

    clusters.wait(
        reclaimed_or_ended,
        timeout=60,
        what="the correct host to reclaim the skewed hosts' runs",
    )
    os.killpg(behind.pid, signal.SIGCONT)
    clusters.wait(
        lambda: "leases lost" in behind.log() or "stopped without writing" in behind.log(),
        timeout=60,
        what="the thawed host to find its leases lost",
    )
    wait_statuses(runs, "completed", timeout=180, clusters=clusters)

    assert behind.alive()
    assert_log_consistent(runs)
    assert_effects_once(runs, effect_lines(clusters.effect_file), TURNS)
    reclaimed = set(Run.objects.filter(pk__in=ids, attempts__gt=0).values_list("pk", flat=True))
    assert reclaimed and reclaimed <= taken, (reclaimed, taken, clusters.logs())
