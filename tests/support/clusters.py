"""Helpers for the cluster tests: real `manage.py qcluster` processes against the current
test database, scripted runs, and checks of the log that hold whatever the workers did.

Tests using these need `@pytest.mark.django_db(transaction=True)`: the clusters are other
processes, so the rows a test creates must be committed for them to see.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from django.conf import settings

from agentruns import events as ev
from agentruns.cluster.process import ClusterProcess, start_cluster, wait_for
from agentruns.models import Configuration, Event, Run
from agentruns.store.connection import database_url
from tests.support.catalog import scripted_configuration

T = TypeVar("T")

LEASE_SECONDS = 3
Q_TIMEOUT = 6

__all__ = [
    "LEASE_SECONDS",
    "Clusters",
    "assert_effects_once",
    "assert_log_consistent",
    "configuration",
    "effect_lines",
    "events",
    "running_clusters",
    "wait_for",
    "wait_statuses",
]


class Clusters:
    """Starts clusters for one test and makes sure none outlives it."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.effect_file = tmp_path / "effects.txt"
        self.started: list[ClusterProcess] = []

    def env(self, **overrides: Any) -> dict[str, str]:
        env = {
            "DATABASE_URL": database_url(),
            "SECRET_KEY": settings.SECRET_KEY,
            "AGENTRUNS_EXTRA_TOOL_MODULES": "tests.support.tools",
            "AGENTRUNS_TEST_EFFECT_FILE": str(self.effect_file),
            "AGENTRUNS_LEASE_SECONDS": str(LEASE_SECONDS),
            "AGENTRUNS_Q_TIMEOUT": str(Q_TIMEOUT),
            "AGENTRUNS_Q_WORKERS": "2",
            "AGENTRUNS_Q_POLL": "0.02",
            "AGENTRUNS_EXECUTOR_THREADS": "16",
            "AGENTRUNS_DB_POOL_MAX": "4",
            "AGENTRUNS_SHUTDOWN_SECONDS": "10",
            "AGENTRUNS_LOG_LEVEL": "INFO",
            "AGENTRUNS_FAULTS": "",
            # SEC-11: the suite's provider key variables (tests/conftest.py).
            "AGENTRUNS_PROVIDER_KEY_VARS": ",".join(settings.AGENTRUNS_PROVIDER_KEY_VARS),
        }
        env.update({key: str(value) for key, value in overrides.items()})
        return env

    def start(
        self,
        name: str,
        *,
        command: str = "qcluster",
        prefix: Sequence[str] = (),
        **overrides: Any,
    ) -> ClusterProcess:
        """`manage.py qcluster`, or another long-running command (`outbox`); `prefix` runs
        it elsewhere (a simulated host, agentruns.bench.hosts)."""
        log = self.tmp_path / f"cluster-{name}-{len(self.started)}.log"
        cluster = start_cluster(name, log, self.env(**overrides), command=command, prefix=prefix)
        self.started.append(cluster)
        return cluster

    def close(self) -> None:
        for cluster in self.started:
            for pid in cluster.pids():  # a paused process would not die of SIGKILL later
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            cluster.kill()

    def logs(self) -> str:
        return "\n".join(f"--- {c.name}\n{c.log()[-4000:]}" for c in self.started)

    def wait(self, condition: Callable[[], T], *, timeout: float, what: str) -> T:
        """`wait_for`, failing with the clusters' logs."""
        try:
            return wait_for(condition, timeout=timeout, what=what)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\n{self.logs()}") from exc


def running_clusters(tmp_path: Path) -> Iterator[Clusters]:
    """The body of a test module's `clusters` fixture, which must depend on
    `transactional_db` so every cluster is dead before the database is flushed."""
    started = Clusters(tmp_path)
    try:
        yield started
    finally:
        started.close()


def configuration(
    slug: str,
    turns: Sequence[dict[str, Any]],
    *,
    latency_ms: int = 0,
    allowed: Sequence[str] = ("test", "clock.now"),
    exempt: Sequence[str] = (),
) -> Configuration:
    """A scripted configuration as the cluster tests drive it: quick tools, no approvals
    unless a test grants one, the provider's latency in the script."""
    return scripted_configuration(
        slug,
        turns,
        latency_ms=latency_ms,
        allowed_tools=list(allowed),
        approval_exempt_tools=list(exempt),
        max_tool_calls=20,
    )


def wait_statuses(
    runs: Sequence[Run], statuses: dict[int, str] | str, *, timeout: float, clusters: Clusters
) -> None:
    want = {run.pk: statuses for run in runs} if isinstance(statuses, str) else statuses

    def reached() -> bool:
        have = dict(Run.objects.filter(pk__in=want).values_list("pk", "status"))
        return all(have.get(pk) == status for pk, status in want.items())

    try:
        wait_for(reached, timeout=timeout, what="runs to reach their states", every=0.1)
    except TimeoutError as exc:
        have = dict(Run.objects.filter(pk__in=want).values_list("pk", "status"))
        wrong = {
            pk: (have.get(pk), status) for pk, status in want.items() if have.get(pk) != status
        }
        raise AssertionError(
            f"runs not in their states (have, want): {wrong}\n{clusters.logs()}"
        ) from exc


def events(run: Run) -> list[tuple[int, str, dict[str, Any]]]:
    return list(
        Event.objects.filter(thread_id=run.thread_id)
        .order_by("sequence")
        .values_list("sequence", "type", "payload")
    )


def effect_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def assert_log_consistent(runs: Sequence[Run]) -> None:
    """What a run executed by two workers at once would break: sequences are unique and
    contiguous per thread; every proposed call has exactly one result (after its turn);
    no result without its call; one terminal event at most, last."""
    for run in runs:
        log = events(run)
        sequences = [seq for seq, _, _ in log]
        assert sequences == list(range(1, len(log) + 1)), (run.pk, sequences)
        proposed: list[str] = []
        results: Counter[str] = Counter()
        for _, kind, payload in log:
            if kind == ev.ASSISTANT:
                proposed += [call["id"] for call in payload.get("tool_calls") or []]
            elif kind == ev.TOOL_RESULT:
                assert payload["call_id"] in proposed, (run.pk, payload)
                results[payload["call_id"]] += 1
        assert all(n == 1 for n in results.values()), (run.pk, results)
        terminal = [i for i, (_, kind, _) in enumerate(log) if kind in ev.TERMINAL_EVENTS]
        assert len(terminal) <= 1 and (not terminal or terminal[0] == len(log) - 1), (run.pk, log)
        run.refresh_from_db()
        if run.is_terminal:
            assert set(results) == set(proposed), (run.pk, proposed, results)


def assert_effects_once(runs: Sequence[Run], lines: list[str], writes_per_run: int) -> None:
    """TOOL-4 across workers: no external effect happened twice; each write whose result
    is `ok` happened exactly once, an `uncertain` one at most once."""
    assert len(lines) == len(set(lines)), Counter(lines).most_common(3)
    for run in runs:
        results = [p for _, kind, p in events(run) if kind == ev.TOOL_RESULT]
        writes = [r for r in results if r["tool"] == "test.external_write"]
        assert len(writes) == writes_per_run, (run.pk, writes)
        for result in writes:
            mine = [line for line in lines if line.startswith(f"{run.pk}:{result['call_id']}:")]
            if result["status"] == ev.OK:
                assert len(mine) == 1, (run.pk, result, mine)
            else:
                assert result["status"] == ev.UNCERTAIN and len(mine) <= 1, (run.pk, result)
