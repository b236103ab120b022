"""The synchronous client is generated from the asynchronous one (clients/python/unasync_build.py):
the committed file is current, and the check ``./engram lint`` runs catches a stale one."""

from __future__ import annotations

import importlib.util
import io
import tokenize

import pytest

from tests.support import ROOT

BUILD = ROOT / "clients" / "python" / "unasync_build.py"


@pytest.fixture(scope="module")
def build():
    spec = importlib.util.spec_from_file_location("unasync_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_committed_sync_client_is_what_the_async_one_generates(build):
    assert build.check() is None


@pytest.mark.slow
def test_a_hand_edit_of_the_sync_client_fails_the_check(build, tmp_path):
    edited = tmp_path / "_sync.py"
    edited.write_text(build.SYNC.read_text().replace("def get_memory(", "def fetch_memory("))
    problem = build.check(edited)
    assert problem is not None
    assert "is stale" in problem and "Edit _async.py" in problem
    # The diff shows the line that differs, as the generator would write it.
    assert "-    def fetch_memory(" in problem and "+    def get_memory(" in problem


@pytest.mark.slow
def test_a_missing_sync_client_fails_the_check(build, tmp_path):
    assert "is stale" in build.check(tmp_path / "_sync.py")


def test_the_generated_client_keeps_nothing_async(build):
    # A name unasync does not know would come out as Async… or, renamed by its default rule,
    # as Sync…: either means NAMES in unasync_build.py lacks an entry.
    names = {
        token.string
        for token in tokenize.generate_tokens(io.StringIO(build.SYNC.read_text()).readline)
        if token.type == tokenize.NAME
    }
    leftovers = {
        name
        for name in names
        if name in {"async", "await", "anyio"} or name.startswith(("Async", "Sync")) or name in build.NAMES
    }
    assert not leftovers
    assert "class Engram:" in build.SYNC.read_text()
