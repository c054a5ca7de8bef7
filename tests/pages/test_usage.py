"""OPS-1 on the pages: the run page and the playground inspector show a run's usage and
cost as the run API reports them (the amount without the API's trailing zeros), and the
inspector each model turn's; a configuration without prices says its cost is not priced
(not 0); the tool budget's words count what the timeline shows."""

from __future__ import annotations

import re
from decimal import Decimal

import pytest

from agentruns import events as ev
from agentruns.models import Event
from agentruns.runtime.loop import execute_run
from agentruns.services.usage import money, token_cost
from tests.conftest import grant
from tests.support.catalog import scripted_configuration
from tests.support.hitl import client_for
from tests.support.runs import submit

pytestmark = pytest.mark.django_db

TURNS = [
    {"tool_calls": [{"id": "call_e", "name": "test.echo", "arguments": {"text": "hi"}}]},
    {"text": "all done"},
]


@pytest.fixture
def run(staff):
    scripted_configuration("priced", TURNS, input_token_price="3", output_token_price="15")
    run = submit(staff, "priced")
    execute_run(run.pk)
    return run


def figures(html: str, label: str) -> dict[str, str]:
    """The `data-usage` figures of the list with this accessible name (UI-3)."""
    block = re.search(rf'<ul class="counters" aria-label="{label}".*?</ul>', html, re.S)
    assert block, f"no list labelled {label!r}"
    return dict(re.findall(r'data-usage="(\w+)">([^<]*)<', block.group(0)))


def turn_usages(run) -> list[dict[str, int]]:
    rows = Event.objects.filter(run=run, type=ev.ASSISTANT).order_by("sequence")
    return [e.payload["usage"] for e in rows]


@pytest.mark.parametrize("page", ["/runs/{}/", "/playground/runs/{}/"])
def test_ops1_the_run_page_and_the_inspector_show_the_runs_usage_as_the_api_does(
    client, staff, run, page
):
    grant(staff, "use_playground")
    client.force_login(staff)
    html = client.get(page.format(run.pk)).content.decode()
    api = client_for(staff).get(f"/api/runs/{run.pk}/").json()["usage"]
    shown = figures(html, "Usage and cost")
    assert api.pop("priced") is True  # the page says so by showing a cost and its currency
    assert shown == {**{k: str(v) for k, v in api.items()}, "cost": money(Decimal(api["cost"]))}
    assert int(shown["input_tokens"]) == sum(u["input_tokens"] for u in turn_usages(run)) > 0
    assert Decimal(shown["cost"]) == Decimal(api["cost"]) > 0


def test_ops1_each_inspector_turn_card_shows_that_turns_tokens_and_cost(client, staff, run):
    grant(staff, "use_playground")
    client.force_login(staff)
    html = client.get(f"/playground/runs/{run.pk}/").content.decode()
    usages = turn_usages(run)
    assert len(usages) == 2
    for number, usage in enumerate(usages, start=1):
        cost = token_cost(
            usage["input_tokens"], usage["output_tokens"], Decimal("3"), Decimal("15")
        )
        assert figures(html, f"Usage of model turn {number}") == {
            "input_tokens": str(usage["input_tokens"]),
            "output_tokens": str(usage["output_tokens"]),
            "cost": money(cost),
            "currency": "USD",
        }


@pytest.mark.parametrize(
    ("amount", "shown"),
    [("0.000150", "0.00015"), ("1.500000", "1.50"), ("12.000000", "12.00"), ("0.000000", "0.00")],
)
def test_ops1_money_shows_cents_and_only_the_places_that_say_something(amount, shown):
    assert money(Decimal(amount)) == shown


@pytest.mark.parametrize("page", ["/runs/{}/", "/playground/runs/{}/"])
def test_ops1_a_configuration_without_prices_shows_not_priced_not_a_zero_cost(client, staff, page):
    scripted_configuration("free", TURNS)
    unpriced = submit(staff, "free")
    execute_run(unpriced.pk)
    grant(staff, "use_playground")
    client.force_login(staff)
    html = client.get(page.format(unpriced.pk)).content.decode()
    shown = figures(html, "Usage and cost")
    assert shown["cost"] == "not priced" and "currency" not in shown
    assert "0.000000" not in html


@pytest.mark.parametrize(
    ("page", "label"), [("/runs/{}/", "Counters"), ("/playground/runs/{}/", "Budget")]
)
def test_loop6_the_tool_budget_names_the_refused_calls_it_does_not_count(
    client, staff, page, label
):
    calls = [
        {"id": f"call_{n}", "name": "test.echo", "arguments": {"text": str(n)}} for n in (1, 2)
    ]
    scripted_configuration("tight", [{"tool_calls": calls}, {"text": "done"}], max_tool_calls=1)
    run = submit(staff, "tight")
    execute_run(run.pk)
    grant(staff, "use_playground")
    client.force_login(staff)
    html = client.get(page.format(run.pk)).content.decode()
    block = re.search(rf'<ul class="counters" aria-label="{label}">.*?</ul>', html, re.S)
    assert block and "tool calls: <strong>1 of 1 granted, 1 refused</strong>" in block.group(0)
