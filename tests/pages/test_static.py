"""UI-4 without a browser: with DEBUG off, after collectstatic, WhiteNoise serves the
admin's stylesheets, the API docs' sidecar assets and the pages' own files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client, override_settings

BASE = Path(__file__).resolve().parents[2] / "playground" / "templates" / "playground" / "base.html"


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    root = tmp_path_factory.mktemp("static")
    with override_settings(STATIC_ROOT=root):
        call_command("collectstatic", interactive=False, verbosity=0)
    return root


@pytest.fixture
def production(settings, collected):
    settings.DEBUG = False
    settings.STATIC_ROOT = collected
    settings.WHITENOISE_USE_FINDERS = False
    # A new client builds a new middleware chain, so WhiteNoise reads the new root.
    return Client()


def assets(html: str) -> list[str]:
    return re.findall(r'(?:href|src)="(/static/[^"]+)"', html)


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["/admin/login/", "/api/docs/", "/api/redoc/", "/accounts/login/"])
def test_ui4_every_asset_a_page_names_is_served_without_debug(production, page):
    html = production.get(page).content.decode()
    found = assets(html)
    assert found, html[:500]
    for url in found:
        response = production.get(url)
        assert response.status_code == 200, url
        assert b"".join(response.streaming_content) if response.streaming else response.content


def test_ui4_the_pages_load_their_scripts_from_their_own_static_files():
    sources = re.findall(r'<script src="([^"]+)"', BASE.read_text())
    assert sources == ["{% static 'playground/htmx.min.js' %}", "{% static 'playground/app.js' %}"]
