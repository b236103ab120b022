"""The knowledge graph: entities, their mentions in memories, and temporal edges.

Everything here is derived from the memories table and can be rebuilt from it at
any time (``manage.py rebuild_graph``). Edges are append-only in meaning: a
changed fact closes the previous edge's validity (``valid_to``) and a new edge
opens; nothing about the past is overwritten.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.functions import RandomUUID
from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import Exists, F, Func, OuterRef, Q, Value

from engram_site.db import TransactionNow
from engram_site.querysets import BucketScopedQuerySet
from engram_site.scoping import scoped_manager
from memories.models import Memory
from tenants.models import Bucket, Tenant


class EntityQuerySet(BucketScopedQuerySet):
    pass


class Entity(models.Model):
    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    # Tenant and bucket cascade in the database (migration 0001), like memories.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    name = models.TextField()
    normalized_name = models.TextField()
    # PERSON, ORG, PLACE, PRODUCT, EVENT, ANIMAL, THING, or SPEAKER (the user or the assistant)
    type = models.CharField(max_length=20)
    aliases = ArrayField(models.TextField(), default=list, blank=True)
    mention_count = models.IntegerField(default=0)
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)

    objects = EntityQuerySet.as_manager()

    class Meta:
        db_table = "graph_entities"
        verbose_name_plural = "entities"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "bucket", "normalized_name", "type"], name="graph_entities_unique_name"
            )
        ]
        indexes = [
            # Entity lookup by name when resolving mentions and query entities (the unique
            # index above serves (tenant, bucket, normalized_name) prefix lookups too).
            models.Index(fields=["tenant", "bucket"], name="graph_entities_bucket"),
            # The query's entities by alias (graph retrieval's seeds: aliases && ARRAY[...]),
            # the other arm of its OR with normalized_name = ANY(...).
            GinIndex(fields=["aliases"], name="graph_entities_aliases"),
            # A lone first name read as the bucket's one person of that first name (extraction's
            # resolver and retrieval's seeds): WHERE tenant_id = ? AND bucket_id = ? AND type =
            # 'PERSON' AND split_part(normalized_name, ' ', 1) = ANY(?).
            models.Index(
                F("tenant"),
                F("bucket"),
                Func(F("normalized_name"), Value(" "), Value(1), function="split_part"),
                condition=Q(type="PERSON"),
                name="graph_entities_first_word",
            ),
            # A lone surname read as the bucket's one person of that surname (the resolver):
            # ... AND split_part(normalized_name, ' ', -1) = ANY(?).
            models.Index(
                F("tenant"),
                F("bucket"),
                Func(F("normalized_name"), Value(" "), Value(-1), function="split_part"),
                condition=Q(type="PERSON"),
                name="graph_entities_last_word",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.type})"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """An agent-limited token sees an entity only through a memory it may read that mentions it."""
        visible = Memory.objects.filter(pk=OuterRef("memory_id")).filter(Memory.agent_scope(agents))
        return Q(Exists(Mention.objects.filter(entity_id=OuterRef("pk")).filter(Exists(visible))))


class Mention(models.Model):
    """A memory mentions an entity."""

    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    entity = models.ForeignKey(
        Entity, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="mentions"
    )

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "graph_mentions"
        constraints = [models.UniqueConstraint(fields=["memory", "entity"], name="graph_mentions_unique")]
        indexes = [
            # Graph retrieval: memories that mention the entities reached.
            models.Index(fields=["entity", "memory"], name="graph_mentions_entity"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} mentions {self.entity_id}"


class EdgeQuerySet(BucketScopedQuerySet):
    def valid_at(self, moment) -> EdgeQuerySet:
        return self.filter(valid_from__lte=moment).filter(Q(valid_to__isnull=True) | Q(valid_to__gt=moment))

    def current(self) -> EdgeQuerySet:
        return self.filter(valid_to__isnull=True)

    def stated(self) -> EdgeQuerySet:
        """Edges whose memory is not past its ``expires_at``: what a reader is told (search leaves
        such a memory out, and so what it said)."""
        return self.filter(Exists(Memory.objects.filter(pk=OuterRef("source_memory_id")).unexpired()))


class Edge(models.Model):
    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    subject = models.ForeignKey(Entity, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    predicate = models.CharField(max_length=60)
    object_entity = models.ForeignKey(
        Entity, null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    object_literal = models.TextField(null=True, blank=True)
    # Functional predicates (lives_in, works_at, ...) hold one value at a time; a new
    # value closes the previous edge. ``functional_key`` groups one timeline.
    functional_key = models.TextField(null=True, blank=True)
    valid_from = models.DateTimeField()
    valid_to = models.DateTimeField(null=True, blank=True)
    confidence = models.FloatField(default=1.0)
    source_memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)

    objects = EdgeQuerySet.as_manager()

    class Meta:
        db_table = "graph_edges"
        indexes = [
            # BFS: edges touching a frontier of entities, currently valid.
            models.Index(
                fields=["tenant", "bucket", "subject"], name="graph_edges_subject_current",
                condition=Q(valid_to__isnull=True),
            ),
            models.Index(
                fields=["tenant", "bucket", "object_entity"], name="graph_edges_object_current",
                condition=Q(valid_to__isnull=True),
            ),
            # BFS as of a past time, and entity pages with history.
            models.Index(fields=["tenant", "bucket", "subject", "valid_from"], name="graph_edges_subject"),
            models.Index(fields=["tenant", "bucket", "object_entity", "valid_from"], name="graph_edges_object"),
            # Timeline maintenance: all edges of one functional (subject, predicate[, category]).
            models.Index(
                fields=["tenant", "bucket", "subject", "functional_key"], name="graph_edges_timeline",
                condition=Q(functional_key__isnull=False),
            ),
            # Cascades and "memories behind an edge".
            models.Index(fields=["source_memory"], name="graph_edges_source"),
            # Relatives and pets without a name ("User has mom", graph/extract/unnamed.py): the
            # memories that spoke of one, re-read once it is named, and graph retrieval's answer
            # to "where does my mom live?".
            models.Index(
                fields=["tenant", "bucket", "subject", "object_literal"], name="graph_edges_unnamed",
                condition=Q(predicate="has"),
            ),
        ]  # fmt: skip

    def __str__(self) -> str:
        target = self.object_literal if self.object_entity_id is None else str(self.object_entity_id)
        return f"{self.subject_id} {self.predicate} {target}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """An agent-limited token sees an edge only when it may read the memory it came from."""
        return Q(Exists(Memory.objects.filter(pk=OuterRef("source_memory_id")).filter(Memory.agent_scope(agents))))


class Processed(models.Model):
    """Which memories the extractor has seen (and with which version): the sweep
    behind asynchronous extraction finds the rest with an anti-join."""

    memory = models.OneToOneField(
        Memory, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    extractor_version = models.IntegerField()
    processed_at = models.DateTimeField()

    objects = scoped_manager(tenant="memory__tenant_id")

    class Meta:
        db_table = "graph_processed"

    def __str__(self) -> str:
        return f"{self.memory_id} v{self.extractor_version}"


class CorrectionKind(models.TextChoices):
    RENAME = "rename", "rename"
    MERGE = "merge", "merge"
    SPLIT = "split", "split"
    ALIAS_ADD = "alias_add", "alias added"
    ALIAS_REMOVE = "alias_remove", "alias removed"
    EDGE_DELETE = "edge_delete", "edge deleted"
    EDGE_FIX = "edge_fix", "edge fixed"


class CorrectionQuerySet(BucketScopedQuerySet):
    pass


class Correction(models.Model):
    """An operator's correction of a bucket's graph (graph/corrections.py writes them).

    Unlike the rest of the graph this is a table of record: a rebuild keeps it and replays
    it (graph/rules.py), and extraction consults it, so a correction outlives the entity
    and edge ids it was made on. The payload therefore names entities by normalized name
    and type, and edges by subject, predicate, object and source memory, never by id.
    """

    id = models.BigAutoField(primary_key=True)
    # Tenant and bucket cascade in the database (migration 0005), like the rest of the graph.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=CorrectionKind.choices)
    payload = models.JSONField(default=dict)
    # Every normalized entity name the payload names: an entity's corrections, and the ones an
    # erasure must drop with the person it forgets.
    names = ArrayField(models.TextField(), default=list, blank=True)
    actor_kind = models.CharField(max_length=16)
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor_label = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=TransactionNow(), editable=False)

    objects = CorrectionQuerySet.as_manager()

    class Meta:
        db_table = "graph_corrections"
        indexes = [
            # Replaying a bucket's corrections in order (every extraction and rebuild), and the
            # console's list of them: WHERE tenant_id = ? AND bucket_id = ? ORDER BY id.
            models.Index(fields=["tenant", "bucket", "id"], name="graph_corrections_bucket"),
            # An entity's corrections, and an erasure's: WHERE names && ARRAY[...].
            GinIndex(fields=["names"], name="graph_corrections_names"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} by {self.actor_label or self.actor_kind}"
