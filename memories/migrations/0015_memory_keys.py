"""Key documents (memories.models.MemoryKey): a side table with its own GIN and HNSW indexes."""

import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.deletion
import django.db.models.functions.comparison
import pgvector.django.halfvec
import pgvector.django.indexes
import pgvector.django.vector
from django.db import migrations, models

import engram_site.db


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0014_events"),
        ("tenants", "0007_bucket_embedding_model"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryKey",
            fields=[
                (
                    "memory",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        primary_key=True,
                        related_name="+",
                        serialize=False,
                        to="memories.memory",
                    ),
                ),
                ("text", models.TextField()),
                ("lemmatized", models.TextField()),
                (
                    "tsv",
                    models.GeneratedField(
                        db_persist=True,
                        expression=models.Func(models.Value("simple"), "lemmatized", function="to_tsvector"),
                        output_field=django.contrib.postgres.search.SearchVectorField(),
                    ),
                ),
                ("embedding", pgvector.django.vector.VectorField(blank=True, dimensions=384, null=True)),
                ("embedding_model", models.CharField(max_length=64)),
                ("text_hash", models.CharField(blank=True, max_length=32, null=True)),
                ("version", models.IntegerField()),
                ("stale", models.BooleanField(default=False)),
                ("built_at", models.DateTimeField(db_default=engram_site.db.TransactionNow())),
                (
                    "bucket",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.bucket",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "db_table": "memory_keys",
                "indexes": [
                    models.Index(fields=["tenant", "bucket"], name="idx_memory_keys_bucket"),
                    django.contrib.postgres.indexes.GinIndex(
                        fields=["tsv"], gin_pending_list_limit=256, name="idx_memory_keys_tsv"
                    ),
                    pgvector.django.indexes.HnswIndex(
                        django.contrib.postgres.indexes.OpClass(
                            django.db.models.functions.comparison.Cast(
                                "embedding", pgvector.django.halfvec.HalfVectorField(dimensions=384)
                            ),
                            name="halfvec_cosine_ops",
                        ),
                        ef_construction=160,
                        m=12,
                        name="idx_memory_keys_hnsw",
                    ),
                    models.Index(
                        condition=models.Q(("stale", True)), fields=["built_at"], name="idx_memory_keys_stale"
                    ),
                ],
            },
        ),
        # Deleting a memory (or its bucket or tenant) takes its key with it.
        migrations.RunSQL(
            sql="ALTER TABLE memory_keys ADD CONSTRAINT memory_keys_memory_id_fk "
            "FOREIGN KEY (memory_id) REFERENCES memories(id) ON DELETE CASCADE",
            reverse_sql="ALTER TABLE memory_keys DROP CONSTRAINT memory_keys_memory_id_fk",
        ),
    ]
