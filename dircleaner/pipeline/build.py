"""Pass 1 — build: every ancestor of every object partition into a Bloom filter, stored.

The objects table is partitioned by parent, so the non-empty directories are exactly the
ancestors (inclusive) of the partition keys that hold a live row: we scan partition keys only.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TypeAlias

import numpy as np
import numpy.typing as npt

from dircleaner.errors import FilterCorrupt, FilterMismatch, FilterNotFound, UsageError
from dircleaner.filter.bloom import finish_loading_kernels, start_loading_kernels
from dircleaner.filter.engines import Filter, new_filter
from dircleaner.filter.format import (
    FilterHeader,
    decode_header,
    deserialize,
    merge_params,
    merge_shards,
    serialize,
)
from dircleaner.filter.generation import new_generation_id, parse_generation_id
from dircleaner.filter.sizing import (
    DEFAULT_FPR,
    SizingRecord,
    distinct_keys,
    save_sizing_record,
    size_from_last_filter,
)
from dircleaner.filter.stored import (
    GenerationInfo,
    find_generation,
    fpr_at,
    merged_fill,
    read_filter_part,
    record_merged_bits,
    save_filter_part,
)
from dircleaner.gcpause import cyclic_gc_paused
from dircleaner.model import Shard
from dircleaner.progress import Progress, expecting, no_progress
from dircleaner.scanrate import ScanRate, ScanStats, ScanThrottle
from dircleaner.scanrate import merge as merge_scans
from dircleaner.store.base import Store
from dircleaner.store.packed import ObjectKeys
from dircleaner.store.records import DirCountEstimate
from dircleaner.timeutil import now_us
from dircleaner.workers.base import BUILD, LocalWorkers, Workers

#: the floor on filter capacity, so a tiny store still gets a sensible filter
MIN_CAPACITY = 1000
#: headroom over the previous run's exact count (the index grows between nights)
PREVIOUS_COUNT_HEADROOM = 1.2

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BuildConfig:
    """What to build and how."""

    fpr: float = DEFAULT_FPR
    expected_dirs: int | None = None
    engine: str = "mmh3"
    bucket: str | None = None
    shard: Shard = field(default_factory=Shard)
    #: fixed salt (tests, or shards of one generation on several hosts); random when None
    salt: int | None = None
    #: generation id to write into (shards of one generation); a new one when None
    generation: str | None = None
    #: worker processes; each builds a partial filter over a sub-slice, OR-merged at load
    workers: int = 1
    #: store the filter; False (a dry run): keep it in memory only, and write nothing at all
    persist: bool = True
    #: how fast the scan of the objects table may read (all workers together)
    scan: ScanRate = field(default_factory=ScanRate)

    def __post_init__(self) -> None:
        if not 0 < self.fpr < 0.5:
            raise UsageError(f"--fpr must be between 0 and 0.5, got {self.fpr}")
        if self.expected_dirs is not None and self.expected_dirs < 1:
            raise UsageError("--expected-dirs must be a positive number")
        if self.workers < 1:
            raise UsageError("--workers must be at least 1")
        if self.shard.count > 1 and self.expected_dirs is None:
            # Every host must size its shard's filter identically for the shards to OR-merge.
            raise UsageError(
                "a sharded build (--shard i/n) needs --expected-dirs, the same on every host"
            )
        if self.shard.count > 1 and self.generation is None:
            raise UsageError(
                "a sharded build needs --generation (one id for all hosts: 'filters new-id')"
            )


@dataclass(frozen=True)
class BuildResult:
    """What a build produced.

    Partitions scanned and keys inserted count this build's own work; fill, false-positive rate
    and size describe the whole filter, including parts an interrupted build had already stored.
    """

    generation: str
    header: FilterHeader
    sizing: DirCountEstimate
    partitions_scanned: int
    keys_inserted: int
    #: fill and effective false-positive rate of the generation, computed as ``filters list``
    #: computes them (``filter.stored.merged_fill``)
    fill_ratio: float
    estimated_fpr: float
    filter_bytes: int
    seconds: float
    #: shards built (scanned) by this build
    built_shards: tuple[int, ...] = ()
    #: complete shards of an interrupted build of this generation, reused as stored
    reused_shards: tuple[int, ...] = ()
    #: the merged filter and its header, when the build did not store it (``persist=False``)
    in_memory: tuple[FilterHeader, Filter] | None = field(default=None, repr=False, compare=False)
    #: how the scan of the objects table read (rate, page latency, back-offs)
    scan: ScanStats = field(default_factory=ScanStats)


#: between a scope's tables and its bucket restriction (``*``: every bucket)
_BUCKET_PART = "|bucket="


def scope_of(store: Store, bucket: str | None) -> str:
    """The scope a filter is valid for: the store's tables and the bucket restriction.

    A filter is used only for its own scope: a sweep of one bucket does not take a filter of
    every bucket, nor the other way round (the guards, the sizing and the resume records are
    kept per scope)."""
    return f"{store.scope_id()}{_BUCKET_PART}{bucket if bucket is not None else '*'}"


def scope_parts(scope: str) -> tuple[str, str | None]:
    """(the tables, the bucket restriction or None for every bucket) of a ``scope_of``."""
    tables, found, bucket = scope.rpartition(_BUCKET_PART)
    if not found:
        return scope, None
    return tables, None if bucket == "*" else bucket


def describe_scope(scope: str, tables: str | None = None) -> str:
    """A scope for people: "every bucket", "bucket 'logs'"; with the tables when they are not
    ``tables`` (another mapping's filters in a shared keyspace)."""
    own_tables, bucket = scope_parts(scope)
    said = "every bucket" if bucket is None else f"bucket {bucket!r}"
    return said if tables is None or own_tables == tables else f"{said} of {own_tables}"


def swept_count_key(scope: str) -> str:
    """State key under which the sweep records the exact folder-row count of a scope."""
    return f"swept_dirs|{scope}"


def scanned_count_key(scope: str) -> str:
    """State key under which a whole build records the object partitions it scanned (the next
    build's progress expects as many)."""
    return f"build_partitions|{scope}"


def size_filter(store: Store, config: BuildConfig) -> DirCountEstimate:
    """How many directories to size the filter for, and how we know."""
    if config.expected_dirs is not None:
        return DirCountEstimate(config.expected_dirs, "--expected-dirs", exact=True)
    if store.traits.cheap_exact_count:
        counted = store.estimate_directory_count(config.bucket)
        if config.shard.count > 1:
            return counted
        # Only directories holding objects go into the filter: the last filter says how many.
        scaled = size_from_last_filter(store, scope_of(store, config.bucket), counted.count)
        return replace(scaled, folder_rows=counted.count) if scaled else counted
    # Counting a large table is a third scan: the sweep's exact count from last night is free.
    previous = store.get_state(swept_count_key(scope_of(store, config.bucket)))
    if previous is not None:
        count = int(int(previous) * PREVIOUS_COUNT_HEADROOM)
        return DirCountEstimate(count, f"previous run's exact count {previous} + 20% headroom")
    return store.estimate_directory_count(config.bucket)


_SLASH = ord("/")
Packed: TypeAlias = tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]]


def packed_ancestors(keys: ObjectKeys) -> Packed:
    """The filter keys of every ancestor (inclusive) of a batch's partition keys, packed.

    Returns ``(buf, starts, ends)``: key ``i`` is ``buf[starts[i]:ends[i]]``. Each partition's
    UTF-8 filter key ``bucket + "\\0" + directory`` is laid out once (by the store's scan), and
    its ancestors are its own prefixes that end at a ``/`` after the bucket's NUL ("/" is one
    byte in UTF-8 and never part of another character's encoding), so the walk costs no string
    per ancestor: an ancestor shared by many partitions is simply inserted again (a Bloom insert
    is idempotent, and with the compiled hash a repeat costs less than remembering what was
    inserted). A directory not ending in ``/`` (none should) still goes in whole. The root
    (``bucket + "\\0"``) has no filter key.
    """
    buf, offsets = keys.buf, keys.offsets
    if not len(keys):
        empty = np.zeros(0, dtype=np.int64)
        return buf, empty, empty
    key_starts, key_ends = offsets[:-1], offsets[1:]
    nuls = np.flatnonzero(buf == 0)
    dir_starts = nuls[np.searchsorted(nuls, key_starts)] + 1  # after each key's first NUL
    slashes = np.flatnonzero(buf == _SLASH)
    owner = np.searchsorted(key_ends, slashes, side="right")
    in_dir = slashes >= dir_starts[owner]  # not a "/" inside a bucket name
    owner, slashes = owner[in_dir], slashes[in_dir]
    # Keys not ending in "/" go in whole too; the root (an empty directory) does not.
    whole = np.flatnonzero((buf[key_ends - 1] != _SLASH) & (dir_starts < key_ends))
    starts = np.concatenate([key_starts[owner], key_starts[whole]])
    ends = np.concatenate([slashes + 1, key_ends[whole]])
    return buf, starts, ends


def _joined_generation(generation: str, now: int) -> tuple[int, int]:
    """(snapshot, salt) of a generation this build contributes shards to."""
    snapshot_us, salt = parse_generation_id(generation)
    if snapshot_us > now:
        # The snapshot must not postdate the scan, or deletes at T could shadow newer writes.
        raise UsageError(f"generation {generation} is in the future; make it with 'filters new-id'")
    return snapshot_us, salt


@dataclass(frozen=True)
class StoredPart:
    """A complete shard of a generation, read back and verified."""

    shard: int
    header_bytes: bytes
    body: bytes


@dataclass(frozen=True)
class PartialBuild:
    """An interrupted build of one generation: the parts it finished and the shards it lacks."""

    generation: str
    #: the parameters every part of the generation shares (capacity, p, m, k, salt, snapshot)
    header: FilterHeader
    reused: tuple[StoredPart, ...]
    missing: tuple[Shard, ...]


def build_shards(config: BuildConfig, workers: Workers | None = None) -> list[Shard]:
    """The shards a build with ``config`` stores: its slice, cut as the workers cut a build."""
    return (workers or LocalWorkers(config.workers)).slices(config.shard, BUILD)


def new_generation(config: BuildConfig) -> str:
    """The id a build with ``config`` writes: the given one, or a new one (salt, snapshot now)."""
    if config.generation is not None:
        return config.generation
    salt = config.salt if config.salt is not None else secrets.randbits(32)
    return new_generation_id(now_us(), salt)


def find_partial_build(
    store: Store, config: BuildConfig, generation: str, workers: Workers | None = None
) -> PartialBuild | None:
    """What is left to build of ``generation`` with ``config``'s scope and shard layout.

    None when there is nothing worth resuming: no complete part, or parts another scope, shard
    layout, engine, false-positive rate or ``--expected-dirs`` made (a fresh build is then
    simpler and as safe). A part without its completion marker counts as missing.
    """
    try:
        info = find_generation(store, generation)
    except FilterNotFound:
        log.info("not resuming the build of generation %s: none of it was stored", generation)
        return None
    layout = build_shards(config, workers)
    problem = _resume_problem(info, config, scope_of(store, config.bucket), layout)
    if problem is None:
        reused = _read_complete_parts(store, info)
        if reused:
            header = decode_header(reused[0].header_bytes)
            done = {part.shard for part in reused}
            missing = tuple(shard for shard in layout if shard.index not in done)
            return PartialBuild(generation, header, reused, missing)
        problem = "no complete part"
    log.info("not resuming the build of generation %s: %s", generation, problem)
    return None


def _resume_problem(
    info: GenerationInfo, config: BuildConfig, scope: str, layout: Sequence[Shard]
) -> str | None:
    """Why the stored parts of a generation cannot be completed by this build, or None."""
    headers = [part.header for part in info.shards if part.header is not None]
    if not headers:
        return "no readable part"
    first = headers[0]
    if any(merge_params(h) != merge_params(first) for h in headers):
        return "its parts disagree on their parameters"
    snapshot_us, salt = parse_generation_id(info.generation)
    wanted = {shard.index for shard in layout}
    checks = (
        (first.scope == scope, f"built for {first.scope!r}, not {scope!r}"),
        (
            first.shard_count == layout[0].count,
            f"built in {first.shard_count} shards, this build makes {layout[0].count}",
        ),
        (all(part.shard in wanted for part in info.shards), "it holds shards of another slice"),
        (first.engine == config.engine, f"built with engine {first.engine}"),
        (first.target_p == config.fpr, f"built for --fpr {first.target_p:g}"),
        (
            (first.snapshot_us, first.salt) == (snapshot_us, salt),
            "its header disagrees with its id",
        ),
        (
            config.expected_dirs is None
            or first.expected_n == max(config.expected_dirs, MIN_CAPACITY),
            f"sized for {first.expected_n} directories, not --expected-dirs",
        ),
    )
    return next((why for ok, why in checks if not ok), None)


def _read_complete_parts(store: Store, info: GenerationInfo) -> tuple[StoredPart, ...]:
    """Every marked part that reads back intact; a damaged one is left to be rebuilt."""
    parts = []
    for part in info.shards:
        if not part.complete:
            continue
        try:
            header_bytes, body = read_filter_part(store, info.generation, part.shard)
        except (FilterCorrupt, FilterMismatch) as exc:
            log.warning("generation %s: rebuilding shard %d: %s", info.generation, part.shard, exc)
            continue
        parts.append(StoredPart(part.shard, header_bytes, body))
    return tuple(sorted(parts, key=lambda p: p.shard))


@dataclass(frozen=True)
class _Params:
    """What every part of one generation is built with."""

    generation: str
    snapshot_us: int
    salt: int
    capacity: int
    fpr: float
    engine: str
    sizing: DirCountEstimate
    #: (m, k) of the parts already stored, which a new part must match
    shape: tuple[int, int] | None = None


def _fresh_params(store: Store, config: BuildConfig) -> _Params:
    # Everything written before this instant is seen by the scan; deletes are issued at a time
    # before it (minus --min-age), so anything (re)written during or after the build survives.
    snapshot_us = now_us()
    salt = config.salt if config.salt is not None else secrets.randbits(32)
    if config.generation is not None:
        # Shards of one generation on several hosts: the id fixes salt and snapshot for all.
        snapshot_us, salt = _joined_generation(config.generation, snapshot_us)
    sizing = size_filter(store, config)
    capacity = max(sizing.count, MIN_CAPACITY)
    generation = config.generation or new_generation_id(snapshot_us, salt)
    return _Params(generation, snapshot_us, salt, capacity, config.fpr, config.engine, sizing)


def _resumed_params(resume: PartialBuild) -> _Params:
    # The generation's own snapshot is safe for the shards scanned now: they see at least
    # everything written before it, and deletes stay at that snapshot (minus --min-age).
    h = resume.header
    return _Params(
        generation=resume.generation,
        snapshot_us=h.snapshot_us,
        salt=h.salt,
        capacity=h.expected_n,
        fpr=h.target_p,
        engine=h.engine,
        sizing=DirCountEstimate(h.expected_n, f"as sized by generation {resume.generation}"),
        shape=(h.m, h.k),
    )


@dataclass(frozen=True)
class _PartResult:
    shard: int
    partitions: int
    inserted: int
    header_bytes: bytes
    body: bytes
    scan: ScanStats = field(default_factory=ScanStats)


def build_filter(
    store: Store,
    config: BuildConfig,
    progress: Progress = no_progress,
    resume: PartialBuild | None = None,
    workers: Workers | None = None,
) -> BuildResult:
    """Scan the objects table's partition keys into a new filter generation and store it.

    With ``resume``, only its missing shards are scanned, with the generation's own parameters,
    so they OR-merge with the parts already stored (which are reused as they are). Each slice
    the workers cut is one stored shard of the generation.
    """
    start_loading_kernels()
    with cyclic_gc_paused():
        pool = workers or LocalWorkers(config.workers)
        return _build_filter(store, config, progress, resume, pool)


def _build_filter(
    store: Store,
    config: BuildConfig,
    progress: Progress,
    resume: PartialBuild | None,
    pool: Workers,
) -> BuildResult:
    started = time.monotonic()
    params = _resumed_params(resume) if resume else _fresh_params(store, config)
    scope = scope_of(store, config.bucket)
    shards = list(resume.missing) if resume else build_shards(config, pool)
    # The cap is the total, shared by the slices scanning at the time.
    share = config.scan.over(store.traits.scan_defaults).shared(pool.sharers())

    def build_part(part_store: Store, shard: Shard, report: Progress) -> _PartResult:
        filt = new_filter(params.engine, params.capacity, params.fpr, params.salt)
        if params.shape is not None and (filt.m, filt.k) != params.shape:
            raise FilterMismatch(
                f"generation {params.generation}: shard {shard} would get (m, k) ="
                f" {(filt.m, filt.k)}, its other parts have {params.shape}"
            )
        partitions = inserted = 0
        # Ancestors are inserted once per partition below them: cheap with the compiled kernels
        # only, so wait for them (they loaded while the filter was sized).
        finish_loading_kernels()
        throttle = ScanThrottle(share)
        with share.shared_by.joined():
            for batch in part_store.scan_object_keys(shard, config.bucket, throttle):
                buf, starts, ends = packed_ancestors(batch)
                partitions += len(batch)
                inserted += len(starts)
                if len(starts):
                    filt.add_ranges(buf, starts, ends)
                report("build", partitions, None)
        header, header_bytes, body = serialize(
            filt,
            expected_n=params.capacity,
            target_p=params.fpr,
            snapshot_us=params.snapshot_us,
            shard_index=shard.index,
            shard_count=shard.count,
            items=inserted,
            scope=scope,
        )
        if config.persist:
            save_filter_part(part_store, params.generation, header, header_bytes, body)
        scanned = throttle.stats()
        return _PartResult(shard.index, partitions, inserted, header_bytes, body, scanned)

    whole = config.shard.count == 1 and resume is None
    previous = store.get_state(scanned_count_key(scope)) if whole else None
    # What this build's progress expects: the last whole build's count; on a first build the
    # folder rows, where counted (each object partition but a bucket's root is a directory).
    total = int(previous) if previous else params.sizing.folder_rows if whole else None
    expected = expecting(progress, "build", total)
    scanning = time.monotonic()
    built = pool.map_shards(store, shards, build_part, "build", expected) if shards else []
    scan = merge_scans(
        [p.scan for p in built], min(len(shards), pool.parallelism), time.monotonic() - scanning
    )
    stored = resume.reused if resume else ()
    reused = [_PartResult(p.shard, 0, 0, p.header_bytes, p.body) for p in stored]
    merged, union_bits = _result(
        params, built, reused, time.monotonic() - started, keep=not config.persist
    )
    result = replace(merged, scan=scan)
    if config.persist:
        if whole:
            store.put_state(scanned_count_key(scope), str(result.partitions_scanned))
        if len(built) + len(reused) == result.header.shard_count:
            # The whole generation: 'filters list' then shows the fill measured here.
            record_merged_bits(store, scope, result.generation, union_bits)
    held = distinct_keys(result.header.m, result.header.k, union_bits / result.header.m)
    rows = params.sizing.folder_rows
    if rows is not None and config.shard.count == 1 and held is not None and config.persist:
        # What the next build scales by the index's growth (shards share ancestors, so only
        # the merged filter counts them once).
        record = SizingRecord(params.generation, rows, held)
        save_sizing_record(store, scope, record)
    return result


def _result(
    params: _Params,
    built: list[_PartResult],
    reused: list[_PartResult],
    seconds: float,
    *,
    keep: bool = False,
) -> tuple[BuildResult, int]:
    """Merge the parts (they share m, k and salt: their OR is the filter of the whole slice):
    the result, with fill and rate as ``filters list`` shows them, and the union's set bits;
    with ``keep``, the merged filter is returned too, as a stored one would be loaded."""
    parts = sorted(built + reused, key=lambda p: p.shard)
    decoded = [deserialize(part.header_bytes, part.body) for part in parts]
    header, union = decoded[0]
    set_bits = [round(union.fill_ratio() * union.m)]
    for _header, filt in decoded[1:]:
        set_bits.append(round(filt.fill_ratio() * filt.m))
        union |= filt
    union_bits = round(union.fill_ratio() * union.m)
    whole = len(parts) == header.shard_count
    fill = merged_fill(header.m, set_bits, union_bits if whole else None)
    result = BuildResult(
        generation=params.generation,
        header=header,
        sizing=params.sizing,
        partitions_scanned=sum(p.partitions for p in built),
        keys_inserted=sum(p.inserted for p in built),
        fill_ratio=fill,
        estimated_fpr=fpr_at(fill, header.k),
        filter_bytes=header.body_len,
        seconds=seconds,
        built_shards=tuple(p.shard for p in built),
        reused_shards=tuple(p.shard for p in reused),
        in_memory=merge_shards(decoded) if keep else None,
    )
    return result, union_bits
