"""RG-1..RG-4: a run parked for a person re-gates its forced sources, re-loaded from the live
records, against the live configuration when it resumes.

Every run here forces the snippet `incident-report` (restricted) into a configuration whose
own snippet is `handbook` (internal). It starts on a private_hosted provider (ceiling
restricted), so the first send is permitted and the run parks on a `notes.write` approval.
Something then changes while it waits; after the allow the run either ends `failed` with
`context_refused` naming the forced snippet — the approved tool not run and nothing sent —
or goes on and completes. Both providers are the fake OpenAI server, which counts sends."""

from __future__ import annotations

import pytest

from agentruns.models import Event, GateAudit, Note, Run, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.services.catalog import configuration_set_sources
from tests.conftest import grant
from tests.support.catalog import (
    KEY,
    KEY_ENV,
    make_configuration,
    make_provider,
    make_skill,
    make_snippet,
    openai_configuration,
)
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import (
    active_ticket,
    allow,
    answer,
    client_for,
    deny,
    results_by_call,
    resume,
)
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

WRITE = {"id": "call_w", "name": "notes_write", "arguments": {"title": "approved", "body": "x"}}
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
ASK = {"id": "call_q", "name": "ask_user", "arguments": {"question": "n?", "schema": SCHEMA}}
FORCED = "incident-report"


def script(call):
    def reply(body, path):
        if any(m.get("role") == "tool" for m in body["messages"]):
            return {"text": "done"}
        return {"text": "", "tool_calls": [call]}

    return reply


@pytest.fixture(autouse=True)
def enforce(settings):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"


@pytest.fixture
def approver(staff):
    return grant(staff, "approve_run")


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY, default=script(WRITE)) as server:
        yield server


@pytest.fixture
def forced(db):
    return make_snippet(FORCED, "restricted")


@pytest.fixture
def config(fake, forced):
    return openai_configuration(
        "rg",
        fake,
        zone="private_hosted",
        snippets=[make_snippet("handbook", "internal")],
        allowed_tools=["notes", "ask_user"],
    )


def provider(fake, slug, zone):
    return make_provider(
        slug,
        zone=zone,
        kind="openai",
        base_url=fake.openai_base_url,
        api_key_env=KEY_ENV,
        max_retries=0,
        timeout_seconds=10,
    )


def parked(user, fake, **forced_sets):
    run = submit(user, "rg", **forced_sets)
    assert execute_run(run.pk) == "awaiting"
    assert len(fake.requests) == 1
    return run


def parked_with_forced(user, fake, forced):
    return parked(user, fake, forced_snippets=[forced.pk])


def repoint(config, fake, zone="external_eu"):
    """The configuration now sends to a less trusted provider (ceiling confidential)."""
    config.provider = provider(fake, f"less-trusted-{zone}".replace("_", "-"), zone)
    config.save()


def allow_and_run(user, run):
    response = resume(client_for(user), run.pk, allow(active_ticket(run.pk)))
    assert response.status_code == 200, response.json()
    return execute_run(run.pk)


def assert_refused_naming(run, fake, kind, name):
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.failure["code"] == "context_refused"
    assert (run.failure["source_kind"], run.failure["source_name"]) == (kind, name)
    assert run.failure["forced"] is True
    assert name in run.failure["detail"]
    assert Event.objects.filter(run=run, type="context.refused").count() == 1
    last = GateAudit.objects.filter(run_id=run.pk).order_by("-id").first()
    assert (last.verdict, last.source_name) == ("refused", name)
    # The approved tool did not run and nothing was sent after the resume.
    assert Note.objects.count() == 0
    assert results_by_call(run.pk).get("call_w", {}).get("status") != "ok"
    assert ToolInvocation.objects.filter(run=run, status="completed").count() == 0
    assert len(fake.requests) == 1


def assert_refused_by_the_reply(run, fake):
    """CG-12: the parked turn's reply was written while the forced snippet was restricted;
    it keeps that class whatever happens to the snippet since, and binds the next send."""
    run.refresh_from_db()
    assert (run.failure["code"], run.failure["source_kind"]) == ("context_refused", "reply")
    assert run.failure["origin"] == {"kind": "snippet", "name": FORCED}
    assert run.failure["data_class"] == "restricted"
    assert len(fake.requests) == 1  # nothing was sent after the resume


def assert_completed(run, fake):
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.failure
    assert run.final_reply == "done"
    assert list(Note.objects.values_list("title", flat=True)) == ["approved"]
    assert len(fake.requests) == 2


# --- RG-4: the ceiling changed while the run waited ---------------------------------------


def test_rg4_repointed_at_a_less_trusted_provider_is_refused_naming_the_forced_snippet(
    approver, fake, config, forced
):
    run = parked_with_forced(approver, fake, forced)
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)
    assert run.failure["zone"] == "external_eu"
    assert run.failure["ceiling"] == "confidential"


def test_rg4_a_less_trusted_fallback_is_refused_naming_the_forced_snippet(
    approver, fake, config, forced
):
    run = parked_with_forced(approver, fake, forced)
    fallback = make_configuration(
        "rg-fallback", provider=provider(fake, "global", "external_global"), model="m"
    )
    configuration_set_sources(configuration=config, fallback_ids=[fallback.pk])
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)
    assert run.failure["zone"] == "external_global"


def test_rg4_enforcement_switched_from_observe_to_enforce_is_refused(
    approver, fake, config, forced, settings
):
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "observe"
    repoint(config, fake)  # above the ceiling from the start: observed, not refused
    run = parked_with_forced(approver, fake, forced)
    assert Event.objects.filter(run=run, type="context.observed").exists()
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = "enforce"
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)


def test_rg4_a_forced_skill_is_re_gated_too(approver, fake, config):
    skill = make_skill("breach-playbook", "restricted")
    run = parked(approver, fake, forced_skills=[skill.pk])
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "skill", "breach-playbook")


def test_rg4_after_typed_input_the_next_send_is_refused(approver, fake, config, forced):
    fake.default = script(ASK)
    run = parked_with_forced(approver, fake, forced)
    repoint(config, fake)
    response = resume(client_for(approver), run.pk, answer(active_ticket(run.pk), {"n": 1}))
    assert response.status_code == 200
    assert execute_run(run.pk) == "failed"
    run.refresh_from_db()
    assert (run.failure["code"], run.failure["source_name"]) == ("context_refused", FORCED)
    assert len(fake.requests) == 1


def test_rg4_after_a_deny_the_next_send_is_refused(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    repoint(config, fake)
    response = resume(client_for(approver), run.pk, deny(active_ticket(run.pk)))
    assert response.status_code == 200
    assert execute_run(run.pk) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)


@pytest.mark.parametrize(
    "change",
    ["configuration-provider", "provider-zone", "snippet-class"],
)
def test_rg4_an_operators_change_through_the_api_is_seen_on_resume(
    approver, fake, config, forced, change
):
    run = parked_with_forced(approver, fake, forced)
    operator = client_for(approver)  # staff
    if change == "configuration-provider":
        provider(fake, "eu", "external_eu")
        response = operator.patch("/api/configurations/rg/", {"provider": "eu"}, format="json")
    elif change == "provider-zone":
        response = operator.patch(
            f"/api/providers/{config.provider.slug}/", {"trust_zone": "external_eu"}, format="json"
        )
    else:
        response = operator.patch(
            f"/api/snippets/{forced.pk}/", {"data_class": "secret"}, format="json"
        )
    assert response.status_code == 200, response.json()
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)


def test_rg4_control_nothing_changed_and_the_run_completes(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    assert allow_and_run(approver, run) == "completed"
    assert_completed(run, fake)


# --- RG-1, RG-2: the forced set by identity, existence not activity -------------------------


def test_rg2_a_forced_snippet_deactivated_while_parked_still_counts(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    forced.active = False
    forced.save()
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)


def test_rg2_a_forced_snippet_deleted_while_parked_contributes_nothing(
    approver, fake, config, forced
):
    run = parked_with_forced(approver, fake, forced)
    forced.delete()
    assert allow_and_run(approver, run) == "completed"
    assert_completed(run, fake)
    # Every forced source gone: the configuration's own snippet (internal) and the parked
    # turn's reply (CG-12, restricted still) are what is left, and the reply decides.
    last = GateAudit.objects.filter(run_id=run.pk).order_by("-id").first()
    assert (last.verdict, last.source_kind, last.data_class) == ("permitted", "reply", "restricted")


def test_rg2_cg12_a_forced_snippet_deleted_while_parked_still_binds_through_the_reply(
    approver, fake, config, forced
):
    run = parked_with_forced(approver, fake, forced)
    forced.delete()
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    assert_refused_by_the_reply(run, fake)


def test_rg1_a_class_raised_while_parked_takes_effect(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    forced.data_class = "secret"  # above private_hosted's ceiling (restricted)
    forced.save()
    assert allow_and_run(approver, run) == "failed"
    assert_refused_naming(run, fake, "snippet", FORCED)
    assert run.failure["data_class"] == "secret"


def test_rg1_a_class_lowered_while_parked_takes_effect(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    repoint(config, fake)  # would refuse the restricted snippet …
    forced.data_class = "confidential"  # … but it is confidential now
    forced.save()
    assert allow_and_run(approver, run) == "failed"
    assert_refused_by_the_reply(run, fake)  # the snippet no longer decides; the reply does


# --- RG-3: rows written before the forced fields existed ----------------------------------


def test_rg3_a_run_stored_without_forced_fields_resumes_with_none(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    Run.objects.filter(pk=run.pk).update(forced_snippet_ids=None, forced_skill_ids=None)
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    assert_refused_by_the_reply(run, fake)  # no forced set; what it made of it still binds


def test_rg3_an_old_row_without_forced_fields_or_composition_mark_resumes(
    approver, fake, config, forced
):
    run = parked_with_forced(approver, fake, forced)
    Run.objects.filter(pk=run.pk).update(
        forced_snippet_ids=None, forced_skill_ids=None, composed_at=None
    )
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    assert_refused_by_the_reply(run, fake)
    assert not Event.objects.filter(run=run, type="sources.dropped").exists()


def test_rg4_the_refused_runs_approved_call_is_not_left_executing(approver, fake, config, forced):
    run = parked_with_forced(approver, fake, forced)
    repoint(config, fake)
    assert allow_and_run(approver, run) == "failed"
    invocation = ToolInvocation.objects.get(run=run, call_id="call_w")
    assert invocation.status != ToolInvocation.Status.EXECUTING
    assert invocation.completed_at is not None
