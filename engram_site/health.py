"""Liveness (/health) and readiness (/ready) probes; no authentication."""

from __future__ import annotations

from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import JsonResponse
from django.views.decorators.http import require_GET

_migrations_checked = False


def _pending_migrations() -> list[str]:
    executor = MigrationExecutor(connection)
    plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    return [f"{migration.app_label}.{migration.name}" for migration, _ in plan]


@require_GET
def health(request):
    return JsonResponse({"status": "ok"})


@require_GET
def ready(request):
    global _migrations_checked
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError as exc:
        checks["database"] = f"unreachable: {exc.__class__.__name__}"
        # Drop the broken connection so the next probe reconnects.
        connection.close_if_unusable_or_obsolete()
        connection.close()
        return JsonResponse({"status": "unavailable", "checks": checks}, status=503)
    if not _migrations_checked:
        pending = _pending_migrations()
        if pending:
            checks["migrations"] = f"pending: {', '.join(pending)}"
            return JsonResponse({"status": "unavailable", "checks": checks}, status=503)
        # Migrations never un-apply themselves under a running process: check once.
        _migrations_checked = True
    checks["migrations"] = "ok"
    return JsonResponse({"status": "ready", "checks": checks})
