"""A LangGraph agent whose long-term memory is Engram: what the user says in one thread is
remembered in another.

Runs offline against a local Engram (the chat model is langchain-core's fake one, which
replies from a script; the memory is real):

    pip install "engram-client[langgraph]"
    ENGRAM_URL=http://127.0.0.1:8000 ENGRAM_TOKEN=egm_... python examples/langgraph/agent.py

The store keeps everything in the bucket ``langgraph-example`` (created if missing).
"""

from __future__ import annotations

from engram_client.langgraph import EngramStore
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore

model = GenericFakeChatModel(
    messages=iter([AIMessage("Noted, window seats from now on."), AIMessage("Booked: seat 14A, by the window.")])
)


class State(MessagesState):
    recalled: list[str]


def chat(state: State, config: RunnableConfig, *, store: BaseStore) -> dict:
    """One turn: recall what is known about the user, answer, and remember what they ask us to."""
    namespace = ("users", config["configurable"]["user_id"])
    said = str(state["messages"][-1].content)
    recalled = [item.value["memory"] for item in store.search(namespace, query=said, limit=3)]
    if said.lower().startswith("remember:"):  # a real agent lets the model decide (a tool call)
        store.put(namespace, "seat", {"memory": said.split(":", 1)[1].strip()})
    prompt = SystemMessage("What you know about the user:\n" + "\n".join(recalled))
    return {"messages": [model.invoke([prompt, *state["messages"]])], "recalled": recalled}


def main() -> None:
    store = EngramStore(bucket="langgraph-example")  # ENGRAM_URL, ENGRAM_TOKEN
    graph = StateGraph(State).add_node(chat).add_edge(START, "chat")
    app = graph.compile(checkpointer=InMemorySaver(), store=store)

    first = {"configurable": {"thread_id": "thread-1", "user_id": "ana"}}
    out = app.invoke({"messages": [HumanMessage("Remember: Ana prefers window seats.")]}, first)
    print("thread 1:", out["messages"][-1].content)

    second = {"configurable": {"thread_id": "thread-2", "user_id": "ana"}}  # a new conversation
    out = app.invoke({"messages": [HumanMessage("Which seat should I book on my flight?")]}, second)
    print("thread 2 recalled:", "; ".join(out["recalled"]))
    print("thread 2:", out["messages"][-1].content)


if __name__ == "__main__":
    main()
