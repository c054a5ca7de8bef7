"""The graph both LangGraph peers run: a model node, LangGraph's ToolNode with one no-op
tool, and the prebuilt routing between them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode


@tool
def noop(x: int) -> str:
    """Return x."""
    return str(x)


class State(TypedDict):
    messages: Annotated[list, add_messages]


def turns_done(state: State) -> int:
    return sum(1 for m in state["messages"] if isinstance(m, AIMessage))


def route(state: State) -> str:
    return "tools" if getattr(state["messages"][-1], "tool_calls", None) else END


def graph(model: Callable[[State], Any]) -> StateGraph:
    g = StateGraph(State)
    g.add_node("model", model)
    g.add_node("tools", ToolNode([noop]))
    g.add_edge(START, "model")
    g.add_conditional_edges("model", route, ["tools", END])
    g.add_edge("tools", "model")
    return g
