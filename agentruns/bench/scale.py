"""PERF-8: a year of history (1 million runs, 10 million events by default) and the pages
that must stay fast on it, requested through the real views with Django's test client
(URL routing, middleware, sessions, permissions, templates, serialisation, streaming).

Each probe is a request a person or a client makes; it is timed `samples` times, with a
different run or day each time where the request names one, and its slowest statements
are shown with `EXPLAIN (ANALYZE, BUFFERS)`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agentruns.bench.seed import History, seed_history
from agentruns.models import Configuration, Provider, Run

PREFIX = "bench-scale"
CONFIGURATIONS = 10
USERS = 100  # the member owns one run in USERS
TARGET_MS = 100.0
EXPORT_LINES = 1000


@dataclass
class Fixture:
    approver: Any
    member: Any
    newest_run: int
    oldest_run: int
    member_runs: list[int]


def _users() -> tuple[Any, Any, list[int]]:
    users = get_user_model().objects
    approver, _ = users.update_or_create(
        username=f"{PREFIX}-approver", defaults={"is_staff": True, "is_superuser": True}
    )
    member, _ = users.get_or_create(username=f"{PREFIX}-member")
    others = [users.get_or_create(username=f"{PREFIX}-user-{i}")[0].pk for i in range(1, USERS)]
    return approver, member, [member.pk, *others]


def _configurations() -> list[int]:
    provider, _ = Provider.objects.get_or_create(
        slug=PREFIX, defaults={"name": "Bench (scale)", "kind": "scripted", "trust_zone": "local"}
    )
    return [
        Configuration.objects.get_or_create(
            slug=f"{PREFIX}-{i}", defaults={"name": f"Scale {i}", "provider": provider}
        )[0].pk
        for i in range(CONFIGURATIONS)
    ]


def seeded_runs() -> int:
    return Run.objects.filter(configuration__slug__startswith=f"{PREFIX}-").count()


def prepare(history: History, say: Callable[[str], None]) -> Fixture:
    """Seed `history` unless this database already holds it; then the probes' fixture."""
    approver, member, users = _users()
    configurations = _configurations()
    have = seeded_runs()
    if have >= history.runs:
        say(f"reusing the {have:,} seeded runs already here (a larger --runs seeds more)")
    else:
        started = time.monotonic()
        counts = seed_history(
            History(
                runs=history.runs - have,
                events_per_run=history.events_per_run,
                active_tickets=history.active_tickets,
            ),
            configuration_ids=configurations,
            user_ids=users,
            rebuild_indexes=True,
        )
        vacuum()
        rows = ", ".join(f"{n:,} {table}" for table, n in counts.items())
        say(f"seeded {rows} in {time.monotonic() - started:.0f} s (vacuumed)")
    mine = Run.objects.filter(created_by=member).order_by("-id").values_list("id", flat=True)
    seeded = Run.objects.filter(configuration__slug__startswith=f"{PREFIX}-")
    return Fixture(
        approver=approver,
        member=member,
        newest_run=seeded.order_by("-id").values_list("id", flat=True).first() or 0,
        oldest_run=seeded.order_by("id").values_list("id", flat=True).first() or 0,
        member_runs=list(mine[:1000]),
    )


def vacuum() -> None:
    """What autovacuum would have done to a year of history: visibility maps set (so
    counts and index-only scans skip the heap) and statistics current."""
    tables = ["thread", "run", "event", "checkpoint", "toolinvocation", "ticket", "gateaudit"]
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE) " + ", ".join(f"agentruns_{t}" for t in tables))


@dataclass
class Probe:
    name: str
    who: str  # "approver" or "member"
    path: Callable[[random.Random], str]
    stream_lines: int | None = None  # read only this many lines of a streamed body
    # A whole download grows with what it holds (about 20 µs a record): shown, not judged.
    judged: bool = True


def probes(fixture: Fixture) -> list[Probe]:
    def some_run(rnd: random.Random) -> int:
        return rnd.randint(fixture.oldest_run, fixture.newest_run)

    def some_day(rnd: random.Random) -> str:
        return (timezone.now() - timedelta(days=rnd.randint(1, 364))).date().isoformat()

    def own_run(rnd: random.Random) -> int:
        return rnd.choice(fixture.member_runs) if fixture.member_runs else 0

    def day_export(fmt: str) -> Callable[[random.Random], str]:
        return lambda rnd: f"/api/audit/?format={fmt}&from={(d := some_day(rnd))}&to={d}"

    return [
        Probe("run list page, approver (all runs)", "approver", lambda r: "/runs/"),
        Probe("run list page, failed runs", "approver", lambda r: "/runs/?status=failed"),
        Probe(
            "run list page, one configuration",
            "approver",
            lambda r: f"/runs/?configuration={PREFIX}-{r.randrange(CONFIGURATIONS)}",
        ),
        Probe("run list page, page 200", "approver", lambda r: "/runs/?page=200"),
        Probe("run list page, member (own runs)", "member", lambda r: "/runs/"),
        Probe("API run list, approver", "approver", lambda r: "/api/runs/"),
        Probe("API run list, awaiting", "approver", lambda r: "/api/runs/?status=awaiting"),
        Probe("API run list, member", "member", lambda r: "/api/runs/"),
        Probe("run page (its events)", "approver", lambda r: f"/runs/{some_run(r)}/"),
        Probe("API run events", "approver", lambda r: f"/api/runs/{some_run(r)}/events/"),
        Probe("API run events, member", "member", lambda r: f"/api/runs/{own_run(r)}/events/"),
        Probe("inbox page", "approver", lambda r: "/inbox/"),
        Probe("inbox cards (polled)", "approver", lambda r: "/inbox/cards/"),
        Probe("inbox count (every page's badge)", "approver", lambda r: "/inbox/count/"),
        Probe("API tickets", "approver", lambda r: "/api/tickets/"),
        Probe(
            f"audit export, all, first {EXPORT_LINES} lines",
            "approver",
            lambda r: "/api/audit/?format=jsonl",
            stream_lines=EXPORT_LINES,
        ),
        Probe(
            f"audit export, one day, first {EXPORT_LINES} lines",
            "approver",
            day_export("jsonl"),
            stream_lines=EXPORT_LINES,
        ),
        Probe(
            f"audit export, one day csv, first {EXPORT_LINES} lines",
            "approver",
            day_export("csv"),
            stream_lines=EXPORT_LINES,
        ),
        Probe(
            "audit export, one day, whole download", "approver", day_export("jsonl"), judged=False
        ),
    ]


def _read(response: Any, lines: int | None) -> int:
    """Bytes of the body, reading a streamed one as a client would (only `lines` lines)."""
    if not getattr(response, "streaming", False):
        return len(response.content)
    size = seen = 0
    for chunk in response.streaming_content:
        size += len(chunk)
        seen += chunk.count(b"\n") if isinstance(chunk, bytes) else 1
        if lines is not None and seen >= lines:
            break
    response.close()
    return size


def measure(probe: Probe, client: Client, samples: int, seed: int) -> dict[str, Any]:
    rnd = random.Random(seed)
    client.get(probe.path(rnd))  # warm: sessions, caches, prepared plans
    times, sizes, statuses = [], [], set()
    for _ in range(samples):
        path = probe.path(rnd)
        started = time.perf_counter()
        response = client.get(path)
        sizes.append(_read(response, probe.stream_lines))
        times.append(1000 * (time.perf_counter() - started))
        statuses.add(response.status_code)
    times.sort()
    with CaptureQueriesContext(connection) as queries:
        _read(client.get(probe.path(rnd)), probe.stream_lines)
    # The statements that read the application's tables (not the session's), slowest first.
    selects = [
        q for q in queries.captured_queries if explainable(q["sql"]) and "agentruns_" in q["sql"]
    ]
    slowest = sorted(selects, key=lambda q: -float(q["time"]))
    return {
        "probe": probe.name,
        "who": probe.who,
        "judged": probe.judged,
        "example": probe.path(random.Random(seed)),
        "samples": samples,
        "p50_ms": round(times[len(times) // 2], 1),
        "p95_ms": round(times[min(len(times) - 1, int(0.95 * len(times)))], 1),
        "max_ms": round(times[-1], 1),
        "statuses": sorted(statuses),
        "bytes": round(sum(sizes) / len(sizes)),
        "statements": len(queries.captured_queries),
        "slowest": [
            {"ms": round(1000 * float(q["time"]), 2), "sql": q["sql"]} for q in slowest[:2]
        ],
    }


def explainable(sql: str) -> bool:
    """Only a SELECT is explained: ANALYZE executes what it explains."""
    return sql.lstrip().upper().startswith("SELECT") and "txid_current" not in sql


def explain(sql: str) -> str:
    """The plan of a statement as it ran (the log holds it with its parameters inlined)."""
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql)
        return "\n".join(row[0] for row in cursor.fetchall())


def clients(fixture: Fixture) -> dict[str, Client]:
    out = {}
    for who in ("approver", "member"):
        # A failed request is a status to report (a database restart on a shared machine),
        # not the end of the benchmark.
        client = Client(raise_request_exception=False)
        client.force_login(getattr(fixture, who))
        out[who] = client
    return out
