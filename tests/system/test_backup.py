"""Backups: ``backup PATH`` writes one file that ``restore PATH`` brings back, in a fresh home
(its own embedded server), with the same search answers; bad input is refused and changes
nothing."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError

from memories.retrieval import memories_search
from memories.services import MemoryInput, memories_ingest
from tests.support import base_env, manage

pytestmark = pytest.mark.django_db(transaction=True)

FACTS = [
    "Alice lives in Oslo with her two cats.",
    "Bob prefers green tea over coffee.",
    "The quarterly report is due on the first Friday of March.",
    "Carol's daughter started violin lessons last autumn.",
    "The staging database runs PostgreSQL 18 with pgvector.",
]
QUERIES = ["Where does Alice live?", "what does Bob drink", "violin", "which database version is staging on"]

RESTORE_SCRIPT = """
from django.core.management import call_command
from django.core.management.base import CommandError
call_command("restore", "{path}")
try:
    call_command("restore", "{path}")
except CommandError as exc:
    print("REFUSED", exc)
call_command("restore", "{path}", "--replace", "--yes")
"""
SEARCH_SCRIPT = """
import json
from engram_site.scoping import scope, scopes_disabled
from memories.retrieval import memories_search
from tenants.models import Bucket
with scopes_disabled():  # cross-tenant: the bucket is found by its id, whoever's it is
    bucket = Bucket.objects.get(id="{bucket}")
answers = {{}}
with scope(tenant=bucket.tenant_id):  # searched as its tenant's request would
    for mode in ("keyword", "hybrid"):
        for query in {queries!r}:
            hits = memories_search(bucket=bucket, query=query, mode=mode, limit=3, record_access=False).hits
            answers[mode + ":" + query] = [str(hit.id) for hit in hits]
print("RESULT" + json.dumps(answers))
"""


def _answers(bucket) -> dict[str, list[str]]:
    answers = {}
    for mode in ("keyword", "hybrid"):
        for query in QUERIES:
            hits = memories_search(bucket=bucket, query=query, mode=mode, limit=3, record_access=False).hits
            answers[f"{mode}:{query}"] = [str(hit.id) for hit in hits]
    return answers


@pytest.mark.slow
def test_backup_restored_into_a_fresh_home_gives_the_same_search_answers(bucket, tmp_path):
    memories_ingest(bucket=bucket, items=[MemoryInput(content=fact) for fact in FACTS])
    expected = _answers(bucket)
    assert all(expected.values())
    path = tmp_path / "engram.dump"

    call_command("backup", str(path))

    assert path.stat().st_size > 0
    assert not (tmp_path / "engram.dump.partial").exists()
    # A fresh home: its own embedded server, started by the restore. One process restores, is
    # refused a second restore over the data, replaces it, and searches.
    # The exported ONNX model is shared with this process's home: re-exporting it is not under test.
    cache = str(settings.ENGRAM_MODEL_CACHE)
    env = base_env(ENGRAM_HOME=str(tmp_path / "fresh"), DATABASE_URL="", ENGRAM_MODEL_CACHE=cache)
    env.pop("ENGRAM_EMBEDDED_PG_KEEP", None)
    script = RESTORE_SCRIPT.format(path=str(path)) + SEARCH_SCRIPT.format(bucket=bucket.id, queries=QUERIES)
    output = manage_ok("shell", "-c", script, env=env)
    assert output.count("restored ") == 2
    assert "REFUSED" in output and "--replace" in output
    assert json.loads(output.split("RESULT", 1)[1]) == expected


@pytest.mark.slow
def test_restore_into_a_database_that_holds_data_is_refused_without_replace(bucket, tmp_path):
    memories_ingest(bucket=bucket, items=[MemoryInput(content=FACTS[0])])
    path = tmp_path / "engram.dump"
    call_command("backup", str(path))
    with pytest.raises(CommandError, match="--replace"):
        call_command("restore", str(path))
    assert bucket.memories.count() == 1


def manage_ok(*args: str, env: dict[str, str]) -> str:
    try:
        return manage(*args, env=env).stdout
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"manage.py {' '.join(args)} failed:\n{exc.stderr[-3000:]}")


def test_backup_refuses_to_overwrite_an_existing_file(db, tmp_path):
    path = tmp_path / "engram.dump"
    path.write_bytes(b"precious")
    with pytest.raises(CommandError, match="--overwrite"):
        call_command("backup", str(path))
    assert path.read_bytes() == b"precious"


@pytest.mark.slow
def test_restore_refuses_a_file_that_is_not_a_backup_and_changes_nothing(bucket, tmp_path):
    memories_ingest(bucket=bucket, items=[MemoryInput(content=FACTS[0])])
    path = tmp_path / "not-a-dump"
    path.write_text("hello")
    with pytest.raises(CommandError, match="not a backup"):
        call_command("restore", str(path), "--replace", "--yes")
    assert bucket.memories.count() == 1
    assert os.path.exists(path)
