"""The OpenAI Agents SDK on Engram (``engram_client.openai_agents``): the session store and the
memory tools against a live server with the embedding model, driven by the SDK's own runner
with its scripted model (``agents.testing``: no network, tracing off)."""

from __future__ import annotations

import asyncio

import pytest
from agents import Agent, Runner, set_tracing_disabled
from agents.items import ToolCallOutputItem
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message, function_call
from engram_client import Engram, PermissionDenied
from engram_client.openai_agents import EngramSession, engram_tools

from tests.support import ROOT
from tests.support.adapters import adapter_server, run_python
from tests.support.snippets import code_blocks

pytestmark = [pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    set_tracing_disabled(True)
    with adapter_server(django_db_blocker, tmp_path_factory.mktemp("agents") / "server.log", "Agents SDK") as live:
        yield live


def session(live, session_id, token=None, **options) -> EngramSession:
    return EngramSession(session_id, url=live.base, token=token or live.tokens.rw, bucket="notes", **options)


def user(text):
    return {"role": "user", "content": text}


def test_a_sessions_items_are_kept_in_order_popped_and_cleared(live):
    async def body():
        chat = session(live, "s-1")
        said = [user("Hi, I'm Ana."), {"role": "assistant", "content": "Hello Ana!"}, user("ok"), user("ok"),
                {"type": "function_call", "name": "lookup", "arguments": '{"q": "x"}', "call_id": "c1"},
                {"type": "function_call_output", "call_id": "c1", "output": "nothing found"}]  # fmt: skip
        await chat.add_items(said[:3])
        await chat.add_items(said[3:])
        with Engram(live.base, live.tokens.rw) as engram:  # memories of the session's run
            rows = {(m.content, m.attributed_to) for m in engram.list_memories(live.notes, run_id="s-1")}
        assert {("Hi, I'm Ana.", "user"), ("Hello Ana!", "assistant"), ('lookup({"q": "x"})', "assistant")} <= rows
        assert await chat.get_items() == said  # the repeated "ok" is two items, in their place
        assert await chat.get_items(limit=2) == said[-2:]
        assert await session(live, "s-1", session_settings=SessionSettings(limit=1)).get_items() == said[-1:]
        assert await session(live, "s-2").get_items() == []  # another session of the bucket

        assert await chat.pop_item() == said[-1]
        assert await chat.get_items() == said[:-1]
        await chat.clear_session()
        assert await chat.get_items() == [] and await chat.pop_item() is None

    asyncio.run(body())


def test_the_runner_keeps_the_history_in_the_session_and_the_tools_remember(live):
    model = ScriptedModel([
        [function_call("remember", {"fact": "The user's sister lives in Porto."}, call_id="c1")],
        [assistant_message("Noted.")],
        [assistant_message("Porto.")],
        [function_call("recall", {"query": "Where does the user's sister live?"}, call_id="c2")],
        [assistant_message("In Porto.")],
    ])  # fmt: skip
    tools = engram_tools(url=live.base, token=live.tokens.rw, bucket="notes", agent_id="coach")
    agent = Agent(name="Coach", model=model, tools=tools)

    async def body():
        first = session(live, "run-1")
        await Runner.run(agent, "My sister lives in Porto.", session=first)
        await Runner.run(agent, "Where did I say she lives?", session=first)
        history = model.last_call.input  # the second run's model saw the first run's items
        assert [i.get("content") for i in history if i.get("role") == "user"] == [
            "My sister lives in Porto.", "Where did I say she lives?",
        ]  # fmt: skip
        assert len(await first.get_items()) == 6  # user, call, output, answer; user, answer
        result = await Runner.run(agent, "Where does my sister live?", session=session(live, "run-2"))
        outputs = [item.output for item in result.new_items if isinstance(item, ToolCallOutputItem)]
        assert outputs == ["- The user's sister lives in Porto."]

    asyncio.run(body())
    with Engram(live.base, live.tokens.rw) as engram:
        (fact,) = [m for m in engram.list_memories(live.notes, agent_id="coach")]
    assert fact.content == "The user's sister lives in Porto."


def test_another_tenant_sees_nothing(live):
    async def body():
        await session(live, "private").add_items([user("My PIN is 4321.")])
        assert await session(live, "private", live.tokens.outsider).get_items() == []
        theirs = EngramSession("private", url=live.base, token=live.tokens.outsider, bucket=live.notes)
        assert await theirs.get_items() == [] and await theirs.pop_item() is None

    asyncio.run(body())


def test_restricted_tokens_are_refused_clearly(live):
    async def body():
        await session(live, "shared").add_items([user("Readable by a read-only token.")])
        reader = session(live, "shared", live.tokens.read_only)
        assert await reader.get_items() == [user("Readable by a read-only token.")]
        with pytest.raises(PermissionDenied):
            await reader.add_items([user("changed")])

        held = EngramSession("s", url=live.base, token=live.tokens.notes_only, bucket="elsewhere")
        with pytest.raises(PermissionDenied):
            await held.add_items([user("x")])
        await session(live, "held", live.tokens.notes_only).add_items([user("in notes")])

        with pytest.raises(PermissionDenied) as refused:
            await session(live, "s", live.tokens.alfa_only, agent_id="beta").add_items([user("as beta")])
        assert refused.value.code == "agent_forbidden"

        # The tools answer the refusal to the model instead of failing the run.
        model = ScriptedModel(
            [[function_call("remember", {"fact": "A fact."}, call_id="c")], [assistant_message("ok")]]
        )
        tools = engram_tools(url=live.base, token=live.tokens.read_only, bucket="notes")
        result = await Runner.run(Agent(name="A", model=model, tools=tools), "Remember a fact.")
        (output,) = [i.output for i in result.new_items if isinstance(i, ToolCallOutputItem)]
        assert output.startswith("Engram refused:") and "HTTP 403" in output

    asyncio.run(body())


def test_the_example_recalls_across_sessions(live):
    out = run_python(live, str(ROOT / "examples" / "openai_agents" / "agent.py"))
    assert "chat-1 items: 6" in out
    assert "recall -> - The user is training for the Lisbon marathon in October." in out


def test_the_documented_start_runs(live):
    (start,) = code_blocks(ROOT / "docs" / "INTEGRATIONS.md", "OpenAI Agents SDK")
    out = run_python(live, "-c", start)
    assert "items kept: 2" in out
