"""The memories table: seed 000's schema of record, column for column."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.contrib.postgres.functions import RandomUUID
from django.contrib.postgres.indexes import GinIndex, OpClass
from django.contrib.postgres.search import SearchVectorField
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Case, Func, Q, Value, When
from django.db.models.functions import Cast, Coalesce, Concat, Now
from pgvector.django import HalfVectorField, HnswIndex, VectorField

from engram_site.db import CurrentTransactionId, TransactionNow
from engram_site.querysets import BucketScopedQuerySet
from engram_site.scoping import scoped_manager
from tenants.models import Bucket, Tenant

EMBEDDING_DIMENSIONS = 384  # all-MiniLM-L6-v2
# The model's window without [CLS] and [SEP] (both registered models read 256 word pieces): a
# memory of more is cut off by the model, and is also embedded by passages (memories.passages).
LONG_MEMORY_TOKENS = 254

# HNSW build parameters of both vector indexes. ef_construction is the width of the
# search each insert makes to find its neighbours, so it costs at build time and at
# every write; m is how many links a node keeps (2m on the bottom layer), which costs
# at every write (the new node's neighbours re-prune their lists) and at every walk.
# On 100k memories of the benchmark corpus, m=12 with ef_construction=160 found more
# of the exact top 10 at ef_search 100 than m=16 with 128 (0.980-0.983 against
# 0.968-0.972 over three builds each) for 8-12% less database CPU per insert; on 100k
# sentences of other text it found a little less (0.991 against 0.996), far above the
# 0.95 bar either way. bench/README.md, "HNSW build parameters"; seed 000: "the
# defaults were too aggressive on memory and too loose on recall".
HNSW_M = 12
HNSW_EF_CONSTRUCTION = 160


def half_precision(column: str) -> Cast:
    """``column::halfvec(384)``: what the two HNSW indexes hold, and what a walk orders by.

    The graphs keep each vector in 16-bit floats. Measured at 100k memories, both kinds
    built on the same rows: 112 against 195 MB, walks 10-20% faster, recall@10 against an
    exact 32-bit search 0.963 against 0.957; and about a third less database CPU to insert
    into the index (bench/README.md). Similarities a search reports are still computed from
    the stored 32-bit vectors. A query walks an index only when it orders by this expression:
    :func:`half_precision_distance` writes it in SQL.
    """
    return Cast(column, HalfVectorField(dimensions=EMBEDDING_DIMENSIONS))


def half_precision_distance(column_sql: str, vector_sql: str = "%s") -> str:
    """SQL for the cosine distance an HNSW walk orders by: ``column_sql`` (e.g. ``m.embedding``)
    to ``vector_sql`` (a placeholder or an expression of type vector), both in half precision."""
    half = f"halfvec({EMBEDDING_DIMENSIONS})"
    return f"({column_sql})::{half} <=> ({vector_sql})::{half}"


# New entries of a GIN index wait in an unsorted pending list until it outgrows this many kB
# (then the inserting write merges them) or a vacuum runs, and every keyword search reads the
# whole list. PostgreSQL's default, 4 MB, held ~10,000 memories' lexemes after a load and
# added ~4.5 ms to a BM25 statement at 100k (merging those 288 pages took 0.07 s); 256 kB
# bounds the list to ~32 pages, about half a millisecond per search (bench/README.md).
GIN_PENDING_LIST_KB = 256


class Attribution(models.TextChoices):
    USER = "user", "user"
    ASSISTANT = "assistant", "assistant"


class Scope(models.TextChoices):
    SPECIFIC = "specific", "specific"
    GENERAL = "general", "general"


# Rows the enrichment sweep must visit (model or lemmatizer was down at write time).
PENDING_ENRICHMENT = (
    Q(embedding__isnull=True)
    | Q(text_lemmatized__isnull=True)
    | Q(context_text__isnull=False, context_embedding__isnull=True)
    | Q(context_text__isnull=False, context_lemmatized__isnull=True)
)


class JsonbDefault(Func):
    """A literal JSONB default, rendered as e.g. ``'[]'::jsonb`` in the DDL."""

    output_field = models.JSONField()

    def __init__(self, literal: str):
        super().__init__(Value(literal))
        self.template = "%(expressions)s::jsonb"


class MemoryQuerySet(BucketScopedQuerySet):
    def unexpired(self) -> MemoryQuerySet:
        """Memories not past their ``expires_at`` now: what search returns (memories.filters'
        include_expired=false), and so what may be shown as stating anything."""
        return self.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=Now()))


class Memory(models.Model):
    # Identity. tenant and bucket are denormalised onto the row because every query
    # filters on both. The foreign keys are declared in the database by migration
    # 0002 with ON DELETE CASCADE: deleting a tenant with a million memories must
    # be one statement, not a Python-side collection of every row.
    id = models.UUIDField(primary_key=True, db_default=RandomUUID(), editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="memories"
    )

    content = models.TextField()
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    # The model that made this row's vectors: always its bucket's model, written with the
    # vectors under a lock on the bucket row that a switch's swap also takes
    # (memories.services.embedding_switch). A constant default, so adding it to a big
    # table changes only the catalogue.
    embedding_model = models.CharField(
        max_length=64, default="all-MiniLM-L6-v2", db_default="all-MiniLM-L6-v2", editable=False
    )
    # A parking lot, not a destination: nothing on the hot path reads it.
    metadata = models.JSONField(null=True, blank=True, db_default=JsonbDefault("{}"))
    token_count = models.IntegerField(null=True, blank=True)

    classified_topic = models.TextField(null=True, blank=True)
    classified_scope = models.TextField(null=True, blank=True, choices=Scope.choices)

    hint_root = models.TextField(null=True, blank=True)
    hint_tags = ArrayField(models.TextField(), null=True, blank=True)

    created_at = models.DateTimeField(null=True, blank=True, db_default=TransactionNow())
    last_accessed_at = models.DateTimeField(null=True, blank=True)

    # Lemmatised by spaCy at ingest; the generated tsvector below sits on top.
    text_lemmatized = models.TextField(null=True, blank=True)
    # MD5 of the normalised text; the partial unique index makes dedup a database invariant.
    text_hash = models.CharField(max_length=32, null=True, blank=True)

    attributed_to = models.CharField(max_length=20, null=True, blank=True, choices=Attribution.choices)
    agent_id = models.TextField(null=True, blank=True)
    run_id = models.TextField(null=True, blank=True)
    # Explicit supersedes / refines / cites edges between memories.
    linked_memory_ids = models.JSONField(null=True, blank=True, db_default=JsonbDefault("[]"))
    source_actor_id = models.TextField(null=True, blank=True)

    # 'simple' configuration: the input is already lemmatised, and a second stemmer
    # on top would over-stem.
    lemmatized_tsv = models.GeneratedField(
        expression=Func(Value("simple"), Coalesce("text_lemmatized", Value("")), function="to_tsvector"),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    # --- Beyond seed 000: columns a hot-path query needs (docs/SCHEMA.md) -------------
    # Sequence context (seed 002's enriched vector, without an LLM): for a memory that
    # arrived after others in the same batch or run, the text of its one or two
    # predecessors. It is searched as a second lexical document (memory + context)
    # and embedded, with the memory, as a second vector.
    context_text = models.TextField(null=True, blank=True)
    context_lemmatized = models.TextField(null=True, blank=True)
    context_embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    context_tsv = models.GeneratedField(
        expression=Case(
            When(context_lemmatized__isnull=True, then=Value(None)),
            default=Func(
                Value("simple"),
                Concat(
                    Coalesce("text_lemmatized", Value(""), output_field=models.TextField()),
                    Value(" ", output_field=models.TextField()),
                    "context_lemmatized",
                    output_field=models.TextField(),
                ),
                function="to_tsvector",
                output_field=SearchVectorField(),
            ),
            output_field=SearchVectorField(),
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )

    # Supersession (graph app): a newer memory states a changed fact. Historical
    # memories stay queryable; retrieval demotes them and can filter them out or
    # evaluate them "as of" a past time (historical once superseded_at <= as_of).
    superseded_at = models.DateTimeField(null=True, blank=True)
    superseded_by = models.UUIDField(null=True, blank=True)

    # Where the memory stands in the sequence it was written in: a run (``run_id``, across
    # requests) or one write request's batch. Retrieval lifts a memory whose neighbours match
    # the query and brings those neighbours in (an answer often follows its question). NULL
    # for memories written as unrelated facts ("sequence": false) or before the column existed.
    sequence_id = models.UUIDField(null=True, blank=True)
    sequence_index = models.IntegerField(null=True, blank=True)

    # --- A memory's life (docs/LIFECYCLE.md) -------------------------------------------
    # How much it matters, in [0, 1], as a client or an operator said (NULL: not said). A
    # bounded boost in ranking (memories.ranking.importance_boost); nothing changes when unset.
    importance = models.FloatField(null=True, blank=True)
    # After this moment the memory is out of searches and lists (unless asked for), and the
    # purge job deletes it once the bucket's retention window has passed too.
    expires_at = models.DateTimeField(null=True, blank=True)

    objects = MemoryQuerySet.as_manager()

    class Meta:
        db_table = "memories"
        verbose_name_plural = "memories"
        indexes = [
            # Tenant-wide scans: counts, exports, tenant deletes.
            models.Index(fields=["tenant"], name="idx_memories_tenant"),
            # Bucket deletes and merges (the cascade from buckets looks rows up by bucket_id).
            models.Index(fields=["bucket"], name="idx_memories_bucket"),
            # Every list and retrieval query: WHERE tenant_id = ? AND bucket_id = ?.
            models.Index(fields=["tenant", "bucket"], name="idx_memories_tenant_bucket"),
            # Time windows within a bucket (created_after / created_before, read exactly when
            # narrow: see retrieval.EXACT_SCAN_BELOW) and listings newest first.
            models.Index(fields=["tenant", "bucket", "created_at"], name="idx_memories_bucket_created"),
            # Staleness reports: memories of a tenant not surfaced since a date.
            models.Index(fields=["tenant", "last_accessed_at"], name="idx_memories_last_accessed"),
            # BM25: lemmatized_tsv @@ query.
            GinIndex(
                fields=["lemmatized_tsv"],
                name="idx_memories_lemmatized_tsv",
                gin_pending_list_limit=GIN_PENDING_LIST_KB,
            ),
            # Retrieval filtered on attribution: WHERE tenant_id, bucket_id AND attributed_to = ?.
            models.Index(
                fields=["tenant", "bucket", "attributed_to"],
                name="idx_memories_attributed",
                condition=Q(attributed_to__isnull=False),
            ),
            # Retrieval scoped to one agent: WHERE tenant_id = ? AND agent_id = ?.
            models.Index(fields=["tenant", "agent_id"], name="idx_memories_agent", condition=Q(agent_id__isnull=False)),
            # Retrieval scoped to one run: WHERE tenant_id = ? AND run_id = ?.
            models.Index(fields=["tenant", "run_id"], name="idx_memories_run", condition=Q(run_id__isnull=False)),
            # The metadata filter of searches and listings (memories/filters.py): metadata @> ?
            # AND metadata <> '{}'. Only rows that have metadata; jsonb_path_ops answers @> only.
            GinIndex(
                OpClass("metadata", name="jsonb_path_ops"),
                name="idx_memories_metadata",
                condition=~Q(metadata={}),
            ),
            # Who links to this memory: linked_memory_ids @> '["<id>"]'.
            GinIndex(fields=["linked_memory_ids"], name="idx_memories_linked"),
            # Vector retrieval: ORDER BY embedding::halfvec(384) <=> ? LIMIT k (half_precision).
            HnswIndex(
                OpClass(half_precision("embedding"), name="halfvec_cosine_ops"),
                name="idx_memories_embedding_hnsw",
                m=HNSW_M,
                ef_construction=HNSW_EF_CONSTRUCTION,
            ),
            # Keyword retrieval over memory + context: context_tsv @@ query.
            GinIndex(
                fields=["context_tsv"],
                name="idx_memories_context_tsv",
                condition=Q(context_lemmatized__isnull=False),
                gin_pending_list_limit=GIN_PENDING_LIST_KB,
            ),
            # Vector retrieval over memory + context: the same, on context_embedding.
            HnswIndex(
                OpClass(half_precision("context_embedding"), name="halfvec_cosine_ops"),
                name="idx_memories_context_hnsw",
                m=HNSW_M,
                ef_construction=HNSW_EF_CONSTRUCTION,
            ),
            # Neighbour expansion in retrieval: WHERE tenant_id, bucket_id AND (sequence_id,
            # sequence_index) IN (the positions around the best candidates).
            models.Index(
                fields=["tenant", "bucket", "sequence_id", "sequence_index"],
                name="idx_memories_sequence",
                condition=Q(sequence_id__isnull=False),
            ),
            # Retrieval: whether a bucket has memories with an importance, and which (few) they are.
            models.Index(
                fields=["tenant", "bucket"], name="idx_memories_important", condition=Q(importance__isnull=False)
            ),
            # The purge job and the expiry filter's few expiring rows.
            models.Index(fields=["expires_at"], name="idx_memories_expires", condition=Q(expires_at__isnull=False)),
            # The passage pass (memories/services/passages.py): memories longer than the model's
            # window, oldest first, whose passages are missing or out of date.
            models.Index(
                fields=["created_at", "id"],
                name="idx_memories_long",
                condition=Q(token_count__gt=LONG_MEMORY_TOKENS),
            ),
            # The enrichment sweep: rows whose embedding, lemmas or context vector are missing.
            models.Index(
                fields=["created_at"],
                name="idx_memories_enrich_pending",
                condition=PENDING_ENRICHMENT,
            ),
        ]
        constraints = [
            # The dedup invariant: INSERT ... ON CONFLICT relies on this partial unique index.
            models.UniqueConstraint(
                fields=["tenant", "bucket", "text_hash"],
                name="idx_memories_hash_unique",
                condition=Q(text_hash__isnull=False),
            ),
            models.CheckConstraint(
                condition=Q(importance__isnull=True) | Q(importance__gte=0.0, importance__lte=1.0),
                name="memories_importance_range",
            ),
        ]

    def __str__(self) -> str:
        return self.content[:80]

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """The memories an agent-limited token reads (``visible_to``; tenants.models.AgentRestriction)."""
        return agents.q("agent_id")

    def last_access(self):
        """When retrieval last surfaced this memory: ``last_accessed_at``, or the newer
        time still waiting in ``memory_access`` when the queryset was annotated with it
        (memories.access.with_pending)."""
        return self.__dict__.get("last_accessed_seen", self.last_accessed_at)


class MemoryAccess(models.Model):
    """When retrieval last surfaced a memory, until the access-times job copies it into
    ``memories.last_accessed_at`` (memories/access.py).

    Rewriting a memories row rewrites its entries in every index, two HNSW graphs
    included (several milliseconds of database CPU per row, measured at 100k rows), so
    searches record here — a narrow table with one btree — and the job updates the
    memories rows in the background, at most once per ``ENGRAM_ACCESS_RESOLUTION``.
    """

    memory = models.OneToOneField(
        Memory, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    accessed_at = models.DateTimeField()

    objects = scoped_manager(tenant="memory__tenant_id")

    class Meta:
        db_table = "memory_access"

    def __str__(self) -> str:
        return f"{self.memory_id} at {self.accessed_at}"


class NextEmbedding(models.Model):
    """A memory's vectors by the model its bucket is switching to, made by the switch job
    while searches go on answering from ``memories``' own vectors; moved into the row in
    the swap and deleted with it (memories.services.embedding_switch).

    ``source_hash`` is the hash of the texts the vectors were made from: a row edited after
    it was staged no longer matches and is embedded again before the swap.
    """

    memory = models.OneToOneField(
        Memory, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    # Indexed: the switch job's counts and the swap's UPDATE ... FROM read by bucket.
    bucket = models.ForeignKey(Bucket, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    model = models.CharField(max_length=64)
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    context_embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    source_hash = models.CharField(max_length=32)

    objects = scoped_manager(tenant="bucket__tenant_id")

    class Meta:
        db_table = "memory_embeddings_next"

    def __str__(self) -> str:
        return f"{self.memory_id} by {self.model}"


class MemoryKey(models.Model):
    """A memory's key document: what it says, spelled out so that a question can find it by more
    than its own words (docs/RETRIEVAL.md, "Keys that carry facts"). Built after the write
    (memories/services/keys.py) from the memory and what the apps above know of it: its
    statements (first person resolved to the speaker), the entities it mentions by their
    canonical names and the relations it states, its key phrases, and the dates its relative
    expressions mean ("last Tuesday" written on 9 May 2023 is Tuesday 2 May 2023).

    Searched as two signals of their own, ``keyword_key`` (BM25 over ``tsv``) and ``vector_key``
    (``embedding``). A side table, not columns on ``memories``: building a key does not rewrite
    the memory's row and its entries in every index (both HNSW graphs included). The row goes
    with its memory (a foreign key ON DELETE CASCADE, migration 0015). ``text_hash`` is the
    memory's when the key was built: a key whose memory has changed since is never searched
    (the signals join on it) and is built again.
    """

    memory = models.OneToOneField(
        Memory, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    # Denormalised like memories' own: every statement leads with them. A bucket merge moves
    # them with the memories (memories.services.merge).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    text = models.TextField()
    lemmatized = models.TextField()
    tsv = models.GeneratedField(
        expression=Func(Value("simple"), "lemmatized", function="to_tsvector"),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    # NULL when the model returned an unusable vector for it: the key is then searched by its words only.
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=64)
    text_hash = models.CharField(max_length=32, null=True, blank=True)
    # memories.keys.KEY_VERSION when built: a new version of the recipe rebuilds older keys.
    version = models.IntegerField()
    # Set when what the key was made of changed (the graph extracted the memory again): it is
    # still searched, and built again by the next pass.
    stale = models.BooleanField(default=False)
    built_at = models.DateTimeField(db_default=TransactionNow())

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "memory_keys"
        indexes = [
            models.Index(fields=["tenant", "bucket"], name="idx_memory_keys_bucket"),
            # keyword_key: tsv @@ query.
            GinIndex(fields=["tsv"], name="idx_memory_keys_tsv", gin_pending_list_limit=GIN_PENDING_LIST_KB),
            # vector_key: ORDER BY embedding::halfvec(384) <=> ? LIMIT k (half_precision).
            HnswIndex(
                OpClass(half_precision("embedding"), name="halfvec_cosine_ops"),
                name="idx_memory_keys_hnsw",
                m=HNSW_M,
                ef_construction=HNSW_EF_CONSTRUCTION,
            ),
            # The key pass: keys marked stale.
            models.Index(fields=["built_at"], name="idx_memory_keys_stale", condition=Q(stale=True)),
        ]

    def __str__(self) -> str:
        return f"key of {self.memory_id}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        return agents.q("memory__agent_id")


class MemoryPassage(models.Model):
    """One window of a memory longer than the embedding model's (memories.passages): a span of
    its content, ``char_start`` to ``char_end``, with the vector of that span. The ``vector``
    signal scores such a memory by the best of its own vector and its passages'
    (docs/RETRIEVAL.md, "Long memories"), and a hit names the passage that matched.

    Built after the write (memories/services/passages.py), like a key document: a side table, so
    building passages rewrites no memory row. The rows go with their memory (a foreign key ON
    DELETE CASCADE, migration 0016); an edit of the content deletes them in its transaction.
    ``text_hash`` is the memory's when they were built: passages of another text are never
    searched (the signal joins on it) and are built again, as are those of an older
    ``PASSAGE_VERSION`` or of another embedding model than the bucket's.
    """

    id = models.BigAutoField(primary_key=True)
    # Found by (memory, ordinal): the unique constraint's index serves it.
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # Denormalised like memories' own: every statement leads with them. A bucket merge moves
    # them with the memories (memories.services.merge).
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    ordinal = models.IntegerField()
    char_start = models.IntegerField()
    char_end = models.IntegerField()
    # NULL when the model returned an unusable vector for it: the passage is then not searched.
    embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=64)
    text_hash = models.CharField(max_length=32, null=True, blank=True)
    # memories.passages.PASSAGE_VERSION when built: a new splitter rebuilds older passages.
    version = models.IntegerField()
    built_at = models.DateTimeField(db_default=TransactionNow())

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "memory_passages"
        constraints = [
            # A memory's passages by ordinal; the passage pass's "built?" probe reads ordinal 0.
            models.UniqueConstraint(fields=["memory", "ordinal"], name="memory_passages_memory_ordinal"),
        ]
        indexes = [
            # Counts per bucket (the search's statistics), bucket merges.
            models.Index(fields=["tenant", "bucket"], name="idx_memory_passages_bucket"),
            # vector (passages): ORDER BY embedding::halfvec(384) <=> ? LIMIT k (half_precision).
            HnswIndex(
                OpClass(half_precision("embedding"), name="halfvec_cosine_ops"),
                name="idx_memory_passages_hnsw",
                m=HNSW_M,
                ef_construction=HNSW_EF_CONSTRUCTION,
            ),
        ]

    def __str__(self) -> str:
        return f"passage {self.ordinal} of {self.memory_id}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        return agents.q("memory__agent_id")


class VersionKind(models.TextChoices):
    EDITED = "edited", "edited"
    SUPERSEDED = "superseded", "superseded"
    MERGED = "merged", "merged into another"
    RECLASSIFIED = "reclassified", "reclassified"
    DELETED = "deleted", "deleted"
    RESTORED = "restored", "restored"
    # Not a change of the memory: an agent rated it for a query (SearchFeedback). Recorded here
    # so that the memory's history says who taught the ranking what about it; no feed event.
    RATED = "rated", "rated by feedback"


class FeedbackSignal(models.TextChoices):
    USEFUL = "useful", "useful"
    IRRELEVANT = "irrelevant", "irrelevant"


class SearchFeedback(models.Model):
    """An agent's word on a memory a search returned: ``useful`` or ``irrelevant`` for ``query``
    (seed 001's ``search_feedback``). Written by memories.services.feedback; read by the search
    (memories.retrieval.feedback), which lifts a memory rated useful for questions like the
    query and demotes one rated irrelevant, by how alike the questions are (``query_embedding``,
    by the bucket's model when it was rated) and how recent the rating is (docs/RETRIEVAL.md,
    "Feedback").

    The row goes with its memory (a foreign key ON DELETE CASCADE, migration 0018: a delete, a
    purge, an erasure); a merge moves it to the surviving memory, a bucket merge to the target
    bucket (memories.services.merge). An erasure of an agent or a run also deletes the ratings
    that agent or run gave (memories.services.erasure).
    """

    id = models.BigAutoField(primary_key=True)
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # Denormalised like memories' own: the search's statement leads with them.
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    signal = models.CharField(max_length=16, choices=FeedbackSignal.choices)
    query = models.TextField()
    # NULL when the embedding model was down at the write: the rating is kept (and shown in the
    # history) but changes no ranking, which compares questions by their vectors.
    query_embedding = VectorField(dimensions=EMBEDDING_DIMENSIONS, null=True, blank=True)
    embedding_model = models.CharField(max_length=64, null=True, blank=True)
    agent_id = models.CharField(max_length=200, null=True, blank=True)
    run_id = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField(db_default=TransactionNow())

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "search_feedback"
        indexes = [
            # The search: a bucket's ratings newer than the horizon (memories.retrieval.feedback).
            models.Index(fields=["tenant", "bucket", "created_at"], name="idx_search_feedback_bucket"),
            # The cascade from memories, a merge moving a memory's ratings, its history.
            models.Index(fields=["memory"], name="idx_search_feedback_memory"),
            # An erasure by agent.
            models.Index(fields=["tenant", "agent_id"], name="idx_search_feedback_agent"),
        ]

    def __str__(self) -> str:
        return f"{self.signal} {self.memory_id} for {self.query[:40]!r}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        return agents.q("agent_id")


class MemoryVersion(models.Model):
    """One change of a memory: which fields changed, their values before it, who changed it and
    when. Written by the write gateway in the change's own transaction (memories/services/history.py).

    ``memory_id`` has no foreign key: the history of a deleted memory outlives its row until the
    purge job (or an erasure) removes both. Tenant and bucket cascade in the database
    (migration 0010).
    """

    id = models.BigAutoField(primary_key=True)
    memory_id = models.UUIDField()
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    kind = models.CharField(max_length=20, choices=VersionKind.choices)
    # {field: value before the change}, JSON-encoded (vectors are never kept).
    previous = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    # What else the change needs to be read: the survivor of a merge, the superseding memory.
    details = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    actor_kind = models.CharField(max_length=20)
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor_label = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=TransactionNow())

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "memory_versions"
        indexes = [
            models.Index(fields=["memory_id", "id"], name="idx_versions_memory"),
            models.Index(fields=["tenant", "bucket"], name="idx_versions_bucket"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} {self.kind} at {self.created_at}"


class DeletedMemory(models.Model):
    """A deleted memory, restorable until its bucket's retention window has passed.

    Deleting moves the row here (every stored column but the vectors' indexes and the generated
    search vectors), so searches, lists and the graph lose it at once without testing a flag
    on every query; restoring puts it back under the same id (memories/services/lifecycle.py).
    """

    id = models.UUIDField(primary_key=True)  # the memory's own id
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    deleted_at = models.DateTimeField(db_default=TransactionNow())
    # "deleted" (by a client or an operator) or "merged" (absorbed by another memory).
    reason = models.CharField(max_length=20, default="deleted")
    content = models.TextField()
    # The row's columns, JSON-encoded (memories/services/lifecycle.snapshot).
    row = models.JSONField(encoder=DjangoJSONEncoder)

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "memories_deleted"
        verbose_name = "deleted memory"
        verbose_name_plural = "deleted memories"
        indexes = [
            models.Index(fields=["tenant", "bucket", "deleted_at"], name="idx_deleted_bucket"),
            models.Index(fields=["deleted_at"], name="idx_deleted_at"),
        ]

    def __str__(self) -> str:
        return self.content[:80]

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """The deleted memories an agent-limited token reads: by the agent_id kept in ``row``
        (a JSON string, or null / absent for a shared memory)."""
        condition = Q(row__agent_id__in=list(agents.agent_ids))
        if agents.include_shared:
            condition |= Q(row__agent_id=None) | Q(row__agent_id__isnull=True)
        return condition


class EnrichmentStage(models.TextChoices):
    """The derived data computed after a write, each of which can fail for one row."""

    EMBEDDING = "embedding", "embedding"  # embedding and context_embedding
    LEMMAS = "lemmas", "lemmas"  # text_lemmatized and context_lemmatized
    GRAPH = "graph", "graph extraction"
    CLASSIFICATION = "classification", "classification"


class EnrichmentFailure(models.Model):
    """One stage that failed for one memory: how often, the last error, and when to try again.

    A side table, not columns on ``memories``: the hot table is not rewritten when a stage
    fails, and the sweeps skip a row whose ``next_retry_at`` is in the future with an anti-join
    on this (small) table. The row goes when the stage succeeds, and with its memory
    (a foreign key ON DELETE CASCADE, migration 0013; an erasure also deletes it by name).
    Written only by memories/services/enrichment_failures.py.
    """

    id = models.BigAutoField(primary_key=True)
    memory = models.ForeignKey(
        Memory, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    stage = models.CharField(max_length=20, choices=EnrichmentStage.choices)
    attempts = models.PositiveIntegerField(default=1)
    last_error = models.TextField()
    first_failed_at = models.DateTimeField()
    last_failed_at = models.DateTimeField()
    next_retry_at = models.DateTimeField()

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "enrichment_failures"
        indexes = [
            # The console's and the API's lists of a tenant's (or a bucket's) failures.
            models.Index(fields=["tenant", "bucket", "last_failed_at"], name="idx_enrich_failures_bucket"),
        ]
        constraints = [
            # One record per memory and stage: the upsert of a failure (ON CONFLICT), and the
            # sweeps' anti-join "no failure of this stage waiting for its retry time".
            models.UniqueConstraint(fields=["memory", "stage"], name="enrichment_failures_memory_stage"),
        ]

    def __str__(self) -> str:
        return f"{self.memory_id} {self.stage} × {self.attempts}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """The failures of the memories an agent-limited token reads."""
        return agents.q("memory__agent_id")


class EventKind(models.TextChoices):
    CREATED = "created", "created"
    UPDATED = "updated", "updated"
    SUPERSEDED = "superseded", "superseded"
    DELETED = "deleted", "deleted"
    RESTORED = "restored", "restored"
    EXPIRED = "expired", "expired"
    ERASED = "erased", "erased"
    # A memory block's changes (memories/services/blocks.py): block_id instead of memory_id.
    BLOCK_CREATED = "block_created", "block_created"
    BLOCK_UPDATED = "block_updated", "block_updated"
    BLOCK_DELETED = "block_deleted", "block_deleted"


# The kinds of a block's events (the others are a memory's).
BLOCK_EVENT_KINDS = (EventKind.BLOCK_CREATED, EventKind.BLOCK_UPDATED, EventKind.BLOCK_DELETED)


class MemoryEvent(models.Model):
    """One change of a memory (``memory_id``) or of a memory block (``block_id``; the kinds of
    :data:`BLOCK_EVENT_KINDS`) in a bucket's change feed (docs/API.md, "Change feed"): written by
    the write gateway in the change's own transaction (memories/services/feed_writer.py), so there is no
    event without its change and no change without its event.

    ``xid`` is the writing transaction's id. An identity value is taken at insert, not at commit,
    so a reader could see event 12 before event 11 commits and pass 11 by for good; the feed
    therefore serves an event only once every transaction older than its own has ended, in
    (``xid``, ``id``) order (memories/feed_reader.py). Kept ``ENGRAM_EVENTS_RETENTION_DAYS``.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # The memory changed; null for a block's event.
    memory_id = models.UUIDField(null=True, blank=True)
    # The block changed; null for a memory's event.
    block_id = models.UUIDField(null=True, blank=True)
    # The memory's (or block's) agent when the event was written: what a reader limited to some
    # agents sees.
    agent_id = models.TextField(null=True, blank=True)
    kind = models.CharField(max_length=20, choices=EventKind.choices)
    # Small: the changed field names, the content for created/updated/restored (never after an
    # erasure), a delete's reason. Clients read the rest from the memory itself.
    payload = models.JSONField(default=dict, encoder=DjangoJSONEncoder)
    at = models.DateTimeField(db_default=TransactionNow())
    xid = models.BigIntegerField(db_default=CurrentTransactionId())

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "memory_events"
        indexes = [
            # A bucket's feed: WHERE tenant_id, bucket_id AND (xid, id) > cursor ORDER BY xid, id.
            models.Index(fields=["tenant", "bucket", "xid", "id"], name="idx_events_bucket_feed"),
            # A tenant's feed (webhook dispatch): WHERE tenant_id AND (xid, id) > cursor ORDER BY xid, id.
            models.Index(fields=["tenant", "xid", "id"], name="idx_events_tenant_feed"),
            # An erasure scrubs a memory's events; the expiry scan asks whether one was recorded.
            models.Index(fields=["memory_id"], name="idx_events_memory"),
            # An erasure scrubs the events of the agent's blocks (WHERE block_id = ANY(...)).
            models.Index(fields=["block_id"], name="idx_events_block", condition=Q(block_id__isnull=False)),
            # The retention trim: WHERE at < now() - window.
            models.Index(fields=["at"], name="idx_events_at"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.memory_id or self.block_id} at {self.at}"


class MemoryEventTrim(models.Model):
    """How far the retention trim has deleted a bucket's feed: the largest (``xid``, ``id``) it
    removed. A reader whose cursor is behind it has missed events (410 ``cursor_expired``)."""

    bucket = models.OneToOneField(
        Bucket, primary_key=True, on_delete=models.DO_NOTHING, db_constraint=False, related_name="+"
    )
    xid = models.BigIntegerField()
    event_id = models.BigIntegerField()

    objects = scoped_manager(tenant="bucket__tenant_id")

    class Meta:
        db_table = "memory_event_trims"

    def __str__(self) -> str:
        return f"{self.bucket_id} trimmed through {self.xid}.{self.event_id}"


# --- memory blocks (docs/API.md, "Memory blocks") ------------------------------------------------------

# A block's label: lower-case letters, digits, "_" and "-", starting with a letter or digit, at
# most 64 characters: it is a path segment (/buckets/{id}/blocks/{label}), so nothing to escape.
BLOCK_LABEL_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,63}$"
BLOCK_LABEL_MAX = 64
# Seed 001's memory_blocks default; a block's limit may be set from 1 to BLOCK_MAX_TOKENS_LIMIT.
BLOCK_MAX_TOKENS_DEFAULT = 2048
BLOCK_MAX_TOKENS_LIMIT = 32_768
# A block's text, in characters (its limit is in tokens: 32,768 tokens are rarely over 200,000).
BLOCK_MAX_CHARS = 200_000


class MemoryBlockQuerySet(BucketScopedQuerySet):
    def owned_by(self, agent_id: str | None) -> MemoryBlockQuerySet:
        """The bucket's shared blocks (``agent_id`` None) or one agent's."""
        return self.filter(agent_id__isnull=True) if agent_id is None else self.filter(agent_id=agent_id)


class MemoryBlock(models.Model):
    """A named block of text an agent keeps in every prompt (seed 001's ``memory_blocks``: the
    persona, the human, any label), per bucket and optionally per agent, held to ``max_tokens``
    (counted by the tokenizer the search budget counts with).

    ``version`` starts at 1 and grows by one with each change; a write names the version it was
    based on and is refused if the row has moved on (memories/services/blocks.py compares and
    sets it in one UPDATE). Every version is kept in ``block_edit_log``. Tenant and bucket
    cascade in the database (migration 0017).
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    # None: the bucket's shared block; else the agent's own (the same agent ids as memories').
    agent_id = models.TextField(null=True, blank=True)
    label = models.CharField(max_length=BLOCK_LABEL_MAX)
    content = models.TextField(blank=True, default="")
    token_count = models.PositiveIntegerField(default=0)
    max_tokens = models.PositiveIntegerField(default=BLOCK_MAX_TOKENS_DEFAULT)
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(db_default=TransactionNow())
    updated_at = models.DateTimeField(db_default=TransactionNow())

    objects = MemoryBlockQuerySet.as_manager()

    class Meta:
        db_table = "memory_blocks"
        constraints = [
            # One block per label and owner (shared or an agent): the lookup of a block by its
            # path, the bucket's list (WHERE tenant_id, bucket_id ORDER BY agent_id, label) and
            # the race of two creates (the second insert fails here: 412).
            models.UniqueConstraint(
                fields=["tenant", "bucket", "agent_id", "label"], nulls_distinct=False, name="memory_blocks_owner_label"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.label} ({self.agent_id or 'shared'}) v{self.version}"

    @property
    def etag(self) -> str:
        """The HTTP entity tag of this version. The block's id is in it, so a block deleted and
        made again (whose versions start over) never matches a tag of the one before."""
        return f'"{self.pk}.{self.version}"'

    @classmethod
    def agent_scope(cls, agents) -> Q:
        """The blocks an agent-limited token reads: its agents' (and the shared ones if allowed)."""
        return agents.q("agent_id")


class BlockChange(models.TextChoices):
    CREATED = "created", "created"
    EDITED = "edited", "edited"


class BlockEdit(models.Model):
    """One version of a block (seed 001's ``block_edit_log``): its text and limit after the change,
    who made it, when and why. Written in the change's transaction; goes with its block (ON
    DELETE CASCADE, migration 0017)."""

    id = models.BigAutoField(primary_key=True)
    block = models.ForeignKey(
        MemoryBlock, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    version = models.PositiveIntegerField()
    change = models.CharField(max_length=20, choices=BlockChange.choices)
    content = models.TextField(blank=True, default="")
    token_count = models.PositiveIntegerField()
    max_tokens = models.PositiveIntegerField()
    reason = models.TextField(blank=True, default="")
    actor_kind = models.CharField(max_length=20)
    actor_id = models.CharField(max_length=64, blank=True, default="")
    actor_label = models.CharField(max_length=200, blank=True, default="")
    edited_at = models.DateTimeField(db_default=TransactionNow())

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "block_edit_log"
        constraints = [
            # A block's history newest first (WHERE block_id ORDER BY version DESC); one row per version.
            models.UniqueConstraint(fields=["block", "version"], name="block_edit_log_block_version"),
        ]

    def __str__(self) -> str:
        return f"{self.block_id} v{self.version}"

    @classmethod
    def agent_scope(cls, agents) -> Q:
        return agents.q("block__agent_id")


class LearnedRanking(models.Model):
    """What the ranking learned from one bucket's feedback (issue 48): the fusion weights and the
    few knobs :mod:`memories.services.ranking_learning` tunes, and what it measured. One row per
    bucket, replaced by each learning run that sees new ratings, emptied by a reset (the console,
    the API's ``DELETE …/learned-ranking``, ``manage.py learn_ranking --reset``: ``reset_at``),
    deleted by a bucket merge (the source's), an erasure that takes ratings from the bucket, and
    with the bucket or tenant (ON DELETE CASCADE, migration 0019).

    ``settings`` holds ranking overrides (:func:`memories.ranking.merge`'s shape) and is read by
    the search only when ``adopted``: the learned settings beat the defaults on the bucket's
    held-back ratings. A run that found nothing better keeps its measurements with
    ``adopted`` false and empty ``settings``, so the console says why nothing is used.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    bucket = models.ForeignKey(
        Bucket, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+"
    )
    adopted = models.BooleanField(default=False)
    settings = models.JSONField(default=dict, blank=True)
    # The ratings read, and the rated questions trained on and held back (distinct queries).
    ratings = models.PositiveIntegerField(default=0)
    train_queries = models.PositiveIntegerField(default=0)
    held_queries = models.PositiveIntegerField(default=0)
    # Scores (0..1, higher: useful memories above irrelevant ones) of the defaults ("before") and
    # of the best settings found ("after"), on the training and the held-back questions.
    train_before = models.FloatField(default=0.0)
    train_after = models.FloatField(default=0.0)
    held_before = models.FloatField(default=0.0)
    held_after = models.FloatField(default=0.0)
    candidates = models.PositiveIntegerField(default=0)  # settings tried
    searches = models.PositiveIntegerField(default=0)  # searches run to measure them
    # The newest rating read: a run skips a bucket whose ratings have not changed since.
    newest_rating_id = models.BigIntegerField(default=0)
    learned_at = models.DateTimeField(db_default=TransactionNow())
    # Set by a reset: the row then holds no measurements, only the bucket's rating count and newest
    # rating at the reset, so the nightly run leaves the bucket on the defaults until they change.
    reset_at = models.DateTimeField(null=True, blank=True)

    objects = BucketScopedQuerySet.as_manager()

    class Meta:
        db_table = "learned_rankings"
        constraints = [
            # One row per bucket: the search's lookup (WHERE tenant_id AND bucket_id) and the
            # learning run's upsert.
            models.UniqueConstraint(fields=["tenant", "bucket"], name="learned_rankings_bucket"),
        ]

    def __str__(self) -> str:
        return f"{'learned' if self.adopted else 'defaults kept'} for {self.bucket_id}"
