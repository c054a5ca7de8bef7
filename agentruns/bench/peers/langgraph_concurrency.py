"""LangGraph's concurrency peer of PERF-6 and PERF-7: N runs in flight at once in one
asyncio process with a pooled PostgreSQL checkpointer, each of `turns` model turns that take
`latency` seconds, one no-op tool call per turn, then a final reply.

One JSON line per size: wall time against the ideal (turns + 1) x latency, and the
process's resident memory before the batch and at its peak (sampled every 50 ms).
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentruns.bench.peers.common import database, emit, rss_kb
from agentruns.bench.peers.langgraph_graph import State, graph, turns_done

TURNS = int(os.environ.get("TURNS", 3))
LATENCY = float(os.environ.get("LATENCY", 1.0))
POOL = int(os.environ.get("POOL", 20))


async def model(state: State) -> dict[str, Any]:
    await asyncio.sleep(LATENCY)
    done = turns_done(state)
    if done >= TURNS:
        return {"messages": [AIMessage(content="done")]}
    call = {"name": "noop", "args": {"x": done}, "id": f"c{done}", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


async def batch(app: Any, n: int) -> dict[str, Any]:
    peak = baseline = rss_kb()
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_kb())
            await asyncio.sleep(0.05)

    async def one() -> None:
        config = {"configurable": {"thread_id": str(uuid.uuid4())}}
        out = await app.ainvoke({"messages": [HumanMessage("go")]}, config)
        assert out["messages"][-1].content == "done"

    sampler = asyncio.create_task(sample())
    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    wall = time.perf_counter() - started
    done.set()
    await sampler
    ideal = (TURNS + 1) * LATENCY
    return {
        "in_flight": n,
        "turns": TURNS,
        "latency_s": LATENCY,
        "wall_s": round(wall, 3),
        "ideal_s": ideal,
        "efficiency": round(ideal / wall, 3),
        "connections": POOL,
        "rss_before_kb": baseline,
        "rss_peak_kb": peak,
        "kb_per_in_flight": round((peak - baseline) / n, 1),
    }


async def main() -> None:
    sizes = [int(s) for s in os.environ.get("SIZES", "50").split(",") if s]
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(database(), max_size=POOL, kwargs=kwargs) as pool:
        saver = AsyncPostgresSaver(pool)
        await saver.setup()
        app = graph(model).compile(checkpointer=saver)
        await batch(app, 1)  # warm-up: imports, pool, prepared plans
        for n in sizes:
            emit("langgraph_async", **await batch(app, n))


if __name__ == "__main__":
    asyncio.run(main())
