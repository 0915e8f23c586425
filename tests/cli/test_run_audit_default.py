"""The default audit log lives under $XDG_STATE_HOME (or ~/.local/state), not in the cwd, one
file per store, named after it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import EAGER, audit_entries, invoke, write_lines


@pytest.mark.parametrize("xdg", [True, False])
def test_run_without_audit_log_writes_under_the_state_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xdg: bool
) -> None:
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    if xdg:
        monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
        home = tmp_path / "state" / "dircleaner"
    else:
        monkeypatch.delenv("XDG_STATE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        home = tmp_path / "home" / ".local" / "state" / "dircleaner"
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = write_lines(tmp_path / "k", ["a/b/x", "a/c/y"])
    assert invoke(url, "import-keys", str(keys)).exit_code == 0
    assert invoke(url, "delete-keys", "-", input="a/c/y\n").exit_code == 0
    result = invoke(url, "run", *EAGER)
    assert result.exit_code == 0, result.output
    (expected,) = home.iterdir()
    assert expected.name.startswith("audit-sqlite_objects_folders_")
    assert expected.name.endswith("_meta.db-" + expected.name[-19:-9] + ".jsonl.gz")
    assert expected.read_bytes().startswith(b"\x1f\x8b")  # gzip
    assert f"        audit log: {expected}\n" in result.output
    assert list(work.iterdir()) == []
    entries = audit_entries(expected)
    assert [(e["parent"], e["name"]) for e in entries] == [("a/", "c")]


def test_help_documents_the_default() -> None:
    result = invoke("sqlite:///x.db", "run", "--help")
    said = " ".join(result.output.split())
    assert "audit-<store>.jsonl.gz in $XDG_STATE_HOME/dircleaner/" in said
    assert "(JSON lines, written compressed when FILE ends in .gz)" in said
