"""The wake-up transport: django-q2's ORM broker on the default database (CLU-4: a wake-up
commits in the same transaction as the run row that needs it, or vanishes with it).

`WakeBroker` stores and delivers exactly what the ORM broker does (same table, same
signed payloads, same lock/retry semantics), so `async_task`, the admin, `qinfo` and a
mixed fleet of clusters keep working. It differs in cost, which matters at hundreds of
wake-ups a second on a 2-core machine (PERF-6):

- On PostgreSQL a dequeue is ONE statement that takes the oldest waiting rows
  (`ORDER BY id`, so wake-ups are served in order and none starves) with
  `FOR UPDATE SKIP LOCKED` (clusters on several machines never wait on each other or race
  for a row) and locks them until `now + retry` (q2's redelivery rule, unchanged).
- Its locks are on the database's clock (enqueue and dequeue alike), as the leases are: a
  machine whose clock is wrong neither misses wake-ups nor takes back other machines'.
- It does not call `close_old_connections()` on every queue operation (the ORM broker
  does, twice per task, and with CONN_HEALTH_CHECKS each call costs a `SELECT 1`): at
  most once a second. A broken connection still surfaces as an error, on which q2's
  sentinel restarts the pusher or monitor process.

It is configured as `Q_CLUSTER["broker_class"]`, so the q2 sentinel imports this module
before it forks its workers; that is what lets every worker start its executor driver
(pool, heartbeat, sweeper) as soon as it is spawned, rather than at its first wake-up.
"""

from __future__ import annotations

import time
from typing import Any

from django import db
from django.db import transaction
from django.db.models.functions import Now
from django.dispatch import receiver
from django_q.brokers.orm import ORM
from django_q.conf import Conf
from django_q.models import OrmQ
from django_q.signals import post_spawn

from agentruns.store import store

# How often queue operations may recycle stale connections (the ORM broker: every call).
CONNECTION_CHECK_SECONDS = 1.0
_last_check = 0.0


class WakeBroker(ORM):
    @staticmethod
    def get_connection(list_key: str | None = None) -> Any:
        global _last_check
        now = time.monotonic()
        if now - _last_check >= CONNECTION_CHECK_SECONDS and transaction.get_autocommit(
            using=Conf.ORM
        ):
            _last_check = now
            db.close_old_connections()
        return OrmQ.objects.using(Conf.ORM)

    def enqueue(self, task: Any) -> int:
        """As the ORM broker, but the row's lock is the database's `now()`, which the
        dequeue compares it with (on PostgreSQL), not this machine's clock."""
        if not store().skip_locked:
            return int(super().enqueue(task))
        row = self.get_connection().create(
            key=self.list_key or Conf.CLUSTER_NAME, payload=task, lock=Now()
        )
        return int(row.pk)

    def dequeue(self) -> list[tuple[int, str]] | None:
        if not store().skip_locked:
            return super().dequeue()
        self.get_connection()
        rows = store().dequeue_tasks(self.list_key, max(1, Conf.BULK), Conf.RETRY)
        if rows:
            return rows
        time.sleep(Conf.POLL)  # an empty queue: spare the CPU, as the ORM broker does
        return None


@receiver(post_spawn, dispatch_uid="agentruns.cluster.start_driver")
def start_driver(sender: Any, proc_name: str = "", **kwargs: Any) -> None:
    from agentruns.cluster.driver import get_driver

    get_driver()
