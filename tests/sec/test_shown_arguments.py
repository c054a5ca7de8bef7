"""SEC-16: an allow approves what its giver was shown. The API's ticket shows the arguments
now proposed and their digest; once they were edited, an allow on any path must carry the
current digest, else 409 `arguments_changed` and nothing changes."""

from __future__ import annotations

import pytest

from agentruns.models import Note, Run, TicketApproval
from agentruns.runtime.loop import execute_run
from agentruns.tools.registry import digest
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import active_ticket, allow, client_for, picture, resume, write_call
from tests.support.runs import park

pytestmark = pytest.mark.django_db

TURNS = [{"tool_calls": [write_call("pay 10 EUR to alice", call_id="call_w")]}, {"text": "ok"}]


@pytest.fixture
def approvers(django_user_model):
    return [
        grant(django_user_model.objects.create_user(name), "approve_run") for name in ("ada", "bob")
    ]


def test_the_documented_allow_of_arguments_edited_after_they_were_shown_is_refused(
    approvers, django_user_model
):
    """The review's case: ada reads the ticket (10 EUR to alice), bob edits it to 10000 EUR
    to mallory (1 of 2), ada sends the documented resume body: refused, nothing runs."""
    ada, bob = approvers
    scripted_configuration("pay", TURNS, approvals_required=2)
    run = park(django_user_model.objects.create_user("initiator"), "pay")
    shown = client_for(ada).get(f"/api/runs/{run.pk}/").json()["ticket"]
    assert shown["target"]["arguments"]["title"] == "pay 10 EUR to alice"
    edited = {"title": "pay 10000 EUR to mallory", "body": "body"}
    body = allow(active_ticket(run.pk))
    body["result"]["arguments"] = edited
    assert resume(client_for(bob), run.pk, body).json()["status"] == Run.Status.AWAITING
    before = picture(run.pk)
    documented = {**{k: shown[k] for k in ("correlation_id", "run", "snapshot_id")}}
    documented.update(
        catalog_fingerprint=shown["catalog_fingerprint"],
        call_id=shown["target"]["call_id"],
        result={"kind": "permission", "decision": "allow", "note": "ok"},
    )
    refused = resume(client_for(ada), run.pk, documented)
    assert refused.status_code == 409, refused.json()
    assert refused.json()["code"] == "arguments_changed"
    assert picture(run.pk) == before
    assert not TicketApproval.objects.filter(user=ada).exists()
    # What the API shows now is what is proposed now, with its digest.
    target = client_for(ada).get(f"/api/runs/{run.pk}/").json()["ticket"]["target"]
    assert target["arguments"] == edited
    assert target["arguments_digest"] == digest(edited)
    documented["result"]["arguments_digest"] = target["arguments_digest"]
    assert resume(client_for(ada), run.pk, documented).json()["status"] == Run.Status.QUEUED
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert list(Note.objects.values_list("title", flat=True)) == ["pay 10000 EUR to mallory"]


def test_an_unedited_ticket_takes_an_allow_without_a_digest(approvers, django_user_model):
    """SEC-16 asks for the digest once the arguments were edited; before, the model's own
    arguments are what every approver was shown."""
    ada = approvers[0]
    scripted_configuration("pay", TURNS)
    run = park(django_user_model.objects.create_user("initiator"), "pay")
    allowed = resume(client_for(ada), run.pk, allow(active_ticket(run.pk)))
    assert allowed.status_code == 200, allowed.json()
    assert allowed.json()["status"] == Run.Status.QUEUED


def test_an_edit_of_an_edit_needs_the_digest_of_the_edit_it_replaces(approvers, django_user_model):
    """An approver editing arguments she was not shown the latest version of is refused."""
    ada, bob = approvers
    scripted_configuration("pay", TURNS, approvals_required=2)
    run = park(django_user_model.objects.create_user("initiator"), "pay")
    first = allow(active_ticket(run.pk))
    first["result"]["arguments"] = {"title": "pay 10 EUR to bob", "body": "body"}
    assert resume(client_for(bob), run.pk, first).status_code == 200
    second = allow(active_ticket(run.pk))
    second["result"]["arguments"] = {"title": "pay 10 EUR to carol", "body": "body"}
    refused = resume(client_for(ada), run.pk, second)
    assert refused.status_code == 409 and refused.json()["code"] == "arguments_changed"
