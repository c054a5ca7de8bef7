"""OPS-1: a cost never stands without its currency. The site's prices are in one currency
(AGENTRUNS_CURRENCY, USD unless set), named on the run page, in the API's usage and in
the price fields' help."""

from __future__ import annotations

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Configuration
from tests.support.hitl import client_for
from tests.support.runs import prompt

pytestmark = pytest.mark.django_db


def test_ops1_every_cost_names_the_sites_currency(client, staff, settings):
    load_demo_data()
    settings.AGENTRUNS_CURRENCY = "EUR"
    run = prompt(staff, "multi-tool-demo", "Write the standup note")
    client.force_login(staff)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert '<span data-usage="currency">EUR</span>' in page
    usage = client_for(staff).get(f"/api/runs/{run.pk}/").json()["usage"]
    assert usage["currency"] == "EUR" and float(usage["cost"]) > 0
    price = Configuration._meta.get_field("input_token_price")
    assert "currency" in str(price.help_text) and "(OPS-" not in str(price.help_text)
