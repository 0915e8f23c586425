"""filters list/show/rm: age, completeness, fill and estimated false-positive rate; GC."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dircleaner.filter.bloom import BloomFilter
from dircleaner.filter.stored import find_generation, load_generation
from dircleaner.store import open_store
from tests.helpers import invoke, write_lines


def store_with_keys(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = [f"f/{i % 17}/{i}/obj" for i in range(2000)]
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k.txt", keys))).exit_code == 0
    return url


def test_list_reports_the_fill_and_rate_without_reading_the_body(tmp_path: Path) -> None:
    url = store_with_keys(tmp_path)
    built = json.loads(invoke(url, "build", "--json", "--workers", "2").stdout)
    rows = json.loads(invoke(url, "filters", "list", "--json").stdout)
    assert [r["generation"] for r in rows] == [built["generation"]]
    row = rows[0]
    assert row["complete"] is True and row["shards"] == "2/2"
    with open_store(url) as store:
        info = find_generation(store, built["generation"])
        _, merged = load_generation(store, info, info.header.scope if info.header else "")
    assert isinstance(merged, BloomFilter)
    # Two shards' fills combine as if independent, 1 - (1 - f0)(1 - f1): close to the exact
    # fill, but no bound on it. The shards share ancestors (f/, f/0/ …), which lifts the
    # estimate by 0.003 on average, and the random salt moves the shards' overlap by 0.0015
    # (one sd; 20,000 salts simulated): the estimate fell below the exact fill for 1.7% of
    # salts, which failed "never below". 0.015 is 8 sd away.
    assert row["fill"] == pytest.approx(merged.fill_ratio(), abs=0.015)
    assert abs(row["fpr_estimated"] - row["fill"] ** row["k"]) < 1e-3
    assert row["items"] == built["keys_inserted"]


def test_old_generations_are_garbage_collected(tmp_path: Path) -> None:
    url = store_with_keys(tmp_path)
    for _ in range(5):
        result = invoke(url, "run", "--min-age", "0", "--audit-log", str(tmp_path / "a.jsonl"))
        assert result.exit_code == 0, result.output
    rows = json.loads(invoke(url, "filters", "list", "--json").stdout)
    assert len(rows) == 3
    assert all(r["complete"] for r in rows)


def test_rm_removes_one_generation_and_names_an_unknown_one(tmp_path: Path) -> None:
    url = store_with_keys(tmp_path)
    generation = json.loads(invoke(url, "build", "--json").stdout)["generation"]
    assert invoke(url, "filters", "rm", generation).exit_code == 0
    assert json.loads(invoke(url, "filters", "list", "--json").stdout) == []
    result = invoke(url, "filters", "rm", generation)
    assert result.exit_code == 1
    assert "no filter generation" in result.stderr


def test_the_build_shows_the_fill_and_rate_filters_list_shows(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/meta.db"
    keys = "".join(f"d{i % 13}/s{i}/x\n" for i in range(3000))
    assert invoke(url, "import-keys", "-", input=keys).exit_code == 0
    built = invoke(url, "build", "--workers", "2", "--fpr", "0.01")
    assert built.exit_code == 0, built.output
    shown = re.search(r"fill ([0-9.e-]+), effective false-positive rate ([0-9.e-]+)", built.output)
    assert shown is not None, built.output
    fill, fpr = shown.groups()
    listed = invoke(url, "filters", "list").output
    assert f"  fill {fill}  fpr {fpr} (target 0.01)" in listed
