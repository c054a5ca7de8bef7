"""SEC-2, SEC-10, HITL-9: one table of every API endpoint x every kind of caller, with object-level
visibility. A run belongs to `initiator`; everyone else sees it only through a permission
(view_all_runs to look, approve_run to look and act).

PAGE_ROWS hold the pages (a session, as a browser has; anonymous visitors are sent to sign
in: 302) and the metrics endpoint."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from rest_framework.test import APIClient

from agentruns.models import Note
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_skill, make_snippet
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

ROLES = [
    "anonymous",
    "plain",
    "staff",
    "staff+view_all_runs",
    "staff+approve_run",
    "approver",
    "initiator",
    "staff+use_playground",
]
# Status per role, in ROLES order. 401: not signed in; 403: signed in, not allowed;
# 404: the object is invisible to the caller (SEC-2: no existence oracle).
# SEC-15: the catalog takes the model permissions the admin takes, which none of these
# roles hold (is_staff alone grants nothing; tests/sec/test_catalog_authority.py grants them).
CATALOG = (401, 403, 403, 403, 403, 403, 403, 403)
STAFF_ONLY = (401, 403, 200, 200, 200, 403, 403, 200)
NOBODY_HERE = (401, 403, 403, 403, 403, 403, 403, 403)  # needs view_audit, which none holds
SEE_RUN = (401, 404, 404, 200, 200, 200, 200, 404)
ACT_ON_RUN = (401, 404, 404, 403, 200, 200, 200, 404)
ANY_USER = (401, 200, 200, 200, 200, 200, 200, 200)
RESUME = (401, 404, 404, 403, 409, 409, 403, 404)  # no ticket: who may answer: not_awaiting
# SEC-10: only the initiator steers (and finds the run queued: conflict); seeing is not steering.
SWITCH_MODE = (401, 404, 404, 403, 403, 403, 409, 404)
# Pages: anonymous visitors are sent to sign in.
PAGE_ANY_USER = (302, 200, 200, 200, 200, 200, 200, 200)
PAGE_PLAYGROUND = (302, 403, 403, 403, 403, 403, 403, 200)  # FS-5
PAGE_SEE_RUN = (302, 404, 404, 200, 200, 200, 200, 404)

SUBMIT = {"configuration": "c", "input": "hello"}
RESUME_BODY = {
    "correlation_id": "00000000-0000-0000-0000-000000000000",
    "run": 0,
    "snapshot_id": "x",
    "catalog_fingerprint": "x",
    "call_id": "",
    "result": {"kind": "permission", "decision": "allow"},
}

# (method, path, body, statuses)
API_ROWS: list[tuple[str, str, Any, tuple[int, ...]]] = [
    ("get", "/api/providers/", None, CATALOG),
    ("post", "/api/providers/", {"slug": "new", "name": "New", "kind": "scripted"}, CATALOG),
    ("get", "/api/providers/{provider}/", None, CATALOG),
    ("get", "/api/configurations/", None, CATALOG),
    ("get", "/api/configurations/c/", None, CATALOG),
    ("get", "/api/configurations/c/readout/", None, CATALOG),
    ("get", "/api/snippets/", None, CATALOG),
    ("post", "/api/snippets/", {"slug": "n", "name": "N", "text": "t"}, CATALOG),
    ("get", "/api/skills/", None, CATALOG),
    ("post", "/api/skills/", {"slug": "n", "name": "N", "instructions": "i"}, CATALOG),
    ("get", "/api/runs/", None, ANY_USER),
    ("post", "/api/runs/", SUBMIT, (401, 201, 201, 201, 201, 201, 201, 201)),
    ("get", "/api/runs/{run}/", None, SEE_RUN),
    ("get", "/api/runs/{run}/events/", None, SEE_RUN),
    ("post", "/api/runs/{run}/cancel/", None, ACT_ON_RUN),
    ("post", "/api/runs/{run}/resume/", RESUME_BODY, RESUME),
    ("get", "/api/threads/{thread}/", None, SEE_RUN),
    ("post", "/api/threads/{thread}/mode/", {"mode": "default"}, SWITCH_MODE),
    ("get", "/api/tickets/", None, ANY_USER),
    ("get", "/api/notes/", None, ANY_USER),
    ("get", "/api/notes/{note}/", None, SEE_RUN),
    ("get", "/api/webhooks/", None, CATALOG),
    ("get", "/api/usage/", None, STAFF_ONLY),
    ("get", "/api/audit/", None, NOBODY_HERE),
    ("post", "/api/runs/", {**SUBMIT, "dry_run": True}, (401, 403, 403, 403, 403, 403, 403, 200)),
]
PAGE_ROWS: list[tuple[str, str, Any, tuple[int, ...]]] = [
    ("get", "/", None, PAGE_ANY_USER),
    ("get", "/playground/", None, PAGE_PLAYGROUND),
    ("get", "/playground/readout/?configuration=c", None, PAGE_PLAYGROUND),
    ("get", "/playground/runs/{run}/", None, (302, 403, 403, 403, 403, 403, 403, 404)),
    ("get", "/runs/", None, PAGE_ANY_USER),
    ("get", "/runs/{run}/", None, PAGE_SEE_RUN),
    ("get", "/inbox/", None, PAGE_ANY_USER),
    ("get", "/inbox/count/", None, PAGE_ANY_USER),
    ("get", "/inbox/{ticket}/", None, (302, 404, 404, 404, 404, 404, 404, 404)),
    ("get", "/metrics", None, (401, 403, 200, 200, 200, 403, 403, 200)),
]
CASES = [
    pytest.param(method, path, body, role, expected, id=f"{method} {path} as {role}")
    for method, path, body, statuses in [*API_ROWS, *PAGE_ROWS]
    for role, expected in zip(ROLES, statuses, strict=True)
]


def caller(role: str, django_user_model, initiator) -> APIClient:
    client = APIClient()
    if role == "anonymous":
        return client
    if role == "initiator":
        client.force_authenticate(initiator)
        client.force_login(initiator)  # the pages' session
        return client
    staff = role.startswith("staff")
    user = django_user_model.objects.create_user(f"u-{role}", is_staff=staff)
    if "+" in role:
        grant(user, role.split("+")[1])
    if role == "approver":
        grant(user, "approve_run")
    client.force_authenticate(user)
    client.force_login(user)
    return client


@pytest.mark.parametrize(("method", "path", "body", "role", "expected"), CASES)
def test_who_may_do_what(method, path, body, role, expected, django_user_model):
    initiator = django_user_model.objects.create_user("initiator")
    make_configuration("c")
    make_snippet("s")
    make_skill("k")
    run = submit(initiator, "c", "the initiator's run")
    note = Note.objects.create(title="n", body="b", run=run)
    provider = run.configuration.provider.slug
    url = path.format(
        run=run.pk, thread=run.thread_id, note=note.pk, provider=provider, ticket=uuid.uuid4()
    )
    client = caller(role, django_user_model, initiator)

    response = getattr(client, method)(url, body, format="json")

    assert response.status_code == expected, response.content


@pytest.mark.parametrize(
    ("role", "runs", "notes"),
    [
        ("plain", 0, 0),
        ("staff", 0, 0),
        ("staff+view_all_runs", 1, 1),
        ("staff+approve_run", 1, 1),
        ("approver", 1, 1),
        ("initiator", 1, 1),
    ],
)
def test_lists_show_only_visible_objects(role, runs, notes, django_user_model):
    """SEC-2 on the list endpoints: a row is listed iff its run is visible."""
    initiator = django_user_model.objects.create_user("initiator")
    make_configuration("c")
    run = submit(initiator, "c", "the initiator's run")
    Note.objects.create(title="n", body="b", run=run)
    client = caller(role, django_user_model, initiator)
    assert client.get("/api/runs/").json()["count"] == runs
    assert client.get("/api/notes/").json()["count"] == notes
