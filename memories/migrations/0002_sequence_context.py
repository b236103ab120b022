import django.contrib.postgres.indexes
import django.contrib.postgres.search
import django.db.models.functions.comparison
import django.db.models.functions.text
import pgvector.django.indexes
import pgvector.django.vector
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Index builds run CONCURRENTLY (outside a transaction) so an existing
    # memories table keeps taking reads and writes while they build.
    atomic = False

    dependencies = [
        ("memories", "0001_initial"),
        ("tenants", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="memory",
            name="context_text",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="context_lemmatized",
            field=models.TextField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="context_embedding",
            field=pgvector.django.vector.VectorField(blank=True, dimensions=384, null=True),
        ),
        migrations.AddField(
            model_name="memory",
            name="context_tsv",
            field=models.GeneratedField(
                db_persist=True,
                expression=models.Case(
                    models.When(context_lemmatized__isnull=True, then=models.Value(None)),
                    default=models.Func(
                        models.Value("simple"),
                        django.db.models.functions.text.Concat(
                            django.db.models.functions.comparison.Coalesce(
                                "text_lemmatized", models.Value(""), output_field=models.TextField()
                            ),
                            models.Value(" ", output_field=models.TextField()),
                            "context_lemmatized",
                            output_field=models.TextField(),
                        ),
                        function="to_tsvector",
                        output_field=django.contrib.postgres.search.SearchVectorField(),
                    ),
                    output_field=django.contrib.postgres.search.SearchVectorField(),
                ),
                output_field=django.contrib.postgres.search.SearchVectorField(),
            ),
        ),
        AddIndexConcurrently(
            model_name="memory",
            index=django.contrib.postgres.indexes.GinIndex(
                condition=models.Q(("context_lemmatized__isnull", False)),
                fields=["context_tsv"],
                name="idx_memories_context_tsv",
            ),
        ),
        AddIndexConcurrently(
            model_name="memory",
            index=pgvector.django.indexes.HnswIndex(
                ef_construction=128,
                fields=["context_embedding"],
                m=16,
                name="idx_memories_context_hnsw",
                opclasses=["vector_cosine_ops"],
            ),
        ),
        AddIndexConcurrently(
            model_name="memory",
            index=models.Index(
                condition=models.Q(
                    ("embedding__isnull", True),
                    ("text_lemmatized__isnull", True),
                    models.Q(("context_embedding__isnull", True), ("context_text__isnull", False)),
                    models.Q(("context_lemmatized__isnull", True), ("context_text__isnull", False)),
                    _connector="OR",
                ),
                fields=["created_at"],
                name="idx_memories_enrich_pending",
            ),
        ),
    ]
