"""Hostile input, through HTTP, on every write endpoint and on the read endpoints' parameters.

Every bad request gets a clear 4xx with the standard error body (``{"detail", "code", ...}``),
never a 5xx, and writes nothing: the row counts of every table a request could touch are the
same before and after. Text that is merely unusual (emoji, CJK, right-to-left, combining
marks) is accepted and comes back byte for byte.

Most checks go through Django's test client; the few whose behaviour depends on the real
server (raw bytes, oversized bodies, the worker surviving a hostile body) run against a
gunicorn started here, on the test database.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import http.client
import json
import urllib.parse
import uuid
from datetime import datetime
from pathlib import Path

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from audit.models import AuditEvent
from graph.models import Edge, Entity, Mention
from graph.services.extraction import graph_extract_memories
from memories.apis.memories import MAX_BATCH
from memories.models import Memory
from memories.serializers import MAX_METADATA_DEPTH
from memories.services import MemoryInput, memories_ingest
from memories.services.buckets import bucket_create
from sources.models import Source, SourceChunk, SourceChunkMemory
from sources.services.process import source_process
from sources.services.submit import source_submit_document
from tenants import services as tenant_services
from tenants.models import ApiToken, Bucket
from tests.factories import make_client
from tests.support import base_env, test_database_url, web_server
from tests.support.db import ModuleRows

# A generated matrix (every endpoint against every kind of bad input): about 40 s of test time,
# so it runs in the whole suite (CI), not in the fast tier of everyday work.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

TABLES = (Memory, Bucket, Source, SourceChunk, SourceChunkMemory, Entity, Edge, Mention, ApiToken, AuditEvent)


def counts() -> dict[str, int]:
    return {model.__name__: model.objects.count() for model in TABLES}


def assert_error(response, status: int = 400, code: str | None = None) -> dict:
    """A clear 4xx in the one error shape."""
    assert response.status_code == status, (response.status_code, response.content[:500])
    assert response["Content-Type"].startswith("application/json")
    body = response.json()
    assert isinstance(body.get("detail"), str) and body["detail"], body
    assert isinstance(body.get("code"), str) and body["code"], body
    if code is not None:
        assert body["code"] == code, body
    if body["code"] == "invalid":
        assert isinstance(body.get("errors"), dict) and body["errors"], body
    return body


def send(client: APIClient, method: str, url: str, body=None, *, raw: bytes | None = None, content_type=None):
    if raw is not None:
        return client.generic(method, url, raw, content_type=content_type or "application/json")
    return client.generic(method, url, json.dumps(body), content_type=content_type or "application/json")


@pytest.fixture(scope="module")
def _world_rows(django_db_setup, django_db_blocker):
    # Made once for the module; what a test writes is rolled back after it (tests.support.db.ModuleRows).
    with ModuleRows(django_db_blocker) as held:
        tenant = tenant_services.tenant_create(name="Acme")
        yield held, _make_world(tenant, bucket_create(tenant=tenant, name="main"))


@pytest.fixture
def world(db, _world_rows):
    held, w = _world_rows
    assert held.held, "the module's rows were released for a transactional test; none may follow it"
    return w


def _make_world(tenant, bucket):
    """Something for every endpoint to act on: memories (with graph facts), a processed
    document, a second bucket to merge into, and an admin client."""
    items = [MemoryInput(content=c) for c in ("Alice moved to Lisbon in 2023.", "Bob works at Acme Corp.")]
    ids = [r.id for r in memories_ingest(bucket=bucket, items=items)]
    graph_extract_memories(memory_ids=ids)
    source = source_submit_document(
        bucket=bucket, title="Notes", text="Carol teaches chemistry in Porto.", submitted_by="test"
    ).source
    source_process(source_id=source.pk)

    class World:
        pass

    w = World()
    w.tenant, w.bucket, w.memory_id, w.source_id = tenant, bucket, ids[0], source.pk
    w.other = bucket_create(tenant=tenant, name="other")
    w.entity_id = Entity.objects.for_bucket(bucket).values_list("pk", flat=True).first()
    w.edge_id = Edge.objects.for_bucket(bucket).values_list("pk", flat=True).first()
    w.api = make_client(tenant, scopes=("admin",))
    return w


# --- the write endpoints, each with a valid body and the paths of its string fields -----------


def writes(w) -> dict[str, tuple[str, str, dict]]:
    b = w.bucket.pk
    message = {"role": "user", "content": "I moved to Porto.", "agent_id": "a", "run_id": "r", "name": "Dana"}
    memory = {"content": "Dana likes sailing.", "agent_id": "agent", "run_id": "run", "source_actor_id": "actor",
              "hint_root": "root", "hint_tags": ["tag"], "metadata": {"key": "value"}}  # fmt: skip
    return {
        "memory": ("POST", f"/api/v1/buckets/{b}/memories", memory),
        "batch": ("POST", f"/api/v1/buckets/{b}/memories", {"memories": [{"content": "first"}, dict(memory)]}),
        "patch": ("PATCH", f"/api/v1/memories/{w.memory_id}", {**memory, "classified_topic": "travel"}),
        "search": (
            "POST",
            f"/api/v1/buckets/{b}/search",
            {
                "query": "where does Alice live",
                "filters": {"hint_tags": ["tag"], "agent_id": "a", "run_id": "r", "classified_topic": "t"},
            },
        ),  # fmt: skip
        "bucket_create": ("POST", "/api/v1/buckets", {"name": "fresh", "description": "a new bucket"}),
        "bucket_rename": ("PATCH", f"/api/v1/buckets/{b}", {"name": "renamed", "description": "renamed"}),
        "merge": ("POST", f"/api/v1/buckets/{w.other.pk}/merge", {"target_bucket_id": str(b)}),
        "document": (
            "POST",
            f"/api/v1/buckets/{b}/documents",
            {
                "title": "Diary",
                "text": "We sailed to Porto.",
                "metadata": {"key": "value"},
                "agent_id": "a",
                "run_id": "r",
                "source_actor_id": "s",
            },
        ),  # fmt: skip
        "conversation": (
            "POST",
            f"/api/v1/buckets/{b}/conversations",
            {
                "title": "Chat",
                "messages": [message],
                "metadata": {"key": "value"},
                "speaker": "Dana",
                "agent_id": "a",
                "run_id": "r",
                "source_actor_id": "s",
            },
        ),  # fmt: skip
    }


STRING_FIELDS = {
    "memory": [("content",), ("agent_id",), ("run_id",), ("source_actor_id",), ("hint_root",), ("hint_tags", 0),
               ("metadata", "key"), ("metadata", None)],
    "batch": [("memories", 1, "content"), ("memories", 1, "hint_tags", 0), ("memories", 1, "metadata", "key"),
              ("memories", 1, "agent_id")],
    "patch": [("content",), ("agent_id",), ("hint_tags", 0), ("metadata", "key"), ("metadata", None),
              ("classified_topic",)],
    "search": [("query",), ("filters", "hint_tags", 0), ("filters", "agent_id"), ("filters", "run_id"),
               ("filters", "classified_topic")],
    "bucket_create": [("name",), ("description",)],
    "bucket_rename": [("name",), ("description",)],
    "merge": [("target_bucket_id",)],
    "document": [("title",), ("text",), ("metadata", "key"), ("metadata", None), ("agent_id",), ("source_actor_id",)],
    "conversation": [("title",), ("messages", 0, "content"), ("messages", 0, "name"), ("messages", 0, "agent_id"),
                     ("speaker",), ("metadata", "key"), ("metadata", None), ("run_id",)],
}  # fmt: skip
WRITE_CASES = [(name, path) for name, paths in STRING_FIELDS.items() for path in paths]


def with_value(body: dict, path: tuple, text: str) -> dict:
    """``body`` with the string at ``path`` replaced by ``text``; a final ``None`` replaces the
    metadata object's key instead of its value."""
    body = copy.deepcopy(body)
    node = body
    for step in path[:-1]:
        node = node[step]
    if path[-1] is None:
        value = node.pop("key")
        node[text] = value
    else:
        node[path[-1]] = text
    return body


def snapshot(w) -> tuple:
    """Counts plus the rows a PATCH could change in place."""
    memory = Memory.objects.filter(pk=w.memory_id).values().first()
    bucket = Bucket.objects.filter(pk=w.bucket.pk).values().first()
    for row in (memory, bucket):
        for key, value in list((row or {}).items()):
            if hasattr(value, "tolist"):  # vectors
                row[key] = value.tolist()
    return counts(), memory, bucket


@pytest.mark.parametrize("name", list(STRING_FIELDS))
def test_the_valid_bodies_are_accepted(world, name):
    # The harness must be right for the rejections below to mean anything.
    method, url, body = writes(world)[name]
    response = send(world.api, method, url, body)
    assert response.status_code in (200, 201, 202), response.content


# NUL cannot be stored; the other C0 controls and DEL are refused too (escape sequences, bells).
FORBIDDEN = {"NUL": "\x00", "SOH": "\x01", "ESC": "\x1b[31m", "form feed": "\x0c", "DEL": "\x7f"}


@pytest.mark.parametrize(("name", "path"), WRITE_CASES, ids=[f"{n}-{'.'.join(map(str, p))}" for n, p in WRITE_CASES])
def test_control_characters_in_any_string_field_are_refused(world, name, path):
    method, url, body = writes(world)[name]
    for label, char in FORBIDDEN.items():
        if (name, path, label) == ("document", ("text",), "form feed"):
            continue  # a page break in a document's text: see the test below
        before = snapshot(world)
        response = send(world.api, method, url, with_value(body, path, f"bad{char}value"))
        error = assert_error(response, 400, "invalid")
        assert "NUL" in error["detail"] or "control characters" in error["detail"], (label, error)
        assert snapshot(world) == before, label


@pytest.mark.parametrize(("name", "path"), WRITE_CASES, ids=[f"{n}-{'.'.join(map(str, p))}" for n, p in WRITE_CASES])
def test_lone_surrogates_in_any_string_field_are_refused(world, name, path):
    method, url, body = writes(world)[name]
    raw = json.dumps(with_value(body, path, "bad\udc80value")).encode()  # json.dumps writes "\udc80" as an escape
    before = snapshot(world)
    assert_error(send(world.api, method, url, raw=raw), 400, "invalid")
    assert snapshot(world) == before


def test_page_breaks_in_a_document_become_line_breaks(world):
    # Text extracted from PDFs and office files separates pages with form feeds.
    text = "# Handbook\n\nPage one says the office opens at 9.\fPage two says it closes at 18.\vThe end."
    response = send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/documents", {"title": "PDF", "text": text})
    assert response.status_code == 202, response.content
    stored = Source.objects.get(pk=response.json()["id"]).text
    assert stored == text.replace("\f", "\n").replace("\v", "\n")


def test_tabs_and_newlines_are_text(world):
    content = "Line one\n\tindented line two\r\nthree"
    response = send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/memories", {"content": content})
    assert response.status_code == 201
    assert Memory.objects.get(pk=response.json()["results"][0]["id"]).content == content


# --- unusual but valid text round-trips intact --------------------------------------------------

UNICODE = {
    "emoji": "Our team 🧠🚀👩🏽‍💻 shipped 🇵🇹",
    "CJK": "我的妹妹住在东京。日本語のテキスト。한국어 문장",
    "RTL": "אחותי גרה בתל אביב والدي يعيش في القاهرة",
    "combining": "Cafe\u0301 Zalgo Z\u0324\u0354\u0367\u0311\u0313 a\u0308",
    "bidi and zero-width": "start \u202eRTL override\u202c \u200bzero\u200dwidth\ufeff end",
}


@pytest.mark.parametrize("text", list(UNICODE.values()), ids=list(UNICODE))
def test_unusual_unicode_is_accepted_and_round_trips(world, text):
    api, b = world.api, world.bucket.pk
    memory = {"content": text, "agent_id": text[:200], "hint_tags": [text[:100]], "hint_root": text,
              "metadata": {text[:50]: text}}  # fmt: skip
    response = send(api, "POST", f"/api/v1/buckets/{b}/memories", memory)
    assert response.status_code == 201, response.content
    memory_id = response.json()["results"][0]["id"]
    stored = api.get(f"/api/v1/memories/{memory_id}").json()
    for field in ("content", "agent_id", "hint_tags", "hint_root", "metadata"):
        assert stored[field] == memory[field], field
    listed = api.get(f"/api/v1/buckets/{b}/memories", {"agent_id": text[:200]}).json()["results"]
    assert [m["id"] for m in listed] == [memory_id]
    hits = send(api, "POST", f"/api/v1/buckets/{b}/search", {"query": text, "mode": "vector"}).json()["results"]
    hit = next(h for h in hits if h["id"] == memory_id)
    assert hit["content"] == text and hit["metadata"] == memory["metadata"] and hit["hint_tags"] == [text[:100]]

    bucket = send(api, "POST", "/api/v1/buckets", {"name": text[:200], "description": text})
    assert bucket.status_code == 201 and bucket.json()["name"] == text[:200].strip()
    document = send(api, "POST", f"/api/v1/buckets/{b}/documents", {"title": text, "text": text})
    assert document.status_code == 202
    messages = [{"role": "user", "content": text, "name": text[:200]}]
    conversation = send(api, "POST", f"/api/v1/buckets/{b}/conversations", {"title": text, "messages": messages})
    assert conversation.status_code == 202
    source = api.get(f"/api/v1/sources/{document.json()['id']}").json()
    assert source["title"] == text and source["chunks"][0]["text"] == text.strip()


def test_search_results_carry_metadata_as_an_object(world):
    # The raw SQL behind search used to hand back JSONB as a string: {"metadata": "{\"k\": 1}"}.
    b = world.bucket.pk
    send(world.api, "POST", f"/api/v1/buckets/{b}/memories", {"content": "Erin plays the cello.",
                                                              "metadata": {"k": [1, {"n": None}]}})  # fmt: skip
    for mode in ("keyword", "vector", "hybrid"):
        hits = send(world.api, "POST", f"/api/v1/buckets/{b}/search", {"query": "Erin cello", "mode": mode}).json()
        hit = next(h for h in hits["results"] if h["content"] == "Erin plays the cello.")
        assert hit["metadata"] == {"k": [1, {"n": None}]}, mode


# --- search: query strings that mean something to SQL or to tsquery ------------------------------

QUERIES = {
    "tsquery operators": "&|!():*<->'\\",
    "sql injection": "' OR 1=1 --",
    "sql injection 2": "'; DROP TABLE memories; --",
    "lone backslash": "\\",
    "lone quote": "'",
    "only stopwords": "the of and a to is",
    "only punctuation": "?!.,;:-_()[]{}",
    "tsquery prefix": "al:* | b:*",
    "like wildcards": "%_%",
    "dollar quoting": "$$ $tag$",
    "long word": "x" * 4_000,
}


@pytest.mark.parametrize("mode", ["keyword", "vector", "hybrid", "graph"])
def test_query_metacharacters_are_just_text_in_every_mode(world, mode):
    for label, query in QUERIES.items():
        response = send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/search", {"query": query, "mode": mode})
        assert response.status_code == 200, (label, response.content)
        body = response.json()
        assert body["mode_used"] == mode and isinstance(body["results"], list)
        if mode == "keyword":
            # Nothing in the bucket shares a word with these: an injected OR would return everything.
            assert body["results"] == [], label
    assert Memory.objects.count() == 3 and Bucket.objects.count() == 2


def test_entity_search_treats_metacharacters_as_text(world):
    url = f"/api/v1/buckets/{world.bucket.pk}/entities"
    assert world.api.get(url).json()["count"] >= 2
    for q in ("%", "_", "%_%", "!!!", "the", "' OR 1=1 --", "\\", "a|b & !c"):  # none names an entity
        response = world.api.get(url, {"q": q})
        assert response.status_code == 200 and response.json()["results"] == [], q
    assert [e["name"] for e in world.api.get(url, {"q": "ALICE"}).json()["results"]] == ["Alice"]


def test_keyword_search_finds_text_full_of_metacharacters(world):
    b = world.bucket.pk
    send(world.api, "POST", f"/api/v1/buckets/{b}/memories", {"content": "Fiona's C++ & Rust <-> notes: a|b!"})
    hits = send(world.api, "POST", f"/api/v1/buckets/{b}/search", {"query": "Fiona's C++ & Rust", "mode": "keyword"})
    assert hits.status_code == 200
    assert [h["content"] for h in hits.json()["results"]] == ["Fiona's C++ & Rust <-> notes: a|b!"]


# --- numbers: limits, budgets, page sizes, offsets, cursors --------------------------------------

BAD_BODY_INTEGERS = [-1, 0, 1.5, 1.0, "5", True, None, 10**30, [], {}]


@pytest.mark.parametrize("field", ["limit", "token_budget"])
def test_bad_limits_and_budgets_are_refused(world, field):
    for value in BAD_BODY_INTEGERS:
        body = {"query": "Alice", field: value}
        response = send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/search", body)
        error = assert_error(response, 400, "invalid")
        assert field in error["errors"], value
    too_many = send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/search", {"query": "a", "limit": 101})
    assert_error(too_many, 400, "invalid")


def test_huge_numbers_that_overflow_a_float_are_refused(world):
    url = f"/api/v1/buckets/{world.bucket.pk}/search"
    for number in (b"1e999", b"NaN", b"-Infinity", b"9" * 5000):
        raw = b'{"query": "a", "limit": ' + number + b"}"
        assert_error(send(world.api, "POST", url, raw=raw), 400, "parse_error")
    before = counts()
    raw = b'{"content": "x", "metadata": {"n": 1e999}}'
    assert_error(send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/memories", raw=raw), 400, "parse_error")
    assert counts() == before


BAD_QUERY_INTEGERS = ["-1", "0", "1.5", "abc", "", "1e3", "0x10", "99999999999999999999", "\x00"]


def list_urls(w) -> dict[str, tuple[str, list[str]]]:
    b = w.bucket.pk
    return {
        "buckets": ("/api/v1/buckets", ["limit", "offset"]),
        "memories": (f"/api/v1/buckets/{b}/memories", ["page_size"]),
        "sources": (f"/api/v1/buckets/{b}/sources", ["page_size"]),
        "entities": (f"/api/v1/buckets/{b}/entities", ["limit", "offset"]),
        "edges": (f"/api/v1/buckets/{b}/edges", ["limit", "offset"]),
        "source chunks": (f"/api/v1/sources/{w.source_id}", ["chunk_offset", "chunk_limit"]),
    }


@pytest.mark.parametrize("endpoint", ["buckets", "memories", "sources", "entities", "edges", "source chunks"])
def test_bad_page_sizes_and_offsets_are_refused(world, endpoint):
    url, params = list_urls(world)[endpoint]
    for param in params:
        for value in BAD_QUERY_INTEGERS:
            if param.endswith("offset") and value in ("0", "99999999999999999999"):
                continue  # valid: the first page, and an empty page past the end (below)
            response = world.api.get(url, {param: value})
            error = assert_error(response, 400, "invalid")
            assert param in error["errors"], (param, value)


@pytest.mark.parametrize("endpoint", ["buckets", "entities", "edges"])
def test_an_offset_past_the_end_is_an_empty_page(world, endpoint):
    url, _ = list_urls(world)[endpoint]
    response = world.api.get(url, {"offset": "99999999999999999999"})
    assert response.status_code == 200 and response.json()["results"] == []


def test_a_chunk_offset_past_any_source_is_refused_not_a_database_error(world):
    # Was a 500: OFFSET 99999999999999999999 is out of PostgreSQL's bigint range.
    response = world.api.get(f"/api/v1/sources/{world.source_id}", {"chunk_offset": "99999999999999999999"})
    assert_error(response, 400, "invalid")
    assert world.api.get(f"/api/v1/sources/{world.source_id}", {"chunk_offset": "1000000"}).status_code == 200


@pytest.mark.parametrize("endpoint", ["buckets", "memories", "sources", "entities", "edges", "source chunks"])
def test_unknown_query_parameters_are_refused(world, endpoint):
    url, _ = list_urls(world)[endpoint]
    error = assert_error(world.api.get(url, {"colour": "blue"}), 400, "invalid")
    assert "colour" in error["errors"]


def test_query_flags_are_true_or_false(world):
    url, _ = list_urls(world)["memories"]
    for value in ("", "maybe", "null", "2"):  # "" used to mean "not given"
        assert_error(world.api.get(url, {"pending": value}), 400, "invalid")
    assert world.api.get(url, {"pending": "false"}).status_code == 200


def test_an_unknown_api_url_is_a_json_404(world):
    for path in ("/api/v1/nope", f"/api/v1/memories/{world.memory_id}/extra", "/api/v2/buckets", "/api/"):
        assert_error(world.api.get(path), 404, "not_found")


def test_errors_outside_the_api_views_have_the_same_shape(world, monkeypatch):
    # A Host the server does not serve: Django refuses it before any view.
    assert_error(world.api.get("/api/v1/buckets", HTTP_HOST="evil.example"), 400, "bad_request")

    # And a bug: still JSON, still the error shape (and nothing about the bug in it).
    def explode(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr("memories.apis.memories.selectors.memory_get", explode)
    world.api.raise_request_exception = False
    response = world.api.get(f"/api/v1/memories/{world.memory_id}")
    assert_error(response, 500, "server_error")
    assert b"secret" not in response.content


def cursor(**parts: str) -> str:
    return base64.b64encode(urllib.parse.urlencode(parts).encode()).decode()


BAD_CURSORS = {
    "garbage": "not a cursor",
    "not base64": "%%%",
    "empty": "",
    "bad position": cursor(o="0", r="0", p="garbage"),  # was a 500: the position is compared with created_at
    "bad date position": cursor(p="2024-13-45 99:00:00"),
    "bad reverse flag": cursor(o="0", r="maybe"),
    "negative offset": cursor(o="-5"),
    # Well formed but not the API's own (unsigned): it used to be followed.
    "hand-made": cursor(p="2024-01-01 00:00:00+00:00"),
    "hand-made reverse": cursor(o="1", r="1", p="2030-01-01 00:00:00+00:00"),
    "NUL": "\x00",
}


@pytest.mark.parametrize("endpoint", ["memories", "sources"])
def test_cursors_the_api_did_not_write_are_400(world, endpoint):
    url, _ = list_urls(world)[endpoint]
    for label, value in BAD_CURSORS.items():
        response = world.api.get(url, {"cursor": value})
        assert response.status_code == 400, label
        assert_error(response, 400, "invalid")
    # and a real one still works
    send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/documents", {"title": "Two", "text": "A second."})
    page = world.api.get(url, {"page_size": "1"}).json()
    assert page["next"] and world.api.get(page["next"]).status_code == 200


# --- ids and dates ----------------------------------------------------------------------------

BAD_IDS = ["not-a-uuid", "0", "%00", "%FF%FE", "..%2F..%2Fadmin", "x" * 4000, "00000000-0000-0000-0000-000000000000",
           str(uuid.uuid4())]  # fmt: skip


def test_invalid_ids_in_paths_are_404(world):
    b = world.bucket.pk
    templates = [
        ("GET", "/api/v1/buckets/{}"), ("PATCH", "/api/v1/buckets/{}"), ("DELETE", "/api/v1/buckets/{}"),
        ("POST", "/api/v1/buckets/{}/merge"), ("GET", "/api/v1/buckets/{}/memories"),
        ("POST", "/api/v1/buckets/{}/memories"), ("POST", "/api/v1/buckets/{}/search"),
        ("POST", "/api/v1/buckets/{}/documents"), ("POST", "/api/v1/buckets/{}/conversations"),
        ("GET", "/api/v1/buckets/{}/sources"), ("GET", "/api/v1/buckets/{}/entities"),
        ("GET", "/api/v1/buckets/{}/edges"), ("GET", "/api/v1/memories/{}"), ("PATCH", "/api/v1/memories/{}"),
        ("DELETE", "/api/v1/memories/{}"), ("GET", "/api/v1/sources/{}"), ("DELETE", "/api/v1/sources/{}"),
        ("GET", "/api/v1/entities/{}"), ("GET", "/api/v1/edges/{}/memories"),
        ("GET", "/api/v1/buckets/{}/profile"), ("GET", f"/api/v1/buckets/{b}/entities/{{}}/profile"),
        ("GET", f"/api/v1/buckets/{{}}/entities/{world.entity_id}/profile"),
    ]  # fmt: skip
    before = counts()
    for method, template in templates:
        for bad in BAD_IDS:
            response = send(world.api, method, template.format(bad), {"content": "x", "query": "x"})
            assert_error(response, 404, "not_found")
    merge = send(world.api, "POST", f"/api/v1/buckets/{b}/merge", {"target_bucket_id": "not-a-uuid"})
    assert_error(merge, 404, "not_found")
    assert_error(world.api.get(f"/api/v1/buckets/{b}/edges", {"entity": "not-a-uuid"}), 400, "invalid")
    assert counts() == before


def test_ids_are_accepted_only_in_their_canonical_form(world):
    bucket = str(world.bucket.pk)
    memory = str(Memory.objects.filter(bucket=world.bucket).values_list("pk", flat=True).first())
    for template, real in (("/api/v1/buckets/{}", bucket), ("/api/v1/memories/{}", memory)):
        assert world.api.get(template.format(real)).status_code == 200
        for form in (real.upper(), real.replace("-", ""), "{" + real + "}", "urn:uuid:" + real):
            assert_error(world.api.get(template.format(form)), 404, "not_found")


BAD_DATES = ["not a date", "2024-13-45T00:00:00Z", "2024-02-30T00:00:00Z", "", "yesterday", "1700000000",
             "9999-12-31T23:59:59-14:00", "0001-01-01T00:00:00+14:00", "10000-01-01T00:00:00Z", "2024-01-01T25:61:00Z",
             "2024-01-01T00:00:00\x00Z"]  # fmt: skip


def test_invalid_dates_are_refused_everywhere(world):
    b = world.bucket.pk
    body_fields = [
        ("POST", f"/api/v1/buckets/{b}/memories", lambda d: {"content": "x", "created_at": d}),
        ("POST", f"/api/v1/buckets/{b}/memories", lambda d: {"memories": [{"content": "x", "created_at": d}]}),
        ("PATCH", f"/api/v1/memories/{world.memory_id}", lambda d: {"created_at": d}),
        ("POST", f"/api/v1/buckets/{b}/search", lambda d: {"query": "x", "now": d}),
        ("POST", f"/api/v1/buckets/{b}/search", lambda d: {"query": "x", "filters": {"created_after": d}}),
        ("POST", f"/api/v1/buckets/{b}/search", lambda d: {"query": "x", "filters": {"as_of": d}}),
        ("POST", f"/api/v1/buckets/{b}/documents", lambda d: {"title": "t", "text": "x", "created_at": d}),
        ("POST", f"/api/v1/buckets/{b}/conversations",
         lambda d: {"messages": [{"role": "user", "content": "x", "timestamp": d}]}),
    ]  # fmt: skip
    query_params = [
        (f"/api/v1/buckets/{b}/memories", "created_after"), (f"/api/v1/buckets/{b}/memories", "created_before"),
        (f"/api/v1/buckets/{b}/edges", "valid_at"), (f"/api/v1/entities/{world.entity_id}", "as_of"),
        (f"/api/v1/buckets/{b}/entities/{world.entity_id}/profile", "as_of"),
    ]  # fmt: skip
    before = snapshot(world)
    for value in [*BAD_DATES, 20240101, True, ["2024-01-01"]]:
        for method, url, make in body_fields:
            assert_error(send(world.api, method, url, make(value)), 400, "invalid")
        if isinstance(value, str):
            for url, param in query_params:
                assert_error(world.api.get(url, {param: value}), 400, "invalid")
    assert snapshot(world) == before


def test_dates_at_the_ends_of_time_work(world):
    b = world.bucket.pk
    for when in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z"):
        # The API stores years 1900 to 2200 only; a row stored that far out before the bound
        # must still be searchable, and a query may name any date.
        refused = send(
            world.api, "POST", f"/api/v1/buckets/{b}/memories", {"content": f"At {when}", "created_at": when}
        )
        assert refused.status_code == 400, refused.content
        stored_at = datetime.fromisoformat(when)
        memories_ingest(bucket=world.bucket, items=[MemoryInput(content=f"At {when}", created_at=stored_at)])
        for query in ("what happened last year", "plans for next year", "at the end of time"):
            body = {"query": query, "now": when, "filters": {"as_of": when, "created_before": when}}
            assert send(world.api, "POST", f"/api/v1/buckets/{b}/search", body).status_code == 200, (when, query)
        assert world.api.get(f"/api/v1/buckets/{b}/edges", {"valid_at": when}).status_code == 200
        assert world.api.get(f"/api/v1/buckets/{b}/memories", {"created_after": when}).status_code == 200


# --- unknown fields, and vectors (no endpoint takes one) -----------------------------------------


@pytest.mark.parametrize("name", list(STRING_FIELDS))
def test_unknown_fields_are_refused_on_every_write(world, name):
    method, url, body = writes(world)[name]
    nested = {"batch": ("memories", 1), "search": ("filters",), "conversation": ("messages", 0)}
    for where in [(), nested.get(name)]:
        if where is None:
            continue
        bad = copy.deepcopy(body)
        node = bad
        for step in where:
            node = node[step]
        node["colour"] = "blue"
        before = snapshot(world)
        error = assert_error(send(world.api, method, url, bad), 400, "invalid")
        assert "colour" in json.dumps(error["errors"]), error
        assert snapshot(world) == before


@pytest.mark.parametrize("size", [383, 384, 385, 0])
def test_no_endpoint_accepts_a_vector(world, size):
    # Embeddings are computed by Engram; a client-supplied one (of any size) is an unknown field.
    b, vector = world.bucket.pk, [0.1] * size
    before = snapshot(world)
    for method, url, body in [
        ("POST", f"/api/v1/buckets/{b}/memories", {"content": "x", "embedding": vector}),
        ("POST", f"/api/v1/buckets/{b}/memories", {"memories": [{"content": "x", "embedding": vector}]}),
        ("PATCH", f"/api/v1/memories/{world.memory_id}", {"embedding": vector}),
        ("POST", f"/api/v1/buckets/{b}/search", {"query": "x", "mode": "vector", "vector": vector}),
        ("POST", f"/api/v1/buckets/{b}/search", {"query": "x", "embedding": vector}),
    ]:
        assert_error(send(world.api, method, url, body), 400, "invalid")
    assert snapshot(world) == before


def test_booleans_are_booleans(world):
    # A destructive flag must not be guessed from 0, "no" or "false".
    b = world.bucket.pk
    before = counts()
    for value in (0, 1, "true", "false", "yes", None):
        merge = send(world.api, "POST", f"/api/v1/buckets/{world.other.pk}/merge",
                     {"target_bucket_id": str(b), "remove_source": value})  # fmt: skip
        assert_error(merge, 400, "invalid")
        for body in ({"query": "x", "explain": value}, {"query": "x", "filters": {"include_superseded": value}}):
            assert_error(send(world.api, "POST", f"/api/v1/buckets/{b}/search", body), 400, "invalid")
        batch = {"memories": [{"content": "x"}], "sequence": value}
        assert_error(send(world.api, "POST", f"/api/v1/buckets/{b}/memories", batch), 400, "invalid")
    assert counts() == before


def test_objects_are_objects(world):
    b = world.bucket.pk
    for value in (0, False, "", [], "{}", [1]):
        for method, url, body in [
            (
                "POST",
                f"/api/v1/buckets/{b}/search",
                {"query": "x", "ranking": value},
            ),  # 0 used to pass as "no overrides"
            ("POST", f"/api/v1/buckets/{b}/search", {"query": "x", "filters": value}),
            ("POST", f"/api/v1/buckets/{b}/memories", {"content": "x", "metadata": value}),
            ("POST", f"/api/v1/buckets/{b}/documents", {"title": "t", "text": "x", "metadata": value}),
        ]:
            assert_error(send(world.api, method, url, body), 400, "invalid")


# --- size and shape: huge bodies, deep nesting, broken encodings ----------------------------------


def test_oversized_fields_are_refused_and_write_nothing(world):
    b = world.bucket.pk
    cases = [
        ("POST", f"/api/v1/buckets/{b}/memories", {"content": "x" * 20_001}),
        ("POST", f"/api/v1/buckets/{b}/memories", {"memories": [{"content": f"m{i}"} for i in range(MAX_BATCH + 1)]}),
        ("POST", f"/api/v1/buckets/{b}/memories", {"content": "x", "metadata": {"k": "x" * 16_400}}),
        ("POST", f"/api/v1/buckets/{b}/memories", {"content": "x", "hint_tags": ["t" * 101]}),
        ("POST", f"/api/v1/buckets/{b}/memories", {"content": "x", "hint_tags": [f"t{i}" for i in range(51)]}),
        ("POST", f"/api/v1/buckets/{b}/search", {"query": "x" * 4_001}),
        ("POST", "/api/v1/buckets", {"name": "n" * 201}),
        ("POST", "/api/v1/buckets", {"name": "n", "description": "d" * 10_001}),
        ("POST", f"/api/v1/buckets/{b}/documents", {"title": "t", "text": "é" * (1024 * 1024 + 1)}),  # > 2 MB as UTF-8
        ("POST", f"/api/v1/buckets/{b}/documents", {"title": "t" * 501, "text": "x"}),
        ("POST", f"/api/v1/buckets/{b}/conversations", {"messages": [{"role": "user", "content": "x" * 20_001}]}),
        ("POST", f"/api/v1/buckets/{b}/conversations", {"messages": [{"role": "user", "content": "x" * 19_999}] * 101}),
    ]
    before = counts()
    for method, url, body in cases:
        assert_error(send(world.api, method, url, body), 400, "invalid")
    assert counts() == before


def test_a_body_over_the_maximum_is_413(world):
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    raw = json.dumps({"memories": [{"content": "y" * 19_000}] * (limit // 19_000 + 1)}).encode()
    assert len(raw) > limit
    before = counts()
    error = assert_error(send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/memories", raw=raw), 413)
    assert error["code"] == "too_large" and str(limit) in error["detail"]
    assert counts() == before


def deep(levels: int, leaf: str = "1") -> str:
    return "[" * levels + leaf + "]" * levels


@pytest.mark.parametrize("name", list(STRING_FIELDS))
def test_deeply_nested_json_is_400_not_a_crash(world, name):
    method, url, _ = writes(world)[name]
    before = snapshot(world)
    for raw in (deep(100_000), '{"a": ' * 100_000 + "1" + "}" * 100_000, deep(65)):
        assert_error(send(world.api, method, url, raw=raw.encode()), 400, "parse_error")
    assert snapshot(world) == before


def test_metadata_nesting_is_limited(world):
    url = f"/api/v1/buckets/{world.bucket.pk}/memories"

    def nested(levels: int) -> dict:
        value: dict = {"leaf": 1}
        for _ in range(levels - 1):
            value = {"n": value}
        return value

    ok = send(world.api, "POST", url, {"content": "deep but fine", "metadata": nested(MAX_METADATA_DEPTH)})
    assert ok.status_code == 201
    stored = world.api.get(f"/api/v1/memories/{ok.json()['results'][0]['id']}").json()
    assert stored["metadata"] == nested(MAX_METADATA_DEPTH)
    before = counts()
    error = assert_error(
        send(world.api, "POST", url, {"content": "too deep", "metadata": nested(MAX_METADATA_DEPTH + 1)})
    )
    assert "nested" in error["detail"]
    assert counts() == before


MALFORMED = {
    "invalid UTF-8": b'{"content": "caf\xe9 \xff\xfe"}',
    "truncated UTF-8": b'{"content": "\xe6\x97"}',
    "overlong UTF-8": b'{"content": "\xc0\xaf"}',
    "UTF-8 BOM": b'\xef\xbb\xbf{"content": "x"}',
    "UTF-16": '{"content": "x"}'.encode("utf-16"),
    "not JSON": b"content=x",
    "trailing garbage": b'{"content": "x"} {"content": "y"}',
    "single quotes": b"{'content': 'x'}",
    "NUL byte": b'{"content": "x"}\x00',
}


@pytest.mark.parametrize("name", list(STRING_FIELDS))
def test_malformed_bodies_are_parse_errors(world, name):
    method, url, _ = writes(world)[name]
    before = snapshot(world)
    for label, raw in MALFORMED.items():
        response = send(world.api, method, url, raw=raw)
        assert response.status_code == 400, label
        assert_error(response, 400, "parse_error")
    # A charset that is not a text encoding (bz2_codec would decompress the body past the size limit).
    for content_type in ("application/json; charset=bz2_codec", "application/json; charset=zlib_codec"):
        assert_error(send(world.api, method, url, raw=b"{}", content_type=content_type), 400, "parse_error")
    assert_error(send(world.api, method, url, raw=b"content=x", content_type="text/plain"), 415)
    assert snapshot(world) == before


def test_a_latin1_body_that_says_so_is_read_as_latin1(world):
    raw = '{"content": "Gérard likes crêpes"}'.encode("latin-1")
    response = send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/memories", raw=raw,
                    content_type="application/json; charset=latin-1")  # fmt: skip
    assert response.status_code == 201
    assert Memory.objects.filter(content="Gérard likes crêpes").exists()


# --- atomicity: a bad item anywhere rejects the whole request ------------------------------------


@pytest.mark.parametrize(
    "bad_item",
    [{"content": ""}, {"content": "x\x00"}, {"content": "x", "metadata": {"_engram_x": 1}},
     {"content": "x", "hint_tags": "t"}, {"content": "x", "created_at": "soon"}, {"content": "x", "unknown": 1},
     "not an object"],
    ids=["blank", "NUL", "reserved metadata", "tags not a list", "bad date", "unknown field", "not an object"],
)  # fmt: skip
def test_a_full_batch_with_a_bad_last_item_writes_nothing(world, bad_item):
    items = [{"content": f"Fact number {i} about the fleet."} for i in range(MAX_BATCH - 1)] + [bad_item]
    before = counts()
    error = assert_error(send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/memories", {"memories": items}))
    assert list(error["errors"]["memories"]) == [str(MAX_BATCH - 1)]
    assert counts() == before


def test_a_conversation_with_a_bad_last_message_writes_nothing(world):
    messages = [{"role": "user", "content": f"Message {i}."} for i in range(999)] + [{"role": "system", "content": "x"}]
    before = counts()
    error = assert_error(send(world.api, "POST", f"/api/v1/buckets/{world.bucket.pk}/conversations",
                              {"messages": messages}))  # fmt: skip
    assert list(error["errors"]["messages"]) == ["999"]
    assert counts() == before


# --- through a real server ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def server(django_db_setup, tmp_path_factory):
    """gunicorn on the test database (without the embedding model: what is tested here is the
    HTTP layer), and its log, to check that no request left a traceback behind."""
    log = tmp_path_factory.mktemp("hostile") / "server.log"
    env = base_env(DATABASE_URL=test_database_url(), ENGRAM_EMBEDDINGS="off", ENGRAM_TOKEN_RATE="100000/min")
    with web_server(env, workers=1, log=log) as base:
        yield urllib.parse.urlsplit(base).port, log


def raw_request(port: int, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
    """One request over a fresh connection, bytes as given; (status, parsed JSON or raw bytes)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.putrequest(method, path, skip_accept_encoding=True)
        for name, value in (headers or {}).items():
            connection.putheader(name, value)
        if body is not None and not {"Transfer-Encoding", "Content-Length"} & set(headers or {}):
            connection.putheader("Content-Length", str(len(body)))
        connection.endheaders()
        if body is not None:
            # The server may answer before reading it all (a body over the limit): read that answer.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                connection.send(body)
        response = connection.getresponse()
        data = response.read()
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_hostile_bodies_through_gunicorn(server):
    port, log = server
    tenant = tenant_services.tenant_create(name="Hostile")
    bucket = bucket_create(tenant=tenant, name="main")
    secret = tenant_services.token_issue(tenant=tenant, name="t", scopes=["admin"]).secret
    auth = {"Authorization": f"Bearer {secret}", "Content-Type": "application/json"}
    url = f"/api/v1/buckets/{bucket.pk}/memories"

    def ok() -> None:
        # The worker is alive and well after each hostile request.
        status, body = raw_request(port, "POST", url, json.dumps({"content": "still here"}).encode(), auth)
        assert status == 201, body

    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    hostile = [
        (b'{"content": "caf\xe9 \xff\xfe"}', 400, "parse_error"),
        (b'{"content": "\xed\xa0\x80"}', 400, "parse_error"),  # an encoded surrogate is not UTF-8
        (deep(100_000).encode(), 400, "parse_error"),
        (b'{"content": "x\\u0000y"}', 400, "invalid"),
        (b'{"content": "\\ud800"}', 400, "invalid"),
        (b'{"content": "' + b"x" * (limit + 1) + b'"}', 413, "too_large"),
    ]
    for raw, status, code in hostile:
        got, body = raw_request(port, "POST", url, raw, auth)
        assert (got, body["code"]) == (status, code), (raw[:40], got, body)
        assert body["detail"]
        ok()
    assert Memory.objects.filter(bucket=bucket).count() == 1  # "still here", deduplicated

    # Bytes in the path and query that are not UTF-8, and a path that is not an id at all.
    for path in ("/api/v1/buckets/%FF%FE/memories", "/api/v1/memories/%C0%AF", f"{url}?agent_id=%FF%FE",
                 f"{url}?cursor=%FF", f"/api/v1/buckets/{bucket.pk}/entities?q=%00"):  # fmt: skip
        got, body = raw_request(port, "GET", path, headers=auth)
        assert got in (200, 400, 404) and isinstance(body, dict), (path, got, body)
        if got != 200:
            assert body["detail"] and body["code"]
    ok()

    # A chunked body (no Content-Length) is read like any other, and limited like any other.
    def chunked(payload: bytes) -> bytes:
        return b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:10], payload[10:])) + b"0\r\n\r\n"

    headers = {**auth, "Transfer-Encoding": "chunked"}
    got, body = raw_request(port, "POST", url, chunked(b'{"content": "sent in chunks"}'), headers)
    assert got == 201 and Memory.objects.filter(content="sent in chunks").exists(), body
    got, body = raw_request(port, "POST", url, chunked(b'{"content": "' + b"x" * limit + b'"}'), headers)
    assert (got, body["code"]) == (413, "too_large")
    got, body = raw_request(port, "POST", url, chunked(deep(100_000).encode()), headers)
    assert (got, body["code"]) == (400, "parse_error")

    # Under /api/, errors that never reach a view have the same JSON shape.
    assert raw_request(port, "GET", "/api/v1/no-such-thing", headers=auth) == (
        404, {"detail": "No such endpoint.", "code": "not_found"})  # fmt: skip
    got, body = raw_request(port, "PUT", url, b"{}", auth)
    assert (got, body["code"]) == (405, "method_not_allowed")
    # gunicorn itself refuses a malformed Content-Length, before any of our code runs
    assert raw_request(port, "POST", url, b"{}", {**auth, "Content-Length": "abc"})[0] == 400
    ok()
    text = Path(log).read_text(errors="replace")
    assert "Traceback" not in text, text[text.find("Traceback") :][:3000]


def get_with_type(port: int, path: str, headers: dict | None = None) -> tuple[int, str, bytes]:
    """GET over a fresh connection; (status, Content-Type, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        connection.request("GET", path, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.getheader("Content-Type", ""), response.read()
    finally:
        connection.close()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_over_long_urls_answer_414_in_the_error_shape_through_gunicorn(server):
    port, log = server
    tenant = tenant_services.tenant_create(name="Long URLs")
    secret = tenant_services.token_issue(tenant=tenant, name="t", scopes=["read", "write"]).secret
    auth = {"Authorization": f"Bearer {secret}"}
    limit = settings.MAX_URL_BYTES

    def url(prefix: str, length: int) -> str:
        return prefix + "x" * (length - len(prefix))

    # A URL of the maximum length is served as usual (this one names no endpoint) ...
    assert raw_request(port, "GET", url("/api/v1/no-such-thing/", limit), headers=auth) == (
        404, {"detail": "No such endpoint.", "code": "not_found"})  # fmt: skip
    # ... one byte longer, and up to what gunicorn reads, it is a 414 in the API's error shape,
    # with a token or without one (nothing is looked at before the URL).
    for length in (limit + 1, 8000):
        for path in (url("/api/v1/buckets?q=", length), url("/api/v1/no-such-thing/", length)):
            for headers in (auth, {}):
                status, content_type, body = get_with_type(port, path, headers)
                assert (status, content_type) == (414, "application/json"), (length, path[:30], body[:200])
                assert json.loads(body) == {
                    "detail": f"The URL is longer than {limit} bytes (path and query string); "
                    "send long values in a body.",
                    "code": "uri_too_long",
                }
    # A write with an over-long URL writes nothing.
    status, body = raw_request(port, "POST", url("/api/v1/buckets?q=", 5000), b'{"name": "long"}',
                               {**auth, "Content-Type": "application/json"})  # fmt: skip
    assert (status, body["code"]) == (414, "uri_too_long") and not tenant.buckets.exists()
    # The console answers a page of its own, not the server's.
    status, content_type, body = get_with_type(port, url("/admin/login/?next=/admin/", 5000))
    assert (status, content_type.split(";")[0]) == (414, "text/html") and b"<h1>URL too long</h1>" in body
    # Past the longest request line gunicorn reads (8190 bytes), gunicorn answers 414 itself.
    assert get_with_type(port, url("/api/v1/buckets?q=", 9000), auth)[0] == 414
    text = Path(log).read_text(errors="replace")
    assert "Traceback" not in text, text[text.find("Traceback") :][:3000]
