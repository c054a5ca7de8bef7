"""GOV-1: every change to a catalog record is a version (who, when, what), listed over the
API with diffs, shown in the admin, and rolled back by a new version."""

from __future__ import annotations

import pytest
from django.test import Client

from agentruns.models import Configuration, McpServer, McpTool, Provider, Snippet
from agentruns.services.changes import catalog_rollback
from tests.support.catalog import make_provider, make_snippet

pytestmark = pytest.mark.django_db


def test_gov1_the_api_lists_a_configurations_versions_newest_first_with_changes(api, staff):
    make_provider("p1")
    make_provider("p2")
    make_snippet("a")
    make_snippet("b")
    created = api.post(
        "/api/configurations/",
        {"slug": "c", "name": "C", "provider": "p1", "snippets": ["a", "b"]},
        format="json",
    )
    assert created.status_code == 201
    api.patch("/api/configurations/c/", {"snippets": ["b", "a"], "provider": "p2"}, format="json")
    api.patch("/api/configurations/c/", {"name": "C"}, format="json")  # no change: no version

    rows = api.get("/api/configurations/c/versions/").json()

    assert [r["version"] for r in rows] == [2, 1]
    assert rows[0]["changed_by"] == staff.username and rows[0]["changed_at"]
    assert rows[0]["changes"] == {"provider": ["p1", "p2"], "snippets": [["a", "b"], ["b", "a"]]}
    assert rows[1]["changes"]["slug"] == [None, "c"]
    assert Configuration.objects.get(slug="c").version == 2


def test_gov1_long_text_changes_come_with_a_unified_diff(api):
    long = "\n".join(f"line {i}" for i in range(60))
    api.post("/api/snippets/", {"slug": "s", "name": "S", "text": long}, format="json")
    snippet = Snippet.objects.get(slug="s")
    api.patch(
        f"/api/snippets/{snippet.pk}/", {"text": long.replace("line 7", "LINE 7")}, format="json"
    )

    newest = api.get(f"/api/snippets/{snippet.pk}/versions/").json()[0]

    assert "-line 7" in newest["diffs"]["text"] and "+LINE 7" in newest["diffs"]["text"]
    assert newest["version"] == 2


def test_gov1_rollback_restores_a_configurations_ordered_lists_as_a_new_version(api, staff):
    make_provider("p1")
    for slug in ("a", "b", "c"):
        make_snippet(slug)
    api.post(
        "/api/configurations/",
        {"slug": "cfg", "name": "Cfg", "provider": "p1", "snippets": ["a", "b"]},
        format="json",
    )
    api.patch("/api/configurations/cfg/", {"snippets": ["c"], "model": "m2"}, format="json")

    configuration = Configuration.objects.get(slug="cfg")
    saved = catalog_rollback(obj=configuration, number=1, user=staff)

    assert saved.change_request is None
    answer = api.get("/api/configurations/cfg/").json()
    assert answer["snippets"] == ["a", "b"] and answer["model"] == ""
    configuration = Configuration.objects.get(slug="cfg")
    assert configuration.version == 3
    newest = api.get("/api/configurations/cfg/versions/").json()[0]
    assert newest["changes"]["snippets"] == [["c"], ["a", "b"]]
    assert newest["comment"] == "Rolled back to version 1."


def test_gov1_rolling_back_an_mcp_server_restores_its_tool_declarations(staff):
    from agentruns.services.changes import catalog_save

    server = McpServer.objects.create(slug="trk", name="T", url="http://127.0.0.1:9/mcp")
    tool = McpTool.objects.create(server=server, name="lookup", version="v1", output_class="secret")
    catalog_save(kind="mcp_server", pk=None, user=staff, save=lambda: server)  # version 1

    def declare_and_add():
        McpTool.objects.filter(pk=tool.pk).update(output_class="public", effect="read_only")
        McpTool.objects.create(server=server, name="extra", version="v1")
        return server

    catalog_save(kind="mcp_server", pk=server.pk, user=staff, save=declare_and_add)
    saved = catalog_rollback(obj=server, number=1, user=staff)

    assert saved.change_request is None
    tools = {t.name: (t.output_class, t.effect) for t in McpTool.objects.filter(server=server)}
    assert tools == {"lookup": ("secret", "")}
    assert McpServer.objects.get(pk=server.pk).version == 3


def test_gov1_the_admin_shows_the_history_with_diffs_and_rolls_back(staff):
    staff.is_superuser = True
    staff.save()
    client = Client()
    client.force_login(staff)
    provider = make_provider("prov", zone="external_global")
    page = f"/admin/agentruns/provider/{provider.pk}/change/"
    form = {
        "slug": "prov",
        "name": "Prov",
        "kind": "scripted",
        "trust_zone": "external_global",
        "timeout_seconds": "60",
        "max_retries": "2",
        "tool_choice": "auto",  # INT-1: the select a browser always submits
        "active": "on",
    }
    client.post(page, {**form, "name": "Renamed"})
    client.post(page, {**form, "name": "Renamed again"})

    history = client.get(f"/admin/agentruns/provider/{provider.pk}/history/")

    assert history.status_code == 200
    body = history.content.decode()
    # Made without a door (version 1 unrecorded); each admin save is a recorded version.
    assert "Version 3 (in force)" in body and "Renamed again" in body and "Version 2" in body
    client.post(f"/admin/agentruns/provider/{provider.pk}/history/rollback/", {"version": 2})
    provider = Provider.objects.get(pk=provider.pk)
    assert (provider.name, provider.version) == ("Renamed", 4)
