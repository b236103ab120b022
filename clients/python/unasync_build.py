"""Writes ``engram_client/_sync.py`` from ``engram_client/_async.py``, the one the client is
written in, as httpcore does: ``python clients/python/unasync_build.py``.

``--check`` writes nothing and fails when ``_sync.py`` is not what ``_async.py`` generates
(``./engram lint`` runs it), so the two clients cannot drift apart again.

Three steps:

1. unasync's token pass: ``async``/``await`` dropped, ``AsyncIterator`` → ``Iterator`` and
   the like, plus the names in ``NAMES`` (the async half of each pair in ``_core`` and httpx);
2. ``PROSE``: the docstrings that say "async" in words, which a token pass does not read;
3. ruff (the project's settings): imports sorted and code formatted, since shorter lines
   without ``await`` may fold differently.
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

import unasync

HERE = Path(__file__).resolve().parent
ASYNC = HERE / "engram_client" / "_async.py"
SYNC = HERE / "engram_client" / "_sync.py"

# Names the async client uses and their sync counterparts (unasync already knows async
# iterators, context managers and ``__aenter__``; left alone it would call AsyncEngram
# "SyncEngram").
NAMES = {
    "AsyncEngram": "Engram",
    "AsyncClient": "Client",  # httpx
    "AsyncBaseTransport": "BaseTransport",  # httpx
    "aclose": "close",
    "aread": "read",
    "aiter_lines": "iter_lines",
    "asleep": "sleep",  # _core
    "afile_chunks": "file_chunks",  # _core
    "andjson_lines": "ndjson_lines",  # _core
    "AsyncJsonLines": "JsonLines",  # _core
}

# Docstring text that differs between the two (each must be found, so that an edit of
# _async.py's prose cannot leave the sync docstring silently async).
PROSE = [
    (
        '"""The asynchronous client, :class:`AsyncEngram`: the same methods as :class:`~engram_client.Engram`,\n'
        'awaited; the list and export methods return async iterators."""',
        '"""The synchronous client, :class:`Engram`."""',
    ),
    ("An asynchronous client of Engram's HTTP API", "A client of Engram's HTTP API"),
    ("httpx.AsyncClient", "httpx.Client"),
    ("an async context manager, or await :meth:`aclose`.", "a context manager, or call :meth:`close`."),
]

HEADER = (
    "# Generated from _async.py by clients/python/unasync_build.py: do not edit. Change _async.py and\n"
    "# run `python clients/python/unasync_build.py` (`./engram lint` fails while this file is stale).\n"
)


def generate() -> str:
    """The text ``_sync.py`` should have."""
    with tempfile.TemporaryDirectory() as scratch:
        # unasync writes files only, to the path with fromdir replaced by todir.
        source = Path(scratch) / "engram_client" / "_async.py"
        source.parent.mkdir()
        source.write_bytes(ASYNC.read_bytes())
        rule = unasync.Rule("engram_client/_async.py", "engram_client/_sync.py", additional_replacements=NAMES)
        unasync.unasync_files([str(source)], [rule])
        text = (source.parent / "_sync.py").read_text(encoding="utf-8")
    for before, after in PROSE:
        if before not in text:
            raise SystemExit(f"unasync_build.py: PROSE no longer matches _async.py: {before!r}")
        text = text.replace(before, after)
    text = _ruff(text, "check", "--select", "I", "--fix", "--quiet")
    text = _ruff(text, "format", "--quiet")
    return HEADER + text


def _ruff(text: str, *args: str) -> str:
    # --stdin-filename: ruff reads the project's settings for that path, as `ruff format .` does.
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", str(SYNC), "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=HERE,
    )
    if done.returncode != 0:
        raise SystemExit(f"unasync_build.py: ruff {args[0]} failed on the generated code:\n{done.stderr}{done.stdout}")
    return done.stdout


def check(target: Path = SYNC) -> str | None:
    """``None`` when ``target`` is what ``_async.py`` generates, else what is wrong with it."""
    wanted = generate()
    actual = target.read_text(encoding="utf-8") if target.exists() else ""
    if actual == wanted:
        return None
    diff = difflib.unified_diff(
        actual.splitlines(keepends=True), wanted.splitlines(keepends=True), str(target), "generated from _async.py"
    )
    return (
        f"{target} is stale: it is generated from _async.py. Edit _async.py, not the generated file, "
        "and run `python clients/python/unasync_build.py`.\n" + "".join(list(diff)[:80])
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; fail if _sync.py is stale")
    args = parser.parse_args(argv)
    if args.check:
        problem = check()
        if problem:
            print(problem, file=sys.stderr)
            return 1
        return 0
    SYNC.write_text(generate(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
