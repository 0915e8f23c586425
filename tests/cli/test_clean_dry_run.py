"""A dry run shows the plan and the guard's verdict, even when a real run would be refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import invoke

VERDICT = (
    "3 of 11 directories (27.3%) would be deleted, over --max-delete-fraction 0.1. It looks"
    " like a backlog, not a broken filter: 0 of 3 candidates sampled hold an object (a sound"
    " filter's hold almost none, a broken filter's many). The plan: 3 directories in 1 deletes"
    " (0 partition, 0 row, 1 range, 0 rewrites), about 1ms at --rate 1000. To clear it on"
    " purpose: rerun with --max-delete-fraction 0.3 and the night's window, e.g. --max-run-time"
    " 5h (one night at this rate; each night resumes where the last one stopped)"
)


@pytest.fixture()
def url(tmp_path: Path) -> str:
    store = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d/{i}/x\n" for i in range(10))
    assert invoke(store, "import-keys", "-", input=keys).exit_code == 0
    assert invoke(store, "delete-keys", "-", input="d/1/x\nd/2/x\nd/3/x\n").exit_code == 0
    return store


def test_dry_run_prints_the_plan_and_the_verdict(url: str) -> None:
    assert invoke(url, "build").exit_code == 0
    result = invoke(url, "clean", "--dry-run", "--min-age", "0")
    assert result.exit_code == 3
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == [
        "sweep",
        "scan",
        "verify",
        "reads",
        "plan",
        "1",
        "budget",
        "clean",
    ]
    assert lines[4:6] == [
        "plan    3 directories to delete = 0 in 0 dead partitions + 0 by row deletes + 3 in 1"
        " ranges + 0 in 0 rewritten partitions (0 rows copied); 0 more deferred by the budget N",
        "        1 tombstones = 0 partition + 0 row + 1 range (each counts 2 against N)"
        " + 0 of rewritten partitions",
    ]
    assert result.stderr == f"Error: a real run would be refused: {VERDICT}\n"
    before = invoke(url, "list-dirs").output
    assert "default\td/1/\n" in before


@pytest.mark.parametrize("command", ["run", "clean"])
def test_dry_run_json_says_what_a_real_run_would_meet(url: str, command: str) -> None:
    if command == "clean":
        assert invoke(url, "build").exit_code == 0
    result = invoke(url, command, "--dry-run", "--min-age", "0", "--json")
    assert result.exit_code == 3
    summary = json.loads(result.stdout)
    clean = summary["clean"] if command == "run" else summary
    assert (summary["ok"], clean["would_be_refused"]) == (False, VERDICT)
    assert clean["plan"]["directories"] == 3
    # The keys of every other refusal, so that monitoring reads one shape.
    error = f"a real run would be refused: {VERDICT}"
    assert (summary["error"], summary["exit_code"]) == (error, 3)
