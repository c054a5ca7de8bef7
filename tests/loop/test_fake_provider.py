"""The fake provider is only useful if it refuses what the real APIs refuse: raw HTTP here."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.support.fake_provider import ANTHROPIC_PATH, OPENAI_PATH, FakeProvider

OPENAI_HEADERS = {"Authorization": "Bearer sk-local"}
ANTHROPIC_HEADERS = {"x-api-key": "sk-local", "anthropic-version": "2023-06-01"}


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider(default={"text": "default"}) as server:
        yield server


def chat(fake: FakeProvider, messages: list, headers=OPENAI_HEADERS, **body) -> httpx.Response:
    payload = {"model": "m", "messages": messages, **body}
    return httpx.post(fake.url + OPENAI_PATH, json=payload, headers=headers)


def messages(fake: FakeProvider, msgs: list, headers=ANTHROPIC_HEADERS, **body) -> httpx.Response:
    payload = {"model": "m", "max_tokens": 10, "messages": msgs, **body}
    return httpx.post(fake.url + ANTHROPIC_PATH, json=payload, headers=headers)


def call(id_: str, name: str = "notes_write") -> dict:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": "{}"}}


def use(id_: str, name: str = "notes_write") -> dict:
    return {"type": "tool_use", "id": id_, "name": name, "input": {}}


def result(id_: str) -> dict:
    return {"type": "tool_result", "tool_use_id": id_, "content": "ok"}


USER = {"role": "user", "content": "hi"}


# ---------------------------------------------------------------- Chat Completions


def test_openai_accepts_a_paired_history_and_answers_in_the_real_shape(fake):
    fake.queue({"text": "", "tool_calls": [{"name": "clock_now", "arguments": {}}]})
    history = [
        USER,
        {"role": "assistant", "content": None, "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
    ]
    response = chat(fake, history)
    assert response.status_code == 200
    body = response.json()
    assert body["object"] == "chat.completion"
    [choice] = body["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "clock_now",
        "arguments": "{}",
    }
    assert body["usage"]["total_tokens"] == (
        body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    )


@pytest.mark.parametrize(
    ("history", "fragment"),
    [
        (
            [USER, {"role": "assistant", "tool_calls": [call("a")]}, USER],
            "did not have response messages: a",
        ),
        ([USER, {"role": "assistant", "tool_calls": [call("a")]}], "did not have response"),
        ([USER, {"role": "tool", "tool_call_id": "a", "content": "x"}], "role 'tool'"),
        (
            [
                USER,
                {"role": "assistant", "tool_calls": [call("a")]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "tool", "tool_call_id": "a", "content": "again"},
            ],
            "role 'tool'",
        ),
        (
            [
                USER,
                {"role": "assistant", "tool_calls": [call("a")]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
                {"role": "assistant", "tool_calls": [call("a")]},
                {"role": "tool", "tool_call_id": "a", "content": "1"},
            ],
            "Duplicate tool_call id",
        ),
        ([USER, {"role": "assistant", "tool_calls": []}], "empty array"),
        ([USER, {"role": "assistant", "tool_calls": [call("a", "notes.write")]}], "name"),
    ],
)
def test_openai_rejects_what_the_real_api_rejects(fake, history, fragment):
    response = chat(fake, history)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]
    assert fake.requests[-1].body["messages"] == history


def test_openai_rejects_dotted_tool_names(fake):
    tool = {"type": "function", "function": {"name": "notes.write", "parameters": {}}}
    response = chat(fake, [USER], tools=[tool])
    assert response.status_code == 400 and "tools[0]" in response.json()["error"]["message"]


# ---------------------------------------------------------------- Messages


def test_anthropic_accepts_a_paired_history(fake):
    fake.queue({"thinking": "hmm", "text": "ok", "tool_calls": [{"name": "x", "id": "t9"}]})
    history = [
        USER,
        {"role": "assistant", "content": [{"type": "text", "text": "a"}, use("t1"), use("t2")]},
        {"role": "user", "content": [result("t2"), result("t1"), {"type": "text", "text": "go"}]},
    ]
    response = messages(fake, history, system="be brief")
    assert response.status_code == 200
    body = response.json()
    assert body["type"] == "message" and body["stop_reason"] == "tool_use"
    assert [b["type"] for b in body["content"]] == ["thinking", "text", "tool_use"]
    assert body["content"][0]["signature"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "first message"),
        ({"messages": [{"role": "system", "content": "x"}, USER]}, 'Unexpected role "system"'),
        ({"messages": [USER], "max_tokens": None}, "max_tokens"),
        (
            {
                "messages": [
                    USER,
                    {"role": "assistant", "content": [use("t1")]},
                    {"role": "user", "content": "no result"},
                ]
            },
            "without `tool_result` blocks immediately after: t1",
        ),
        (
            {
                "messages": [
                    USER,
                    {"role": "assistant", "content": [use("t1")]},
                    {"role": "user", "content": [{"type": "text", "text": "x"}, result("t1")]},
                ]
            },
            "must come first",
        ),
        (
            {
                "messages": [
                    USER,
                    {"role": "assistant", "content": "plain"},
                    {"role": "user", "content": [result("t1")]},
                ]
            },
            "unexpected `tool_use_id`",
        ),
        (
            {
                "messages": [
                    USER,
                    {"role": "assistant", "content": [use("t1")]},
                    {"role": "user", "content": [result("t1")]},
                    {"role": "assistant", "content": [use("t1")]},
                    {"role": "user", "content": [result("t1")]},
                ]
            },
            "must be unique",
        ),
        ({"messages": [USER], "tools": [{"name": "notes.write", "input_schema": {}}]}, "tools.0"),
        ({"messages": [{"role": "user", "content": ""}]}, "non-empty"),
    ],
)
def test_anthropic_rejects_what_the_real_api_rejects(fake, body, fragment):
    payload = {"model": "m", "max_tokens": 10, **body}
    if payload["max_tokens"] is None:
        del payload["max_tokens"]
    response = httpx.post(fake.url + ANTHROPIC_PATH, json=payload, headers=ANTHROPIC_HEADERS)
    assert response.status_code == 400
    error = response.json()
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    assert fragment in error["error"]["message"]


def test_anthropic_requires_a_version_header(fake):
    response = messages(fake, [USER], headers={"x-api-key": "k"})
    assert response.status_code == 400 and "anthropic-version" in response.text


# ---------------------------------------------------------------- behaviour


@pytest.mark.parametrize(
    ("path", "headers"),
    [(OPENAI_PATH, {}), (ANTHROPIC_PATH, {"anthropic-version": "2023-06-01"})],
)
def test_missing_credentials_get_401(fake, path, headers):
    response = httpx.post(fake.url + path, json={"model": "m"}, headers=headers)
    assert response.status_code == 401


def test_bodies_must_be_json(fake):
    response = httpx.post(fake.url + OPENAI_PATH, content=b"{nope", headers=OPENAI_HEADERS)
    assert response.status_code == 400 and "JSON" in response.json()["error"]["message"]


def test_requests_are_logged_without_credentials(fake):
    chat(fake, [USER])
    messages(fake, [USER])
    openai, anthropic = fake.requests
    assert openai.headers["authorization"] == "present"
    assert anthropic.headers["x-api-key"] == "present"
    assert "sk-local" not in repr(fake.requests)
    assert anthropic.body["messages"] == [USER]
    fake.clear()
    assert fake.requests == []


def test_queue_is_shared_across_protocols_then_falls_to_default(fake):
    fake.queue({"text": "one"}, {"status": 503, "message": "busy"})
    assert chat(fake, [USER]).json()["choices"][0]["message"]["content"] == "one"
    busy = messages(fake, [USER])
    assert busy.status_code == 503 and busy.json()["error"]["message"] == "busy"
    assert chat(fake, [USER]).json()["choices"][0]["message"]["content"] == "default"


def test_an_exhausted_script_without_default_is_a_500():
    with FakeProvider() as fake:
        response = chat(fake, [USER])
    assert response.status_code == 500 and "script exhausted" in response.text


def test_callable_items_see_the_request(fake):
    seen = []

    def echo(body, path):
        seen.append(path)
        return {"text": body["messages"][-1]["content"].upper()}

    fake.queue(echo)
    assert messages(fake, [USER]).json()["content"] == [{"type": "text", "text": "HI"}]
    assert seen == [ANTHROPIC_PATH]


def test_other_processes_can_use_it_by_url(fake):
    fake.queue({"text": "from a child"})
    code = (
        "import httpx, sys; r = httpx.post(sys.argv[1], json={'model': 'm', 'messages': "
        "[{'role': 'user', 'content': 'hi'}]}, headers={'Authorization': 'Bearer k'}); "
        "print(r.json()['choices'][0]['message']['content'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, fake.openai_base_url + "/chat/completions"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == "from a child"


def test_stop_does_not_wait_for_a_delayed_reply():
    arrived = threading.Event()

    def slow(body, path):
        arrived.set()
        return {"delay": 60, "text": "never"}

    fake = FakeProvider().start()
    fake.queue(slow)
    outcome: list[object] = []
    client = threading.Thread(target=lambda: outcome.append(_try_chat(fake.url)))
    client.start()
    assert arrived.wait(10)
    started = time.monotonic()
    fake.stop()
    client.join(10)
    assert time.monotonic() - started < 5
    assert outcome and isinstance(outcome[0], httpx.HTTPError)


def _try_chat(url: str) -> object:
    try:
        return httpx.post(
            url + OPENAI_PATH,
            json={"model": "m", "messages": [USER]},
            headers=OPENAI_HEADERS,
            timeout=30,
        )
    except httpx.HTTPError as error:
        return error


def test_latency_is_served_concurrently():
    body = {"model": "m", "messages": [USER]}
    with FakeProvider(default={"text": "slow"}, latency=0.5) as fake, httpx.Client() as client:

        def post(_: int) -> int:
            return client.post(
                fake.url + OPENAI_PATH, json=body, headers=OPENAI_HEADERS
            ).status_code

        started = time.monotonic()
        with ThreadPoolExecutor(50) as pool:
            codes = list(pool.map(post, range(50)))
        elapsed = time.monotonic() - started
    assert codes == [200] * 50
    assert 0.5 <= elapsed < 10  # serially this would take 25 s
