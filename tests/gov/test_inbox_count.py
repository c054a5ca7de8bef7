"""GOV-3, HITL-9: the Inbox badge (the nav's, the home page's, the cards' poll) counts what
the inbox shows its viewer to decide: the tickets they may answer and the held catalog
changes they may approve (never their own), in statements that do not grow with them
(PERF-8)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from tests.conftest import grant
from tests.support.catalog import make_provider

pytestmark = pytest.mark.django_db


@pytest.fixture
def approver(django_user_model):
    user = django_user_model.objects.create_user("approver", password="pw", is_staff=True)
    return grant(user, "approve_change")


@pytest.fixture
def held(api, settings):
    """A change request `staff` made, waiting for someone else."""
    settings.AGENTRUNS_CHANGE_APPROVAL = True

    def hold(slug: str) -> None:
        make_provider(slug, zone="external_global")
        answer = api.patch(f"/api/providers/{slug}/", {"trust_zone": "local"}, format="json")
        assert answer.status_code == 202

    return hold


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def badge(page: str) -> int:
    found = re.search(r'id="nav-inbox-count"[^>]*>(\d+)</span>', page)
    assert found, page
    return int(found.group(1))


def test_gov3_a_change_waiting_for_the_viewer_is_counted_wherever_the_badge_shows(approver, held):
    held("prov")
    client = signed_in(approver)

    home = client.get("/").content.decode()
    assert badge(home) == 1
    assert re.search(r'Inbox <span class="badge">1</span>', home)
    assert badge(client.get("/inbox/count/").content.decode()) == 1
    assert badge(client.get("/inbox/cards/").content.decode()) == 1
    assert "prov" in client.get("/inbox/").content.decode()


def test_gov3_the_requesters_own_change_is_shown_but_not_counted(staff, held):
    grant(staff, "approve_change")
    held("prov")
    client = signed_in(staff)

    assert "prov" in client.get("/inbox/").content.decode()
    assert badge(client.get("/inbox/count/").content.decode()) == 0


def test_perf8_the_badge_counts_in_statements_that_do_not_grow_with_the_changes(approver, held):
    held("one")
    client = signed_in(approver)

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert badge(client.get("/inbox/count/").content.decode()) == len(held_slugs)
        return len(captured.captured_queries)

    held_slugs = ["one"]
    one = statements()
    for slug in ("two", "three"):
        held(slug)
        held_slugs.append(slug)
    assert statements() == one
