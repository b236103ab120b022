"""``./engram serve``'s command line: --host/--port override the environment, nothing else is taken."""

from __future__ import annotations

import pytest

from engram_site.serve import parse_args


def test_port_and_host_arguments_override_the_environment(monkeypatch):
    monkeypatch.setenv("ENGRAM_HOST", "0.0.0.0")
    monkeypatch.setenv("ENGRAM_PORT", "9000")
    assert (parse_args([]).host, parse_args([]).port) == ("0.0.0.0", 9000)
    args = parse_args(["--host", "127.0.0.2", "--port", "8011"])
    assert (args.host, args.port) == ("127.0.0.2", 8011)


def test_an_unknown_argument_is_refused_not_ignored(capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(["--prot", "8011"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --prot" in capsys.readouterr().err


def test_a_port_that_is_not_a_number_is_refused():
    with pytest.raises(SystemExit):
        parse_args(["--port", "eighty"])
