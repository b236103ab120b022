"""The TypeScript client's generated files are the server's current schema: its committed
OpenAPI schema (clients/typescript/openapi.json) and the types openapi-typescript generates from
it (src/schema.ts). A serializer or route that changes fails here until they are regenerated
(``npm run generate`` in clients/typescript; the package's own test also holds src/schema.ts to
openapi.json character for character, with node).
"""

from __future__ import annotations

import json
import re

import pytest
from django.core.management import call_command

from tests.support import ROOT

PACKAGE = ROOT / "clients" / "typescript"
STALE = "stale: run `npm run generate` in clients/typescript and commit openapi.json and src/schema.ts"


@pytest.fixture(scope="module")
def current(tmp_path_factory) -> str:
    """The schema as ``npm run generate`` writes it (``./engram manage spectacular``), in process."""
    path = tmp_path_factory.mktemp("schema") / "openapi.json"
    call_command("spectacular", format="openapi-json", file=str(path))
    return path.read_text()


def test_the_typescript_clients_schema_is_the_servers_current_one(current):
    assert current == (PACKAGE / "openapi.json").read_text(), f"clients/typescript/openapi.json is {STALE}"


def test_the_typescript_clients_types_have_every_route_schema_and_field_of_the_current_schema(current):
    schema = json.loads(current)
    types = (PACKAGE / "src" / "schema.ts").read_text()
    missing = [f"path {path}" for path in schema["paths"] if f'\n    "{path}": {{\n' not in types]
    for name, component in schema["components"]["schemas"].items():
        # openapi-typescript writes each component as `        Name: {` … `        };` (or a one-line alias).
        block = re.search(rf"^        {re.escape(name)}: (\{{\n.*?^        }};|[^\n]*;)$", types, re.M | re.S)
        if block is None:
            missing.append(f"component {name}")
            continue
        for field in component.get("properties", {}):
            if not re.search(rf"^            (readonly )?{re.escape(field)}\??: ", block.group(1), re.M):
                missing.append(f"{name}.{field}")
    assert not missing, f"clients/typescript/src/schema.ts is {STALE}; it lacks {missing[:20]}"
