"""The filter engines by name (``filter/engines.py``): each name makes its engine, an unknown one is
refused; the pybloom-live reference engine agrees with ours, keeps keys past its capacity, and
round-trips and unions its bits."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dircleaner.filter import ENGINE_NAMES
from dircleaner.filter.bloom import HASH_NAME, BloomFilter
from dircleaner.filter.engines import ENGINES, PyBloomLiveFilter, new_filter
from dircleaner.filter.sizing import distinct_keys
from tests.test_bloom import SALT, dir_keys


def test_hash_name_and_engine() -> None:
    filt = new_filter("mmh3", 10, 0.01, 1)
    assert isinstance(filt, BloomFilter)
    assert (filt.engine, filt.hash_name, filt.n, filt.p) == ("mmh3", HASH_NAME, 10, 0.01)
    ref = new_filter("pybloom-live", 10, 0.01, 1)
    assert isinstance(ref, PyBloomLiveFilter)
    assert ref.hash_name == "pybloom-live-4"
    assert dict(ENGINES) == {"mmh3": BloomFilter, "pybloom-live": PyBloomLiveFilter}
    assert sorted(ENGINE_NAMES) == sorted(ENGINES)  # the CLI's --engine choices, known lazily
    with pytest.raises(TypeError):
        ENGINES["x"] = BloomFilter  # type: ignore[index]
    with pytest.raises(ValueError, match="mmh3, pybloom-live"):
        new_filter("redis", 10, 0.01, 1)


def test_pybloom_live_engine_agrees_with_mmh3() -> None:
    n = 20_000
    inserted, negatives = dir_keys(n), dir_keys(50_000, tag="out")
    ref = PyBloomLiveFilter.for_capacity(n, 0.01, SALT)
    ref.update(iter(inserted))
    ours = BloomFilter.for_capacity(n, 0.01, SALT)
    ours.add_many(inserted)
    probes = [key for pair in zip(inserted, negatives, strict=False) for key in pair]
    probes += negatives[n:]
    ref_found, our_found = ref.contains_many(probes), ours.contains_many(probes)
    assert ref_found[0 : 2 * n : 2].all() and our_found[0 : 2 * n : 2].all()
    absent_either = {probes[i] for i in np.flatnonzero(~ref_found | ~our_found).tolist()}
    assert absent_either <= set(negatives)  # neither engine has a false negative
    disagree = np.flatnonzero(ref_found != our_found)
    assert len(disagree) < 0.05 * len(negatives)  # they differ only on rare false positives
    assert float(ref.contains_many(negatives).mean()) == pytest.approx(0.01, rel=0.3)
    assert distinct_keys(ref.m, ref.k, ref.fill_ratio()) == pytest.approx(n, rel=0.05)


def test_pybloom_live_single_keys_and_text() -> None:
    ref = PyBloomLiveFilter(100, 0.01, SALT)
    ref.add("répertoire/")
    ref.add(b"\xff\xfe-not-utf8/")
    assert b"r\xc3\xa9pertoire/" in ref
    assert b"\xff\xfe-not-utf8/" in ref
    assert 7 not in ref
    assert ref.contains_many(["répertoire/", b"\xff\xfe-not-utf8/"]).all()


def test_pybloom_live_no_capacity_refusal() -> None:
    ref = PyBloomLiveFilter(10, 0.01, SALT)
    ref.add_many(dir_keys(100))
    assert ref.contains_many(dir_keys(100)).all()


def test_pybloom_live_bits_round_trip_and_union() -> None:
    a = PyBloomLiveFilter(1000, 0.01, SALT)
    a.add_many(dir_keys(400, "a"))
    b = PyBloomLiveFilter(1000, 0.01, SALT)
    b.add_many(dir_keys(400, "b"))
    both = PyBloomLiveFilter(1000, 0.01, SALT)
    both.add_many(dir_keys(400, "a") + dir_keys(400, "b"))
    assert a | b == both
    again = PyBloomLiveFilter.from_bits(a.m, a.k, a.salt, a.bits_bytes(), n=1000, p=0.01)
    assert again == a
    assert len(a.bits_bytes()) == a.nbytes == math.ceil(a.m / 8)
    a |= b
    assert a == both
    with pytest.raises(ValueError, match=r"\bm differs"):
        a | PyBloomLiveFilter(2000, 0.01, SALT)
    with pytest.raises(ValueError, match=r"\bsalt differs"):
        a | PyBloomLiveFilter(1000, 0.01, SALT + 1)
    with pytest.raises(ValueError, match=r"\bengine differs"):
        a | BloomFilter.for_capacity(1000, 0.01, SALT)
    with pytest.raises(ValueError, match="need n and p"):
        PyBloomLiveFilter.from_bits(a.m, a.k, a.salt, a.bits_bytes())
    with pytest.raises(ValueError, match="sizes"):
        PyBloomLiveFilter.from_bits(a.m + 1, a.k, a.salt, a.bits_bytes(), n=1000, p=0.01)
