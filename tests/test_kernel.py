"""The compiled kernels against the ``mmh3`` reference: same hash bit for bit, same filter bits.

Filters stored before the kernels were built with the ``mmh3`` package's digests (the path kept as
``_add_many_mmh3``); the kernels must set the same bits and answer the same, or stored filters
would give false negatives.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import mmh3
import numpy as np
import pytest
from numba import njit

from dircleaner.filter import bloom
from dircleaner.filter import kernel as bloomkernel
from dircleaner.filter.bloom import BloomFilter, pack_keys
from dircleaner.filter.format import deserialize, serialize

SEEDS = (0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 2654435761)


@pytest.fixture(scope="module", autouse=True)
def kernels() -> Iterator[None]:
    assert bloom.load_kernels()
    yield


def _adversarial_keys() -> list[bytes]:
    rng = random.Random(16)
    keys: list[bytes] = []
    for length in range(0, 301):  # every block count up to 18 and every tail length
        keys.append(bytes(rng.getrandbits(8) for _ in range(length)))
        keys.append(b"\xff" * length)
        keys.append(b"\x00" * length)
        keys.append(bytes([0x80 | (i & 0x7F) for i in range(length)]))
    for length in (1, 7, 8, 9, 15, 16, 17, 31, 33, 150):
        text = "".join(rng.choice("aé€𝄞/\0ñ日本") for _ in range(length))
        keys.append(text.encode("utf-8"))
    keys.append(b"default\0logs/2026/04/11/AA/")
    return keys


def _reference(keys: list[bytes], seed: int) -> np.ndarray:
    raw = b"".join(mmh3.hash_bytes(key, seed) for key in keys)
    return np.frombuffer(raw, dtype="<u8").reshape(-1, 2)


@pytest.mark.parametrize("seed", SEEDS)
def test_hash_matches_mmh3_bit_for_bit(seed: int) -> None:
    keys = _adversarial_keys()
    buf, offsets = pack_keys(keys)
    got = bloomkernel.hash_many(buf, offsets[:-1], offsets[1:], seed)
    assert np.array_equal(got, _reference(keys, seed))


def test_hash_of_keys_packed_at_every_alignment() -> None:
    """Unaligned loads: the same key hashed at every offset of the buffer hashes the same."""
    key = bytes(range(40))
    for pad in range(16):
        buf = np.frombuffer(b"\xaa" * pad + key + b"\x55" * 3, dtype=np.uint8)
        offsets = np.array([pad, pad + len(key)], dtype=np.int64)
        assert np.array_equal(
            bloomkernel.hash_many(buf, offsets[:-1], offsets[1:], 9), _reference([key], 9)
        )


@njit
def _mods(h: np.ndarray, m: int) -> np.ndarray:
    mm = np.uint64(m)
    reciprocal = bloomkernel._reciprocal(mm)
    out = np.empty_like(h)
    for i in range(h.size):
        out[i] = bloomkernel._mod(h[i], mm, reciprocal)
    return out


@pytest.mark.parametrize(
    "m", [64, 128, 960, 1 << 20, 9_584_960, 287_551_040, (1 << 40) + 64, (1 << 63) - 64]
)
def test_mod_without_division_is_exact(m: int) -> None:
    rng = np.random.default_rng(m % 1000)
    h = rng.integers(0, 2**64 - 1, size=20_000, dtype=np.uint64, endpoint=True)
    top = (2**64 // m) * m  # the last multiple of m below 2**64 (2**64 itself wraps to 0)
    edges = [0, 1, m - 1, m, m + 1, 2**64 - 1, 2**64 - 2, top % 2**64, top - 1, top - m + 1]
    h = np.concatenate([h, np.array(edges, dtype=np.uint64)])
    assert np.array_equal(_mods(h, m), h % np.uint64(m))


@pytest.mark.parametrize("m", [64, 960, 9_584_960, 287_551_040, (1 << 40) + 64, (1 << 63) - 64])
def test_positions_are_the_reduced_sums_of_the_double_hash(m: int) -> None:
    keys = _adversarial_keys()
    buf, offsets = pack_keys(keys)
    starts, ends = offsets[:-1], offsets[1:]
    k = 23  # enough steps that many keys' sums wrap past 2**64
    mm = np.uint64(m)
    positions = np.empty(len(keys) * k, dtype=np.uint64)
    reciprocal = bloomkernel._reciprocal(mm)
    bloomkernel._positions(
        positions, mm, reciprocal, k, np.uint64(3), buf, starts, ends, 0, len(keys)
    )
    expected = [
        (int(h1) + i * int(h2)) % 2**64 % m for h1, h2 in _reference(keys, 3) for i in range(k)
    ]
    assert positions.tolist() == expected


def _keys(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    return [
        f"b-{rng.randrange(3)}\0d{rng.randrange(10**6)}/é{i}/{'x' * rng.randrange(40)}/".encode()
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("n", "p", "salt"), [(1, 0.5, 0), (100, 0.01, 7), (3000, 0.005, 9), (5000, 0.001, 0xFFFFFFFF)]
)
def test_kernel_sets_the_bits_the_mmh3_path_sets(n: int, p: float, salt: int) -> None:
    keys = _keys(n, salt)
    reference = BloomFilter.for_capacity(n, p, salt)
    reference._add_many_mmh3(keys)
    ours = BloomFilter.for_capacity(n, p, salt)
    ours.add_many(keys)
    assert ours == reference


def test_filter_stored_by_the_mmh3_path_answers_the_same() -> None:
    """A filter built and serialized the old way, loaded and queried through the kernels."""
    inserted = _keys(20_000, 1)
    others = _keys(20_000, 2)
    old = BloomFilter.for_capacity(20_000, 0.01, 12345)
    old._add_many_mmh3(inserted)
    _, header_bytes, body = serialize(
        old,
        expected_n=20_000,
        target_p=0.01,
        snapshot_us=1,
        shard_index=0,
        shard_count=1,
        items=len(inserted),
        scope="s",
    )
    _, loaded = deserialize(header_bytes, body)
    assert isinstance(loaded, BloomFilter)
    assert loaded.contains_many(inserted).all()
    expected = old._contains_many_mmh3(others)
    assert np.array_equal(loaded.contains_many(others), expected)
    assert 0 < int(expected.sum()) < len(others)  # some false positives: the test can tell
    assert [key in loaded for key in others[:300]] == expected[:300].tolist()


# k from 1 to 17, with the 7 and the 8 of the default rates (the kernel unrolls those two)
RATES = (0.5, 0.1, 0.05, 0.02, 0.01, 0.005, 0.001, 1e-5)


def test_the_rates_reach_the_unrolled_and_the_general_k() -> None:
    ks = {BloomFilter.for_capacity(2_000, p, 0).k for p in RATES}
    assert {7, 8} <= ks and len(ks) == len(RATES)


@pytest.mark.parametrize("p", RATES)
def test_contains_answers_as_the_mmh3_path_for_every_k(p: float) -> None:
    inserted = _keys(2_000, 3)
    others = _keys(6_000, 4)
    filt = BloomFilter.for_capacity(1_000, p, 77)  # over capacity: false positives to tell apart
    filt.add_many(inserted)
    assert filt.contains_many(inserted).all()
    expected = filt._contains_many_mmh3(others)
    assert np.array_equal(filt.contains_many(others), expected)
    assert 0 < int(expected.sum()) < len(others)


def test_str_keys_and_their_utf8_bytes_are_one_key() -> None:
    keys = ["a/é/", "日本/", "", "x" * 17]
    filt = BloomFilter.for_capacity(100, 0.01, 3)
    filt.add_many(keys)
    assert filt.contains_many([k.encode() for k in keys]).all()
    assert filt.contains_many(keys).all()


def test_packed_and_list_paths_agree_and_fall_back() -> None:
    keys = _keys(3000, 5)
    packed = BloomFilter.for_capacity(3000, 0.01, 11)
    packed.add_packed(*pack_keys(keys))
    listed = BloomFilter.for_capacity(3000, 0.01, 11)
    listed.add_many(keys)
    assert packed == listed
    queries = _keys(3000, 6)
    assert np.array_equal(
        packed.contains_packed(*pack_keys(queries)), listed.contains_many(queries)
    )
    saved, bloom._kernels = bloom._kernels, None
    try:
        fallback = BloomFilter.for_capacity(3000, 0.01, 11)
        fallback.add_packed(*pack_keys(keys))
        answers = fallback.contains_packed(*pack_keys(queries))
    finally:
        bloom._kernels = saved
    assert fallback == packed
    assert np.array_equal(answers, packed.contains_many(queries))
