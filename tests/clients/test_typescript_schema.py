"""The TypeScript client's committed OpenAPI schema (clients/typescript/openapi.json, from which
openapi-typescript generates its types, src/schema.ts) is the server's current one: a serializer
that gains, loses or changes a field fails here until the types are regenerated
(``npm run generate`` in clients/typescript; its own test holds src/schema.ts to openapi.json).
"""

from __future__ import annotations

from django.core.management import call_command

from tests.support import ROOT

COMMITTED = ROOT / "clients" / "typescript" / "openapi.json"


def test_the_typescript_clients_schema_is_the_servers_current_one(tmp_path):
    current = tmp_path / "openapi.json"
    # What `npm run generate` runs (`./engram manage spectacular --format openapi-json`), in process.
    call_command("spectacular", format="openapi-json", file=str(current))
    assert current.read_text() == COMMITTED.read_text(), (
        "clients/typescript/openapi.json is stale: run `npm run generate` in clients/typescript"
    )
