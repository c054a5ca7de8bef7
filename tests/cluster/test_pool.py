"""The cluster's connection pool hands out the connection returned last (PERF-6, PERF-5):
a process's steps stay on warm server backends instead of going round all of them."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.conf import settings
from django.db import connection

from agentruns.store.connection import MostRecentFirstPool

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        not settings.DATABASES["default"]["ENGINE"].endswith("postgresql"),
        reason="the pool is PostgreSQL's",
    ),
]


@pytest.fixture
def pool() -> Iterator[MostRecentFirstPool]:
    kwargs = connection.get_connection_params()
    kwargs.pop("cursor_factory", None)  # Django's own cursor needs Django's wrapper
    opened = MostRecentFirstPool(kwargs=kwargs, min_size=3, max_size=3, open=False)
    opened.open(wait=True, timeout=10)
    try:
        yield opened
    finally:
        opened.close()


def test_the_connection_returned_last_is_handed_out_first_perf6(
    pool: MostRecentFirstPool,
) -> None:
    first, second, third = (pool.getconn() for _ in range(3))
    for returned in (first, third, second):
        pool.putconn(returned)
    # First in, first out (psycopg_pool's own order) would hand out `first` here.
    again = pool.getconn()
    then = pool.getconn()
    assert (again, then) == (second, third)
    pool.putconn(again)
    assert pool.getconn() is second
    for held in (second, then):
        pool.putconn(held)


def test_a_worker_process_pools_its_connections_most_recent_first_perf6() -> None:
    """`use_pool` (what every q2 worker calls at spawn) gives Django this pool."""
    script = (
        "import django; django.setup()\n"
        "from django.db import connection\n"
        "from agentruns.store.connection import use_pool\n"
        "use_pool(size=2, timeout=5, name='probe')\n"
        "print(type(connection.pool).__name__, connection.pool.max_size)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["MostRecentFirstPool", "2"]
