"""GOV-1: a deletion is a change too. Over the API or in the admin it is kept as the
record's last version (who, when, its final values, marked deleted), still listed by the
record's `versions` after the row is gone; a configuration that loses the deleted record
gets a version of its own; a record still in use is refused and nothing is recorded."""

from __future__ import annotations

import pytest
from django.test import Client
from reversion.models import Version

from agentruns.models import ChangeRequest, Configuration, Schedule, Skill, Snippet
from tests.support.catalog import make_provider, make_skill, make_snippet

pytestmark = pytest.mark.django_db


def test_gov1_an_api_delete_of_a_snippet_is_its_last_version_by_whom_marked_deleted(api, staff):
    api.post("/api/snippets/", {"slug": "s", "name": "S", "text": "be brief"}, format="json")
    pk = Snippet.objects.get(slug="s").pk

    assert api.delete(f"/api/snippets/{pk}/").status_code == 204

    assert not Snippet.objects.filter(pk=pk).exists()
    rows = api.get(f"/api/snippets/{pk}/versions/").json()
    assert [r["version"] for r in rows] == [2, 1]
    deleted = rows[0]
    assert deleted["changed_by"] == staff.username and deleted["changed_at"]
    assert deleted["comment"] == "Deleted by staff."
    assert deleted["changes"]["deleted"] == [False, True]
    assert deleted["changes"]["text"] == ["be brief", None]  # its final values, kept
    assert [v.object_id for v in Version.objects.get_deleted(Snippet)] == [str(pk)]


def test_gov1_an_api_delete_of_a_configuration_keeps_its_final_lists(api, staff):
    make_provider("p1")
    make_snippet("a")
    api.post(
        "/api/configurations/",
        {"slug": "c", "name": "C", "provider": "p1", "snippets": ["a"]},
        format="json",
    )

    assert api.delete("/api/configurations/c/").status_code == 204

    rows = api.get("/api/configurations/c/versions/").json()
    assert [r["version"] for r in rows] == [2, 1]
    assert rows[0]["changed_by"] == staff.username
    assert rows[0]["changes"]["deleted"] == [False, True]
    assert rows[0]["changes"]["provider"] == ["p1", None]
    assert rows[0]["changes"]["snippets"] == [["a"], None]
    assert api.get("/api/configurations/nothing/versions/").status_code == 404


def test_gov1_a_configuration_that_loses_a_deleted_snippet_gets_a_version(api, staff):
    make_provider("p1")
    make_snippet("a")
    make_snippet("b")
    api.post(
        "/api/configurations/",
        {"slug": "c", "name": "C", "provider": "p1", "snippets": ["a", "b"]},
        format="json",
    )

    api.delete(f"/api/snippets/{Snippet.objects.get(slug='a').pk}/")

    newest = api.get("/api/configurations/c/versions/").json()[0]
    assert newest["version"] == 2 and newest["changed_by"] == staff.username
    assert newest["changes"] == {"snippets": [["a", "b"], ["b"]]}  # named by its kept slug
    assert newest["comment"] == "Snippet a was deleted."
    assert Configuration.objects.get(slug="c").version == 2


def test_gov1_a_configuration_in_use_is_refused_and_no_deletion_is_recorded(api, staff):
    api.post("/api/configurations/", {"slug": "c", "name": "C"}, format="json")
    configuration = Configuration.objects.get(slug="c")
    Schedule.objects.create(
        name="morning", configuration=configuration, input="x", owner=staff, interval_seconds=60
    )

    refused = api.delete("/api/configurations/c/")

    assert refused.status_code == 409 and refused.json()["code"] == "conflict"
    assert [r["version"] for r in api.get("/api/configurations/c/versions/").json()] == [1]


def test_gov1_deleting_in_the_admin_one_or_in_bulk_records_who_deleted_each(staff):
    staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    one = make_snippet("one")
    skills = [make_skill("x"), make_skill("y")]

    client.post(f"/admin/agentruns/snippet/{one.pk}/delete/", {"post": "yes"})
    client.post(
        "/admin/agentruns/skill/",
        {"action": "delete_selected", "_selected_action": [s.pk for s in skills], "post": "yes"},
    )

    assert not Snippet.objects.exists() and not Skill.objects.exists()
    kept = [*Version.objects.get_deleted(Snippet), *Version.objects.get_deleted(Skill)]
    assert sorted(v.object_repr for v in kept) == ["one", "x", "y"]
    assert {(v.revision.user, v.revision.comment) for v in kept} == {(staff, "Deleted by staff.")}


def test_gov3_a_deletion_is_never_held_and_the_configuration_losing_it_is_versioned(
    api, staff, settings
):
    """A provider's deletion takes a configuration's provider away: a narrowing, in force
    at once even with change approval on, and a version of the configuration."""
    settings.AGENTRUNS_CHANGE_APPROVAL = True
    make_provider("p1")
    api.post("/api/configurations/", {"slug": "c", "name": "C", "provider": "p1"}, format="json")

    assert api.delete("/api/providers/p1/").status_code == 204

    assert not ChangeRequest.objects.exists()
    newest = api.get("/api/configurations/c/versions/").json()[0]
    assert newest["changes"] == {"provider": ["p1", None]}
    assert newest["comment"] == "Provider p1 was deleted."
    assert api.get("/api/providers/p1/versions/").json()[0]["changes"]["deleted"] == [False, True]


def test_gov1_the_admin_lists_deleted_records_and_shows_each_ones_history(staff):
    client = Client()
    client.force_login(staff)
    gone = make_snippet("gone")
    client.post(f"/admin/agentruns/snippet/{gone.pk}/delete/", {"post": "yes"})

    changelist = client.get("/admin/agentruns/snippet/").text
    assert 'href="/admin/agentruns/snippet/deleted/"' in changelist
    listing = client.get("/admin/agentruns/snippet/deleted/")
    assert listing.status_code == 200
    assert f'href="/admin/agentruns/snippet/{gone.pk}/history/">gone</a>' in listing.text
    assert "staff" in listing.text

    history = client.get(f"/admin/agentruns/snippet/{gone.pk}/history/")
    assert history.status_code == 200
    assert "History: gone (deleted)" in history.text and "Deleted by staff." in history.text
    assert "Roll back" not in history.text and "(in force)" not in history.text
    # An id that never was still gets the admin's "doesn't exist" redirect (SEC-3).
    assert client.get("/admin/agentruns/snippet/999999/history/").status_code == 302


def test_gov1_deleted_records_are_shown_only_to_who_may_view_them(django_user_model):
    gone = make_snippet("gone")
    root = Client()
    root.force_login(django_user_model.objects.create_superuser("root", "", "pw"))
    root.post(f"/admin/agentruns/snippet/{gone.pk}/delete/", {"post": "yes"})
    client = Client()
    client.force_login(django_user_model.objects.create_user("plain", password="pw", is_staff=True))

    assert client.get("/admin/agentruns/snippet/deleted/").status_code == 403
    history = client.get(f"/admin/agentruns/snippet/{gone.pk}/history/")
    assert history.status_code == 302 and "Deleted by" not in history.text
