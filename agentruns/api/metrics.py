"""`GET /metrics` (OPS-3): Prometheus text, computed from the database at scrape time, so
the web process and every worker report the same figures whichever one is scraped.

For staff sessions or `Authorization: Bearer $AGENTRUNS_METRICS_TOKEN`; 401 without
credentials, 403 for a signed-in non-staff user or a wrong token.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, DurationField, ExpressionWrapper, F, Min, Q, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django_q.models import OrmQ
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from agentruns.models import GateAudit, Run, Ticket, WebhookDelivery
from agentruns.policy import may_see_metrics
from agentruns.services.usage import usage_totals

# Ticket wait time (opened → answered or expired), in seconds: a minute to a week.
WAIT_BUCKETS = (60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0, 7 * 24 * 3600.0)


class DatabaseCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield from self._runs(now)
        yield from self._tickets(now)
        yield from self._usage()
        refusals = CounterMetricFamily(
            "agentruns_gate_refusals",
            "Context gate refusals (CG-4), enforced and observed.",
            labels=["configuration", "enforcement"],
        )
        refused = GateAudit.objects.filter(verdict="refused").order_by()
        for row in refused.values("configuration", "enforcement").annotate(n=Count("id")):
            refusals.add_metric([row["configuration"], row["enforcement"]], row["n"])
        yield refusals
        deliveries = GaugeMetricFamily(
            "agentruns_webhook_deliveries", "Webhook deliveries by status.", labels=["status"]
        )
        by_status = dict(
            WebhookDelivery.objects.order_by().values_list("status").annotate(n=Count("id"))
        )
        for status in WebhookDelivery.Status.values:
            deliveries.add_metric([status], by_status.get(status, 0))
        yield deliveries

    def _runs(self, now: object) -> Iterator[Metric]:
        runs = GaugeMetricFamily("agentruns_runs", "Runs by status.", labels=["status"])
        by_status = dict(Run.objects.order_by().values_list("status").annotate(n=Count("id")))
        for status in Run.Status.values:
            runs.add_metric([status], by_status.get(status, 0))
        yield runs
        yield GaugeMetricFamily(
            "agentruns_queue_depth",
            "Wake-ups waiting in the task queue.",
            value=OrmQ.objects.filter(Q(lock__lte=now) | Q(lock__isnull=True)).count(),
        )
        lease = float(settings.AGENTRUNS_LEASE_SECONDS)
        oldest = Run.objects.filter(status=Run.Status.RUNNING).aggregate(t=Min("lease_expires_at"))
        age = 0.0
        if oldest["t"] is not None:
            age = max(0.0, (now - (oldest["t"] - timedelta(seconds=lease))).total_seconds())
        yield GaugeMetricFamily(
            "agentruns_oldest_lease_age_seconds",
            "Seconds since the stalest running lease was last renewed.",
            value=age,
        )
        reclaims = Run.objects.aggregate(n=Sum("attempts"))["n"] or 0
        yield CounterMetricFamily(
            "agentruns_crash_reclaims",
            "Runs reclaimed after their worker's lease expired (CLU-3).",
            value=reclaims,
        )

    def _tickets(self, now: object) -> Iterator[Metric]:
        active = Ticket.objects.filter(status=Ticket.Status.ACTIVE)
        yield GaugeMetricFamily("agentruns_tickets_open", "Active tickets.", value=active.count())
        opened = active.aggregate(t=Min("created_at"))["t"]
        yield GaugeMetricFamily(
            "agentruns_ticket_oldest_open_age_seconds",
            "Age of the oldest active ticket.",
            value=(now - opened).total_seconds() if opened else 0.0,
        )
        waited = ExpressionWrapper(F("resolved_at") - F("created_at"), output_field=DurationField())
        resolved = Ticket.objects.filter(
            status__in=[Ticket.Status.ANSWERED, Ticket.Status.EXPIRED], resolved_at__isnull=False
        ).annotate(waited=waited)
        buckets = {
            f"le{i}": Count("id", filter=Q(waited__lte=timedelta(seconds=le)))
            for i, le in enumerate(WAIT_BUCKETS)
        }
        row = resolved.aggregate(total=Count("id"), seconds=Sum("waited"), **buckets)
        histogram = HistogramMetricFamily(
            "agentruns_ticket_wait_seconds",
            "Time from a ticket opening to its answer or expiry.",
            buckets=[
                *((str(le), row[f"le{i}"]) for i, le in enumerate(WAIT_BUCKETS)),
                ("+Inf", row["total"]),
            ],
            sum_value=row["seconds"].total_seconds() if row["seconds"] else 0.0,
        )
        yield histogram

    def _usage(self) -> Iterator[Metric]:
        tokens = CounterMetricFamily(
            "agentruns_tokens",
            "Model tokens used, by configuration and direction (OPS-1).",
            labels=["configuration", "direction"],
        )
        cost = CounterMetricFamily(
            "agentruns_cost", "Cost of model tokens (OPS-1).", labels=["configuration"]
        )
        for slug, usage in sorted(usage_totals().items()):
            tokens.add_metric([slug, "input"], usage.input_tokens)
            tokens.add_metric([slug, "output"], usage.output_tokens)
            cost.add_metric([slug], float(usage.cost))
        yield tokens
        yield cost


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return registry


def _refused(status: int, code: str, detail: str) -> HttpResponse:
    """The API's error shape (§11), so a scraper's operator reads one vocabulary."""
    return JsonResponse({"code": code, "detail": detail}, status=status)


def _denied(request: HttpRequest) -> HttpResponse | None:
    token = str(settings.AGENTRUNS_METRICS_TOKEN or "")
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        offered = header.removeprefix("Bearer ").strip()
        if token and hmac.compare_digest(offered.encode(), token.encode()):
            return None
        return _refused(403, "not_permitted", "Wrong token (AGENTRUNS_METRICS_TOKEN).")
    user = request.user
    if user.is_authenticated:
        if may_see_metrics(user):
            return None
        return _refused(403, "not_permitted", "The metrics are for staff.")
    response = _refused(
        401,
        "not_authenticated",
        "Authentication required: a staff session "
        "or Authorization: Bearer <AGENTRUNS_METRICS_TOKEN>.",
    )
    response["WWW-Authenticate"] = 'Bearer realm="agentruns metrics"'
    return response


def metrics_view(request: HttpRequest) -> HttpResponse:
    denied = _denied(request)
    if denied is not None:
        return denied
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)
