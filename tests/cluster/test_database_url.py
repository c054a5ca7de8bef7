"""The URL a process hands the processes it starts (a cluster, a benchmark's peer) reaches
the same database it uses, however its settings reach it (CLU-1: the cluster the benchmark
starts must measure the database the command was given)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from unittest import mock

import dj_database_url
import psycopg
import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections

from agentruns.store.connection import database_url

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _socket_directory() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('unix_socket_directories'), inet_server_port()")
        directories, port = cursor.fetchone()
    for directory in directories.split(","):
        if Path(directory.strip(), f".s.PGSQL.{port}").exists():
            return directory.strip()
    pytest.skip("this PostgreSQL has no Unix socket on this machine")


def test_credentials_with_reserved_characters_survive_the_url_clu1() -> None:
    given = {"USER": "ann@ops", "PASSWORD": "p@ss:w/rd#1", "HOST": "db.internal", "PORT": 6543}
    with mock.patch.dict(connections[DEFAULT_DB_ALIAS].settings_dict, given):
        parsed = dj_database_url.parse(database_url("other db"))
    assert (parsed["USER"], parsed["PASSWORD"]) == ("ann@ops", "p@ss:w/rd#1")
    assert (parsed["HOST"], parsed["PORT"], parsed["NAME"]) == ("db.internal", 6543, "other db")


@pytest.mark.django_db
def test_a_child_reaches_the_database_over_the_unix_socket_it_was_given_clu1() -> None:
    directory = _socket_directory()
    with mock.patch.dict(connections[DEFAULT_DB_ALIAS].settings_dict, {"HOST": directory}):
        url = database_url()
    assert psycopg.conninfo.conninfo_to_dict(url)["host"] == directory
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.db import connection\n"
            "with connection.cursor() as c:\n"
            "    c.execute('SELECT current_database(), inet_server_addr() IS NULL')\n"
            "    print(*c.fetchone())",
        ],
        env={**os.environ, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "config.settings"},
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr[-2000:]
    # inet_server_addr() is NULL on a Unix-socket connection.
    assert child.stdout.split() == [connection.settings_dict["NAME"], "True"]
