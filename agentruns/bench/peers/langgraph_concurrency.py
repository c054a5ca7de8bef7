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
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from agentruns.bench.peers.common import database, emit, rss_kb

TURNS = int(os.environ.get("TURNS", 3))
LATENCY = float(os.environ.get("LATENCY", 1.0))
POOL = int(os.environ.get("POOL", 20))


@tool
def noop(x: int) -> str:
    """Return x."""
    return str(x)


class State(TypedDict):
    messages: Annotated[list, add_messages]


async def model(state: State) -> dict[str, Any]:
    await asyncio.sleep(LATENCY)
    done = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
    if done >= TURNS:
        return {"messages": [AIMessage(content="done")]}
    call = {"name": "noop", "args": {"x": done}, "id": f"c{done}", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


def route(state: State) -> str:
    return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END


def graph() -> StateGraph:
    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([noop]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g


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
        app = graph().compile(checkpointer=saver)
        await batch(app, 1)  # warm-up: imports, pool, prepared plans
        for n in sizes:
            emit("langgraph_async", **await batch(app, n))


if __name__ == "__main__":
    asyncio.run(main())
