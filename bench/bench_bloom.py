"""Microbenchmarks: batch add / contains of 1M directory keys, our engine vs the alternatives.

Run with ``pytest bench/ --benchmark-only``. Targets: the mmh3 engine ≥ 10× pybloom-live's
per-key loop, within ~2× of rbloom given the same mmh3 hash, and ≥ 30M keys/s per core (a 1M-key
round in ≤ 33 ms) for the compiled kernels on a packed batch. ``*_packed`` times the kernels
alone (keys already one buffer plus offsets), ``ours`` adds packing a list of bytes, and
``ours_mmh3_path`` is the engine without the kernels (one ``mmh3`` call per key).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mmh3
import pybloom_live
import pytest
import rbloom

from dircleaner.filter import bloom
from dircleaner.filter.bloom import BloomFilter, pack_keys

N = 1_000_000
P = 0.01
SALT = 0x5EED
ROUNDS = 3


def mmh3_signed(key: bytes) -> int:
    """The brief's portable rbloom hash: MurmurHash3 x64 128 as a signed 128-bit int."""
    return int.from_bytes(mmh3.hash_bytes(key), "little", signed=True)


# rbloom with mmh3 called straight from Rust: one C call per key, no Python frame in between
mmh3_signed_c: Callable[[bytes], int] = mmh3.mmh3_x64_128_sintdigest


@pytest.fixture(scope="module")
def keys() -> list[bytes]:
    """1M directory-like keys, as the metastore builds them."""
    return [f"bucket\0logs/2026/{i % 12:02d}/{i % 28:02d}/{i:08x}/".encode() for i in range(N)]


@pytest.fixture(scope="module", autouse=True)
def kernels() -> None:
    """Compiled kernels loaded (and compiled, on a first run) before any timing."""
    assert bloom.load_kernels()


@pytest.fixture(scope="module")
def packed(keys: list[bytes]) -> tuple[Any, Any]:
    """The keys as one byte buffer and offsets, as a scan batch would hand them over."""
    return pack_keys(keys)


@pytest.fixture(scope="module")
def text_keys(keys: list[bytes]) -> list[str]:
    """The same keys as ``str``: pybloom-live's cheapest input type."""
    return [key.decode() for key in keys]


def run_add(benchmark: Any, fresh: Callable[[], Any], add_all: Callable[[Any], None]) -> None:
    """Time ``add_all(filter)`` on a fresh filter each round."""
    benchmark.group = "add 1M"
    benchmark.pedantic(add_all, setup=lambda: ((fresh(),), {}), rounds=ROUNDS, iterations=1)


def run_contains(benchmark: Any, filled: Any, probe_all: Callable[[Any], object]) -> None:
    """Time ``probe_all(filter)`` on a filter already holding the keys."""
    benchmark.group = "contains 1M"
    benchmark.pedantic(probe_all, args=(filled,), rounds=ROUNDS, iterations=1)


# -- ours --------------------------------------------------------------------------------------


def test_add_ours(benchmark: Any, keys: list[bytes]) -> None:
    run_add(benchmark, lambda: BloomFilter.for_capacity(N, P, SALT), lambda f: f.add_many(keys))


def test_contains_ours(benchmark: Any, keys: list[bytes]) -> None:
    filt = BloomFilter.for_capacity(N, P, SALT)
    filt.add_many(keys)
    run_contains(benchmark, filt, lambda f: f.contains_many(keys))


def test_add_ours_packed(benchmark: Any, packed: tuple[Any, Any]) -> None:
    run_add(
        benchmark, lambda: BloomFilter.for_capacity(N, P, SALT), lambda f: f.add_packed(*packed)
    )


def test_contains_ours_packed(benchmark: Any, keys: list[bytes], packed: tuple[Any, Any]) -> None:
    filt = BloomFilter.for_capacity(N, P, SALT)
    filt.add_many(keys)
    run_contains(benchmark, filt, lambda f: f.contains_packed(*packed))


def test_add_ours_mmh3_path(benchmark: Any, keys: list[bytes]) -> None:
    run_add(
        benchmark, lambda: BloomFilter.for_capacity(N, P, SALT), lambda f: f._add_many_mmh3(keys)
    )


def test_contains_ours_mmh3_path(benchmark: Any, keys: list[bytes]) -> None:
    filt = BloomFilter.for_capacity(N, P, SALT)
    filt.add_many(keys)
    run_contains(benchmark, filt, lambda f: f._contains_many_mmh3(keys))


def test_pack_keys(benchmark: Any, keys: list[bytes]) -> None:
    """What the list path adds to the kernels: one join and one length per key."""
    benchmark.group = "pack 1M"
    benchmark.pedantic(pack_keys, args=(keys,), rounds=ROUNDS, iterations=1)


# -- pybloom-live: its own per-key add / `in` loop -----------------------------------------------


def pybloom_add(filt: Any, keys: list[str]) -> None:
    """pybloom-live's per-key loop."""
    add = filt.add
    for key in keys:
        add(key)


def test_add_pybloom_live(benchmark: Any, text_keys: list[str]) -> None:
    run_add(
        benchmark,
        lambda: pybloom_live.BloomFilter(capacity=N, error_rate=P),
        lambda f: pybloom_add(f, text_keys),
    )


def test_contains_pybloom_live(benchmark: Any, text_keys: list[str]) -> None:
    filt = pybloom_live.BloomFilter(capacity=N, error_rate=P)
    pybloom_add(filt, text_keys)
    run_contains(benchmark, filt, lambda f: [key in f for key in text_keys])


# -- rbloom (Rust) with mmh3 as its hash function ------------------------------------------------


@pytest.mark.parametrize("hash_func", [mmh3_signed, mmh3_signed_c], ids=["py-lambda", "c-direct"])
def test_add_rbloom(benchmark: Any, keys: list[bytes], hash_func: Callable[[bytes], int]) -> None:
    run_add(benchmark, lambda: rbloom.Bloom(N, P, hash_func), lambda f: f.update(keys))


@pytest.mark.parametrize("hash_func", [mmh3_signed, mmh3_signed_c], ids=["py-lambda", "c-direct"])
def test_contains_rbloom(
    benchmark: Any, keys: list[bytes], hash_func: Callable[[bytes], int]
) -> None:
    filt = rbloom.Bloom(N, P, hash_func)
    filt.update(keys)
    run_contains(benchmark, filt, lambda f: [key in f for key in keys])


# -- a Python set: the exact, memory-hungry floor ------------------------------------------------


def test_add_set(benchmark: Any, keys: list[bytes]) -> None:
    run_add(benchmark, set, lambda s: s.update(keys))


def test_contains_set(benchmark: Any, keys: list[bytes]) -> None:
    run_contains(benchmark, set(keys), lambda s: [key in s for key in keys])
