"""OPS-1 usage and cost; OPS-2 daily limits."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agentruns.models import DailyUsage, Event, Run
from agentruns.providers import scripted as scripted_provider
from agentruns.providers.base import ProviderRequest, UserMessage
from agentruns.providers.tokens import text_tokens
from agentruns.runtime.loop import execute_run
from agentruns.services.usage import daily_usage, run_usage
from tests.support.catalog import make_configuration, make_openai_configuration, make_provider
from tests.support.fake_provider import OPENAI_PATH, FakeProvider
from tests.support.ops import client_for

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
    # "other" names no price: its cost is unknown, not nothing.
    assert {r["configuration"]: (r["cost"], r["priced"]) for r in today} == {
        "other": ("0.000000", False),
        "priced": ("0.021000", True),
    }
    assert api.get("/api/usage/", {"from": "nope"}).status_code == 400
    assert client_for(member).get("/api/usage/").status_code == 403


# --- in the loop -------------------------------------------------------------------------

CLOCK = {"id": "call_clock", "name": "clock_now", "arguments": {}}


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def fallback_pair(fake, **kw):
    """`primary` (OpenAI wire) falls back to `backup` (Anthropic wire), one fake server."""
    backup = make_configuration(
        "backup",
        provider=make_provider(
            "anthropic-fake",
            zone="local",
            kind="anthropic",
            base_url=fake.anthropic_base_url,
            max_retries=0,
        ),
        model="claude-test",
    )
    return make_openai_configuration(
        "primary", fake, fallbacks=[backup], allowed_tools=["clock"], **kw
    )


def submitted(user, slug: str, text: str = "What time is it?") -> int:
    response = client_for(user).post(
        "/api/runs/", {"configuration": slug, "input": text}, format="json"
    )
    assert response.status_code == 201, response.content
    return response.json()["id"]


def assistant_usage(run_id: int) -> list[dict]:
    rows = Event.objects.filter(run_id=run_id, type="message.assistant").order_by("sequence")
    return [payload["usage"] for payload in rows.values_list("payload", flat=True)]


def test_ops1_usage_and_cost_sum_over_a_multi_turn_run_with_fallback(fake, staff):
    """Turn 1 by the primary (OpenAI's prompt/completion tokens), turn 2 by the fallback
    after a 503 (Anthropic's input/output tokens): each turn's counts in its payload, the
    run's total and cost priced by the run's configuration, and the day's counter."""
    fallback_pair(fake, input_token_price="2.50", output_token_price="10.00")

    def reply(body: dict, path: str) -> dict:
        if len(body["messages"]) > 1:  # the clock's result is in
            if path == OPENAI_PATH:
                return {"status": 503, "message": "overloaded"}
            return {"text": "It is now."}
        return {"text": "", "tool_calls": [CLOCK]}

    fake.default = reply
    run_id = submitted(staff, "primary")
    assert execute_run(run_id) == "completed"
    assert [r.path == OPENAI_PATH for r in fake.requests] == [True, True, False]
    turns = assistant_usage(run_id)
    assert len(turns) == 2 and all(t["input_tokens"] > 0 and t["output_tokens"] > 0 for t in turns)
    spent_in = sum(t["input_tokens"] for t in turns)
    spent_out = sum(t["output_tokens"] for t in turns)
    cost = (Decimal(spent_in) * Decimal("2.50") + Decimal(spent_out) * 10) / 1_000_000
    usage = client_for(staff).get(f"/api/runs/{run_id}/").json()["usage"]
    assert usage == {
        "input_tokens": spent_in,
        "output_tokens": spent_out,
        "cost": str(cost.quantize(Decimal("0.000001"))),
        "currency": "USD",  # AGENTRUNS_CURRENCY's default
        "priced": True,
    }
    listed = client_for(staff).get("/api/runs/").json()["results"][0]
    assert listed["usage"] == usage
    [day] = daily_usage(configuration="primary")
    assert (day.usage.input_tokens, day.usage.output_tokens) == (spent_in, spent_out)


def test_ops2_a_limit_crossed_mid_run_fails_it_before_the_next_send(fake, staff):
    fallback_pair(fake, daily_token_limit=10)  # the first turn alone uses more
    fake.default = lambda body, path: (
        {"text": "done"} if len(body["messages"]) > 1 else {"text": "", "tool_calls": [CLOCK]}
    )
    run_id = submitted(staff, "primary")
    assert execute_run(run_id) == "failed"
    assert len(fake.requests) == 1  # nothing sent after the limit was reached
    run = Run.objects.get(pk=run_id)
    assert run.failure["code"] == "daily_limit_reached" and run.failure["limit"] == 10
    again = client_for(staff).post(
        "/api/runs/", {"configuration": "primary", "input": "And now?"}, format="json"
    )
    assert again.status_code == 429 and again.json()["code"] == "daily_limit_reached"


@pytest.mark.parametrize(("limit", "reads"), [(None, 0), (10**12, 1)])
def test_ops2_the_limit_costs_one_read_per_claim_and_nothing_without_one(staff, limit, reads):
    scripted(
        "metered",
        [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}, {"text": "hi"}],
        allowed_tools=["clock"],
        daily_token_limit=limit,
    )
    run_id = submitted(staff, "metered")
    with CaptureQueriesContext(connection) as seen:
        assert execute_run(run_id) == "completed"
    counter_reads = [
        q for q in seen if q["sql"].startswith("SELECT") and "agentruns_dailyusage" in q["sql"]
    ]
    # Two model turns: the first reads the counter; the second uses the total its
    # predecessor's step statement returned.
    assert len(counter_reads) == reads
    assert DailyUsage.used_today(Run.objects.get().configuration_id) > 0


def test_ops1_a_compaction_summary_call_counts_too(staff):
    scripted("tight", [{"text": "ok"}], context_budget_tokens=400)
    api = client_for(staff)
    words = " ".join(f"word{i}" for i in range(150))
    first = api.post("/api/runs/", {"configuration": "tight", "input": words}, format="json")
    assert execute_run(first.json()["id"]) == "completed"
    body = {"configuration": "tight", "input": "again " + words, "thread": first.json()["thread"]}
    second = api.post("/api/runs/", body, format="json").json()["id"]
    assert execute_run(second) == "completed"
    [compaction] = Event.objects.filter(run_id=second, type="compaction")
    summary = compaction.payload["usage"]
    assert summary["input_tokens"] > 0 and summary["output_tokens"] > 0
    turns = assistant_usage(second)
    usage = run_usage(Run.objects.get(pk=second))
    assert usage.input_tokens == summary["input_tokens"] + sum(t["input_tokens"] for t in turns)
    [day] = daily_usage(configuration="tight")  # the two runs' shards, summed
    first_usage = run_usage(Run.objects.get(pk=first.json()["id"]))
    assert day.usage.input_tokens == usage.input_tokens + first_usage.input_tokens


def test_ops1_the_run_admin_shows_usage_and_cost(staff, django_user_model):
    from django.test import Client

    scripted("shown", [{"text": "hi"}], input_token_price="1000000")
    run_id = submitted(staff, "shown")
    assert execute_run(run_id) == "completed"
    used = run_usage(Run.objects.get(pk=run_id))
    root = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(root)
    page = client.get(f"/admin/agentruns/run/{run_id}/change/").content.decode()
    expected = f"{used.input_tokens} input + {used.output_tokens} output tokens = {used.cost_text}"
    assert used.cost == used.input_tokens and expected in page
    assert used.cost_text == f"{used.input_tokens}.00 USD"


def test_ops1_prices_and_the_limit_are_edited_on_the_configuration(staff, django_user_model):
    from django.test import Client

    configuration = scripted("edit-me", [])
    root = django_user_model.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(root)
    page = client.get("/admin/agentruns/configuration/").content.decode()
    assert "edit-me" in page
    form = client.get(f"/admin/agentruns/configuration/{configuration.pk}/change/")
    for name in ("input_token_price", "output_token_price", "daily_token_limit"):
        assert f'name="{name}"' in form.content.decode()
    api = client_for(staff)
    patched = api.patch(
        "/api/configurations/edit-me/",
        {"input_token_price": "3.00", "daily_token_limit": 5000},
        format="json",
    )
    assert patched.status_code == 200, patched.content
    assert patched.json()["input_token_price"] == "3.0000"
    assert patched.json()["daily_token_limit"] == 5000


def test_ops1_a_blank_price_in_a_form_means_zero():
    configuration = scripted("blank-price", [])
    configuration.input_token_price = None
    configuration.full_clean()
    configuration.save()
    configuration.refresh_from_db()
    assert configuration.input_token_price == 0


def test_ops2_perf6_a_runs_limit_counts_every_shard_of_the_day(staff):
    """Runs of one configuration count into shards of the day (so a thousand of them never
    queue on one row's lock); the total a step statement hands back, which the next turn's
    limit check uses, is every shard's."""
    turns = [{"tool_calls": [{"name": "clock.now", "arguments": {}}]}, {"text": "hi"}]
    scripted("sharded", turns, allowed_tools=["clock"])
    first = submitted(staff, "sharded")
    assert execute_run(first) == "completed"
    spent = run_usage(Run.objects.get(pk=first))
    # The second run's first turn takes the day past the limit only with the first run's
    # tokens counted: its second turn is then refused.
    limit = spent.input_tokens + spent.output_tokens + 1
    configuration = Run.objects.get(pk=first).configuration
    configuration.daily_token_limit = limit
    configuration.save()
    second = submitted(staff, "sharded")
    assert second % DailyUsage.SHARDS != first % DailyUsage.SHARDS
    assert execute_run(second) == "failed"
    assert Run.objects.get(pk=second).failure["code"] == "daily_limit_reached"
    assert DailyUsage.objects.filter(configuration=configuration).count() == 2


def test_ops1_the_scripted_provider_counts_every_new_message_afresh():
    """The scripted provider remembers a message's count by the object: messages made and
    dropped one after another (CPython hands their ids out again) are each counted as
    they are, past the memo's bound too."""
    for n in range(scripted_provider._COUNTED_LIMIT + 200):
        text = "word " * (n % 17) + str(n)
        request = ProviderRequest(model="m", system=(), messages=(UserMessage(text),))
        assert scripted_provider._usage(request, "", ())["input_tokens"] == text_tokens(text)
