"""UI-7: the API docs name every operation in words and their example requests are valid:
each example in the schema, posted as Swagger's "Try it out" would, on the demo data of a
fresh database, is accepted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from agentruns.demo import load_demo_data, load_demo_schedules, load_demo_users, tracker_listing
from agentruns.models import McpServer, Run, Schedule, Ticket, Webhook
from agentruns.runtime.loop import execute_run
from agentruns.services.mcp import mcp_listing_digest, mcp_server_review
from tests.support.runs import park, submit

METHODS = {"get", "post", "put", "patch", "delete"}
PLACEHOLDER = "<from GET /api/tickets/>"


@pytest.fixture
def schema(client) -> dict[str, Any]:
    return client.get("/api/schema/", HTTP_ACCEPT="application/json").json()


def operations(schema: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            if method in METHODS:
                yield path, method, operation


@pytest.mark.django_db
def test_ui7_every_operation_has_a_summary_in_words(schema):
    nameless = [
        (method, path, operation.get("summary"))
        for path, method, operation in operations(schema)
        if not operation.get("summary")
        or "_" in operation["summary"]
        or operation["summary"] == operation["operationId"]
    ]
    assert not nameless
    assert len(list(operations(schema))) >= 45  # every endpoint of §11 and §15, not a few


@pytest.mark.django_db
def test_ui7_every_request_body_has_an_example(schema):
    bodies = [
        (method, path)
        for path, method, operation in operations(schema)
        if "requestBody" in operation
        and method != "get"  # the readout's GET takes its forced set in the query
        and not operation["requestBody"]["content"]["application/json"].get("examples")
    ]
    assert not bodies


def examples(schema: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    found = []
    for path, method, operation in operations(schema):
        if method == "get":
            continue
        content = operation.get("requestBody", {}).get("content", {}).get("application/json", {})
        for name, shown in (content.get("examples") or {}).items():
            found.append((method, path, shown.get("summary") or name, shown["value"]))
    return found


def the_admin() -> Any:
    return get_user_model().objects.get(username="admin")


def a_webhook() -> str:
    hook = Webhook.objects.first() or Webhook.objects.create(
        url="https://hooks.example.com/x", secret="s" * 20, created_by=the_admin()
    )
    return str(hook.pk)


def a_ticket(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The run whose ticket takes this answer, with the body's placeholders filled in from
    the ticket, as a caller copies them from GET /api/tickets/."""
    configuration = "question-demo" if body["result"]["kind"] == "input" else "approval-demo"
    run = park(the_admin(), configuration)
    ticket = Ticket.objects.get(run=run, status=Ticket.Status.ACTIVE)
    filled = {
        key: (ticket.identity.as_dict()[key] if value == PLACEHOLDER or key == "run" else value)
        for key, value in body.items()
    }
    if filled["result"].get("arguments_digest") == PLACEHOLDER:  # SEC-16: target's digest
        filled["result"] = {**filled["result"], "arguments_digest": ticket.pending_digest}
    return str(run.pk), filled


def a_listing(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The demo tracker's listing under review, as a refresh leaves it, and its digest."""
    server = McpServer.objects.get(slug="tracker")
    mcp_server_review(server=server, listed=tracker_listing())
    return "tracker", {**body, "listing": mcp_listing_digest(server)}


def a_deferred_thread() -> str:
    run = submit(the_admin(), "deferred-demo", "Find the notes tools")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return str(run.thread_id)


def a_finished_run() -> str:
    run = submit(the_admin(), "multi-tool-demo", "Write the standup note")
    assert execute_run(run.pk) == Run.Status.COMPLETED
    return str(run.pk)


# What fills each path's parameter: the demo object the example's summary names.
PATH_VALUES: dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]] = {
    "/api/providers/{slug}/": lambda body: (body.get("slug", "openai"), body),
    "/api/configurations/{slug}/": lambda body: ("helpdesk", body),
    "/api/configurations/{slug}/readout/": lambda body: ("helpdesk", body),
    "/api/snippets/{id}/": lambda body: ("6", body),
    "/api/skills/{id}/": lambda body: ("1", body),
    "/api/webhooks/{id}/": lambda body: (a_webhook(), body),
    "/api/runs/{id}/resume/": a_ticket,
    "/api/runs/{id}/fork/": lambda body: (a_finished_run(), body),
    "/api/threads/{id}/mode/": lambda body: (a_deferred_thread(), body),
    "/api/mcp-servers/{slug}/": lambda body: ("wiki", body),
    "/api/mcp-servers/{slug}/accept/": a_listing,
    "/api/mcp-servers/{slug}/tools/{tool}/": lambda body: ("tracker", body),
    "/api/schedules/{id}/": lambda body: (a_schedule(), body),
    "/api/triggers/{slug}/": lambda body: ("demo-alert", body),
}


# What fills a body's run ids where the path names none (GOV-4: ended runs to replay).
BODY_VALUES: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "/api/replays/": lambda body: {**body, "runs": [int(a_finished_run())]},
}


def a_schedule() -> str:
    return str(Schedule.objects.get(name="morning-report").pk)


@pytest.mark.django_db(transaction=True, reset_sequences=True)
def test_ui7_each_documented_example_is_accepted_on_the_demo_data(client):
    load_demo_data()
    load_demo_users()
    load_demo_schedules()
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    found = examples(schema)
    assert len(found) >= 20
    api = APIClient()
    api.force_authenticate(the_admin())
    refused = []
    for method, path, summary, body in found:
        if path.endswith("/fire/"):
            continue  # signed, not authenticated: tests/sched/test_triggers.py sends it
        url = path
        if path in BODY_VALUES:
            body = BODY_VALUES[path](body)
        if "{" in path:
            value, body = PATH_VALUES[path](body)
            url = path.replace("{slug}", value).replace("{id}", value)
            url = url.replace("{tool}", "customer_lookup")
        response = getattr(api, method)(url, body, format="json")
        if response.status_code not in (200, 201):
            refused.append((method, url, summary, response.status_code, response.content[:300]))
    assert not refused


@pytest.mark.django_db(transaction=True, reset_sequences=True)
def test_ui7_the_first_run_example_completes_offline(client):
    load_demo_data()
    load_demo_users()
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    shown = schema["paths"]["/api/runs/"]["post"]["requestBody"]["content"]["application/json"]
    first = next(iter(shown["examples"].values()))["value"]
    assert first == {"configuration": "multi-tool-demo", "input": "Write the standup note"}
    api = APIClient()
    api.force_authenticate(the_admin())
    run = api.post("/api/runs/", first, format="json").json()
    assert execute_run(run["id"]) == Run.Status.COMPLETED
