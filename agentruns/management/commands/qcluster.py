"""`manage.py qcluster`: django-q2's, stopping gracefully on a SIGTERM to its whole process
group too (OPS-8, `agentruns.cluster.stopping`). agentruns is listed before django_q in
INSTALLED_APPS, so this command is the one `manage.py` runs."""

from __future__ import annotations

from typing import Any

import django_q.management.commands.qcluster as q2_qcluster

from agentruns.cluster.stopping import GroupSafeCluster, group_safe


class Command(q2_qcluster.Command):
    def handle(self, *args: Any, **options: Any) -> None:
        group_safe()
        q2_qcluster.Cluster = GroupSafeCluster
        super().handle(*args, **options)
