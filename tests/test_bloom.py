"""Tests of the Bloom filter (``filter/bloom.py``): sizing, correctness, false-positive rate,
unions, salts; the engines by name and the reference engine are in ``test_engines.py``."""

from __future__ import annotations

import math

import mmh3
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.filter.bloom import CHUNK, BloomFilter, optimal_params
from dircleaner.filter.engines import PyBloomLiveFilter
from dircleaner.filter.sizing import distinct_keys

SALT = 0x5EED


def dir_keys(n: int, tag: str = "in") -> list[bytes]:
    """Directory-like keys, distinct per (tag, i)."""
    return [f"bucket\0{tag}/2026/{i % 12:02d}/{i % 28:02d}/{i:08x}/".encode() for i in range(n)]


def spec_positions(key: bytes, m: int, k: int, salt: int) -> set[int]:
    """Bit positions exactly as the format defines them (independent of the engine code)."""
    digest = mmh3.hash_bytes(key, salt)
    h1 = int.from_bytes(digest[:8], "little")
    h2 = int.from_bytes(digest[8:], "little")
    return {((h1 + i * h2) % 2**64) % m for i in range(k)}


def set_bits(filt: BloomFilter) -> set[int]:
    """Indices of the set bits of a filter."""
    bits = np.unpackbits(np.frombuffer(filt.bits_bytes(), dtype=np.uint8), bitorder="little")
    return set(np.flatnonzero(bits).tolist())


# -- optimal_params ----------------------------------------------------------------------------


def test_optimal_params_textbook_1m_1pct() -> None:
    m, k = optimal_params(1_000_000, 0.01)
    assert k == 7
    assert m % 64 == 0
    assert m / 1_000_000 == pytest.approx(9.585, abs=0.001)
    exact = -1_000_000 * math.log(0.01) / math.log(2) ** 2
    assert exact <= m < exact + 64


@pytest.mark.parametrize(
    ("n", "p"), [(1, 0.5), (1000, 0.001), (12345, 0.05), (30_000_000, 0.01), (10, 0.9)]
)
def test_optimal_params_formula(n: int, p: float) -> None:
    m, k = optimal_params(n, p)
    assert m % 64 == 0 and m > 0
    assert m == math.ceil(math.ceil(-n * math.log(p) / math.log(2) ** 2) / 64) * 64
    assert k == max(1, round(m / n * math.log(2)))
    assert k >= 1


@pytest.mark.parametrize(
    ("n", "p"), [(0, 0.01), (-5, 0.01), (10, 0.0), (10, 1.0), (10, -0.1), (10, math.nan)]
)
def test_optimal_params_rejects(n: int, p: float) -> None:
    with pytest.raises(ValueError):
        optimal_params(n, p)


def test_constructor_rejects_bad_params() -> None:
    with pytest.raises(ValueError, match="multiple of 64"):
        BloomFilter(100, 3, 0)
    with pytest.raises(ValueError, match="k must"):
        BloomFilter(64, 0, 0)
    with pytest.raises(ValueError, match="salt"):
        BloomFilter(64, 3, 2**32)
    with pytest.raises(ValueError, match="words"):
        BloomFilter(128, 3, 0, np.zeros(3, dtype=np.uint64))


# -- hashing scheme ----------------------------------------------------------------------------


def test_positions_follow_the_spec() -> None:
    m, k = optimal_params(1000, 0.01)
    for key in (b"", b"a/", "ünïcode/".encode(), b"x" * 5000):
        filt = BloomFilter(m, k, SALT)
        filt.add_many([key])
        assert set_bits(filt) == spec_positions(key, m, k, SALT)
        single = BloomFilter(m, k, SALT)
        single.add(key)
        assert single == filt


# -- correctness -------------------------------------------------------------------------------

keys_strategy = st.lists(
    st.one_of(
        st.text(max_size=40),
        st.binary(max_size=40),
        st.text(min_size=1000, max_size=1200),
        st.just(""),
        st.just(b""),
    ),
    max_size=300,
)


@settings(max_examples=60, deadline=None)
@given(keys=keys_strategy, salt=st.integers(0, 2**32 - 1))
def test_no_false_negatives(keys: list[bytes | str], salt: int) -> None:
    filt = BloomFilter.for_capacity(len(keys) + 1, 0.01, salt)
    filt.update(iter(keys))
    assert filt.contains_many(keys).all()
    assert all(key in filt for key in keys)
    encoded = [key.encode() if isinstance(key, str) else key for key in keys]
    assert filt.contains_many(encoded).all()


@settings(max_examples=40, deadline=None)
@given(keys=keys_strategy, probes=keys_strategy)
def test_single_and_batch_api_agree(keys: list[bytes | str], probes: list[bytes | str]) -> None:
    m, k = optimal_params(max(len(keys), 1), 0.2)  # small filter: plenty of positives
    batch = BloomFilter(m, k, SALT)
    batch.add_many(keys)
    single = BloomFilter(m, k, SALT)
    for key in keys:
        single.add(key)
    assert single == batch
    assert batch.contains_many(probes).tolist() == [key in batch for key in probes]


def test_str_is_its_utf8_bytes() -> None:
    filt = BloomFilter.for_capacity(10, 0.01, SALT)
    filt.add("répertoire/")
    assert "répertoire/".encode() in filt
    assert filt.contains_many([b"r\xc3\xa9pertoire/", "répertoire/"]).all()


def test_heavy_duplicates_are_not_lost() -> None:
    """Many keys on few bits: the fancy-index fast path must not drop colliding updates."""
    keys = dir_keys(20_000)
    batch = BloomFilter(64 * 40, 3, SALT)
    batch.add_many(keys + [b"same"] * 10_000)
    single = BloomFilter(64 * 40, 3, SALT)
    for key in [*keys, b"same"]:
        single.add(key)
    assert batch == single
    assert batch.contains_many(keys).all()


def test_chunk_boundaries() -> None:
    keys = dir_keys(2 * CHUNK + 17)
    filt = BloomFilter.for_capacity(len(keys), 0.01, SALT)
    filt.update(k for k in keys)
    found = filt.contains_many(keys)
    assert found.shape == (len(keys),) and found.all()
    assert filt.contains_many([]).shape == (0,)


def test_non_key_is_not_contained() -> None:
    filt = BloomFilter.for_capacity(10, 0.01, SALT)
    assert 42 not in filt


@pytest.mark.parametrize(("p", "negatives"), [(0.01, 200_000), (0.001, 1_000_000)])
def test_false_positive_rate_near_target(p: float, negatives: int) -> None:
    n = 200_000
    filt = BloomFilter.for_capacity(n, p, SALT)
    filt.add_many(dir_keys(n))
    rate = float(filt.contains_many(dir_keys(negatives, tag="out")).mean())
    assert rate == pytest.approx(p, rel=0.2)
    assert filt.estimated_fpr() == pytest.approx(p, rel=0.2)


def test_distinct_keys_estimated_from_the_fill_close_to_n() -> None:
    n = 200_000
    filt = BloomFilter.for_capacity(n, 0.01, SALT)
    assert distinct_keys(filt.m, filt.k, filt.fill_ratio()) == 0.0
    assert filt.fill_ratio() == 0.0
    filt.add_many(dir_keys(n))
    assert distinct_keys(filt.m, filt.k, filt.fill_ratio()) == pytest.approx(n, rel=0.02)
    assert filt.fill_ratio() == pytest.approx(0.5, abs=0.03)  # optimal k half-fills the filter


def test_full_filter_estimates() -> None:
    filt = BloomFilter(64, 2, SALT, np.full(1, 2**64 - 1, dtype=np.uint64))
    assert filt.fill_ratio() == 1.0
    assert filt.estimated_fpr() == 1.0
    assert distinct_keys(filt.m, filt.k, filt.fill_ratio()) is None


# -- union -------------------------------------------------------------------------------------


def test_union_equals_filter_of_union_set() -> None:
    left_keys, right_keys = dir_keys(5000, "a"), dir_keys(7000, "b")
    left = BloomFilter.for_capacity(12_000, 0.01, SALT)
    left.add_many(left_keys)
    right = BloomFilter.for_capacity(12_000, 0.01, SALT)
    right.add_many(right_keys)
    both = BloomFilter.for_capacity(12_000, 0.01, SALT)
    both.add_many(left_keys + right_keys)
    union = left | right
    assert union == both
    assert left != both  # operands untouched
    left |= right
    assert left == both


@pytest.mark.parametrize(
    ("other", "field"),
    [
        (BloomFilter(64 * 200, 7, SALT), "m"),
        (BloomFilter(64 * 100, 6, SALT), "k"),
        (BloomFilter(64 * 100, 7, SALT + 1), "salt"),
        (PyBloomLiveFilter(100, 0.01, SALT), "engine"),
    ],
)
def test_union_mismatch_names_field(other: BloomFilter | PyBloomLiveFilter, field: str) -> None:
    base = BloomFilter(64 * 100, 7, SALT)
    with pytest.raises(ValueError, match=rf"\b{field} differs"):
        base | other
    with pytest.raises(ValueError, match=rf"\b{field} differs"):
        base |= other
    with pytest.raises(TypeError):
        base | 3


# -- salts -------------------------------------------------------------------------------------


def test_salt_changes_positions_and_false_positives() -> None:
    n = 100_000
    inserted, negatives = dir_keys(n), dir_keys(200_000, tag="out")
    a = BloomFilter.for_capacity(n, 0.01, 1)
    b = BloomFilter.for_capacity(n, 0.01, 2)
    a.add_many(inserted)
    b.add_many(inserted)
    assert a.bits_bytes() != b.bits_bytes()
    fp_a = set(np.flatnonzero(a.contains_many(negatives)).tolist())
    fp_b = set(np.flatnonzero(b.contains_many(negatives)).tolist())
    assert min(len(fp_a), len(fp_b)) > 1000
    # independent salts: overlap ≈ |fp_a| * p ≈ 20, far below either set
    assert len(fp_a & fp_b) < 0.05 * min(len(fp_a), len(fp_b))


# -- bits round-trip ---------------------------------------------------------------------------


def test_bits_round_trip_and_eq() -> None:
    filt = BloomFilter.for_capacity(1000, 0.01, SALT)
    filt.add_many(dir_keys(1000))
    data = filt.bits_bytes()
    assert len(data) == filt.nbytes == filt.m // 8
    again = BloomFilter.from_bits(filt.m, filt.k, filt.salt, data)
    assert again == filt
    assert again.contains_many(dir_keys(1000)).all()
    assert BloomFilter.from_bits(filt.m, filt.k, filt.salt + 1, data) != filt
    with pytest.raises(ValueError, match="bytes"):
        BloomFilter.from_bits(filt.m, filt.k, filt.salt, data[:-8])
    copy = filt.copy()
    copy.add(b"extra")
    assert copy != filt
