"""What every peer script shares: its parameters, its database, its one-line results."""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg


def shapes() -> list[tuple[int, int, int]]:
    """(turns, calls per turn, runs) to measure, from SHAPES="10x2:20,200x1:2"."""
    out = []
    for item in os.environ.get("SHAPES", "10x2:20").split(","):
        size, runs = item.split(":")
        turns, calls = size.split("x")
        out.append((int(turns), int(calls), int(runs)))
    return out


def steps(turns: int, calls: int) -> int:
    """Durable steps of one run: every model turn (the final reply too) and every call."""
    return turns + 1 + turns * calls


def database() -> str:
    url = os.environ["PEER_DB"]
    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    return url


def stored_bytes(url: str, schema: str, column: str, keys: list[str]) -> int:
    """Bytes of every row, in every table of `schema` with `column`, whose key is in `keys`."""
    with psycopg.connect(url) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.columns "
            "WHERE table_schema = %s AND column_name = %s",
            [schema, column],
        ).fetchall()
        total = 0
        for (table,) in tables:
            row = conn.execute(
                f'SELECT coalesce(sum(pg_column_size(t.*)), 0) FROM "{schema}"."{table}" t '
                f'WHERE t."{column}"::text = ANY(%s)',
                [keys],
            ).fetchone()
            total += int(row[0]) if row else 0
        return total


def rss_kb() -> int:
    """This process's resident set size (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def emit(peer: str, **result: Any) -> None:
    print(json.dumps({"peer": peer, **result}), flush=True)


def measure(
    peer: str,
    run: Callable[[str], None],
    turns: int,
    calls: int,
    runs: int,
    stored: Callable[[list[str]], int],
) -> None:
    """Time `runs` runs (each named by a fresh id) after a warm-up run; emit ms per durable
    step and the bytes `stored` finds for those ids, per run."""
    run(str(uuid.uuid4()))
    ids = [str(uuid.uuid4()) for _ in range(runs)]
    started = time.perf_counter()
    for key in ids:
        run(key)
    elapsed = time.perf_counter() - started
    emit(
        peer,
        turns=turns,
        calls=calls,
        runs=runs,
        ms_per_step=1000 * elapsed / (runs * steps(turns, calls)),
        bytes_per_run=stored(ids) / runs,
    )
