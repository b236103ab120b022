import django.db.models.expressions
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    # Built CONCURRENTLY (outside a transaction): the graph keeps taking reads and writes.
    atomic = False

    dependencies = [
        ("graph", "0005_corrections"),
    ]

    operations = [
        # A lone surname read as the bucket's one person of that surname (extraction's resolver):
        # WHERE tenant_id = ? AND bucket_id = ? AND type = 'PERSON'
        # AND split_part(normalized_name, ' ', -1) = ANY(?).
        AddIndexConcurrently(
            model_name="entity",
            index=models.Index(
                models.F("tenant"),
                models.F("bucket"),
                django.db.models.expressions.Func(
                    models.F("normalized_name"), models.Value(" "), models.Value(-1), function="split_part"
                ),
                condition=models.Q(("type", "PERSON")),
                name="graph_entities_last_word",
            ),
        ),
        # A relative or pet without a name ("User has mom"): the memories that spoke of one
        # (re-read once it is named) and graph retrieval's "where does my mom live?".
        AddIndexConcurrently(
            model_name="edge",
            index=models.Index(
                condition=models.Q(("predicate", "has")),
                fields=["tenant", "bucket", "subject", "object_literal"],
                name="graph_edges_unnamed",
            ),
        ),
    ]
