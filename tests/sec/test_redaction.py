"""SEC-4, CG-11: every secret shape the hardening review found is redacted with its kind;
ordinary text is left alone; the Idempotency-Key digest is an HMAC of the raw request;
typed answers are validated after redaction."""

from __future__ import annotations

import time

import pytest

from agentruns.models import Run
from agentruns.runtime.redaction import redact, redact_value
from agentruns.services.runs import Submission

GH = "ghp_" + "Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"

# (text, the secret that must vanish, the kind reported)
SHAPES = [
    ('{"password": "hunter2"}', "hunter2", "password"),
    ("{'password': 'hunter2'}", "hunter2", "password"),
    ("DB_PASSWORD=s3cr3t-value", "s3cr3t-value", "password"),
    (f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}", AWS_SECRET, "api_key"),
    (f"export GITHUB_TOKEN={GH}", GH, "token"),
    ("GITHUB_TOKEN=plainvalue123", "plainvalue123", "token"),
    ("postgres://app:pw-in-url@db.internal:5432/app", "pw-in-url", "password"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "password"),
    ("Authorization: Bearer abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx", "token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstu", "github_pat_11ABCDEFG", "token"),
    ("sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc", "4eC39HqLyjWDarjtT1zdp7dc", "api_key"),
    ("glpat-" + "xY9zW8vU7tS6rQ5pO4nM", "xY9zW8vU7tS6rQ5pO4nM", "token"),
    ("hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567", "aBcDeFgHiJkLmNoPqRsTuVwXyZ", "token"),
    ("npm_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789", "aBcDeFgHiJkLmNoPqRsTuVwXyZ", "token"),
    ("password => correcthorse", "correcthorse", "password"),
    ("sk-" + "abcdefghijklmnopqrstuvwx", "abcdefghijklmnopqrstuvwx", "api_key"),
    ("sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2", "A1b2C3d4E5f6G7h8I9j0K1l2", "api_key"),
    ("sk-ant-api03-" + "A1b2C3d4E5f6G7h8I9j0K1l2", "A1b2C3d4E5f6G7h8I9j0K1l2", "api_key"),
    ("xoxb-" + "123456789012-abcdefghijkl", "123456789012-abcdefghijkl", "token"),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "api_key"),
    (
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "dozjgNryP4J3jVmNHl0w5N",
        "token",
    ),
    ("client_secret: 'abc.def.ghi'", "abc.def.ghi", "secret"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----",
        "MIIEow",
        "private_key",
    ),
]


@pytest.mark.parametrize(("text", "secret", "kind"), SHAPES, ids=[s[0][:24] for s in SHAPES])
def test_every_secret_shape_is_redacted_with_its_kind(text, secret, kind):
    """SEC-4: each shape the review found passing through is now replaced by a marker."""
    clean, kinds = redact(text)
    assert secret not in clean
    assert f"[REDACTED:{kind}]" in clean
    assert kinds.get(kind, 0) >= 1


def test_a_redacted_assignment_keeps_its_name_and_quotes():
    assert redact('{"password": "hunter2", "user": "bob"}')[0] == (
        '{"password": "[REDACTED:password]", "user": "bob"}'
    )
    assert redact("DB_PASSWORD=x1 rest")[0] == "DB_PASSWORD=[REDACTED:password] rest"
    # A value that is already a marker is not counted twice.
    assert redact(f"GITHUB_TOKEN={GH}") == ("GITHUB_TOKEN=[REDACTED:token]", {"token": 1})


ORDINARY = [
    "Summarise the release notes in three short paragraphs and cite the runbook.",
    "Ticket 7c9e6679-7425-40de-944b-e07fc1f90ae7 tracks the rollout.",
    "sha256: 3f786850e387550fdab836ed7e6dc881de23001b3f786850e387550fdab836ed",
    "See https://docs.example.com/v1/guide?page=2#auth and postgres://db.internal:5432/app",
    "max_tokens: 1024, tokens: 5, tokenizer = cl100k_base",
    "A basic knowledge of the domain helps; keys are rotated monthly.",
    "The model answered in 12.5 seconds at 10:30:00 UTC on 2026-12-01.",
    "Use the primary key of the table and the sort order `created_at`.",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text):
    """CG-11 without false positives: prose, UUIDs, digests and URLs without passwords."""
    assert redact(text) == (text, {})


def test_redact_value_looks_at_keys():
    """SEC-4: a value under a secret-like key is a secret whatever it looks like; shape and
    other values stay as they were."""
    value = {
        "api_key": "abc",
        "nested": {"Password": "x", "count": 1, "items": [{"auth_token": "t"}]},
        "max_tokens": "5",
        "note": "password: hunter2",
    }
    clean, kinds = redact_value(value)
    assert clean == {
        "api_key": "[REDACTED:api_key]",
        "nested": {
            "Password": "[REDACTED:password]",
            "count": 1,
            "items": [{"auth_token": "[REDACTED:token]"}],
        },
        "max_tokens": "5",
        "note": "password: [REDACTED:password]",
    }
    assert kinds == {"api_key": 1, "password": 2, "token": 1}


def test_redaction_is_fast_on_ordinary_text():
    """It runs on every send; a generous bound that still catches a catastrophic pattern."""
    text = " ".join(ORDINARY) * 30
    started = time.perf_counter()
    for _ in range(20):
        redact(text)
    per_kb = (time.perf_counter() - started) / 20 / (len(text) / 1024)
    assert per_kb < 0.005, f"{per_kb * 1e6:.0f} us per KB"


@pytest.mark.django_db
def test_the_idempotency_digest_is_an_hmac_of_the_raw_request(settings):
    """CLU-5, SEC-4: bodies differing only in a secret digest differently (so the second
    conflicts), the digest is keyed by the server secret and the secret is not in it."""
    one = Submission(configuration="c", input="deploy with password: alpha1")
    two = Submission(configuration="c", input="deploy with password: bravo2")
    assert redact(one.input)[0] == redact(two.input)[0]
    assert one.digest() != two.digest()
    first = one.digest()
    settings.SECRET_KEY = "another-server-secret-entirely-0123456789"
    assert one.digest() != first


@pytest.mark.django_db
def test_a_replayed_key_with_a_different_secret_conflicts(api, staff):
    """CLU-5: same Idempotency-Key, bodies differing only in the secret: 409, one run, and
    neither secret stored."""
    from tests.support.catalog import make_configuration

    make_configuration("idem")
    body = {"configuration": "idem", "input": "use password: alpha1"}
    first = api.post("/api/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert first.status_code == 201, first.content
    again = api.post("/api/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    other = {**body, "input": "use password: bravo2"}
    conflict = api.post("/api/runs/", other, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert conflict.status_code == 409, conflict.content
    assert Run.objects.count() == 1
    run = Run.objects.get()
    assert "alpha1" not in run.input and "alpha1" not in run.request_digest


@pytest.mark.django_db
def test_the_raw_input_is_never_written_not_even_briefly(api):
    """SEC-4: an INSERT of the raw text followed by an UPDATE would leave the secret in a
    dead row version and in the WAL; no statement of a submission carries it."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.support.catalog import make_configuration

    make_configuration("raw")
    with CaptureQueriesContext(connection) as queries:
        response = api.post(
            "/api/runs/", {"configuration": "raw", "input": f"use {GH} now"}, format="json"
        )
    assert response.status_code == 201, response.content
    assert any("agentruns_run" in q["sql"] and "INSERT" in q["sql"] for q in queries)
    assert [q["sql"] for q in queries if GH in q["sql"]] == []
