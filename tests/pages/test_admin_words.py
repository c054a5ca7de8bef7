"""UI-6: the admin speaks to people, not to the spec. Its labels, section titles and help
texts carry no rule ids ("Context readout (CG-10)"); the guides and the code cite them."""

from __future__ import annotations

import re

import pytest

from agentruns.demo import load_demo_data
from agentruns.models import Configuration, McpServer, Provider, Snippet

pytestmark = pytest.mark.django_db

RULE_ID = re.compile(r"\b(?:CG|TZ|FS|LOOP|REC|TOOL|HITL|RG|DEF|CLU|OPS|SEC|MCP|UI|FORK)-\d+\b")


def test_ui6_admin_pages_show_no_rule_ids(admin_client):
    load_demo_data()
    pages = [
        f"/admin/agentruns/configuration/{Configuration.objects.get(slug='helpdesk').pk}/change/",
        f"/admin/agentruns/configuration/{Configuration.objects.get(slug='helpdesk').pk}/run/",
        f"/admin/agentruns/provider/{Provider.objects.first().pk}/change/",
        f"/admin/agentruns/snippet/{Snippet.objects.first().pk}/change/",
        f"/admin/agentruns/mcpserver/{McpServer.objects.first().pk}/change/",
    ]
    for url in pages:
        response = admin_client.get(url)
        assert response.status_code == 200, url
        shown = re.sub(r"<script.*?</script>", "", response.content.decode(), flags=re.S)
        assert RULE_ID.findall(shown) == [], url
