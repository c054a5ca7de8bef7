"""UI-6: the pages and the admin speak to people, not to the spec. Labels, section titles,
help texts, permission names and page texts carry no rule ids ("Context readout (CG-10)",
"As recorded when it was sent (GOV-2)"); the guides and the code cite them."""

from __future__ import annotations

import re

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, McpServer, Provider, Run, Snippet
from agentruns.runtime.loop import execute_run
from agentruns.services.runs import Submission, run_submit

pytestmark = pytest.mark.django_db

PREFIXES = "CG|TZ|FS|LOOP|REC|TOOL|HITL|RG|DEF|CLU|OPS|SEC|MCP|UI|FORK|DEL|GOV|SCHED|PERF|INT"
RULE_ID = re.compile(rf"\b(?:{PREFIXES})-\d+\b")


def shown(html: str) -> str:
    """What a person reads: no scripts, no comments."""
    html = re.sub(r"<script.*?</script>", "", html, flags=re.S)
    return re.sub(r"<!--.*?-->", "", html, flags=re.S)


def assert_no_rule_ids(client, url: str) -> None:
    response = client.get(url)
    assert response.status_code == 200, url
    assert RULE_ID.findall(shown(response.content.decode())) == [], url


def test_ui6_admin_pages_show_no_rule_ids(admin_client, admin_user):
    load_demo_data()
    helpdesk = Configuration.objects.get(slug="helpdesk").pk
    pages = [
        f"/admin/agentruns/configuration/{helpdesk}/change/",
        f"/admin/agentruns/configuration/{helpdesk}/run/",
        f"/admin/agentruns/configuration/{helpdesk}/history/",
        f"/admin/agentruns/provider/{Provider.objects.first().pk}/change/",
        f"/admin/agentruns/snippet/{Snippet.objects.first().pk}/change/",
        f"/admin/agentruns/mcpserver/{McpServer.objects.first().pk}/change/",
        f"/admin/auth/user/{admin_user.pk}/change/",  # the permissions' names
    ]
    for url in pages:
        assert_no_rule_ids(admin_client, url)


def test_ui6_no_admin_add_form_shows_rule_ids(admin_client):
    """Every model's add form: its labels and help texts."""
    load_demo_data()
    for model in admin.site._registry:
        if model._meta.app_label != "agentruns":
            continue
        url = f"/admin/agentruns/{model._meta.model_name}/add/"
        if admin_client.get(url).status_code == 200:
            assert_no_rule_ids(admin_client, url)


def test_ui6_no_field_label_help_text_or_permission_names_a_rule():
    for model in apps.get_app_config("agentruns").get_models():
        for field in model._meta.get_fields():
            for text in (getattr(field, "help_text", ""), getattr(field, "verbose_name", "")):
                assert not RULE_ID.search(str(text)), f"{model.__name__}.{field.name}: {text}"
    names = Permission.objects.filter(content_type__app_label="agentruns")
    assert [n for n in names.values_list("name", flat=True) if RULE_ID.search(n)] == []


def test_ui6_the_pages_people_use_show_no_rule_ids(admin_client, admin_user):
    load_demo_data()
    run, _ = run_submit(user=admin_user, submission=Submission("multi-tool-demo", "go"))
    assert execute_run(run.pk) == Run.Status.COMPLETED
    for url in (
        "/",
        "/runs/",
        f"/runs/{run.pk}/",
        f"/playground/runs/{run.pk}/",
        "/playground/",
        "/inbox/",
        "/replays/",
    ):
        assert_no_rule_ids(admin_client, url)
