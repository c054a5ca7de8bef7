"""The cluster's one line at start (UI-7: log what an operator needs): how many worker
processes, how many executor threads each, which database. q2 sends `post_spawn` in every
worker it spawns, the first time and after a restart alike; a flag in memory shared across
the fork (created when this module is imported, before q2 forks) lets only the first say it.
"""

from __future__ import annotations

import logging
import multiprocessing
from typing import Any

from django.conf import settings
from django.db import connections
from django.dispatch import receiver
from django_q.conf import Conf
from django_q.signals import post_spawn

from agentruns.store import on_postgres

logger = logging.getLogger("agentruns.cluster")

_announced = multiprocessing.Value("b", 0)


def startup_line() -> str:
    db = connections["default"].settings_dict
    where = f" on {db['HOST']}:{db['PORT']}" if db.get("HOST") else ""
    # Only on PostgreSQL does each worker switch to a pool (agentruns.cluster.driver).
    pool = settings.AGENTRUNS_DB_POOL_MAX
    postgres = on_postgres()
    pooled = f" (database pool {pool} each)" if postgres else ""
    return (
        f"cluster {Conf.CLUSTER_NAME} started: {Conf.WORKERS} workers x "
        f"{settings.AGENTRUNS_EXECUTOR_THREADS} executor threads{pooled}, "
        f"database {'PostgreSQL' if postgres else 'SQLite'} {db['NAME']}{where}, "
        f"lease {settings.AGENTRUNS_LEASE_SECONDS:g}s"
    )


@receiver(post_spawn, dispatch_uid="agentruns.cluster.announce")
def announce(sender: Any, proc_name: str = "", **kwargs: Any) -> None:
    with _announced.get_lock():
        if _announced.value:
            return
        _announced.value = 1
    logger.info("%s", startup_line())
