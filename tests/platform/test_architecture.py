"""The shape of the code (docs/ARCHITECTURE.md): one write gateway for memories, no imports
hidden in functions. The layer and cycle contracts are import-linter's (`./engram lint`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = (
    "engram_site",
    "audit",
    "tenants",
    "memories",
    "maintenance",
    "webhooks",
    "graph",
    "sources",
    "console",
    "mcp_server",
)
GATEWAY = ROOT / "memories" / "services"
# A statement that writes the memories table, in SQL text.
SQL_WRITE = re.compile(r"\b(INSERT\s+INTO|UPDATE|DELETE\s+FROM|MERGE\s+INTO|TRUNCATE(\s+TABLE)?)\s+memories\b", re.I)
# Queryset and instance methods that write rows.
ORM_WRITES = {"update", "delete", "bulk_update", "bulk_create", "create", "get_or_create", "update_or_create", "save"}


def _project_files():
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" not in path.parts:
                yield path


def _root_name(node: ast.AST) -> str | None:
    """The name an attribute/call chain starts from: ``Memory`` in ``Memory.objects.filter(...).update()``."""
    while True:
        if isinstance(node, ast.Attribute):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript):
            node = node.value
        else:
            return node.id if isinstance(node, ast.Name) else None


def memory_writes(source: str) -> list[tuple[int, str]]:
    """Places in ``source`` that write the memories table: SQL text, or an ORM write on a chain
    starting from the ``Memory`` model or a variable named like a memory."""
    found = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (sql := SQL_WRITE.search(node.value)):
            found.append((node.lineno, "SQL: " + sql.group(0)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ORM_WRITES:
            root = _root_name(node.func.value)
            # Generic names (rows, items) only count when the chain starts from the model.
            if root == "Memory" or (root and re.fullmatch(r"_?(memory|memories|survivors?|absorbed)", root)):
                found.append((node.lineno, f"ORM: {root}….{node.func.attr}()"))
    return found


def test_the_detector_finds_sql_and_orm_writes():
    # The check below is only as good as this: every form of write must be seen.
    samples = [
        'cur.execute("UPDATE memories SET x = 1")',
        'cur.execute("""\n  DELETE FROM memories WHERE id = %s""")',
        'cur.execute(f"INSERT INTO memories ({cols}) VALUES (1)")',
        "Memory.objects.filter(pk=1).update(content='x')",
        "Memory.objects.for_bucket(b).delete()",
        "Memory.objects.bulk_update(rows, ['metadata'])",
        "memory.save(update_fields=['content'])",
    ]
    for sample in samples:
        assert memory_writes(sample), sample
    for harmless in ['cur.execute("SELECT * FROM memories")', "Edge.objects.filter(x=1).delete()", "d.update(x)"]:
        assert not memory_writes(harmless), harmless


def test_memory_rows_are_written_only_in_the_gateway():
    outside = []
    for path in _project_files():
        if GATEWAY in path.parents:
            continue
        for line, what in memory_writes(path.read_text()):
            outside.append(f"{path.relative_to(ROOT)}:{line}: {what}")
    assert outside == [], "writes to memories outside memories/services/:\n" + "\n".join(outside)


def test_the_gateway_does_write_memories():
    # Guards the test above against a gateway that moved (it would then check nothing).
    writes = [w for path in GATEWAY.rglob("*.py") for w in memory_writes(path.read_text())]
    assert len(writes) >= 10


# Imports inside a function: allowed only where the module cannot be imported at the top.
FUNCTION_IMPORTS_ALLOWED = {
    # AppConfig.ready: app modules load only once the app registry is ready (Django's pattern).
    "*/apps.py",
    # Loaded before Django's settings (the Celery app; the WSGI module imports after setup).
    "engram_site/celery.py",
    "engram_site/wsgi.py",
}


def _function_imports(path: Path) -> list[tuple[int, str]]:
    found = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if inside and isinstance(child, ast.Import | ast.ImportFrom):
                names = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                if isinstance(child, ast.ImportFrom) and child.level:
                    names = ["(relative)"]
                found.extend((child.lineno, n) for n in names if n.split(".")[0] in APPS or n == "(relative)")
            visit(child, inside)

    visit(ast.parse(path.read_text()), False)
    return found


def test_no_project_import_is_hidden_inside_a_function():
    hidden = []
    for path in _project_files():
        relative = path.relative_to(ROOT)
        if any(relative.match(pattern) for pattern in FUNCTION_IMPORTS_ALLOWED):
            continue
        hidden += [f"{relative}:{line}: {name}" for line, name in _function_imports(path)]
    assert hidden == [], "imports of project modules inside functions:\n" + "\n".join(hidden)


def test_tasks_queued_by_name_are_registered():
    # memories.hooks and sources.services name their own app's tasks instead of importing them
    # (the task modules import those modules): a renamed task must fail here, not in production.
    from engram_site.celery import app
    from memories import hooks
    from sources import services as source_services

    for name in (hooks.ENRICH_TASK, source_services.PROCESS_TASK):
        assert name in app.tasks, name
