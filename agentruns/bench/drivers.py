"""Threads against asyncio as the way a worker process drives its runs (PERF-6), on one
proxy turn both can run, so only the driver differs.

A proxy run is TURNS + 1 turns of: a provider wait, Python work of about `work_ms` of CPU
(what the loop spends on a turn), then, holding one of the process's `pool` connections,
statement A (insert an event, commit) and, but for the last turn, statement B (insert two
events and update the run's row, commit). The threads driver is the cluster's shape: a
thread per run, the connection taken before the work and given back during the wait
(`store/connection.py`), the collector tuned as `cluster/driver.py` tunes it. The asyncio
driver is a task per run on psycopg's async pool of the same size. Efficiency is the ideal,
(TURNS + 1) x the wait, over the wall time from a common start to the last run's end.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

DRIVERS = ("threads", "asyncio")
RUN, EVENT = "bench_proxy_run", "bench_proxy_event"
STATEMENT_A = f"INSERT INTO {EVENT} (run_id, seq, payload) VALUES (%s, %s, %s)"
STATEMENT_B = (
    f"WITH e AS (INSERT INTO {EVENT} (run_id, seq, payload) VALUES (%s, %s, %s), (%s, %s, %s) "
    f"RETURNING 1) UPDATE {RUN} SET turns = turns + 1, state = %s WHERE id = %s"
)
PAYLOAD = {"type": "tool.result", "payload": {"text": "x" * 300, "n": list(range(20))}}


@dataclass(frozen=True)
class Proxy:
    url: str
    turns: int = 3
    latency_s: float = 1.0
    pool: int = 6
    rounds: int = 1  # of the unit of Python work that makes up a turn's `work_ms`
    gc_young: int = 700  # the collector's youngest threshold (the command passes the cluster's)

    def turn(self, run_id: int, turn: int) -> list[tuple[str, list[Any]]]:
        """The turn's Python work, then its statements with their parameters."""
        payload, seq = _work(self.rounds), 3 * turn
        statements = [(STATEMENT_A, [run_id, seq, payload])]
        if turn < self.turns:
            statements.append(
                (STATEMENT_B, [run_id, seq + 1, payload, run_id, seq + 2, payload, payload, run_id])
            )
        return statements


def calibrated_rounds(work_ms: float) -> int:
    """How many units of work take `work_ms` of CPU on this machine."""
    n, spent = 1, 0.0
    while spent < 0.05:
        n *= 2
        start = time.thread_time()
        _work(n)
        spent = time.thread_time() - start
    return max(1, round(n * work_ms / 1000 / spent))


def _work(rounds: int) -> str:
    for _ in range(rounds):
        json.loads(json.dumps(PAYLOAD))
    return json.dumps(PAYLOAD)


def prepare_tables(url: str, runs: int) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        drop_tables(conn)
        conn.execute(f"CREATE TABLE {RUN} (id int PRIMARY KEY, turns int, state jsonb)")
        conn.execute(
            f"CREATE TABLE {EVENT} (id bigserial PRIMARY KEY, run_id int, seq int, "
            "payload jsonb, created_at timestamptz DEFAULT now(), UNIQUE (run_id, seq))"
        )
        conn.execute(f"INSERT INTO {RUN} SELECT g, 0, '{{}}' FROM generate_series(0, %s) g", [runs])


def drop_tables(conn: psycopg.Connection) -> None:
    conn.execute(f"DROP TABLE IF EXISTS {EVENT}, {RUN}")


def _tune_gc(proxy: Proxy) -> None:
    gc.freeze()
    gc.set_threshold(proxy.gc_young, *gc.get_threshold()[1:])


def _threads(proxy: Proxy, ids: list[int], ready: Any, start: Any, ends: Any) -> None:
    _tune_gc(proxy)
    pool = ConnectionPool(
        proxy.url, min_size=proxy.pool, max_size=proxy.pool, kwargs={"autocommit": True}
    )
    pool.wait()
    go = threading.Event()

    def drive(run_id: int) -> None:
        go.wait()
        for turn in range(proxy.turns + 1):
            time.sleep(proxy.latency_s)
            with pool.connection() as conn:
                for sql, params in proxy.turn(run_id, turn):
                    conn.execute(sql, params, prepare=True)

    threads = [threading.Thread(target=drive, args=(run_id,)) for run_id in ids]
    for thread in threads:
        thread.start()
    ready.put(True)
    start.wait()
    go.set()
    for thread in threads:
        thread.join()
    pool.close()
    ends.put(time.time())


def _asyncio(proxy: Proxy, ids: list[int], ready: Any, start: Any, ends: Any) -> None:
    _tune_gc(proxy)

    async def main() -> None:
        pool = AsyncConnectionPool(
            proxy.url,
            min_size=proxy.pool,
            max_size=proxy.pool,
            kwargs={"autocommit": True},
            open=False,
        )
        await pool.open(wait=True)

        async def drive(run_id: int) -> None:
            for turn in range(proxy.turns + 1):
                await asyncio.sleep(proxy.latency_s)
                async with pool.connection() as conn:
                    for sql, params in proxy.turn(run_id, turn):
                        await conn.execute(sql, params, prepare=True)

        ready.put(True)
        await asyncio.get_running_loop().run_in_executor(None, start.wait)
        await asyncio.gather(*(drive(run_id) for run_id in ids))
        await pool.close()

    asyncio.run(main())
    ends.put(time.time())


def measure(driver: str, proxy: Proxy, runs: int, processes: int) -> dict[str, Any]:
    """One batch of `runs` proxy runs over `processes` worker processes."""
    prepare_tables(proxy.url, runs)
    # Forked: spawned children would leave multiprocessing's resource tracker running.
    # They use nothing of this process's but the code (no connection, no thread).
    context = mp.get_context("fork")
    ready, ends, start = context.Queue(), context.Queue(), context.Event()
    target = _threads if driver == "threads" else _asyncio
    children = [
        context.Process(
            target=target, args=(proxy, list(range(i, runs, processes)), ready, start, ends)
        )
        for i in range(processes)
    ]
    for child in children:
        child.start()
    for _ in children:
        ready.get(timeout=120)
    began = time.time()
    start.set()
    wall = max(ends.get(timeout=600) for _ in children) - began
    for child in children:
        child.join()
    ideal = (proxy.turns + 1) * proxy.latency_s
    return {
        "driver": driver,
        "in_flight": runs,
        "processes": processes,
        "wall_s": round(wall, 2),
        "efficiency": round(ideal / wall, 3),
    }
