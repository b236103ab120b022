"""The client's models (clients/python/engram_client/models.py) copy the server's output
serializers by hand; here they are held to the server's OpenAPI schema, generated in-process
by drf-spectacular, so that a field a serializer gains, loses, renames or retypes fails a test
rather than reaching users of the client as a silent ``None``.

For each answer the client parses into a model (``SOURCES``, nested models followed through
their fields), the model must have every field the answer has, nothing the server never sends,
a type that reads the schema's (``datetime`` for a date-time, ``X | None`` where the server may
send ``null``), and a field it requires must be one every answer carries.
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from datetime import datetime
from typing import Any

import pytest
from drf_spectacular.generators import SchemaGenerator
from engram_client import models
from engram_client.models import (
    Block,
    BlockVersion,
    Bucket,
    DeletedMemory,
    Edge,
    EdgeMemories,
    Entity,
    ErasureResult,
    Feedback,
    History,
    ImportResult,
    LearnedRanking,
    Memory,
    MergeResult,
    Profile,
    SearchResult,
    Source,
    SourceDeleted,
    SourceSubmitted,
    WriteResult,
)

# The answers the client parses, by operation; "results": the items of a page's (or a batch
# answer's) results, else the whole answer.
SOURCES: list[tuple[type[models.Model], str, str]] = [
    (Bucket, "GET /buckets", "results"),
    (Bucket, "POST /buckets", ""),
    (Bucket, "GET /buckets/{bucket_id}", ""),
    (Bucket, "PATCH /buckets/{bucket_id}", ""),
    (MergeResult, "POST /buckets/{bucket_id}/merge", ""),
    (LearnedRanking, "GET /buckets/{bucket_id}/learned-ranking", ""),
    (LearnedRanking, "DELETE /buckets/{bucket_id}/learned-ranking", ""),
    (WriteResult, "POST /buckets/{bucket_id}/memories", "results"),
    (Memory, "GET /memories/{memory_id}", ""),
    (Memory, "PATCH /memories/{memory_id}", ""),
    (Memory, "POST /memories/{memory_id}/restore", ""),
    (Memory, "GET /buckets/{bucket_id}/memories", "results"),
    (History, "GET /memories/{memory_id}/history", ""),
    (Feedback, "POST /memories/{memory_id}/feedback", ""),
    (DeletedMemory, "GET /buckets/{bucket_id}/deleted", "results"),
    (SearchResult, "POST /buckets/{bucket_id}/search", ""),
    (SearchResult, "POST /search", ""),
    (ImportResult, "POST /buckets/{bucket_id}/import", ""),
    (SourceSubmitted, "POST /buckets/{bucket_id}/documents", ""),
    (SourceSubmitted, "POST /buckets/{bucket_id}/conversations", ""),
    (Source, "GET /buckets/{bucket_id}/sources", "results"),
    (Source, "GET /sources/{source_id}", ""),
    (SourceDeleted, "DELETE /sources/{source_id}", ""),
    (Entity, "GET /buckets/{bucket_id}/entities", "results"),
    (Entity, "GET /entities/{entity_id}", ""),
    (Edge, "GET /buckets/{bucket_id}/edges", "results"),
    (EdgeMemories, "GET /edges/{edge_id}/memories", ""),
    (Profile, "GET /buckets/{bucket_id}/profile", ""),
    (Profile, "GET /buckets/{bucket_id}/entities/{entity_id}/profile", ""),
    (ErasureResult, "POST /erasure", ""),
    (Block, "GET /buckets/{bucket_id}/blocks", "results"),
    (Block, "GET /buckets/{bucket_id}/blocks/{label}", ""),
    (Block, "PATCH /buckets/{bucket_id}/blocks/{label}", ""),
    (BlockVersion, "GET /buckets/{bucket_id}/blocks/{label}/history", "results"),
]

# Where the schema is vaguer than the answer, and the model rightly more precise.
SCHEMA_VAGUER: dict[tuple[str, str], str] = {
    # A SerializerMethodField whose method is typed `-> str` (memories/apis/lifecycle.py): the
    # schema has no date-time format, but the value is DateTimeField's ISO 8601.
    ("DeletedMemory", "purge_after"): "an ISO 8601 time",
}

MODELS = sorted(
    (cls for cls in vars(models).values() if isinstance(cls, type) and issubclass(cls, models.Model)),
    key=lambda cls: cls.__name__,
)
MODELS.remove(models.Model)


@pytest.fixture(scope="module")
def schema():
    return SchemaGenerator().get_schema(request=None, public=True)


@pytest.fixture(scope="module")
def parsed(schema):
    return answers_by_model(schema)


def test_every_model_of_the_client_is_checked(parsed):
    assert [cls.__name__ for cls in MODELS if cls not in parsed] == []


@pytest.mark.parametrize("model", MODELS, ids=lambda cls: cls.__name__)
def test_the_model_matches_the_schema_of_every_answer_it_reads(model, parsed):
    problems = drift(model, parsed[model])
    assert not problems, "\n".join(problems)


def test_a_server_field_renamed_or_retyped_is_reported(schema):
    # The check itself, on a schema where the memory serializer renamed content to text and
    # made created_at a plain string.
    changed = copy.deepcopy(schema)
    answer = changed["paths"]["/api/v1/memories/{memory_id}"]["get"]["responses"]["200"]["content"]
    memory = changed["components"]["schemas"][answer["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]]
    memory["properties"]["text"] = memory["properties"].pop("content")
    memory["properties"]["created_at"] = {"type": "string"}
    problems = drift(Memory, answers_by_model(changed)[Memory])
    assert "GET /memories/{memory_id}: text is not a field of Memory" in problems
    assert "GET /memories/{memory_id}: created_at is datetime, the schema says string" in problems
    # Still sent by the list endpoint's serializer: content is not reported as never sent.
    assert not any("content" in problem for problem in problems)


# --- reading the schema ----------------------------------------------------------------------


def answers_by_model(schema: dict) -> dict[type, list[tuple[str, dict]]]:
    """Every model, with the object schemas of the answers it is built from: ``(where, schema)``."""
    found: dict[type, list[tuple[str, dict]]] = {}
    for model, operation, pointer in SOURCES:
        method, path = operation.split(" ", 1)
        (answer,) = [
            response["content"]["application/json"]["schema"]
            for status, response in schema["paths"]["/api/v1" + path][method.lower()]["responses"].items()
            if status.startswith("2") and "application/json" in response.get("content", {})
        ]
        answer = _inline(schema, answer)
        if pointer:
            answer = answer["properties"][pointer]["items"]
        _collect(model, answer, operation, found)
    return found


def _inline(schema: dict, node: Any, depth: int = 0) -> Any:
    """``node`` with every reference replaced by what it names, a nullable reference's one-item
    ``allOf`` by its target (``nullable`` kept), and an enum-or-null ``oneOf`` by the enum, nullable."""
    assert depth < 20, "a schema that refers to itself"
    if isinstance(node, list):
        return [_inline(schema, item, depth + 1) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
        return _inline(schema, {**target, **{k: v for k, v in node.items() if k != "$ref"}}, depth + 1)
    node = {key: _inline(schema, value, depth + 1) for key, value in node.items()}
    if len(node.get("allOf", ())) == 1:
        (target,) = node.pop("allOf")
        node = {**target, **node}
    options = node.get("oneOf", ())
    real = [option for option in options if option.get("enum") not in ([None], [""])]
    if options and len(real) == 1:
        node = {**real[0], **{k: v for k, v in node.items() if k != "oneOf"}}
        if len(real) < len(options):
            node["nullable"] = True
    return node


def _collect(model: type, node: dict, where: str, found: dict) -> None:
    found.setdefault(model, []).append((where, node))
    hints = typing.get_type_hints(model)
    for field in _fields(model):
        prop = node.get("properties", {}).get(field.name)
        if prop is None:
            continue
        base = _without_none(hints[field.name])
        if typing.get_origin(base) is list:
            (base,) = typing.get_args(base)
            prop = prop.get("items", {})
        if isinstance(base, type) and issubclass(base, models.Model):
            _collect(base, prop, f"{where} {field.name}", found)


# --- comparing ------------------------------------------------------------------------------


def drift(model: type, answers: list[tuple[str, dict]]) -> list[str]:
    """What differs between ``model`` and the answers it is built from, one line each."""
    problems = []
    fields = {field.name: field for field in _fields(model)}
    hints = typing.get_type_hints(model)
    sent = set().union(*(node.get("properties", {}) for _, node in answers))
    problems += [f"{model.__name__}.{name} is in no answer it is read from" for name in sorted(fields.keys() - sent)]
    for where, node in answers:
        properties, required = node.get("properties", {}), set(node.get("required", ()))
        problems += [f"{where}: {name} is not a field of {model.__name__}" for name in properties if name not in fields]
        for name, field in fields.items():
            needed = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
            if needed and name not in required:
                problems.append(f"{where}: {name} is required by {model.__name__} but the answer may lack it")
            if name in properties and (model.__name__, name) not in SCHEMA_VAGUER:
                problem = _type_problem(hints[name], properties[name])
                if problem:
                    problems.append(f"{where}: {name} {problem}")
    return problems


_KINDS: dict[Any, set[str]] = {
    str: {"string"},
    datetime: {"date-time"},
    int: {"integer"},
    float: {"number", "integer"},
    bool: {"boolean"},
    dict: {"object"},
    list: {"array"},
}


def _type_problem(hint: Any, prop: dict) -> str | None:
    nullable = prop.get("nullable", False)
    if nullable and _without_none(hint) == hint:
        return f"is {_name(hint)}, but the server may send null"
    return _kind_problem(_without_none(hint), prop)


def _kind_problem(hint: Any, prop: dict) -> str | None:
    if hint is Any or not ({"type", "properties", "additionalProperties", "items", "enum"} & prop.keys()):
        return None  # either side takes anything
    kind = _kind(prop)
    origin = typing.get_origin(hint) or hint
    wanted = {"object"} if isinstance(origin, type) and issubclass(origin, models.Model) else _KINDS[origin]
    if kind not in wanted:
        return f"is {_name(hint)}, the schema says {kind}"
    if origin is list and typing.get_args(hint):
        inner = _kind_problem(typing.get_args(hint)[0], prop.get("items", {}))
        return inner and f"items: {inner}"
    return None


def _kind(prop: dict) -> str:
    if prop.get("type") == "string" and prop.get("format") == "date-time":
        return "date-time"
    if "type" in prop:
        return prop["type"]
    return "object" if {"properties", "additionalProperties"} & prop.keys() else "?"


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if len(options) == 1:
            return options[0]
    return hint


def _name(hint: Any) -> str:
    return getattr(hint, "__name__", None) if typing.get_origin(hint) is None else str(hint)


def _fields(model: type) -> list[dataclasses.Field]:
    return [field for field in dataclasses.fields(model) if field.name != "raw"]
