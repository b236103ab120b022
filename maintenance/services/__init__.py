"""The maintenance jobs, one module per job. Each public function is the body of one Celery task and
one management command (see ``maintenance/tasks.py`` and ``management/commands``).

All of them are idempotent and safe to run again after a crash: they only fill
what is missing (NULL columns, pairs not yet stored, links not yet recorded),
commit in batches, and keep their place in the database itself (the NULLs, or a
:class:`~maintenance.models.ScanCursor`). Runs are recorded by
``engram_site.jobs.runner.run_job``; the ``recorder`` argument receives totals, progress
and counts.
"""
