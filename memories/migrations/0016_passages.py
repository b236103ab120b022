"""Passages of long memories (memories.models.MemoryPassage): a side table with its own HNSW index,
and the partial index the passage pass finds long memories by (built concurrently: memories is
the big table)."""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.db.models.functions.comparison
import pgvector.django.halfvec
import pgvector.django.indexes
import pgvector.django.vector
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

import engram_site.db


class Migration(migrations.Migration):
    atomic = False  # AddIndexConcurrently

    dependencies = [
        ("memories", "0015_memory_keys"),
        ("tenants", "0007_bucket_embedding_model"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryPassage",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("ordinal", models.IntegerField()),
                ("char_start", models.IntegerField()),
                ("char_end", models.IntegerField()),
                ("embedding", pgvector.django.vector.VectorField(blank=True, dimensions=384, null=True)),
                ("embedding_model", models.CharField(max_length=64)),
                ("text_hash", models.CharField(blank=True, max_length=32, null=True)),
                ("version", models.IntegerField()),
                ("built_at", models.DateTimeField(db_default=engram_site.db.TransactionNow())),
            ],
            options={
                "db_table": "memory_passages",
            },
        ),
        AddIndexConcurrently(
            model_name="memory",
            index=models.Index(
                condition=models.Q(("token_count__gt", 254)), fields=["created_at", "id"], name="idx_memories_long"
            ),
        ),
        migrations.AddField(
            model_name="memorypassage",
            name="bucket",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="tenants.bucket",
            ),
        ),
        migrations.AddField(
            model_name="memorypassage",
            name="memory",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="memories.memory",
            ),
        ),
        migrations.AddField(
            model_name="memorypassage",
            name="tenant",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="+",
                to="tenants.tenant",
            ),
        ),
        migrations.AddIndex(
            model_name="memorypassage",
            index=models.Index(fields=["tenant", "bucket"], name="idx_memory_passages_bucket"),
        ),
        migrations.AddIndex(
            model_name="memorypassage",
            index=pgvector.django.indexes.HnswIndex(
                django.contrib.postgres.indexes.OpClass(
                    django.db.models.functions.comparison.Cast(
                        "embedding", pgvector.django.halfvec.HalfVectorField(dimensions=384)
                    ),
                    name="halfvec_cosine_ops",
                ),
                ef_construction=160,
                m=12,
                name="idx_memory_passages_hnsw",
            ),
        ),
        migrations.AddConstraint(
            model_name="memorypassage",
            constraint=models.UniqueConstraint(fields=("memory", "ordinal"), name="memory_passages_memory_ordinal"),
        ),
        # Deleting a memory (or its bucket or tenant) takes its passages with it.
        migrations.RunSQL(
            sql="ALTER TABLE memory_passages ADD CONSTRAINT memory_passages_memory_id_fk "
            "FOREIGN KEY (memory_id) REFERENCES memories(id) ON DELETE CASCADE",
            reverse_sql="ALTER TABLE memory_passages DROP CONSTRAINT memory_passages_memory_id_fk",
        ),
    ]
