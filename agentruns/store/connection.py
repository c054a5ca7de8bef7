"""Connection handling the runtime and the cluster share: a process's pool (PERF-6) and
the connections it inherited across fork, giving a pooled connection back while a run
waits, closing a thread's connections when its work is done, whether a step may skip
waiting for the WAL flush (runtime/journal.py). The loop's prepared statements are in
`store/statements.py`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created
from psycopg_pool import ConnectionPool

logger = logging.getLogger(__name__)

# Objects inherited across fork that belong to the parent: never closed, never collected
# (closing a psycopg connection or pool would send a Terminate on the parent's sockets).
_INHERITED: list[Any] = []


class _Held(threading.local):
    # Django keeps connections in an asgiref Local: one per thread while no event loop
    # runs in it (per context while one does), all replaced at once when the settings
    # change (tests).
    handed: Any = None
    db: Any = None


_HELD = _Held()


def this_connection() -> BaseDatabaseWrapper:
    """The thread's connection object itself: `django.db.connection` is a proxy that
    costs a context-local lookup on every attribute, and Django's lookup itself is an
    asgiref `Local` (~2 % of a reference step's instructions, called several times a
    statement), so a thread without an event loop keeps the object it was handed (with
    one, as under Playwright's sync API, Django's lookup decides)."""
    if asyncio._get_running_loop() is not None:
        return connections[DEFAULT_DB_ALIAS]
    handed = connections._connections  # type: ignore[attr-defined]
    if _HELD.handed is not handed:
        _HELD.db, _HELD.handed = connections[DEFAULT_DB_ALIAS], handed
    db: BaseDatabaseWrapper = _HELD.db
    return db


def database_url(name: str | None = None) -> str:
    """The database this process uses (or `name`, another on the same server) as a libpq
    URL, for the processes it starts (a cluster, a benchmark's peer) to reach it as it
    does. A Unix-socket directory as the host is percent-encoded: left as a path, libpq
    reads it as the URL's path, a database called `var/run/postgresql:5432/<name>`."""
    db = connections[DEFAULT_DB_ALIAS].settings_dict
    user = quote(db.get("USER") or "", safe="")
    password = quote(db.get("PASSWORD") or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    host = quote(db.get("HOST") or "", safe="")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgresql://{auth}{host}{port}/{quote(name or db['NAME'], safe='')}"


def fast_commit(durable: bool) -> bool:
    """Only a statement that is its own transaction can relax its own commit (PostgreSQL:
    only `store/postgres.py` asks)."""
    if durable or not settings.AGENTRUNS_FAST_COMMIT:
        return False
    return in_autocommit()


def in_autocommit() -> bool:
    """Whether a statement now would be its own transaction, asked without taking a
    connection from the pool (`get_autocommit` would, and a thread between provider
    calls holds none): a thread that holds none will be handed an autocommit one."""
    db = this_connection()
    if db.connection is None:
        return bool(db.settings_dict["AUTOCOMMIT"])
    return bool(db.autocommit)


def _pooled(db: BaseDatabaseWrapper) -> bool:
    return bool(db.settings_dict.get("OPTIONS", {}).get("pool"))


def release_connection() -> None:
    """Give the thread's pooled connection back while no transaction is open (a no-op
    without a pool, or without a connection held)."""
    db = this_connection()
    conn = db.connection
    if conn is None or not _pooled(db) or not _between_transactions(db):
        return
    # What Django's close() does for a pooled connection outside a transaction, without
    # its generic path; taken and given back around every provider call (PERF-6).
    db.run_on_commit = []
    db.connection = None
    with db.wrap_database_errors:
        conn._pool.putconn(conn)


def take_connection() -> None:
    """Take this thread's pooled connection now, before the work that needs it (a no-op
    without a pool). An executor does its work only while it holds one, so the pool is
    also the process's admission control: at most DB_POOL_MAX of its hundreds of threads
    run at once, the rest wait asleep in the pool's first-come queue. Taken at the first
    statement instead, every thread back from its provider competed for the interpreter
    lock first: 1000 runs in flight on 2 cores reached 73-80 % of ideal (median 77 %),
    78-82 % (median 80 %) this way with a pool of 6; with 12, 78-79 %; with 2, 78 %
    (PERF-6)."""
    db = this_connection()
    if db.connection is not None or not _pooled(db):
        return
    pool = db.pool  # type: ignore[attr-defined]
    if pool.closed or not _between_transactions(db) or connection_created.has_listeners(type(db)):
        db.ensure_connection()
        return
    # What Django's connect() does for a pooled connection, less what a wrapper left
    # between transactions already holds (its flags as connect() sets them) and what the
    # pool did when it opened the connection (its session settings). Django's path cost
    # about a tenth of an executor's Python CPU a run, taken and given back around every
    # provider call: its autocommit setter alone, a generator through psycopg's lock,
    # ~5 % (PERF-6).
    with db.wrap_database_errors:
        conn = pool.getconn()
        if not conn.autocommit:  # given back by a thread that closed it mid-transaction
            conn.autocommit = True
    db.connection = conn
    db.errors_occurred = False


def _between_transactions(db: BaseDatabaseWrapper) -> bool:
    """The wrapper's state is the one Django's connect() leaves: autocommit, no atomic
    block, nothing to roll back."""
    return (
        db.autocommit
        and not db.in_atomic_block
        and not db.needs_rollback
        and not db.closed_in_transaction
        and not db.savepoint_ids
    )


@contextmanager
def connection_given_back() -> Iterator[None]:
    """A wait (a provider call, a tool on the network, other threads) with the pooled
    connection given back, and taken again before anything else (`take_connection`)."""
    release_connection()
    try:
        yield
    finally:
        take_connection()


def close_thread_connections() -> None:
    """Give this thread's connections back (to the pool, or really close them)."""
    for alias in connections:
        try:
            connections[alias].close()
        except Exception:  # a broken connection is discarded either way
            logger.debug("closing a connection failed", exc_info=True)


def detach_inherited_connections() -> None:
    """After a fork: forget (without closing) every connection and pool the parent opened."""
    pools = _django_pools()
    if pools:
        _INHERITED.extend(pools.values())
        pools.clear()
    for alias in connections:
        wrapper = connections[alias]
        if wrapper.connection is not None:
            _INHERITED.append(wrapper.connection)
            wrapper.connection = None


def use_pool(*, size: int, timeout: float, name: str) -> None:
    """Switch THIS process to Django's psycopg pool before it opens its first connection
    (PostgreSQL only; elsewhere a no-op). The settings dict is shared by every thread's
    connection wrapper, so mutating it in place switches them all. Health checks are the
    pool's job (a broken connection is discarded when it is returned); Django's
    per-checkout ping would cost a round trip per step."""
    db = connections.settings[DEFAULT_DB_ALIAS]
    if not db["ENGINE"].endswith("postgresql"):
        return
    options = db.setdefault("OPTIONS", {})
    # Fixed size: opened once at spawn, never grown in the middle of a burst, and a
    # machine's footprint is exactly q2 workers x DB_POOL_MAX connections.
    options["pool"] = {"min_size": size, "max_size": size, "timeout": timeout, "name": name}
    db["CONN_MAX_AGE"] = 0
    db["CONN_HEALTH_CHECKS"] = False
    _install_pool(options["pool"])


def _install_pool(options: dict[str, Any]) -> None:
    """Django's own pool, built as `DatabaseWrapper.pool` builds it, but of the class
    below; Django takes a pool it finds registered for the alias."""
    wrapper = connections[DEFAULT_DB_ALIAS]
    kwargs = wrapper.get_connection_params()
    kwargs["autocommit"] = True  # as Django's: it sets autocommit itself on checkout
    pool = MostRecentFirstPool(
        kwargs=kwargs,
        open=False,
        configure=wrapper._configure_connection,  # type: ignore[attr-defined]
        **options,
    )
    _django_pools()[DEFAULT_DB_ALIAS] = pool


def _django_pools() -> dict[str, Any]:
    """Django's process-wide pools by alias (PostgreSQL's backend keeps them on its class)."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    pools: dict[str, Any] = DatabaseWrapper._connection_pools  # type: ignore[attr-defined]
    return pools


class MostRecentFirstPool(ConnectionPool):
    """A pool that hands out the connection returned last, not the one idle longest.

    psycopg_pool's queue is first in, first out: a process's steps go round every
    connection of its pool in turn, each to a server backend gone cold since its last
    turn. Handing out the warmest one keeps a lone run on one backend and a light load on
    as few as it needs. Measured on this machine, three-turn runs one after another on a
    pool of 12: Python 2.65 -> 1.95 ms and PostgreSQL 2.9 -> 2.0 ms of CPU per run, wall
    time -25 %; PERF-5 median 4.9-5.5 -> 4.6 ms. (A burst of 1000 keeps every connection
    busy either way: PERF-6 did not move.) Only which idle connection is taken changes,
    under the pool's lock; should a psycopg_pool release rename the hook, the pool is
    first in, first out again and tests/cluster/test_pool.py fails.
    """

    def _get_ready_connection(self, timeout: float | None) -> Any:
        self._pool.rotate(1)  # the newest returned (appended on the right) to the front
        return super()._get_ready_connection(timeout)
