"""Filters in the store: chunked cells, a header, a completion marker written last, generations.

A generation is one build (all its shards share salt, m, k and snapshot time). Each shard's filter
is stored as cells of at most 1 MiB; the header cell goes first and the completion marker last, so
a crashed or partial build is recognisable and never used.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from dircleaner.errors import FilterCorrupt, FilterIncomplete, FilterMismatch, FilterNotFound
from dircleaner.filter.bloom import count_set_bits
from dircleaner.filter.engines import Filter
from dircleaner.filter.format import (
    FilterHeader,
    check_body,
    decode_header,
    deserialize,
    merge_shards,
)
from dircleaner.store.base import HEADER_SEQ, MARKER_SEQ, Store

CHUNK_BYTES = 1 << 20
# magic, chunks, body crc32, bits set (so listings show fill without reading the body)
_MARKER = struct.Struct("<8sIIQ")
#: version 1 markers (still read): no checksum of their own
_MARKER_MAGIC_V1 = b"DCDONE\x00\x00"
#: version 2 markers: the version 1 fields, then the crc32 of those 24 bytes
_MARKER_MAGIC = b"DCDONE\x00\x02"
_MARKER_CRC = struct.Struct("<I")


class _Marker(NamedTuple):
    chunks: int
    body_crc: int
    set_bits: int


def encode_marker(chunks: int, body_crc: int, set_bits: int) -> bytes:
    """A version 2 completion marker: its fields and their own checksum."""
    fields = _MARKER.pack(_MARKER_MAGIC, chunks, body_crc, set_bits)
    return fields + _MARKER_CRC.pack(zlib.crc32(fields))


def decode_marker(data: bytes) -> _Marker:
    """A completion marker's fields; FilterCorrupt if it is damaged (version 1 is still read)."""
    try:
        magic, chunks, body_crc, set_bits = _MARKER.unpack_from(data)
    except struct.error as exc:
        raise FilterCorrupt("unreadable completion marker") from exc
    if magic == _MARKER_MAGIC_V1 and len(data) == _MARKER.size:
        return _Marker(chunks, body_crc, set_bits)
    if magic != _MARKER_MAGIC or len(data) != _MARKER.size + _MARKER_CRC.size:
        raise FilterCorrupt("bad completion marker")
    (crc,) = _MARKER_CRC.unpack_from(data, _MARKER.size)
    if crc != zlib.crc32(data[: _MARKER.size]):
        raise FilterCorrupt("completion marker checksum mismatch")
    return _Marker(chunks, body_crc, set_bits)


def merged_fill(m: int, set_bits: Sequence[int], merged_bits: int | None = None) -> float:
    """Share of bits set in the OR of a generation's shards: exact from ``merged_bits`` (the
    merged filter's, as its build recorded them) or for one shard; else estimated from each
    shard's set bits, as if shards set bits independently (1 - prod(1 - fill_i)), which errs
    high since shards share ancestors.

    The one computation of a generation's fill: the build's summary and ``filters list`` both
    show it, so they agree."""
    if merged_bits is not None:
        return merged_bits / m
    empty = 1.0
    for bits in set_bits:
        empty *= 1.0 - bits / m
    return 1.0 - empty


def merged_bits_key(scope: str) -> str:
    """State key of the exact set bits of each stored generation of ``scope`` (its merged
    filter's; the shards' completion markers only give each shard's own)."""
    return f"filter_set_bits|{scope}"


def record_merged_bits(store: Store, scope: str, generation: str, set_bits: int) -> None:
    """Remember a whole generation's merged set bits, keeping those of the generations still
    stored (a lost race with another build of the scope only costs the estimate)."""
    present = {stored for stored, _shard in store.list_filter_parts()}
    known = {g: bits for g, bits in _merged_bits(store, scope).items() if g in present}
    known[generation] = set_bits
    store.put_state(merged_bits_key(scope), json.dumps(known, sort_keys=True))


def _merged_bits(store: Store, scope: str) -> dict[str, int]:
    raw = store.get_state(merged_bits_key(scope))
    try:
        parsed = json.loads(raw) if raw else {}
        return {str(g): int(bits) for g, bits in parsed.items()}
    except (ValueError, TypeError, AttributeError):
        return {}  # unreadable: the fill is estimated from the shards


def fpr_at(fill: float, k: int) -> float:
    """The effective false-positive rate of a filter with ``k`` hashes at ``fill``."""
    return fill**k


@dataclass(frozen=True, slots=True)
class ShardInfo:
    """One stored shard of a generation, as read from its header and marker."""

    shard: int
    header: FilterHeader | None
    complete: bool
    problem: str | None = None
    #: bits set in this shard's filter, from its completion marker
    set_bits: int | None = None
    #: the header, the marker or (once checked) the body is damaged (not merely missing: a
    #: build still running)
    corrupt: bool = False
    #: the body was read and checked against the marker and the header (``check_bodies``)
    body_checked: bool = False


@dataclass(frozen=True)
class GenerationInfo:
    """What the store holds of one generation's filter cells."""

    generation: str
    shards: tuple[ShardInfo, ...]
    #: the merged filter's set bits, as its build recorded them (None: not recorded)
    merged_set_bits: int | None = None

    @property
    def header(self) -> FilterHeader | None:
        """The first readable shard header (all shards of a generation agree on parameters)."""
        return next((s.header for s in self.shards if s.header is not None), None)

    @property
    def complete(self) -> bool:
        """Every shard of the ring is present, readable and marked complete."""
        header = self.header
        if header is None or any(not s.complete for s in self.shards):
            return False
        return sorted(s.shard for s in self.shards) == list(range(header.shard_count))

    def fill_ratio(self) -> float | None:
        """Share of bits set in the merged filter (``merged_fill``)."""
        header = self.header
        if header is None or any(s.set_bits is None for s in self.shards):
            return None
        return merged_fill(header.m, [s.set_bits or 0 for s in self.shards], self.merged_set_bits)

    def estimated_fpr(self) -> float | None:
        """The effective false-positive rate (``fpr_at``)."""
        fill, header = self.fill_ratio(), self.header
        return None if fill is None or header is None else fpr_at(fill, header.k)

    @property
    def corrupt(self) -> bool:
        """A shard's header, completion marker or (where checked) body is damaged."""
        return any(s.corrupt for s in self.shards)

    @property
    def bodies_checked(self) -> bool:
        """Every shard's body was read and checked (``check_bodies``), not only its header
        and marker."""
        return bool(self.shards) and all(s.body_checked for s in self.shards)

    @property
    def known_sound(self) -> bool | None:
        """False if damage was found, True if every shard was checked whole (header, marker
        and body) and is sound, None if some of it was not checked: a listing reads headers
        and markers only, and an unfinished shard has no marker to check its body against."""
        if self.corrupt:
            return False
        return True if self.complete and self.bodies_checked else None

    def describe_corruption(self) -> str:
        """The damaged shards and what is wrong with each."""
        return "; ".join(f"shard {s.shard}: {s.problem}" for s in self.shards if s.corrupt)

    def describe_incompleteness(self) -> str:
        header = self.header
        if header is None:
            return "; ".join(f"shard {s.shard}: {s.problem}" for s in self.shards if s.problem)
        problems = [f"shard {s.shard}: {s.problem}" for s in self.shards if s.problem]
        have = sorted(s.shard for s in self.shards if s.complete)
        if len(have) < header.shard_count:
            problems.append(
                f"incomplete shard set: have {','.join(map(str, have)) or 'none'}"
                f" of {header.shard_count}"
            )
        return "; ".join(problems) or "complete"


def save_filter_part(
    store: Store, generation: str, header: FilterHeader, header_bytes: bytes, body: bytes
) -> int:
    """Store one shard's filter; the completion marker is written last. Returns cells written."""
    shard = header.shard_index
    store.put_filter_cell(generation, shard, HEADER_SEQ, header_bytes)
    chunks = 0
    for offset in range(0, len(body), CHUNK_BYTES):
        store.put_filter_cell(generation, shard, chunks, body[offset : offset + CHUNK_BYTES])
        chunks += 1
    set_bits = count_set_bits(np.frombuffer(body, dtype=np.uint8)) if body else 0
    marker = encode_marker(chunks, zlib.crc32(body), set_bits)
    store.put_filter_cell(generation, shard, MARKER_SEQ, marker)
    return chunks + 2


def list_generations(store: Store) -> list[GenerationInfo]:
    """Every generation the store holds filter cells of, oldest first (ids sort by time)."""
    by_generation: dict[str, list[ShardInfo]] = {}
    for generation, shard in store.list_filter_parts():
        cells = store.get_filter_cells(generation, shard, meta_only=True)
        by_generation.setdefault(generation, []).append(_shard_info(shard, cells))
    infos = [GenerationInfo(gen, tuple(shards)) for gen, shards in sorted(by_generation.items())]
    recorded: dict[str, dict[str, int]] = {}
    for i, info in enumerate(infos):
        header = info.header
        if header is not None and info.complete:
            if header.scope not in recorded:
                recorded[header.scope] = _merged_bits(store, header.scope)
            bits = recorded[header.scope].get(info.generation)
            infos[i] = replace(info, merged_set_bits=bits)
    return infos


def check_bodies(store: Store, info: GenerationInfo) -> GenerationInfo:
    """``info`` with every marked shard's body read and checked, as a sweep checks it before
    use: chunks present, the checksum the completion marker records, the length and checksum
    the header records. A damaged body makes its shard corrupt (and not complete).

    It reads the whole filter (each shard's as large as the merged filter), so listings call it
    only when asked."""
    checked = []
    for shard in info.shards:
        if not shard.complete or shard.header is None:
            checked.append(shard)
            continue
        cells = store.get_filter_cells(info.generation, shard.shard)
        try:
            _header_bytes, body = _part_bytes(info.generation, shard.shard, cells)
            check_body(shard.header, body)
        except FilterCorrupt as exc:
            problem = str(exc).removeprefix(f"filter {info.generation} shard {shard.shard}: ")
            checked.append(
                replace(
                    shard,
                    complete=False,
                    problem=f"corrupt: {problem}",
                    corrupt=True,
                    body_checked=True,
                )
            )
            continue
        checked.append(replace(shard, body_checked=True))
    return replace(info, shards=tuple(checked))


def _shard_info(shard: int, cells: dict[int, bytes]) -> ShardInfo:
    header_bytes = cells.get(HEADER_SEQ)
    if header_bytes is None:
        return ShardInfo(shard, None, False, "no header")
    try:
        header = decode_header(header_bytes)
    except FilterCorrupt as exc:
        return ShardInfo(shard, None, False, f"corrupt header: {exc}", corrupt=True)
    if MARKER_SEQ not in cells:
        return ShardInfo(shard, header, False, "no completion marker (build crashed or running)")
    try:
        marker = decode_marker(cells[MARKER_SEQ])
    except FilterCorrupt as exc:
        return ShardInfo(shard, header, False, f"corrupt: {exc}", corrupt=True)
    return ShardInfo(shard, header, True, None, marker.set_bits)


def latest_complete(store: Store, scope: str, *, force: bool = False) -> GenerationInfo:
    """The newest complete generation built for ``scope``.

    A damaged generation newer than it (whose scope may be unreadable) is never passed over in
    silence: FilterCorrupt names it, unless ``force`` accepts the older one."""
    generations = [
        g
        for g in list_generations(store)
        if (g.header is None and g.corrupt) or (g.header is not None and g.header.scope == scope)
    ]
    corrupt = [g for g in generations if g.corrupt]
    for info in reversed(generations):
        if info.complete:
            newer = [g for g in corrupt if g.generation > info.generation]
            if newer and not force:
                raise FilterCorrupt(
                    f"filter {newer[-1].generation} is corrupt"
                    f" ({newer[-1].describe_corruption()}); not falling back to the older"
                    f" {info.generation} silently: rebuild ('dircleaner build'), or pass --force"
                    f" or --generation {info.generation} to use it"
                )
            return info
    if corrupt:
        newest_corrupt = corrupt[-1]
        raise FilterCorrupt(
            f"filter {newest_corrupt.generation} is corrupt"
            f" ({newest_corrupt.describe_corruption()}); rebuild it with 'dircleaner build'"
        )
    if generations:
        newest = generations[-1]
        raise FilterIncomplete(
            f"no complete filter for this store; newest {newest.generation}: "
            f"{newest.describe_incompleteness()}"
        )
    raise FilterNotFound("no filter has been built for this store yet (run 'dircleaner build')")


def find_generation(store: Store, generation: str) -> GenerationInfo:
    """The named generation, or FilterNotFound."""
    for info in list_generations(store):
        if info.generation == generation:
            return info
    raise FilterNotFound(f"no filter generation {generation!r} (see 'dircleaner filters list')")


def load_generation(store: Store, info: GenerationInfo, scope: str) -> tuple[FilterHeader, Filter]:
    """Read, verify and OR-merge every shard of a complete generation built for ``scope``."""
    if info.corrupt:
        raise FilterCorrupt(
            f"filter {info.generation} is corrupt: {info.describe_incompleteness()}"
        )
    if not info.complete:
        raise FilterIncomplete(
            f"filter {info.generation} is incomplete: {info.describe_incompleteness()}"
        )
    parts = []
    for shard_info in sorted(info.shards, key=lambda s: s.shard):
        cells = store.get_filter_cells(info.generation, shard_info.shard)
        parts.append(_read_part(info.generation, shard_info.shard, cells))
    header, filt = merge_shards(parts)
    if header.scope != scope:
        raise FilterMismatch(
            f"filter {info.generation} was built for {header.scope!r}, not {scope!r}"
        )
    return header, filt


def read_filter_part(store: Store, generation: str, shard: int) -> tuple[bytes, bytes]:
    """(header bytes, body) of one complete shard, checked against its completion marker."""
    cells = store.get_filter_cells(generation, shard)
    header_bytes, body = _part_bytes(generation, shard, cells)
    where = f"filter {generation} shard {shard}"
    try:
        deserialize(header_bytes, body)  # header CRC, body length and CRC, engine
    except FilterCorrupt as exc:
        raise FilterCorrupt(f"{where}: {exc}") from exc
    return header_bytes, body


def _read_part(generation: str, shard: int, cells: dict[int, bytes]) -> tuple[FilterHeader, Filter]:
    header_bytes, body = _part_bytes(generation, shard, cells)
    try:
        return deserialize(header_bytes, body)
    except FilterCorrupt as exc:
        raise FilterCorrupt(f"filter {generation} shard {shard}: {exc}") from exc


def _part_bytes(generation: str, shard: int, cells: dict[int, bytes]) -> tuple[bytes, bytes]:
    """The header and joined body of a marked part; FilterCorrupt if truncated or altered."""
    where = f"filter {generation} shard {shard}"
    if MARKER_SEQ not in cells:
        raise FilterCorrupt(f"{where}: unreadable completion marker")
    try:
        chunks, body_crc, _ = decode_marker(cells[MARKER_SEQ])
    except FilterCorrupt as exc:
        raise FilterCorrupt(f"{where}: {exc}") from exc
    missing = [seq for seq in range(chunks) if seq not in cells]
    if missing:
        raise FilterCorrupt(f"{where}: truncated: chunk {missing[0]} of {chunks} is missing")
    body = b"".join(cells[seq] for seq in range(chunks))
    if zlib.crc32(body) != body_crc:
        raise FilterCorrupt(f"{where}: body checksum mismatch against its completion marker")
    if HEADER_SEQ not in cells:
        raise FilterCorrupt(f"{where}: no header")
    return cells[HEADER_SEQ], body


def collect_garbage(store: Store, scope: str, keep: int, protect: Sequence[str] = ()) -> list[str]:
    """Delete all but the newest ``keep`` complete generations of ``scope`` (and older partials).

    Incomplete generations newer than the newest complete one are left alone: they may be builds
    still running on other hosts.
    """
    generations = [
        g for g in list_generations(store) if g.header is None or g.header.scope == scope
    ]
    complete = [g.generation for g in generations if g.complete]
    kept = set(complete[-keep:]) if keep > 0 else set()
    newest_complete = complete[-1] if complete else ""
    removed = []
    for info in generations:
        name = info.generation
        if name in kept or name in protect or name > newest_complete:
            continue
        store.delete_filter_generation(name)
        removed.append(name)
    return removed
