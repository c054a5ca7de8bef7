"""SEC-3, SEC-7 (issue 15, "Also prove"): model output fuzzed through the fake provider —
the official SDK on a real loopback server — on PostgreSQL. Random replies: text and call
arguments of any code points (NUL, unpaired surrogates, control bytes), NaN and Infinity,
deep nesting, arguments that are not JSON, unknown tools, and random `ask_user` schemas
(from SEC-7's keywords and the ones it refuses: `$ref`, `patternProperties`, `allOf`,
catastrophic patterns). Whatever arrives:

- the run ends or parks on its first attempt, without an exception (never a step the
  store refuses, so never a retry of what cannot be stored);
- no step of it, no API call and no inbox page works for 2 s or more (CPU time, so the
  bound holds on a loaded machine) or blocks for 10 s;
- a ticket it opens shows as an inbox form and takes a random answer without a 500.

`AGENTRUNS_FUZZ_EXAMPLES` sets the number of random replies per wire (Chat Completions and
Messages; default 60, about 8 s each here).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentruns.models import Run, Ticket
from agentruns.runtime.loop import execute_run
from tests.conftest import grant
from tests.support.catalog import KEY, KEY_ENV, make_anthropic_configuration, openai_configuration
from tests.support.fake_provider import FakeProvider
from tests.support.hitl import answer, client_for, resume
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

EXAMPLES = int(os.environ.get("AGENTRUNS_FUZZ_EXAMPLES", "60"))
LIMIT_SECONDS = 2.0
BLOCKED_SECONDS = 10.0

# Any code point, surrogates included, and raw bytes read as Latin-1 (NUL, controls).
hostile_text = st.one_of(
    st.text(st.characters(blacklist_categories=()), max_size=40),
    st.binary(max_size=40).map(lambda raw: raw.decode("latin-1")),
    st.sampled_from(["\x00", "\ud800", "\udfff\ud800", "NaN", "-----BEGIN PRIVATE KEY-----"]),
)
numbers = st.one_of(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, hostile_text)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(hostile_text, inner, max_size=4)
    ),
    max_leaves=25,
)


def deeply_nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"v": [value]}
    return value


TYPES = ["object", "array", "string", "integer", "number", "boolean", "null"]
KEYWORDS = [
    "type", "properties", "required", "enum", "const", "minimum", "maximum",
    "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern",
    "minItems", "maxItems", "items", "title", "description", "default",
    "additionalProperties", "$ref", "$dynamicRef", "$defs", "patternProperties", "allOf",
    "anyOf", "not", "format", "uniqueItems", "propertyNames", "contains", "if", "then",
]  # fmt: skip
schema_leaves = st.one_of(
    st.sampled_from(TYPES),
    st.sampled_from(["^(a+)+$", "(a|a)*$", "#/$defs/x", "https://attacker.example/s", "#"]),
    st.integers(min_value=-5, max_value=50),
    st.booleans(),
    hostile_text,
)
schemas = st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(TYPES)}),
    lambda inner: st.one_of(
        st.dictionaries(st.sampled_from(KEYWORDS), st.one_of(inner, schema_leaves), max_size=5),
        st.builds(
            lambda props, required, extra: {
                "type": "object",
                "properties": props,
                "required": required,
                **extra,
            },
            st.dictionaries(st.sampled_from(["a", "b", "c.d", "e"]), inner, min_size=1, max_size=3),
            st.lists(st.sampled_from(["a", "b", "zz"]), max_size=2),
            st.dictionaries(st.sampled_from(KEYWORDS), schema_leaves, max_size=2),
        ),
        st.lists(inner, max_size=3),
    ),
    max_leaves=12,
)
SCALAR_PROPERTY = st.one_of(
    st.fixed_dictionaries({"type": st.just("string")}, optional={"pattern": schema_leaves}),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["integer", "number"])},
        optional={"minimum": numbers, "maximum": numbers},
    ),
    st.fixed_dictionaries({"type": st.just("boolean")}),
    st.fixed_dictionaries(
        {"type": st.just("array"), "items": st.fixed_dictionaries({"type": st.just("string")})}
    ),
)
# Mostly acceptable ones too, so tickets, forms and answers are reached often.
acceptable_schemas = st.builds(
    lambda props: {"type": "object", "properties": props, "required": sorted(props)[:1]},
    st.dictionaries(st.sampled_from(["a", "b", "c"]), SCALAR_PROPERTY, min_size=1, max_size=3),
)


def call(name, arguments) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


tool_calls = st.one_of(
    st.builds(call, st.just("test_echo"), st.fixed_dictionaries({"text": hostile_text})),
    st.builds(call, st.just("test_echo"), json_values),
    st.builds(call, st.just("test_echo"), hostile_text),  # not JSON at all
    st.builds(call, st.just("test_echo"), st.sampled_from([deeply_nested(40), deeply_nested(300)])),
    st.just(call("test_echo", '{"v":[' * 5000 + "1" + "]}" * 5000)),  # past the parser's limit
    st.builds(
        call,
        st.just("ask_user"),
        st.fixed_dictionaries(
            {"question": hostile_text, "schema": st.one_of(schemas, acceptable_schemas)}
        ),
    ),
    st.builds(call, hostile_text, json_values),  # a tool that does not exist
)
replies = st.one_of(
    st.fixed_dictionaries({"text": hostile_text}),
    st.fixed_dictionaries(
        {"text": hostile_text, "tool_calls": st.lists(tool_calls, min_size=1, max_size=3)}
    ),
)


def timed(what: str, action):
    """The step's own work (CPU time of this thread, where the loop, the API and the pages
    run) stays under 2 s, whatever the load of the shared machine; wall time under 10 s
    catches a step that blocks instead of working."""
    cpu, wall = time.thread_time(), time.perf_counter()
    result = action()
    cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
    assert cpu < LIMIT_SECONDS, f"{what} worked for {cpu:.2f}s"
    assert wall < BLOCKED_SECONDS, f"{what} took {wall:.2f}s"
    return result


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv(KEY_ENV, KEY)
    with FakeProvider(api_key=KEY) as server:
        yield server


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_sec7_random_model_output_never_breaks_a_run_an_api_call_or_a_page(member, fake, wire):
    fake.default = {"text": "done"}
    tools = ["ask_user", "test"]
    if wire == "openai":
        openai_configuration("fuzz", fake, allowed_tools=tools)
    else:
        keyed = {"api_key_env": KEY_ENV}
        make_anthropic_configuration("fuzz", fake, provider_kw=keyed, allowed_tools=tools)
    api = client_for(grant(member, "view_all_runs"))
    browser = Client()
    browser.force_login(member)
    # The first run imports the provider's SDK and builds its client (~1.5 s of CPU on a
    # slow machine), once per process: not the work of any step the limit bounds.
    assert execute_run(submit(member, "fuzz").pk) == "completed"

    @settings(
        max_examples=EXAMPLES,
        deadline=None,  # timed() bounds each step instead, where a hang would be
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        database=None,
    )
    @given(reply=replies, value=json_values)
    def one_reply(reply: dict[str, Any], value: Any) -> None:
        fake.clear()  # then every later turn of the run is answered "done"
        fake.queue(reply)
        run = submit(member, "fuzz")

        outcome = timed("the run", lambda: execute_run(run.pk))

        run.refresh_from_db()
        assert outcome in {"completed", "failed", "awaiting"}, (outcome, run.failure)
        assert run.attempts == 0
        if run.status == Run.Status.FAILED:
            assert (run.failure or {}).get("code") != "attempts_exhausted", run.failure
        for path in (f"/api/runs/{run.pk}/", f"/api/runs/{run.pk}/events/"):
            assert timed(path, lambda path=path: api.get(path)).status_code == 200
        ticket = Ticket.objects.filter(run=run, status=Ticket.Status.ACTIVE).first()
        if ticket is None:
            return
        card = timed("the inbox card", lambda: browser.get(f"/inbox/{ticket.correlation_id}/"))
        assert card.status_code == 200
        body = json.dumps(answer(ticket, value))  # NaN goes out as the token it is
        response = timed(
            "the answer",
            lambda: resume(api, run.pk, body, content_type="application/json"),
        )
        assert response.status_code < 500, response.content
        if response.status_code == 200:
            assert timed("the resumed run", lambda: execute_run(run.pk)) in {
                "completed",
                "failed",
                "awaiting",
            }

    one_reply()
