"""'Deleted' counts what was issued at T, and the embedded store says what was removed."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import invoke


def test_a_row_written_after_t_is_reported_kept_not_deleted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/n.db"
    assert invoke(url, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(url, "delete-keys", "-", input="a/c/y\n").exit_code == 0
    args = ["run", "--max-delete-fraction", "1", "--audit-log", str(tmp_path / "a.jsonl")]
    metrics = tmp_path / "m.prom"
    result = invoke(url, *args, "--metrics-file", str(metrics))
    assert result.exit_code == 0, result.output
    assert (
        "        0 rows removed; 1 kept: written after the delete timestamp (build start -"
        " --min-age 10m), so they survive, as they must\n"
    ) in result.output
    assert "clean   deletes issued for 1 directories in " in result.output
    assert "dircleaner_rows_removed 0\n" in metrics.read_text()
    assert "dircleaner_kept_written_after_delete_timestamp 1\n" in metrics.read_text()
    assert "default\ta/c/" in invoke(url, "list-dirs").output
    summary = json.loads(invoke(url, *args, "--json", "--min-age", "0").stdout)["clean"]
    assert (summary["deleted_dirs"], summary["rows_removed"], summary["kept_written_after_t"]) == (
        1,
        1,
        0,
    )
    assert "default\ta/c/" not in invoke(url, "list-dirs").output


def test_a_prefix_clean_reports_kept_rows_the_same_way(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/n.db"
    assert invoke(url, "import-keys", "-", input="a/b/x\na/c/y\n").exit_code == 0
    assert invoke(url, "delete-keys", "-", input="a/c/y\n").exit_code == 0
    args = ["clean", "--prefix", "a/", "--audit-log", str(tmp_path / "a.jsonl")]
    metrics = tmp_path / "m.prom"
    result = invoke(url, *args, "--metrics-file", str(metrics))
    assert result.exit_code == 0, result.output
    assert (
        "        0 rows removed; 1 kept: written after the delete timestamp (walk start -"
        " --min-age 10m), so they survive, as they must\n"
    ) in result.output
    assert "dircleaner_kept_written_after_delete_timestamp 1\n" in metrics.read_text()
    assert "default\ta/c/" in invoke(url, "list-dirs").output
    summary = json.loads(invoke(url, *args, "--json", "--min-age", "0").stdout)
    assert (summary["deleted_dirs"], summary["rows_removed"], summary["kept_written_after_t"]) == (
        1,
        1,
        0,
    )
