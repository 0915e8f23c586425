"""Bloom filter engines: a vectorised mmh3 engine and a pybloom-live reference engine.

The mmh3 engine (``BloomFilter``) hashes each key once with MurmurHash3 x64 128 (seeded with the
filter's 32-bit salt), splits the digest into two little-endian uint64 ``h1``/``h2`` and derives
the k bit positions by Kirsch–Mitzenmacher double hashing: ``(h1 + i*h2) mod 2**64 mod m``.
Bit ``j`` lives in byte ``j // 8`` at bit ``j % 8`` (little-endian words), so the serialized
bits are portable. Hashing is the only per-key Python work; positions and bit updates are
numpy operations on chunks of keys so temporaries stay small.

The batch paths (``add_many``, ``contains_many`` and their packed forms, which take the keys as one
byte buffer plus offsets) run compiled kernels (``dircleaner.filter.kernel``: the same MurmurHash3,
written for numba, bit for bit equal to ``mmh3``; compiled ahead of time where ``make install``
built them, see ``dircleaner.filter.aot``) once ``load_kernels()`` has loaded them; until then,
and wherever numba is missing, they take the ``mmh3`` path, which sets the same bits.

The pybloom-live reference engine and the registry of engines by name are in
``dircleaner.filter.engines``; both engines derive from ``FilterEngine``.
"""

from __future__ import annotations

import gc
import logging
import math
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import islice, repeat
from typing import Any, ClassVar, TypeAlias

import mmh3
import numpy as np
import numpy.typing as npt

HASH_NAME = "mmh3-x64-128-dh"
CHUNK = 65536
"""Keys hashed and placed per numpy pass: bounds temporaries to a few MB whatever the batch."""

MAX_SALT = 0xFFFFFFFF
_MASK64 = (1 << 64) - 1
_WORD = np.dtype("<u8")
_U3 = np.uint64(3)
_U7 = np.uint64(7)
_BIT = np.array([1 << i for i in range(8)], dtype=np.uint8)
_POPCOUNT_CHUNK = 1 << 22

Key: TypeAlias = bytes | str
Words: TypeAlias = npt.NDArray[np.uint64]
BoolArray: TypeAlias = npt.NDArray[np.bool_]


def _fallback_digest(key: bytes, seed: int) -> bytes:
    """MurmurHash3 x64 128 digest for mmh3 releases without ``mmh3_x64_128_digest``."""
    return mmh3.hash_bytes(key, seed)


_digest: Callable[[bytes, int], bytes] = getattr(mmh3, "mmh3_x64_128_digest", _fallback_digest)


_kernels: Any = None
_kernels_lock = threading.Lock()
#: where compiled kernels can run: they read words natively, so little-endian machines only
#: (elsewhere the mmh3 path sets the same bits)
_NATIVE_WORDS = sys.byteorder == "little"


def load_kernels() -> bool:
    """Load the compiled batch kernels; True once loaded.

    Where ``make install`` compiled them ahead of time (``dircleaner.filter.aot``) for this
    kernel source, they load in milliseconds without numba. Otherwise numba loads them from its
    on-disk cache (compiling them on a first run): about 0.4 s of CPU per process (importing
    numba, initialising its compiler), so the job starts that in a background thread
    (``start_loading_kernels``) and forks its workers after it (they inherit it).
    """
    global _kernels
    with _kernels_lock:
        _load_ahead_of_time()
        if _kernels is None and _NATIVE_WORDS:
            try:
                from dircleaner.filter import kernel as bloomkernel

                bloomkernel.warm_up()
            except Exception as exc:  # e.g. no writable cache: the mmh3 path sets the same bits
                logging.getLogger(__name__).warning("compiled filter kernels unavailable: %s", exc)
                return False
            # numba leaves ~10^5 long-lived objects behind; left in the collected generations,
            # every full collection walks them (it made the job's scans 30-50% slower).
            gc.freeze()
            _kernels = bloomkernel
    return _kernels is not None


def _load_ahead_of_time() -> None:
    """Under ``_kernels_lock``: the kernels compiled ahead of time into ``_kernels``, unless some
    are loaded already or none can run here."""
    global _kernels
    if _kernels is None and _NATIVE_WORDS:
        _kernels = _ahead_of_time()


def _ahead_of_time() -> Any:
    """The kernels compiled ahead of time for this source, or None (then numba's path)."""
    from dircleaner.filter import aot

    kernels = aot.load()
    if kernels is not None:
        # As on numba's path: the process's long-lived objects (its imports) out of the
        # collected generations, so that a full collection does not walk them again.
        gc.freeze()
    return kernels


def compiled() -> Any:
    """The compiled kernel module once ``load_kernels()`` has loaded it, else None."""
    return _kernels


_loader: threading.Thread | None = None


def start_loading_kernels() -> None:
    """``load_kernels()`` in a daemon thread (once per process), so that it overlaps the work
    before the first batch (sizing, reading the filter); the batch paths take the mmh3 path
    until it is done."""
    global _loader
    with _kernels_lock:
        if _loader is None:
            _load_ahead_of_time()  # milliseconds: no thread to wait for
            if _kernels is None:
                _loader = threading.Thread(target=load_kernels, name="bloom-kernels", daemon=True)
                _loader.start()


def finish_loading_kernels() -> None:
    """Wait for a loading started by ``start_loading_kernels`` (before forking: a child must not
    inherit a half-done import, and inherits the loaded kernels instead of loading its own)."""
    loader = _loader
    if loader is not None:
        loader.join()


def pack_keys(keys: Sequence[Key]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """A batch of keys as one byte buffer and ``len(keys) + 1`` offsets (``str`` as UTF-8)."""
    try:
        raw = b"".join(keys)  # type: ignore[arg-type]
    except TypeError:  # some keys are str
        keys = [_as_bytes(key) for key in keys]
        raw = b"".join(keys)  # type: ignore[arg-type]
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, keys), dtype=np.int64, count=len(keys)), out=offsets[1:])
    return np.frombuffer(raw, dtype=np.uint8), offsets


def optimal_params(n: int, p: float) -> tuple[int, int]:
    """Return (m bits, k hashes) holding ``n`` items at false-positive rate ``p``.

    m = ceil(-n ln p / ln² 2) rounded up to a multiple of 64 (whole words); k = round(m/n ln 2).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    m = math.ceil(-n * math.log(p) / (math.log(2) ** 2))
    m = -(-m // 64) * 64
    k = max(1, round(m / n * math.log(2)))
    return m, k


def _as_bytes(key: Key) -> bytes:
    """Encode ``str`` keys as UTF-8; pass bytes through."""
    return key.encode("utf-8") if isinstance(key, str) else key


def slices(
    buf: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
) -> list[bytes]:
    """The keys ``buf[starts[i]:ends[i]]`` of a packed batch, as bytes."""
    raw = buf.tobytes()
    return [raw[lo:hi] for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True)]


def _check_salt(salt: int) -> None:
    """Reject salts that are not a uint32 (the MurmurHash3 seed width)."""
    if isinstance(salt, bool) or not isinstance(salt, int) or not 0 <= salt <= MAX_SALT:
        raise ValueError(f"salt must be an integer in [0, 2**32), got {salt!r}")


def _check_params(m: int, k: int, salt: int) -> None:
    """Reject an m that is not a positive multiple of 64, a k < 1 or a bad salt."""
    if isinstance(m, bool) or not isinstance(m, int) or m <= 0 or m % 64:
        raise ValueError(f"m must be a positive multiple of 64, got {m!r}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    _check_salt(salt)


def count_set_bits(data: npt.NDArray[np.uint8]) -> int:
    """Count set bits of a byte array (in bounded-size chunks where numpy lacks a popcount)."""
    if hasattr(np, "bitwise_count"):
        return int(np.bitwise_count(data).sum(dtype=np.uint64))
    total = 0
    for start in range(0, data.size, _POPCOUNT_CHUNK):
        total += int(np.unpackbits(data[start : start + _POPCOUNT_CHUNK]).sum(dtype=np.uint64))
    return total


class FilterEngine:
    """What every filter engine is: a named engine with a named hash (a union of two filters
    checks both, and the stored header records both)."""

    engine: ClassVar[str]
    hash_name: ClassVar[str]


def _require_same(a: FilterEngine, b: FilterEngine, fields: Sequence[str]) -> None:
    """Raise ValueError naming the first of ``fields`` on which two filters differ."""
    for field in fields:
        left, right = getattr(a, field), getattr(b, field)
        if left != right:
            raise ValueError(f"cannot union filters: {field} differs ({left!r} != {right!r})")


class BloomFilter(FilterEngine):
    """Vectorised Bloom filter: mmh3 x64 128 double hashing over numpy uint64 words."""

    engine: ClassVar[str] = "mmh3"
    hash_name: ClassVar[str] = HASH_NAME

    def __init__(
        self,
        m: int,
        k: int,
        salt: int,
        bits: Words | None = None,
        *,
        n: int | None = None,
        p: float | None = None,
    ) -> None:
        """Wrap (without copying, when already ``<u8``) or allocate ``m // 64`` words."""
        _check_params(m, k, salt)
        if bits is None:
            words = np.zeros(m // 64, dtype=_WORD)
        else:
            words = np.require(bits, dtype=_WORD, requirements=["C", "W"])
            if words.shape != (m // 64,):
                raise ValueError(f"bits must hold {m // 64} words, got shape {words.shape}")
        self.m = m
        self.k = k
        self.salt = salt
        self.n = n
        self.p = p
        self._words: Words = words
        self._bytes: npt.NDArray[np.uint8] = words.view(np.uint8)
        self._m64 = np.uint64(m)

    @classmethod
    def for_capacity(cls, n: int, p: float, salt: int) -> BloomFilter:
        """Size a filter for ``n`` items at false-positive rate ``p``."""
        m, k = optimal_params(n, p)
        return cls(m, k, salt, n=n, p=p)

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
    ) -> BloomFilter:
        """Rebuild a filter from ``bits_bytes()`` output."""
        _check_params(m, k, salt)
        if len(data) != m // 8:
            raise ValueError(f"bits are {len(data)} bytes, m={m} needs {m // 8}")
        words = np.frombuffer(data, dtype=_WORD).copy()
        return cls(m, k, salt, words, n=n, p=p)

    @property
    def words(self) -> Words:
        """The live bit words (little-endian uint64); mutate at your own risk."""
        return self._words

    @property
    def nbytes(self) -> int:
        """Size of the bit array in bytes."""
        return self.m // 8

    # -- hashing ---------------------------------------------------------------------------

    def _key_positions(self, key: Key) -> Iterator[int]:
        """Bit positions of one key, in pure Python (the reference for the batch path)."""
        digest = _digest(_as_bytes(key), self.salt)
        h1 = int.from_bytes(digest[:8], "little")
        h2 = int.from_bytes(digest[8:], "little")
        for i in range(self.k):
            yield ((h1 + i * h2) & _MASK64) % self.m

    def _hash_chunk(self, keys: Sequence[Key]) -> npt.NDArray[np.uint64]:
        """(len(keys), 2) array of (h1, h2) per key; one C call per key, no other Python work."""
        salts = repeat(self.salt)
        try:
            raw = b"".join(map(_digest, keys, salts))  # type: ignore[arg-type]
        except TypeError:  # some keys are str: encode them, then hash again
            raw = b"".join(map(_digest, map(_as_bytes, keys), salts))
        return np.frombuffer(raw, dtype=_WORD).reshape(-1, 2)

    def _chunk_positions(self, keys: Sequence[Key]) -> Iterator[npt.NDArray[np.uint64]]:
        """Yield, for i in 0..k-1, the i-th bit position of every key (one 1-D array each)."""
        hashes = self._hash_chunk(keys)
        h1 = hashes[:, 0].copy()
        h2 = np.ascontiguousarray(hashes[:, 1])
        for i in range(self.k):
            if i:
                h1 += h2  # uint64 arrays wrap modulo 2**64, as the scheme requires
            yield h1 % self._m64

    def _set_positions(self, pos: npt.NDArray[np.uint64]) -> None:
        """Set bits at ``pos``: a fancy-index OR, then ``bitwise_or.at`` for lost duplicates.

        ``b[i] |= v`` gathers, ORs and scatters, so among duplicate byte indices only the last
        write survives (never clearing older bits); the few lost bits are re-set exactly.
        """
        data = self._bytes
        idx = (pos >> _U3).view(np.int64)
        mask = _BIT[(pos & _U7).view(np.int64)]
        data[idx] |= mask
        lost = np.flatnonzero((data[idx] & mask) == 0)
        if lost.size:
            np.bitwise_or.at(data, idx[lost], mask[lost])

    def _test_positions(self, pos: npt.NDArray[np.uint64]) -> BoolArray:
        """True where the bit at ``pos`` is set."""
        idx = (pos >> _U3).view(np.int64)
        found: BoolArray = (self._bytes[idx] & _BIT[(pos & _U7).view(np.int64)]) != 0
        return found

    # -- public API ------------------------------------------------------------------------

    def add(self, key: Key) -> None:
        """Insert one key (``str`` is UTF-8 encoded)."""
        data = self._bytes
        for pos in self._key_positions(key):
            data[pos >> 3] |= 1 << (pos & 7)

    def add_many(self, keys: Sequence[Key]) -> None:
        """Insert a batch of keys: the fast path."""
        for start in range(0, len(keys), CHUNK):
            chunk = keys[start : start + CHUNK]
            if _kernels is not None:
                self.add_packed(*pack_keys(chunk))
            else:
                self._add_many_mmh3(chunk)

    def _add_many_mmh3(self, keys: Sequence[Key]) -> None:
        """Insert keys hashed by the ``mmh3`` package (the reference for the kernels)."""
        for pos in self._chunk_positions(keys):
            self._set_positions(pos)

    def add_packed(self, buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]) -> None:
        """Insert the keys ``buf[offsets[i]:offsets[i + 1]]`` (UTF-8 bytes of each key)."""
        self.add_ranges(buf, offsets[:-1], offsets[1:])

    def add_ranges(
        self, buf: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> None:
        """Insert the keys ``buf[starts[i]:ends[i]]`` (they may overlap)."""
        if _kernels is None:
            self._add_many_mmh3(slices(buf, starts, ends))
            return
        _kernels.add_many(self._bytes, self.m, self.k, self.salt, buf, starts, ends)

    def update(self, keys: Iterable[Key]) -> None:
        """Insert keys from any iterable, in ``CHUNK``-sized batches."""
        it = iter(keys)
        while chunk := list(islice(it, CHUNK)):
            self.add_many(chunk)

    def contains_many(self, keys: Sequence[Key]) -> BoolArray:
        """Membership of each key, as a bool array (no false negatives)."""
        out = np.empty(len(keys), dtype=np.bool_)
        for start in range(0, len(keys), CHUNK):
            chunk = keys[start : start + CHUNK]
            if _kernels is not None:
                out[start : start + len(chunk)] = self.contains_packed(*pack_keys(chunk))
            else:
                out[start : start + len(chunk)] = self._contains_many_mmh3(chunk)
        return out

    def _contains_many_mmh3(self, keys: Sequence[Key]) -> BoolArray:
        """Membership by the ``mmh3`` package's hashes (the reference for the kernels)."""
        found = np.ones(len(keys), dtype=np.bool_)
        for pos in self._chunk_positions(keys):
            found &= self._test_positions(pos)
        return found

    def contains_packed(
        self, buf: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64]
    ) -> BoolArray:
        """Membership of the keys ``buf[offsets[i]:offsets[i + 1]]``."""
        if _kernels is None:
            return self._contains_many_mmh3(slices(buf, offsets[:-1], offsets[1:]))
        found: BoolArray = _kernels.contains_many(
            self._bytes, self.m, self.k, self.salt, buf, offsets[:-1], offsets[1:]
        )
        return found

    def contains_ranges(
        self, buf: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]
    ) -> BoolArray:
        """Membership of the keys ``buf[starts[i]:ends[i]]`` (they may overlap)."""
        if _kernels is None:
            return self._contains_many_mmh3(slices(buf, starts, ends))
        found: BoolArray = _kernels.contains_many(
            self._bytes, self.m, self.k, self.salt, buf, starts, ends
        )
        return found

    def __contains__(self, key: object) -> bool:
        """Membership of one key."""
        if not isinstance(key, bytes | str):
            return False
        data = self._bytes
        return all(data[pos >> 3] >> (pos & 7) & 1 for pos in self._key_positions(key))

    def copy(self) -> BloomFilter:
        """An independent copy."""
        return BloomFilter(self.m, self.k, self.salt, self._words.copy(), n=self.n, p=self.p)

    def _check_union(self, other: object) -> BloomFilter | None:
        """The other filter if it can be OR-ed into this one; None if it is no filter."""
        if not isinstance(other, FilterEngine):
            return None
        _require_same(self, other, ("engine", "hash_name", "m", "k", "salt"))
        assert isinstance(other, BloomFilter)
        return other

    def __or__(self, other: object) -> BloomFilter:
        """Union: a new filter holding the keys of both."""
        checked = self._check_union(other)
        if checked is None:
            return NotImplemented
        result = self.copy()
        np.bitwise_or(result._words, checked._words, out=result._words)
        return result

    def __ior__(self, other: object) -> BloomFilter:
        """In-place union."""
        checked = self._check_union(other)
        if checked is None:
            return NotImplemented
        np.bitwise_or(self._words, checked._words, out=self._words)
        return self

    def fill_ratio(self) -> float:
        """Fraction of bits set."""
        return count_set_bits(self._bytes) / self.m

    def estimated_fpr(self) -> float:
        """False-positive rate implied by the current fill: fill_ratio ** k."""
        return self.fill_ratio() ** self.k

    def bits_bytes(self) -> bytes:
        """The bit array as little-endian uint64 words."""
        return self._words.tobytes()

    def __eq__(self, other: object) -> bool:
        """Same parameters and same bits (n/p are informational and ignored)."""
        if not isinstance(other, BloomFilter):
            return NotImplemented
        return (self.m, self.k, self.salt) == (other.m, other.k, other.salt) and bool(
            np.array_equal(self._words, other._words)
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BloomFilter(m={self.m}, k={self.k}, salt={self.salt}, n={self.n}, p={self.p})"
