"""LangGraph with its PostgreSQL checkpointer, running the reference workload: `turns` model
turns each proposing `calls` no-op tool calls, then a final reply (SPEC §14, PERF-1, PERF-3).

One JSON line per shape: ms per durable step, bytes stored per run (every checkpoint,
blob and write row of the run's thread).
"""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import StateGraph

from agentruns.bench.peers.common import database, measure, shapes, stored_bytes
from agentruns.bench.peers.langgraph_graph import State, graph, turns_done


def reference(turns: int, calls: int) -> StateGraph:
    def model(state: State) -> dict[str, Any]:
        done = turns_done(state)
        if done >= turns:
            return {"messages": [AIMessage(content="done")]}
        proposed = [
            {"name": "noop", "args": {"x": i}, "id": f"c{done}_{i}", "type": "tool_call"}
            for i in range(calls)
        ]
        return {"messages": [AIMessage(content="", tool_calls=proposed)]}

    return graph(model)


def main() -> None:
    url = database()
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        for turns, calls, runs in shapes():
            app = reference(turns, calls).compile(checkpointer=saver)

            def run(thread: str, app: Any = app) -> None:
                config = {"configurable": {"thread_id": thread}, "recursion_limit": 100_000}
                out = app.invoke({"messages": [HumanMessage("go")]}, config)
                assert out["messages"][-1].content == "done"

            measure(
                "langgraph",
                run,
                turns,
                calls,
                runs,
                lambda threads: stored_bytes(url, "public", "thread_id", threads),
            )


if __name__ == "__main__":
    main()
