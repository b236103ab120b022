"""Job runs belong to the platform now (engram_site 0001): the model leaves maintenance's state.

State only: the table ``maintenance_job_runs`` and its rows stay, owned by engram_site.JobRun.
"""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("maintenance", "0008_events_schedules"),
        ("engram_site", "0001_job_runs"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="JobRun")], database_operations=[]
        ),
    ]
