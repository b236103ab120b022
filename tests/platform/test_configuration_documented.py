"""Every environment variable Engram reads is listed in .env.example and docs/CONFIGURATION.md."""

from __future__ import annotations

import re

from tests.support import APPS, ROOT

READERS = re.compile(
    r"""(?:env_(?:str|bool|int|float|list)\(|os\.environ(?:\.get)?[\[(]|getenv\()\s*["']([A-Z][A-Z0-9_]+)["']"""
)
# Read by the code, but not configuration: set by tools for the processes they start.
NOT_SETTINGS = {
    "DJANGO_SETTINGS_MODULE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM", "PYTEST_XDIST_WORKER",
}  # fmt: skip


def variables_read() -> set[str]:
    found: set[str] = set()
    for app in APPS:
        for path in (ROOT / app).rglob("*.py"):
            if "migrations" not in path.parts:
                found.update(READERS.findall(path.read_text()))
    return found - NOT_SETTINGS


def test_the_scan_finds_the_settings_it_should():
    assert {"DATABASE_URL", "ENGRAM_HOME", "REDIS_URL", "ENGRAM_EMBEDDINGS"} <= variables_read()


def test_every_variable_is_in_env_example_and_the_configuration_doc():
    example = (ROOT / ".env.example").read_text()
    listed = set(re.findall(r"^([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", (ROOT / "docs" / "CONFIGURATION.md").read_text()))
    read = variables_read()
    assert sorted(read - listed) == [], "add these to .env.example"
    assert sorted(read - documented) == [], "document these in docs/CONFIGURATION.md"
