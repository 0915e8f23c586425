"""The job's bookkeeping on the key–value primitive, written once for every backend.

- Run state: space ``state``, one key per value (UTF-8).
- The run lease: space ``lease``, key the lease's name, value its owner; taken with an
  insert-if-absent and a TTL, renewed and handed over with a compare-and-set on the holder,
  released with a delete-if-equal, read linearizably (``fresh``).
- Filter cells: one space per part, ``filter|<generation>|<shard>``, its header and marker
  under keys ``m-1``/``m-2`` (so one prefix read fetches both) and its chunks under ``c<seq>``;
  and a small index space, ``filters``, keyed ``<generation>|<shard>``, that lists the parts
  (written before a part's first cell, removed after its cells). A part's cells are up to 1 MiB
  each: a backend pages a space a few values at a time.
"""

from __future__ import annotations

from dircleaner.store.kv import ANY, KeyValue, check_write

STATE_SPACE = "state"
LEASE_SPACE = "lease"
FILTER_INDEX_SPACE = "filters"
#: key prefix of a part's negative (header, marker) seqs, and of its chunks
META_PREFIX = "m"
CHUNK_PREFIX = "c"
#: how often taking a lease looks again at a holder that vanished meanwhile
_TAKE_ATTEMPTS = 3


def _get(kv: KeyValue, space: str, key: str, *, fresh: bool = False) -> bytes | None:
    for entry in kv.kv_read(space, key, fresh=fresh):
        if entry.key == key:
            return entry.value
    return None


# -- run state ------------------------------------------------------------------------------------
def put_state(kv: KeyValue, key: str, value: str) -> None:
    kv.kv_write(STATE_SPACE, key, value.encode("utf-8"))


def get_state(kv: KeyValue, key: str) -> str | None:
    raw = _get(kv, STATE_SPACE, key)
    return None if raw is None else raw.decode("utf-8", errors="replace")


# -- the run lease ----------------------------------------------------------------------------
def lease_holder(kv: KeyValue, name: str) -> str | None:
    raw = _get(kv, LEASE_SPACE, name, fresh=True)
    return None if raw is None else raw.decode("utf-8", errors="replace")


def try_acquire_lease(kv: KeyValue, name: str, owner: str, ttl_s: float) -> str | None:
    for _attempt in range(_TAKE_ATTEMPTS):
        if kv.kv_write(LEASE_SPACE, name, owner.encode("utf-8"), ttl_s=ttl_s, expect=None):
            return None
        holder = lease_holder(kv, name)
        if holder is not None:
            return holder
        # released or expired between the two: try to take it again
    return "unknown"


def replace_lease(kv: KeyValue, name: str, holder: str, owner: str, ttl_s: float) -> bool:
    return kv.kv_write(
        LEASE_SPACE, name, owner.encode("utf-8"), ttl_s=ttl_s, expect=holder.encode("utf-8")
    )


def release_lease(kv: KeyValue, name: str, owner: str) -> None:
    kv.kv_write(LEASE_SPACE, name, None, expect=owner.encode("utf-8"))


# -- filter cells -----------------------------------------------------------------------------
def _part_space(generation: str, shard: int) -> str:
    return f"filter|{generation}|{shard}"


def _cell_key(seq: int) -> str:
    return f"{META_PREFIX}{seq}" if seq < 0 else f"{CHUNK_PREFIX}{seq}"


def _cell_seq(key: str) -> int | None:
    try:
        return int(key[1:]) if key[:1] in (META_PREFIX, CHUNK_PREFIX) else None
    except ValueError:
        return None


def put_filter_cell(kv: KeyValue, generation: str, shard: int, seq: int, data: bytes) -> None:
    space, key = _part_space(generation, shard), _cell_key(seq)
    check_write(space, key, data, ANY)  # a cell too long is refused before the part is listed
    kv.kv_write(FILTER_INDEX_SPACE, f"{generation}|{shard}", b"")
    kv.kv_write(space, key, data)


def get_filter_cells(
    kv: KeyValue, generation: str, shard: int, *, meta_only: bool = False
) -> dict[int, bytes]:
    prefix = META_PREFIX if meta_only else ""
    cells: dict[int, bytes] = {}
    for key, value in kv.kv_read(_part_space(generation, shard), prefix):
        seq = _cell_seq(key)
        if seq is not None and (seq < 0 or not meta_only):
            cells[seq] = value
    return cells


def list_filter_parts(kv: KeyValue) -> list[tuple[str, int]]:
    parts: set[tuple[str, int]] = set()
    for key, _value in kv.kv_read(FILTER_INDEX_SPACE):
        generation, _, shard = key.rpartition("|")
        if generation and shard.lstrip("-").isdigit():
            parts.add((generation, int(shard)))
    return sorted(parts)


def delete_filter_generation(kv: KeyValue, generation: str) -> None:
    for gen, shard in list_filter_parts(kv):
        if gen == generation:
            kv.kv_clear(_part_space(gen, shard))
            kv.kv_write(FILTER_INDEX_SPACE, f"{gen}|{shard}", None)
