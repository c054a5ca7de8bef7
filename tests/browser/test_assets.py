"""UI-4: under the production settings (DEBUG off, WhiteNoise, after collectstatic) the
admin is styled and the API docs render from local assets, in a real browser against a
real `manage.py runserver` process — not the test server, which serves files itself."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Browser, Response, expect

from agentruns.cluster.process import manage_py, wait_for
from tests.support.runs import current_database_url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def production_server(transactional_db, tmp_path: Path) -> Iterator[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": current_database_url(),
        "SECRET_KEY": settings.SECRET_KEY,
        "AGENTRUNS_STATIC_ROOT": str(tmp_path / "static"),
        "AGENTRUNS_VAR_DIR": str(tmp_path / "var"),
        "DEBUG": "0",
    }
    manage = [sys.executable, str(manage_py())]
    subprocess.run([*manage, "collectstatic", "--noinput", "-v0"], env=env, check=True)
    port = free_port()
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen(
        [*manage, "runserver", f"127.0.0.1:{port}", "--noreload"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def listening() -> bool:
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(listening, timeout=30, what="the production server to listen")
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=10)
        log.close()


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
    screenshot(page, "api-docs", full_page=False)

    page.goto("/api/redoc/")
    expect(page.locator("h1").first).to_contain_text("agentruns API")

    page.goto("/accounts/login/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    context.close()

    kinds = {r.url.split("/static/")[1].split("/")[0] for r in static}
    assert {"admin", "drf_spectacular_sidecar", "playground"} <= kinds, kinds
    failed = [(r.url, r.status) for r in static if r.status != 200]
    assert not failed, failed
