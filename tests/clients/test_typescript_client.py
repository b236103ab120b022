"""The TypeScript client (clients/typescript) and its Vercel AI SDK example (examples/vercel-ai):
their own tests, run with node (``npm test``) against a live Engram — gunicorn on the test
database, started here — with a read-write token, a read-only token of the same tenant and a
token of another tenant, so that they check refusals and isolation too.

The npm packages come from each folder's package-lock.json: ``./engram test`` runs ``npm ci``
there when a lock file changed (the ``engram`` script's ensure_npm).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from types import SimpleNamespace

import pytest

from memories.services.buckets import bucket_create
from tenants import services as tenant_services
from tests.support import ROOT, base_env, test_database_url, web_server

pytestmark = [pytest.mark.slow, pytest.mark.django_db]

CLIENT = ROOT / "clients" / "typescript"
EXAMPLE = ROOT / "examples" / "vercel-ai"
# node's test runner's closing counts, in its TAP ("# pass 3") or spec ("ℹ pass 3") output.
COUNT = re.compile(r"^(?:# |ℹ )(tests|pass|fail|cancelled|skipped|todo) (\d+)\s*$", re.MULTILINE)


@pytest.fixture(scope="module")
def live(django_db_setup, django_db_blocker, tmp_path_factory):
    log = tmp_path_factory.mktemp("typescript") / "server.log"
    with django_db_blocker.unblock():
        tenant = tenant_services.tenant_create(name="TypeScript tests")
        bucket_create(tenant=tenant, name="default")
        outsider = tenant_services.tenant_create(name="TypeScript outsider")
        bucket_create(tenant=outsider, name="theirs")

        def token(owner, scopes) -> str:
            return tenant_services.token_issue(tenant=owner, name="ts", scopes=scopes).secret

        tokens = {
            "ENGRAM_TOKEN": token(tenant, ["read", "write"]),
            "ENGRAM_READ_ONLY_TOKEN": token(tenant, ["read"]),
            "ENGRAM_OTHER_TENANT_TOKEN": token(outsider, ["read", "write"]),
        }
    try:
        env = base_env(DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_TOKEN_RATE="100000/min")
        with web_server(env, log=log) as base:
            yield SimpleNamespace(env={**base_env(), "ENGRAM_URL": base, **tokens}, log=log)
    finally:
        with django_db_blocker.unblock():
            tenant.delete()
            outsider.delete()


def npm_test(folder, env: dict[str, str]) -> dict[str, int]:
    """``npm test`` in ``folder``; its counts. Fails with its output when a test failed, was
    skipped or cancelled, or none ran."""
    npm = shutil.which("npm")
    assert npm, "npm is not installed (node 20 or later: ./engram test installs the packages with it)"
    assert (folder / "node_modules").is_dir(), f"no {folder}/node_modules: ./engram test runs npm ci there"
    run = subprocess.run([npm, "test"], cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr
    counts = {name: int(n) for name, n in COUNT.findall(output)}
    assert run.returncode == 0, output[-6000:]
    assert counts.get("pass", 0) > 0 and counts.get("tests") == counts["pass"], output[-6000:]
    assert "# SKIP" not in output, output[-6000:]  # every test ran: the server and the tokens are all there
    return counts


def test_the_typescript_client_and_its_vercel_ai_example_pass_their_tests_against_a_live_server(live):
    # One test, in this order: the example builds the client it links (its pretest), which two
    # test processes (pytest-xdist) must not do at the same time as the client's own build.
    counts = npm_test(CLIENT, live.env)
    assert counts["pass"] >= 20, counts  # the offline retry tests, the schema check, the live ones, the docs snippets
    counts = npm_test(EXAMPLE, live.env)
    assert counts["pass"] >= 4, counts  # the tools called directly, in generateText's loop, the docs snippet, read-only
