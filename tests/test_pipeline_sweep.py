"""The sweep: candidates and their ordinals, whatever the batches a scan cuts the rows into."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dircleaner.store.sqlite.database as sqlite_database
from dircleaner.filter import bloom
from dircleaner.filter.bloom import BloomFilter
from dircleaner.model import FolderRow, PartitionFacts, PartitionKey, Shard
from dircleaner.pipeline.sweep import sweep
from dircleaner.store import open_store


class SetFilter:
    """A filter without false positives: exactly the keys it was given."""

    def __init__(self, keys: Iterable[bytes]) -> None:
        self.keys = set(keys)

    def contains_many(self, keys: list[bytes]) -> np.ndarray:
        return np.array([k in self.keys for k in keys], dtype=np.bool_)


def dir_key(bucket: str, directory: str) -> bytes:
    return f"{bucket}\0{directory}".encode()


def batches_of(rows: Sequence[FolderRow], cuts: Iterable[int]) -> list[list[FolderRow]]:
    """``rows`` cut at the given indexes (an empty batch where two cuts coincide)."""
    bounds = [0, *sorted(cuts), len(rows)]
    return [list(rows[a:b]) for a, b in itertools.pairwise(bounds)]


def every(rows: Sequence[FolderRow], size: int) -> list[int]:
    return list(range(size, len(rows), size))


def expected_facts(rows: Sequence[FolderRow], filt: SetFilter) -> list[PartitionFacts]:
    """What the sweep must find, computed row by row: a partition's rows are contiguous."""
    groups: dict[PartitionKey, list[FolderRow]] = {}
    for r in rows:
        groups.setdefault(PartitionKey(r.token, r.bucket, r.parent), []).append(r)
    out: list[PartitionFacts] = []
    for key, members in groups.items():
        absent = key.parent != "" and dir_key(key.bucket, key.parent) not in filt.keys
        picked = [
            (i, r)
            for i, r in enumerate(members)
            if absent or dir_key(r.bucket, r.parent + r.name + "/") not in filt.keys
        ]
        if picked or absent:
            out.append(
                PartitionFacts(
                    key,
                    len(members),
                    tuple(r for _, r in picked),
                    absent,
                    tuple(i for i, _ in picked),
                )
            )
    return out


def partition(token: int, parent: str, names: Iterable[str], bucket: str = "b") -> list[FolderRow]:
    return [FolderRow(token, bucket, parent, n) for n in names]


# One wide live partition spanning many small batches, a dead one, token collisions (two
# partitions on one token) and the root.
ROWS = [
    *partition(-9, "", ["a", "b", "c", "w"]),
    *partition(-5, "w/", [f"c{i:02d}" for i in range(23)]),
    *partition(3, "x/", ["p", "q", "r"]),
    *partition(3, "y/", ["s", "t"]),
    *partition(3, "y/", ["u"], bucket="c"),
    *partition(8, "w/c05/", ["k", "l", "m", "n"]),
]
#: present: the root's a, b and w; w/ itself and every other c except c05, c06, c07, c12, c20-22
#: (a run of 3, a lone one and a run of 3 at the partition's end); x/ and x/q; y/ and y/s
PRESENT = SetFilter(
    [
        dir_key("b", "a/"),
        dir_key("b", "b/"),
        dir_key("b", "w/"),
        *(dir_key("b", f"w/c{i:02d}/") for i in range(23) if i not in (5, 6, 7, 12, 20, 21, 22)),
        dir_key("b", "x/"),
        dir_key("b", "x/q/"),
        dir_key("b", "y/"),
        dir_key("b", "y/s/"),
        dir_key("c", "y/"),
        dir_key("c", "y/u/"),
    ]
)


def test_the_dataset_is_what_the_other_tests_expect() -> None:
    facts = {(f.key.bucket, f.key.parent): f for f in expected_facts(ROWS, PRESENT)}
    assert facts[("b", "w/")].ordinals == (5, 6, 7, 12, 20, 21, 22)
    assert facts[("b", "w/c05/")].dir_absent
    assert facts[("b", "w/c05/")].ordinals == (0, 1, 2, 3)
    assert facts[("b", "")].ordinals == (2,)
    assert facts[("b", "x/")].ordinals == (0, 2)
    assert facts[("b", "y/")].ordinals == (1,)
    assert ("c", "y/") not in facts


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 7, 11, 24, 1000])
def test_ordinals_are_positions_in_the_partition_whatever_the_batch_size(size: int) -> None:
    result = sweep(batches_of(ROWS, every(ROWS, size)), PRESENT)
    assert result.facts == expected_facts(ROWS, PRESENT)
    assert result.swept_rows == len(ROWS)
    assert result.partitions == 6


def test_a_partition_spanning_several_batches_carries_its_offset() -> None:
    wide = [r for r in ROWS if r.parent == "w/"]
    # w/ (23 rows) is cut into 5 batches: c00-c04, c05-c09, c10-c14, c15-c19, c20-c22, the last
    # of which also starts the next partition.
    result = sweep(batches_of(ROWS, [4, 9, 14, 19, 24]), PRESENT)
    (fact,) = [f for f in result.facts if f.key.parent == "w/"]
    assert fact.total_rows == len(wide) == 23
    assert [r.name for r in fact.candidates] == ["c05", "c06", "c07", "c12", "c20", "c21", "c22"]
    assert fact.ordinals == (5, 6, 7, 12, 20, 21, 22)


@pytest.mark.parametrize("size", [1, 3, 1000])
def test_partitions_of_the_same_common_shape_share_one_ordinals_tuple(size: int) -> None:
    """Candidates stay in memory until the deletes: the partitions with a lone candidate at the
    same position, or with every row a candidate (from 0), hold one tuple, not one each."""
    rows = [
        *partition(1, "p/", ["a", "b"]),
        *partition(2, "q/", ["a", "b"]),
        *partition(3, "r/", ["a", "b", "c"]),
        *partition(4, "s/", ["a", "b", "c"]),
        *partition(5, "t/", ["a", "b", "c", "d", "e"]),
        *partition(6, "u/", ["a", "b", "c", "d", "e"]),
    ]
    # p/ and q/: b alone; r/ and s/ absent (every row); t/ and u/: a, c and e (not shared).
    present = SetFilter(
        [
            *(dir_key("b", d) for d in ("p/", "q/", "t/", "u/", "p/a/", "q/a/")),
            *(dir_key("b", f"{d}{n}/") for d in ("t/", "u/") for n in "bd"),
        ]
    )
    result = sweep(batches_of(rows, every(rows, size)), present)
    assert result.facts == expected_facts(rows, present)
    by = {f.key.parent: f.ordinals for f in result.facts}
    assert by["p/"] == (1,) and by["p/"] is by["q/"]
    assert by["r/"] == (0, 1, 2) and by["r/"] is by["s/"]
    assert by["t/"] == by["u/"] == (0, 2, 4)


def test_empty_batches_change_nothing() -> None:
    cuts = [0, 0, 4, 4, 9, 30, 30, len(ROWS)]
    assert sweep(batches_of(ROWS, cuts), PRESENT).facts == expected_facts(ROWS, PRESENT)


def test_facts_pickled_by_a_worker_keep_their_ordinals() -> None:
    facts = sweep(batches_of(ROWS, every(ROWS, 3)), PRESENT).facts
    assert pickle.loads(pickle.dumps(facts)) == facts
    assert any(len(f.ordinals) > 1 for f in facts)


@st.composite
def scans(draw: st.DrawFn) -> tuple[list[FolderRow], SetFilter, list[int]]:
    """Random partitions in scan order (with token collisions), a filter, and batch cuts."""
    count = draw(st.integers(1, 8))
    tokens = sorted(draw(st.lists(st.integers(-3, 3), min_size=count, max_size=count)))
    rows: list[FolderRow] = []
    keys: list[bytes] = []
    for i, token in enumerate(tokens):
        parent = "" if i == 0 and draw(st.booleans()) else f"p{i}/"
        names = sorted(draw(st.sets(st.sampled_from("abcdefghij"), min_size=1)))
        rows.extend(partition(token, parent, names))
        if parent and draw(st.booleans()):
            keys.append(dir_key("b", parent))
        present = draw(st.lists(st.booleans(), min_size=len(names), max_size=len(names)))
        keys.extend(
            dir_key("b", parent + n + "/") for n, p in zip(names, present, strict=True) if p
        )
    cuts = draw(st.lists(st.integers(0, len(rows)), max_size=6))
    return rows, SetFilter(keys), cuts


@settings(max_examples=300, deadline=None)
@given(scans())
def test_any_batching_gives_the_facts_of_the_whole_scan(
    scan: tuple[list[FolderRow], SetFilter, list[int]],
) -> None:
    rows, filt, cuts = scan
    result = sweep(batches_of(rows, cuts), filt)
    assert result.facts == expected_facts(rows, filt)
    assert result.facts == sweep([rows], filt).facts


def test_ordinals_from_a_store_scan_in_tiny_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through a real scan: the SQLite store's batches of 3 rows split every wide partition."""
    monkeypatch.setattr(sqlite_database, "SCAN_BATCH", 3)
    with open_store(f"sqlite:///{tmp_path / 'm.db'}", create=True) as store:
        store.write_folder_rows([("b", "w/", f"c{i:02d}") for i in range(17)], 1)
        store.write_folder_rows([("b", "v/", n) for n in "abcdefg"], 1)
        store.write_folder_rows([("b", "", n) for n in ("v", "w")], 1)
        batches = list(store.scan_folder_rows(Shard()))
        assert max(map(len, batches)) == 3
        rows = [r for batch in batches for r in batch]
        filt = SetFilter(
            [
                dir_key("b", "v/"),
                dir_key("b", "w/"),
                *(dir_key("b", f"w/c{i:02d}/") for i in (0, 4, 5, 9, 16)),
                *(dir_key("b", f"v/{n}/") for n in "bf"),
            ]
        )
        result = sweep(store.scan_folder_rows(Shard()), filt)
    assert result.facts == expected_facts(rows, filt)
    by_parent = {f.key.parent: f for f in result.facts}
    assert by_parent["w/"].ordinals == (1, 2, 3, 6, 7, 8, 10, 11, 12, 13, 14, 15)
    assert by_parent["v/"].ordinals == (0, 2, 3, 4, 6)


@settings(max_examples=200, deadline=None)
@given(scans())
def test_the_compiled_and_the_python_partition_walk_agree(
    scan: tuple[list[FolderRow], SetFilter, list[int]],
) -> None:
    """Partition boundaries and key shapes by the compiled kernels or, where numba is missing,
    in Python: the same facts (token collisions, the root, partitions across batches)."""
    rows, filt, cuts = scan
    compiled = sweep(batches_of(rows, cuts), filt).facts
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(bloom, "compiled", lambda: None)
        assert sweep(batches_of(rows, cuts), filt).facts == compiled == expected_facts(rows, filt)


ODD = ["a", "é", "日本", "x y", "n\0ul", "b\\c", "%2F"]


@pytest.mark.parametrize("batch", [1, 2, 3, 1000])
def test_the_packed_scan_finds_what_the_row_scan_finds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    """The store's packed keys (laid out by SQLite) against its rows, through a real filter
    (packed tests) and a set (byte-string tests): the same facts, batch after batch."""
    monkeypatch.setattr(sqlite_database, "SCAN_BATCH", batch)
    with open_store(f"sqlite:///{tmp_path / 'm.db'}", create=True) as store:
        keys = [f"{a}/{b}/{c}" for a in ODD for b in ODD[:3] for c in ("o1", "o2")]
        keys += [f"{a}/{b}/{c}/o" for a in ODD[:3] for b in ODD for c in ODD[:2]]
        store.put_objects("b", keys, 1)
        store.put_objects("c/d", keys[::5], 1)
        rows = [r for chunk in store.scan_folder_rows(Shard()) for r in chunk]
        present = {dir_key(r.bucket, r.parent + r.name + "/") for r in rows[::3]}
        present |= {dir_key(r.bucket, r.parent) for r in rows[1::4]}
        filt = SetFilter(present)
        real = BloomFilter.for_capacity(len(present), 0.001, 7)
        real.add_many(sorted(present))
        for f in (filt, real):
            by_rows = sweep(store.scan_folder_rows(Shard()), f)
            by_keys = sweep(store.scan_folder_keys(Shard()), f)
            assert by_keys.facts == by_rows.facts
            assert (by_keys.swept_rows, by_keys.partitions) == (len(rows), by_rows.partitions)
    assert any(f.dir_absent for f in by_rows.facts)
    assert any(f.parent_dir_absent for f in by_rows.facts)
    assert any(f.candidates and not f.dir_absent for f in by_rows.facts)
