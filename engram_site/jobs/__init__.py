"""Background jobs: the runner that records every run (``runner``), the Celery option presets
tasks are declared with (``presets``) and the shape of a job's management command (``command``).
The job runs' table is the platform's model (``engram_site.models.JobRun``)."""
