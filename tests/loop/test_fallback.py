"""TZ-5, CG-8, CG-9 through the fake HTTP server: fallback only on retryable errors, a gate
refusal sends nothing anywhere, and the gate runs on every send against the live
configuration."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.models import Configuration, Event, GateAudit, Provider, Run
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_configuration, make_provider, make_snippet
from tests.support.crash import (
    SimulatedCrash,
    expire_lease,
    fault_hook,
    make_openai_configuration,
    submit,
)
from tests.support.fake_provider import ANTHROPIC_PATH, OPENAI_PATH, FakeProvider

pytestmark = pytest.mark.django_db

FALLBACK_TEXT = "answered by the fallback"


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def with_fallback(fake: FakeProvider, *, timeout: float = 10, fallback_zone: str = "local", **kw):
    """`primary` (OpenAI wire) falls back to `backup` (Anthropic wire), one server."""
    backup_provider = make_provider(
        "anthropic-fake",
        zone=fallback_zone,
        kind="anthropic",
        base_url=fake.anthropic_base_url,
        max_retries=0,
        timeout_seconds=10,
    )
    backup = make_configuration("backup", provider=backup_provider, model="claude-test")
    return make_openai_configuration(
        "primary", fake, fallbacks=[backup], provider_kw={"timeout_seconds": timeout}, **kw
    )


def primary_then_fallback(primary: dict):
    def reply(body: dict, path: str) -> dict:
        return primary if path == OPENAI_PATH else {"text": FALLBACK_TEXT}

    return reply


@pytest.mark.parametrize(
    "primary",
    [
        pytest.param({"status": 500, "message": "internal"}, id="500"),
        pytest.param({"status": 503, "message": "overloaded"}, id="503"),
        pytest.param({"status": 429, "message": "slow down"}, id="429"),
        pytest.param({"text": "too late", "delay": 5}, id="timeout"),
    ],
)
def test_a_retryable_failure_falls_back_to_the_next_configuration(staff, fake, primary):
    """TZ-5: connection, timeout, 429 and 5xx move on to the fallback, in chain order."""
    with_fallback(fake, timeout=0.5)
    fake.default = primary_then_fallback(primary)
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert run.final_reply == FALLBACK_TEXT
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_client_error_never_falls_back_and_fails_the_run(staff, fake, status):
    """TZ-5: a 4xx would fail everywhere; the run fails `provider_error`, the fallback is
    never called."""
    with_fallback(fake)
    fake.default = primary_then_fallback({"status": status, "message": "bad request"})
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "provider_error"
    assert run.failure["status"] == status
    assert run.failure["retryable"] is False
    assert fake.paths == [OPENAI_PATH]
    [failed] = Event.objects.filter(run=run, type=ev.RUN_FAILED)
    assert failed.payload["code"] == "provider_error"


def test_a_provider_error_never_carries_the_api_key(staff, fake, monkeypatch):
    """SEC-1: an error body echoing the credential (OpenAI's 401 does, partly) is scrubbed
    before it becomes the run's failure or an event."""
    key = "sk-fallback-test-" + "Q7w8E9r0T1y2U3i4O5p6"
    monkeypatch.setenv("I3_FAKE_OPENAI_KEY", key)
    make_openai_configuration("keyed", fake, provider_kw={"api_key_env": "I3_FAKE_OPENAI_KEY"})
    fake.default = {"status": 400, "message": f"Incorrect API key provided: {key}."}
    run = submit(staff, "keyed")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert fake.requests[0].headers["authorization"] == "present"
    assert run.failure["code"] == "provider_error"
    assert "Incorrect API key" in run.failure["detail"]
    assert key not in str(run.failure)
    assert key not in str(list(Event.objects.filter(run=run).values_list("payload", flat=True)))


def test_when_every_link_fails_retryably_the_run_fails_after_trying_each(staff, fake):
    with_fallback(fake)
    fake.default = {"status": 503, "message": "down"}
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "provider_error"
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]


def test_a_gate_refusal_fails_the_run_and_sends_nothing_anywhere(staff, fake):
    """CG-8, CG-7, TZ-4, TZ-5: the fallback's zone lowers the reachable ceiling; the run
    ends `failed` with `context_refused` and the structured fields, a `context.refused`
    event, and neither provider is called (a gate refusal is never fallen back on)."""
    secret_text = "Q3 acquisition target: Hooli"
    snippet = make_snippet("merger", data_class="restricted", text=secret_text)
    with_fallback(fake, fallback_zone="external_eu", snippets=[snippet])
    fake.default = {"text": "must never be asked"}
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    failure = run.failure
    assert failure["code"] == "context_refused"
    assert {k: failure[k] for k in ("configuration", "zone", "ceiling")} == {
        "configuration": "primary",
        "zone": "external_eu",
        "ceiling": "confidential",
    }
    assert (failure["source_kind"], failure["source_name"], failure["data_class"]) == (
        "snippet",
        "merger",
        "restricted",
    )
    assert secret_text not in failure["detail"]
    [refused] = Event.objects.filter(run=run, type=ev.CONTEXT_REFUSED)
    assert refused.payload["source_name"] == "merger"
    assert secret_text not in str(refused.payload)
    assert fake.requests == []
    assert not Event.objects.filter(run=run, type=ev.ASSISTANT).exists()


# --- CG-9: the live configuration, on every send ----------------------------------------

ECHO_TURN = {"tool_calls": [{"id": "e1", "name": "test_echo", "arguments": {"text": "x"}}]}


def gated_configuration(fake: FakeProvider) -> Configuration:
    """A local provider and a confidential snippet: permitted until it is re-pointed."""
    snippet = make_snippet("plans", data_class="confidential")
    configuration = make_openai_configuration(
        "gated", fake, allowed_tools=["test.echo"], snippets=[snippet]
    )
    make_provider("weak", zone="external_global", kind="openai", base_url=fake.openai_base_url)
    return configuration


def repoint_to_weak_provider() -> None:
    configuration = Configuration.objects.get(slug="gated")
    configuration.provider = Provider.objects.get(slug="weak")
    configuration.save()


def first_result_recorded(seen: list[str]) -> bool:
    """The fault points so far say the first turn's tool ran and its result was recorded:
    held, to be written with the next send's audit row (runtime/journal.py)."""
    return seen[-1:] == [faults.COMMIT] and faults.TOOL_DONE in seen


def assert_second_send_refused(run: Run, fake: FakeProvider) -> None:
    run.refresh_from_db()
    assert run.status == Run.Status.FAILED
    assert run.failure is not None
    assert run.failure["code"] == "context_refused"
    assert (run.failure["zone"], run.failure["source_name"]) == ("external_global", "plans")
    assert len(fake.requests) == 1  # the first turn only
    assert Event.objects.filter(run=run, type=ev.CONTEXT_REFUSED).count() == 1


def test_a_configuration_repointed_between_turns_refuses_the_next_send_on_resume(staff, fake):
    """CG-9: the run is stopped after its first turn's tool result was recorded, the
    configuration is pointed at a less trusted provider, and the resumed run's second send
    is refused — nothing more reaches any provider."""
    gated_configuration(fake)
    fake.queue(ECHO_TURN, {"text": "must never be asked"})
    run = submit(staff, "gated")
    seen: list[str] = []

    def stop_after_first_result(name: str, count: int) -> None:
        seen.append(name)
        if first_result_recorded(seen):
            raise SimulatedCrash(name)

    with fault_hook(stop_after_first_result), pytest.raises(SimulatedCrash):
        execute_run(run.pk)
    assert len(fake.requests) == 1
    repoint_to_weak_provider()
    expire_lease(run.pk)

    assert execute_run(run.pk) == Run.Status.FAILED
    assert_second_send_refused(run, fake)


def test_a_configuration_repointed_while_the_run_is_live_refuses_the_next_send(staff, fake):
    """CG-9 without a pause: the configuration is re-pointed (in the worker's own thread,
    right after the first turn's tool result was recorded, before the second send). The
    next provider call must be gated against the live configuration."""
    gated_configuration(fake)
    fake.queue(ECHO_TURN, {"text": "must never be asked"})
    run = submit(staff, "gated")
    changed = []
    seen: list[str] = []

    def repoint_after_first_result(name: str, count: int) -> None:
        seen.append(name)
        if not changed and first_result_recorded(seen):
            repoint_to_weak_provider()
            changed.append(True)

    with fault_hook(repoint_after_first_result):
        outcome = execute_run(run.pk)

    assert changed
    assert outcome == Run.Status.FAILED
    assert_second_send_refused(run, fake)


def test_observe_mode_lets_a_refused_send_through_and_records_it(staff, fake, settings):
    """CG-6: observe sends, writes the audit row marked observed, and the run records a
    `context.observed` event (once, not per turn)."""
    settings.AGENTRUNS_DATA_CLASS_ENFORCEMENT = " Observe "
    snippet = make_snippet("plans", data_class="confidential")
    make_openai_configuration(
        "observed", fake, zone="external_global", allowed_tools=["test.echo"], snippets=[snippet]
    )
    fake.queue(ECHO_TURN, {"text": "sent anyway"})
    run = submit(staff, "observed")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    run.refresh_from_db()
    assert run.final_reply == "sent anyway"
    assert len(fake.requests) == 2
    observed = Event.objects.filter(run=run, type=ev.CONTEXT_OBSERVED)
    assert [e.payload["verdict"] for e in observed] == ["refused (observed)"]
    audits = GateAudit.objects.filter(run_id=run.pk)
    assert audits.count() >= 2
    assert set(audits.values_list("verdict", "enforcement")) == {("refused", "observed")}
