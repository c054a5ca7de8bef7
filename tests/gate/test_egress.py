"""CG-12..CG-14: every way out has a ceiling. What a model writes carries the class of what
it read; a send's sources are everything whose text it carries (earlier runs of the thread,
every run a fork copied); traces, webhooks and mails carry nothing above their ceiling.
Each case drives the loop on PostgreSQL against the fake provider over the wire, and the
external fake never receives the marker text."""

from __future__ import annotations

from typing import Any

import pytest

from agentruns.models import Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_openai_configuration, make_snippet, scripted_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

MARKER = "MERGER-ZX81"


@pytest.fixture
def fake():
    with FakeProvider() as provider:
        yield provider


def fork(client: Any, run_id: int, **body: Any) -> Any:
    return client.post(f"/api/runs/{run_id}/fork/", body, format="json")


def secret_thread(staff: Any) -> tuple[Run, Run]:
    """Run 1 forces a secret snippet on a local configuration and its reply repeats it;
    run 2 is a follow-up in the same thread that forces nothing."""
    plans = make_snippet("merger-plans", data_class="secret", text=f"plans {MARKER}")
    scripted_configuration("vault", [{"text": f"the plans say {MARKER}"}, {"text": "noted"}])
    first = submit(staff, "vault", "what do the plans say?", forced_snippets=[plans.pk])
    assert execute_run(first.pk) == Run.Status.COMPLETED
    second = submit(staff, "vault", "thanks", thread=first.thread_id)
    assert execute_run(second.pk) == Run.Status.COMPLETED
    return first, second


def test_cg13_fork1_a_fork_of_a_follow_up_is_gated_by_the_earlier_runs_it_copies(fake, staff, api):
    """Break 1: forking run 2 (which forced nothing) copies run 1's reply too."""
    _, second = secret_thread(staff)
    make_openai_configuration("abroad", fake, zone="external_global")
    fake.queue({"text": "sent abroad"})

    response = fork(api, second.pk, configuration="abroad", input="summarise")
    assert response.status_code == 201, response.content
    assert execute_run(response.json()["id"]) == Run.Status.FAILED

    failure = Run.objects.get(pk=response.json()["id"]).failure
    assert failure["code"] == "context_refused"
    assert failure["data_class"] == "secret" and failure["zone"] == "external_global"
    assert fake.requests == []
    assert MARKER not in str(failure)
