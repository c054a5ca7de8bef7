"""TZ-5, SEC-3, LOOP-3 with failing providers on a real loopback server driven by the
official SDKs: rate limits with `Retry-After`, 5xx, timeouts and client errors, on the
primary and on its fallback. Fallback happens only where TZ-5 allows it, a run never
waits unboundedly, and the log says which configuration and provider served each turn.
(The basic fallback matrix is in tests/loop/test_fallback.py.)"""

from __future__ import annotations

import time

import pytest

from agentruns import events as ev
from agentruns.models import Event, Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_anthropic_configuration
from tests.support.crash import make_openai_configuration, provider_pairing_problems, submit
from tests.support.fake_provider import ANTHROPIC_PATH, OPENAI_PATH, FakeProvider

pytestmark = pytest.mark.django_db

CLOCK_TURN = {"tool_calls": [{"name": "clock_now", "arguments": {}}]}


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def chain(fake: FakeProvider, *, primary_retries: int = 0, timeout: float = 10) -> None:
    """`primary` (OpenAI wire) with one fallback, `backup` (Anthropic wire)."""
    backup = make_anthropic_configuration(
        "backup", fake, allowed_tools=["clock.now"], provider_kw={"timeout_seconds": timeout}
    )
    make_openai_configuration(
        "primary",
        fake,
        fallbacks=[backup],
        allowed_tools=["clock.now"],
        provider_kw={"max_retries": primary_retries, "timeout_seconds": timeout},
    )


def scripted_by_path(**by_path: list[dict]):
    """Answers each wire from its own list, in order (the last one repeats)."""
    served = {path: 0 for path in by_path}

    def reply(body: dict, path: str) -> dict:
        items = by_path[path]
        item = items[min(served[path], len(items) - 1)]
        served[path] += 1
        return item

    return reply


def served_by(run: Run) -> list[dict]:
    turns = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")
    return [turn.payload["served_by"] for turn in turns]


def test_loop3_the_log_names_who_served_each_turn_when_the_primary_fails_midway(staff, fake):
    """LOOP-3, TZ-5: turn one is served by the primary; the primary then answers 503, so
    turn two is served by the fallback, on another wire. Each `message.assistant` says
    which configuration, provider and model answered it, and the history stays paired."""
    chain(fake)
    fake.default = scripted_by_path(
        **{
            OPENAI_PATH: [CLOCK_TURN, {"status": 503, "message": "overloaded"}],
            ANTHROPIC_PATH: [{"text": "finished by the backup"}],
        }
    )
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.COMPLETED

    assert served_by(run) == [
        {"configuration": "primary", "provider": "primary-openai", "model": "gpt-test"},
        {"configuration": "backup", "provider": "backup-anthropic", "model": "claude-test"},
    ]
    assert fake.paths == [OPENAI_PATH, OPENAI_PATH, ANTHROPIC_PATH]
    assert provider_pairing_problems(run.pk) == []


def test_tz5_a_429_with_retry_after_is_waited_out_on_the_same_provider(staff, fake):
    """TZ-5: with SDK retries configured, a 429 carrying `Retry-After: 1` is retried on the
    same provider after the wait the server asked for; the fallback is not needed."""
    chain(fake, primary_retries=1)
    fake.queue(
        {"status": 429, "message": "slow down", "headers": {"retry-after": "1"}},
        {"text": "after the wait"},
    )
    run = submit(staff, "primary")

    started = time.monotonic()
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert time.monotonic() - started >= 0.9

    assert fake.paths == [OPENAI_PATH, OPENAI_PATH]
    assert served_by(run)[0]["configuration"] == "primary"


def test_tz5_a_429_asking_for_an_hour_never_holds_the_run_an_hour(staff, fake):
    """SEC-3, TZ-5: a `Retry-After` of an hour is not obeyed (the SDK caps what it waits);
    the run moves on to its fallback within seconds."""
    chain(fake, primary_retries=1)
    fake.default = scripted_by_path(
        **{
            OPENAI_PATH: [{"status": 429, "message": "later", "headers": {"retry-after": "3600"}}],
            ANTHROPIC_PATH: [{"text": "the backup answered"}],
        }
    )
    run = submit(staff, "primary")

    started = time.monotonic()
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert time.monotonic() - started < 30

    assert served_by(run)[0]["configuration"] == "backup"
    assert fake.paths[-1] == ANTHROPIC_PATH


@pytest.mark.parametrize(
    "backup",
    [
        pytest.param({"status": 500, "message": "down too"}, id="500"),
        pytest.param({"status": 429, "message": "busy too"}, id="429"),
        pytest.param({"text": "too late", "delay": 3}, id="timeout"),
    ],
)
def test_tz5_when_the_fallback_fails_retryably_too_the_run_fails_retryable(staff, fake, backup):
    """TZ-5: the primary's 500 moves on to the fallback; the fallback failing retryably as
    well ends the run `provider_error` (retryable), both tried once, nothing recorded as
    a turn."""
    chain(fake, timeout=1)
    fake.default = scripted_by_path(
        **{OPENAI_PATH: [{"status": 500, "message": "down"}], ANTHROPIC_PATH: [backup]}
    )
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert run.failure["code"] == "provider_error"
    assert run.failure["retryable"] is True
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]
    assert not Event.objects.filter(run=run, type=ev.ASSISTANT).exists()


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_tz5_a_client_error_on_the_fallback_is_final(staff, fake, status):
    """TZ-5: the fallback's own 4xx is not retried anywhere: the run fails with its status,
    not retryable."""
    chain(fake)
    fake.default = scripted_by_path(
        **{
            OPENAI_PATH: [{"status": 503, "message": "busy"}],
            ANTHROPIC_PATH: [{"status": status, "message": "no"}],
        }
    )
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert (run.failure["status"], run.failure["retryable"]) == (status, False)
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]


def test_tz5_a_client_error_on_the_primary_never_reaches_the_fallback_even_with_retries(
    staff, fake
):
    """TZ-5: a 400 is final on the primary too, whatever its retry setting."""
    chain(fake, primary_retries=2)
    fake.default = {"status": 400, "message": "bad request"}
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    assert fake.paths == [OPENAI_PATH]


@pytest.mark.parametrize(
    "transport",
    [
        pytest.param({"reset": True}, id="connection-reset"),
        pytest.param({"truncate": 30}, id="connection-closed-mid-body"),
        pytest.param({"trickle": 0.2}, id="reply-that-never-ends"),
    ],
)
def test_tz5_a_broken_connection_to_the_primary_falls_back(staff, fake, transport):
    """TZ-5: a reset, a body cut off by a closing connection and a reply that never ends
    (bounded by the provider's timeout for the whole call) are connection failures: the
    fallback serves the turn, and the log says so."""
    chain(fake, timeout=1)
    fake.default = scripted_by_path(
        **{
            OPENAI_PATH: [{"text": "lost", "transport": transport}],
            ANTHROPIC_PATH: [{"text": "the backup answered"}],
        }
    )
    run = submit(staff, "primary")

    started = time.monotonic()
    assert execute_run(run.pk) == Run.Status.COMPLETED
    assert time.monotonic() - started < 10

    assert served_by(run)[0]["configuration"] == "backup"
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]


def test_tz5_a_connection_reset_on_every_link_fails_the_run_retryable(staff, fake):
    chain(fake)
    fake.default = {"text": "lost", "transport": {"reset": True}}
    run = submit(staff, "primary")

    assert execute_run(run.pk) == Run.Status.FAILED

    run.refresh_from_db()
    assert (run.failure["code"], run.failure["retryable"]) == ("provider_error", True)
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]
