"""UI-2, UI-3, SEC-2: the runs pages, without JavaScript (Django's test client)."""

from __future__ import annotations

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Run
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit
from tests.conftest import grant
from tests.support.runs import park

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def completed(user, configuration="multi-tool-demo", text="Standup"):
    run, _ = run_submit(user=user, submission=Submission(configuration, text))
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return run


def test_sec2_a_plain_user_lists_and_opens_only_their_own_runs(client, member, staff):
    mine = completed(member, text="mine")
    theirs = completed(staff, text="theirs")
    client.force_login(member)
    page = client.get("/runs/").content.decode()
    assert f'data-run="{mine.pk}"' in page and f'data-run="{theirs.pk}"' not in page
    assert client.get(f"/runs/{mine.pk}/").status_code == 200
    assert client.get(f"/runs/{theirs.pk}/").status_code == 404


def test_an_approver_sees_every_run(client, member, staff):
    theirs = completed(member)
    client.force_login(grant(staff, "approve_run"))
    assert f'data-run="{theirs.pk}"' in client.get("/runs/").content.decode()


def test_runs_filter_by_status_and_configuration_newest_first(client, staff):
    done = [completed(staff, text=f"n{i}") for i in range(2)]
    parked = park(staff, "approval-demo")
    client.force_login(staff)
    page = client.get("/runs/").content.decode()
    positions = [page.index(f'data-run="{r.pk}"') for r in (parked, done[1], done[0])]
    assert positions == sorted(positions)
    awaiting = client.get("/runs/?status=awaiting").content.decode()
    assert f'data-run="{parked.pk}"' in awaiting and f'data-run="{done[0].pk}"' not in awaiting
    by_config = client.get("/runs/?configuration=multi-tool-demo").content.decode()
    assert f'data-run="{parked.pk}"' not in by_config and f'data-run="{done[1].pk}"' in by_config
    assert client.get("/runs/?status=bogus&page=x").status_code == 200


def test_runs_are_paginated(client, staff):
    for i in range(26):
        run_submit(user=staff, submission=Submission("helpdesk", f"q{i}"))
    client.force_login(staff)
    first = client.get("/runs/").content.decode()
    assert first.count("data-run=") == 25 and "Page 1 of 2" in first
    assert client.get("/runs/?page=2").content.decode().count("data-run=") == 1


def test_ui3_the_run_page_shows_status_reply_events_by_api_type_and_checkpoints(client, staff):
    run = completed(staff)
    client.force_login(staff)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-status="completed"' in page
    assert "Saved the standup note." in page
    found = [chunk.split('"', 1)[0] for chunk in page.split('data-event="')[1:]]
    assert found == [
        "message.user",
        "message.assistant",
        "tool.result",
        "tool.result",
        "message.assistant",
        "tool.result",
        "message.assistant",
        "run.completed",
    ]
    assert "checkpoint: terminal" in page and "<details>" in page
    assert "Where the time went" in page and "Waiting for people" in page
    assert "Context readout" in page and "style-guide" in page
    # Ended: no polling trigger left in the page.
    assert 'hx-trigger="every 1s"' not in page


def test_ui2_a_live_run_polls_and_stops_with_286_when_it_ends(client, staff):
    run, _ = run_submit(user=staff, submission=Submission("multi-tool-demo", "go"))
    client.force_login(staff)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'hx-trigger="every 1s"' in page and 'data-status="queued"' in page
    assert f'hx-get="/runs/{run.pk}/live/"' in page  # the poll's own endpoint
    poll = client.get(f"/runs/{run.pk}/live/", headers={"HX-Request": "true"})
    assert poll.status_code == 200 and b"<html" not in poll.content
    execute_run(run.pk)
    poll = client.get(f"/runs/{run.pk}/live/", headers={"HX-Request": "true"})
    assert poll.status_code == 286
    assert b'data-status="completed"' in poll.content and b"every 1s" not in poll.content


def test_a_waiting_run_links_its_inbox_card(client, staff):
    run = park(staff, "approval-demo")
    ticket = run.tickets.get()
    client.force_login(staff)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f"/inbox/{ticket.correlation_id}/" in page


def test_the_admins_run_and_ticket_pages_link_the_run_page(client, django_user_model):
    root = django_user_model.objects.create_superuser("root", password="pw")
    run = park(root, "approval-demo")
    ticket = run.tickets.get()
    client.force_login(root)
    for url in (
        f"/admin/agentruns/run/{run.pk}/change/",
        f"/admin/agentruns/ticket/{ticket.pk}/change/",
    ):
        page = client.get(url).content.decode()
        assert "View on site" in page, url
        link = page.split('class="viewsitelink"')[0].rsplit('href="', 1)[1].split('"')[0]
        assert link == f"/runs/{run.pk}/"


def test_any_signed_in_user_starts_a_plain_run_from_the_runs_page(client, member):
    client.force_login(member)
    response = client.post("/runs/start/", {"configuration": "question-demo", "task": "Triage"})
    run = Run.objects.get()
    assert response["Location"] == f"/runs/{run.pk}/" and run.created_by == member
    assert run.forced_snippet_ids == []
    page = client.get(response["Location"]).content.decode()
    assert f"Run #{run.pk} started." in page


def test_a_bad_start_says_why_and_starts_nothing(client, member):
    client.force_login(member)
    response = client.post("/runs/start/", {"configuration": "nope", "task": "x"}, follow=True)
    assert "Unknown configuration" in response.content.decode()
    assert not Run.objects.exists()
    assert client.get("/runs/start/").status_code == 405
