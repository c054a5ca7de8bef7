"""Giving a pooled connection back while a run waits on a provider or a tool, so a few
connections serve many runs in flight (PERF-6). A no-op without a pool."""

from __future__ import annotations

from django.db import connection


def release_connection() -> None:
    if connection.settings_dict.get("OPTIONS", {}).get("pool") and connection.get_autocommit():
        connection.close()
