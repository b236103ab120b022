"""bench/RESULTS.md, generated from the reports in bench/results/: each benchmark's latest run.

    ./engram bench results_table.py           # rewrite bench/RESULTS.md
    ./engram bench results_table.py --check   # exit 1 when RESULTS.md is not what the reports give

Every report directly in bench/results/ starts with a header block that this script reads (the
benchmark scripts write it; a report written by hand gets one by hand):

    <!-- bench-result
    benchmark: search_latency.py
    series: 100k
    date: 2026-11-26 00:08 UTC
    machine: AMD EPYC, 2 cores (2 usable), 23.5 GiB, Linux 6.18.44, Python 3.11.7
    commit: 3e7484c
    command: python bench/search_latency.py --rows 100000 ...
    headline: hybrid p50 50.0 / p95 66.5 ms (1 client)
    -->

One ``key: value`` per line, the value being the rest of the line (this is not YAML: quotes and
colons in a command are kept as they are). ``benchmark``, ``date``, ``machine``, ``command`` and
``headline`` are required; ``series`` (a configuration tracked on its own, such as the bucket
size) and ``commit`` are optional. ``date`` is ``YYYY-MM-DD`` or ``YYYY-MM-DD HH:MM UTC``.

Only the latest report of a benchmark and series stays in bench/results/; older ones move to
bench/results/archive/, which this script does not read. Two reports of the same benchmark and
series in bench/results/ are an error, so the table can never quietly show the older one.

Standard library only: the check runs in the test suite (tests/platform/test_bench_results.py).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
TABLE_PATH = BENCH_DIR / "RESULTS.md"

OPEN, CLOSE = "<!-- bench-result", "-->"
REQUIRED = ("benchmark", "date", "machine", "command", "headline")
OPTIONAL = ("series", "commit")

# The scripts that measure something and write a report; a header naming anything else is a typo.
BENCHMARKS = (
    "background_yield.py",
    "burst_search.py",
    "classify_accuracy.py",
    "context_batching.py",
    "contradiction_accuracy.py",
    "cross_bucket_latency.py",
    "embedding_runtime.py",
    "eval_three.py",
    "feedback_eval.py",
    "eval_locomo.py",
    "eval_long.py",
    "eval_retrieval.py",
    "graph_extraction.py",
    "graph_throughput.py",
    "hnsw_params.py",
    "hnsw_recall.py",
    "ingest_throughput.py",
    "keyword_cpu.py",
    "load_test.py",
    "model_probe.py",
    "replica_reads.py",
    "search_compare.py",
    "search_cpu.py",
    "search_latency.py",
    "search_profile.py",
    "stage_cpu.py",
    "steady_ingest.py",
)


class HeaderError(ValueError):
    pass


@dataclass(frozen=True)
class Report:
    path: Path
    benchmark: str
    series: str
    date: str
    machine: str
    commit: str
    command: str
    headline: str

    @property
    def when(self) -> datetime:
        return parse_date(self.date)


def parse_date(value: str) -> datetime:
    for fmt in ("%Y-%m-%d %H:%M UTC", "%Y-%m-%d"):
        try:
            return datetime.strptime(value, fmt)
        except ValueError:
            pass
    raise HeaderError(f"date {value!r} is neither YYYY-MM-DD nor YYYY-MM-DD HH:MM UTC")


def format_header(fields: dict[str, str]) -> str:
    """The header block for a report (what the benchmark scripts put on top of theirs)."""
    unknown = set(fields) - set(REQUIRED) - set(OPTIONAL)
    if unknown:
        raise HeaderError(f"unknown header keys: {', '.join(sorted(unknown))}")
    lines = [OPEN]
    for key in (*REQUIRED[:1], "series", *REQUIRED[1:3], "commit", *REQUIRED[3:]):
        value = " ".join(str(fields.get(key, "")).split())  # one line, whatever the value held
        if "-->" in value:
            raise HeaderError(f"{key} may not contain '-->'")
        if value:
            lines.append(f"{key}: {value}")
    lines.append(CLOSE)
    return "\n".join(lines) + "\n"


def parse_header(path: Path) -> Report:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    if not lines or lines[0].strip() != OPEN:
        raise HeaderError(f"{path.name}: does not start with a '{OPEN}' header block")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == CLOSE:
            break
        key, sep, value = line.partition(":")
        key = key.strip()
        if not sep or key not in REQUIRED + OPTIONAL:
            raise HeaderError(f"{path.name}: unexpected header line {line!r}")
        if key in fields:
            raise HeaderError(f"{path.name}: {key} given twice")
        fields[key] = value.strip()
    else:
        raise HeaderError(f"{path.name}: the header block is not closed with '{CLOSE}'")
    missing = [key for key in REQUIRED if not fields.get(key)]
    if missing:
        raise HeaderError(f"{path.name}: header lacks {', '.join(missing)}")
    if fields["benchmark"] not in BENCHMARKS:
        raise HeaderError(f"{path.name}: unknown benchmark {fields['benchmark']!r} (one of {', '.join(BENCHMARKS)})")
    try:
        parse_date(fields["date"])
    except HeaderError as exc:
        raise HeaderError(f"{path.name}: {exc}") from None
    return Report(path=path, series=fields.get("series", ""), commit=fields.get("commit", ""),
                  **{key: fields[key] for key in REQUIRED})  # fmt: skip


def latest_reports(results_dir: Path = RESULTS_DIR) -> list[Report]:
    """Every report directly in ``results_dir``, checked: one per benchmark and series."""
    reports = [parse_header(path) for path in sorted(results_dir.glob("*.md"))]
    seen: dict[tuple[str, str], Report] = {}
    for report in reports:
        key = (report.benchmark, report.series)
        if key in seen:
            older, newer = sorted((seen[key], report), key=lambda r: (r.when, r.path.name))
            raise HeaderError(
                f"{older.path.name} and {newer.path.name} are both {report.benchmark}"
                f"{' (' + report.series + ')' if report.series else ''}: move the older one, "
                f"{older.path.name}, to {results_dir.name}/archive/"
            )
        seen[key] = report
    return sorted(seen.values(), key=lambda r: (r.benchmark, _series_key(r.series)))


def _series_key(series: str) -> tuple[float, str]:
    """Sizes in their numeric order (10k < 250k < 1m), other names after them."""
    number, unit = series[:-1], series[-1:].lower()
    if unit in ("k", "m") and number.replace(".", "", 1).isdigit():
        return float(number) * (1_000 if unit == "k" else 1_000_000), series
    return float("inf"), series


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render(reports: list[Report], results_dir: Path = RESULTS_DIR) -> str:
    rel = results_dir.name  # RESULTS.md sits beside results/
    lines = [
        "# Benchmark results: the latest run of each",
        "",
        "Generated by `./engram bench results_table.py` from the header of each report in",
        "[results/](results/); do not edit by hand. Older reports are in [results/archive/](results/archive/),",
        "with the lab notebook they were discussed in (archive/NOTEBOOK.md). How to run each",
        "benchmark, and how to read these figures: [README.md](README.md). Figures from different",
        "machines or dates are not comparable with each other; compare only runs made side by side.",
        "",
        "| benchmark | series | headline | machine | date | report |",
        "| :--- | :--- | :--- | :--- | :--- | :--- |",
    ]
    for r in reports:
        name = r.path.name
        lines.append(
            f"| `{r.benchmark}` | {_cell(r.series) or '—'} | {_cell(r.headline)} | {_cell(r.machine)} "
            f"| {r.date} | [{name}]({rel}/{name}) |"
        )
    lines += ["", "## Commands", ""]
    for r in reports:
        series = f" ({r.series})" if r.series else ""
        commit = f", at {r.commit}" if r.commit else ""
        lines.append(f"- `{r.benchmark}`{series}{commit}: `{r.command}`")
    missing = sorted(set(BENCHMARKS) - {r.benchmark for r in reports})
    if missing:
        lines += ["", "No report yet: " + ", ".join(f"`{name}`" for name in missing) + "."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare with RESULTS.md instead of writing it")
    parser.add_argument("--results", type=Path, default=RESULTS_DIR, help=argparse.SUPPRESS)
    parser.add_argument("--table", type=Path, default=TABLE_PATH, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        text = render(latest_reports(args.results), args.results)
    except HeaderError as exc:
        print(f"results_table: {exc}", file=sys.stderr)
        return 1
    current = args.table.read_text(encoding="utf-8") if args.table.exists() else ""
    if args.check:
        if current != text:
            print(f"results_table: {args.table} is out of date; run ./engram bench results_table.py", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.table.write_text(text, encoding="utf-8")
        print(f"wrote {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
