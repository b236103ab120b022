import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("sources", "0001_initial"),
        ("memories", "0010_lifecycle"),  # memories_deleted
    ]

    operations = [
        migrations.CreateModel(
            name="TrashedChunkLink",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("memory_id", models.UUIDField()),
                ("created", models.BooleanField()),
                ("position", models.IntegerField(default=0)),
                (
                    "chunk",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="sources.sourcechunk",
                    ),
                ),
                (
                    "source",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="sources.source",
                    ),
                ),
            ],
            options={
                "db_table": "source_chunk_links_trashed",
                "indexes": [models.Index(fields=["memory_id"], name="source_chunk_links_trashed_mem")],
                "constraints": [
                    models.UniqueConstraint(fields=("chunk", "memory_id"), name="source_chunk_links_trashed_unique")
                ],
            },
        ),
        # A trashed link goes with its source, its chunk, or the trashed memory (purged, erased,
        # or restored: the restore puts the link back first).
        migrations.RunSQL(
            sql=[
                "ALTER TABLE source_chunk_links_trashed ADD CONSTRAINT source_chunk_links_trashed_source_id_fk FOREIGN KEY (source_id) REFERENCES sources(id) ON DELETE CASCADE",
                "ALTER TABLE source_chunk_links_trashed ADD CONSTRAINT source_chunk_links_trashed_chunk_id_fk FOREIGN KEY (chunk_id) REFERENCES source_chunks(id) ON DELETE CASCADE",
                "ALTER TABLE source_chunk_links_trashed ADD CONSTRAINT source_chunk_links_trashed_memory_id_fk FOREIGN KEY (memory_id) REFERENCES memories_deleted(id) ON DELETE CASCADE",
            ],
            reverse_sql=[
                "ALTER TABLE source_chunk_links_trashed DROP CONSTRAINT source_chunk_links_trashed_memory_id_fk",
                "ALTER TABLE source_chunk_links_trashed DROP CONSTRAINT source_chunk_links_trashed_chunk_id_fk",
                "ALTER TABLE source_chunk_links_trashed DROP CONSTRAINT source_chunk_links_trashed_source_id_fk",
            ],
        ),
    ]
