"""End-to-end tests in Debian's Chromium (UI-2): Playwright's sync API drives a headless
browser against pytest-django's live server, with a real cluster executing the runs
against the same test database.

Playwright is used without its own browser downloads: it launches `/usr/bin/chromium`
(`make test` installs Debian's package). Every test here is marked `browser` and `slow`;
skip them locally with `-m 'not browser'`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client
from playwright.sync_api import Browser, Page, expect, sync_playwright

from tests.support import leaks
from tests.support.catalog import KEY, KEY_ENV
from tests.support.clusters import Clusters

CHROMIUM = os.environ.get("AGENTRUNS_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
# Long enough for a loaded two-core machine; a page that never updates still fails.
TIMEOUT_MS = 20_000
expect.set_options(timeout=TIMEOUT_MS)  # assertions wait on their own clock (5 s by default)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    # Package scope: the event loop stops before the rest of the suite runs.
    if not Path(CHROMIUM).exists():
        pytest.fail(
            f"No Chromium at {CHROMIUM}: `apt-get install chromium` (make test does), "
            "or skip these tests with -m 'not browser'."
        )
    # Playwright's sync API keeps an event loop running on the main thread, where the
    # tests' own ORM calls happen; Django would refuse them as "async unsafe". Nothing here
    # is async. Set only while this package runs: the rest of the suite (and the processes
    # it starts, such as `check --deploy`) must not inherit it.
    # Playwright's event loop starts its default executor's threads ("asyncio_N") on a
    # test's first DNS lookup; they are this fixture's, and stop when the loop closes.
    with (
        leaks.owned(lambda thread: thread.name.startswith("asyncio_")),
        pytest.MonkeyPatch.context() as patch,
        sync_playwright() as playwright,
    ):
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        yield launched
        launched.close()


@pytest.fixture
def cluster(transactional_db: None, tmp_path: Path) -> Iterator[Clusters]:
    """A running cluster executing the runs the pages submit; it dies before the flush.
    The fake provider's key is in its environment for configurations that use it."""
    clusters = Clusters(tmp_path)
    clusters.start("browser", **{KEY_ENV: KEY})
    try:
        yield clusters
    finally:
        clusters.close()


@pytest.fixture
def page_as(
    browser: Browser, live_server: Any, transactional_db: None
) -> Iterator[Callable[..., Page]]:
    """`page_as(user)` opens a page in a browser context of its own, signed in as `user`:
    several calls are several independent sessions. `javascript=False` turns scripts off."""
    contexts = []

    def open_page(user: Any, *, javascript: bool = True) -> Page:
        client = Client()
        client.force_login(user)
        context = browser.new_context(
            base_url=live_server.url,
            java_script_enabled=javascript,
            viewport={"width": 1280, "height": 900},
        )
        context.add_cookies(
            [
                {
                    "name": settings.SESSION_COOKIE_NAME,
                    "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
                    "url": live_server.url,
                }
            ]
        )
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


@pytest.fixture
def anonymous_page(browser: Browser, live_server: Any, transactional_db: None) -> Iterator[Page]:
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()


def save_screenshot(page: Page, name: str, *, full_page: bool = True) -> Path:
    """docs/screenshots/<name>.png (the whole page unless told); the README shows these."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path


@pytest.fixture
def screenshot() -> Callable[..., Path]:
    return save_screenshot
