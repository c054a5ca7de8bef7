"""OPS-3: `/metrics` in Prometheus text, from the database, for staff or a bearer token."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from agentruns.models import DailyUsage, GateAudit
from tests.support.catalog import make_configuration
from tests.support.ops import answer, parked_run

pytestmark = pytest.mark.django_db

TOKEN = "metrics-token-0123456789"


def scrape(**headers) -> dict:
    response = Client().get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_ops3_refused_without_credentials_and_for_non_staff(settings, member):
    settings.AGENTRUNS_METRICS_TOKEN = TOKEN
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 401 and "Bearer" in anonymous["WWW-Authenticate"]
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong.status_code == 403
    signed_in = Client()
    signed_in.force_login(member)
    assert signed_in.get("/metrics").status_code == 403


def test_ops3_a_refusal_is_the_apis_json_error(settings, member):
    settings.AGENTRUNS_METRICS_TOKEN = TOKEN
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer nope")
    assert wrong["Content-Type"] == "application/json"
    assert wrong.json()["code"] == "not_permitted" and "Wrong token" in wrong.json()["detail"]
    assert Client().get("/metrics").json()["code"] == "not_authenticated"
    signed_in = Client()
    signed_in.force_login(member)
    assert signed_in.get("/metrics").json()["code"] == "not_permitted"


def test_ops3_without_a_configured_token_no_bearer_is_accepted(settings):
    settings.AGENTRUNS_METRICS_TOKEN = ""
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 403


def test_ops3_metrics_parse_and_count_what_the_database_holds(settings, staff):
    settings.AGENTRUNS_METRICS_TOKEN = TOKEN
    from tests.conftest import grant

    grant(staff, "approve_run")
    waiting = parked_run(staff, "m1")
    answered = parked_run(staff, "m2")
    answer(staff, answered)
    configuration = make_configuration(
        "priced", input_token_price="2.00", output_token_price="10.00"
    )
    DailyUsage.objects.create(
        configuration=configuration,
        day=timezone.now().date(),
        input_tokens=1_000_000,
        output_tokens=500_000,
    )
    GateAudit.objects.create(verdict="refused", enforcement="enforced", configuration="priced")
    samples = scrape(HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert samples[("agentruns_runs", (("status", "awaiting"),))] == 1
    assert samples[("agentruns_runs", (("status", "queued"),))] == 1
    assert samples[("agentruns_tickets_open", ())] == 1
    assert samples[("agentruns_ticket_oldest_open_age_seconds", ())] >= 0
    assert samples[("agentruns_queue_depth", ())] >= 1  # the answered run's wake-up
    assert ("agentruns_oldest_lease_age_seconds", ()) in samples
    assert samples[("agentruns_crash_reclaims_total", ())] == 0
    tokens = (("configuration", "priced"), ("direction", "input"))
    assert samples[("agentruns_tokens_total", tokens)] == 1_000_000
    assert samples[("agentruns_cost_total", (("configuration", "priced"),))] == 7.0
    refusals = (("configuration", "priced"), ("enforcement", "enforced"))
    assert samples[("agentruns_gate_refusals_total", refusals)] == 1
    assert samples[("agentruns_ticket_wait_seconds_count", ())] == 1
    assert samples[("agentruns_ticket_wait_seconds_bucket", (("le", "60.0"),))] == 1
    assert waiting != answered


def test_ops3_a_staff_session_may_scrape(staff):
    client = Client()
    client.force_login(staff)
    assert client.get("/metrics").status_code == 200
