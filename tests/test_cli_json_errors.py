"""--json on a refusal or an error: a JSON verdict on stdout, the one line on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import invoke, said


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    return store


def test_a_refused_run_says_so_in_json(url: str, tmp_path: Path) -> None:
    result = invoke(url, "run", "--min-age", "0", "--json", "--audit-log", str(tmp_path / "a"))
    assert result.exit_code == 3
    message = (
        "3 of 11 directories (27.3%) would be deleted, over --max-delete-fraction 0.1. It looks"
        " like a backlog, not a broken filter: 0 of 3 candidates sampled hold an object (a sound"
        " filter's hold almost none, a broken filter's many). The plan: 3 directories in 1"
        " deletes (0 partition, 0 row, 1 range, 0 rewrites), about 1ms at --rate 1000. To clear"
        " it on purpose: rerun with --max-delete-fraction 0.3 and the night's window, e.g."
        " --max-run-time 5h (one night at this rate; each night resumes where the last one"
        " stopped)"
    )
    assert said(result) == f"Error: {message}\n"
    report = json.loads(result.stdout)
    generation = report["details"].pop("generation")
    assert report == {
        "ok": False,
        "error": message,
        "error_type": "TooManyCandidates",
        "exit_code": 3,
        "details": {
            "swept_dirs": 11,
            "candidates": 3,
            "verified_nonempty": 0,
            "max_delete_fraction": 0.1,
            "sample": {
                "candidates": 3,
                "sampled": 3,
                "holding_objects": 0,
                "estimated_share_holding_objects": 0.0,
                "looks_like": "backlog",
            },
            "looks_like": "backlog",
            "plan": {
                "directories": 3,
                "deletes": 1,
                "partition_deletes": 0,
                "row_deletes": 0,
                "range_deletes": 1,
                "rewrites": 0,
                "deferred": 0,
            },
            "estimated_delete_seconds": 0.0,
            "rate": 1000.0,
            "suggested_max_delete_fraction": 0.3,
        },
    }
    stored = json.loads(invoke(url, "filters", "list", "--json").stdout)
    assert [g["generation"] for g in stored] == [generation]


def test_an_error_says_so_in_json(tmp_path: Path) -> None:
    result = invoke(f"sqlite:///{tmp_path}/absent.db", "clean", "--json")
    assert result.exit_code == 1
    message = (
        f"no metastore at {tmp_path}/absent.db (create one with 'dircleaner gen' or 'import-keys')"
    )
    assert result.stderr == f"Error: {message}\n"
    assert json.loads(result.stdout) == {
        "ok": False,
        "error": message,
        "error_type": "StoreNotFound",
        "exit_code": 1,
    }


def test_success_says_ok(url: str, tmp_path: Path) -> None:
    result = invoke(url, "build", "--json")
    assert (result.exit_code, json.loads(result.stdout)["ok"]) == (0, True)


@pytest.mark.parametrize(
    ("args", "error", "kind"),
    [
        (
            ("--workers", "1000", "--json"),  # --json after the bad option, too
            "--workers 1000 is more than 4 per core (8 on 2 cores): extra processes only"
            " contend; try --workers 2",
            "UsageError",
        ),
        (
            ("--json", "--rate", "abc"),
            "Invalid value for '--rate': 'abc' is not a valid float range.",
            "BadParameter",
        ),
    ],
)
def test_a_bad_option_says_so_in_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], error: str, kind: str
) -> None:
    monkeypatch.setattr("dircleaner.cli.options.usable_cores", lambda: 2)
    result = invoke(f"sqlite:///{tmp_path}/meta.db", "run", *args)
    assert result.exit_code == 2
    assert json.loads(result.stdout) == {
        "ok": False,
        "error": error,
        "error_type": kind,
        "exit_code": 2,
    }
