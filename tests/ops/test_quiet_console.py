"""UI-7: a quiet console. Against a real `runserver` under the production settings, an
idle minute of the polls that open pages make (the same number of requests, without
waiting the minute) writes no line at all; a page load still writes its one line; an
ordinary 404 or 403 writes one line and no traceback; a decision on a ticket writes who
decided what, never the arguments or the note. And a cluster says once that it started,
with its workers, threads and database."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.test import Client
from rest_framework.authtoken.models import Token

from agentruns.demo import load_demo_data
from agentruns.models import Run, Ticket
from agentruns.runtime.loop import execute_run
from playground.polls import OneLine4xx, QuietPolls
from tests.conftest import grant
from tests.support.clusters import running_clusters
from tests.support.runs import bench_user, park, submit
from tests.support.servers import Server, production_server

# Polls per minute of one open tab: htmx's `every 2s`, `every 5s` and `every 1s`.
PER_MINUTE = {"inbox cards": 30, "runs table": 30, "nav count": 12, "run page": 60}


@pytest.fixture
def server(transactional_db, tmp_path: Path):
    with production_server(tmp_path) as running:
        yield running


def session(user) -> httpx.Client:
    client = Client()
    client.force_login(user)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    return httpx.Client(cookies={settings.SESSION_COOKIE_NAME: cookie}, timeout=30)


def attr(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*hx-get="([^"]+)"', page)
    assert found, element_id
    return found.group(1).replace("&amp;", "&")


class Console:
    """The lines the server wrote since the last look."""

    def __init__(self, server: Server) -> None:
        self.server, self.seen = server, len(server.log())

    def new_lines(self) -> list[str]:
        text = self.server.log()
        fresh, self.seen = text[self.seen :], len(text)
        return [line for line in fresh.splitlines() if line.strip()]


@pytest.mark.slow
def test_ui7_an_idle_minute_of_polling_writes_nothing_and_errors_write_one_line(
    server, staff, member
):
    load_demo_data()
    approver = grant(staff, "approve_run")
    waiting = park(member, "approval-demo")
    done = submit(member, "multi-tool-demo", "Write the standup note")
    execute_run(done.pk)
    web, hx = session(approver), {"HX-Request": "true"}
    base = server.url
    inbox = web.get(f"{base}/inbox/").text
    runs = web.get(f"{base}/runs/").text
    run_page = web.get(f"{base}/runs/{waiting.pk}/").text
    finished = web.get(f"{base}/runs/{done.pk}/").text
    console = Console(server)

    polls = {
        "inbox cards": attr(inbox, "inbox-cards"),
        "runs table": attr(runs, "runs-live"),
        "nav count": attr(runs, "nav-inbox-count"),
        "run page": attr(run_page, "run-live"),
    }
    statuses = set()
    for name, url in polls.items():
        for _ in range(PER_MINUTE[name]):
            statuses.add(web.get(base + url, headers=hx).status_code)
    assert "/live/" not in finished  # an ended run's page does not poll at all
    assert statuses == {200, 204}  # the unchanged lists and count are 204, the run page 200
    assert console.new_lines() == []

    assert web.get(f"{base}/runs/").status_code == 200
    assert len(console.new_lines()) == 1  # a page someone opens keeps its line

    assert web.get(f"{base}/favicon.ico").status_code == 200
    console.new_lines()
    assert web.get(f"{base}/no-such-page/").status_code == 404
    assert_one_line(console.new_lines(), "WARNING django.request Not Found: /no-such-page/")
    assert session(member).get(f"{base}/playground/").status_code == 403
    assert_one_line(
        console.new_lines(), "WARNING django.request Forbidden (Permission denied): /playground/"
    )

    ticket = Ticket.objects.get(run=waiting, status=Ticket.Status.ACTIVE)
    token = Token.objects.create(user=approver).key
    answer = {
        **ticket.identity.as_dict(),
        "result": {"kind": "permission", "decision": "allow", "note": "Private reason"},
    }
    response = httpx.post(
        f"{base}/api/runs/{waiting.pk}/resume/",
        json=answer,
        headers={"Authorization": f"Token {token}"},
    )
    assert response.status_code == 200, response.text
    lines = console.new_lines()
    decided = [line for line in lines if "agentruns.services.resume" in line]
    assert len(decided) == 1, lines
    assert decided[0].endswith(
        f"ticket {ticket.correlation_id} of run {waiting.pk} (notes.write): allow by staff"
    )
    assert "Private reason" not in "\n".join(lines) and "Cache was stale" not in "\n".join(lines)


def assert_one_line(lines: list[str], expected: str) -> None:
    assert len(lines) == 1, lines
    assert lines[0].endswith(expected), lines
    assert "Traceback" not in lines[0]


@pytest.fixture
def clusters(transactional_db, tmp_path: Path):
    yield from running_clusters(tmp_path)


@pytest.mark.slow
def test_ui7_a_cluster_says_once_that_it_started_with_workers_threads_and_database(clusters):
    load_demo_data()
    cluster = clusters.start("announce")
    run = submit(bench_user(), "multi-tool-demo")
    clusters.wait(
        lambda: Run.objects.get(pk=run.pk).status == Run.Status.COMPLETED,
        timeout=60,
        what="a run to complete on the cluster",
    )
    started = [line for line in cluster.log().splitlines() if "started:" in line]
    assert len(started) == 1, cluster.log()[-3000:]
    assert re.search(
        r"INFO agentruns\.cluster cluster \S+ started: 2 workers x 16 executor threads "
        r"\(database pool 4 each\), database PostgreSQL \S+ on 127\.0\.0\.1:5432, lease 3s$",
        started[0],
    ), started[0]


def record(name: str, msg: str, *args: object, **extra: object) -> logging.LogRecord:
    made = logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)
    made.__dict__.update(extra)
    return made


def test_ui7_the_request_log_keeps_pages_and_drops_good_polls_and_repeated_errors():
    quiet = QuietPolls()
    line = '"%s" %s %s'
    assert not quiet.filter(
        record("django.server", line, "GET /inbox/cards/?signature=a HTTP/1.1", "204", "0")
    )
    assert not quiet.filter(record("django.server", line, "GET /runs/7/live/ HTTP/1.1", "286", "9"))
    assert not quiet.filter(record("django.server", line, "GET /inbox/count/ HTTP/1.1", "200", "9"))
    assert quiet.filter(record("django.server", line, "GET /runs/ HTTP/1.1", "200", "900"))
    assert quiet.filter(record("django.server", line, "POST /inbox/x/resume/ HTTP/1.1", "302", "0"))
    # Django has logged these itself (django.request), with the traceback for a 5xx.
    assert not quiet.filter(record("django.server", line, "GET /runs/live/ HTTP/1.1", "500", "0"))
    assert not quiet.filter(record("django.server", line, "GET /nope/ HTTP/1.1", "404", "0"))
    assert quiet.filter(
        record("django.server", "You're accessing the development server over HTTPS")
    )


def test_ui7_a_4xx_is_one_line_and_a_5xx_keeps_its_traceback():
    try:
        raise PermissionError("expected")
    except PermissionError:
        exc_info = sys.exc_info()
    forbidden = record("django.request", "Forbidden", status_code=403, exc_info=exc_info)
    broken = record("django.request", "Internal Server Error", status_code=500, exc_info=exc_info)
    assert OneLine4xx().filter(forbidden) and forbidden.exc_info is None
    assert OneLine4xx().filter(broken) and broken.exc_info is exc_info
