"""Provider adapters through the official SDKs against a real loopback server (no HTTP mocks),
the scripted provider, and the TZ-5 fallback dispatcher."""

from __future__ import annotations

import dataclasses
import json
import logging
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentruns.providers.anthropic_adapter import AnthropicAdapter
from agentruns.providers.base import (
    AssistantMessage,
    Link,
    MalformedReply,
    ProviderError,
    ProviderRequest,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
)
from agentruns.providers.dispatch import adapter_for, dispatch
from agentruns.providers.openai_adapter import OpenAIAdapter
from agentruns.providers.scripted import DERIVED_ID, FINISHED, ScriptedAdapter
from tests.support.fake_provider import ANTHROPIC_PATH, OPENAI_PATH, FakeProvider

KEY = "sk-test-9f8e7d6c5b4a39281706"
NOTES_WRITE = ToolSpec(
    "notes_write",
    "Write a note.",
    {"type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"}}},
)


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as server:
        yield server


def openai_link(fake: FakeProvider, **fields) -> Link:
    defaults = dict(slug="gpt", model="gpt-test", provider_slug="openai-fake", max_retries=0)
    return Link(provider_kind="openai", base_url=fake.openai_base_url, **{**defaults, **fields})


def anthropic_link(fake: FakeProvider, **fields) -> Link:
    defaults = dict(
        slug="claude", model="claude-test", provider_slug="anthropic-fake", max_retries=0
    )
    return Link(
        provider_kind="anthropic", base_url=fake.anthropic_base_url, **{**defaults, **fields}
    )


def scripted_link(slug: str = "script", **script) -> Link:
    return Link(slug=slug, model="scripted-model", provider_kind="scripted", script=script)


def request(*messages, tools=(NOTES_WRITE,), system=("Be brief.",), **fields) -> ProviderRequest:
    return ProviderRequest(
        model="test-model", system=system, messages=messages, tools=tools, **fields
    )


WRITE_CALL = ToolCall("call_1", "notes_write", {"title": "a", "body": "b"})
HISTORY = (
    UserMessage("write a note"),
    AssistantMessage("On it.", (WRITE_CALL,)),
    ToolResultMessage("call_1", "notes_write", "saved"),
)


# ---------------------------------------------------------------- OpenAI


def test_openai_round_trip_tool_call(fake):
    fake.queue({"text": "", "tool_calls": [{"name": "notes_write", "arguments": {"title": "t"}}]})
    reply = OpenAIAdapter().complete(openai_link(fake), request(UserMessage("hi")))

    assert reply.text == ""
    [call] = reply.tool_calls
    assert (call.name, call.arguments, call.raw_arguments) == ("notes_write", {"title": "t"}, None)
    assert reply.provider == "openai-fake" and reply.model == "test-model"
    assert set(reply.usage) == {"input_tokens", "output_tokens"}
    body = fake.requests[0].body
    assert body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "notes_write",
                "description": "Write a note.",
                "parameters": NOTES_WRITE.parameters,
            },
        }
    ]


def test_openai_sends_tool_results_and_omits_empty_tools(fake):
    fake.queue({"text": "Done."})
    reply = OpenAIAdapter().complete(openai_link(fake), request(*HISTORY, tools=()))

    assert reply.text == "Done." and reply.tool_calls == ()
    body = fake.requests[0].body
    assert "tools" not in body
    assert body["messages"][2:] == [
        {
            "role": "assistant",
            "content": "On it.",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {
                        "name": "notes_write",
                        "arguments": json.dumps({"title": "a", "body": "b"}),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "saved"},
    ]


@pytest.mark.parametrize("raw", ["{not json", "[1, 2]", '"just a string"'])
def test_openai_non_object_arguments_are_kept_raw_and_replayed(fake, raw):
    fake.queue({"tool_calls": [{"name": "notes_write", "arguments": raw, "id": "c9"}]})
    adapter, link = OpenAIAdapter(), openai_link(fake)
    reply = adapter.complete(link, request(UserMessage("hi")))
    [call] = reply.tool_calls
    assert call.arguments is None and call.raw_arguments == raw

    fake.queue({"text": "ok"})
    history = (
        UserMessage("hi"),
        AssistantMessage("", reply.tool_calls),
        ToolResultMessage("c9", "notes_write", "invalid arguments", is_error=True),
    )
    adapter.complete(link, request(*history))
    sent = fake.requests[1].body["messages"][2]
    assert sent["content"] == ""  # INT-1: llama.cpp answers 500 to null
    assert sent["tool_calls"][0]["function"]["arguments"] == raw


def test_openai_empty_choices_is_malformed(fake):
    fake.queue({"choices": []})
    with pytest.raises(MalformedReply) as caught:
        OpenAIAdapter().complete(openai_link(fake), request(UserMessage("hi")))
    assert caught.value.retryable is False


def test_openai_blank_key_env_sends_a_placeholder(fake):
    fake.queue({"text": "local"})
    link = openai_link(fake, api_key_env="")
    assert OpenAIAdapter().complete(link, request(UserMessage("hi"))).text == "local"
    assert fake.requests[0].headers["authorization"] == "present"


# ---------------------------------------------------------------- Anthropic


def test_anthropic_round_trip_tool_call(fake):
    fake.queue(
        {
            "text": "Writing.",
            "tool_calls": [{"name": "notes_write", "arguments": {"title": "t"}, "id": "tu1"}],
        }
    )
    req = request(UserMessage("hi"), system=("Be brief.", "Use tools."))
    reply = AnthropicAdapter().complete(anthropic_link(fake), req)

    assert reply.text == "Writing."
    assert reply.tool_calls == (ToolCall("tu1", "notes_write", {"title": "t"}),)
    assert reply.continuation is None
    assert reply.provider == "anthropic-fake" and reply.model == "test-model"
    body = fake.requests[0].body
    assert body["system"] == "Be brief.\n\nUse tools."
    assert body["max_tokens"] == 4096
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["tools"] == [
        {
            "name": "notes_write",
            "description": "Write a note.",
            "input_schema": NOTES_WRITE.parameters,
        }
    ]


def test_anthropic_omits_empty_system_and_tools(fake):
    fake.queue({"text": "ok"})
    AnthropicAdapter().complete(
        anthropic_link(fake), request(UserMessage("hi"), tools=(), system=())
    )
    assert "system" not in fake.requests[0].body and "tools" not in fake.requests[0].body


def test_anthropic_results_merge_into_one_user_message_before_text(fake):
    second = ToolCall("call_2", "notes_write", None, raw_arguments="{oops")
    history = (
        UserMessage("write two notes"),
        AssistantMessage("", (WRITE_CALL, second)),
        ToolResultMessage("call_1", "notes_write", "saved"),
        ToolResultMessage("call_2", "notes_write", "bad arguments", is_error=True),
        UserMessage("and then stop"),
    )
    fake.queue({"text": "Stopped."})
    reply = AnthropicAdapter().complete(anthropic_link(fake), request(*history))

    assert reply.text == "Stopped."
    messages = fake.requests[0].body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "tool_use", "id": "call_1", "name": "notes_write", "input": WRITE_CALL.arguments},
        {"type": "tool_use", "id": "call_2", "name": "notes_write", "input": {}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_1", "content": "saved", "is_error": False},
        {
            "type": "tool_result",
            "tool_use_id": "call_2",
            "content": "bad arguments",
            "is_error": True,
        },
        {"type": "text", "text": "and then stop"},
    ]


def test_anthropic_thinking_blocks_are_echoed_verbatim(fake):
    fake.queue(
        {
            "thinking": "The user wants a note.",
            "tool_calls": [{"name": "notes_write", "arguments": {"title": "t"}, "id": "tu1"}],
        },
        {"text": "Saved."},
    )
    adapter, link = AnthropicAdapter(), anthropic_link(fake)
    first = adapter.complete(link, request(UserMessage("hi")))
    assert [block["type"] for block in first.continuation] == ["thinking", "tool_use"]
    json.dumps(first.continuation)  # checkpoints store it as JSON

    history = (
        UserMessage("hi"),
        AssistantMessage(first.text, first.tool_calls),
        ToolResultMessage("tu1", "notes_write", "saved"),
    )
    second = adapter.complete(link, request(*history, continuation=first.continuation))
    assert second.text == "Saved."
    assert fake.requests[1].body["messages"][1]["content"] == first.continuation


def test_anthropic_tampered_thinking_is_rejected_and_not_retryable(fake):
    fake.queue({"thinking": "secret plan", "text": "hello"})
    adapter, link = AnthropicAdapter(), anthropic_link(fake)
    first = adapter.complete(link, request(UserMessage("hi")))
    tampered = [
        dict(block, thinking="edited") if block["type"] == "thinking" else block
        for block in first.continuation
    ]
    history = (UserMessage("hi"), AssistantMessage("hello"), UserMessage("again"))

    with pytest.raises(ProviderError) as caught:
        adapter.complete(link, request(*history, continuation=tampered))
    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert "signature" in str(caught.value)


# ---------------------------------------------------------------- strictness and keys


@pytest.mark.parametrize("make_link", [openai_link, anthropic_link])
def test_fake_rejects_an_unanswered_tool_call(fake, make_link):
    fake.queue({"text": "never sent"})
    unpaired = (UserMessage("hi"), AssistantMessage("", (WRITE_CALL,)), UserMessage("next"))
    adapter = adapter_for(make_link(fake).provider_kind)

    with pytest.raises(ProviderError) as caught:
        adapter.complete(make_link(fake), request(*unpaired))
    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert "call_1" in str(caught.value)
    assert len(fake.requests) == 1 and fake.pending == 1


@pytest.mark.parametrize("make_link", [openai_link, anthropic_link])
def test_fake_rejects_a_dotted_tool_name(fake, make_link):
    fake.queue({"text": "never sent"})
    dotted = ToolSpec("notes.write", "Write a note.", {"type": "object"})
    adapter = adapter_for(make_link(fake).provider_kind)

    with pytest.raises(ProviderError) as caught:
        adapter.complete(make_link(fake), request(UserMessage("hi"), tools=(dotted,)))
    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert fake.pending == 1


@pytest.mark.parametrize("make_link", [openai_link, anthropic_link])
def test_missing_key_variable_is_named_and_nothing_is_sent(fake, make_link, monkeypatch):
    monkeypatch.delenv("TEST_PROVIDER_KEY", raising=False)
    monkeypatch.setenv("UNRELATED_KEY", KEY)
    adapter = adapter_for(make_link(fake).provider_kind)

    with pytest.raises(ProviderError) as caught:
        adapter.complete(
            make_link(fake, api_key_env="TEST_PROVIDER_KEY"), request(UserMessage("x"))
        )
    assert "TEST_PROVIDER_KEY" in str(caught.value) and KEY not in str(caught.value)
    assert caught.value.retryable is False
    assert fake.requests == []


@pytest.mark.parametrize("make_link", [openai_link, anthropic_link])
def test_key_from_the_environment_reaches_the_wire_only(make_link, monkeypatch):
    monkeypatch.setenv("TEST_PROVIDER_KEY", KEY)
    with FakeProvider(api_key=KEY) as fake:
        fake.queue({"text": "authorised"})
        link = make_link(fake, api_key_env="TEST_PROVIDER_KEY")
        reply = adapter_for(link.provider_kind).complete(link, request(UserMessage("x")))
        assert reply.text == "authorised"
        assert KEY not in repr(fake.requests)


@pytest.mark.parametrize("make_link", [openai_link, anthropic_link])
def test_wrong_key_is_a_non_retryable_401(make_link, monkeypatch):
    monkeypatch.setenv("TEST_PROVIDER_KEY", "sk-wrong-0000000000")
    with FakeProvider(api_key=KEY) as fake:
        link = make_link(fake, api_key_env="TEST_PROVIDER_KEY")
        with pytest.raises(ProviderError) as caught:
            adapter_for(link.provider_kind).complete(link, request(UserMessage("x")))
    assert (caught.value.status, caught.value.retryable) == (401, False)


@pytest.mark.parametrize("make_link", [openai_link, anthropic_link])
def test_error_bodies_echoing_the_key_are_scrubbed(fake, make_link, monkeypatch):
    monkeypatch.setenv("TEST_PROVIDER_KEY", KEY)
    fake.queue({"status": 400, "message": f"Incorrect API key provided: {KEY}"})
    link = make_link(fake, api_key_env="TEST_PROVIDER_KEY")

    with pytest.raises(ProviderError) as caught:
        adapter_for(link.provider_kind).complete(link, request(UserMessage("x")))
    assert KEY not in str(caught.value) and "[redacted]" in str(caught.value)


@pytest.mark.parametrize("adapter_class", [OpenAIAdapter, AnthropicAdapter])
def test_clients_are_built_once_per_settings_across_threads(adapter_class):
    adapter = adapter_class()
    settings = dict(base_url="http://127.0.0.1:9/v1", api_key="k", timeout=5.0, max_retries=0)
    with ThreadPoolExecutor(16) as pool:
        clients = list(pool.map(lambda _: adapter._clients.get(**settings), range(64)))
    assert len({id(client) for client in clients}) == 1
    assert adapter._clients.get(**{**settings, "timeout": 6.0}) is not clients[0]


# ---------------------------------------------------------------- fallback (TZ-5)


@pytest.mark.parametrize("status", [500, 503, 529, 429])
def test_retryable_status_falls_back_to_the_next_link(fake, status):
    fake.queue({"status": status, "message": "busy"}, {"text": "from the fallback"})
    primary, fallback = openai_link(fake), anthropic_link(fake)

    reply, used = dispatch([primary, fallback], request(UserMessage("hi")))
    assert reply.text == "from the fallback" and used == fallback
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]
    # TZ-5: each attempt carries its own configuration's model.
    assert [r.body["model"] for r in fake.requests] == ["gpt-test", "claude-test"]


def test_timeout_falls_back(fake):
    fake.queue({"delay": 5, "text": "too late"}, {"text": "in time"})
    primary = openai_link(fake, timeout_seconds=0.3)

    reply, used = dispatch([primary, anthropic_link(fake)], request(UserMessage("hi")))
    assert reply.text == "in time" and used.provider_kind == "anthropic"
    assert fake.paths == [OPENAI_PATH, ANTHROPIC_PATH]


def test_connection_refused_falls_back(fake):
    with socket.socket() as unused:  # bound, never listening: connections are refused
        unused.bind(("127.0.0.1", 0))
        dead = Link(
            slug="dead",
            model="m",
            provider_kind="anthropic",
            base_url=f"http://127.0.0.1:{unused.getsockname()[1]}",
            max_retries=0,
        )
        fake.queue({"text": "alive"})
        reply, used = dispatch([dead, openai_link(fake)], request(UserMessage("hi")))
    assert reply.text == "alive" and used.slug == "gpt"


@pytest.mark.parametrize("status", [400, 404, 422])
def test_client_errors_never_fall_back(fake, status):
    fake.queue({"status": status, "message": "bad request"}, {"text": "must not be used"})

    with pytest.raises(ProviderError) as caught:
        dispatch([openai_link(fake), anthropic_link(fake)], request(UserMessage("hi")))
    assert (caught.value.status, caught.value.retryable) == (status, False)
    assert fake.paths == [OPENAI_PATH]
    assert fake.pending == 1


def test_sdk_retries_happen_before_falling_back(fake):
    fast = {"retry-after-ms": "1"}
    fake.queue({"status": 500, "headers": fast}, {"text": "second try"})
    reply, used = dispatch(
        [openai_link(fake, max_retries=1), anthropic_link(fake)], request(UserMessage("hi"))
    )
    assert reply.text == "second try" and used.slug == "gpt"
    assert fake.paths == [OPENAI_PATH, OPENAI_PATH]


def test_every_link_failing_raises_the_last_error(caplog, monkeypatch):
    monkeypatch.setenv("TEST_PROVIDER_KEY", KEY)
    chain = [
        scripted_link("one", turns=[{"error": {"status": 503, "message": "down"}}]),
        scripted_link("two", turns=[{"error": {"status": 502, "message": "also down"}}]),
    ]
    with (
        caplog.at_level(logging.WARNING, "agentruns.providers.dispatch"),
        pytest.raises(ProviderError) as caught,
    ):
        dispatch(chain, request(UserMessage("hi")))
    assert (caught.value.status, caught.value.retryable) == (502, True)
    assert "'one'" in caplog.text and "'two'" in caplog.text and KEY not in caplog.text


def test_links_that_cannot_be_dispatched_are_skipped():
    skipped = dataclasses.replace(
        scripted_link("skipped", turns=[{"text": "wrong"}]), dispatchable=False
    )
    reply, used = dispatch(
        [skipped, scripted_link("used", turns=[{"text": "right"}])], request(UserMessage("hi"))
    )
    assert (reply.text, used.slug) == ("right", "used")


def test_no_dispatchable_link_is_a_clear_non_retryable_error():
    skipped = dataclasses.replace(scripted_link("only"), dispatchable=False)
    with pytest.raises(ProviderError) as caught:
        dispatch([skipped], request(UserMessage("hi")))
    assert caught.value.retryable is False and "only" in str(caught.value)


def test_unknown_kind_is_not_retryable():
    link = Link(slug="odd", provider_kind="carrier-pigeon")
    with pytest.raises(ProviderError) as caught:
        dispatch([link, scripted_link()], request(UserMessage("hi")))
    assert caught.value.retryable is False


def test_adapters_are_singletons():
    assert adapter_for("openai") is adapter_for("openai")
    assert isinstance(adapter_for("scripted"), ScriptedAdapter)


# ---------------------------------------------------------------- scripted


SCRIPT = {
    "turns": [
        {"text": "first", "tool_calls": [{"name": "notes.write", "arguments": {"title": "a"}}]},
        {"text": "second", "tool_calls": [{"name": "clock.now"}, {"name": "x", "id": "mine"}]},
        {"text": "done"},
    ],
}


def scripted(*messages, **fields):
    return ScriptedAdapter().complete(scripted_link(**SCRIPT), request(*messages, **fields))


def test_scripted_first_turn_uses_wire_names_and_derived_ids():
    reply = scripted(UserMessage("go"))
    assert reply.text == "first"
    [call] = reply.tool_calls
    assert (call.name, call.arguments) == ("notes_write", {"title": "a"})
    derived = DERIVED_ID.match(call.id)
    assert derived and derived["turn"] == "0"
    assert scripted(UserMessage("go")).tool_calls == reply.tool_calls  # deterministic


def test_scripted_turn_follows_the_newest_turns_call_ids_then_counts():
    first = scripted(UserMessage("go"))
    (first_call,) = first.tool_calls
    result = ToolResultMessage(first_call.id, "notes_write", "saved")
    one = scripted(UserMessage("go"), AssistantMessage("first", first.tool_calls), result)
    assert one.text == "second"
    ids = [c.id for c in one.tool_calls]
    assert ids == [first_call.id.replace("_0_0", "_1_0"), "mine"]

    # A compaction summarised the earlier turns away: the ids still carry the turn.
    compacted = scripted(UserMessage("Summary: ..."), AssistantMessage("first", first.tool_calls))
    assert compacted.text == "second"
    # Without derived ids the assistant turns since the prompt are counted.
    counted = scripted(UserMessage("go"), AssistantMessage("first", ()), result)
    assert counted.text == "second"

    # A second prompt in the thread replays from the start, with fresh ids.
    again = scripted(UserMessage("go"), AssistantMessage("done"), UserMessage("again"))
    assert again.text == "first" and again.tool_calls[0].id != first_call.id


def test_scripted_past_the_end_finishes():
    history = [UserMessage("go")] + [AssistantMessage("t")] * 3
    assert scripted(*history).text == FINISHED
    assert ScriptedAdapter().complete(scripted_link(), request(UserMessage("go"))).text == FINISHED


def test_scripted_summary_is_deterministic():
    history = (UserMessage("go"), AssistantMessage("first"), UserMessage("more"))
    reply = scripted(*history, purpose="summary")
    assert reply.text == "Summary of 3 earlier messages." and reply.tool_calls == ()
    custom = ScriptedAdapter().complete(
        scripted_link(summary="Short."), request(*history, purpose="summary")
    )
    assert custom.text == "Short."


@pytest.mark.parametrize(("status", "retryable"), [(503, True), (429, True), (400, False)])
def test_scripted_error_turns_follow_tz5(status, retryable):
    link = scripted_link(turns=[{"error": {"status": status, "message": "scripted failure"}}])
    with pytest.raises(ProviderError) as caught:
        ScriptedAdapter().complete(link, request(UserMessage("go")))
    assert (caught.value.status, caught.value.retryable) == (status, retryable)
    assert "scripted failure" in str(caught.value)


def test_scripted_provider_falls_back_to_a_real_protocol(fake):
    fake.queue({"text": "real"})
    broken = scripted_link(turns=[{"error": {"status": 503}}])
    reply, used = dispatch([broken, anthropic_link(fake)], request(UserMessage("go")))
    assert (reply.text, used.slug) == ("real", "claude")
