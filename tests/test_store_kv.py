"""The key-value primitive's helpers (``store/kv.py``) and the bookkeeping's keys on it
(``store/bookkeeping.py``), without a store; the primitive itself is in ``store_contract.py``."""

from __future__ import annotations

import pytest

from dircleaner.store import bookkeeping
from dircleaner.store.kv import ANY, MAX_VALUE_BYTES, Entry, Expect, check_write, prefix_end


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        ("a", "b"),
        ("a|", "a}"),
        ("filter|g|", "filter|g}"),
        ("\ud7ff", "\ue000"),  # the surrogates are skipped: no UTF-8 string holds them
        ("x\U0010ffff", "y"),  # the last character cannot grow: the one before it does
        ("\U0010ffff\U0010ffff", None),
        ("", None),
    ],
)
def test_prefix_end_bounds_every_string_under_the_prefix(prefix: str, end: str | None) -> None:
    assert prefix_end(prefix) == end
    if end is not None:
        for under in (prefix, prefix + "\x00", prefix + "\U0010ffff" * 3):
            assert under.encode("utf-8") < end.encode("utf-8")
        assert not end.startswith(prefix)


@pytest.mark.parametrize(
    ("space", "key", "value", "expect"),
    [
        ("", "k", b"v", ANY),
        ("s", "", b"v", ANY),
        ("s", "k", b"x" * (MAX_VALUE_BYTES + 1), ANY),
        ("s", "k", None, None),
    ],
    ids=["empty-space", "empty-key", "too-long", "delete-if-absent"],
)
def test_writes_no_store_takes_are_refused(
    space: str, key: str, value: bytes | None, expect: Expect
) -> None:
    with pytest.raises(ValueError):
        check_write(space, key, value, expect)


def test_writes_every_store_takes_pass() -> None:
    check_write("s", "k", b"x" * MAX_VALUE_BYTES, ANY)
    check_write("s", "k", None, b"old")
    check_write("s", "k", b"", None)


class _Dict:
    """The primitive as a dict, no TTL: enough to see the bookkeeping's keys."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, str], bytes] = {}

    def kv_read(self, space: str, prefix: str = "", *, fresh: bool = False) -> list[Entry]:
        found = [Entry(k, v) for (s, k), v in self.data.items() if s == space]
        return sorted(e for e in found if e.key.startswith(prefix))

    def kv_write(
        self,
        space: str,
        key: str,
        value: bytes | None,
        *,
        ttl_s: float | None = None,
        expect: Expect = ANY,
    ) -> bool:
        if expect is not ANY and self.data.get((space, key)) != expect:
            return False
        if value is None:
            self.data.pop((space, key), None)
        else:
            self.data[(space, key)] = value
        return True

    def kv_clear(self, space: str) -> None:
        self.data = {sk: v for sk, v in self.data.items() if sk[0] != space}


def test_filter_parts_are_listed_from_their_index_and_removed_with_their_cells() -> None:
    kv = _Dict()
    bookkeeping.put_filter_cell(kv, "g|1", 0, -1, b"h")  # a "|" in a generation is no problem
    bookkeeping.put_filter_cell(kv, "g|1", 0, 3, b"c")
    bookkeeping.put_filter_cell(kv, "g", 1, 0, b"x")
    assert bookkeeping.list_filter_parts(kv) == [("g", 1), ("g|1", 0)]
    assert bookkeeping.get_filter_cells(kv, "g|1", 0, meta_only=True) == {-1: b"h"}
    bookkeeping.delete_filter_generation(kv, "g")
    assert bookkeeping.list_filter_parts(kv) == [("g|1", 0)]
    assert bookkeeping.get_filter_cells(kv, "g|1", 0) == {-1: b"h", 3: b"c"}
    assert {space for space, _key in kv.data} == {"filters", "filter|g|1|0"}


def test_a_lease_that_vanishes_between_the_take_and_the_look_is_taken_again() -> None:
    """Its holder released it (or it expired) between the failed insert and the read."""
    kv = _Dict()
    kv.data[("lease", "n")] = b"old"
    real_write = kv.kv_write
    calls = []

    def write(space: str, key: str, value: bytes | None, **kwargs: object) -> bool:
        calls.append(value)
        applied = real_write(space, key, value, **kwargs)  # type: ignore[arg-type]
        if not applied and len(calls) == 1:
            kv.data.pop(("lease", "n"))  # released right after our insert lost
        return applied

    kv.kv_write = write  # type: ignore[method-assign]
    assert bookkeeping.try_acquire_lease(kv, "n", "me", 30) is None
    assert bookkeeping.lease_holder(kv, "n") == "me"
