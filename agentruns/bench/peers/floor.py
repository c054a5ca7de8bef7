"""The floor of PERF-1: one small INSERT and COMMIT per round trip on the same PostgreSQL,
with the project's own driver settings left at psycopg's defaults (durable commits)."""

from __future__ import annotations

import os
import time

import psycopg

from agentruns.bench.peers.common import emit


def main() -> None:
    rounds = int(os.environ.get("ROUNDS", 2000))
    with psycopg.connect(os.environ["PEER_DB"]) as conn:
        conn.execute(
            "CREATE TEMP TABLE floor_events (id bigserial PRIMARY KEY, run uuid, seq int, "
            "body jsonb)"
        )
        conn.commit()
        started = time.perf_counter()
        for i in range(rounds):
            conn.execute(
                "INSERT INTO floor_events (run, seq, body) VALUES (gen_random_uuid(), %s, %s)",
                (i, '{"k": 1}'),
            )
            conn.commit()
        elapsed = time.perf_counter() - started
    emit("floor", rounds=rounds, ms_per_commit=1000 * elapsed / rounds)


if __name__ == "__main__":
    main()
