"""A run a guard refused was not interrupted: the next run starts afresh (a new build, a new
T) instead of "resuming" the refused run's generation and its T."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from dircleaner.filter.generation import parse_generation_id
from dircleaner.job.resume import PHASE_CLEAN, RunState, save_run_state
from dircleaner.pipeline.build import scope_of
from dircleaner.store import open_store
from tests.helpers import invoke, write_lines

KEYS = [f"p{i % 20}/{i}/x" for i in range(600)]
DEAD = KEYS[:200]  # a third of the leaves empty: over the default --max-delete-fraction
LIVE = {d for key in KEYS[200:] for d in (key.split("/")[0] + "/", key.rsplit("/", 1)[0] + "/")}
RUN = ["--min-age", "0", "--fpr", "1e-7"]


def _store(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'meta.db'}"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k", KEYS))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d", DEAD))).exit_code == 0
    return url


def _directories(tmp_path: Path) -> set[str]:
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        rows = conn.execute("SELECT parent, name FROM folders").fetchall()
    conn.close()
    return {f"{parent}{name}/" for parent, name in rows}


def test_the_run_after_a_refused_one_builds_afresh_with_a_new_t(tmp_path: Path) -> None:
    url = _store(tmp_path)
    audit = ["--audit-log", str(tmp_path / "audit.jsonl")]
    refused = invoke(url, "run", *RUN, *audit, "--json")
    assert refused.exit_code == 3, refused.output
    failure = json.loads(refused.stdout)
    assert failure["error_type"] == "TooManyCandidates"
    refused_generation = failure["details"]["generation"]
    refused_t_us, _salt = parse_generation_id(refused_generation)  # its build start; --min-age 0

    again = invoke(url, "run", *RUN, *audit, "--max-delete-fraction", "1", "--json")
    assert again.exit_code == 0, again.output
    assert "resumed" not in again.stderr
    report = json.loads(again.stdout)
    assert report["build"] is not None and report["build"]["resumed"] is None
    assert report["build"]["generation"] != refused_generation
    assert report["clean"]["delete_timestamp_us"] > refused_t_us
    assert _directories(tmp_path) == LIVE


def test_a_run_refused_by_its_own_filter_does_not_resume_it(tmp_path: Path) -> None:
    """An interrupted run's generation whose body is damaged: the run that resumes it is
    refused (corrupt, exit 3), and the one after that builds afresh instead of being refused
    by the same filter night after night."""
    url = _store(tmp_path)
    built = invoke(url, "build", "--fpr", "1e-7", "--json")
    assert built.exit_code == 0, built.output
    generation = json.loads(built.stdout)["generation"]
    with open_store(url) as store:  # as a run interrupted in its clean leaves it
        save_run_state(store, scope_of(store, None), RunState(generation, PHASE_CLEAN))
    with sqlite3.connect(tmp_path / "meta.db") as conn:
        (body,) = conn.execute(
            "SELECT value FROM kv WHERE space LIKE ? AND key = 'c0'", (f"filter|{generation}|%",)
        ).fetchone()
        damaged = bytes([body[0] ^ 0x5A]) + body[1:]
        conn.execute(
            "UPDATE kv SET value = ? WHERE space LIKE ? AND key = 'c0'",
            (damaged, f"filter|{generation}|%"),
        )
    conn.close()
    audit = ["--audit-log", str(tmp_path / "audit.jsonl"), "--max-delete-fraction", "1"]
    refused = invoke(url, "run", *RUN, *audit, "--json")
    assert refused.exit_code == 3, refused.output
    failure = json.loads(refused.stdout)
    assert failure["details"]["generation"] == generation  # it resumed the interrupted run
    assert "body checksum mismatch" in failure["error"]
    again = invoke(url, "run", *RUN, *audit, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["build"]["generation"] != generation
    assert _directories(tmp_path) == LIVE
