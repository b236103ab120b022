"""bench/RESULTS.md is generated from the reports' headers, and kept current.

The generator (bench/results_table.py) uses the standard library only; these tests run it in
this process, on the repository's reports and on small invented ones.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load_results_table():
    spec = importlib.util.spec_from_file_location("results_table", BENCH / "results_table.py")
    module = importlib.util.module_from_spec(spec)
    # Registered before it runs: its dataclasses look their module up by name. Loaded from its
    # path rather than by putting bench/ on sys.path, where its other scripts' names would shadow.
    sys.modules.setdefault("results_table", module)
    spec.loader.exec_module(module)
    return module


results_table = _load_results_table()


def _report(folder: Path, name: str, **fields: str) -> Path:
    header = {
        "benchmark": "search_latency.py",
        "date": "2026-11-20 10:00 UTC",
        "machine": "2 cores",
        "command": "python bench/search_latency.py --rows 200",
        "headline": "hybrid p50 1 ms",
        **fields,
    }
    path = folder / name
    path.write_text(results_table.format_header(header) + "\n# A report\n", encoding="utf-8")
    return path


def test_results_md_matches_the_reports_in_bench_results(capsys):
    status = results_table.main(["--check"])
    assert status == 0, capsys.readouterr().err


def test_every_report_in_bench_results_has_a_readable_header():
    reports = results_table.latest_reports()
    assert {r.path.name for r in reports} == {p.name for p in (BENCH / "results").glob("*.md")}


def test_check_fails_when_results_md_is_stale(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    _report(results, "search-latency-a.md")
    table = tmp_path / "RESULTS.md"
    assert results_table.main(["--results", str(results), "--table", str(table)]) == 0
    assert results_table.main(["--check", "--results", str(results), "--table", str(table)]) == 0

    _report(results, "ingest-b.md", benchmark="ingest_throughput.py", headline="41 items/s")
    assert results_table.main(["--check", "--results", str(results), "--table", str(table)]) == 1
    assert "out of date" in capsys.readouterr().err


def test_the_table_shows_each_report_with_its_command_and_file(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    _report(results, "search-latency-1m.md", series="1m", headline="hybrid p95 42.0 ms")
    _report(results, "search-latency-100k.md", series="100k", headline="hybrid p95 66.5 ms", commit="3e7484c")
    text = results_table.render(results_table.latest_reports(results), results)
    assert "| `search_latency.py` | 100k | hybrid p95 66.5 ms | 2 cores | 2026-11-20 10:00 UTC |" in text
    assert "[search-latency-1m.md](results/search-latency-1m.md)" in text
    assert "- `search_latency.py` (100k), at 3e7484c: `python bench/search_latency.py --rows 200`" in text
    # Sizes in numeric order, not in the order of their names.
    assert text.index("search-latency-100k.md") < text.index("search-latency-1m.md")


def test_two_reports_of_one_benchmark_and_series_name_the_older_to_archive(tmp_path):
    _report(tmp_path, "old.md", date="2026-11-20")
    _report(tmp_path, "new.md", date="2026-11-21 08:00 UTC")
    with pytest.raises(results_table.HeaderError, match="move the older one, old.md, to"):
        results_table.latest_reports(tmp_path)


def test_the_archive_is_not_read(tmp_path):
    _report(tmp_path, "new.md", date="2026-11-21")
    (tmp_path / "archive").mkdir()
    _report(tmp_path / "archive", "old.md", date="2026-11-20")
    assert [r.path.name for r in results_table.latest_reports(tmp_path)] == ["new.md"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# no header\n", "does not start with"),
        ("<!-- bench-result\nbenchmark: search_latency.py\n", "not closed"),
        ("<!-- bench-result\nbenchmark: search_latency.py\n-->\n", "lacks date, machine, command, headline"),
        ("<!-- bench-result\nflavour: salty\n-->\n", "unexpected header line"),
    ],
)
def test_a_report_without_a_complete_header_is_refused(tmp_path, text, message):
    (tmp_path / "report.md").write_text(text, encoding="utf-8")
    with pytest.raises(results_table.HeaderError, match=message):
        results_table.latest_reports(tmp_path)


def test_a_header_naming_no_benchmark_script_or_a_bad_date_is_refused(tmp_path):
    _report(tmp_path, "a.md", benchmark="search_latncy.py")
    with pytest.raises(results_table.HeaderError, match="unknown benchmark"):
        results_table.latest_reports(tmp_path)
    (tmp_path / "a.md").unlink()
    _report(tmp_path, "b.md", date="26/11/2026")
    with pytest.raises(results_table.HeaderError, match="neither YYYY-MM-DD"):
        results_table.latest_reports(tmp_path)


def test_every_listed_benchmark_is_a_script_in_bench():
    assert [name for name in results_table.BENCHMARKS if not (BENCH / name).is_file()] == []
