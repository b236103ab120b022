"""Reads behind the console pages: the index summary and the health page.

Every read takes the operator (``user``) and sees only the tenants they operate
(console/scoping.py); what spans every tenant — job runs, HNSW indexes, schedules — is
for superusers only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import connection
from django.db.models import Count

from console import charts
from console.scoping import is_unrestricted, scope_queryset
from engram_site.models import JobRun, JobStatus
from maintenance.models import ConflictCandidate, DuplicateCandidate
from maintenance.services.reindex import HNSW_INDEXES
from memories.models import PENDING_ENRICHMENT, EnrichmentFailure, Memory, MemoryBlock
from memories.services import ENRICHMENT_KINDS
from memories.storage import usage_storage_refresh
from tenants import usage
from tenants.models import Bucket, Tenant


def pending_review_count(*, user) -> int:
    return scope_queryset(DuplicateCandidate.objects.undecided(), user=user).count()


def open_conflict_count(*, user) -> int:
    return scope_queryset(ConflictCandidate.objects.undecided(), user=user).count()


def console_summary(*, user) -> dict:
    """What the admin index shows above the model list."""
    return {"pending_reviews": pending_review_count(user=user), "open_conflicts": open_conflict_count(user=user)}


def bucket_choices(*, user, tenant: Tenant | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """The buckets ``user`` operates, grouped by tenant, for <select> elements with <optgroup>s."""
    buckets = scope_queryset(Bucket.objects.select_related("tenant"), user=user)
    buckets = buckets.order_by("tenant__name", "tenant_id", "name")
    if tenant is not None:
        buckets = buckets.filter(tenant=tenant)
    groups: dict[str, list[tuple[str, str]]] = {}
    for bucket in buckets:
        groups.setdefault(f"{bucket.tenant.name} ({bucket.tenant.slug})", []).append((str(bucket.pk), bucket.name))
    return list(groups.items())


def bucket_memory_counts(*, user) -> dict:
    """bucket id -> memory count of the buckets ``user`` operates (one pass over idx_memories_bucket)."""
    memories = scope_queryset(Memory.objects.all(), user=user)
    return dict(memories.values("bucket_id").annotate(n=Count("id")).values_list("bucket_id", "n"))


def bucket_block_counts(*, user) -> dict:
    """bucket id -> memory block count of the buckets ``user`` operates."""
    blocks = scope_queryset(MemoryBlock.objects.all(), user=user)
    return dict(blocks.values("bucket_id").annotate(n=Count("id")).values_list("bucket_id", "n"))


@dataclass
class TenantHealth:
    tenant: Tenant
    buckets: int = 0
    memories: int = 0
    pending_embeddings: int = 0
    pending_lemmas: int = 0
    pending_reviews: int = 0
    open_conflicts: int = 0


@dataclass
class IndexHealth:
    name: str
    size_bytes: int | None
    valid: bool | None
    last_reindex: JobRun | None = None
    last_reindex_result: dict = field(default_factory=dict)


@dataclass
class HealthReport:
    tenants: list[TenantHealth]
    jobs: list[JobRun]
    last_success: dict
    indexes: list[IndexHealth]
    schedules: list
    totals: dict
    # False for tenant operators: jobs, indexes and schedules span every tenant.
    system: bool = True
    # Rows an enrichment stage keeps failing on (the most attempts first), and how many there are.
    failures: list[EnrichmentFailure] = field(default_factory=list)
    failures_total: int = 0


# How many failure records the health page lists (the most attempts first).
FAILURES_SHOWN = 100


def enrichment_failures(*, user):
    """The enrichment failures of the tenants ``user`` operates, the most attempts first."""
    failures = scope_queryset(EnrichmentFailure.objects.select_related("tenant", "bucket"), user=user)
    return failures.order_by("-attempts", "-last_failed_at", "pk")


def _index_health(name: str) -> IndexHealth:
    with connection.cursor() as cur:
        cur.execute(
            """
            SELECT pg_relation_size(c.oid), i.indisvalid FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid
            WHERE c.relname = %s AND c.relkind = 'i'
            """,
            [name],
        )
        row = cur.fetchone()
    return IndexHealth(name=name, size_bytes=row[0] if row else None, valid=row[1] if row else None)


def health_report(*, user) -> HealthReport:
    """Per tenant counts and enrichment failures (the tenants ``user`` operates), job runs,
    HNSW indexes and schedules (superusers only), in a handful of queries."""

    def scoped(queryset):
        return scope_queryset(queryset, user=user)

    tenants = {t.pk: TenantHealth(tenant=t) for t in scoped(Tenant.objects.order_by("name"))}
    for tenant_id, n in (
        scoped(Bucket.objects.all()).values("tenant_id").annotate(n=Count("id")).values_list("tenant_id", "n")
    ):
        if tenant_id in tenants:
            tenants[tenant_id].buckets = n
    # idx_memories_tenant (an index-only count per tenant).
    for tenant_id, n in (
        scoped(Memory.objects.all()).values("tenant_id").annotate(n=Count("id")).values_list("tenant_id", "n")
    ):
        if tenant_id in tenants:
            tenants[tenant_id].memories = n
    # The partial index idx_memories_enrich_pending serves PENDING_ENRICHMENT.
    pending = (
        scoped(Memory.objects.filter(PENDING_ENRICHMENT))
        .values("tenant_id")
        .annotate(
            embeddings=Count("id", filter=ENRICHMENT_KINDS["embeddings"]),
            lemmas=Count("id", filter=ENRICHMENT_KINDS["lemmas"]),
        )
    )
    for row in pending:
        if row["tenant_id"] in tenants:
            tenants[row["tenant_id"]].pending_embeddings = row["embeddings"]
            tenants[row["tenant_id"]].pending_lemmas = row["lemmas"]
    for tenant_id, n in (
        scoped(DuplicateCandidate.objects.undecided())
        .values("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    ):
        if tenant_id in tenants:
            tenants[tenant_id].pending_reviews = n
    for tenant_id, n in (
        scoped(ConflictCandidate.objects.undecided())
        .values("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    ):
        if tenant_id in tenants:
            tenants[tenant_id].open_conflicts = n
    rows = list(tenants.values())
    totals = {
        name: sum(getattr(t, name) for t in rows)
        for name in ("buckets", "memories", "pending_embeddings", "pending_lemmas", "pending_reviews", "open_conflicts")
    }
    failures = enrichment_failures(user=user)
    failed = {"failures": list(failures[:FAILURES_SHOWN]), "failures_total": failures.count()}
    if not is_unrestricted(user):
        return HealthReport(
            tenants=rows, jobs=[], last_success={}, indexes=[], schedules=[], totals=totals, system=False, **failed
        )

    # The last run of every job (jobruns_name_started), and its last success.
    jobs = list(JobRun.objects.order_by("name", "-started_at").distinct("name"))
    last_success = {
        run.name: run
        for run in JobRun.objects.filter(status=JobStatus.SUCCEEDED).order_by("name", "-started_at").distinct("name")
    }
    last_reindex = last_success.get("reindex_hnsw")
    indexes = []
    for name in HNSW_INDEXES:
        index = _index_health(name)
        if last_reindex is not None:
            index.last_reindex = last_reindex
            index.last_reindex_result = (last_reindex.counts or {}).get(name) or {}
        indexes.append(index)

    from django_celery_beat.models import PeriodicTask

    # Every schedule: the sources sweep and webhook deliveries are beat's jobs too.
    schedules = list(PeriodicTask.objects.order_by("name"))
    return HealthReport(
        tenants=rows, jobs=jobs, last_success=last_success, indexes=indexes, schedules=schedules, totals=totals,
        **failed,
    )  # fmt: skip


# --- usage ----------------------------------------------------------------------------------------


USAGE_DAYS = 30


def tenant_usage_context(*, tenants: list[Tenant]) -> dict:
    """Charts of ``tenants``' usage added up (one tenant: its own), for console/_usage.html.

    Flushes this process's pending counts first and measures storage when it is due
    (memories/storage.py), so the page shows what just happened."""
    usage.flush()
    ids = [t.pk for t in tenants]
    usage_storage_refresh(tenant_ids=ids)
    series = usage.usage_days(tenant_ids=ids, days=USAGE_DAYS)
    days = charts.combine([series[t.pk] for t in tenants])
    return {
        "days": days,
        "series": series,
        "charts": charts.usage_charts(days) if days else [],
        "refusals_today": days[-1].refused if days and days[-1].refusals else {},
    }


def usage_report(*, user, tenant: Tenant | None = None) -> dict:
    """The usage page: charts of one tenant or of all the tenants ``user`` operates, and a
    row of 30-day totals per tenant."""
    visible = list(scope_queryset(Tenant.objects.order_by("name"), user=user))
    context = tenant_usage_context(tenants=[tenant] if tenant is not None else visible)
    everyone = usage.usage_days(tenant_ids=[t.pk for t in visible], days=USAGE_DAYS) if tenant else context["series"]
    rows = []
    for t in visible:
        days = everyone[t.pk]
        rows.append({
            "tenant": t,
            "written": sum(d.memories_written for d in days),
            "searches": sum(d.searches for d in days),
            "tokens": sum(d.tokens_returned for d in days),
            "refused": sum(d.refusals for d in days),
            "today": days[-1],
        })  # fmt: skip
    return {**context, "rows": rows, "selected": tenant}
