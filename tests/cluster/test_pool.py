"""The cluster's connection pool hands out the connection returned last (PERF-6, PERF-5):
a process's steps stay on warm server backends instead of going round all of them. It is
also the process's admission control: an executor works only while it holds one."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from unittest import mock

import pytest
from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from agentruns.models import Run
from agentruns.runtime import faults
from agentruns.runtime.loop import execute_run
from agentruns.store.connection import (
    MostRecentFirstPool,
    _django_pools,
    close_thread_connections,
    release_connection,
    take_connection,
    this_connection,
    use_pool,
)
from tests.support.catalog import scripted_configuration
from tests.support.crash import fault_hook
from tests.support.runs import bench_user as runs_user
from tests.support.runs import submit

CLOCK = {"name": "clock.now", "arguments": {}}

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


@pytest.fixture
def pooled_process() -> Iterator[None]:
    """This test process switched to the cluster's pool of one connection, as a q2 worker
    switches itself at spawn (`use_pool`), and back afterwards."""
    settings_dict = connections.settings[DEFAULT_DB_ALIAS]
    saved = {key: copy.deepcopy(settings_dict.get(key)) for key in POOL_KEYS}
    close_thread_connections()
    use_pool(size=1, timeout=3, name="test-admission")
    try:
        yield
    finally:
        close_thread_connections()
        opened = _django_pools().pop(DEFAULT_DB_ALIAS, None)
        if opened is not None:
            opened.close()
        settings_dict.update(saved)


POOL_KEYS = ("OPTIONS", "CONN_MAX_AGE", "CONN_HEALTH_CHECKS")


@pytest.mark.django_db(transaction=True)
def test_a_run_takes_its_connection_again_as_soon_as_its_provider_answers_perf6(
    pooled_process: None,
) -> None:
    """Admission: the executor works only while it holds a pooled connection, so a burst
    of replies wakes at most DB_POOL_MAX threads of a process, not hundreds."""
    scripted_configuration("admitted", [{"tool_calls": [CLOCK]}, {"text": "done"}])
    run = submit(runs_user(), "admitted")
    held: list[bool] = []

    def on_point(name: str, _: int) -> None:
        if name == faults.PROVIDER:  # the reply is in memory, nothing of it recorded yet
            held.append(this_connection().connection is not None)

    with fault_hook(on_point):
        assert execute_run(run.pk) == Run.Status.COMPLETED
    assert held == [True, True]


@pytest.mark.django_db(transaction=True)
def test_a_run_takes_its_pooled_connection_back_without_reconnecting_perf6(
    pooled_process: None,
) -> None:
    """Taking the pooled connection again after each provider call is a checkout, not
    Django's connect() (its autocommit setter and signals cost about a twentieth of an
    executor's CPU a run): only the thread's first take connects."""
    scripted_configuration("retaken", [{"tool_calls": [CLOCK]}, {"text": "done"}])
    run = submit(runs_user(), "retaken")
    close_thread_connections()
    with mock.patch.object(
        type(this_connection()), "connect", autospec=True, side_effect=BaseDatabaseWrapper.connect
    ) as connect:
        assert execute_run(run.pk) == Run.Status.COMPLETED
    assert connect.call_count == 1
    assert this_connection().connection is None  # given back when the drive ended


@pytest.mark.django_db(transaction=True)
def test_a_connection_given_back_mid_transaction_is_handed_out_in_autocommit_perf6(
    pooled_process: None,
) -> None:
    """A thread that closed its connection inside a transaction left it out of
    autocommit; the next checkout puts it back, as Django's connect() would."""
    take_connection()
    held = this_connection().connection
    held.autocommit = False
    release_connection()  # Django's wrapper still says autocommit: it is handed back
    take_connection()
    assert this_connection().connection is held
    assert held.autocommit
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert not held.info.transaction_status  # IDLE: nothing left open
