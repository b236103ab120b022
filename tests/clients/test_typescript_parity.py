"""The TypeScript client has the Python client's operations: every public method of
``AsyncEngram`` has its camelCase namesake on ``Engram`` in clients/typescript/src/client.ts
(``list_buckets`` → ``listBuckets``). A method added to one client without the other fails here."""

from __future__ import annotations

import inspect
import re

from engram_client import AsyncEngram

from tests.support import ROOT

CLIENT_TS = ROOT / "clients" / "typescript" / "src" / "client.ts"
# Python's own plumbing, which the TypeScript client has no use for (no connection pool to close).
PYTHON_ONLY = {"aclose"}


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def test_every_python_client_operation_has_its_typescript_namesake():
    python = {name for name, _ in inspect.getmembers(AsyncEngram, inspect.isfunction) if not name.startswith("_")}
    typescript = set(re.findall(r"^  (?:async \*?)?([a-z][A-Za-z]*)\(", CLIENT_TS.read_text(), re.MULTILINE))
    missing = sorted(camel(name) for name in python - PYTHON_ONLY if camel(name) not in typescript)
    assert not missing, f"add these to clients/typescript/src/client.ts (and its README): {missing}"
