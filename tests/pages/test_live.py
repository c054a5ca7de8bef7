"""UI-2, UI-7: the lists the home page calls live are live, quietly. The runs table polls
its own endpoint and is answered 204 while the page it shows is unchanged; the inbox's
answer brings the navigation's count with it, so the two never disagree (HITL-9)."""

from __future__ import annotations

import re

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Run
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit
from playground.polls import is_poll
from tests.conftest import grant
from tests.support.runs import park

pytestmark = pytest.mark.django_db

HX = {"HX-Request": "true"}


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def start(user, configuration: str = "multi-tool-demo") -> Run:
    return run_submit(user=user, submission=Submission(configuration, "go"))[0]


def poll_url(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*hx-get="([^"]+)"', page)
    assert found, element_id
    return found.group(1).replace("&amp;", "&")


def test_ui7_the_runs_table_answers_204_until_a_run_starts_or_changes(client, staff):
    client.force_login(staff)
    first = start(staff)
    url = poll_url(client.get("/runs/").content.decode(), "runs-live")
    assert url.startswith("/runs/live/?signature=")
    assert client.get(url, headers=HX).status_code == 204
    second = start(staff)
    fresh = client.get(url, headers=HX)
    assert fresh.status_code == 200
    body = fresh.content.decode()
    assert "<html" not in body and f'data-run="{second.pk}"' in body
    url = poll_url(body, "runs-live")  # the swapped-in table polls with what it shows
    assert client.get(url, headers=HX).status_code == 204
    assert execute_run(first.pk) == Run.Status.COMPLETED
    changed = client.get(url, headers=HX)
    assert changed.status_code == 200 and "completed" in changed.content.decode()


def test_ui7_the_runs_poll_keeps_the_filters_and_shows_only_what_the_viewer_may_see(
    client, member, staff
):
    mine, theirs = start(member), start(staff)
    client.force_login(member)
    url = poll_url(client.get("/runs/?status=queued").content.decode(), "runs-live")
    assert "status=queued" in url
    body = client.get(url.replace("signature=", "signature=stale"), headers=HX).content.decode()
    assert f'data-run="{mine.pk}"' in body and f'data-run="{theirs.pk}"' not in body
    execute_run(mine.pk)
    body = client.get(url.replace("signature=", "signature=stale"), headers=HX).content.decode()
    assert f'data-run="{mine.pk}"' not in body  # completed: no longer "queued"


def test_hitl9_ui7_the_inbox_answer_carries_the_navigation_count(client, staff, member):
    approver = grant(staff, "approve_run")
    park(member, "approval-demo")
    client.force_login(approver)
    page = client.get("/inbox/").content.decode()
    badge = re.search(r'<span class="badge" id="nav-inbox-count"[^>]*>', page)
    assert badge and "hx-get" not in badge.group(0)  # it comes with the cards instead
    cards = poll_url(page, "inbox-cards")
    assert client.get(cards, headers=HX).status_code == 204
    park(member, "approval-demo")
    body = client.get(cards, headers=HX).content.decode()
    assert body.count("data-ticket=") == 2
    oob = re.search(
        r'<span class="badge" id="nav-inbox-count"[^>]*hx-swap-oob="true"[^>]*>2<', body
    )
    assert oob, body[-400:]


def test_hitl9_elsewhere_the_count_polls_itself_quietly(client, staff, member):
    approver = grant(staff, "approve_run")
    client.force_login(approver)
    url = poll_url(client.get("/runs/").content.decode(), "nav-inbox-count")
    assert url == "/inbox/count/?signature=0"
    assert client.get(url, headers=HX).status_code == 204
    park(member, "approval-demo")
    fresh = client.get(url, headers=HX).content.decode()
    assert poll_url(fresh, "nav-inbox-count") == "/inbox/count/?signature=1"
    assert fresh.rstrip().endswith(">1</span>")


def test_ui7_every_poll_on_every_page_goes_to_a_poll_endpoint(client, staff):
    grant(staff, "approve_run")
    client.force_login(staff)
    run = park(staff, "approval-demo")
    ticket = run.tickets.get()
    pages = ["/", "/runs/", "/inbox/", f"/runs/{run.pk}/", f"/playground/runs/{run.pk}/"]
    pages.append(f"/inbox/{ticket.correlation_id}/")
    for url in pages:
        page = client.get(url).content.decode()
        polls = re.findall(r'hx-get="([^"]+)"[^>]*hx-trigger="every', page)
        assert polls, url
        assert all(is_poll(found.replace("&amp;", "&")) for found in polls), (url, polls)
    assert not is_poll("/runs/") and not is_poll(f"/runs/{run.pk}/")
