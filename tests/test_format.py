"""Tests of the serialized filter format: round trips, corruption detection, shard merging."""

from __future__ import annotations

import struct
import zlib
from dataclasses import replace

import pytest

from dircleaner.errors import DircleanerError, FilterCorrupt, FilterMismatch
from dircleaner.filter.bloom import BloomFilter, optimal_params
from dircleaner.filter.engines import Filter, PyBloomLiveFilter, new_filter
from dircleaner.filter.format import (
    FORMAT_VERSION,
    MAGIC,
    FilterHeader,
    decode_header,
    deserialize,
    encode_header,
    merge_shards,
    serialize,
)

N, P, SALT = 2000, 0.01, 77
SNAPSHOT = 1_767_225_600_000_000
SCOPE = "cassandra://meta/ks.folders?bucket=logs"


def keys(n: int, tag: str) -> list[bytes]:
    """Directory-like keys, distinct per (tag, i)."""
    return [f"logs\0{tag}/{i:06d}/".encode() for i in range(n)]


def built(engine: str, key_list: list[bytes], salt: int = SALT) -> Filter:
    """A filter of ``engine`` sized (N, P) holding ``key_list``."""
    filt = new_filter(engine, N, P, salt)
    filt.add_many(key_list)
    return filt


def shard(filt: Filter, index: int, count: int, **overrides: object) -> tuple[FilterHeader, Filter]:
    """A (header, filter) part as merge_shards takes it."""
    fields: dict[str, object] = {
        "expected_n": N,
        "target_p": P,
        "snapshot_us": SNAPSHOT,
        "shard_index": index,
        "shard_count": count,
        "items": 100 + index,
        "scope": SCOPE,
    }
    header, _, _ = serialize(filt, **fields)  # type: ignore[arg-type]
    return replace(header, **overrides), filt  # type: ignore[arg-type]


def blob(engine: str = "mmh3") -> tuple[bytes, bytes]:
    """Header bytes and body of a small serialized filter."""
    _, head, body = serialize(
        built(engine, keys(500, "a")),
        expected_n=N,
        target_p=P,
        snapshot_us=SNAPSHOT,
        shard_index=0,
        shard_count=1,
        items=500,
        scope=SCOPE,
    )
    return head, body


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["mmh3", "pybloom-live"])
def test_round_trip(engine: str) -> None:
    filt = built(engine, keys(1500, "a"))
    header, head, body = serialize(
        filt,
        expected_n=N,
        target_p=P,
        snapshot_us=SNAPSHOT,
        shard_index=2,
        shard_count=3,
        items=1500,
        scope="sqlite:///tmp/é.db",
    )
    assert header.engine == engine and header.hash_name == filt.hash_name
    assert (header.m, header.k, header.salt) == (filt.m, filt.k, SALT)
    assert header.body_len == len(body) == filt.nbytes
    assert header.body_crc == zlib.crc32(body)
    assert head.startswith(MAGIC) and struct.unpack_from("<8sHH", head)[2] == len(head)
    again_header, again = deserialize(head, body)
    assert again_header == header
    assert type(again) is type(filt)
    assert again == filt
    assert again.contains_many(keys(1500, "a")).all()
    assert again.bits_bytes() == body


def test_header_round_trip_exact_fields() -> None:
    header = FilterHeader(
        engine="mmh3",
        hash_name="mmh3-x64-128-dh",
        salt=2**32 - 1,
        m=2**63,
        k=2**32 - 1,
        expected_n=2**64 - 1,
        target_p=1e-9,
        snapshot_us=-5,
        shard_index=7,
        shard_count=8,
        items=2**64 - 1,
        scope="ü" * 1000,
        body_len=2**64 - 1,
        body_crc=0xFFFFFFFF,
    )
    data = encode_header(header)
    assert decode_header(data) == header
    assert decode_header(data + b"body follows") == header
    assert struct.unpack_from("<H", data, 10)[0] == len(data)


def test_encode_header_rejects_out_of_range() -> None:
    header, _, _ = serialize(
        built("mmh3", []),
        expected_n=N,
        target_p=P,
        snapshot_us=0,
        shard_index=0,
        shard_count=1,
        items=0,
        scope="",
    )
    with pytest.raises(ValueError, match="out of range"):
        encode_header(replace(header, salt=2**32))
    with pytest.raises(ValueError, match="255"):
        encode_header(replace(header, engine="e" * 256))
    with pytest.raises(ValueError, match="scope too long"):
        encode_header(replace(header, scope="s" * 65_500))


def test_serialize_rejects_inconsistent_arguments() -> None:
    filt = built("mmh3", [])
    common = {"snapshot_us": 0, "items": 0, "scope": ""}
    with pytest.raises(ValueError, match="shard index"):
        serialize(filt, expected_n=N, target_p=P, shard_index=1, shard_count=1, **common)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sized for n"):
        serialize(filt, expected_n=N + 1, target_p=P, shard_index=0, shard_count=1, **common)  # type: ignore[arg-type]


# -- corruption detection ----------------------------------------------------------------------


def flip(data: bytes, index: int) -> bytes:
    """``data`` with one byte inverted."""
    return data[:index] + bytes([data[index] ^ 0xFF]) + data[index + 1 :]


def test_flipped_body_byte_fails_body_checksum() -> None:
    head, body = blob()
    with pytest.raises(FilterCorrupt, match=r"^body checksum mismatch"):
        deserialize(head, flip(body, len(body) // 3))


def test_every_single_body_byte_flip_is_detected() -> None:
    head, body = blob("pybloom-live")
    for index in range(0, len(body), 7):
        with pytest.raises(FilterCorrupt, match="body checksum"):
            deserialize(head, flip(body, index))


def test_flipped_header_field_fails_header_checksum() -> None:
    head, body = blob()
    salt_offset = 12 + 1 + len(b"mmh3") + 1 + len(b"mmh3-x64-128-dh")
    with pytest.raises(FilterCorrupt, match=r"^header checksum mismatch$"):
        deserialize(flip(head, salt_offset), body)
    with pytest.raises(FilterCorrupt, match=r"^header checksum mismatch$"):
        deserialize(flip(head, len(head) - 1), body)  # the stored CRC itself


def test_every_single_header_byte_flip_is_detected() -> None:
    head, body = blob()
    for index in range(len(head)):
        with pytest.raises(FilterCorrupt):
            deserialize(flip(head, index), body)


def test_truncated_body() -> None:
    head, body = blob()
    expected = rf"^truncated body: expected {len(body)} bytes, got 10$"
    with pytest.raises(FilterCorrupt, match=expected):
        deserialize(head, body[:10])
    with pytest.raises(FilterCorrupt, match="oversized body"):
        deserialize(head, body + b"\0")


@pytest.mark.parametrize("cut", [0, 5, 12, 40])
def test_truncated_header(cut: int) -> None:
    head, body = blob()
    with pytest.raises(FilterCorrupt, match=r"^truncated header$"):
        deserialize(head[:cut], body)


def test_bad_magic() -> None:
    head, body = blob()
    with pytest.raises(FilterCorrupt, match=r"^bad magic$"):
        deserialize(b"XXBLOOM\x00" + head[8:], body)
    with pytest.raises(FilterCorrupt, match=r"^bad magic$"):
        decode_header(b"not a filter at all")


def test_wrong_version() -> None:
    head, body = blob()
    bumped = head[:8] + struct.pack("<H", FORMAT_VERSION + 1) + head[10:]
    with pytest.raises(FilterCorrupt, match=f"^unsupported format version {FORMAT_VERSION + 1}$"):
        deserialize(bumped, body)


def test_errors_are_dircleaner_errors() -> None:
    assert issubclass(FilterCorrupt, DircleanerError)
    assert issubclass(FilterMismatch, DircleanerError)


def reencode(head: bytes, **changes: object) -> bytes:
    """The header re-encoded (valid checksum) with some fields changed."""
    return encode_header(replace(decode_header(head), **changes))  # type: ignore[arg-type]


def test_unknown_engine_and_hash_are_mismatches() -> None:
    head, body = blob()
    with pytest.raises(FilterMismatch, match="unknown filter engine 'redis'"):
        deserialize(reencode(head, engine="redis"), body)
    with pytest.raises(FilterMismatch, match="xxh3"):
        deserialize(reencode(head, hash_name="xxh3"), body)


def test_parameters_inconsistent_with_body_are_mismatches() -> None:
    head, body = blob()
    with pytest.raises(FilterMismatch, match="does not fit engine mmh3"):
        deserialize(reencode(head, m=64), body)
    head, body = blob("pybloom-live")
    with pytest.raises(FilterMismatch, match="does not fit engine pybloom-live"):
        deserialize(reencode(head, expected_n=N * 2), body)


# -- merge_shards ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["mmh3", "pybloom-live"])
def test_merge_shards_ok(engine: str) -> None:
    part0, part1 = built(engine, keys(600, "a")), built(engine, keys(700, "b"))
    before = part0.bits_bytes()
    header, merged = merge_shards([shard(part1, 1, 2), shard(part0, 0, 2)])
    assert merged.contains_many(keys(600, "a") + keys(700, "b")).all()
    assert merged == built(engine, keys(600, "a") + keys(700, "b"))
    assert part0.bits_bytes() == before  # inputs untouched
    assert (header.shard_index, header.shard_count, header.items) == (0, 1, 100 + 101)
    body = merged.bits_bytes()
    assert (header.body_len, header.body_crc) == (len(body), zlib.crc32(body))
    assert deserialize(encode_header(header), body)[1] == merged


def test_merge_single_shard() -> None:
    part = built("mmh3", keys(10, "a"))
    header, merged = merge_shards([shard(part, 0, 1)])
    assert merged == part and merged is not part
    assert header.items == 100


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scope", "cassandra://other/ks.folders"),
        ("snapshot_us", SNAPSHOT + 1),
        ("shard_count", 3),
        ("target_p", 0.02),
    ],
)
def test_merge_refuses_header_mismatch(field: str, value: object) -> None:
    parts = [shard(built("mmh3", []), 0, 2), shard(built("mmh3", []), 1, 2, **{field: value})]
    with pytest.raises(FilterMismatch, match=rf"^shard 1 differs from shard 0 in {field}: "):
        merge_shards(parts)


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (BloomFilter(64 * 400, 7, SALT), "m"),
        (BloomFilter(optimal_params(N, P)[0], 3, SALT), "k"),
        (BloomFilter.for_capacity(N, P, SALT + 1), "salt"),
        (PyBloomLiveFilter(N, P, SALT), "engine"),
    ],
)
def test_merge_refuses_filter_parameter_mismatch(other: Filter, field: str) -> None:
    base = built("mmh3", [])
    first = shard(base, 0, 2)
    second = replace(
        first[0],
        shard_index=1,
        engine=other.engine,
        hash_name=other.hash_name,
        m=other.m,
        k=other.k,
        salt=other.salt,
    )
    with pytest.raises(FilterMismatch, match=rf"^shard 1 differs from shard 0 in {field}: "):
        merge_shards([first, (second, other)])


def test_merge_refuses_filter_not_matching_its_header() -> None:
    base = built("mmh3", [])
    salted = built("mmh3", [], salt=SALT + 1)
    header, _ = shard(base, 1, 2)
    with pytest.raises(FilterMismatch, match=r"^shard 1: filter salt"):
        merge_shards([shard(base, 0, 2), (header, salted)])


def test_merge_refuses_duplicate_shard() -> None:
    filt = built("mmh3", [])
    with pytest.raises(FilterMismatch, match=r"^duplicate shard index 1$"):
        merge_shards([shard(filt, 0, 3), shard(filt, 1, 3), shard(filt, 1, 3)])


def test_merge_refuses_incomplete_set() -> None:
    filt = built("mmh3", [])
    parts = [shard(filt, i, 4) for i in (3, 0, 1)]
    with pytest.raises(FilterMismatch, match=r"^incomplete shard set: have 0,1,3 of 4$"):
        merge_shards(parts)


def test_merge_refuses_out_of_range_index_and_empty() -> None:
    filt = built("mmh3", [])
    with pytest.raises(FilterMismatch, match="out of range"):
        merge_shards([shard(filt, 0, 2), shard(filt, 0, 2, shard_index=5)])
    with pytest.raises(ValueError, match="at least one"):
        merge_shards([])
