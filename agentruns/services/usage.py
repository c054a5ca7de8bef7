"""Usage and cost (OPS-1): what turns, runs and configurations used, and what it cost.

A model turn's counts live in its `message.assistant` (and a compaction summary's in its
`compaction`) payload as `usage` {input_tokens, output_tokens}; a run's usage sums them.
Per configuration and UTC day the loop keeps `DailyUsage` counters, which the daily limit
(OPS-2), the metrics and the status page read. Cost is priced at read time from the
configuration's prices per million tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db.models import BigIntegerField, Sum
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce

from agentruns import events as ev
from agentruns.models import Configuration, DailyUsage, Event
from agentruns.models.ops import USAGE_EVENTS

MILLION = Decimal(1_000_000)


def token_cost(
    input_tokens: int, output_tokens: int, input_price: Decimal, output_price: Decimal
) -> Decimal:
    """Prices are per million tokens; the result keeps six decimal places."""
    cost = (Decimal(input_tokens) * input_price + Decimal(output_tokens) * output_price) / MILLION
    return cost.quantize(Decimal("0.000001"))


NOT_PRICED = "not priced"


def money(amount: Decimal) -> str:
    """A cost as people read it: cents at least, then only the places that say something
    (0.00015, 1.50, 12.00), never the six trailing zeros the API keeps."""
    whole, _, places = f"{amount.normalize():f}".partition(".")
    return f"{whole}.{places.ljust(2, '0')}"


@dataclass(frozen=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cost: Decimal = Decimal("0")
    # False when the configuration names no price: its cost is unknown, not nothing.
    has_prices: bool = True

    @property
    def currency(self) -> str:
        """The prices' currency: one per site, so a cost never stands without it."""
        return str(settings.AGENTRUNS_CURRENCY)

    @property
    def amount(self) -> str:
        """The cost for a page: `money`, or "not priced"."""
        return money(self.cost) if self.has_prices else NOT_PRICED

    @property
    def cost_text(self) -> str:
        return f"{self.amount} {self.currency}" if self.has_prices else NOT_PRICED

    def as_dict(self) -> dict[str, Any]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost": str(self.cost),
            "currency": self.currency,
            "priced": self.has_prices,
        }


def priced(input_tokens: int, output_tokens: int, configuration: Any) -> Usage:
    """Tokens priced with the configuration's prices (a run's, a day's or one turn's)."""
    prices = configuration.input_token_price, configuration.output_token_price
    cost = token_cost(input_tokens, output_tokens, *prices)
    return Usage(input_tokens, output_tokens, cost, has_prices=any(prices))


def turn_usage(turn: ev.AssistantMessage, configuration: Any) -> Usage:
    """One model turn's usage, from its `message.assistant` record."""
    counts = turn.usage or {}
    return priced(counts.get("input_tokens", 0), counts.get("output_tokens", 0), configuration)


def _summed(field: str) -> Coalesce:
    return Coalesce(Sum(Cast(KT(f"payload__usage__{field}"), BigIntegerField())), 0)


def runs_usage(runs: Iterable[Any]) -> dict[int, Usage]:
    """Usage per run (one query for all), priced with each run's configuration."""
    runs = list(runs)
    totals = dict(
        (row["run_id"], row)
        for row in Event.objects.filter(run_id__in=[r.pk for r in runs], type__in=USAGE_EVENTS)
        .values("run_id")
        .annotate(input=_summed("input_tokens"), output=_summed("output_tokens"))
        .order_by()
    )
    usage = {}
    for run in runs:
        row = totals.get(run.pk, {"input": 0, "output": 0})
        usage[run.pk] = priced(row["input"], row["output"], run.configuration)
    return usage


def run_usage(run: Any) -> Usage:
    return runs_usage([run])[run.pk]


@dataclass(frozen=True)
class DayUsage:
    configuration: str
    day: date
    usage: Usage

    def as_dict(self) -> dict[str, Any]:
        return {"configuration": self.configuration, "day": self.day.isoformat()} | (
            self.usage.as_dict()
        )


def daily_usage(
    *, start: date | None = None, end: date | None = None, configuration: str | None = None
) -> list[DayUsage]:
    """Per configuration per UTC day (its shards summed), newest first; `end` inclusive."""
    rows = DailyUsage.objects.all()
    if start:
        rows = rows.filter(day__gte=start)
    if end:
        rows = rows.filter(day__lte=end)
    if configuration:
        rows = rows.filter(configuration__slug=configuration)
    days = (
        rows.values("configuration", "day")
        .annotate(i=Sum("input_tokens"), o=Sum("output_tokens"))
        .order_by("-day", "configuration")
    )
    configurations = Configuration.objects.in_bulk({day["configuration"] for day in days})
    return [
        DayUsage(
            configurations[day["configuration"]].slug,
            day["day"],
            priced(day["i"], day["o"], configurations[day["configuration"]]),
        )
        for day in days
    ]


def day_usage(row: DailyUsage) -> Usage:
    """One shard row's usage, priced (the admin lists the rows as stored)."""
    return priced(row.input_tokens, row.output_tokens, row.configuration)


def usage_totals() -> dict[str, Usage]:
    """All-time usage per configuration slug (the metrics' counters)."""
    rows = (
        DailyUsage.objects.values("configuration")
        .annotate(i=Sum("input_tokens"), o=Sum("output_tokens"))
        .order_by()
    )
    configurations = {c.pk: c for c in Configuration.objects.all()}
    totals = {}
    for row in rows:
        c = configurations[row["configuration"]]
        totals[c.slug] = priced(row["i"], row["o"], c)
    return totals
