"""UI-4: under the production settings (DEBUG off, WhiteNoise, after collectstatic) the
admin is styled and the API docs render from local assets, in a real browser against a
real `manage.py runserver` process — not the test server, which serves files itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Response, expect

from tests.support.servers import production_server as running


@pytest.fixture
def production_server(transactional_db, tmp_path: Path) -> Iterator[str]:
    with running(tmp_path) as server:
        yield server.url


def test_ui4_admin_styles_and_api_docs_assets_load_without_debug(
    browser: Browser, production_server: str, screenshot
):
    context = browser.new_context(
        base_url=production_server, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    static: list[Response] = []
    page.on("response", lambda r: static.append(r) if "/static/" in r.url else None)

    page.goto("/admin/login/")
    expect(page.locator("#header")).to_be_visible()
    # Styled: the admin's stylesheet paints its header; unstyled it is transparent.
    header = page.eval_on_selector("#header", "e => getComputedStyle(e).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent")
    screenshot(page, "admin-login")

    page.goto("/api/docs/")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("agentruns API")
    expect(page.locator(".opblock").first).to_be_visible()

    page.goto("/api/redoc/")
    expect(page.locator("h1").first).to_contain_text("agentruns API")

    page.goto("/accounts/login/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    # UI-7: every page links the icon, and /favicon.ico is there for whoever asks anyway.
    expect(page.locator('link[rel="icon"]')).to_have_attribute(
        "href", "/static/playground/favicon.svg"
    )
    icon = page.request.get("/favicon.ico")
    assert icon.status == 200 and icon.headers["content-type"].startswith("image/")
    context.close()

    kinds = {r.url.split("/static/")[1].split("/")[0] for r in static}
    assert {"admin", "drf_spectacular_sidecar", "playground"} <= kinds, kinds
    failed = [(r.url, r.status) for r in static if r.status != 200]
    assert not failed, failed


def test_ui7_the_api_docs_load_everything_from_this_site_and_name_operations_in_words(
    browser: Browser, production_server: str, django_user_model, screenshot
):
    """Redoc asks for no Google Fonts and nothing from cdn.redoc.ly; Swagger's example
    request for POST /api/runs/ is one the demo data accepts (tests/api/test_docs.py posts
    them all)."""
    context = browser.new_context(
        base_url=production_server, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    requested: list[str] = []
    page.on("request", lambda r: requested.append(r.url))

    page.goto("/api/redoc/")
    menu = page.locator("[role=menuitem]", has_text="Start a run (or dry-run one)")
    expect(menu.first).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("runs_create")
    expect(page.locator("body")).not_to_contain_text("audit_retrieve")
    expect(page.get_by_alt_text("redocly logo")).to_have_attribute(
        "src", "/static/playground/favicon.svg"
    )
    screenshot(page, "api-redoc", full_page=False)

    page.goto("/api/docs/")
    runs = page.locator("#operations-runs-runs_create")
    runs.locator(".opblock-summary").click()
    expect(runs).to_contain_text("Start a run (or dry-run one)")
    body = runs.locator(".opblock-section-request-body")
    expect(body).to_contain_text('"configuration": "multi-tool-demo"')
    expect(body).to_contain_text('"input": "Write the standup note"')
    expect(body).not_to_contain_text('"thread"')  # no generated values (was "thread": 1)
    screenshot(page, "api-docs", full_page=False)
    context.close()

    # blob: is the worker Redoc builds from its own script; everything else is this server.
    elsewhere = [
        url
        for url in requested
        if not url.startswith((production_server, f"blob:{production_server}", "data:"))
    ]
    assert not elsewhere, elsewhere
    assert any("/api/schema/" in url for url in requested)
