"""The workload on LangGraph's side: one node that streams `n` text deltas ("word "), as the
scripted adapter's `text_repeated("word ", n)` does on ours."""

from typing import TypedDict

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, StateGraph


class State(TypedDict):
    n: int


def deltas(state: State):
    write = get_stream_writer()
    for _ in range(state["n"]):
        write("word ")
    return {}


graph = (
    StateGraph(State)
    .add_node("deltas", deltas)
    .add_edge(START, "deltas")
    .add_edge("deltas", END)
    .compile()
)
