"""CG-12..CG-14: every way out has a ceiling. What a model writes carries the class of what
it read; a send's sources are everything whose text it carries (earlier runs of the thread,
every run a fork copied); traces, webhooks and mails carry nothing above their ceiling.
Each case drives the loop on PostgreSQL against the fake provider over the wire, and the
external fake never receives the marker text."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentruns import events as ev
from agentruns.models import Configuration, Event, GateAudit, Run, Webhook, WebhookDelivery
from agentruns.runtime.loop import execute_run
from agentruns.services.webhooks import webhook_deliver_due
from tests.conftest import grant
from tests.support.catalog import (
    make_openai_configuration,
    make_provider,
    make_snippet,
    scripted_configuration,
)
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import active_ticket, allow, client_for, resume, write_call
from tests.support.ops import Receiver, hook_owner
from tests.support.runs import park, submit

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


def repoint(fake: FakeProvider, slug: str) -> None:
    """Staff point the configuration at an external provider (the fake, over the wire)."""
    configuration = Configuration.objects.get(slug=slug)
    configuration.provider = make_provider(
        f"{slug}-abroad", zone="external_global", kind="openai", base_url=fake.openai_base_url
    )
    configuration.model = "gpt-test"
    configuration.save()


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


def test_cg12_a_reply_carries_the_class_of_its_send_and_binds_a_later_send(fake, staff):
    """Break 2: drop the snippet, re-point the configuration at an external provider and
    send a follow-up: the reply that repeated the secret is refused, never passed."""
    first, second = secret_thread(staff)
    origin = {"kind": "snippet", "name": "merger-plans"}
    for run in (first, second):  # the second forced nothing: it read the first's reply
        reply = Event.objects.get(run=run, type=ev.ASSISTANT)
        assert reply.payload["label"] == {"class": "secret", "origin": origin}
    repoint(fake, "vault")
    fake.queue({"text": "sent abroad"})

    third = submit(staff, "vault", "and now?", thread=first.thread_id)
    assert execute_run(third.pk) == Run.Status.FAILED

    failure = Run.objects.get(pk=third.pk).failure
    assert failure["code"] == "context_refused"
    assert (failure["source_kind"], failure["source_name"]) == ("reply", "turn 2")
    assert failure["origin"] == origin and failure["data_class"] == "secret"
    assert 'reply of turn 2 (set by snippet "merger-plans", secret)' in failure["detail"]
    assert fake.requests == []
    assert MARKER not in str(failure)


def test_cg10_cg12_the_readout_lists_carried_replies_with_their_origin(staff, api):
    first, second = secret_thread(staff)
    readout = api.get(f"/api/runs/{second.pk}/").json()["readout"]
    replies = [row for row in readout["sources"] if row["kind"] == "reply"]
    origin = {"kind": "snippet", "name": "merger-plans"}
    assert [(r["name"], r["data_class"], r["origin"]) for r in replies] == [
        ("turn 1", "secret", origin),
        ("turn 2", "secret", origin),
    ]
    assert readout["effective_class"] == "secret"
    assert readout["effective_source"]["origin"] == origin

    body = {"configuration": "vault", "input": "again", "thread": first.thread_id, "dry_run": True}
    dry = api.post("/api/runs/", body, format="json").json()
    assert [r["name"] for r in dry["readout"]["sources"] if r["kind"] == "reply"] == [
        "turn 1",
        "turn 2",
    ]


def test_cg10_cg12_the_pages_readout_names_what_set_a_carried_replys_class(staff, client):
    """The run page (and every page that includes the readout) says which source a carried
    reply's class came from, as the refusal does, never the reply's text."""
    _, second = secret_thread(staff)
    client.force_login(staff)
    page = client.get(f"/runs/{second.pk}/").content.decode()
    origin = '<span class="set-by">snippet “merger-plans”</span>'
    assert f"(set by reply “turn 2”, which read {origin})" in page
    assert f"turn 1 (its class set by {origin})" in page
    assert MARKER not in page.split("Context readout", 1)[1].split("</section>", 1)[0]


@pytest.fixture
def receivers(settings):
    settings.AGENTRUNS_WEBHOOK_ALLOWED_HOSTS = ["127.0.0.1"]
    listening = (Receiver(statuses=[200]), Receiver(statuses=[200]))
    yield listening
    for receiver in listening:
        receiver.close()


def bodies(receiver: Receiver) -> list[dict[str, Any]]:
    return [json.loads(got.body) for got in receiver.received]


def test_cg14_a_webhook_receives_no_content_above_its_trust_zones_ceiling(staff, api, receivers):
    """Break 4: a `message.assistant` with a secret-derived reply was delivered whole to
    any receiver. Withheld now, marked in its field, recorded on the delivery (API) and
    audited as `egress.withheld`; a local receiver gets it whole."""
    far, near = receivers
    events = [ev.ASSISTANT, ev.RUN_COMPLETED]
    owner = hook_owner()  # SEC-15: a webhook delivers only what its owner may see
    abroad = Webhook.objects.create(url=far.url, events=events, secret="s" * 20, created_by=owner)
    assert abroad.trust_zone == "external_global"  # the default
    inside = Webhook.objects.create(
        url=near.url, events=events, secret="s" * 20, trust_zone="local", created_by=owner
    )
    first, _ = secret_thread(staff)
    while webhook_deliver_due():
        pass

    sent_abroad = bodies(far)
    assert len(sent_abroad) == 4 and MARKER not in str(sent_abroad)
    texts = [b["payload"].get("text") or b["payload"]["final_reply"] for b in sent_abroad]
    assert texts == ["withheld: secret"] * 4
    assert any(MARKER in str(b["payload"]) for b in bodies(near))

    delivery = WebhookDelivery.objects.get(webhook=abroad, run_id=first.pk, event_type=ev.ASSISTANT)
    assert delivery.withheld == [{"field": "text", "class": "secret"}]
    assert not WebhookDelivery.objects.filter(webhook=inside).exclude(withheld=[]).exists()
    listed = api.get(f"/api/webhooks/{abroad.pk}/deliveries/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert {"field": "text", "class": "secret"} in [w for r in rows for w in r["withheld"]]
    (audit, _) = GateAudit.objects.filter(verdict="withheld", run_id=first.pk)
    assert (audit.source_kind, audit.zone, audit.data_class) == (
        "webhook",
        "external_global",
        "secret",
    )
    auditor = client_for(grant(staff, "view_audit"))
    exported = b"".join(auditor.get("/api/audit/?kind=egress.withheld").streaming_content)
    exported = exported.decode()
    assert "egress.withheld" in exported and MARKER not in exported


def test_cg14_hitl12_an_approvers_edit_of_a_secret_derived_call_is_withheld_from_a_webhook(
    staff, receivers
):
    """`ticket.decided` carries an edit's arguments: they started as the model's, written
    after it read the secret snippet, so they carry that reply's label (CG-12) and a
    receiver above its ceiling gets the marker, the delivery record and the audit saying so."""
    far, near = receivers
    owner = hook_owner()
    events = [ev.TICKET_DECIDED]
    abroad = Webhook.objects.create(url=far.url, events=events, secret="s" * 20, created_by=owner)
    Webhook.objects.create(
        url=near.url, events=events, secret="s" * 20, trust_zone="local", created_by=owner
    )
    plans = make_snippet("merger-plans", data_class="secret", text=f"plans {MARKER}")
    call = write_call("plans", f"the plans say {MARKER}")
    scripted_configuration("scribe", [{"tool_calls": [call]}, {"text": "noted"}], snippets=[plans])
    approver = grant(staff, "approve_run")
    run = park(approver, "scribe")
    body = allow(active_ticket(run.pk))
    body["result"]["arguments"] = {"title": "plans", "body": f"tidied: {MARKER}"}
    assert resume(client_for(approver), run.pk, body).status_code == 200
    while webhook_deliver_due():
        pass

    (sent,) = bodies(far)
    assert sent["payload"]["arguments"] == "withheld: secret" and MARKER not in str(sent)
    assert MARKER in str(bodies(near))
    delivery = WebhookDelivery.objects.get(webhook=abroad)
    assert delivery.withheld == [{"field": "arguments", "class": "secret"}]
    audit = GateAudit.objects.get(verdict="withheld", run_id=run.pk)
    assert (audit.source_kind, audit.data_class) == ("webhook", "secret")


def test_cg14_del2_a_delegated_childs_task_is_withheld_from_a_webhook_above_its_label(
    staff, receivers
):
    """A child's task is the parent model's call arguments: written after reading the
    secret snippet, its `message.user` carries that reply's label (CG-12) and a receiver
    above the ceiling gets the marker; a person's task is never classified (CG-2)."""
    far, _ = receivers
    abroad = Webhook.objects.create(
        url=far.url, events=[ev.USER], secret="s" * 20, created_by=hook_owner()
    )
    plans = make_snippet("merger-plans", data_class="secret", text=f"plans {MARKER}")
    child = scripted_configuration("lookup", [{"text": "found"}])
    delegate = {
        "name": "agent.delegate",
        "arguments": {"configuration": "lookup", "task": f"look up {MARKER}"},
    }
    parent = scripted_configuration(
        "triage", [{"tool_calls": [delegate]}, {"text": "done"}], snippets=[plans]
    )
    parent.delegates.set([child])
    run = submit(staff, "triage", "triage the plans")
    assert execute_run(run.pk) == Run.Status.AWAITING
    while webhook_deliver_due():
        pass

    sent = {b["run"]: b["payload"]["text"] for b in bodies(far)}
    (child_run,) = Run.objects.filter(parent=run)
    assert sent == {run.pk: "triage the plans", child_run.pk: "withheld: secret"}
    delivery = WebhookDelivery.objects.get(webhook=abroad, run_id=child_run.pk)
    assert delivery.withheld == [{"field": "text", "class": "secret"}]
