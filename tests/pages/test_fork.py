"""FORK-2: "Fork from here" on the run page and the inspector, without JavaScript (Django's
test client): a plain POST with CSRF through the fork service; the fork's page links back;
the runs list shows forks under their original."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from agentruns import events as ev
from agentruns.demo import load_demo_data
from agentruns.models import Event, Run
from agentruns.runtime.loop import execute_run
from tests.support.runs import submit

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def demo():
    load_demo_data()


def completed(user, text="Write the standup note") -> Run:
    run = submit(user, "multi-tool-demo", text)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return run


def turns(run: Run) -> list[int]:
    rows = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")
    return list(rows.values_list("sequence", flat=True))


def csrf_client(user) -> tuple[Client, str]:
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    page = client.get("/runs/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token
    return client, token.group(1)


@pytest.mark.parametrize("page", ["/runs/{id}/", "/playground/runs/{id}/"])
def test_fork2_each_model_turn_offers_fork_from_here(client, staff, page):
    run = completed(staff)
    client.force_login(staff)
    html = client.get(page.format(id=run.pk)).content.decode()
    assert html.count("<summary>Fork from here</summary>") == len(turns(run)) >= 2
    for at in turns(run):
        assert f'aria-label="Fork from event #{at}"' in html
        assert f'name="at" value="{at}"' in html
    assert 'name="configuration"' in html and 'name="input"' in html


def test_fork2_a_posted_fork_opens_the_fork_which_links_back(staff):
    run = completed(staff)
    client, token = csrf_client(staff)
    at = turns(run)[0]
    response = client.post(
        f"/runs/{run.pk}/fork/",
        {"csrfmiddlewaretoken": token, "at": at, "configuration": "multi-tool-demo", "input": ""},
    )
    fork = Run.objects.get(forked_from=run)
    assert response.status_code == 302 and response.url == f"/runs/{fork.pk}/"
    assert fork.forked_at == at and fork.thread_id != run.thread_id
    page = client.get(response.url).content.decode()
    assert f'Forked from <a href="/runs/{run.pk}/">run #{run.pk}</a> at event #{at}' in page
    original = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<a href="/runs/{fork.pk}/">#{fork.pk}</a>' in original


def test_fork2_from_the_inspector_opens_the_fork_in_the_inspector(staff):
    run = completed(staff)
    client, token = csrf_client(staff)
    response = client.post(
        f"/runs/{run.pk}/fork/",
        {"csrfmiddlewaretoken": token, "at": turns(run)[0], "view": "inspector", "input": "Why?"},
    )
    fork = Run.objects.get(forked_from=run)
    assert response.url == f"/playground/runs/{fork.pk}/"
    assert fork.input == "Why?"
    page = client.get(response.url).content.decode()
    assert f'href="/playground/runs/{run.pk}/">run #{run.pk}</a>' in page


def test_fork2_a_forged_post_changes_nothing(staff):
    run = completed(staff)
    client, _ = csrf_client(staff)
    response = client.post(f"/runs/{run.pk}/fork/", {"at": turns(run)[0]})
    assert response.status_code == 403
    assert not Run.objects.filter(forked_from=run).exists()


def test_fork2_a_refused_fork_says_why_on_the_original(staff):
    run = completed(staff)
    client, token = csrf_client(staff)
    final = turns(run)[-1]
    response = client.post(
        f"/runs/{run.pk}/fork/", {"csrfmiddlewaretoken": token, "at": final}, follow=True
    )
    assert response.redirect_chain[-1][0] == f"/runs/{run.pk}/"
    assert "needs a new prompt" in response.content.decode()
    assert not Run.objects.filter(forked_from=run).exists()


def test_fork2_someone_who_cannot_see_the_run_cannot_fork_it(staff, member):
    run = completed(staff)
    client, token = csrf_client(member)
    response = client.post(f"/runs/{run.pk}/fork/", {"csrfmiddlewaretoken": token}, follow=True)
    assert "does not exist, or you may not see it" in response.content.decode()
    assert not Run.objects.filter(forked_from=run).exists()


def test_fork2_the_runs_list_shows_forks_under_their_original(client, staff):
    first = completed(staff, "first")
    second = completed(staff, "second")
    fork = submit_fork(staff, first)
    fork_of_fork = submit_fork(staff, fork)
    client.force_login(staff)
    page = client.get("/runs/").content.decode()
    order = [page.index(f'data-run="{r.pk}"') for r in (second, first, fork, fork_of_fork)]
    assert order == sorted(order)  # newest original first, each fork right under its own
    assert f'data-fork-of="{first.pk}"' in page and f'data-fork-of="{fork.pk}"' in page
    assert f"fork of #{first.pk} at event #{fork.forked_at}" in page


def submit_fork(user, run: Run) -> Run:
    from agentruns.services.fork import ForkRequest, run_fork

    return run_fork(user=user, run_id=run.pk, request=ForkRequest(input="again"))
