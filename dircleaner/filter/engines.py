"""The filter engines by name, and the pybloom-live reference engine.

``ENGINES`` maps an engine's name (``--engine``, the stored header) to its class: ``mmh3``, the
vectorised ``BloomFilter`` of ``dircleaner.filter.bloom``, and ``pybloom-live``,
``PyBloomLiveFilter`` here, which wraps ``pybloom_live.BloomFilter`` behind the same API; it is
the slow per-key baseline the mmh3 engine is measured against. ``Filter`` is either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import islice
from types import MappingProxyType
from typing import Any, ClassVar, TypeAlias

import bitarray
import numpy as np
import numpy.typing as npt
import pybloom_live

from dircleaner.filter.bloom import (
    CHUNK,
    BloomFilter,
    BoolArray,
    FilterEngine,
    Key,
    _check_salt,
    _require_same,
    slices,
)

PYBLOOM_HASH_NAME = "pybloom-live-4"


def _pybloom_key(key: Key) -> str:
    """The ``str`` handed to pybloom-live, which hashes its UTF-8 encoding.

    ``str`` keys and their UTF-8 bytes are the same key, as in the mmh3 engine. Bytes that are
    not UTF-8 go through latin-1 (deterministic; may alias a text key: an extra false positive,
    never a false negative).
    """
    if isinstance(key, str):
        return key
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return key.decode("latin-1")


class PyBloomLiveFilter(FilterEngine):
    """Reference engine: ``pybloom_live.BloomFilter`` behind the ``BloomFilter`` batch API.

    pybloom-live derives its hash functions from fixed salts of its own, so ``salt`` does not
    change bit positions here; it is recorded (and checked on union) for parity only. Its m and
    k come from pybloom-live's own sizing of (n, p), not from ``optimal_params``. Unlike
    ``pybloom_live.BloomFilter.add``, adds never refuse past capacity: the FPR just rises.
    """

    engine: ClassVar[str] = "pybloom-live"
    hash_name: ClassVar[str] = PYBLOOM_HASH_NAME

    def __init__(self, n: int, p: float, salt: int = 0) -> None:
        """Create an empty pybloom-live filter for ``n`` items at rate ``p``."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        if not 0.0 < p < 1.0:
            raise ValueError(f"p must be in (0, 1), got {p!r}")
        _check_salt(salt)
        self.n = n
        self.p = p
        self.salt = salt
        self._bf: Any = pybloom_live.BloomFilter(capacity=n, error_rate=p)

    @property
    def m(self) -> int:
        """Number of bits."""
        return int(self._bf.num_bits)

    @property
    def k(self) -> int:
        """Number of hash functions (pybloom-live's slices)."""
        return int(self._bf.num_slices)

    @property
    def nbytes(self) -> int:
        """Size of the serialized bit array in bytes."""
        return (self.m + 7) // 8

    @classmethod
    def for_capacity(cls, n: int, p: float, salt: int) -> PyBloomLiveFilter:
        """Size a filter for ``n`` items at false-positive rate ``p``."""
        return cls(n, p, salt)

    @classmethod
    def from_bits(
        cls,
        m: int,
        k: int,
        salt: int,
        data: bytes,
        *,
        n: int | None = None,
        p: float | None = None,
    ) -> PyBloomLiveFilter:
        """Rebuild from ``bits_bytes()``; needs the original (n, p) to recreate pybloom-live."""
        if n is None or p is None:
            raise ValueError("pybloom-live filters need n and p to be rebuilt")
        filt = cls(n, p, salt)
        if (filt.m, filt.k) != (m, k):
            raise ValueError(
                f"pybloom-live sizes n={n}, p={p} as m={filt.m}, k={filt.k}, not m={m}, k={k}"
            )
        if len(data) != filt.nbytes:
            raise ValueError(f"bits are {len(data)} bytes, m={m} needs {filt.nbytes}")
        bits = bitarray.bitarray(endian="little")
        bits.frombytes(data)
        del bits[m:]
        filt._bf.bitarray = bits
        return filt

    def add(self, key: Key) -> None:
        """Insert one key."""
        self.add_many((key,))

    def add_many(self, keys: Sequence[Key]) -> None:
        """Insert keys with pybloom-live's per-key hashing (its ``add`` minus the capacity cap)."""
        bits = self._bf.bitarray
        per_slice = self._bf.bits_per_slice
        make_hashes = self._bf.make_hashes
        for key in map(_pybloom_key, keys):
            offset = 0
            for h in make_hashes(key):
                bits[offset + h] = True
                offset += per_slice

    def add_ranges(
        self, buf: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> None:
        """Insert the keys ``buf[starts[i]:ends[i]]``."""
        self.add_many(slices(buf, starts, ends))

    def update(self, keys: Iterable[Key]) -> None:
        """Insert keys from any iterable."""
        it = iter(keys)
        while chunk := list(islice(it, CHUNK)):
            self.add_many(chunk)

    def contains_many(self, keys: Sequence[Key]) -> BoolArray:
        """Membership of each key, as a bool array."""
        bf = self._bf
        return np.fromiter(
            (key in bf for key in map(_pybloom_key, keys)), dtype=np.bool_, count=len(keys)
        )

    def contains_ranges(
        self, buf: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> BoolArray:
        """Membership of the keys ``buf[starts[i]:ends[i]]``."""
        return self.contains_many(slices(buf, starts, ends))

    def __contains__(self, key: object) -> bool:
        """Membership of one key."""
        if not isinstance(key, bytes | str):
            return False
        return _pybloom_key(key) in self._bf

    def copy(self) -> PyBloomLiveFilter:
        """An independent copy."""
        return PyBloomLiveFilter.from_bits(
            self.m, self.k, self.salt, self.bits_bytes(), n=self.n, p=self.p
        )

    def _check_union(self, other: object) -> PyBloomLiveFilter | None:
        """The other filter if it can be OR-ed into this one; None if it is no filter."""
        if not isinstance(other, FilterEngine):
            return None
        _require_same(self, other, ("engine", "hash_name", "m", "k", "n", "p", "salt"))
        assert isinstance(other, PyBloomLiveFilter)
        return other

    def __or__(self, other: object) -> PyBloomLiveFilter:
        """Union via pybloom-live's ``union``."""
        checked = self._check_union(other)
        if checked is None:
            return NotImplemented
        result = PyBloomLiveFilter(self.n, self.p, self.salt)
        result._bf = self._bf.union(checked._bf)
        return result

    def __ior__(self, other: object) -> PyBloomLiveFilter:
        """In-place union."""
        checked = self._check_union(other)
        if checked is None:
            return NotImplemented
        self._bf.bitarray |= checked._bf.bitarray
        return self

    def fill_ratio(self) -> float:
        """Fraction of bits set."""
        return int(self._bf.bitarray.count(1)) / self.m

    def estimated_fpr(self) -> float:
        """False-positive rate implied by the current fill: fill_ratio ** k."""
        return self.fill_ratio() ** self.k

    def bits_bytes(self) -> bytes:
        """pybloom-live's bitarray as bytes (little-endian bit order, zero padding)."""
        return bytes(self._bf.bitarray.tobytes())

    def __eq__(self, other: object) -> bool:
        """Same parameters and same bits."""
        if not isinstance(other, PyBloomLiveFilter):
            return NotImplemented
        same_params = (self.n, self.p, self.salt) == (other.n, other.p, other.salt)
        return same_params and bool(self._bf.bitarray == other._bf.bitarray)

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"PyBloomLiveFilter(n={self.n}, p={self.p}, salt={self.salt}, m={self.m})"


Filter: TypeAlias = BloomFilter | PyBloomLiveFilter
FilterClass: TypeAlias = type[BloomFilter] | type[PyBloomLiveFilter]

ENGINES: Mapping[str, FilterClass] = MappingProxyType(
    {BloomFilter.engine: BloomFilter, PyBloomLiveFilter.engine: PyBloomLiveFilter}
)


def engine_class(engine: str) -> FilterClass:
    """The filter class registered as ``engine``; ValueError listing the names if unknown."""
    try:
        return ENGINES[engine]
    except KeyError:
        known = ", ".join(sorted(ENGINES))
        raise ValueError(f"unknown filter engine {engine!r} (known: {known})") from None


def new_filter(engine: str, n: int, p: float, salt: int) -> Filter:
    """An empty filter of the named engine sized for ``n`` items at rate ``p``."""
    return engine_class(engine).for_capacity(n, p, salt)
