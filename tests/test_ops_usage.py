"""OPS-1 usage and cost; OPS-2 daily limits."""

from __future__ import annotations

import pytest

from agentruns.models import DailyUsage, Run
from tests.factories import make_configuration, make_provider
from tests.ops_support import client_for

pytestmark = pytest.mark.django_db


def scripted(slug: str, turns: list, **kw):
    return make_configuration(
        slug, provider=make_provider(f"{slug}-p", zone="local"), script={"turns": turns}, **kw
    )


def test_ops2_a_submission_over_the_daily_limit_gets_429_and_no_run(staff):
    configuration = scripted("capped", [{"text": "hi"}], daily_token_limit=100)
    DailyUsage.add(configuration.pk, 60, 40)
    response = client_for(staff).post(
        "/api/runs/", {"configuration": "capped", "input": "go"}, format="json"
    )
    assert response.status_code == 429
    assert response.json()["code"] == "daily_limit_reached" and response.json()["limit"] == 100
    assert not Run.objects.exists()
    dry = client_for(staff).post(
        "/api/runs/", {"configuration": "capped", "input": "go", "dry_run": True}, format="json"
    )
    assert dry.status_code == 200  # a dry run sends nothing


def test_ops2_under_the_limit_or_without_one_submissions_pass(staff):
    capped = scripted("capped", [{"text": "hi"}], daily_token_limit=100)
    DailyUsage.add(capped.pk, 60, 39)
    scripted("free", [{"text": "hi"}])
    api = client_for(staff)
    for slug in ("capped", "free"):
        response = api.post("/api/runs/", {"configuration": slug, "input": "go"}, format="json")
        assert response.status_code == 201


def test_ops1_the_day_counter_accumulates_per_configuration_and_day():
    configuration = scripted("c", [])
    DailyUsage.add(configuration.pk, 5, 7)
    DailyUsage.add(configuration.pk, 1, 2)
    row = DailyUsage.objects.get()
    assert (row.input_tokens, row.output_tokens, row.day) == (6, 9, DailyUsage.today())
    assert DailyUsage.used_today(configuration.pk) == 15


def test_ops1_usage_api_gives_tokens_and_cost_per_configuration_per_day(staff, member):
    from datetime import timedelta

    priced = scripted("priced", [], input_token_price="3", output_token_price="15")
    DailyUsage.objects.create(
        configuration=priced,
        day=DailyUsage.today() - timedelta(days=1),
        input_tokens=1_000_000,
        output_tokens=100_000,
    )
    DailyUsage.add(priced.pk, 2000, 1000)
    DailyUsage.add(scripted("other", []).pk, 1, 1)
    api = client_for(staff)
    rows = api.get("/api/usage/", {"configuration": "priced"}).json()["results"]
    assert [(r["day"], r["input_tokens"], r["cost"]) for r in rows] == [
        (DailyUsage.today().isoformat(), 2000, "0.021000"),
        ((DailyUsage.today() - timedelta(days=1)).isoformat(), 1_000_000, "4.500000"),
    ]
    today = api.get("/api/usage/", {"from": DailyUsage.today().isoformat()}).json()["results"]
    assert sorted(r["configuration"] for r in today) == ["other", "priced"]
    assert api.get("/api/usage/", {"from": "nope"}).status_code == 400
    assert client_for(member).get("/api/usage/").status_code == 403
