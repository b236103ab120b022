"""What the tests of the client's framework adapters share (tests/clients/test_langgraph_store.py,
test_langchain.py, test_openai_agents.py): a live server on the test database, with the
embedding model, and a tenant whose tokens cover each kind of refusal; and running a script as
a user would. No pytest here: the tests' module-scoped fixtures wrap :func:`adapter_server`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

from tests.support.processes import base_env, test_database_url, web_server
from tests.support.project import ROOT


@contextlib.contextmanager
def adapter_server(django_db_blocker, log: Path, name: str) -> Iterator[SimpleNamespace]:
    """gunicorn with the embedding model; a tenant with a bucket ``notes`` and tokens: ``rw``,
    ``read_only``, ``notes_only`` (restricted to ``notes``), ``alfa_only`` (held to agent
    ``alfa``), and ``outsider`` (another tenant's). The rows are committed (the server has its
    own connection) and deleted afterwards."""
    from memories.services.buckets import bucket_create
    from tenants import services as tenant_services

    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name=f"{name} tenant")
        notes = bucket_create(tenant=tenant, name="notes")
        outsider = tenant_services.tenant_create(name=f"{name} outsider")

        def token(owner, scopes, bucket=None, **kwargs) -> str:
            return tenant_services.token_issue(tenant=owner, name=name, scopes=scopes, bucket=bucket, **kwargs).secret

        tokens = SimpleNamespace(
            rw=token(tenant, ["read", "write"]),
            read_only=token(tenant, ["read"]),
            notes_only=token(tenant, ["read", "write"], bucket=notes),
            alfa_only=token(tenant, ["read", "write"], agent_ids=["alfa"]),
            outsider=token(outsider, ["read", "write"]),
        )
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_TOKEN_RATE="100000/min")
    try:
        with web_server(env, workers=1, log=log) as base:
            yield SimpleNamespace(base=base, tokens=tokens, notes=str(notes.pk), log=log)
    finally:
        with django_db_blocker.unblock():
            tenant.delete()
            outsider.delete()


def run_python(live: SimpleNamespace, *args: str) -> str:
    """A Python script (a file, or ``-c`` code) run as a user would, with ``ENGRAM_URL`` and
    ``ENGRAM_TOKEN`` naming the live server; its output (it must succeed)."""
    env = {**os.environ, "ENGRAM_URL": live.base, "ENGRAM_TOKEN": live.tokens.rw}
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done.stdout
