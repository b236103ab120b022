"""The tests' own rules (tests/README.md), read from their source: every test
module in a package of tests/, none importing another, one write() helper (tests/factories.py),
no assertion on elapsed wall-clock time and no fixed sleep standing in for a synchronisation
(wait_for, an event or a counter instead). A sleep that is not a synchronisation says why on
the line before, in a ``# sleep-ok:`` comment."""

from __future__ import annotations

import ast

import pytest

from tests.support import ROOT

TESTS = ROOT / "tests"
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "time_ns", "perf_counter_ns"}


def _modules():
    return sorted(p for p in TESTS.rglob("test_*.py") if "scripts" not in p.parts)


def _is_clock_call(node: ast.AST) -> bool:
    """``time.monotonic()`` and the like (``datetime.now()`` is a date, not a stopwatch)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def wall_clock_assertions(source: str) -> list[int]:
    """Lines of asserts that read the clock, or take a difference of clock readings (a duration):
    ``assert time.monotonic() - started < 2``, ``assert elapsed >= 0.5`` after ``elapsed =
    time.monotonic() - started``. Comparing two recorded moments (this call ended after that
    outage began) is an order of events, and allowed."""
    tree = ast.parse(source)
    readings = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(_is_clock_call(n) for n in ast.walk(node.value))
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    durations = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        and any(isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub) for n in ast.walk(node.value))
        and any(_is_clock_call(n) or (isinstance(n, ast.Name) and n.id in readings) for n in ast.walk(node.value))
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        parts = list(ast.walk(node.test))
        reads_clock = any(_is_clock_call(n) for n in parts)
        subtracts_readings = any(
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Sub)
            and any(isinstance(m, ast.Name) and m.id in readings for m in ast.walk(n))
            for n in parts
        )
        uses_duration = any(isinstance(n, ast.Name) and n.id in durations for n in parts)
        if reads_clock or subtracts_readings or uses_duration:
            found.append(node.lineno)
    return found


def fixed_sleeps(source: str) -> list[int]:
    """Lines calling ``time.sleep`` (or a bare ``sleep`` imported from time) without a
    ``# sleep-ok:`` reason on the line or the comment lines just above it."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if not (
            (isinstance(func, ast.Attribute) and func.attr == "sleep" and getattr(func.value, "id", "") == "time")
            or (isinstance(func, ast.Name) and func.id == "sleep")
        ):
            continue
        above, i = [], node.lineno - 2
        while i >= 0 and lines[i].strip().startswith("#"):
            above.append(lines[i])
            i -= 1
        if not any("# sleep-ok:" in line for line in [lines[node.lineno - 1], *above]):
            found.append(node.lineno)
    return found


def imported_test_modules(source: str) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return [
        n for n in names if n.startswith("tests.") and (n.split(".")[-1].startswith("test_") or n == "tests.conftest")
    ]


def private_write_helpers(source: str) -> list[str]:
    """Module-level functions of a test module named like a memory writer (a stand-in for the
    gateway that a test patches in is not one)."""
    return [
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in {"write", "_write", "ingest"}
    ]


def test_every_test_module_is_in_a_package_of_tests():
    assert _modules(), "no test modules found"
    flat = [p.name for p in TESTS.glob("test_*.py")]
    assert flat == [], f"put these in a package of tests/ (by app or layer): {flat}"
    unpackaged = sorted(
        {str(p.parent.relative_to(ROOT)) for p in _modules() if not (p.parent / "__init__.py").exists()}
    )
    assert unpackaged == [], f"packages without __init__.py: {unpackaged}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(TESTS)))
def test_the_tests_keep_their_rules(path):
    source = path.read_text()
    assert wall_clock_assertions(source) == [], "assert on events, counters or recorded waits, not on elapsed time"
    assert fixed_sleeps(source) == [], "wait for the condition (tests.support.wait_for), or say # sleep-ok: why"
    assert imported_test_modules(source) == [], "shared helpers go to tests/factories.py or tests/support/"
    assert private_write_helpers(source) == [], "write memories with tests.factories.write (or write_extracted)"


@pytest.mark.parametrize(
    ("source", "wall_clock", "sleeps"),
    [
        ("started = time.monotonic()\nwork()\nassert time.monotonic() - started < 2\n", [3], []),
        ("t0 = time.perf_counter()\nwork()\nelapsed = time.perf_counter() - t0\nassert elapsed >= 0.5\n", [4], []),
        ("assert time.time() < deadline\n", [1], []),
        ("down = time.monotonic()\nstop()\nassert call_ended > down\n", [], []),
        ("time.sleep(3)  # the load goes on\n", [], [1]),
        ("from time import sleep\nsleep(0.5)\n", [], [2]),
        ("# sleep-ok: jitter between commits\ntime.sleep(0.01)\n", [], []),
        ("stop.wait(0.02)\nclock.sleep(1)\n", [], []),
    ],
)
def test_the_rules_see_what_they_are_for(source, wall_clock, sleeps):
    assert wall_clock_assertions(source) == wall_clock
    assert fixed_sleeps(source) == sleeps
