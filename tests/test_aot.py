"""The kernels compiled ahead of time against numba's and the ``mmh3`` path: the same filter
bytes and the same answers whichever path inserts; and a process loads them without numba."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dircleaner.filter import aot, bloom
from dircleaner.filter import kernel as bloomkernel
from dircleaner.filter.bloom import BloomFilter, pack_keys
from dircleaner.filter.engines import new_filter

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> aot.Compiled:
    """The module ``make install`` built, or one built here (slower) where it is missing."""
    found = aot.load()
    if found is None:
        directory = tmp_path_factory.mktemp("aot")
        aot.build(directory)
        found = aot.load(directory)
    assert found is not None
    return found


@pytest.fixture
def paths() -> Iterator[None]:
    saved = bloom._kernels
    yield
    bloom._kernels = saved


def _keys(n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    keys = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 90))) for _ in range(n)]
    keys += ["bücket\0a/é/𝄞/".encode(), b"default\0logs/2026/04/11/AA/", b""]
    return keys


def _filter_with(kernels: object, keys: list[bytes], p: float, salt: int) -> BloomFilter:
    bloom._kernels = kernels
    filt = new_filter("mmh3", len(keys), p, salt)
    assert isinstance(filt, BloomFilter)
    buf, offsets = pack_keys(keys)
    filt.add_ranges(buf, offsets[:-1], offsets[1:])
    return filt


@pytest.mark.parametrize(("p", "salt"), [(0.005, 0), (0.01, 0xFFFFFFFF), (0.2, 12345)])
def test_every_path_sets_the_same_filter_bytes(
    compiled: aot.Compiled, paths: None, p: float, salt: int
) -> None:
    keys = _keys(3000, salt)
    ahead = _filter_with(compiled, keys, p, salt)
    numba_path = _filter_with(bloomkernel, keys, p, salt)
    mmh3_path = _filter_with(None, keys, p, salt)
    assert ahead.bits_bytes() == numba_path.bits_bytes() == mmh3_path.bits_bytes()
    assert ahead.fill_ratio() > 0
    probes = keys[::3] + _keys(2000, salt + 1)
    buf, offsets = pack_keys(probes)
    answers = []
    for kernels in (compiled, bloomkernel, None):
        bloom._kernels = kernels
        answers.append(ahead.contains_packed(buf, offsets))
    assert np.array_equal(answers[0], answers[1])
    assert np.array_equal(answers[0], answers[2])
    assert answers[0][: len(keys[::3])].all()


def test_each_kernel_answers_as_numba_does(compiled: aot.Compiled) -> None:
    keys = _keys(2000, 7)
    buf, offsets = pack_keys(keys)
    starts, ends = offsets[:-1], offsets[1:]
    for seed in (0, 99, 0xFFFFFFFF):
        got = compiled.hash_many(buf, starts, ends, seed)
        assert np.array_equal(got, bloomkernel.hash_many(buf, starts, ends, seed))
    # Strided index arrays, as a caller may pass, are taken as they are by numba.
    lo, hi = starts[::2], ends[::2]
    for k in (1, 7, 8, 13):
        ahead, jit = np.zeros(512, dtype=np.uint8), np.zeros(512, dtype=np.uint8)
        compiled.add_many(ahead, 4096, k, 5, buf, lo, hi)
        bloomkernel.add_many(jit, 4096, k, 5, buf, lo, hi)
        assert np.array_equal(ahead, jit)
        found = compiled.contains_many(ahead, 4096, k, 5, buf, starts, ends)
        assert np.array_equal(found, bloomkernel.contains_many(jit, 4096, k, 5, buf, starts, ends))
    folder = [b"b\0a/x/", b"b\0a/y/", b"b\0a/b/z/", b"b\0c/", b"b\0c/d/", b"b\0"]
    fbuf, foffsets = pack_keys(folder)
    tokens = np.array([1, 1, 2, 2, 3, 3], dtype=np.int64)
    prefix = np.array([4, 4, 6, 2, 2, 2], dtype=np.int64) + foffsets[:-1]
    assert np.array_equal(
        compiled.partition_starts(tokens, fbuf, foffsets, prefix),
        bloomkernel.partition_starts(tokens, fbuf, foffsets, prefix),
    )
    for got, want in zip(
        compiled.key_shapes(fbuf, foffsets[:-1], foffsets[1:]),
        bloomkernel.key_shapes(fbuf, foffsets[:-1], foffsets[1:]),
        strict=True,
    ):
        assert np.array_equal(got, want)
    hashes = bloomkernel.hash_many(fbuf, foffsets[:-1], foffsets[:-1] + 4, 0)
    tokens = hashes[:, 0].view(np.int64).copy()
    assert np.array_equal(
        compiled.token_prefix_ends(tokens, fbuf, foffsets),
        bloomkernel.token_prefix_ends(tokens, fbuf, foffsets),
    )


def test_setting_bits_needs_a_writable_array(compiled: aot.Compiled) -> None:
    buf, offsets = pack_keys([b"a/"])
    bits = np.frombuffer(bytes(8), dtype=np.uint8)
    with pytest.raises(ValueError, match="writable"):
        compiled.add_many(bits, 64, 3, 0, buf, offsets[:-1], offsets[1:])


def test_a_process_loads_the_kernels_without_numba(compiled: aot.Compiled) -> None:
    directory = Path(compiled.module.__file__ or "").parent
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dircleaner.filter import aot, bloom\n"
        f"aot.DIRECTORY = Path({str(directory)!r})\n"
        "bloom.start_loading_kernels()\n"
        "bloom.finish_loading_kernels()\n"
        "from dircleaner.filter.engines import new_filter\n"
        "filt = new_filter('mmh3', 100, 0.01, 3)\n"
        "filt.add_many([b'a/', b'a/b/'])\n"
        "assert b'a/b/' in filt and isinstance(bloom.compiled(), aot.Compiled)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('numba', 'llvmlite')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_without_the_compiled_module_numba_loads_them(tmp_path: Path) -> None:
    assert aot.load(tmp_path) is None
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from dircleaner.filter import aot, bloom\n"
        f"aot.DIRECTORY = Path({str(tmp_path)!r})\n"
        "assert bloom.load_kernels()\n"
        "print(bloom.compiled().__name__, 'numba' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "dircleaner.filter.kernel True"
