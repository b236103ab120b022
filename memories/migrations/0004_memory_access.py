import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("memories", "0003_supersession"),
    ]

    operations = [
        migrations.CreateModel(
            name="MemoryAccess",
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
                ("accessed_at", models.DateTimeField()),
            ],
            options={
                "db_table": "memory_access",
            },
        ),
        # Deleting a memory (or its bucket or tenant) takes its pending access time with it.
        migrations.RunSQL(
            sql="ALTER TABLE memory_access ADD CONSTRAINT memory_access_memory_id_fk FOREIGN KEY (memory_id) "
            "REFERENCES memories(id) ON DELETE CASCADE",
            reverse_sql="ALTER TABLE memory_access DROP CONSTRAINT memory_access_memory_id_fk",
        ),
    ]
