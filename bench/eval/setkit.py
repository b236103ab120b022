"""What the build and validate scripts of both hand-written evaluation sets share: the findings
report, the ISO time and word n-gram readers, writing the JSON, and the two command lines
(``build.py [--check] [--out]`` and ``validate.py [path] [--strict]``).

Used by bench/eval/{build,validate}.py (our conversational set) and
bench/eval/long/{build,validate}.py (the long working sessions).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path


class SourceError(ValueError):
    """A hand-written source file that cannot be assembled (the message names file and line)."""


class Report:
    def __init__(self) -> None:
        self.errors: list[str] = []
        self.warnings: list[str] = []

    def error(self, msg: str) -> None:
        self.errors.append(msg)

    def warn(self, msg: str) -> None:
        self.warnings.append(msg)

    def print(self) -> None:
        for msg in self.warnings:
            print(f"warning: {msg}")
        for msg in self.errors:
            print(f"ERROR: {msg}")
        print()
        print(f"{len(self.errors)} error(s), {len(self.warnings)} warning(s)")


def parse_time(value: object) -> datetime | None:
    """A ``...Z`` ISO 8601 time as an aware datetime, or None for anything else."""
    if not isinstance(value, str) or not value.endswith("Z"):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return None


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    words = re.findall(r"[a-z0-9]+", text.lower().replace("'", ""))
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def render(data: dict) -> str:
    return json.dumps(data, ensure_ascii=False, indent=1) + "\n"


def build_main(argv: list[str] | None, *, description: str, build: Callable[[], dict], out: Path, script: str) -> int:
    """Write the set's JSON from its sources, or with --check exit 1 when the file on disk differs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only check that the JSON on disk is up to date")
    parser.add_argument("--out", type=Path, default=out)
    args = parser.parse_args(argv)
    try:
        text = render(build())
    except SourceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text(encoding="utf-8") if args.out.exists() else ""
        if current != text:
            print(f"{args.out} is out of date; run python {script}", file=sys.stderr)
            return 1
        print(f"{args.out} is up to date")
        return 0
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


def validate_main(
    argv: list[str] | None,
    *,
    description: str,
    default: Path,
    validate: Callable[[object, Report], dict],
    print_summary: Callable[[dict, Report], None],
) -> int:
    """Check the set, print its statistics and findings; exit 1 on errors (with --strict, on warnings)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("path", nargs="?", type=Path, default=default)
    parser.add_argument("--strict", action="store_true", help="treat warnings as errors")
    args = parser.parse_args(argv)
    rep = Report()
    try:
        data = json.loads(args.path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        print(f"ERROR: cannot read {args.path}: {exc}")
        return 1
    stats = validate(data, rep)
    print_summary(stats, rep)
    rep.print()
    if rep.errors or (args.strict and rep.warnings):
        return 1
    return 0
