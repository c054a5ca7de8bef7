"""The floor of PERF-1: one small INSERT and COMMIT per round trip on the same PostgreSQL.

Two of them: into an ordinary table with psycopg's defaults, so the commit waits for the
WAL flush (what one durable write costs: PERF-1's floor), and into a temporary table, as
SPEC §14's reference script `bare_commit.py` does (PostgreSQL writes no WAL for it, so
its commit waits for nothing; shown for comparison with figures taken that way).
"""

from __future__ import annotations

import os
import time

import psycopg

from agentruns.bench.peers.common import emit

# The durable floor's table, and its one-row write (also `agentruns/bench/runcost.py`'s).
TABLE = "bench_floor"
COLUMNS = "(id bigserial PRIMARY KEY, run uuid, seq int, body jsonb)"
BODY = '{"k": 1}'


def insert(table: str) -> str:
    return f"INSERT INTO {table} (run, seq, body) VALUES (gen_random_uuid(), %s, %s)"


def commits(conn: psycopg.Connection, table: str, rounds: int) -> float:
    started = time.perf_counter()
    for i in range(rounds):
        conn.execute(insert(table), (i, BODY))
        conn.commit()
    return 1000 * (time.perf_counter() - started) / rounds


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", 2000))
    with psycopg.connect(os.environ["PEER_DB"]) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS {TABLE} {COLUMNS}")
        conn.execute(f"TRUNCATE {TABLE}")
        conn.execute(f"CREATE TEMP TABLE floor_events {COLUMNS}")
        conn.commit()
        durable = commits(conn, TABLE, rounds)
        no_wal = commits(conn, "floor_events", rounds)
        conn.execute(f"TRUNCATE {TABLE}")
        conn.commit()
    emit("floor", rounds=rounds, ms_per_commit=durable, ms_per_commit_no_wal=no_wal)


if __name__ == "__main__":
    main()
