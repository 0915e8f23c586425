"""The re-check asks the objects table again about every candidate directory, and about the
own directory of a partition found empty whose row is not a candidate here; a candidate the
filter holds (one only because its parent is absent) has its folders partition read too, so a
broken filter forced through keeps a directory whose objects lie further down."""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from dircleaner.filter.bloom import BloomFilter
from dircleaner.filter.format import decode_header, encode_header
from dircleaner.filter.generation import new_generation_id
from dircleaner.filter.stored import find_generation, read_filter_part, save_filter_part
from dircleaner.job.clean import CleanConfig, run_clean
from dircleaner.job.sweep import SweepConfig, load_filter
from dircleaner.model import FolderRow, PartitionFacts, PartitionKey
from dircleaner.paths import filter_key
from dircleaner.pipeline import recheck
from dircleaner.pipeline.build import BuildConfig, build_filter
from dircleaner.pipeline.delete import ThrottleConfig
from dircleaner.pipeline.guards import GuardConfig
from dircleaner.pipeline.recheck import CASCADE_HEAD_ROWS, find_nonempty
from dircleaner.pipeline.spill import Candidates
from dircleaner.pipeline.spillfile import SpillConfig
from dircleaner.scanrate import ScanRate, ScanThrottle
from dircleaner.store import open_store
from dircleaner.store.base import Store
from dircleaner.store.cassandra.config import parse_cassandra_url
from dircleaner.store.records import murmur_token
from dircleaner.timeutil import now_us
from dircleaner.workers.base import LocalWorkers
from tests.helpers import invoke

B = "b"
Report = tuple[str, int, int | None]
#: a filter that holds nothing: every candidate is vouched for by its own absence
NOTHING = BloomFilter(1 << 16, 7, 0)


def holding(*dirs: str) -> BloomFilter:
    """A filter that holds ``dirs`` of bucket B (and, at 2^16 bits, nothing else here)."""
    filt = BloomFilter(1 << 16, 7, 0)
    filt.add_many([filter_key(B, d) for d in dirs])
    return filt


def key(parent: str) -> PartitionKey:
    return PartitionKey(murmur_token(B, parent), B, parent)


def facts(parent: str, names: list[str], *, dir_absent: bool = False) -> PartitionFacts:
    k = key(parent)
    rows = tuple(FolderRow(k.token, B, parent, name) for name in names)
    return PartitionFacts(k, len(rows), rows, dir_absent=dir_absent)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as opened:
        yield opened


def held_then_spilled(tmp_path: Path, swept: Sequence[PartitionFacts]) -> Iterator[Candidates]:
    """The same candidates held in memory, then spilled (each let go after its turn)."""
    for memory in (10**6, 0):
        held = Candidates(SpillConfig(tmp_path / "spill", memory_candidates=memory))
        for fact in swept:
            held.append(fact)
        held.finish(plan_room=False)
        assert held.spilled is (memory == 0)
        yield held
        held.release()


@pytest.mark.parametrize("batch", [1, 2, 100_000])
def test_candidates_that_gained_an_object_are_found(
    store: Store, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    monkeypatch.setattr(recheck, "RECHECK_BATCH", batch)
    swept = [facts("", ["a", "b"]), facts("a/", ["c", "d", "e"])]
    store.put_objects(B, ["a/d/new", "b/x/deep"], 10)  # put since the build
    found = find_nonempty(store, swept, NOTHING)
    # b/ holds no object itself (b/x/ does): the re-check reads each directory's own partition.
    assert found.nonempty == {(B, "a/d/")}
    assert (found.candidates, found.parents, found.checked) == (5, 0, 5)


def test_an_empty_partitions_own_directory_is_checked_when_no_candidate_row_covers_it(
    store: Store,
) -> None:
    # q/r/'s row sits in q/'s partition, which another slice sweeps: only this one checks it.
    swept = [facts("q/r/", ["s"], dir_absent=True), facts("a/", ["c"], dir_absent=True)]
    store.put_objects(B, ["q/r/late"], 10)
    found = find_nonempty(store, [facts("", ["a"]), *swept], NOTHING)
    assert found.nonempty == {(B, "q/r/")}
    # a/ is a candidate row of the root's partition, so it is not counted twice.
    assert (found.candidates, found.parents) == (3, 1)


def test_nothing_to_check_reads_nothing(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    def unexpected(_keys: object) -> set[tuple[str, str]]:
        raise AssertionError("read the store for no candidate")

    monkeypatch.setattr(store, "nonempty_object_partitions", unexpected)
    found = find_nonempty(store, [], NOTHING)
    assert (found.nonempty, found.checked) == (set(), 0)


def test_the_recheck_reports_done_of_its_total(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recheck, "RECHECK_BATCH", 2)
    reports: list[tuple[str, int, int | None]] = []
    swept = [facts("", ["a", "b"]), facts("a/", ["c", "d", "e"]), facts("q/", [], dir_absent=True)]
    find_nonempty(store, swept, NOTHING, progress=lambda *r: reports.append(r))
    # 5 candidates and the orphan q/ (an upper bound at first, exact before the last read)
    assert reports == [("verify", 0, 6), ("verify", 2, 6), ("verify", 4, 6), ("verify", 6, 6)]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_capped_reads_go_in_quarter_second_batches_paid_at_the_cap(store: Store) -> None:
    clock = FakeClock()
    throttle = ScanThrottle(ScanRate(2000.0, adaptive=False), clock=clock, sleep=clock.sleep)
    sizes: list[int] = []
    real = store.nonempty_object_partitions

    def reading(keys: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        sizes.append(len(keys))
        return real(keys)

    names = [f"n{i:04d}" for i in range(1200)]
    store.nonempty_object_partitions = reading  # type: ignore[method-assign]
    found = find_nonempty(store, [facts("p/", names)], NOTHING, throttle)
    assert found.checked == 1200
    assert sizes == [500, 500, 200]  # 0.25 s of 2,000 reads/s each
    stats = throttle.stats()
    assert stats.rows == 1200
    # every read paid for, the last batch's too: within the cap over the re-check
    assert sum(clock.slept) == pytest.approx(1200 / 2000)
    assert stats.rows_per_s == pytest.approx(2000)


def test_uncapped_reads_go_in_full_batches_without_a_wait() -> None:
    assert recheck.batch_size(None) == recheck.RECHECK_BATCH
    assert recheck.batch_size(ScanThrottle(ScanRate(0))) == recheck.RECHECK_BATCH
    assert recheck.batch_size(ScanThrottle(ScanRate(100.0))) == recheck.MIN_CAPPED_BATCH


def test_spilled_candidates_are_read_at_the_cap_and_reported_as_held_ones_are(
    store: Store, tmp_path: Path
) -> None:
    swept = [facts(f"p{i}/", [f"n{j:03d}" for j in range(100)]) for i in range(6)]
    swept.append(facts("q/r/", ["s"], dir_absent=True))  # q/r/'s own row is in another slice
    store.put_objects(B, ["p3/n042/late", "q/r/late"], 10)
    outcomes = []
    for held in held_then_spilled(tmp_path, swept):
        clock = FakeClock()
        throttle = ScanThrottle(ScanRate(800.0, adaptive=False), clock=clock, sleep=clock.sleep)
        reports: list[Report] = []

        def report(phase: str, done: int, total: int | None, into: list[Report] = reports) -> None:
            into.append((phase, done, total))

        found = find_nonempty(store, held, NOTHING, throttle, report)
        assert found.nonempty == {(B, "p3/n042/"), (B, "q/r/")}
        assert (found.candidates, found.parents) == (601, 1)
        assert throttle.stats().rows == 602
        assert sum(clock.slept) == pytest.approx(602 / 800)  # batches of 200, each paid
        assert reports[0] == ("verify", 0, reports[0][2]) and reports[-1] == ("verify", 602, 602)
        outcomes.append([done for _phase, done, _total in reports])
    # spilled, the orphans no candidate row named are read after the candidates' last batch
    assert outcomes == [[0, 200, 400, 600, 602], [0, 200, 400, 600, 601, 602]]


# -- the cascade's candidates: the ones the filter holds ------------------------------------------


def chain(store: Store) -> list[PartitionFacts]:
    """d/ absent from the filter, so d/e/ is a candidate though the filter holds it; d/e/f/
    holds an object and is no candidate (its parent is in the filter, and so is it)."""
    store.put_objects(B, ["d/e/f/x"], 10)
    return [facts("", ["d"]), facts("d/", ["e"], dir_absent=True)]


def test_a_cascade_candidate_holding_a_subdirectory_that_is_no_candidate_is_kept(
    store: Store,
) -> None:
    found = find_nonempty(store, chain(store), holding("d/e/", "d/e/f/"))
    # d/e/ has no object of its own: its folders partition keeps it (and, planned, d/ with it).
    assert found.nonempty == {(B, "d/e/")}
    assert (found.cascade_read, found.cascade_kept) == (1, 1)
    assert (found.candidates, found.parents) == (2, 0)


def test_a_candidate_the_filter_does_not_hold_reads_no_folders_partition(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unexpected(_keys: object, _rows: int) -> dict[object, object]:
        raise AssertionError("read a folders partition the filter vouches for")

    swept = chain(store)
    monkeypatch.setattr(store, "folder_partition_heads", unexpected)
    found = find_nonempty(store, swept, holding("d/e/f/"))  # d/e/ absent: its own absence
    assert found.nonempty == set()
    assert (found.cascade_read, found.cascade_kept) == (0, 0)


def test_a_cascade_candidate_whose_children_are_all_candidates_is_not_kept(store: Store) -> None:
    # d/e/g/ emptied: a row the filter does not hold, so a candidate in d/e/'s partition.
    store.put_objects(B, ["d/e/g/x"], 10)
    store.delete_objects(B, ["d/e/g/x"], 11)
    swept = [facts("", ["d"]), facts("d/", ["e"], dir_absent=True), facts("d/e/", ["g"])]
    found = find_nonempty(store, swept, holding("d/e/"))  # d/e/: a false positive
    assert found.nonempty == set()
    assert (found.cascade_read, found.cascade_kept) == (1, 0)


def test_a_cascade_candidate_whose_partition_fills_the_read_is_kept(store: Store) -> None:
    names = [f"g{i:02d}" for i in range(CASCADE_HEAD_ROWS)]
    keys = [f"d/e/{name}/x" for name in names]
    store.put_objects(B, keys, 10)
    store.delete_objects(B, keys, 11)
    swept = [facts("", ["d"]), facts("d/", ["e"], dir_absent=True), facts("d/e/", names)]
    # Every child read is a candidate, but a row past the read could be one that is not.
    found = find_nonempty(store, swept, holding("d/e/"))
    assert found.nonempty == {(B, "d/e/")}
    assert (found.cascade_read, found.cascade_kept) == (1, 1)


def test_cascade_candidates_are_checked_alike_held_or_spilled(store: Store, tmp_path: Path) -> None:
    for held in held_then_spilled(tmp_path, chain(store)):
        found = find_nonempty(store, held, holding("d/e/", "d/e/f/"))
        assert found.nonempty == {(B, "d/e/")}
        assert (found.cascade_read, found.cascade_kept) == (1, 1)


def test_the_folders_reads_are_paid_at_the_cap_with_the_objects_reads(store: Store) -> None:
    clock = FakeClock()
    throttle = ScanThrottle(ScanRate(100.0, adaptive=False), clock=clock, sleep=clock.sleep)
    found = find_nonempty(store, chain(store), holding("d/e/", "d/e/f/"), throttle)
    assert found.checked == 2 and found.cascade_read == 1
    assert throttle.stats().rows == 3
    assert sum(clock.slept) == pytest.approx(3 / 100)


@pytest.mark.parametrize(
    ("head", "held", "kept"),
    [
        ([], [], False),
        (["g"], [False], False),
        (["g", "h"], [False, True], True),
        ([f"g{i}" for i in range(CASCADE_HEAD_ROWS)], [False] * CASCADE_HEAD_ROWS, True),
    ],
)
def test_a_cascade_candidate_is_kept_by_a_child_that_is_no_candidate_or_a_full_read(
    head: list[str], held: list[bool], kept: bool
) -> None:
    rows = [FolderRow(0, B, "d/e/", name) for name in head]
    assert recheck.keeps_cascade_candidate(rows, held) is kept


# -- a night, on both backends: a broken filter forced through ------------------------------------

#: distinguishes this session's buckets from earlier or concurrent sessions' (Cassandra); each
#: test adds a token of its own (a bucket forgotten at now shadows rows put an hour ago)
SESSION = secrets.token_hex(4)


@pytest.fixture(params=["sqlite", "cassandra"])
def night_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, str]]:
    """A store and a bucket of this test alone (on Cassandra, forgotten afterwards)."""
    if request.param == "sqlite":
        with open_store(f"sqlite:///{tmp_path / 'night.db'}", create=True) as opened:
            yield opened, B
        return
    base = request.getfixturevalue("cassandra_url")
    parts = parse_cassandra_url(base)
    url = (
        f"cassandra://{','.join(parts.hosts)}:{parts.port}/"
        f"{parts.keyspace or 'dircleaner_test'}_recheck"
    )
    assert invoke(url, "init-schema").exit_code == 0
    bucket = f"recheck-{SESSION}-{secrets.token_hex(4)}"
    with open_store(url) as opened:
        try:
            yield opened, bucket
        finally:
            forget(opened, bucket)


def forget(store: Store, bucket: str) -> None:
    """A bucket's rows deleted (at now: later writes are not shadowed), its filters too."""
    cutoff = now_us()
    rows = list(store.iter_folder_rows(bucket))
    store.delete_objects(bucket, [r.parent + r.name + "/x" for r in rows], cutoff)
    store.delete_objects(bucket, [f"{d}x" for d in NIGHT_DIRS], cutoff)
    keys = {PartitionKey(r.token, r.bucket, r.parent) for r in rows}
    assert all(r is None for r in store.delete_folder_partitions(sorted(keys), cutoff))


#: every directory put (each with an object ``x``) by the night tests
NIGHT_DIRS = ["d/e/f/", "d/e/f/g/", "d/gone/", "q/r/s/", "keep/"]


def unpacked(filt: BloomFilter) -> np.ndarray:
    return np.unpackbits(filt.words.view(np.uint8), bitorder="little")


def bits_of(m: int, k: int, salt: int, bucket: str, directory: str) -> set[int]:
    """The bit positions of one directory's key in a filter of these parameters."""
    alone = BloomFilter(m, k, salt)
    alone.add(filter_key(bucket, directory))
    return set(np.flatnonzero(unpacked(alone)).tolist())


def edit_filter(
    store: Store,
    bucket: str,
    generation: str,
    *,
    miss: str = "",
    hold: str = "",
    spare: Sequence[str] = (),
) -> str:
    """The generation stored again as a newer one, with directory ``miss`` made absent (one of
    its bits cleared, none of the ``spare`` directories') and ``hold`` made present (a false
    positive, as a sound filter may have); the new generation's id."""
    info = find_generation(store, generation)
    edited = ""
    for part in sorted(s.shard for s in info.shards):
        header_bytes, body = read_filter_part(store, generation, part)
        header = decode_header(header_bytes)
        filt = BloomFilter.from_bits(header.m, header.k, header.salt, body)
        if miss:
            used = set().union(
                *(bits_of(header.m, header.k, header.salt, bucket, d) for d in spare)
            )
            bit = min(bits_of(header.m, header.k, header.salt, bucket, miss) - used)
            filt.words[bit // 64] &= ~np.uint64(1 << (bit % 64))
        if hold:
            filt.add(filter_key(bucket, hold))
        body = filt.words.tobytes()
        header = replace(header, body_len=len(body), body_crc=zlib.crc32(body))
        edited = new_generation_id(header.snapshot_us + 1, header.salt)
        save_filter_part(store, edited, header, encode_header(header), body)
    return edited


def night(
    store: Store, bucket: str, put: Sequence[str], emptied: Sequence[str], tmp_path: Path
) -> tuple[str, BloomFilter]:
    """The objects put and some deleted an hour ago, a filter built (salt fixed): its
    generation, and the filter."""
    old = now_us() - 3_600_000_000
    store.put_objects(bucket, list(put), old)
    store.delete_objects(bucket, list(emptied), old + 1)
    built = build_filter(store, BuildConfig(fpr=0.001, bucket=bucket, salt=7))
    loaded = load_filter(store, SweepConfig(bucket=bucket, generation=built.generation))
    return built.generation, loaded.filt  # type: ignore[return-value]


def forced_clean(
    store: Store,
    bucket: str,
    generation: str,
    tmp_path: Path,
    *,
    workers: int = 1,
    spill: bool = False,
) -> set[str]:
    """A clean forced through (--max-delete-fraction 1); the directories left."""
    config = CleanConfig(
        sweep=SweepConfig(
            bucket=bucket, generation=generation, workers=workers,
            guards=GuardConfig(max_delete_fraction=1.0),
        ),
        min_age_s=0,
        throttle=ThrottleConfig(rate=0),
        audit_log=tmp_path / "audit.jsonl",
        spill=SpillConfig(tmp_path / "spill", memory_candidates=0) if spill else SpillConfig(),
    )  # fmt: skip
    pool = LocalWorkers(workers) if workers > 1 else None
    report = run_clean(store, config, workers=pool)
    assert report.deleted is not None and report.deleted.directories > 0
    return {r.parent + r.name + "/" for r in store.iter_folder_rows(bucket)}


def present(filt: object, bucket: str, dirs: Sequence[str]) -> list[bool]:
    found = filt.contains_many([filter_key(bucket, d) for d in dirs])  # type: ignore[attr-defined]
    return [bool(x) for x in found]


@pytest.mark.parametrize(("workers", "spill"), [(1, False), (2, False), (1, True)])
def test_a_broken_filter_forced_through_keeps_a_directory_whose_objects_lie_below_the_cascade(
    night_store: tuple[Store, str], tmp_path: Path, workers: int, spill: bool
) -> None:
    store, bucket = night_store
    # d/ holds no object of its own; d/e/ neither; d/e/f/ does (and d/e/f/g/ under it).
    put = ["d/e/f/x", "d/e/f/g/x", "d/gone/x", "keep/x"]
    generation, _sound = night(store, bucket, put, ["d/gone/x"], tmp_path)
    # The filter broken for d/ alone: it misses d/, holds d/e/ and what lies below.
    below = ["d/e/", "d/e/f/", "d/e/f/g/", "keep/"]
    broken = edit_filter(store, bucket, generation, miss="d/", spare=below)
    filt = load_filter(store, SweepConfig(bucket=bucket, generation=broken)).filt
    assert present(filt, bucket, ["d/", *below]) == [False, True, True, True, True]
    left = forced_clean(store, bucket, broken, tmp_path, workers=workers, spill=spill)
    # d/e/ was a candidate (d/ absent) without objects of its own; its folders partition
    # holds d/e/f/, which is none: kept, and d/ with it. Every object stays reachable.
    assert left == {"d/", "d/e/", "d/e/f/", "d/e/f/g/", "keep/"}


def test_an_empty_subtree_under_an_absent_directory_goes_in_one_night_past_a_false_positive(
    night_store: tuple[Store, str], tmp_path: Path
) -> None:
    store, bucket = night_store
    generation, _sound = night(store, bucket, ["q/r/s/x", "keep/x"], ["q/r/s/x"], tmp_path)
    # A sound filter with a false positive: q/r/, a cascade candidate whose folders partition
    # is read. Its one child is a candidate too (the filter lacks it): nothing keeps it.
    fp = edit_filter(store, bucket, generation, hold="q/r/")
    filt = load_filter(store, SweepConfig(bucket=bucket, generation=fp)).filt
    assert present(filt, bucket, ["q/", "q/r/", "q/r/s/", "keep/"]) == [False, True, False, True]
    assert forced_clean(store, bucket, fp, tmp_path) == {"keep/"}


BACKLOG_DIRS = 20_000


def test_a_filter_with_bits_cleared_forced_through_deletes_only_empty_directories(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'backlog.db'}"
    truth = tmp_path / "truth"
    made = invoke(
        url, "gen", "--dirs", str(BACKLOG_DIRS), "--shape", "backlog", "--truth", str(truth)
    )
    assert made.exit_code == 0, made.output
    empty = {line.split("\t")[-1] for line in truth.read_text().splitlines()}
    with open_store(url) as store:
        built = build_filter(store, BuildConfig(salt=7))
        # A third of the filter's bytes cleared: most directories, most of them live, are missed.
        info = find_generation(store, built.generation)
        broken = ""
        for part in sorted(s.shard for s in info.shards):
            header_bytes, body = read_filter_part(store, built.generation, part)
            body = bytes(x if i % 3 else 0 for i, x in enumerate(body))
            header = replace(
                decode_header(header_bytes), body_len=len(body), body_crc=zlib.crc32(body)
            )
            broken = new_generation_id(header.snapshot_us + 1, header.salt)
            save_filter_part(store, broken, header, encode_header(header), body)
        before = {r.parent + r.name + "/" for r in store.iter_folder_rows()}
        config = CleanConfig(
            sweep=SweepConfig(generation=broken, guards=GuardConfig(max_delete_fraction=1.0)),
            min_age_s=0,
            throttle=ThrottleConfig(rate=0),
            audit_log=tmp_path / "audit.jsonl",
        )
        report = run_clean(store, config)
        left = {r.parent + r.name + "/" for r in store.iter_folder_rows()}
    deleted = before - left
    assert report.deleted is not None and deleted
    assert deleted <= empty  # precision 1.0: no directory holding an object goes
