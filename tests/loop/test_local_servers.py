"""INT-1, INT-2: runs on OpenAI-compatible servers other than OpenAI's, through the
official SDK against the fake provider answering as llama.cpp's and vLLM's servers do
(their documented strictness), and replies the loop cannot trust."""

from __future__ import annotations

import pytest

from agentruns import events as ev
from agentruns.models import Configuration, Event, Run
from agentruns.runtime.loop import execute_run
from tests.support.catalog import make_anthropic_configuration, make_openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

CLOCK_TURN = {"tool_calls": [{"name": "clock_now", "arguments": {}}]}


def local(fake: FakeProvider, **provider_kw) -> None:
    make_openai_configuration(
        "local-llm", fake, allowed_tools=["clock.now"], provider_kw=provider_kw
    )


def results(run: Run) -> list[str]:
    events = Event.objects.filter(run=run, type=ev.TOOL_RESULT).order_by("sequence")
    return [event.payload["status"] for event in events]


def test_int1_llama_cpp_sees_the_tools_and_takes_the_turn_after_a_tool_call(staff):
    """INT-1: llama.cpp's server renders tools into the prompt only when `tool_choice`
    is sent, and answers 500 to an assistant message whose content is null: a tool round
    trip completes with the default options."""
    with FakeProvider(server="llama.cpp") as fake:
        local(fake)
        fake.queue(CLOCK_TURN, {"text": "It is noon."})
        run = submit(staff, "local-llm")

        assert execute_run(run.pk) == Run.Status.COMPLETED, Run.objects.get(pk=run.pk).failure

        run.refresh_from_db()
        assert run.final_reply == "It is noon." and results(run) == ["ok"]
        first, second = (request.body for request in fake.requests)
        assert first["tool_choice"] == "auto"
        assert second["messages"][-2]["content"] == ""  # the assistant turn with the call


@pytest.mark.parametrize(("choice", "sent"), [("required", "required"), ("omit", None)])
def test_int1_tool_choice_is_the_providers_option_so_vllm_without_auto_works(staff, choice, sent):
    """INT-1: vLLM started without --enable-auto-tool-choice refuses "auto"; the
    provider's `tool_choice` says what is sent instead (nothing, for omit)."""
    with FakeProvider(server="vllm") as fake:
        local(fake, tool_choice=choice)
        fake.queue(CLOCK_TURN, {"text": "done"})
        run = submit(staff, "local-llm")

        assert execute_run(run.pk) == Run.Status.COMPLETED, Run.objects.get(pk=run.pk).failure
        assert fake.requests[0].body.get("tool_choice") == sent


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_loop6_once_the_tool_calls_are_spent_the_model_is_told_to_call_none(staff, wire):
    """LOOP-6, INT-1: with `tool_choice` "required" a model calls a tool every turn; once
    the run's `max_tool_calls` are spent each request says "none" (the tools stay defined
    for the history's calls), so the run ends with a reply instead of refusals until its
    turn limit."""
    with FakeProvider(default=CLOCK_TURN) as fake:  # a model that always calls
        kw = {"allowed_tools": ["clock.now"], "max_tool_calls": 1}
        if wire == "openai":
            make_openai_configuration(
                "local-llm", fake, provider_kw={"tool_choice": "required"}, **kw
            )
        else:
            make_anthropic_configuration("local-llm", fake, **kw)
        run = submit(staff, "local-llm")

        assert execute_run(run.pk) == Run.Status.COMPLETED, Run.objects.get(pk=run.pk).failure
        assert results(run) == ["ok"]
        first, second = (request.body for request in fake.requests)
        assert first.get("tool_choice") in ("required", None)
        assert second["tool_choice"] in ("none", {"type": "none"})
        assert [tool["function" if wire == "openai" else "name"] for tool in second["tools"]]


def test_loop6_a_provider_that_omits_tool_choice_leaves_spent_tools_out(staff):
    """LOOP-6, INT-1: a server sent no `tool_choice` (omit) is told "no more calls" the
    one way left: the request after the last allowed call carries no tools."""
    with FakeProvider(server="vllm") as fake:
        local(fake, tool_choice="omit")
        Configuration.objects.filter(slug="local-llm").update(max_tool_calls=1)
        fake.queue(CLOCK_TURN, {"text": "It is noon."})
        run = submit(staff, "local-llm")

        assert execute_run(run.pk) == Run.Status.COMPLETED, Run.objects.get(pk=run.pk).failure
        first, second = (request.body for request in fake.requests)
        assert first["tools"] and "tool_choice" not in first
        assert "tools" not in second and "tool_choice" not in second


def test_int1_max_output_tokens_and_extra_body_go_into_each_request(staff):
    """INT-1: the output bound is sent as `max_tokens`; `extra_body` is merged in."""
    with FakeProvider() as fake:
        local(fake, max_output_tokens=256, extra_body={"top_k": 20, "cache_prompt": True})
        fake.queue({"text": "hi"})
        run = submit(staff, "local-llm")
        assert execute_run(run.pk) == Run.Status.COMPLETED

        body = fake.requests[0].body
        assert (body["max_tokens"], body["top_k"], body["cache_prompt"]) == (256, 20, True)


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_int2_a_reply_cut_by_length_fails_the_run_as_truncated(staff, wire):
    """INT-2: `finish_reason: "length"` (Anthropic: `stop_reason: "max_tokens"`) is half
    a reply: the run fails `provider_reply_truncated` on its first attempt, naming the
    provider and host, never `completed` with half a sentence."""
    with FakeProvider() as fake:
        if wire == "openai":
            local(fake, max_output_tokens=8)
            fake.queue({"text": "The time is", "finish_reason": "length"})
        else:
            make_anthropic_configuration("local-llm", fake)
            fake.queue({"text": "The time is", "stop_reason": "max_tokens"})
        run = submit(staff, "local-llm")

        assert execute_run(run.pk) == Run.Status.FAILED
        run.refresh_from_db()
        assert run.failure["code"] == "provider_reply_truncated", run.failure
        assert "127.0.0.1" in run.failure["detail"]
        assert run.final_reply == ""


def raw_call(**fields) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "clock_now", "arguments": "{}"}}
    call.update(fields)
    return {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": "", "tool_calls": [call]},
            }
        ]
    }


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(raw_call(id=None), id="no-id"),
        pytest.param(raw_call(type=None), id="no-type"),
        pytest.param(raw_call(function={"arguments": "{}"}), id="no-name"),
        pytest.param(raw_call(function={"name": "clock_now", "arguments": {}}), id="not-text"),
    ],
)
def test_int2_an_unusable_tool_call_fails_the_run_on_its_first_attempt(staff, reply):
    """INT-2, SEC-7: a tool call without an id, a type or a name, or whose arguments are
    not JSON text, is `provider_malformed_reply` at once: never a crash loop ending in
    `attempts_exhausted`, never a call dropped and the run "completed"."""
    with FakeProvider() as fake:
        local(fake)
        fake.queue(reply)
        run = submit(staff, "local-llm")

        assert execute_run(run.pk) == Run.Status.FAILED
        run.refresh_from_db()
        assert run.failure["code"] == "provider_malformed_reply", run.failure
        assert "local-llm-openai" in run.failure["detail"]


def test_int2_a_connection_error_says_where_it_tried(staff):
    """INT-2: "Connection error." alone does not say which server was down."""
    with FakeProvider() as fake:
        make_openai_configuration("gone", fake)
        url = fake.openai_base_url
    run = submit(staff, "gone")  # the server has stopped

    assert execute_run(run.pk) == Run.Status.FAILED
    run.refresh_from_db()
    assert url in run.failure["detail"], run.failure
