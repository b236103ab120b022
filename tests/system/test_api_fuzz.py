"""API fuzzing: schemathesis generates requests from our own OpenAPI schema (/api/schema/) and
sends them, in process, to the WSGI application, with a valid admin token.

For every operation it draws schema-conforming (positive) and schema-violating (negative)
requests, plus schemathesis' deterministic boundary cases (coverage: each field at and past
its limits, missing, of the wrong type). Path ids are mostly real ids of a seeded bucket
(memories, a document, graph entities and edges) so the requests reach the real code; the
rest are whatever the generator made of them. Each response must:

- never be a 5xx;
- have a status the schema documents for that operation, and a body matching the schema
  (errors included: every 4xx has the standard ``{"detail", "code", ...}`` shape);
- reject negative data with a 4xx.

And every operation must have answered at least one request with a 2xx: a fuzz run that only
ever produced 404s or 400s would test nothing.

Bounded and reproducible: a fixed number of examples per operation, no deadline,
derandomized (the same requests every run), no example database.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Callable

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from django.urls import get_resolver
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from engram_site.wsgi import application  # what gunicorn serves
from graph.models import Edge, Entity
from graph.services.extraction import graph_extract_memories
from memories.services import MemoryInput, memories_ingest
from memories.services.blocks import Expected, block_put
from memories.services.buckets import bucket_create
from sources.services.process import source_process
from sources.services.submit import source_submit_document
from tenants import services as tenant_services
from webhooks import services as webhook_services
from webhooks.models import WebhookDelivery

pytestmark = [pytest.mark.slow, pytest.mark.django_db]  # minutes of generated requests

# Generated requests per operation (positive and negative drawn at random), on top of the
# coverage cases (at most COVERAGE_CASES per operation; the richest operations have ~250).
MAX_EXAMPLES = 25
COVERAGE_CASES = 250

# Every status an invalid request may get. 413 and 414 are ours (a body over
# ENGRAM_MAX_BODY_BYTES, a URL over MAX_URL_BYTES).
REJECTED = ["400", "401", "403", "404", "405", "409", "412", "413", "414", "415", "428", "429"]

CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {"negative_data_rejection": {"expected-statuses": REJECTED}},
        # The token is sent with every request (below); authentication has its own tests.
        "generation": {"with-security-parameters": False},
    }
)
# An import's body is JSON Lines: text, sent as the generator wrote it.
schemathesis.serializer.alias(["application/x-ndjson", "application/jsonl"], "text/plain")
SCHEMA = schemathesis.openapi.from_wsgi("/api/schema/", application, config=CONFIG)
OPERATIONS = {result.ok().label: result.ok() for result in SCHEMA.get_all_operations()}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]

MEMORIES = [
    "Alice moved to Lisbon in 2023.",
    "Alice works at Acme Corp as an engineer.",
    "Bob lives in Berlin and likes cycling.",
    "我喜欢在周末爬山 🏔️",
    "מזג האוויר היום נעים",
]


class World:
    """A tenant with an admin token and a bucket with memories in it for paths to point at
    (plus graph facts or a processed document when the operation is about those). Ids that an
    operation destroys (bucket, memory, source) are made fresh for each request."""

    def __init__(self, operation):
        self.counter = itertools.count()
        self.tenant = tenant_services.tenant_create(name="Fuzz")
        self.secret = tenant_services.token_issue(tenant=self.tenant, name="fuzz", scopes=["admin"]).secret
        self.bucket = bucket_create(tenant=self.tenant, name="fuzz")
        self.other_bucket = bucket_create(tenant=self.tenant, name="fuzz-other")
        ids = [r.id for r in memories_ingest(bucket=self.bucket, items=[MemoryInput(content=c) for c in MEMORIES])]
        self.memory_id = ids[0]
        block_put(bucket=self.bucket, agent_id=None, label="persona", content="Curious and kind.", expected=Expected())
        self.entity_id = self.edge_id = self.source_id = None
        if "/entities" in operation.path or "/edges" in operation.path or operation.path.endswith("/profile"):
            graph_extract_memories(memory_ids=ids)
            self.entity_id = Entity.objects.for_bucket(self.bucket).values_list("pk", flat=True).first()
            self.edge_id = Edge.objects.for_bucket(self.bucket).values_list("pk", flat=True).first()
            assert self.entity_id and self.edge_id, "the seed memories must give the graph endpoints something"
        if "/sources" in operation.path:
            self.source_id = self.new_source()
            source_process(source_id=self.source_id)
        self.webhook_id = self.delivery_id = None
        if "/webhook" in operation.path:
            self.webhook_id = self.new_webhook()
            webhook_services.deliveries_dispatch()
            self.delivery_id = WebhookDelivery.objects.values_list("pk", flat=True).first()

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.secret}"}

    def new_bucket(self) -> str:
        bucket = bucket_create(tenant=self.tenant, name=f"fresh-{next(self.counter)}")
        memories_ingest(bucket=bucket, items=[MemoryInput(content="Carol lives in Oslo.")])
        block_put(bucket=bucket, agent_id=None, label="persona", content="Curious and kind.", expected=Expected())
        return str(bucket.pk)

    def new_memory(self) -> str:
        item = MemoryInput(content=f"Fresh memory number {next(self.counter)}.")
        return str(memories_ingest(bucket=self.bucket, items=[item])[0].id)

    def new_source(self) -> str:
        result = source_submit_document(
            bucket=self.bucket, title=f"Doc {next(self.counter)}", text="Dana teaches chemistry in Porto.",
            submitted_by="fuzz",
        )  # fmt: skip
        return str(result.source.pk)

    def new_webhook(self) -> str:
        subscription = webhook_services.subscription_create(tenant=self.tenant, url="http://127.0.0.1:9/fuzz")
        memories_ingest(bucket=self.bucket, items=[MemoryInput(content=f"Webhook fact {next(self.counter)}.")])
        return str(subscription.pk)

    def real_ids(self, operation) -> dict[str, Callable[[], str]]:
        destroys = operation.method.upper() == "DELETE" or operation.path.endswith("/merge")
        bucket = self.new_bucket if destroys and operation.path.startswith("/api/v1/buckets/{bucket_id}") else None
        return {
            "bucket_id": bucket or (lambda: str(self.bucket.pk)),
            "memory_id": self.new_memory if destroys else (lambda: str(self.memory_id)),
            "source_id": self.new_source if destroys else (lambda: str(self.source_id)),
            "entity_id": lambda: str(self.entity_id),
            "edge_id": lambda: str(self.edge_id),
            "webhook_id": self.new_webhook if destroys else (lambda: str(self.webhook_id)),
            "delivery_id": lambda: str(self.delivery_id),
        }


def prepare(case, world: World, index: int) -> None:
    """Point most requests at real objects; every fifth keeps the generated path ids."""
    if index % 5 == 4:
        return
    ids = world.real_ids(case.operation)
    if case.path_parameters:
        # Assigned, not updated in place: schemathesis then re-classifies the case (positive or
        # negative) for what is actually sent.
        case.path_parameters = {name: ids[name]() if name in ids else value for name, value in case.path_parameters.items()}  # fmt: skip  # noqa: E501
    if isinstance(case.body, dict) and "target_bucket_id" in case.body and index % 2 == 0:
        case.body = {**case.body, "target_bucket_id": str(world.other_bucket.pk)}
    if "name" in case.query and index % 2 == 0:
        # A profile by name: a generated name is seldom one of the bucket's (404); Alice is.
        case.query = {**case.query, "name": "Alice"}
    if "label" in (case.path_parameters or {}) and index % 2 == 0:
        # A block's label: a generated one names no block (404 to all but a PUT); persona is seeded.
        case.path_parameters = {**case.path_parameters, "label": "persona"}
        # The seeded block is the shared one: a generated agent_id names a block no one wrote.
        case.query = {name: value for name, value in (case.query or {}).items() if name != "agent_id"}
    if "/blocks/{label}" in case.operation.path and case.operation.method.upper() != "GET" and index % 3 != 2:
        # A change of an existing block needs If-Match (428 without); * matches any version.
        case.headers = {**(case.headers or {}), "If-Match": "*"}
        case.headers.pop("If-None-Match", None)
        if case.operation.method.upper() == "PATCH" and index % 4 == 0:
            # A generated change seldom says exactly one thing (content, append or replace) under the limit.
            case.body = {"append": "Also likes tea.", "reason": "fuzz"}
    if "cursor" in case.query and index % 3:
        # A generated cursor is never one the API wrote (400); drop it to let the filters run.
        case.query = {name: value for name, value in case.query.items() if name != "cursor"}


def coverage_cases(operation) -> list:
    generation = SCHEMA.config.generation_for(operation=operation, phase="coverage")
    cases = SCHEMA.iter_coverage_cases(
        operation, generation_modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], generation_config=generation
    )
    return list(itertools.islice(cases, COVERAGE_CASES))


def api_routes() -> set[str]:
    """Every URL pattern under /api/v1/, as an OpenAPI path."""
    routes = set()

    def walk(patterns, prefix: str) -> None:
        for pattern in patterns:
            route = prefix + str(pattern.pattern)
            if hasattr(pattern, "url_patterns"):
                walk(pattern.url_patterns, route)
            elif route.startswith("api/v1/"):
                routes.add("/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route))

    walk(get_resolver().url_patterns, "")
    return routes


def test_every_api_route_is_in_the_schema_and_fuzzed():
    # A view added without reaching the schema would also escape the fuzzing below.
    assert api_routes() == {operation.path for operation in OPERATIONS.values()}


@pytest.fixture(autouse=True)
def _webhooks_to_loopback(settings):
    # Generated webhook URLs name hosts that would otherwise be looked up in the DNS.
    settings.ENGRAM_WEBHOOKS_ALLOW_PRIVATE = True


@pytest.fixture(autouse=True)
def _keep_the_test_connection():
    """The WSGI handler closes the database connection after each request, which would end the
    test's transaction; Django's own test client disconnects the same two signals."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.mark.parametrize("label", sorted(OPERATIONS))
def test_operation_conforms_to_its_schema(label):
    operation = OPERATIONS[label]
    world = World(operation)
    statuses: collections.Counter[int] = collections.Counter()
    counter = itertools.count()

    def send(case) -> None:
        prepare(case, world, next(counter))
        response = case.call(headers=world.headers)
        statuses[response.status_code] += 1
        case.validate_response(response, checks=CHECKS, headers=world.headers)

    for case in coverage_cases(operation):
        send(case)

    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=st.one_of(
            operation.as_strategy(generation_mode=GenerationMode.POSITIVE),
            operation.as_strategy(generation_mode=GenerationMode.NEGATIVE),
        )
    )
    def fuzz(case):
        send(case)

    fuzz()
    print(f"{label}: {sum(statuses.values())} requests, statuses {dict(sorted(statuses.items()))}")
    succeeded = sum(n for status, n in statuses.items() if 200 <= status < 300)
    assert succeeded, f"{label}: no request succeeded, so none reached the real code ({dict(statuses)})"
    assert not [s for s in statuses if s >= 500], dict(statuses)
