"""SEC-13, SEC-2 in the admin: the record is shown read-only (no Add, no Save, no Delete,
no delete action; a GET or POST of a delete URL is refused), and staff holding Django's
`view_*` permissions see in the admin only what the API lets them see."""

from __future__ import annotations

from html import unescape
from typing import Any

import pytest
from django.test import Client

from agentruns.models import (
    Checkpoint,
    Event,
    GateAudit,
    Note,
    Run,
    Thread,
    Ticket,
    ToolInvocation,
    Webhook,
    WebhookAttempt,
    WebhookDelivery,
)
from agentruns.runtime.loop import execute_run
from agentruns.services.resume import ResumeCommand, run_resume
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, write_call
from tests.support.runs import park

pytestmark = pytest.mark.django_db

TURNS: list[dict[str, Any]] = [
    {"tool_calls": [write_call("Minutes", "secret plans", call_id="call_w")]},
    {"text": "ok"},
]

RECORD = [
    Run,
    Thread,
    Event,
    Ticket,
    ToolInvocation,
    Checkpoint,
    Note,
    GateAudit,
    WebhookDelivery,
    WebhookAttempt,
]
VIEW_PERMS = [f"view_{model._meta.model_name}" for model in RECORD]


def completed_run(user, approver) -> Run:
    """A run with every kind of record: an answered ticket, an invocation, a checkpoint,
    a note, events, a webhook delivery with an attempt and a gate audit row."""
    if not Webhook.objects.exists():
        Webhook.objects.create(url="https://hooks.example.com/in", secret="s" * 16)
    if not Run.objects.exists():
        scripted_configuration("rec", TURNS)
    run = park(user, "rec")
    ticket = active_ticket(run.pk)
    command = ResumeCommand(identity=ticket.identity, answer="permission", decision="allow")
    run_resume(user=approver, run_id=run.pk, command=command)
    assert execute_run(run.pk) == Run.Status.COMPLETED
    delivery = WebhookDelivery.objects.filter(run_id=run.pk).first()
    assert delivery is not None
    WebhookAttempt.objects.create(delivery=delivery, status_code=500, latency_ms=3)
    GateAudit.objects.create(
        verdict="refused", enforcement="enforced", configuration="rec", run_id=run.pk
    )
    return run


def first(rows: Any) -> int:
    return rows.values_list("pk", flat=True)[0]


def rows_of(run: Run) -> dict[Any, int]:
    """One row of each record model belonging to `run`."""
    delivery = first(WebhookDelivery.objects.filter(run_id=run.pk))
    return {
        Run: run.pk,
        Thread: run.thread_id,
        Event: first(Event.objects.filter(run=run)),
        Ticket: first(Ticket.objects.filter(run=run)),
        ToolInvocation: first(ToolInvocation.objects.filter(run=run)),
        Checkpoint: first(Checkpoint.objects.filter(run=run)),
        Note: first(Note.objects.filter(run=run)),
        GateAudit: first(GateAudit.objects.filter(run_id=run.pk)),
        WebhookDelivery: delivery,
        WebhookAttempt: first(WebhookAttempt.objects.filter(delivery_id=delivery)),
    }


def url(model: Any, pk: int | None = None, view: str = "change") -> str:
    base = f"/admin/agentruns/{model._meta.model_name}/"
    return base if pk is None else f"{base}{pk}/{view}/"


@pytest.fixture
def superuser_client(django_user_model) -> Client:
    client = Client()
    client.force_login(django_user_model.objects.create_superuser("root", "r@example.com", "pw"))
    return client


@pytest.fixture
def record(member, django_user_model) -> Run:
    approver = grant(django_user_model.objects.create_user("appr"), "approve_run")
    return completed_run(member, approver)


@pytest.mark.parametrize("model", RECORD, ids=lambda m: m.__name__)
def test_sec13_the_admin_shows_the_record_without_add_save_or_delete(
    superuser_client, record, model
):
    pk = rows_of(record)[model]
    page = superuser_client.get(url(model, pk))
    assert page.status_code == 200
    html = unescape(page.content.decode())
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert url(model, pk, "delete") not in html
    assert superuser_client.post(url(model, pk), {}).status_code == 403
    assert superuser_client.get(url(model, pk, "delete")).status_code == 403
    assert superuser_client.post(url(model, pk, "delete"), {"post": "yes"}).status_code == 403
    assert superuser_client.get(f"{url(model)}add/").status_code == 403
    listing = superuser_client.get(url(model)).content.decode()
    assert 'value="delete_selected"' not in listing and f"{url(model)}add/" not in listing
    bulk = {"action": "delete_selected", "_selected_action": [pk], "post": "yes"}
    superuser_client.post(url(model), bulk)
    assert model.objects.filter(pk=pk).exists()


def test_sec13_an_answered_tickets_delete_confirmation_never_opens(superuser_client, record):
    ticket = Ticket.objects.get(run=record)
    assert ticket.status == Ticket.Status.ANSWERED
    response = superuser_client.get(url(Ticket, ticket.pk, "delete"))
    assert response.status_code == 403
    assert "Are you sure" not in response.content.decode()
    assert Ticket.objects.filter(pk=ticket.pk).exists()


def test_sec13_run_and_ticket_pages_still_offer_the_services_decide_and_cancel(
    superuser_client, member
):
    scripted_configuration("rec", TURNS)
    run = park(member, "rec")
    ticket = active_ticket(run.pk)
    assert ">Approve</button>" in superuser_client.get(url(Ticket, ticket.pk)).content.decode()
    assert ">Cancel run</button>" in superuser_client.get(url(Run, run.pk)).content.decode()
    superuser_client.post(f"/admin/agentruns/run/{run.pk}/cancel/")
    assert Run.objects.get(pk=run.pk).status == Run.Status.CANCELLED


@pytest.fixture
def viewer(django_user_model):
    """Staff with every Django view permission on the record, but not `view_all_runs`."""
    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    return grant(user, *VIEW_PERMS)


def test_sec2_view_permissions_in_the_admin_show_only_the_viewers_own_runs(
    viewer, record, django_user_model
):
    approver = django_user_model.objects.get(username="appr")
    own = completed_run(viewer, approver)
    client = Client()
    client.force_login(viewer)
    others, mine = rows_of(record), rows_of(own)
    for model in RECORD:
        listing = client.get(url(model))
        assert listing.status_code == 200, model
        html = listing.content.decode()
        assert url(model, others[model]) not in html, model
        assert url(model, mine[model]) in html, model
        hidden = client.get(url(model, others[model]))
        assert hidden.status_code == 302 and hidden["Location"] == "/admin/", model
        assert client.get(url(model, mine[model])).status_code == 200, model


def test_sec2_the_admin_decide_view_finds_no_ticket_of_an_invisible_run(viewer, member):
    scripted_configuration("rec", TURNS)
    run = park(member, "rec")
    ticket = active_ticket(run.pk)
    client = Client()
    client.force_login(grant(viewer, "change_ticket"))
    response = client.post(f"/admin/agentruns/ticket/{ticket.pk}/decide/", {"decision": "allow"})
    assert response.status_code == 404
    assert active_ticket(run.pk).pk == ticket.pk


def test_sec2_view_all_runs_shows_every_run_in_the_admin(viewer, record):
    client = Client()
    client.force_login(grant(viewer, "view_all_runs"))
    for model, pk in rows_of(record).items():
        assert client.get(url(model, pk)).status_code == 200, model
