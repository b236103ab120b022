"""Concurrent writers of the same text end with exactly one row (the unique index decides)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import time

import pytest
from django.db import connection

from memories.models import Memory
from tests.support import ROOT, base_env

pytestmark = pytest.mark.django_db(transaction=True)


def database_url() -> str:
    s = connection.settings_dict
    host = s["HOST"] or "localhost"
    if host.startswith("/"):
        return f"postgresql://{s['USER']}@/{s['NAME']}?host={host}&port={s['PORT'] or 5432}"
    password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
    return f"postgresql://{s['USER']}{password}@{host}:{s['PORT'] or 5432}/{s['NAME']}"


def test_concurrent_processes_writing_overlapping_content_leave_one_row_each(bucket):
    texts = [f"Shared fact number {i}: the meeting is on Thursday" for i in range(30)]
    workers = 4
    # Models are irrelevant to the invariant; keep the processes light.
    env = base_env(DATABASE_URL=database_url(), ENGRAM_EMBEDDINGS="off")
    start_at = time.time() + 6
    procs = []
    for seed in range(workers):
        order = texts[:]
        random.Random(seed).shuffle(order)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "tests.scripts.ingest_worker", str(bucket.pk), str(start_at), *order],
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        outputs.append([json.loads(line) for line in out.splitlines()])

    assert Memory.objects.filter(bucket=bucket).count() == len(texts)
    ids_by_text: dict[str, set[str]] = {}
    for lines in outputs:
        assert len(lines) == len(texts)
        for line in lines:
            ids_by_text.setdefault(line["content"], set()).add(line["id"])
    # Every writer was told the same id for the same text...
    assert all(len(ids) == 1 for ids in ids_by_text.values())
    # ...and exactly one writer per text created it.
    created = [line["content"] for lines in outputs for line in lines if not line["deduplicated"]]
    assert sorted(created) == sorted(texts)
