"""Tenant isolation, generated from the URL conf.

Every route under /api/v1/ and /admin/ is looked up in the registries below, which say
how to exercise it with another tenant's ids. A route the registries do not know fails
``test_every_route_is_in_the_matrix`` with a message saying where to add it: a new
endpoint or admin page cannot ship without its cross-tenant check.

For each route that takes an object id (in the path, the query string or the form), the
outsider — tenant B's admin-scope token for the API, a staff operator of tenant B only
(holding every Django permission, so only the tenant scoping can stop them) for the
admin, and a token of tenant A restricted to another bucket — sends every method the
view allows with tenant A's ids, then with random ids, and the test checks:

- the answer is 404 (the API defines other-tenant and other-bucket ids as missing);
- the body is the same as for a random id, once the ids are blanked out;
- the database is unchanged: row count and checksum of every table of tenant data,
  users, groups, schedules and the admin log, before and after.

Then: list and search endpoints and pages never show another tenant's rows, a read
token cannot write and a write token cannot do admin operations.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group, Permission, User
from django.contrib.contenttypes.models import ContentType
from django.test import Client, RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from audit.services import Actor, audit_record
from engram_site.models import JobRun, JobStatus
from maintenance.models import ConflictCandidate
from memories.models import DeletedMemory, EnrichmentFailure, LearnedRanking, Memory, MemoryEvent
from memories.services import MemoryInput, memories_ingest, memory_delete
from memories.services.blocks import Expected, block_put
from memories.services.buckets import bucket_create
from memories.services.enrichment_failures import failures_record
from memories.services.feedback import feedback_record
from sources.services.submit import source_submit_document
from tenants import services
from tenants.models import OperatorMembership, Scope
from tenants.permissions import required_scope
from tests.factories import make_client, make_duplicate_candidate, make_graph_fact
from tests.support.db import ModuleRows, assert_unchanged, db_snapshot
from webhooks.models import WebhookDelivery, WebhookSubscription

# A generated matrix (every route, page and admin for two tenants and every token scope): about
# 40 s of test time, so it runs in the whole suite (CI), not in the fast tier of everyday work.
pytestmark = [pytest.mark.django_db, pytest.mark.slow]

# Every row of tenant A carries this marker, so a leak shows up in any body.
A_MARK = "zqxalpha"
B_MARK = "zqxbravo"

# --- the world: tenant A's objects, tenant B's outsiders -------------------------------------------


@dataclass
class World:
    a: object
    b: object
    objects: dict  # key -> an object of tenant A (or a row outside tenants) the outsiders aim at
    own: dict  # key -> the outsider's own objects (tenant B)
    operator_b: User
    a_memory_contents: list = field(default_factory=list)

    def ids(self) -> dict[str, str]:
        return {key: str(obj.pk) for key, obj in self.objects.items()}


def _memories(bucket, *contents) -> list:
    items = [MemoryInput(content=c) for c in contents]
    return [r.id for r in memories_ingest(bucket=bucket, items=items, sequence=False)]


def _conflict(bucket, x, y) -> ConflictCandidate:
    a, b = sorted([x, y])
    return ConflictCandidate.objects.create(
        tenant_id=bucket.tenant_id, bucket_id=bucket.pk, memory_a_id=a, memory_b_id=b, code="negation",
        reason="The same statement, negated in one memory only.", score=0.8,
    )  # fmt: skip


@pytest.fixture(scope="module")
def _world_rows(django_db_setup, django_db_blocker) -> World:
    # Made once for the module: every test here leaves the database as it found it (the probes
    # assert so), and whatever one writes anyway is rolled back after it (tests.support.db.ModuleRows).
    with ModuleRows(django_db_blocker):
        yield _make_world(services.tenant_create(name="Acme"), services.tenant_create(name="Outsider"))


@pytest.fixture
def world(db, _world_rows) -> World:
    return _world_rows


def _make_world(tenant, other_tenant) -> World:
    a1 = bucket_create(tenant=tenant, name=f"{A_MARK}-one")
    a2 = bucket_create(tenant=tenant, name=f"{A_MARK}-two")
    b1 = bucket_create(tenant=other_tenant, name=f"{B_MARK}-one")
    contents = [f"{A_MARK} Marta keeps the lighthouse in Porto.", f"{A_MARK} Marta keeps a lighthouse near Porto."]
    m1, m2, m3 = _memories(a1, *contents, f"{A_MARK} Marta once kept a diary, now deleted.")
    memory_delete(memory=Memory.objects.get(pk=m3))
    _memories(a2, f"{A_MARK} The second bucket remembers the tide tables.")
    entity, edge = make_graph_fact(a1, m1, A_MARK)
    source = source_submit_document(bucket=a1, title=f"{A_MARK} notes", text=f"{A_MARK} Marta likes tea.").source
    token = services.token_issue(tenant=tenant, name=f"{A_MARK}-token", scopes=["read"]).token
    event = audit_record(
        actor=Actor.system(A_MARK), action="memory.create", tenant=tenant, object_type="memory", object_ids=[m1]
    )
    user_a = User.objects.create_user(f"{A_MARK}-operator", password=None, is_staff=True)
    membership = OperatorMembership.objects.create(user=user_a, tenant=tenant)
    group = Group.objects.create(name=f"{A_MARK} group")
    interval = IntervalSchedule.objects.create(every=7, period=IntervalSchedule.DAYS)
    now = timezone.now()
    failures_record(stage="graph", errors={m1: f"{A_MARK} the extractor tripped over Marta"})
    webhook = WebhookSubscription.objects.create(
        tenant=tenant, url=f"https://{A_MARK}.example/hook", description=A_MARK, secret=f"whsec_{A_MARK}"
    )
    delivery = WebhookDelivery.objects.create(
        subscription=webhook, tenant=tenant, event_id=MemoryEvent.objects.filter(tenant_id=tenant.pk).first().pk,
        event_kind="created", next_attempt_at=now, last_error=A_MARK,
    )  # fmt: skip
    block, _ = block_put(
        bucket=a1, agent_id=None, label="persona", content=f"{A_MARK} Marta's persona", expected=Expected()
    )
    feedback_record(memory=Memory.objects.get(pk=m1), signal="useful", query=f"{A_MARK} who keeps the lighthouse?")
    objects = {
        "block": block, "tenant": tenant, "bucket": a1, "bucket2": a2, "memory": _memory(m1), "memory2": _memory(m2),
        "deleted": DeletedMemory.objects.get(pk=m3), "entity": entity, "edge": edge, "source": source,
        "candidate": make_duplicate_candidate(a1, m1, m2), "conflict": _conflict(a1, m1, m2), "token": token,
        "failure": EnrichmentFailure.objects.get(memory_id=m1),
        "learned": LearnedRanking.objects.create(
            tenant=tenant, bucket=a1, adopted=True, settings={"recency_weight": 0.6}, ratings=40
        ),
        "event": event, "membership": membership, "user_a": user_a, "group": group,
        "jobrun": JobRun.objects.create(name=f"{A_MARK}_job", status=JobStatus.FAILED, started_at=now, error=A_MARK),
        "interval": interval,
        "crontab": CrontabSchedule.objects.create(minute="7", hour="3"),
        "solar": SolarSchedule.objects.create(event="sunrise", latitude=38.7, longitude=-9.1),
        "clocked": ClockedSchedule.objects.create(clocked_time=now),
        "periodic_task": PeriodicTask.objects.create(name=f"{A_MARK} task", task="maintenance.noop", interval=interval),
        "webhook": webhook, "delivery": delivery,
    }  # fmt: skip

    # Tenant B: its own rows (so its lists are not trivially empty) and its operator, who
    # holds every permission there is and is a member of B only.
    b_ids = _memories(b1, f"{B_MARK} Bruno sails to Lisbon.", f"{B_MARK} Bruno sails toward Lisbon.")
    block_put(bucket=b1, agent_id=None, label="persona", content=f"{B_MARK} Bruno's persona", expected=Expected())
    b_entity, b_edge = make_graph_fact(b1, b_ids[0], B_MARK)
    make_duplicate_candidate(b1, *b_ids)
    failures_record(stage="graph", errors={b_ids[0]: f"{B_MARK} the extractor tripped over Bruno"})
    _conflict(b1, *b_ids)
    source_submit_document(bucket=b1, title=f"{B_MARK} notes", text=f"{B_MARK} Bruno likes coffee.")
    audit_record(
        actor=Actor.system(B_MARK), action="memory.create", tenant=other_tenant, object_type="memory",
        object_ids=b_ids,
    )  # fmt: skip
    WebhookSubscription.objects.create(
        tenant=other_tenant, url=f"https://{B_MARK}.example/hook", description=B_MARK, secret=f"whsec_{B_MARK}"
    )
    operator_b = User.objects.create_user(f"{B_MARK}-operator", password=None, is_staff=True)
    everything = Group.objects.create(name=f"{B_MARK} every permission")
    everything.permissions.set(Permission.objects.all())
    operator_b.groups.add(everything)
    OperatorMembership.objects.create(user=operator_b, tenant=other_tenant)
    own = {"tenant": other_tenant, "bucket": b1, "memory": _memory(b_ids[0]), "entity": b_entity, "edge": b_edge,
           "failure": EnrichmentFailure.objects.get(memory_id=b_ids[0])}  # fmt: skip
    return World(a=tenant, b=other_tenant, objects=objects, own=own, operator_b=operator_b,
                 a_memory_contents=contents)  # fmt: skip


def _memory(pk):
    return Memory.objects.only("id").get(pk=pk)


# --- the database, before and after ------------------------------------------------------------------


def random_id(obj) -> str:
    from django.db import models

    pk = obj._meta.pk
    if isinstance(pk, models.UUIDField):
        return str(uuid.uuid4())
    if isinstance(pk, (models.AutoField, models.BigAutoField, models.IntegerField)):
        return str(2_000_000_000 + uuid.uuid4().int % 100_000_000)
    raise AssertionError(f"no random id for a primary key of type {type(pk).__name__}")


def normalised(body: bytes, ids) -> str:
    text = body.decode(errors="replace")
    for value in sorted(ids, key=len, reverse=True):
        text = text.replace(value, "<id>")
    # The CSRF token of a re-rendered form changes on every request.
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]+"', 'name="csrfmiddlewaretoken"', text)


# --- the registries ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One request: url kwargs and the body / query, as functions of the ids (``ids[key]``
    is tenant A's object, or a random id in the control request; ``ids["own_*"]`` is the
    outsider's own object). ``expect`` is the status the outsider must get with A's ids
    (``None``: whatever a random id gets, e.g. a re-shown form or a 403 for everyone)."""

    kwargs: dict = field(default_factory=dict)
    data: Callable[[dict], dict] | None = None
    method: str = "GET"  # admin calls (API calls take the method from their registry key)
    expect: int | None = 404
    follow: bool = False
    targets: tuple = ()  # extra keys of A the call names (besides those in kwargs)
    fixed: dict = field(default_factory=dict)  # url kwargs that are names, not ids (a block's label)
    headers: dict = field(default_factory=dict)  # e.g. If-Match: * (a write that would go through)

    def aimed_at(self) -> set[str]:
        return {v for v in self.kwargs.values() if not v.startswith("own_")} | set(self.targets)

    def url(self, name: str, ids: dict) -> str:
        return reverse(name, kwargs={**{k: ids[v] for k, v in self.kwargs.items()}, **self.fixed})


# Routes without an object id: what they are and where their isolation is checked.
LISTED = "list or create in the caller's own tenant: test_lists_and_searches_never_show_another_tenants_rows"
STATIC = "no tenant data"

PERSONA = {"label": "persona"}
ANY_VERSION = {"If-Match": "*"}

API_ROUTES: dict[str, dict[str, list[Call]] | str] = {
    "bucket-list": LISTED,
    "bucket-detail": {
        "GET": [Call({"bucket_id": "bucket"})],
        "PATCH": [Call({"bucket_id": "bucket"}, lambda ids: {"name": "renamed", "description": "x"})],
        "DELETE": [Call({"bucket_id": "bucket"})],
    },
    "bucket-merge": {
        "POST": [
            Call({"bucket_id": "bucket"}, lambda ids: {"target_bucket_id": ids["own_bucket"], "remove_source": True}),
            Call(
                {"bucket_id": "own_bucket"},
                lambda ids: {"target_bucket_id": ids["bucket"], "remove_source": True},
                targets=("bucket",),
            ),
            Call(
                {"bucket_id": "own_bucket"},
                lambda ids: {"target_bucket_id": ids["bucket"], "dry_run": True},
                targets=("bucket",),
            ),
        ],  # fmt: skip
    },
    "bucket-memories": {
        "GET": [Call({"bucket_id": "bucket"})],
        "POST": [
            Call({"bucket_id": "bucket"}, lambda ids: {"content": "planted"}),
            Call({"bucket_id": "bucket"}, lambda ids: {"memories": [{"content": "planted"}]}),
        ],
    },
    "bucket-events": {
        "GET": [Call({"bucket_id": "bucket"}), Call({"bucket_id": "bucket"}, lambda ids: {"after": "0.0", "limit": 5})]
    },
    "bucket-learned-ranking": {"GET": [Call({"bucket_id": "bucket"})], "DELETE": [Call({"bucket_id": "bucket"})]},
    # Blocks are named by label in the bucket: A's bucket with the label of A's block.
    "bucket-blocks": {"GET": [Call({"bucket_id": "bucket"})]},
    "block-detail": {
        "GET": [Call({"bucket_id": "bucket"}, fixed=PERSONA)],
        "PUT": [
            Call({"bucket_id": "bucket"}, lambda ids: {"content": "overwritten"}, fixed=PERSONA, headers=ANY_VERSION),
            Call({"bucket_id": "bucket"}, lambda ids: {"content": "planted"}, fixed={"label": "planted"}),
        ],
        "PATCH": [Call({"bucket_id": "bucket"}, lambda ids: {"append": "planted"}, fixed=PERSONA, headers=ANY_VERSION)],
        "DELETE": [Call({"bucket_id": "bucket"}, fixed=PERSONA, headers=ANY_VERSION)],
    },
    "block-history": {"GET": [Call({"bucket_id": "bucket"}, fixed=PERSONA)]},
    "webhook-list": LISTED,
    "webhook-detail": {
        "GET": [Call({"webhook_id": "webhook"})],
        "PATCH": [Call({"webhook_id": "webhook"}, lambda ids: {"is_active": False, "description": "overwritten"})],
        "DELETE": [Call({"webhook_id": "webhook"})],
    },
    "webhook-secret": {"POST": [Call({"webhook_id": "webhook"})]},
    "webhook-deliveries": {
        "GET": [Call({"webhook_id": "webhook"}), Call({"webhook_id": "webhook"}, lambda ids: {"status": "pending"})]
    },
    "webhook-retry": {"POST": [Call({"delivery_id": "delivery"})]},
    "bucket-export": {
        "GET": [
            Call({"bucket_id": "bucket"}),
            Call({"bucket_id": "bucket"}, lambda ids: {"versions": "true", "blocks": "true", "feedback": "true"}),
        ]
    },
    "bucket-import": {"POST": [Call({"bucket_id": "bucket"}, lambda ids: {"content": "planted"})]},
    "bucket-search": {
        "POST": [
            Call({"bucket_id": "bucket"}, lambda ids, m=m: {"query": f"{A_MARK} lighthouse", "mode": m})
            for m in ("hybrid", "keyword", "vector", "graph")
        ],
    },  # fmt: skip
    "memory-detail": {
        "GET": [Call({"memory_id": "memory"})],
        "PATCH": [Call({"memory_id": "memory"}, lambda ids: {"content": "overwritten", "hint_tags": ["x"]})],
        "DELETE": [Call({"memory_id": "memory"})],
    },
    "bucket-conflicts": {
        "GET": [Call({"bucket_id": "bucket"}), Call({"bucket_id": "bucket"}, lambda ids: {"status": "kept_both"})]
    },
    "bucket-conflict-resolve": {
        "POST": [
            Call({"bucket_id": "bucket", "conflict_id": "conflict"}, lambda ids: {"action": "keep_both"}),
            Call({"bucket_id": "bucket", "conflict_id": "conflict"}, lambda ids: {"action": "supersede", "keep": "a"}),
            Call({"bucket_id": "bucket", "conflict_id": "conflict"}, lambda ids: {"action": "merge", "keep": "b"}),
            # The outsider's own bucket with A's pair: still another bucket's pair, so missing.
            Call(
                {"bucket_id": "own_bucket", "conflict_id": "conflict"},
                lambda ids: {"action": "keep_both"},
                targets=("conflict",),
            ),
        ],
    },
    "bucket-conflict-undo": {
        "POST": [
            Call({"bucket_id": "bucket", "conflict_id": "conflict"}),
            Call({"bucket_id": "own_bucket", "conflict_id": "conflict"}, targets=("conflict",)),
        ],
    },
    "bucket-entities": {
        "GET": [Call({"bucket_id": "bucket"}), Call({"bucket_id": "bucket"}, lambda ids: {"q": "marta"})]
    },
    "bucket-edges": {
        "GET": [Call({"bucket_id": "bucket"}), Call({"bucket_id": "bucket"}, lambda ids: {"entity": ids["entity"]})]
    },
    "entity-detail": {"GET": [Call({"entity_id": "entity"})]},
    "entity-profile": {
        "GET": [
            Call({"bucket_id": "bucket", "entity_id": "entity"}),
            Call(
                {"bucket_id": "bucket", "entity_id": "entity"},
                lambda ids: {"budget": "200", "as_of": "2100-01-01T00:00:00Z"},
            ),
            # The outsider's own bucket with A's entity: still another bucket's entity, so missing.
            Call({"bucket_id": "own_bucket", "entity_id": "entity"}, targets=("entity",)),
        ]
    },
    # By name (the marker is left out: a name is the caller's input, not tenant A's row).
    "bucket-profile": {"GET": [Call({"bucket_id": "bucket"}, lambda ids: {"name": "Marta", "budget": "200"})]},
    "edge-memories": {"GET": [Call({"edge_id": "edge"})]},
    # Operators' graph corrections (admin scope). Aimed from the outsider's own entity at A's
    # (merge into, fix an edge's object): tests/graph/test_graph_correction_api.py.
    "entity-rename": {"POST": [Call({"entity_id": "entity"}, lambda ids: {"name": "planted"})]},
    "entity-merge": {"POST": [Call({"entity_id": "entity"}, lambda ids: {"into": ids["entity"]})]},
    "entity-split": {
        "POST": [Call({"entity_id": "entity"}, lambda ids: {"name": "planted", "memory_ids": [ids["memory"]]})]
    },
    "entity-alias-add": {"POST": [Call({"entity_id": "entity"}, lambda ids: {"alias": "planted"})]},
    "entity-alias-remove": {"POST": [Call({"entity_id": "entity"}, lambda ids: {"alias": "planted"})]},
    "edge-detail": {"DELETE": [Call({"edge_id": "edge"})]},
    "edge-fix": {
        "POST": [
            Call({"edge_id": "edge"}, lambda ids: {"predicate": "planted", "object_literal": "planted"}),
            Call({"edge_id": "edge"}, lambda ids: {"predicate": "planted", "object_entity_id": ids["entity"]}),
        ]
    },
    "bucket-documents": {"POST": [Call({"bucket_id": "bucket"}, lambda ids: {"title": "planted", "text": "A fact."})]},
    "bucket-conversations": {
        "POST": [Call({"bucket_id": "bucket"}, lambda ids: {"messages": [{"role": "user", "content": "A fact."}]})]
    },
    "bucket-sources": {"GET": [Call({"bucket_id": "bucket"})]},
    "bucket-deleted": {"GET": [Call({"bucket_id": "bucket"})]},
    "bucket-enrichment-failures": {
        "GET": [Call({"bucket_id": "bucket"}), Call({"bucket_id": "bucket"}, lambda ids: {"stage": "graph"})]
    },
    "memory-history": {"GET": [Call({"memory_id": "memory"}), Call({"memory_id": "deleted"})]},
    "memory-restore": {"POST": [Call({"memory_id": "deleted"})]},
    "memory-feedback": {
        "POST": [
            Call({"memory_id": "memory"}, lambda ids: {"signal": "useful", "query": "planted"}),
            Call({"memory_id": "deleted"}, lambda ids: {"signal": "irrelevant", "query": "planted"}),
        ]
    },
    "source-detail": {"GET": [Call({"source_id": "source"})], "DELETE": [Call({"source_id": "source"})]},
    # Without buckets a search reads every bucket the token can read (tests/retrieval/test_search_across_buckets.py).
    "search": {
        "POST": [
            Call(
                data=lambda ids, m=m: {"query": f"{A_MARK} lighthouse", "mode": m, "buckets": [ids["bucket"]]},
                targets=("bucket",),
            )
            for m in ("hybrid", "keyword", "vector", "graph")
        ]
        + [
            Call(
                data=lambda ids: {"query": f"{A_MARK} lighthouse", "buckets": [ids["own_bucket"], ids["bucket"]]},
                targets=("bucket",),
            ),
        ],
    },  # fmt: skip
    # Without a bucket an erasure is the caller's own tenant's (tests/memories/test_erasure.py checks it).
    "erasure": {
        "POST": [
            Call(data=lambda ids: {"agent_id": "x", "bucket_id": ids["bucket"]}, targets=("bucket",)),
            Call(data=lambda ids: {"agent_id": "x", "bucket_id": ids["bucket"], "dry_run": True}, targets=("bucket",)),
        ]
    },
}

# Model admins: app_model -> the world object they are probed with. Their routes
# (changelist, add, change, delete, history and the bare "<id>/" redirect) follow from it.
ADMIN_MODELS = {
    "tenants_tenant": "tenant",
    "tenants_bucket": "bucket",
    "tenants_apitoken": "token",
    "tenants_operatormembership": "membership",
    "memories_memory": "memory",
    "memories_deletedmemory": "deleted",
    "memories_learnedranking": "learned",
    "maintenance_duplicatecandidate": "candidate",
    "engram_site_jobrun": "jobrun",
    "audit_auditevent": "event",
    "sources_source": "source",
    "auth_user": "user_a",
    "auth_group": "group",
    "django_celery_beat_periodictask": "periodic_task",
    "django_celery_beat_intervalschedule": "interval",
    "django_celery_beat_crontabschedule": "crontab",
    "django_celery_beat_solarschedule": "solar",
    "django_celery_beat_clockedschedule": "clocked",
    "webhooks_webhooksubscription": "webhook",
    "webhooks_webhookdelivery": "delivery",
}

# What an add form is posted with to try to attach a new row to tenant A's objects
# (None: the model has no such field, or cannot be added by the operator at all).
ADMIN_ADD_DATA: dict[str, Callable[[dict], dict] | None] = {
    "tenants_bucket": lambda ids: {"tenant": ids["tenant"], "name": "planted", "description": ""},
    "tenants_apitoken": lambda ids: {
        "tenant": ids["own_tenant"],
        "name": "planted",
        "scopes": ["read"],
        "bucket": ids["bucket"],
    },  # fmt: skip
    "tenants_operatormembership": lambda ids: {"user": ids["own_operator"], "tenant": ids["tenant"]},
    # A public address literal: the form's URL check needs no name lookup.
    "webhooks_webhooksubscription": lambda ids: {"tenant": ids["tenant"], "url": "https://93.184.215.14/planted"},
}
ADMIN_ADD_TARGETS = {"tenants_bucket": ("tenant",), "tenants_apitoken": ("bucket",),
                     "tenants_operatormembership": ("tenant",),
                     "webhooks_webhooksubscription": ("tenant",)}  # fmt: skip


def _confirm_merge(ids, **extra):
    return {"source": ids["bucket"], "target": ids["bucket2"], "remove_source": "on", **extra}


ADMIN_ROUTES: dict[str, list[Call] | str] = {
    "admin:index": LISTED,
    "admin:app_list": LISTED,
    "admin:autocomplete": LISTED,
    "admin:login": STATIC,
    "admin:logout": STATIC,
    "admin:password_change": STATIC,
    "admin:password_change_done": STATIC,
    "admin:jsi18n": STATIC,
    "admin:console_home": STATIC,
    "admin:console_health": LISTED,
    "admin:console_topics": LISTED,
    "admin:console_entities": LISTED,
    "admin:console_blocks": LISTED,
    "admin:console_blocks_bucket": [
        Call({"bucket_id": "bucket"}),
        Call({"bucket_id": "bucket"}, lambda ids: {"label": "persona", "content": "planted", "etag": "*"}, "POST"),
        Call({"bucket_id": "bucket"}, lambda ids: {"label": "planted", "content": "planted"}, "POST"),
    ],
    "admin:console_block_history": [
        Call({"bucket_id": "bucket", "block_id": "block"}),
        Call({"bucket_id": "own_bucket", "block_id": "block"}),
    ],
    "admin:view_on_site": "every object of the world: test_admin_view_on_site_answers_404_for_every_object",
    "admin:auth_user_password_change": [
        Call({"id": "user_a"}),
        Call({"id": "user_a"}, lambda ids: {"password1": "Zz-0987654321", "password2": "Zz-0987654321"}, "POST"),
    ],
    "admin:console_usage": [Call(data=lambda ids: {"tenant": ids["tenant"]}, targets=("tenant",))],
    "admin:console_review": [
        Call(data=lambda ids: {"tenant": ids["tenant"]}, targets=("tenant",)),
        Call(data=lambda ids: {"bucket": ids["bucket"]}, targets=("bucket",)),
    ],
    "admin:console_review_confirm": [
        Call(data=lambda ids: {"pair": f"{ids['candidate']}:keep_both"}, method="POST", targets=("candidate",)),
        Call(data=lambda ids: {"pair": f"{ids['candidate']}:a"}, method="POST", targets=("candidate",)),
        Call(
            data=lambda ids: {"candidates": [ids["candidate"]], "action": "keep_both"},
            method="POST",
            targets=("candidate",),
        ),
        Call(
            data=lambda ids: {"candidates": [ids["candidate"]], "action": "merge_older"},
            method="POST",
            targets=("candidate",),
        ),
        Call(
            data=lambda ids: {"candidates": [ids["candidate"]], "action": "merge_newer", "confirm": "yes"},
            method="POST",
            targets=("candidate",),
        ),
    ],  # fmt: skip
    "admin:console_conflicts": [
        Call(data=lambda ids: {"tenant": ids["tenant"]}, targets=("tenant",)),
        Call(data=lambda ids: {"bucket": ids["bucket"]}, targets=("bucket",)),
    ],
    "admin:console_conflicts_resolve": [
        Call(data=lambda ids, d=d: {"pair": f"{ids['conflict']}:{d}"}, method="POST", targets=("conflict",))
        for d in ("keep_both", "supersede_a", "merge_b", "undo")
    ]
    + [
        Call(
            data=lambda ids: {"pair": f"{ids['conflict']}:merge_a", "confirm": "yes", "content": "planted"},
            method="POST",
            targets=("conflict",),
        )
    ],
    "admin:console_bucket_merge": [
        Call(data=lambda ids: {"source": ids["bucket"]}, targets=("bucket",)),
        Call(data=lambda ids: _confirm_merge(ids), method="POST", targets=("bucket", "bucket2")),
        Call(data=lambda ids: _confirm_merge(ids, confirm="yes"), method="POST", targets=("bucket", "bucket2")),
        Call(
            data=lambda ids: {"source": ids["own_bucket"], "target": ids["bucket"], "confirm": "yes"},
            method="POST",
            targets=("bucket",),
        ),
        Call(
            data=lambda ids: {"source": ids["bucket"], "target": ids["own_bucket"], "confirm": "yes"},
            method="POST",
            targets=("bucket",),
        ),
    ],  # fmt: skip
    "admin:console_topics_bucket": [
        Call({"bucket_id": "bucket"}),
        Call(
            {"bucket_id": "bucket"},
            lambda ids: {"action": "rename", "rename_from": "x", "rename_to": "y", "confirm": "yes"},
            "POST",
        ),
        Call({"bucket_id": "bucket"}, lambda ids: {"action": "merge", "topics": ["x"], "merge_into": "y"}, "POST"),
        Call({"bucket_id": "bucket"}, lambda ids: {"action": "reclassify", "topics": ["__unlabelled__"]}, "POST"),
    ],  # fmt: skip
    "admin:console_topic_detail": [
        Call({"bucket_id": "bucket"}),
        Call({"bucket_id": "bucket"}, lambda ids: {"memories": [ids["memory"]]}, "POST", targets=("memory",)),
        Call({"bucket_id": "own_bucket"}, lambda ids: {"memories": [ids["memory"]]}, "POST", targets=("memory",)),
    ],
    "admin:console_entities_bucket": [
        Call({"bucket_id": "bucket"}),
        Call({"bucket_id": "bucket"}, lambda ids: {"q": "marta", "type": "PERSON"}),
    ],
    "admin:console_entity": [
        Call({"bucket_id": "bucket", "entity_id": "entity"}),
        Call({"bucket_id": "own_bucket", "entity_id": "entity"}),
        Call({"bucket_id": "bucket", "entity_id": "entity"}, lambda ids: {"action": "rename", "name": "x"}, "POST"),
        Call({"bucket_id": "bucket", "entity_id": "entity"}, lambda ids: {"action": "alias_add", "alias": "x"}, "POST"),
        Call(
            {"bucket_id": "own_bucket", "entity_id": "entity"},
            lambda ids: {"action": "rename", "name": "x"},
            "POST",
        ),
        Call(
            {"bucket_id": "own_bucket", "entity_id": "own_entity"},
            lambda ids: {"action": "merge", "into": f"{A_MARK} Marta", "confirm": "yes"},
            "POST",
            expect=None,  # a name, not an id: "no entity of this bucket is called" for both
        ),
        Call(
            {"bucket_id": "own_bucket", "entity_id": "own_entity"},
            lambda ids: {"action": "split", "name": "x", "memories": [ids["memory"]], "confirm": "yes"},
            "POST",
            targets=("memory",),
        ),
        Call(
            {"bucket_id": "own_bucket", "entity_id": "own_entity"},
            lambda ids: {"action": "edge_delete", "edge": ids["edge"], "confirm": "yes"},
            "POST",
            targets=("edge",),
        ),
        Call(
            {"bucket_id": "own_bucket", "entity_id": "own_entity"},
            lambda ids: {"action": "edge_fix", "edge": ids["edge"], "predicate": "likes", "object": "tea"},
            "POST",
            targets=("edge",),
        ),
        Call(
            {"bucket_id": "bucket", "entity_id": "entity"},
            lambda ids: {"action": "edge_delete", "edge": ids["edge"], "confirm": "yes"},
            "POST",
            targets=("edge",),
        ),
    ],  # fmt: skip
    "admin:memories_memory_pin": [
        Call({"object_id": "memory"}, lambda ids: {"action": "pin"}, "POST"),
        Call({"object_id": "memory"}, lambda ids: {"action": "unpin"}, "POST"),
    ],
    "admin:memories_deletedmemory_restore": [Call({"object_id": "deleted"}, method="POST")],
    "admin:console_enrichment_retry": [
        Call(data=lambda ids: {"failures": [ids["failure"]]}, method="POST", targets=("failure",)),
        Call(data=lambda ids: {"failures": [ids["failure"], ids["own_failure"]]}, method="POST", targets=("failure",)),
    ],
    "admin:console_playground": [
        Call(
            data=lambda ids, m=m: {"bucket": ids["bucket"], "query": "lighthouse", "mode": m, "limit": 5},
            targets=("bucket",),
        )
        for m in ("hybrid", "keyword")
    ],  # fmt: skip
}
MODEL_SUFFIXES = ("changelist", "add", "change", "delete", "history")


# --- walking the URL conf ----------------------------------------------------------------------------


def walk(patterns=None, prefix="", namespace=None):
    """(route, name, callback) for every URL pattern, names with their namespace."""
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(entry, URLResolver):
            yield from walk(entry.url_patterns, prefix + str(entry.pattern), entry.namespace or namespace)
        elif isinstance(entry, URLPattern):
            name = entry.name and (f"{namespace}:{entry.name}" if namespace else entry.name)
            yield prefix + str(entry.pattern), name, entry.callback


def _model_routes() -> tuple[set[str], set[str]]:
    names, redirects = set(), set()
    for key in ADMIN_MODELS:
        names |= {f"admin:{key}_{suffix}" for suffix in MODEL_SUFFIXES}
        model = _admin_model(key)
        redirects.add(f"admin/{model._meta.app_label}/{model._meta.model_name}/<path:object_id>/")
    return names, redirects


def _admin_model(key: str):
    for model in admin.site._registry:
        if f"{model._meta.app_label}_{model._meta.model_name}" == key:
            return model
    raise AssertionError(f"ADMIN_MODELS names {key}, which is not registered in the admin any more")


def test_every_route_is_in_the_matrix():
    model_names, redirects = _model_routes()
    known_names = set(API_ROUTES) | set(ADMIN_ROUTES) | model_names
    known_unnamed = redirects | {"admin/(?P<url>.*)$"}  # the admin's catch-all (404 / login redirect)
    seen, unknown = set(), []
    for route, name, _callback in walk():
        if not (route.startswith("api/v1/") or route.startswith("admin/")):
            continue
        key = name or route
        seen.add(key)
        if key not in known_names and key not in known_unnamed:
            unknown.append(f"{route} (name {name!r})")
    assert not unknown, (
        "Routes the tenant isolation matrix does not know how to exercise:\n  "
        + "\n  ".join(unknown)
        + "\nAdd each to API_ROUTES, ADMIN_ROUTES or ADMIN_MODELS in tests/system/test_isolation_matrix.py, with the "
        "calls (ids, bodies) that aim it at another tenant's objects, or mark it LISTED / STATIC."
    )
    stale = (known_names | known_unnamed) - seen
    assert not stale, f"The matrix names routes that no longer exist: {sorted(stale)}"


def _api_view(name: str):
    for _route, route_name, callback in walk():
        if route_name == name:
            return callback.view_class
    raise AssertionError(name)


def _api_methods(view_class) -> set[str]:
    # OPTIONS answers from the view's metadata and never looks an object up; HEAD is GET.
    return {m.upper() for m in view_class.http_method_names if m not in ("options", "head") and hasattr(view_class, m)}


def test_every_api_method_has_calls_in_the_matrix():
    missing = []
    for name, calls in API_ROUTES.items():
        if isinstance(calls, str):
            continue
        for method in sorted(_api_methods(_api_view(name)) - set(calls)):
            missing.append(f"{method} {name}")
    assert not missing, (
        f"Methods without a cross-tenant call in API_ROUTES (tests/system/test_isolation_matrix.py): {missing}"
    )


# --- the API -----------------------------------------------------------------------------------------


def _api_request(client, method: str, url: str, data, headers: dict | None = None):
    if method == "GET":
        return client.get(url, data or {}, headers=headers)
    return getattr(client, method.lower())(url, data, format="json", headers=headers)


def _outsiders(world: World):
    """(label, client, own ids): B's admin token; A's admin token restricted to A's other bucket."""
    yield "tenant B admin token", make_client(world.b, scopes=("admin",)), {"own_bucket": str(world.own["bucket"].pk)}
    restricted = make_client(world.a, scopes=("admin",), bucket=world.objects["bucket2"])
    yield "A token restricted to another bucket", restricted, {"own_bucket": str(world.objects["bucket2"].pk)}


@pytest.mark.parametrize("name", sorted(n for n, c in API_ROUTES.items() if not isinstance(c, str)))
def test_api_route_answers_404_to_outsiders_and_changes_nothing(world, name):
    a_ids = world.ids()
    for label, client, own in _outsiders(world):
        for method, calls in API_ROUTES[name].items():
            for call in calls:
                random = {key: random_id(world.objects[key]) for key in call.aimed_at()}
                answers = []
                for ids in ({**a_ids, **own}, {**a_ids, **random, **own}):
                    url = call.url(name, ids)
                    before = db_snapshot()
                    response = _api_request(client, method, url, call.data(ids) if call.data else None, call.headers)
                    assert_unchanged(before, f"{label}: {method} {url}")
                    answers.append(response)
                mine, control = answers
                where = f"{label}: {method} {name} {call}"
                assert mine.status_code == 404, f"{where}: {mine.status_code} {mine.content[:300]!r}"
                scrub = [*a_ids.values(), *random.values()]
                assert normalised(mine.content, scrub) == normalised(control.content, scrub), where
                assert A_MARK not in mine.content.decode(), where


# --- scopes ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scopes", [("read",), ("write",), ("read", "write")])
def test_a_token_without_the_scope_an_operation_needs_gets_403_and_changes_nothing(world, scopes):
    """Aimed at the token's own tenant's objects: only the scope can refuse."""
    client = make_client(world.a, scopes=scopes)
    ids = {**world.ids(), "own_bucket": str(world.objects["bucket2"].pk)}
    checked = 0
    for name, calls in API_ROUTES.items():
        if isinstance(calls, str):
            continue
        view = _api_view(name)()
        for method, method_calls in calls.items():
            needed = required_scope(SimpleNamespace(method=method), view)
            if needed in scopes:
                continue
            for call in method_calls:
                url = call.url(name, ids)
                before = db_snapshot()
                response = _api_request(client, method, url, call.data(ids) if call.data else None, call.headers)
                assert_unchanged(before, f"{scopes} {method} {url}")
                assert response.status_code == 403, f"{scopes} {method} {name}: {response.status_code}"
                checked += 1
    # Bucket creation (no object id) too.
    if Scope.WRITE not in scopes:
        before = db_snapshot()
        assert client.post("/api/v1/buckets", {"name": "planted"}, format="json").status_code == 403
        assert_unchanged(before, f"{scopes} POST /api/v1/buckets")
    assert checked, "no operation needed more than these scopes: the registry lost its write calls"


# --- the admin ---------------------------------------------------------------------------------------


@pytest.fixture
def operator_b(client, world) -> Client:
    client.force_login(world.operator_b)
    return client


def _admin_request(client, method: str, url: str, data, follow=False):
    if method == "GET":
        return client.get(url, data or {}, follow=follow)
    return client.post(url, data or {}, follow=follow)


def _probe_admin(client, world: World, where: str, url_for, call: Call):
    a_ids = world.ids()
    own = {"own_bucket": str(world.own["bucket"].pk), "own_tenant": str(world.b.pk),
           "own_operator": str(world.operator_b.pk), "own_entity": str(world.own["entity"].pk),
           "own_failure": str(world.own["failure"].pk)}  # fmt: skip
    random = {key: random_id(world.objects[key]) for key in call.aimed_at()}
    answers = []
    for ids in ({**a_ids, **own}, {**a_ids, **random, **own}):
        before = db_snapshot()
        response = _admin_request(client, call.method, url_for(ids), call.data(ids) if call.data else None, call.follow)
        assert_unchanged(before, f"{where} ({call.method})")
        answers.append(response)
    mine, control = answers
    where = f"{where} ({call.method})"
    if call.expect is not None:
        assert mine.status_code == call.expect, f"{where}: {mine.status_code} {mine.content[:300]!r}"
    assert mine.status_code == control.status_code, f"{where}: {mine.status_code} vs {control.status_code}"
    scrub = [*a_ids.values(), *random.values()]
    assert normalised(mine.content, scrub) == normalised(control.content, scrub), where
    _assert_no_leak(world, mine.content, where)


@pytest.mark.parametrize("name", sorted(n for n, c in ADMIN_ROUTES.items() if not isinstance(c, str)))
def test_console_page_answers_404_to_another_tenants_operator_and_changes_nothing(operator_b, world, name):
    for i, call in enumerate(ADMIN_ROUTES[name]):

        def url_for(ids, call=call):
            return reverse(name, kwargs={k: ids[v] for k, v in call.kwargs.items()})

        _probe_admin(operator_b, world, f"{name} call #{i}", url_for, call)


def _model_calls(key: str, request) -> list[tuple[str, Call]]:
    """(route, call) for the routes of one model admin, aimed at world.objects[ADMIN_MODELS[key]]."""
    obj_key = ADMIN_MODELS[key]
    model_admin = admin.site._registry[_admin_model(key)]
    on_obj = {"object_id": obj_key}
    calls = [
        (f"admin:{key}_change", Call(on_obj)),
        (f"admin:{key}_change", Call(on_obj, lambda ids: {"name": "overwritten", "content": "overwritten"}, "POST")),
        (f"admin:{key}_delete", Call(on_obj)),
        (f"admin:{key}_delete", Call(on_obj, lambda ids: {"post": "yes"}, "POST")),
        (f"admin:{key}_history", Call(on_obj)),
        ("redirect", Call(on_obj, follow=True)),
    ]
    # Every action the (all-permission) operator is offered, on a selection of A's object.
    scoped = getattr(model_admin, "tenant_field", None) is not None
    for action in model_admin.get_actions(request):
        calls.append((
            f"admin:{key}_changelist",
            Call(data=lambda ids, action=action: {"action": action, "_selected_action": [ids[obj_key]], "index": 0,
                                                  "confirm": "yes", "post": "yes"},
                 method="POST", targets=(obj_key,), expect=404 if scoped else None),
        ))  # fmt: skip
    # The confirmation pages of actions post without "index" (and an admin without actions
    # still receives the POST).
    calls.append((
        f"admin:{key}_changelist",
        Call(data=lambda ids: {"action": "delete_selected", "_selected_action": [ids[obj_key]], "post": "yes"},
             method="POST", targets=(obj_key,), expect=404 if scoped else None),
    ))  # fmt: skip
    add = ADMIN_ADD_DATA.get(key)
    if add is not None:
        calls.append((f"admin:{key}_add", Call(data=add, method="POST", targets=ADMIN_ADD_TARGETS[key], expect=None)))
    return calls


@pytest.mark.parametrize("key", sorted(ADMIN_MODELS))
def test_model_admin_answers_404_to_another_tenants_operator_and_changes_nothing(operator_b, world, key):
    request = RequestFactory().get("/admin/")
    request.user = world.operator_b
    model = _admin_model(key)
    for i, (route, call) in enumerate(_model_calls(key, request)):
        if route == "redirect":

            def url_for(ids, model=model, call=call):
                return f"/admin/{model._meta.app_label}/{model._meta.model_name}/{ids[call.kwargs['object_id']]}/"

        else:

            def url_for(ids, route=route, call=call):
                return reverse(route, kwargs={k: ids[v] for k, v in call.kwargs.items()})

        _probe_admin(operator_b, world, f"{route} call #{i}", url_for, call)


def test_admin_view_on_site_answers_404_for_every_object(operator_b, world):
    for key, obj in world.objects.items():
        content_type = ContentType.objects.get_for_model(obj)

        def url_for(ids, content_type=content_type, key=key):
            return reverse("admin:view_on_site", kwargs={"content_type_id": content_type.pk, "object_id": ids[key]})

        _probe_admin(operator_b, world, f"view_on_site {key}", url_for, Call(targets=(key,)))


# --- lists and searches ------------------------------------------------------------------------------


def _assert_no_leak(world: World, body: bytes, where: str, *, must_show: str | None = None, echoed=()) -> None:
    """No marker, name or id of tenant A in ``body`` (but the ids the request itself sent,
    which pages echo in their links)."""
    text = body.decode(errors="replace")
    assert A_MARK not in text, f"{where} shows tenant A's rows"
    assert world.a.name not in text, f"{where} names tenant A"
    for key, value in world.ids().items():
        if len(value) >= 32 and value not in echoed:  # UUIDs; small integers would match counts
            assert value not in text, f"{where} shows tenant A's {key} ({value})"
    if must_show:
        assert must_show in text, f"{where} does not show the operator's own rows: the check would prove nothing"


def test_lists_and_searches_never_show_another_tenants_rows_api(world):
    client = make_client(world.b, scopes=("admin",))
    b1 = world.own["bucket"].pk
    a = world.ids()
    checks = [
        ("GET", "/api/v1/buckets", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/memories", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/entities", {"q": "marta"}, None),
        ("GET", f"/api/v1/buckets/{b1}/entities", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/edges", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/edges", {"entity": a["entity"]}, None),
        ("GET", f"/api/v1/buckets/{b1}/profile", {"name": f"{B_MARK} Marta", "budget": "200"}, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/entities/{world.own['entity'].pk}/profile", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/sources", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/enrichment-failures", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/conflicts", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/events", None, B_MARK),
        ("GET", f"/api/v1/buckets/{b1}/blocks", None, B_MARK),
        ("GET", "/api/v1/webhooks", None, B_MARK),
        ("POST", "/api/v1/buckets", {"name": "fresh"}, None),
    ]
    for mode in ("hybrid", "keyword", "vector", "graph"):
        query = {
            "query": f"{A_MARK} {B_MARK} Marta lighthouse Porto Bruno",
            "mode": mode,
            "explain": True,
            "include_blocks": True,
        }
        checks.append(("POST", f"/api/v1/buckets/{b1}/search", query, B_MARK if mode != "graph" else None))
        checks.append(("POST", "/api/v1/search", query, B_MARK if mode != "graph" else None))
    for method, url, data, must_show in checks:
        response = _api_request(client, method, url, data)
        assert response.status_code in (200, 201), f"{method} {url}: {response.status_code} {response.content[:200]!r}"
        _assert_no_leak(world, response.content, f"{method} {url} {data or ''}", must_show=must_show)
    # A's person by name, asked of the outsider's own bucket: no entity there has that name.
    asked = client.get(f"/api/v1/buckets/{b1}/profile", {"name": f"{A_MARK} Marta"})
    assert asked.status_code == 404 and A_MARK not in asked.content.decode(), asked.content

    # A token restricted to one bucket sees that bucket only.
    restricted = make_client(world.a, scopes=("admin",), bucket=world.objects["bucket2"])
    listed = restricted.get("/api/v1/buckets").json()["results"]
    assert [b["id"] for b in listed] == [str(world.objects["bucket2"].pk)]
    found = restricted.post(
        f"/api/v1/buckets/{world.objects['bucket2'].pk}/search", {"query": "Marta lighthouse Porto"}, format="json"
    )
    assert not any(c in found.content.decode() for c in world.a_memory_contents)
    found = restricted.post("/api/v1/search", {"query": "Marta lighthouse Porto"}, format="json")
    assert found.status_code == 200 and [b["id"] for b in found.json()["buckets"]] == [str(world.objects["bucket2"].pk)]
    assert not any(c in found.content.decode() for c in world.a_memory_contents)


def test_lists_and_searches_never_show_another_tenants_rows_admin(operator_b, world):
    a = world.ids()
    pages = [
        ("/admin/", None, None),
        ("/admin/tenants/", None, None),
        ("/admin/console/health/", None, B_MARK),  # B's enrichment failure
        ("/admin/console/usage/", None, world.b.name),
        ("/admin/console/review/", None, B_MARK),
        ("/admin/console/conflicts/", None, B_MARK),
        ("/admin/console/topics/", None, B_MARK),
        ("/admin/console/entities/", None, B_MARK),
        (f"/admin/console/entities/{world.own['bucket'].pk}/", {"q": "marta"}, B_MARK),
        ("/admin/console/blocks/", None, B_MARK),
        (f"/admin/console/blocks/{world.own['bucket'].pk}/", None, B_MARK),
        ("/admin/console/bucket-merge/", None, B_MARK),
        ("/admin/console/playground/", None, B_MARK),
        ("/admin/tenants/bucket/add/", None, B_MARK),
        ("/admin/tenants/apitoken/add/", None, B_MARK),
        ("/admin/autocomplete/", {"app_label": "tenants", "model_name": "bucket", "field_name": "tenant"},
         world.b.name),
        ("/admin/autocomplete/", {"app_label": "tenants", "model_name": "bucket", "field_name": "tenant",
                                  "term": world.a.name}, None),
    ]  # fmt: skip
    for key in ADMIN_MODELS:
        model = _admin_model(key)
        model_admin = admin.site._registry[model]
        if getattr(model_admin, "tenant_field", None) is None:
            continue  # superusers only: test_tenant_operators_cannot_open_what_spans_every_tenant
        url = reverse(f"admin:{key}_changelist")
        pages.append((url, None, None))
        # Searches that match tenant A's rows (their echo in the search box holds no marker).
        pages.append((url, {"q": "lighthouse"}, None))
        pages.append((url, {"q": "e"}, None))
        for param, value in (("tenant__id__exact", a["tenant"]), ("bucket__id__exact", a["bucket"]),
                             ("tenant", a["tenant"]), ("bucket", a["bucket"])):  # fmt: skip
            pages.append((url, {param: value}, None))
    for url, query, must_show in pages:
        response = operator_b.get(url, query or {})
        # 302 "?e=1": a lookup on a field the model lacks; 400: one the changelist does not allow.
        assert response.status_code in (200, 302, 400), f"{url} {query}: {response.status_code}"
        if response.status_code == 302:
            assert "e=1" in response["Location"], f"{url} {query}: {response['Location']}"
            continue
        echoed = set((query or {}).values())
        _assert_no_leak(world, response.content, f"{url} {query or ''}", must_show=must_show, echoed=echoed)
    # The numbers add up to B's alone.
    report = operator_b.get("/admin/console/health/").context["report"]
    assert [row.tenant.pk for row in report.tenants] == [world.b.pk] and report.totals["memories"] == 2
    assert not report.system and not report.jobs and not report.indexes
    assert [f.tenant_id for f in report.failures] == [world.b.pk] and report.failures_total == 1
    assert operator_b.get("/admin/").context["console"]["pending_reviews"] == 1


def test_tenant_operators_cannot_open_what_spans_every_tenant(operator_b, world):
    for key in ADMIN_MODELS:
        model_admin = admin.site._registry[_admin_model(key)]
        if getattr(model_admin, "tenant_field", None) is not None:
            continue
        for suffix in ("changelist", "add"):
            response = operator_b.get(reverse(f"admin:{key}_{suffix}"))
            assert response.status_code == 403, f"{key}_{suffix}: {response.status_code}"
    index = operator_b.get("/admin/").content.decode()
    for hidden in ("/admin/auth/user/", "/admin/engram_site/jobrun/", "/admin/django_celery_beat/",
                   "/admin/tenants/operatormembership/"):  # fmt: skip
        assert hidden not in index, hidden
    # ... and their own tenant's pages still work.
    assert operator_b.get(reverse("admin:tenants_bucket_change", args=[world.own["bucket"].pk])).status_code == 200
    assert operator_b.get(reverse("admin:console_topics_bucket", args=[world.own["bucket"].pk])).status_code == 200


def test_every_model_admin_is_tenant_scoped_or_superusers_only():
    from console.scoping import SuperuserOnlyAdmin, TenantScopedAdmin

    loose = [
        f"{model._meta.label}: {type(model_admin).__name__}"
        for model, model_admin in admin.site._registry.items()
        if not isinstance(model_admin, (TenantScopedAdmin, SuperuserOnlyAdmin))
    ]
    assert not loose, loose


def test_json_bodies_compare_equal_modulo_ids():
    """The comparison the matrix relies on blanks ids and nothing else."""
    a, b = str(uuid.uuid4()), str(uuid.uuid4())
    body = json.dumps({"detail": "Bucket not found.", "id": a}).encode()
    assert normalised(body, [a, b]) == normalised(body.replace(a.encode(), b.encode()), [a, b])
    assert normalised(b'{"detail": "x"}', [a]) != normalised(b'{"detail": "y"}', [a])


# --- endpoint × agent: tokens held to agents ---------------------------------------------------------
#
# One tenant, one bucket, two agents. A token held to agent alfa (read and write, and allowed the
# shared memories, so only the agent rule can refuse) aims every route at agent beta's objects:
# a route that takes an object id answers 404 exactly as for a random id and changes nothing; a
# write as beta is refused (403 agent_forbidden, or the import's 400) and changes nothing; lists,
# searches and exports never show beta's rows. The same calls aimed at alfa's own objects succeed
# (and the lists show alfa's rows): the matrix fails if the restriction stops everything.

ALFA, BETA, SHARED = "zqxalfa", "zqxbeta", "zqxshared"
AGENT_MARKS = {"alfa": ALFA, "beta": BETA}


@dataclass
class AgentWorld:
    bucket: object
    objects: dict  # (agent, role) -> object: roles memory, deleted, entity, edge, source
    client: object  # the token held to alfa

    def ids(self, agent: str) -> dict[str, str]:
        ids = {role: str(obj.pk) for (owner, role), obj in self.objects.items() if owner == agent}
        return {**ids, "bucket": str(self.bucket.pk), "agent": agent}

    def all_ids(self) -> list[str]:
        return [str(obj.pk) for obj in self.objects.values()]


@pytest.fixture(scope="module")
def _agent_world_rows(django_db_setup, django_db_blocker) -> AgentWorld:
    with ModuleRows(django_db_blocker):
        yield _make_agent_world(services.tenant_create(name="Acme"))


@pytest.fixture
def agent_world(db, _agent_world_rows) -> AgentWorld:
    return _agent_world_rows


def _make_agent_world(tenant) -> AgentWorld:
    bucket = bucket_create(tenant=tenant, name="agents")
    objects = {}
    for agent, mark in AGENT_MARKS.items():
        items = [
            MemoryInput(content=f"{mark} Marta keeps the lighthouse in Porto.", agent_id=agent),
            MemoryInput(content=f"{mark} Marta keeps a lighthouse near Porto.", agent_id=agent),
            MemoryInput(content=f"{mark} Marta once kept a diary, now deleted.", agent_id=agent),
        ]
        m1, m2, m3 = [r.id for r in memories_ingest(bucket=bucket, items=items, sequence=False)]
        memory_delete(memory=Memory.objects.get(pk=m3))
        entity, edge = make_graph_fact(bucket, m1, mark)
        source = source_submit_document(
            bucket=bucket, title=f"{mark} notes", text=f"{mark} Marta likes tea.", agent_id=agent
        ).source
        block_put(bucket=bucket, agent_id=agent, label="persona", content=f"{mark} persona", expected=Expected())
        feedback_record(memory=Memory.objects.get(pk=m1), signal="useful", query=f"{mark} lighthouse?", agent_id=agent)
        objects |= {
            (agent, "memory"): _memory(m1), (agent, "deleted"): DeletedMemory.objects.get(pk=m3),
            (agent, "entity"): entity, (agent, "edge"): edge, (agent, "source"): source,
            (agent, "conflict"): _conflict(bucket, m1, m2),
        }  # fmt: skip
    memories_ingest(bucket=bucket, items=[MemoryInput(content=f"{SHARED} The tide tables hang by the door.")])
    client = make_client(tenant, scopes=("read", "write"), agent_ids=["alfa"], include_shared=True)
    return AgentWorld(bucket=bucket, objects=objects, client=client)


@dataclass(frozen=True)
class AgentCall:
    """A call of the agent matrix. ``kwargs``: url kwarg -> role of the object it names (the
    other agent's, then the token's own). ``data(agent, ids)``: the body or query, writing as
    ``agent`` where it writes. ``refused``: the status when aimed at the other agent (404 for an
    object id: missing, as for a random id). ``own``: the statuses aimed at the token's own.
    ``shows``: a read whose answer must show the token's own rows."""

    kwargs: dict = field(default_factory=dict)
    data: Callable[[str, dict], dict] | None = None
    refused: int = 404
    own: tuple = (200, 201, 202, 204)
    shows: bool = False
    jsonl: bool = False  # the body is one JSON Lines line (the import)
    fixed: dict = field(default_factory=dict)  # url kwargs that are names, not ids (a block's label)
    headers: dict = field(default_factory=dict)
    owner: bool = False  # the object is the agent's by ?agent_id= (a block)

    def url(self, name: str, ids: dict) -> str:
        url = reverse(name, kwargs={**{k: ids[v] for k, v in self.kwargs.items()}, **self.fixed})
        return f"{url}?agent_id={ids['agent']}" if self.owner else url


def _agent_search(mode):
    return AgentCall(
        {"bucket_id": "bucket"},
        lambda agent, ids: {
            "query": f"{ALFA} {BETA} Marta lighthouse Porto", "mode": mode, "explain": True, "include_blocks": True
        },
        refused=200, shows=mode != "graph",
    )  # fmt: skip


READS = 200  # a read of the bucket: answered, without the other agent's rows
AGENT_ROUTES: dict[str, dict[str, list[AgentCall]]] = {
    "memory-detail": {
        "GET": [AgentCall({"memory_id": "memory"})],
        "PATCH": [
            AgentCall({"memory_id": "memory"}, lambda agent, ids: {"content": "overwritten", "hint_tags": ["x"]})
        ],
        "DELETE": [AgentCall({"memory_id": "memory"})],
    },
    "memory-history": {"GET": [AgentCall({"memory_id": "memory"}), AgentCall({"memory_id": "deleted"})]},
    "memory-restore": {"POST": [AgentCall({"memory_id": "deleted"})]},
    # The other agent's memory is not there (404); its own is rated as itself (201).
    "memory-feedback": {
        "POST": [AgentCall({"memory_id": "memory"}, lambda agent, ids: {"signal": "useful", "query": "planted"})]
    },
    "entity-detail": {"GET": [AgentCall({"entity_id": "entity"})]},
    "entity-profile": {
        "GET": [
            AgentCall({"bucket_id": "bucket", "entity_id": "entity"}, shows=True),
            AgentCall({"bucket_id": "bucket", "entity_id": "entity"}, lambda agent, ids: {"budget": "200"}, shows=True),
        ]
    },
    # By the other agent's entity's name: missing (404), as any name no memory it reads gives.
    "bucket-profile": {
        "GET": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"name": f"{AGENT_MARKS[agent]} Marta", "budget": "200"},
                shows=True,
            )
        ]
    },
    "edge-memories": {"GET": [AgentCall({"edge_id": "edge"})]},
    "source-detail": {"GET": [AgentCall({"source_id": "source"})], "DELETE": [AgentCall({"source_id": "source"})]},
    "bucket-detail": {
        "GET": [AgentCall({"bucket_id": "bucket"}, refused=READS)],
        # A bucket holds every agent's memories: a token held to agents changes none (nor its own).
        "PATCH": [AgentCall({"bucket_id": "bucket"}, lambda agent, ids: {"name": "renamed"}, refused=403, own=(403,))],
        "DELETE": [AgentCall({"bucket_id": "bucket"}, refused=403, own=(403,))],  # admin scope: never held to agents
    },
    "bucket-memories": {
        "GET": [AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True)],
        "POST": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"content": f"planted {agent}", "agent_id": agent},
                refused=403,
            ),
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {
                    "memories": [
                        {"content": f"planted one {agent}"},
                        {"content": f"planted two {agent}", "agent_id": agent},
                    ]
                },
                refused=403,
            ),
        ],  # fmt: skip
    },
    "bucket-export": {
        "GET": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"versions": "true", "blocks": "true", "feedback": "true"},
                refused=READS,
                shows=True,
            )
        ]
    },  # fmt: skip
    "bucket-import": {
        "POST": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"content": f"planted {agent}", "agent_id": agent},
                refused=400,
                jsonl=True,
            )
        ]
    },  # fmt: skip
    "bucket-search": {"POST": [_agent_search(m) for m in ("hybrid", "keyword", "vector", "graph")]},
    # Across buckets: every bucket the token reads (the one both agents share), each mode.
    "search": {
        "POST": [
            AgentCall(
                {},
                lambda agent, ids, m=m: {"query": f"{ALFA} {BETA} Marta lighthouse Porto", "mode": m, "explain": True},
                refused=200,
                shows=m != "graph",
            )
            for m in ("hybrid", "keyword", "vector", "graph")
        ]
    },  # fmt: skip
    "bucket-entities": {
        "GET": [
            AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True),
            AgentCall({"bucket_id": "bucket"}, lambda agent, ids: {"q": "marta"}, refused=READS, shows=True),
        ]
    },
    "bucket-edges": {
        "GET": [
            AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True),
            AgentCall({"bucket_id": "bucket"}, lambda agent, ids: {"entity": ids["entity"]}, refused=READS),
        ]
    },
    "bucket-documents": {
        "POST": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"title": "planted", "text": f"A fact {agent}.", "agent_id": agent},
                refused=403,
            )
        ]
    },  # fmt: skip
    "bucket-conversations": {
        "POST": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"messages": [{"role": "user", "content": f"A fact {agent}.", "agent_id": agent}]},
                refused=403,
            )
        ]
    },  # fmt: skip
    "bucket-sources": {"GET": [AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True)]},
    "bucket-deleted": {"GET": [AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True)]},
    "bucket-enrichment-failures": {"GET": [AgentCall({"bucket_id": "bucket"}, refused=READS)]},
    "bucket-conflicts": {"GET": [AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True)]},
    "bucket-events": {"GET": [AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True)]},
    # Learned from every agent's ratings and used by every agent's searches: a bucket's, as a PATCH.
    "bucket-learned-ranking": {
        "GET": [AgentCall({"bucket_id": "bucket"}, refused=403, own=(403,))],
        "DELETE": [AgentCall({"bucket_id": "bucket"}, refused=403, own=(403,))],
    },
    "bucket-conflict-resolve": {
        "POST": [
            AgentCall({"bucket_id": "bucket", "conflict_id": "conflict"}, lambda agent, ids: {"action": "keep_both"})
        ]
    },
    # The token's own pair is open (or kept both): reached, and refused as not superseded.
    "bucket-conflict-undo": {"POST": [AgentCall({"bucket_id": "bucket", "conflict_id": "conflict"}, own=(409,))]},
    # Admin scope: a token held to agents cannot have it (tenants.services.token_issue).
    "bucket-merge": {
        "POST": [
            AgentCall(
                {"bucket_id": "bucket"}, lambda agent, ids: {"target_bucket_id": ids["bucket"]}, refused=403, own=(403,)
            )
        ]
    },  # fmt: skip
    "erasure": {"POST": [AgentCall(data=lambda agent, ids: {"agent_id": agent}, refused=403, own=(403,))]},
    # A block is the agent's by ?agent_id=: the other agent's is missing to read and change (404),
    # and writing one as the other agent is refused (403 agent_forbidden).
    "bucket-blocks": {"GET": [AgentCall({"bucket_id": "bucket"}, refused=READS, shows=True)]},
    "block-detail": {
        "GET": [AgentCall({"bucket_id": "bucket"}, fixed=PERSONA, owner=True, shows=True)],
        "PUT": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"content": f"{AGENT_MARKS[agent]} overwritten"},
                fixed=PERSONA,
                owner=True,
                headers=ANY_VERSION,
                refused=403,
                shows=True,
            )
        ],
        "PATCH": [
            AgentCall(
                {"bucket_id": "bucket"},
                lambda agent, ids: {"append": "planted"},
                fixed=PERSONA,
                owner=True,
                headers=ANY_VERSION,
                shows=True,
            )
        ],
        "DELETE": [AgentCall({"bucket_id": "bucket"}, fixed=PERSONA, owner=True, headers=ANY_VERSION)],
    },  # fmt: skip
    "block-history": {"GET": [AgentCall({"bucket_id": "bucket"}, fixed=PERSONA, owner=True, shows=True)]},
}
# Routes of API_ROUTES the agent matrix need not aim: what they are and where that is checked.
AGENT_EXEMPT = {
    "bucket-list": (
        "buckets are the tenant's, not an agent's; creating one is refused: tests/tenants/test_agent_tokens.py"
    ),
    **{
        name: "admin scope (the tenant's webhooks), which a token held to agents cannot have (test_agent_tokens.py)"
        for name in ("webhook-list", "webhook-detail", "webhook-secret", "webhook-deliveries", "webhook-retry")
    },
    **{
        name: "admin scope (an operator's graph corrections), which a token held to agents cannot have"
        " (test_agent_tokens.py; tests/graph/test_graph_correction_api.py refuses a token without it)"
        for name in (
            "entity-rename",
            "entity-merge",
            "entity-split",
            "entity-alias-add",
            "entity-alias-remove",
            "edge-detail",
            "edge-fix",
        )
    },  # fmt: skip
}


def test_every_api_route_and_method_is_in_the_agent_matrix():
    missing = []
    for name, calls in API_ROUTES.items():
        if name in AGENT_EXEMPT:
            continue
        if name not in AGENT_ROUTES:
            missing.append(name)
            continue
        methods = set(calls) if isinstance(calls, dict) else _api_methods(_api_view(name))
        missing += [f"{method} {name}" for method in sorted(methods - set(AGENT_ROUTES[name]))]
    assert not missing, (
        "API routes the agent matrix does not exercise (tests/system/test_isolation_matrix.py AGENT_ROUTES): "
        f"every route that reaches memories must show how a token held to one agent is kept from another's: {missing}"
    )
    assert not set(AGENT_ROUTES) - set(API_ROUTES), "AGENT_ROUTES names routes the API does not have"


def _body(response) -> bytes:
    return b"".join(response.streaming_content) if response.streaming else response.content


def _agent_request(client, method: str, url: str, call: AgentCall, data):
    if call.jsonl:
        return client.post(url, data=json.dumps(data).encode() + b"\n", content_type="application/x-ndjson")
    return _api_request(client, method, url, data, call.headers)


def _method_order(method: str) -> int:
    return {"DELETE": 2, "POST": 1}.get(method, 0)  # the token's own object deleted last


@pytest.mark.parametrize("name", sorted(AGENT_ROUTES))
def test_a_token_held_to_an_agent_is_refused_every_path_to_another_agents_memories(agent_world, name):
    world, client = agent_world, agent_world.client
    theirs, mine = world.ids("beta"), world.ids("alfa")
    scrub = [*world.all_ids(), str(world.bucket.pk)]
    for method in sorted(AGENT_ROUTES[name], key=_method_order):
        for call in AGENT_ROUTES[name][method]:
            where = f"{method} {name} {call}"

            def url(ids, call=call):
                return call.url(name, ids)

            # Aimed at beta: refused (or, for a read of the bucket, without beta's rows); nothing changes.
            before = db_snapshot()
            refused = _agent_request(
                client, method, url(theirs), call, call.data("beta", theirs) if call.data else None
            )
            body = _body(refused)
            assert_unchanged(before, f"agent alfa: {where}")
            assert refused.status_code == call.refused, f"{where}: {refused.status_code} {body[:300]!r}"
            assert BETA not in body.decode(errors="replace"), f"{where} shows agent beta's rows"
            for value in world.ids("beta").values():
                # UUIDs only: a small integer id (a conflict pair's) appears in any body by chance;
                # a pair shown to alfa would show beta's mark in its memories' content above.
                if value != str(world.bucket.pk) and len(value) == 36:
                    assert value not in body.decode(errors="replace"), f"{where} shows one of beta's ids"
            if call.refused == 404:
                # The bucket is the one both agents share; the object in it is replaced.
                random = {role: str(uuid.uuid4()) for role in call.kwargs.values() if role != "bucket"}
                if call.owner:
                    random["agent"] = f"nobody-{uuid.uuid4().hex[:8]}"
                control = _agent_request(client, method, url({**theirs, **random}), call,
                                         call.data("beta", {**theirs, **random}) if call.data else None)  # fmt: skip
                assert normalised(body, [*scrub, *random.values()]) == normalised(
                    _body(control), [*scrub, *random.values()]
                ), f"{where}: answers unlike a random id"
            if call.refused == 403:
                assert refused.json()["code"] in ("agent_forbidden", "permission_denied"), f"{where}: {body[:200]!r}"
            # Aimed at alfa, the token's own agent: it goes through (the matrix can fail).
            allowed = _agent_request(client, method, url(mine), call, call.data("alfa", mine) if call.data else None)
            own_body = _body(allowed)
            assert allowed.status_code in call.own, f"own {where}: {allowed.status_code} {own_body[:300]!r}"
            assert BETA not in own_body.decode(errors="replace"), f"own {where} shows agent beta's rows"
            if call.shows:
                assert ALFA in own_body.decode(errors="replace"), f"own {where} does not show alfa's rows"
