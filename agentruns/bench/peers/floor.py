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


def commits(conn: psycopg.Connection, table: str, rounds: int) -> float:
    started = time.perf_counter()
    for i in range(rounds):
        conn.execute(
            f"INSERT INTO {table} (run, seq, body) VALUES (gen_random_uuid(), %s, %s)",
            (i, '{"k": 1}'),
        )
        conn.commit()
    return 1000 * (time.perf_counter() - started) / rounds


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", 2000))
    columns = "(id bigserial PRIMARY KEY, run uuid, seq int, body jsonb)"
    with psycopg.connect(os.environ["PEER_DB"]) as conn:
        conn.execute(f"CREATE TABLE IF NOT EXISTS bench_floor {columns}")
        conn.execute("TRUNCATE bench_floor")
        conn.execute(f"CREATE TEMP TABLE floor_events {columns}")
        conn.commit()
        durable = commits(conn, "bench_floor", rounds)
        no_wal = commits(conn, "floor_events", rounds)
        conn.execute("TRUNCATE bench_floor")
        conn.commit()
    emit("floor", rounds=rounds, ms_per_commit=durable, ms_per_commit_no_wal=no_wal)


if __name__ == "__main__":
    main()
