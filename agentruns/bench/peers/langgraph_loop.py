"""LangGraph with its PostgreSQL checkpointer, running the reference workload: `turns` model
turns each proposing `calls` no-op tool calls, then a final reply (SPEC §14, PERF-1, PERF-3).

One JSON line per shape: ms per durable step, bytes stored per run (every checkpoint,
blob and write row of the run's thread).
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from agentruns.bench.peers.common import database, emit, shapes, steps, stored_bytes


@tool
def noop(x: int) -> str:
    """Return x."""
    return str(x)


class State(TypedDict):
    messages: Annotated[list, add_messages]


def graph(turns: int, calls: int) -> StateGraph:
    def model(state: State) -> dict[str, Any]:
        done = sum(1 for m in state["messages"] if isinstance(m, AIMessage))
        if done >= turns:
            return {"messages": [AIMessage(content="done")]}
        proposed = [
            {"name": "noop", "args": {"x": i}, "id": f"c{done}_{i}", "type": "tool_call"}
            for i in range(calls)
        ]
        return {"messages": [AIMessage(content="", tool_calls=proposed)]}

    def route(state: State) -> str:
        return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END

    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([noop]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g


def main() -> None:
    url = database()
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        for turns, calls, runs in shapes():
            app = graph(turns, calls).compile(checkpointer=saver)

            def run(thread: str, app: Any = app) -> None:
                config = {"configurable": {"thread_id": thread}, "recursion_limit": 100_000}
                out = app.invoke({"messages": [HumanMessage("go")]}, config)
                assert out["messages"][-1].content == "done"

            run(str(uuid.uuid4()))  # warm-up
            threads = [str(uuid.uuid4()) for _ in range(runs)]
            started = time.perf_counter()
            for thread in threads:
                run(thread)
            elapsed = time.perf_counter() - started
            emit(
                "langgraph",
                turns=turns,
                calls=calls,
                runs=runs,
                ms_per_step=1000 * elapsed / (runs * steps(turns, calls)),
                bytes_per_run=stored_bytes(url, "public", "thread_id", threads) / runs,
            )


if __name__ == "__main__":
    main()
