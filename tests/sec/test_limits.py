"""SEC-14: limits hold on every path. The API's submission and resume rates guard the pages
and the admin that do the same, in one counter per person kept where every web process
sees it (the database cache, or Redis); list endpoints are paginated; an Idempotency-Key
is bounded and validated; a password-reset link is built on AGENTRUNS_SITE_URL."""

from __future__ import annotations

import subprocess
import sys
import uuid
from html import unescape
from pathlib import Path

import pytest
from django.core import mail
from django.core.cache import cache
from django.test import Client
from rest_framework.settings import api_settings

from agentruns.models import Configuration, Run, Ticket
from agentruns.words import WORDS
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.crash import child_env
from tests.support.hitl import active_ticket, identity, write_call
from tests.support.ops import client_for
from tests.support.runs import park

ROOT = Path(__file__).resolve().parents[2]
ASKING = [{"tool_calls": [write_call("Limits", "b", call_id="call_w")]}, {"text": "done"}]


@pytest.fixture
def rates(settings):
    """Sets the scopes' rates for one test, with fresh counters before and after."""

    def set_rates(**rates: str) -> None:
        settings.REST_FRAMEWORK = {
            **settings.REST_FRAMEWORK,
            "DEFAULT_THROTTLE_RATES": {"submit": "600/minute", "resume": "600/minute", **rates},
        }
        api_settings.reload()
        cache.clear()

    yield set_rates
    cache.clear()


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def page(response) -> str:
    return unescape(response.content.decode())


@pytest.mark.django_db
def test_sec14_ten_starts_in_a_row_at_two_a_minute_start_two_runs(rates, member):
    rates(submit="2/minute")
    scripted_configuration("lim", [{"text": "hi"}])
    client = signed_in(member)
    answers = [
        client.post("/runs/start/", {"configuration": "lim", "task": "go"}) for _ in range(10)
    ]
    assert [a["Location"].startswith("/runs/") and a["Location"] != "/runs/" for a in answers] == [
        True,
        True,
    ] + [False] * 8
    assert Run.objects.filter(created_by=member).count() == 2
    refused = client.post("/runs/start/", {"configuration": "lim", "task": "go"}, follow=True)
    assert WORDS["throttled"] in page(refused) and "Try again in" in page(refused)


@pytest.mark.django_db
def test_sec14_the_pages_and_the_api_count_in_one_counter(rates, member):
    rates(submit="2/minute")
    scripted_configuration("lim", [{"text": "hi"}])
    signed_in(member).post("/runs/start/", {"configuration": "lim", "task": "go"})
    api = client_for(member)
    assert api.post("/api/runs/", {"configuration": "lim", "input": "x"}).status_code == 201
    refused = api.post("/api/runs/", {"configuration": "lim", "input": "x"})
    assert refused.status_code == 429 and refused.json()["code"] == "throttled"
    assert "Retry-After" in refused.headers


@pytest.mark.django_db
def test_sec14_the_playground_run_and_the_admins_forced_run_are_throttled(rates, staff):
    rates(submit="1/minute")
    configuration = scripted_configuration("lim", [{"text": "hi"}])
    client = signed_in(staff)
    started = client.post("/playground/", {"configuration": "lim", "task": "go"})
    assert started.status_code == 302
    again = client.post("/playground/", {"configuration": "lim", "task": "go"})
    assert again.status_code == 400 and WORDS["throttled"] in page(again)
    forced = f"/admin/agentruns/configuration/{configuration.pk}/run/"
    refused = client.post(forced, {"task": "go"})
    assert refused.status_code == 200 and WORDS["throttled"] in page(refused)
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_sec14_inbox_decisions_and_answers_are_throttled(rates, member, django_user_model):
    rates(resume="1/minute")
    scripted_configuration("lim", ASKING)
    first, second = park(member, "lim"), park(member, "lim")
    approver = grant(django_user_model.objects.create_user("appr"), "approve_run")
    client = signed_in(approver)
    for run in (first, second):
        ticket = active_ticket(run.pk)
        data = {**identity(ticket), "kind": "permission", "decision": "allow"}
        response = client.post(f"/inbox/{ticket.correlation_id}/resume/", data, follow=True)
    assert WORDS["throttled"] in page(response)
    assert Ticket.objects.get(run=first).status == Ticket.Status.ANSWERED
    assert active_ticket(second.pk).status == Ticket.Status.ACTIVE


@pytest.mark.django_db
def test_sec14_the_admins_decide_and_cancel_are_throttled(rates, member, staff):
    rates(resume="1/minute")
    scripted_configuration("lim", ASKING)
    first, second = park(member, "lim"), park(member, "lim")
    operator = grant(staff, "approve_run", "view_ticket", "view_run")
    client = signed_in(operator)
    ticket = active_ticket(first.pk)
    data = {**identity(ticket), "kind": "permission", "decision": "allow"}
    client.post(f"/admin/agentruns/ticket/{ticket.pk}/decide/", data)
    assert Ticket.objects.get(pk=ticket.pk).status == Ticket.Status.ANSWERED
    refused = client.post(f"/admin/agentruns/run/{second.pk}/cancel/", follow=True)
    assert WORDS["throttled"] in page(refused)
    assert Run.objects.get(pk=second.pk).status == Run.Status.AWAITING


STARTER = """
import sys, django
django.setup()
from django.contrib.auth import get_user_model
from django.test import Client
client = Client()
client.force_login(get_user_model().objects.get(username=sys.argv[1]))
for _ in range(int(sys.argv[2])):
    answer = client.post("/runs/start/", {"configuration": "lim", "task": "go"})
    print(answer["Location"], flush=True)
"""


def start_in_child(username: str, times: int, env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", STARTER, username, str(times)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def redis_reachable() -> bool:
    try:
        import redis

        return bool(redis.Redis(host="127.0.0.1", port=6379, socket_timeout=1).ping())
    except Exception:
        return False


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("store", ["database", "redis"])
def test_sec14_two_processes_share_one_counter(store, member):
    """Two web processes (as two gunicorn workers are) see one counter: the second
    process's start is refused after the first used the rate."""
    if store == "redis" and not redis_reachable():
        pytest.skip("no Redis on 127.0.0.1:6379")
    Configuration.objects.filter(slug="lim").delete()
    scripted_configuration("lim", [{"text": "hi"}])
    extra = {"AGENTRUNS_THROTTLE_SUBMIT": "2/minute", "REDIS_URL": ""}
    if store == "redis":
        extra.update(
            REDIS_URL="redis://127.0.0.1:6379/0", AGENTRUNS_CACHE_PREFIX=f"t{uuid.uuid4().hex}"
        )
    env = child_env(extra=extra)
    first = start_in_child(member.username, 2, env)
    second = start_in_child(member.username, 1, env)
    assert all(location != "/runs/" for location in first), first
    assert second == ["/runs/"]
    assert Run.objects.filter(created_by=member).count() == 2


# --- Idempotency-Key --------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "key",
    ["k" * 201, "abc\x00def", "tab\there", "bell\x07", "line\nbreak", "é-non-ascii"],
    ids=["too-long", "nul", "tab", "bell", "newline", "non-ascii"],
)
def test_sec14_a_bad_idempotency_key_is_a_400_with_its_code(member, key):
    scripted_configuration("lim", [{"text": "hi"}])
    response = client_for(member).post(
        "/api/runs/", {"configuration": "lim", "input": "x"}, HTTP_IDEMPOTENCY_KEY=key
    )
    assert response.status_code == 400
    assert response.json()["code"] == "invalid_idempotency_key"
    assert not Run.objects.exists()


@pytest.mark.django_db
def test_sec14_a_key_at_its_bound_still_replays_the_original_run(member):
    scripted_configuration("lim", [{"text": "hi"}])
    api, key = client_for(member), "k" * 200
    body = {"configuration": "lim", "input": "x"}
    created = api.post("/api/runs/", body, HTTP_IDEMPOTENCY_KEY=key)
    replayed = api.post("/api/runs/", body, HTTP_IDEMPOTENCY_KEY=key)
    assert (created.status_code, replayed.status_code) == (201, 200)
    assert created.json()["id"] == replayed.json()["id"]


# --- lists ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_sec14_the_tickets_list_is_paginated(member, django_user_model):
    scripted_configuration("lim", ASKING)
    runs = [park(member, "lim") for _ in range(3)]
    approver = grant(django_user_model.objects.create_user("appr"), "approve_run")
    api = client_for(approver)
    first = api.get("/api/tickets/", {"limit": 2}).json()
    assert first["count"] == 3 and len(first["results"]) == 2 and first["next"]
    rest = api.get("/api/tickets/", {"limit": 2, "offset": 2}).json()
    seen = {row["run"] for row in first["results"] + rest["results"]}
    assert seen == {run.pk for run in runs} and "uncertain" in rest
    assert len(api.get("/api/tickets/").json()["results"]) == 3  # a default page


@pytest.mark.django_db
def test_sec14_usage_and_webhook_deliveries_are_paginated(staff):
    api = client_for(staff)
    usage = api.get("/api/usage/").json()
    assert {"count", "next", "previous", "results"} <= set(usage)
    hook = api.post(
        "/api/webhooks/",
        {"url": "https://93.184.215.14/", "events": [], "secret": "s" * 20},
        format="json",
    ).json()
    deliveries = api.get(f"/api/webhooks/{hook['id']}/deliveries/").json()
    assert {"count", "next", "previous", "results"} <= set(deliveries)


# --- mailed links -----------------------------------------------------------------------


@pytest.mark.django_db
def test_sec14_a_password_reset_with_a_forged_host_mails_a_link_on_the_site_url(
    settings, django_user_model
):
    settings.ALLOWED_HOSTS = ["*"]  # even where the Host header is not pinned
    settings.AGENTRUNS_SITE_URL = "https://agents.example.com"
    django_user_model.objects.create_user("ann", email="ann@example.com", password="pw")
    response = Client().post(
        "/accounts/password_reset/", {"email": "ann@example.com"}, HTTP_HOST="evil.example.net"
    )
    assert response.status_code == 302
    [message] = mail.outbox
    assert "https://agents.example.com/accounts/reset/" in message.body
    assert "evil.example.net" not in message.body + message.subject
