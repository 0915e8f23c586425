"""The synthetic metastore generator: deterministic, its ground truth exact, its layouts present."""

from __future__ import annotations

import sqlite3
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dircleaner import synth
from dircleaner.errors import UsageError
from dircleaner.paths import directories_of, parent_of_dir
from dircleaner.store.base import Store
from dircleaner.store.sqlite import SqliteStore
from dircleaner.synth import SynthResult, SynthSpec, generate, iter_layout_keys
from dircleaner.synth import runner as synth_runner
from dircleaner.synth import writer as synth_writer

TS = 1_700_000_000_000_000


def open_store(path: Path) -> SqliteStore:
    return SqliteStore.open(f"sqlite:///{path}", create=True)


@dataclass
class Dataset:
    """A generated store, read back in full with plain SQL (independent of the generator)."""

    result: SynthResult
    db: Path
    truth: list[str]
    folder_rows: list[tuple[int, str, str, str, int]]
    object_rows: list[tuple[int, str, str, str, int]]

    @property
    def dirs(self) -> set[str]:
        return {parent + name + "/" for _, _, parent, name, _ in self.folder_rows}

    @property
    def keys(self) -> list[str]:
        return [parent + name for _, _, parent, name, _ in self.object_rows]


def make(
    tmp: Path, spec: SynthSpec, *, workers: int | None = 1, store: Store | None = None
) -> Dataset:
    db = tmp / "meta.db"
    truth_path = tmp / "truth.txt"
    own = store is None
    target = open_store(db) if store is None else store
    try:
        result = generate(target, spec, truth_path, workers=workers)
    finally:
        if own:
            target.close()
    return read_back(db, result, truth_path)


def read_back(db: Path, result: SynthResult, truth_path: Path) -> Dataset:
    with sqlite3.connect(db) as conn:
        folders = conn.execute("SELECT * FROM folders ORDER BY token, bucket, parent, name")
        folder_rows = [tuple(r) for r in folders]
        objects = conn.execute("SELECT * FROM objects ORDER BY token, bucket, parent, name")
        object_rows = [tuple(r) for r in objects]
    conn.close()
    truth = truth_path.read_text(encoding="utf-8").split("\n")
    assert truth[-1] == ""
    return Dataset(result, db, truth[:-1], folder_rows, object_rows)


@pytest.fixture(scope="module")
def ds(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    """One 20k-directory dataset shared by the read-only checks."""
    return make(
        tmp_path_factory.mktemp("synth20k"), SynthSpec(dirs=20_000, seed=7, timestamp_us=TS)
    )


def independent_truth(data: Dataset) -> list[str]:
    """Empty = a folder-index directory that no object row keeps (as parent or ancestor)."""
    nonempty = {d for key in data.keys for d in directories_of(key)}
    return sorted(data.dirs - nonempty)


def max_empty_subtree_depth(empty: set[str]) -> int:
    """Levels of the deepest maximal empty subtree (a single empty leaf is depth 1)."""
    depth: dict[str, int] = {}
    for d in sorted(empty, key=lambda p: -p.count("/")):
        depth[d] = max(depth.get(d, 0), 1)
        parent = parent_of_dir(d)
        if parent in empty:
            depth[parent] = max(depth.get(parent, 0), depth[d] + 1)
    roots = [d for d in empty if parent_of_dir(d) not in empty]
    return max(depth[d] for d in roots)


# -- ground truth and the index invariant ------------------------------------------------------


def test_truth_is_exactly_the_empty_directories(ds: Dataset) -> None:
    assert ds.truth == independent_truth(ds)
    assert ds.result.empty_dirs == len(ds.truth)
    assert ds.truth == sorted(ds.truth)


def test_every_object_has_folder_rows_for_all_its_directories(ds: Dataset) -> None:
    dirs = ds.dirs
    missing = {d for key in ds.keys for d in directories_of(key) if d not in dirs}
    assert not missing


def test_result_counts_match_the_store(ds: Dataset) -> None:
    assert ds.result.dirs == len(ds.folder_rows) == len(ds.dirs)
    assert ds.result.objects == len(ds.object_rows)
    assert sum(layout.dirs for layout in ds.result.layouts) == ds.result.dirs
    assert {layout.name for layout in ds.result.layouts} >= {"hex-root", "hex-data", "dates"}


def test_rows_carry_the_spec_timestamp_and_token(ds: Dataset) -> None:
    from dircleaner.store.records import murmur_token

    assert {row[4] for row in ds.folder_rows + ds.object_rows} == {TS}
    for token, bucket, parent, _name, _ts in ds.folder_rows[::97] + ds.object_rows[::97]:
        assert token == murmur_token(bucket, parent)


# -- size and mix -------------------------------------------------------------------------------


@pytest.mark.parametrize("dirs", [2_000, 7_000, 20_000])
def test_directory_count_within_two_percent(tmp_path: Path, dirs: int) -> None:
    with open_store(tmp_path / "m.db") as store:
        result = generate(store, SynthSpec(dirs=dirs, seed=dirs), None, workers=1)
        assert store.estimate_directory_count().count == result.dirs
    assert abs(result.dirs - dirs) <= 0.02 * dirs


@pytest.mark.parametrize("fraction", [0.05, 0.2])
def test_empty_fraction_near_target(tmp_path: Path, fraction: float) -> None:
    with open_store(tmp_path / "m.db") as store:
        result = generate(store, SynthSpec(dirs=50_000, empty_fraction=fraction), None, workers=1)
    assert abs(result.empty_fraction - fraction) <= 0.02


def test_layouts_share_the_directories(ds: Dataset) -> None:
    tops = Counter(d.split("/", 1)[0] for d in ds.dirs)
    for root in ("logs", "users", "data", "orders", "tmp"):
        assert tops[root] > 0, root
    assert any(len(top) == 1 for top in tops)  # a/1/b/ hex shards at the top of the bucket
    assert any(len(top) == 2 and top.islower() for top in tops)  # 3f/a2/9c/


# -- the cases a cleaner must handle ----------------------------------------------------------


def check_wide_fanout_under_live_parent(data: Dataset) -> None:
    empty = set(data.truth)
    children: defaultdict[str, int] = defaultdict(int)
    for d in empty:
        children[parent_of_dir(d)] += 1
    wide = [p for p, n in children.items() if n >= 300 and p and p not in empty]
    assert wide, max(children.values())
    live_partitions = {parent for _, _, parent, _, _ in data.object_rows}
    assert any(p in live_partitions for p in wide)  # the day keeps its own live object


def check_deep_empty_subtree(data: Dataset) -> None:
    assert max_empty_subtree_depth(set(data.truth)) >= 3


def check_empty_dirs_with_live_siblings(data: Dataset) -> None:
    empty = set(data.truth)
    live_by_parent: defaultdict[str, int] = defaultdict(int)
    for d in data.dirs - empty:
        live_by_parent[parent_of_dir(d)] += 1
    assert sum(1 for d in empty if live_by_parent[parent_of_dir(d)]) >= 50


def check_marker_only_directories(data: Dataset) -> None:
    markers = {parent for _, _, parent, name, _ in data.object_rows if name == ""}
    keys_by_dir: defaultdict[str, int] = defaultdict(int)
    for key in data.keys:
        for d in directories_of(key):
            keys_by_dir[d] += 1
    assert any(keys_by_dir[d] == 1 for d in markers)  # only the marker keeps it


def check_odd_names_present_but_rare(data: Dataset) -> None:
    names = [name for _, _, _, name, _ in data.folder_rows + data.object_rows]
    assert any(not n.isascii() for n in names)
    assert any(" " in n for n in names)
    assert any("'" in n for n in names) and any('"' in n for n in names)
    assert any("\\" in n for n in names)
    assert any("//" in d for d in data.dirs)  # an empty path segment
    assert any(not d.isascii() for d in data.truth)  # some odd names are empty directories
    odd = sum(1 for n in names if not n.isascii() or any(c in n for c in " '\"\\"))
    assert odd < 0.02 * len(names)
    assert not any("\n" in n or "\0" in n for n in names)


FEATURES = (
    check_wide_fanout_under_live_parent,
    check_deep_empty_subtree,
    check_empty_dirs_with_live_siblings,
    check_marker_only_directories,
    check_odd_names_present_but_rare,
)


@pytest.mark.parametrize("check", FEATURES, ids=lambda f: f.__name__.removeprefix("check_"))
def test_feature(ds: Dataset, check: Callable[[Dataset], None]) -> None:
    check(ds)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_feature_and_exact_truth_for_other_seeds(tmp_path: Path, seed: int) -> None:
    data = make(tmp_path, SynthSpec(dirs=10_000, seed=seed))
    assert data.truth == independent_truth(data)
    for check in FEATURES:
        check(data)


def test_deleted_objects_went_through_the_protocol(ds: Dataset) -> None:
    empty = set(ds.truth)
    assert "tmp/" not in empty and "tmp/uploads/" in empty
    assert all(f"tmp/uploads/upload-{u:04d}/" in empty for u in range(5))
    assert not [k for k in ds.keys if k.startswith("tmp/uploads/")]


# -- determinism and the implementation's paths -----------------------------------------------


def test_same_seed_same_dataset_any_worker_count(tmp_path: Path) -> None:
    spec = SynthSpec(dirs=5_000, seed=3, timestamp_us=TS)
    one = make(tmp_path / "one", spec, workers=1)
    again = make(tmp_path / "again", spec, workers=1)
    two = make(tmp_path / "two", spec, workers=2)
    for other in (again, two):
        assert other.truth == one.truth
        assert other.folder_rows == one.folder_rows
        assert other.object_rows == one.object_rows
    assert (tmp_path / "one" / "truth.txt").read_bytes() == (
        tmp_path / "two" / "truth.txt"
    ).read_bytes()


def test_different_seed_different_dataset(tmp_path: Path) -> None:
    a = make(tmp_path / "a", SynthSpec(dirs=5_000, seed=1, timestamp_us=TS))
    b = make(tmp_path / "b", SynthSpec(dirs=5_000, seed=2, timestamp_us=TS))
    assert a.truth != b.truth
    assert a.folder_rows != b.folder_rows


def test_spilled_bucketed_load_gives_the_same_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = SynthSpec(dirs=8_000, seed=5, timestamp_us=TS)
    plain = make(tmp_path / "plain", spec)
    monkeypatch.setattr(synth_runner, "BUCKET_ROWS", 1_000)  # many token buckets
    monkeypatch.setattr(synth_writer, "SPILL_ROWS", 3_000)  # many spills per layout
    monkeypatch.setattr(synth_writer, "TRUTH_RUN", 100)  # many sorted truth runs to merge
    monkeypatch.setattr(synth_writer, "_CHECK_EVERY", 256)
    assert len(synth.plan_jobs(spec, tmp_path)) and synth.plan_jobs(spec, tmp_path)[0].buckets > 8
    spilled = make(tmp_path / "spilled", spec)
    assert spilled.truth == plain.truth
    assert spilled.folder_rows == plain.folder_rows
    assert spilled.object_rows == plain.object_rows


def test_progress_is_reported_in_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(synth_writer, "PROGRESS_EVERY", 2_000)
    monkeypatch.setattr(synth_runner, "PROGRESS_EVERY", 2_000)
    monkeypatch.setattr(synth_writer, "_CHECK_EVERY", 500)
    seen: list[int] = []
    with open_store(tmp_path / "m.db") as store:
        result = generate(store, SynthSpec(dirs=20_000), None, seen.append, workers=1)
    assert len(seen) >= 5
    assert seen == sorted(seen) and seen[-1] <= result.dirs


def test_generic_store_gets_the_same_rows(tmp_path: Path) -> None:
    spec = SynthSpec(dirs=3_000, seed=4, timestamp_us=TS)
    reference = make(tmp_path / "ref", spec)
    (tmp_path / "generic").mkdir()
    inner = open_store(tmp_path / "generic" / "meta.db")
    try:
        generic = make(tmp_path / "generic", spec, store=_delegating(inner))
    finally:
        inner.close()
    assert generic.folder_rows == reference.folder_rows
    assert generic.object_rows == reference.object_rows
    assert generic.truth == reference.truth


def test_iter_layout_keys_lists_the_objects(ds: Dataset) -> None:
    spec = SynthSpec(dirs=20_000, seed=7, timestamp_us=TS)
    alive = sorted(key for _layout, key, ok in iter_layout_keys(spec) if ok)
    assert alive == sorted(ds.keys)


def test_refuses_a_bucket_that_already_has_directories(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db") as store:
        generate(store, SynthSpec(dirs=2_000), None, workers=1)
        with pytest.raises(UsageError, match="already holds"):
            generate(store, SynthSpec(dirs=2_000), None, workers=1)
        other = generate(store, SynthSpec(dirs=2_000, bucket="other"), None, workers=1)
        assert other.dirs > 0


def test_default_timestamp_is_a_day_old_and_wal_is_restored(tmp_path: Path) -> None:
    with open_store(tmp_path / "m.db") as store:
        result = generate(store, SynthSpec(dirs=2_000), None, workers=1)
    now_us = time.time_ns() // 1000
    assert now_us - 25 * 3600 * 10**6 < result.timestamp_us < now_us - 23 * 3600 * 10**6
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def _delegating(inner: SqliteStore) -> Store:
    """A Store that is not a SqliteStore (so the generator takes its generic write path)."""

    def forward(name: str) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return getattr(inner, name)(*args, **kwargs)

        return method

    writes = ("write_object_rows", "write_folder_rows", "delete_object_rows")  # IndexWriter
    namespace: dict[str, Any] = {
        name: forward(name) for name in (*Store.__abstractmethods__, *writes)
    }
    namespace["traits"] = inner.traits
    namespace["open"] = classmethod(lambda cls, *a, **k: inner)
    cls = type("DelegatingStore", (Store,), namespace)
    store: Store = cls()
    return store
