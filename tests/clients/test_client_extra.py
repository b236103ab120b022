"""The client needs httpx only: the MCP SDK and pydantic are its "mcp" extra
(``pip install "engram-client[mcp]"``), which the server installs for its /mcp endpoint."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib

import pytest

from tests.support import ROOT

CLIENT_DIR = ROOT / "clients" / "python"

# Run in a fresh interpreter where mcp and pydantic cannot be imported, as if never installed.
WITHOUT_THE_EXTRA = r"""
import asyncio
import sys

BLOCKED = {"mcp", "pydantic", "pydantic_core"}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())

import httpx
from engram_client import AsyncEngram, Engram, Memory


def answer(request):
    assert request.url.path == "/api/v1/memories/m1"
    return httpx.Response(200, json={"id": "m1", "content": "Dana likes genmaicha.",
                                     "created_at": "2026-01-02T03:04:05+00:00"})


with Engram("http://engram.test", "t", transport=httpx.MockTransport(answer)) as engram:
    memory = engram.get_memory("m1")
assert isinstance(memory, Memory) and memory.created_at.year == 2026, memory


async def main():
    async with AsyncEngram("http://engram.test", "t", transport=httpx.MockTransport(answer)) as engram:
        return await engram.get_memory("m1")


assert asyncio.run(main()).content == "Dana likes genmaicha."
loaded = sorted(name for name in sys.modules if name.partition(".")[0] in BLOCKED)
assert not loaded, loaded

try:
    import engram_client.mcp
except ModuleNotFoundError as missing:
    print(missing)
else:
    raise AssertionError("engram_client.mcp imported without the MCP SDK")
"""


@pytest.mark.slow
def test_the_client_imports_and_works_without_mcp_and_pydantic():
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_EXTRA], env=os.environ, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    # The MCP server, asked for without its extra, says how to get it.
    assert run.stdout.strip() == 'engram_client.mcp needs mcp: pip install "engram-client[mcp]"'


def test_mcp_and_pydantic_are_an_extra_that_the_server_installs():
    project = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {re.match(r"[\w.-]+", requirement)[0] for requirement in requirements}

    assert names(project["dependencies"]) == {"httpx"}
    assert names(project["optional-dependencies"]["mcp"]) == {"mcp", "pydantic"}
    # The server serves the MCP tools at /mcp (mcp_server), so its install takes the extra.
    assert "-e ./clients/python[mcp]" in (ROOT / "requirements.txt").read_text().splitlines()


# Each framework adapter, imported where its framework cannot be: it says which extra brings it.
WITHOUT_THE_FRAMEWORKS = r"""
import importlib
import sys

BLOCKED = {"langgraph", "langchain_core", "agents"}


class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Refuse())
import engram_client  # the client itself needs none of them

for adapter in ("langgraph", "langchain", "openai_agents"):
    try:
        importlib.import_module(f"engram_client.{adapter}")
    except ModuleNotFoundError as missing:
        print(missing)
    else:
        raise AssertionError(f"engram_client.{adapter} imported without its framework")
"""


@pytest.mark.slow
def test_each_adapter_without_its_framework_names_the_extra_to_install():
    run = subprocess.run(
        [sys.executable, "-c", WITHOUT_THE_FRAMEWORKS], env=os.environ, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [
        'engram_client.langgraph needs langgraph: pip install "engram-client[langgraph]"',
        'engram_client.langchain needs langchain_core: pip install "engram-client[langchain]"',
        'engram_client.openai_agents needs agents: pip install "engram-client[openai-agents]"',
    ]


def test_the_frameworks_are_extras_pinned_in_the_dev_requirements_at_their_floor():
    """Each adapter's framework is an extra, not a dependency; the project's tests run the
    versions the extras start from (requirements-dev.txt pins them)."""
    extras = tomllib.loads((CLIENT_DIR / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = dict(line.split("==") for line in (ROOT / "requirements-dev.txt").read_text().splitlines() if "==" in line)
    for extra, packages in [("langgraph", {"langgraph", "langchain-core"}), ("langchain", {"langchain-core"}),
                            ("openai-agents", {"openai-agents"})]:  # fmt: skip
        floors = dict(re.match(r"([\w.-]+)>=([\w.]+)", requirement).groups() for requirement in extras[extra])
        assert set(floors) == packages
        assert all(pins[name] == floor for name, floor in floors.items()), (extra, floors)
