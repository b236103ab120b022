"""An OpenAI Agents SDK agent with Engram as its session store (the conversation's items) and
its long-term memory (the ``remember`` and ``recall`` function tools): a fact told in one
session is recalled in another.

Runs offline against a local Engram: the model is the SDK's ``ScriptedModel`` test double
(``agents.testing``), whose tool calls are scripted; the sessions and the memory are real, and
tracing is off, so nothing is sent to OpenAI.

    pip install "engram-client[openai-agents]"
    ENGRAM_URL=http://127.0.0.1:8000 ENGRAM_TOKEN=egm_... python examples/openai_agents/agent.py

The long-term facts go to the bucket ``openai-agents-example``, the sessions' items to
``openai-agents-example-sessions`` (both created if missing): kept apart, ``recall`` answers
facts, not conversation turns.
"""

from __future__ import annotations

import asyncio

from agents import Agent, Runner, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.testing import ScriptedModel, assistant_message, function_call
from engram_client.openai_agents import EngramSession, engram_tools

BUCKET = "openai-agents-example"
SESSIONS = "openai-agents-example-sessions"


async def main() -> None:
    set_tracing_disabled(True)
    model = ScriptedModel([
        [function_call("remember", {"fact": "The user is training for the Lisbon marathon in October."}, call_id="c1")],
        [assistant_message("Noted. Good luck with the training!")],
        [assistant_message("You said October.")],
        [function_call("recall", {"query": "Which race is the user preparing for?"}, call_id="c2")],
        [assistant_message("The Lisbon marathon, in October.")],
    ])  # fmt: skip
    agent = Agent(name="Coach", instructions="Help the user train.", model=model, tools=engram_tools(bucket=BUCKET))

    first = EngramSession("chat-1", bucket=SESSIONS)  # ENGRAM_URL, ENGRAM_TOKEN
    await first.clear_session()  # a fresh start on every run of the example
    await Runner.run(agent, "I'm training for the Lisbon marathon in October.", session=first)
    result = await Runner.run(agent, "When was the race again?", session=first)
    print("chat-1:", result.final_output)
    print("chat-1 items:", len(await first.get_items()))
    print("chat-1 model saw:", len(model.last_call.input), "items of history")

    second = EngramSession("chat-2", bucket=SESSIONS)  # a new conversation: empty history
    await second.clear_session()
    result = await Runner.run(agent, "What am I preparing for?", session=second)
    for item in result.new_items:
        if isinstance(item, ToolCallOutputItem):
            print("recall ->", item.output)
    print("chat-2:", result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
