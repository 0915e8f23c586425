"""Pass 1 — build: every ancestor of every object partition into a Bloom filter, stored.

The objects table is partitioned by parent, so the non-empty directories are exactly the
ancestors (inclusive) of the partition keys that hold a live row: we scan partition keys only.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from dircleaner.bloom import new_filter
from dircleaner.errors import UsageError
from dircleaner.filterformat import FilterHeader, deserialize, serialize
from dircleaner.filterstore import save_filter_part
from dircleaner.generation import new_generation_id, parse_generation_id
from dircleaner.parallel import map_shards
from dircleaner.progress import Progress, no_progress
from dircleaner.sizing import SizingRecord, save_sizing_record, size_from_last_filter
from dircleaner.store.base import DirCountEstimate, PartitionKey, Shard, Store
from dircleaner.timeutil import now_us

#: recent-ancestor cache size (entries, ~100 bytes each): ancestors repeat heavily, but keys
#: arrive in token order, so siblings are far apart; at 30M directories 2**20 entries cut the
#: keys hashed from 57M to 38M for 28.5M distinct directories
ANCESTOR_CACHE = 1 << 20
#: the floor on filter capacity, so a tiny store still gets a sensible filter
MIN_CAPACITY = 1000
#: headroom over the previous run's exact count (the index grows between nights)
PREVIOUS_COUNT_HEADROOM = 1.2


@dataclass(frozen=True)
class BuildConfig:
    """What to build and how."""

    fpr: float = 0.01
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
    """What a build produced."""

    generation: str
    header: FilterHeader
    sizing: DirCountEstimate
    partitions_scanned: int
    keys_inserted: int
    fill_ratio: float
    estimated_fpr: float
    filter_bytes: int
    seconds: float


def scope_of(store: Store, bucket: str | None) -> str:
    """The scope a filter is valid for: the store's tables and the bucket restriction."""
    return f"{store.scope_id()}|bucket={bucket if bucket is not None else '*'}"


def swept_count_key(scope: str) -> str:
    """State key under which the sweep records the exact folder-row count of a scope."""
    return f"swept_dirs|{scope}"


def size_filter(store: Store, config: BuildConfig) -> DirCountEstimate:
    """How many directories to size the filter for, and how we know."""
    if config.expected_dirs is not None:
        return DirCountEstimate(config.expected_dirs, "--expected-dirs", exact=True)
    if store.cheap_exact_count:
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


def ancestor_keys(
    batches: Iterable[list[PartitionKey]], progress: Progress = no_progress
) -> Iterable[tuple[int, list[bytes]]]:
    """Per batch of partition keys: (partitions, filter keys of ancestors not seen recently).

    A partition key is distinct from every other one, so it is hashed without entering the
    cache; its ancestors are shared with other keys and are cached. If an ancestor is in the
    recent cache, all of its own ancestors went into the filter with it, so the walk stops there.
    """
    # Per bucket: directories recently inserted (keyed without the bucket, so a cache hit costs
    # no string building). Keys come in token order, so the bucket rarely changes between keys.
    recent: dict[str, set[str]] = {}
    done = 0
    last_bucket: str | None = None
    seen: set[str] = set()
    prefix = ""
    for batch in batches:
        keys: list[bytes] = []
        append = keys.append
        for _token, bucket, directory in batch:
            if bucket != last_bucket:
                seen = recent.setdefault(bucket, set())
                prefix = bucket + "\0"
                last_bucket = bucket
            if directory and directory not in seen:  # the root is never a filter key
                append((prefix + directory).encode("utf-8"))
            directory = directory[: directory.rfind("/", 0, len(directory) - 1) + 1]
            while directory and directory not in seen:
                seen.add(directory)
                append((prefix + directory).encode("utf-8"))
                directory = directory[: directory.rfind("/", 0, len(directory) - 1) + 1]
        if sum(map(len, recent.values())) > ANCESTOR_CACHE:
            recent.clear()
            last_bucket = None
        done += len(batch)
        progress("build", done, None)
        yield len(batch), keys


def _joined_generation(generation: str, now: int) -> tuple[int, int]:
    """(snapshot, salt) of a generation this build contributes shards to."""
    snapshot_us, salt = parse_generation_id(generation)
    if snapshot_us > now:
        # The snapshot must not postdate the scan, or deletes at T could shadow newer writes.
        raise UsageError(f"generation {generation} is in the future; make it with 'filters new-id'")
    return snapshot_us, salt


@dataclass(frozen=True)
class _PartResult:
    partitions: int
    inserted: int
    header_bytes: bytes
    body: bytes


def build_filter(
    store: Store, config: BuildConfig, progress: Progress = no_progress
) -> BuildResult:
    """Scan the objects table's partition keys into a new filter generation and store it."""
    started = time.monotonic()
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
    scope = scope_of(store, config.bucket)

    def build_part(part_store: Store, shard: Shard, report: Progress) -> _PartResult:
        filt = new_filter(config.engine, capacity, config.fpr, salt)
        partitions = inserted = 0
        scan = part_store.scan_object_partitions(shard, config.bucket)
        for count, keys in ancestor_keys(scan, report):
            partitions += count
            inserted += len(keys)
            if keys:
                filt.add_many(keys)
        header, header_bytes, body = serialize(
            filt,
            expected_n=capacity,
            target_p=config.fpr,
            snapshot_us=snapshot_us,
            shard_index=shard.index,
            shard_count=shard.count,
            items=inserted,
            scope=scope,
        )
        save_filter_part(part_store, generation, header, header_bytes, body)
        return _PartResult(partitions, inserted, header_bytes, body)

    shards = config.shard.split(config.workers) if config.workers > 1 else [config.shard]
    parts = map_shards(store, shards, build_part, "build", progress)
    if sizing.folder_rows is not None and config.shard.count == 1:
        # What the next build scales this filter's distinct count by.
        save_sizing_record(store, scope, SizingRecord(generation, sizing.folder_rows))
    # The parts share m, k and salt: their OR is the filter of this whole slice.
    header, union = deserialize(parts[0].header_bytes, parts[0].body)
    for part in parts[1:]:
        union |= deserialize(part.header_bytes, part.body)[1]
    fill = union.fill_ratio()
    return BuildResult(
        generation=generation,
        header=header,
        sizing=sizing,
        partitions_scanned=sum(p.partitions for p in parts),
        keys_inserted=sum(p.inserted for p in parts),
        fill_ratio=fill,
        estimated_fpr=union.estimated_fpr(),
        filter_bytes=header.body_len,
        seconds=time.monotonic() - started,
    )
