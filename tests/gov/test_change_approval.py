"""GOV-3: with AGENTRUNS_CHANGE_APPROVAL=on a change that widens what may leave or weakens
who decides is held as a change request until another holder of approve_change approves
it; a narrowing change takes effect at once; which fields widen is one table."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from agentruns.models import ChangeRequest, Configuration, Provider, Snippet
from agentruns.widening import WIDENS
from tests.conftest import grant
from tests.support.catalog import make_configuration, make_provider, make_snippet

pytestmark = pytest.mark.django_db

# Per entry of the table: a change that widens and one that does not.
EXAMPLES = {
    ("provider", "trust_zone"): (["external_global", "local"], ["local", "external_eu"]),
    ("snippet", "data_class"): (["restricted", "internal"], ["internal", "secret"]),
    ("skill", "data_class"): (["", "public"], ["public", ""]),
    ("configuration", "provider"): (["p1", "p2"], ["p1", "p1"]),
    ("configuration", "fallbacks"): ([["a"], ["a", "b"]], [["a"], ["a"]]),
    ("configuration", "system_prompt_data_class"): (["secret", "public"], ["public", "internal"]),
    ("configuration", "allowed_tools"): ([["notes.read"], ["notes"]], [["notes"], ["notes.read"]]),
    ("configuration", "approval_exempt_tools"): ([[], ["notes.write"]], [["notes.write"], []]),
    ("configuration", "delegates"): ([[], ["lookup-demo"]], [["lookup-demo"], []]),
    ("configuration", "approvals_required"): ([2, 1], [1, 3]),
    ("configuration", "require_second_approver"): ([True, False], [False, True]),
    ("configuration", "approver_groups"): ([["ops"], ["ops", "all"]], [["ops"], ["ops"]]),
    ("mcp_server", "output_class"): (["secret", "internal"], ["internal", "secret"]),
    ("mcp_server", "effect"): (["write", "read_only"], ["read_only", "write"]),
    ("mcp_server", "tools"): (
        [
            {"t": {"output_class": "", "effect": "write"}},
            {"t": {"output_class": "", "effect": "read_only"}},
        ],
        [
            {"t": {"output_class": "public", "effect": ""}},
            {"t": {"output_class": "secret", "effect": ""}},
        ],
    ),
    ("webhook", "trust_zone"): (["external_global", "private_hosted"], ["local", "external_eu"]),
}


def test_gov3_every_widening_field_has_its_examples():
    assert set(EXAMPLES) == {(kind, name) for kind, rules in WIDENS.items() for name in rules}


@pytest.mark.parametrize("entry", sorted(EXAMPLES), ids=lambda e: f"{e[0]}.{e[1]}")
def test_gov3_each_field_widens_one_way_and_not_the_other(entry):
    kind, name = entry
    widening, narrowing = EXAMPLES[entry]
    rule = WIDENS[kind][name]
    assert rule(*widening) is True
    assert rule(*narrowing) is False


@pytest.fixture
def approval_on(settings):
    settings.AGENTRUNS_CHANGE_APPROVAL = True


@pytest.fixture
def approver(django_user_model):
    user = django_user_model.objects.create_user("approver", password="pw", is_staff=True)
    return grant(user, "approve_change")


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_gov3_a_widening_change_is_held_and_approved_by_another(api, staff, approver, approval_on):
    make_provider("prov", zone="external_global")

    held = api.patch("/api/providers/prov/", {"trust_zone": "local", "name": "N"}, format="json")

    assert held.status_code == 202
    body = held.json()
    assert body["object"] == {"kind": "provider", "key": "prov"}
    assert body["changes"]["trust_zone"] == ["external_global", "local"]
    assert (body["status"], body["requested_by"]) == ("pending", "staff")
    provider = Provider.objects.get(slug="prov")
    assert (provider.trust_zone, provider.name, provider.version) == ("external_global", "Prov", 1)
    listed = api.get("/api/change-requests/").json()
    assert [row["id"] for row in listed["results"]] == [body["id"]]

    approved = client_for(approver).post(f"/api/change-requests/{body['id']}/approve/")

    assert approved.status_code == 200 and approved.json()["status"] == "approved"
    provider.refresh_from_db()
    assert (provider.trust_zone, provider.name, provider.version) == ("local", "N", 2)
    newest = api.get("/api/providers/prov/versions/").json()[0]
    assert newest["changed_by"] == "staff" and "approved by approver" in newest["comment"]


def test_gov3_the_requester_may_not_approve_their_own(api, staff, approval_on):
    grant(staff, "approve_change")
    make_provider("prov", zone="external_global")
    held = api.patch("/api/providers/prov/", {"trust_zone": "local"}, format="json").json()

    answer = api.post(f"/api/change-requests/{held['id']}/approve/")

    assert answer.status_code == 403 and answer.json()["code"] == "self_approval"
    assert ChangeRequest.objects.get(pk=held["id"]).status == "pending"


def test_gov3_without_approve_change_nobody_decides(api, staff, approval_on, django_user_model):
    make_provider("prov", zone="external_global")
    held = api.patch("/api/providers/prov/", {"trust_zone": "local"}, format="json").json()
    other = django_user_model.objects.create_user("other", password="pw", is_staff=True)

    answer = client_for(other).post(f"/api/change-requests/{held['id']}/reject/")

    assert answer.status_code == 403
    assert ChangeRequest.objects.get(pk=held["id"]).status == "pending"


def test_gov3_narrowing_and_creations_apply_at_once(api, approval_on):
    make_provider("prov", zone="local")

    narrowed = api.patch("/api/providers/prov/", {"trust_zone": "external_global"}, format="json")
    created = api.post(
        "/api/providers/", {"slug": "new", "name": "New", "kind": "scripted", "trust_zone": "local"}
    )

    assert narrowed.status_code == 200 and created.status_code == 201
    assert Provider.objects.get(slug="prov").trust_zone == "external_global"
    assert not ChangeRequest.objects.exists()


def test_gov3_off_by_default_a_widening_change_applies(api):
    make_provider("prov", zone="external_global")

    answer = api.patch("/api/providers/prov/", {"trust_zone": "local"}, format="json")

    assert answer.status_code == 200 and Provider.objects.get(slug="prov").trust_zone == "local"


def test_gov3_a_held_configuration_change_keeps_its_lists(api, approver, approval_on):
    make_provider("p1")
    make_provider("p2")
    make_snippet("a")
    make_configuration("fb", provider=None)
    make_configuration("cfg", provider=Provider.objects.get(slug="p1"))

    held = api.patch(
        "/api/configurations/cfg/",
        {"provider": "p2", "fallbacks": ["fb"], "snippets": ["a"]},
        format="json",
    )

    assert held.status_code == 202
    configuration = Configuration.objects.get(slug="cfg")
    assert configuration.provider.slug == "p1"
    assert not configuration.fallback_links.exists() and not configuration.snippets.exists()
    client_for(approver).post(f"/api/change-requests/{held.json()['id']}/approve/")
    configuration.refresh_from_db()
    assert configuration.provider.slug == "p2"
    assert [link.fallback.slug for link in configuration.fallback_links.all()] == ["fb"]
    assert [s.slug for s in configuration.snippets.all()] == ["a"]


def test_gov3_the_admin_save_says_the_change_is_held(staff, approval_on):
    staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    provider = make_provider("prov", zone="external_global")
    form = {
        "slug": "prov",
        "name": "Prov",
        "kind": "scripted",
        "trust_zone": "local",
        "timeout_seconds": "60",
        "max_retries": "2",
        "tool_choice": "auto",  # INT-1: the select a browser always submits
        "active": "on",
    }

    page = client.post(f"/admin/agentruns/provider/{provider.pk}/change/", form, follow=True)

    assert "Held for approval as change request" in page.content.decode()
    assert Provider.objects.get(pk=provider.pk).trust_zone == "external_global"


def test_gov3_the_inbox_card_shows_the_diff_without_text_its_viewer_may_not_read(
    staff, approver, approval_on
):
    snippet = make_snippet("s", data_class="secret", text="the launch codes")
    client_for(staff).patch(
        f"/api/snippets/{snippet.pk}/", {"data_class": "public", "text": "leaked"}, format="json"
    )
    client = Client()
    client.force_login(approver)

    page = client.get("/inbox/").content.decode()

    assert "data-change-request=" in page and "public" in page
    assert "the launch codes" not in page and "leaked" not in page
    grant(approver, "view_snippet")
    page = Client()
    page.force_login(approver)
    assert "the launch codes" in page.get("/inbox/").content.decode()

    request = ChangeRequest.objects.get()
    page.post(f"/inbox/changes/{request.pk}/decide/", {"action": "approve"})
    assert Snippet.objects.get(pk=snippet.pk).data_class == "public"
