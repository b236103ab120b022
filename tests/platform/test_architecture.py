"""The shape of the code (docs/ARCHITECTURE.md): one write gateway for memories, no imports
hidden in functions, no task queued by its name, and an import scan of every module: no cycle,
no import of a higher layer or of a peer. import-linter (`./engram lint`) checks the same
layers between apps."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

from tests.support import APPS, ROOT

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
    # gunicorn reads its config before Django's settings; its hooks run once the app is loaded.
    "engram_site/gunicorn_config.py",
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


# --- tasks are queued through their objects, never by name -------------------------------------
# A task queued by its name hides the import it stands for (STYLE.md, Layers): the import scan
# below cannot see the dependency, nor a cycle it closes, and a renamed task fails only in
# production. So app code names a task only where it declares it (``name=`` of the task's
# decorator) and in beat's default schedules (``DefaultSchedule(task=...)``: rows the scheduler
# reads from the database, by name, and queues itself).

# Celery's ways to build or send a task from a name.
BY_NAME = {"signature", "Signature", "subtask", "send_task"}


def _called_name(node: ast.AST) -> str | None:
    func = node.func if isinstance(node, ast.Call) else node
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else None


def _keyword(call: ast.AST, name: str) -> ast.AST | None:
    if isinstance(call, ast.Call):
        return next((k.value for k in call.keywords if k.arg == name), None)
    return None


def task_names(root: Path, apps: tuple[str, ...]) -> set[str]:
    """The names of the tasks declared under ``root``: the ``name=`` of each ``@shared_task`` or
    ``@app.task``, else Celery's default, ``module.function``."""
    names = set()
    for app in apps:
        for path in sorted((root / app).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                for decorator in node.decorator_list:
                    if _called_name(decorator) in ("shared_task", "task"):
                        named = _keyword(decorator, "name")
                        default = f"{_module_name(path, root)}.{node.name}"
                        names.add(named.value if isinstance(named, ast.Constant) else default)
    return names


def tasks_queued_by_name(source: str, names: set[str]) -> list[tuple[int, str]]:
    """Places in ``source`` that reach a task through its name: Celery's ``send_task`` and
    ``signature`` (imported from celery, or called on anything with a string), a lookup in an
    app's task registry (``app.tasks[...]``), and a task's name written anywhere but where the
    task is declared or scheduled."""
    tree = ast.parse(source)
    from_celery = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "celery"
        for alias in node.names
        if alias.name in BY_NAME
    }
    allowed = set()  # the string nodes that declare or schedule a task
    for node in ast.walk(tree):
        if _called_name(node) in ("shared_task", "task"):
            allowed.add(id(_keyword(node, "name")))
        elif _called_name(node) == "DefaultSchedule":
            allowed.add(id(_keyword(node, "task")))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = _called_name(node)
            first = node.args[0] if node.args else None
            named = isinstance(first, ast.Constant) and isinstance(first.value, str)
            if called == "send_task":
                found.append((node.lineno, "send_task(...)"))
            elif isinstance(node.func, ast.Name) and called in from_celery:
                found.append((node.lineno, f"celery's {called}(...)"))
            elif isinstance(node.func, ast.Attribute) and called in BY_NAME and named:
                found.append((node.lineno, f"{called}({first.value!r})"))
            elif called == "get" and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "tasks":
                found.append((node.lineno, "tasks.get(...)"))
        elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "tasks":
            found.append((node.lineno, "tasks[...]"))
        elif isinstance(node, ast.Constant) and node.value in names and id(node) not in allowed:
            found.append((node.lineno, f"the task name {node.value!r}"))
    return sorted(found)


def test_the_task_name_check_finds_a_task_queued_by_name():
    # The check below is only as good as this: every way of reaching a task by name must be seen.
    names = {"memories.enrich_memories"}
    queued_by_name = [
        "from celery import signature\nsignature(ENRICH, args=(ids,), immutable=True)",
        'from celery import Signature as S\nS("memories.enrich_memories")',
        'import celery\ncelery.signature("memories.enrich_memories", args=(ids,))',
        'app.send_task("memories.enrich_memories", args=[ids])',
        "current_app.send_task(ENRICH)",
        'current_app.tasks["memories.enrich_memories"].delay(ids)',
        "app.tasks.get(ENRICH).delay(ids)",
        # The name kept in a constant, whatever later sends it.
        'ENRICH_TASK = "memories.enrich_memories"',
    ]
    for sample in queued_by_name:
        assert tasks_queued_by_name(sample, names), sample
    harmless = [
        '@shared_task(name="memories.enrich_memories", acks_late=True)\ndef enrich(ids):\n    pass',
        '@app.task(name="memories.enrich_memories")\ndef enrich(ids):\n    pass',
        "from memories.tasks import enrich_memories\nenrich_memories.si(ids).apply_async()",
        "enrich_memories.signature((ids,), immutable=True)",
        # A function of the project's that happens to be called signature (webhooks/signing.py).
        "def signature(secret, body, timestamp):\n    pass\nsignature(secret, body, 0)",
        'DefaultSchedule(name="engram: enrich", task="memories.enrich_memories", every_seconds=60)',
        'logger.info("memories.enrich_memories failed for %d rows", n)',
    ]
    for sample in harmless:
        assert not tasks_queued_by_name(sample, names), sample
    assert task_names(ROOT, APPS) >= {"memories.enrich_memories", "sources.process_source", "webhooks.deliver"}


def test_no_task_is_queued_by_name():
    names = task_names(ROOT, APPS)
    # Guards the check against reading no declaration (a renamed decorator, a moved root).
    assert len(names) >= 20
    found = []
    for path in _project_files():
        found += [
            f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in tasks_queued_by_name(path.read_text(), names)
        ]
    assert found == [], "tasks reached by name (import the task and queue .si(...)):\n" + "\n".join(found)


# --- every module's imports: no cycle, nothing from a higher layer -----------------------------
# import-linter (./engram lint) checks the layers between apps and cycles between the siblings
# of a package, for imports at module level. This scan reads every module of every app,
# migrations included, and every import in it wherever it stands (in a function, under
# TYPE_CHECKING), and fails on any cycle between two modules and on any import of an app in a
# higher layer, or of a peer in the same layer, than the importer's app. The layers are read
# from the import-linter contract in pyproject.toml, so the two checks cannot drift apart.


def _layers() -> dict[str, int]:
    """Each app's layer, 0 the lowest (engram_site), from pyproject.toml's layers contract."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    [contract] = [c for c in config["contracts"] if c["type"] == "layers"]
    layers = {}
    for index, layer in enumerate(reversed(contract["layers"])):
        for app in re.split(r"[|:]", layer):
            layers[app.strip()] = index
    return layers


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _packages_of(module: str) -> set[str]:
    """The packages Python loads before ``module``: ``a`` and ``a.b`` for ``a.b.c``."""
    parts = module.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def module_imports(source: str, module: str, *, is_package: bool, known: set[str]) -> set[str]:
    """The project modules ``source`` (the module ``module``) imports, anywhere in it. ``from a
    import b`` names the module ``a.b`` when there is one, else ``a``; relative imports are
    resolved against ``module``. Importing ``a.b.c`` runs ``a/b/__init__.py`` first, so the
    packages a target sits in count as imported too, except those ``module`` sits in itself
    (they were loading before it: a package's ``__init__`` importing its own modules is no cycle)."""
    found = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            # `import a.b.c` with a.b.c unknown (an attribute): the longest known prefix.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.add(target)
                found |= (_packages_of(target) & known) - _packages_of(module) - {module}
    return found


def import_graph(root: Path, apps: tuple[str, ...]) -> dict[str, set[str]]:
    paths = {_module_name(p, root): p for app in apps for p in sorted((root / app).rglob("*.py"))}
    known = set(paths)
    return {
        name: module_imports(path.read_text(), name, is_package=path.name == "__init__.py", known=known)
        for name, path in paths.items()
    }


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Imports of an app in a higher layer than the importer's, or of a peer in the same one."""
    found = []
    for module, targets in sorted(graph.items()):
        app = module.split(".")[0]
        for target in sorted(targets):
            other = target.split(".")[0]
            if other != app and layers[other] >= layers[app]:
                kind = "a peer" if layers[other] == layers[app] else "a higher layer"
                found.append(f"{module} imports {target} ({kind})")
    return found


def test_the_import_scan_finds_cycles_and_upward_imports(tmp_path):
    # The scan below is only as good as this: a cycle through a function's import, a cycle
    # of three, a relative import, a cycle through a package's __init__ (loaded before any of
    # its modules), an upward import and a peer's must all be seen.
    files = {
        "low/__init__.py": "",
        "low/a.py": "def f():\n    from low import b\n",
        "low/b.py": "from . import a\n",
        "low/c.py": "import low.d\n",
        "low/d.py": "from low.e import thing\n",
        "low/e.py": "from low import c\n",
        "low/clean.py": "import os\nfrom low import a\n",
        # low.jobs imports a module of low.svc that imports nothing, but low.svc's __init__
        # runs first, and it loads the module that imports low.jobs.
        "low/svc/__init__.py": "from low.svc.ingest import write\n",
        "low/svc/ingest.py": "from low.svc import enrich\nfrom low import jobs\n",
        "low/svc/enrich.py": "",
        "low/jobs.py": "from low.svc.enrich import run\n",
        "high/__init__.py": "",
        "high/x.py": "from low.clean import something\n",
        "high/y.py": "",
        "peer/__init__.py": "",
        "peer/z.py": "from high import y\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = import_graph(tmp_path, ("low", "high", "peer"))
    assert graph["low.clean"] == {"low.a"} and graph["high.x"] == {"low.clean", "low"}
    assert graph["low.jobs"] == {"low.svc.enrich", "low.svc"} and graph["low.svc.ingest"] == {
        "low.svc.enrich",
        "low.jobs",
    }
    assert import_cycles(graph) == [
        ["low.a", "low.b"],
        ["low.c", "low.d", "low.e"],
        ["low.jobs", "low.svc", "low.svc.ingest"],
    ]
    layers = {"low": 0, "high": 1, "peer": 1}
    graph["low.clean"].add("high.y")
    assert upward_imports(graph, layers) == [
        "low.clean imports high.y (a higher layer)",
        "peer.z imports high (a peer)",
        "peer.z imports high.y (a peer)",
    ]


def test_no_module_is_in_an_import_cycle():
    graph = import_graph(ROOT, APPS)
    # Guards the scan against reading nothing (a moved root, a renamed app).
    assert len(graph) > 250 and "engram_site.jobs.runner" in graph["graph.tasks"]
    cycles = import_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_module_imports_a_higher_layer_or_a_peer():
    layers = _layers()
    assert set(layers) == set(APPS), "every app has a layer in pyproject.toml's contract"
    upward = upward_imports(import_graph(ROOT, APPS), layers)
    assert upward == [], "imports against the layers:\n" + "\n".join(upward)
