"""SEC-4, CG-11: the redaction gaps of issue 15 (item 8), one test each — names ending in
`_KEY`, a bare `key` that is a name, non-string and nested values under secret keys, a
URL password without a user, an Authorization value in JSON, a private key cut before
its END line, PGP private key blocks — and prose that only looks like them left alone.
Each gap is also shown where it mattered: tool arguments reach the log redacted."""

from __future__ import annotations

import json

import pytest

from agentruns.models import Event, ToolInvocation
from agentruns.runtime.loop import execute_run
from agentruns.runtime.redaction import redact, redact_value
from tests.support.crash import make_openai_configuration, submit
from tests.support.fake_provider import FakeProvider

PEM_BODY = "MIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gunVTLw7onL"
PGP_BODY = "lQOYBF0hAAABCADLgc1kqKtWqKSjLM5MN6fZYYb7hgCoJN0fWvz5O2Sg4WGIqFCe"


def hidden(text: str, secret: str, kind: str) -> str:
    clean, kinds = redact(text)
    assert secret not in clean, clean
    assert f"[REDACTED:{kind}]" in clean and kinds[kind] >= 1
    return clean


@pytest.mark.parametrize("name", ["SIGNING_KEY", "ENCRYPTION_KEY", "master-key", "jwt_key"])
def test_sec4_a_name_ending_in_key_is_a_secret_name(name):
    clean = hidden(f"{name}=abcdef123456", "abcdef123456", "api_key")
    assert clean.startswith(name)


def test_sec4_a_quoted_bare_key_is_a_secret_name():
    assert hidden('{"key": "abcdef123456"}', "abcdef123456", "api_key") == (
        '{"key": "[REDACTED:api_key]"}'
    )


def test_sec4_a_key_query_parameter_is_a_secret():
    clean = hidden("https://maps.example/api?q=x&key=AbC123xyz&z=1", "AbC123xyz", "api_key")
    assert clean.endswith("&z=1")


@pytest.mark.parametrize("prose", ["the key: patience", "monkey: banana", "keys=3", "key points"])
def test_sec4_prose_that_only_looks_like_a_key_is_left_alone(prose):
    assert redact(prose) == (prose, {})


@pytest.mark.parametrize(
    ("value", "secret"),
    [
        ({"password": 12345678}, 12345678),
        ({"pin_password": 4.5}, 4.5),
        ({"api_key": {"value": "hunter2"}}, "hunter2"),
        ({"credentials": {"user": "ada", "pass": "hunter2"}}, "hunter2"),
        ({"secret": [{"k": ["deep", "hunter2"]}]}, "hunter2"),
        ({"key": "abc"}, "abc"),
    ],
)
def test_sec4_everything_under_a_secret_key_is_redacted_whatever_its_type(value, secret):
    clean, kinds = redact_value(value)
    assert json.dumps(secret) not in json.dumps(clean), clean
    assert sum(kinds.values()) >= 1


def test_sec4_a_secret_keys_shape_and_flags_stay():
    clean, _ = redact_value({"password": {"remember": True, "hint": None, "v": "x"}})
    assert clean == {"password": {"remember": True, "hint": None, "v": "[REDACTED:password]"}}


def test_sec4_a_schema_field_named_password_is_no_password():
    """Under JSON Schema's `properties` an object describes a field; it is kept."""
    schema = {"type": "object", "properties": {"password": {"type": "string", "minLength": 8}}}
    assert redact_value({"schema": schema}) == ({"schema": schema}, {})


def test_sec4_a_url_password_without_a_user_is_a_secret():
    clean = hidden("redis://:pw-abc123@cache:6379/0", "pw-abc123", "password")
    assert clean == "redis://:[REDACTED:password]@cache:6379/0"
    assert redact("http://host:8080/path@x") == ("http://host:8080/path@x", {})


@pytest.mark.parametrize("header", ["Bearer short1", "token short2", "Basic x", "Digest d=1"])
def test_sec4_an_authorization_value_in_json_is_a_secret_however_short(header):
    clean, kinds = redact_value({"headers": {"Authorization": header}})
    assert clean == {"headers": {"Authorization": "[REDACTED:token]"}}
    assert kinds == {"token": 1}


def test_sec4_a_private_key_cut_before_its_end_line_is_a_secret_to_the_end():
    cut = f"page start\n-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n{PEM_BODY[:20]}"
    clean = hidden(cut, PEM_BODY[:20], "private_key")
    assert clean == "page start\n[REDACTED:private_key]"


def test_sec4_a_pgp_private_key_block_is_a_secret():
    block = (
        f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{PGP_BODY}\n=AbCd\n"
        "-----END PGP PRIVATE KEY BLOCK-----\nafter"
    )
    clean = hidden(block, PGP_BODY, "private_key")
    assert clean == "[REDACTED:private_key]\nafter"


def test_sec4_a_complete_pem_block_ends_at_its_end_line():
    text = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----\nkept"
    assert hidden(text, PEM_BODY, "private_key") == "[REDACTED:private_key]\nkept"


@pytest.mark.django_db
def test_sec4_tool_arguments_are_stored_redacted(staff):
    """Where it mattered: the model's call arguments reach the log and the invocation row
    with each gap closed (a numeric password, a nested secret, a JSON Authorization)."""
    arguments = {
        "text": "SIGNING_KEY=abcdef123456 and redis://:pw-abc123@cache/0",
        "password": 12345678,
        "headers": {"Authorization": "token short2"},
        "credentials": {"user": "ada", "pass": "hunter2"},
    }
    with FakeProvider() as fake:
        make_openai_configuration("c", fake, allowed_tools=["test.echo"])
        call = {"id": "c1", "name": "test_echo", "arguments": arguments}
        fake.queue({"tool_calls": [call]}, {"text": "done"})
        run = submit(staff, "c")
        execute_run(run.pk)
        sent = json.dumps(fake.requests[-1].body)
    stored = json.dumps(
        [e.payload for e in Event.objects.filter(run=run)]
        + [i.arguments for i in ToolInvocation.objects.filter(run=run)]
    )
    for secret in ("abcdef123456", "pw-abc123", "12345678", "short2", "hunter2"):
        assert secret not in stored and secret not in sent, secret
