"""A LangChain tool-calling agent with Engram's ``remember`` and ``recall`` tools, and the
``EngramRetriever``: a fact told in one conversation is recalled in the next.

Runs offline against a local Engram (the chat model is langchain-core's fake one, replying
from a script: the tool calls it makes are scripted, what the tools answer is real):

    pip install "engram-client[langchain]"
    ENGRAM_URL=http://127.0.0.1:8000 ENGRAM_TOKEN=egm_... python examples/langchain/agent.py

The memories go to the bucket ``langchain-example`` (created if missing).
"""

from __future__ import annotations

from typing import Any

from engram_client.langchain import EngramRetriever, engram_tools
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage


class ScriptedToolModel(GenericFakeChatModel):
    """The fake chat model, able to take tools (it calls those its script says)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedToolModel:
        return self


def call(name: str, **args: Any) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{name}"}])


def run_agent(model: Any, tools: dict[str, Any], messages: list[BaseMessage]) -> list[BaseMessage]:
    """The tool-calling loop: ask the model, run the tools it calls, until it answers."""
    while True:
        reply = model.invoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return messages
        for tool_call in reply.tool_calls:
            result = tools[tool_call["name"]].invoke(tool_call["args"])
            print(f"  {tool_call['name']} -> {result}")
            messages.append(ToolMessage(result, tool_call_id=tool_call["id"]))


def main() -> None:
    tools = {tool.name: tool for tool in engram_tools(bucket="langchain-example")}  # ENGRAM_URL, ENGRAM_TOKEN
    model = ScriptedToolModel(
        messages=iter(
            [
                call("remember", fact="The user's dog is called Biscuit.", tags=["pets"]),
                AIMessage("Biscuit, lovely name. I will remember it."),
                call("recall", query="what is the name of the user's pet?"),
                AIMessage("Your dog is called Biscuit."),
            ]
        )
    ).bind_tools(list(tools.values()))

    print("conversation 1")
    run_agent(model, tools, [HumanMessage("My dog is called Biscuit.")])
    print("conversation 2")
    answer = run_agent(model, tools, [HumanMessage("Do you remember my pet's name?")])[-1]
    print("answer:", answer.content)

    retriever = EngramRetriever(bucket="langchain-example", token_budget=200)
    print("retrieved:", retriever.invoke("pet name")[0].page_content)


if __name__ == "__main__":
    main()
