"""Rows for tests, made the way the application makes them: tokens and operators through
tenants.services, memories through the write gateway (memories_ingest) or the HTTP API, the
review queues' and the graph's rows as their jobs leave them.

The fixtures built on these (``tenant``, ``bucket``, ``api``, ...) are in tests/conftest.py.
A test module never imports from another test module: what two of them share lives here or in
tests/support/.
"""

from __future__ import annotations

import dataclasses
import json

from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.test import APIClient

from graph.models import Edge, Entity, Mention
from graph.services.extraction import graph_extract_memories
from maintenance.models import DuplicateCandidate
from memories.services import MemoryInput, memories_ingest
from tenants import services
from tenants.models import OperatorMembership, Tenant

MEMORY_FIELDS = frozenset(f.name for f in dataclasses.fields(MemoryInput))


def make_client(tenant: Tenant, scopes=("read", "write"), **kwargs) -> APIClient:
    """An API client holding a new token of ``tenant`` (``kwargs``: token_issue's, e.g.
    ``buckets=``, ``agent_ids=``); the token is ``client.token``, its secret ``client.secret``."""
    issued = services.token_issue(tenant=tenant, name="test", scopes=list(scopes), **kwargs)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {issued.secret}")
    client.token = issued.token
    client.secret = issued.secret
    return client


def make_operator(username: str, *tenants, group: bool = True) -> User:
    """A staff user who operates ``tenants`` (with the operators' permissions unless ``group`` is False)."""
    user = User.objects.create_user(username, password=None, is_staff=True)
    if group:
        user.groups.add(services.operator_group_ensure())
    for tenant in tenants:
        OperatorMembership.objects.create(user=user, tenant=tenant)
    return user


def write(bucket, *items, api: APIClient | None = None, **options) -> list:
    """Memories written to ``bucket`` in order, through the write gateway (memories_ingest), or
    with ``api`` through ``POST /api/v1/buckets/{id}/memories`` as an agent sends them (one batch).

    An item is a content string or a dict of a memory's fields. Keyword options that name a
    memory field (``hint_tags=["pets"]``, ``agent_id=...``) apply to every item; the others go to
    memories_ingest (``sequence=False``, ``now=...``) or into the batch (``sequence``). Left
    unsaid, ``sequence`` is the gateway's and the API's default (true). Returns the ids: UUIDs
    from the gateway, strings from the API's answer.
    """
    fields = {name: value for name, value in options.items() if name in MEMORY_FIELDS}
    rest = {name: value for name, value in options.items() if name not in MEMORY_FIELDS}
    rows = [{**fields, **(item if isinstance(item, dict) else {"content": item})} for item in items]
    if api is not None:
        response = api.post(f"/api/v1/buckets/{bucket.pk}/memories", {"memories": rows, **rest}, format="json")
        assert response.status_code == 201, response.content
        return [result["id"] for result in response.json()["results"]]
    return [result.id for result in memories_ingest(bucket=bucket, items=[MemoryInput(**r) for r in rows], **rest)]


def write_extracted(bucket, *items, **options) -> list:
    """:func:`write` (``sequence=False`` unless given), then the graph extracted from the
    memories at once, as the worker would; an extraction error, or a memory left out, fails
    the test."""
    ids = write(bucket, *items, **{"sequence": False, **options})
    report = graph_extract_memories(memory_ids=ids)
    assert not report.errors and report.memories == len(set(ids)), report
    return ids


def search(api: APIClient, bucket, query: str, **params) -> dict:
    """``POST /api/v1/buckets/{id}/search``'s answer (asserted 200)."""
    response = api.post(f"/api/v1/buckets/{bucket.pk}/search", {"query": query, **params}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def export_lines(api: APIClient, bucket, **params) -> list[dict]:
    """A bucket's export (``params`` as query parameters), one object a line."""
    answer = api.get(f"/api/v1/buckets/{bucket.pk}/export", params)
    assert answer.status_code == 200, answer.content
    return [json.loads(line) for line in b"".join(answer.streaming_content).decode().splitlines() if line.strip()]


def import_lines(api: APIClient, bucket, objects: list[dict], **params):
    """POST ``objects`` to a bucket's import as NDJSON, one a line; the answer as it comes."""
    body = "".join(json.dumps(o) + "\n" for o in objects)
    query = "&".join(f"{k}={v}" for k, v in params.items())
    return api.generic("POST", f"/api/v1/buckets/{bucket.pk}/import?{query}", body, content_type="application/x-ndjson")


def make_duplicate_candidate(bucket, x, y, **fields) -> DuplicateCandidate:
    """A near-duplicate pair of memories ``x`` and ``y`` awaiting review (``fields``: similarity,
    status), stored in the pair's order (lower id first), as the scan stores it."""
    a, b = sorted([x, y])
    fields = {"similarity": 0.97, **fields}
    return DuplicateCandidate.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=a, memory_b_id=b, **fields
    )


def make_graph_fact(bucket, memory_id, mark: str) -> tuple[Entity, Edge]:
    """A person ("{mark} Marta") mentioned in ``memory_id``, and the edge that she lives in
    "{mark} Porto", as extraction would leave them."""
    person = Entity.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, name=f"{mark} Marta", normalized_name=f"{mark} marta",
        type="PERSON", mention_count=1,
    )  # fmt: skip
    Mention.objects.create(tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_id=memory_id, entity=person)
    edge = Edge.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, subject=person, predicate="lives_in",
        object_literal=f"{mark} Porto", functional_key=f"{person.pk}:lives_in", valid_from=timezone.now(),
        source_memory_id=memory_id,
    )  # fmt: skip
    return person, edge
