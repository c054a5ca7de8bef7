"""The configuration admin's playground links and forced-source runs (FS-5), via the same
form and services as the playground."""

from __future__ import annotations

import re

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, Run, Snippet
from tests.conftest import grant

pytestmark = pytest.mark.django_db


@pytest.fixture
def helpdesk():
    load_demo_data()
    return Configuration.objects.get(slug="helpdesk")


def grant_admin_of_configurations(user):
    return grant(user, "view_configuration", "change_configuration")


def test_the_change_page_offers_the_playground_to_staff_with_the_permission(
    client, staff, helpdesk
):
    client.force_login(grant_admin_of_configurations(staff))
    page = client.get(f"/admin/agentruns/configuration/{helpdesk.pk}/change/").content.decode()
    assert 'href="/playground/?configuration=helpdesk">Try in playground' in page
    assert f'href="/admin/agentruns/configuration/{helpdesk.pk}/run/">Run with forced' in page


def test_fs5_staff_without_the_permission_get_neither_link_nor_form(
    client, django_user_model, helpdesk
):
    other = django_user_model.objects.create_user("editor", password="pw", is_staff=True)
    client.force_login(grant_admin_of_configurations(other))
    page = client.get(f"/admin/agentruns/configuration/{helpdesk.pk}/change/").content.decode()
    assert "Try in playground" not in page and "Run with forced sources" not in page
    url = f"/admin/agentruns/configuration/{helpdesk.pk}/run/"
    assert client.get(url).status_code == 403
    assert client.post(url, {"task": "go"}).status_code == 403
    assert not Run.objects.exists()


def test_a_forced_source_run_from_the_admin_goes_through_run_submit(client, staff, helpdesk):
    client.force_login(grant_admin_of_configurations(staff))
    url = f"/admin/agentruns/configuration/{helpdesk.pk}/run/"
    form = client.get(url).content.decode()
    assert "merger-plans" in form and "Project Falcon" not in form
    changelog = Snippet.objects.get(slug="changelog")
    response = client.post(url, {"task": "Release notes", "snippets": [changelog.pk]})
    run = Run.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/playground/runs/{run.pk}/"
    assert run.configuration == helpdesk and run.forced_snippet_ids == [changelog.pk]
    assert run.created_by == staff


def test_an_empty_task_in_the_admin_form_is_explained(client, staff, helpdesk):
    client.force_login(grant_admin_of_configurations(staff))
    page = client.post(
        f"/admin/agentruns/configuration/{helpdesk.pk}/run/", {"task": " "}
    ).content.decode()
    assert "Give the task to run." in page
    assert not Run.objects.exists()


def test_fs5_the_admins_message_says_whether_sources_were_forced(client, staff, helpdesk):
    client.force_login(grant_admin_of_configurations(staff))
    url = f"/admin/agentruns/configuration/{helpdesk.pk}/run/"
    changelog = Snippet.objects.get(slug="changelog")

    plain = client.post(url, {"task": "Plain", "action": "run"}, follow=True).content.decode()
    forced = client.post(
        url, {"task": "Forced", "action": "run", "snippets": [changelog.pk]}, follow=True
    ).content.decode()

    first, second = Run.objects.order_by("id")
    assert f"Run #{first.pk} started without forced sources." in plain
    assert f"Run #{second.pk} started with the forced sources." in forced


def test_ui7_the_admin_forms_run_and_update_readout_are_one_kind_of_button(client, staff, helpdesk):
    client.force_login(grant_admin_of_configurations(staff))
    page = client.get(f"/admin/agentruns/configuration/{helpdesk.pk}/run/").content.decode()
    row = page[page.index('<div class="submit-row">') :]
    row = row[: row.index("</div>")]
    buttons = re.findall(r'<(\w+) type="submit"[^>]*class="([^"]*)"[^>]*>\s*([^<]*)<', row)
    assert [(tag, label) for tag, _, label in buttons] == [
        ("button", "Run"),
        ("button", "Update readout"),
    ]
    assert all("button" in classes.split() for _, classes, _ in buttons)
