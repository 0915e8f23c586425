"""The job's bookkeeping on the key-value primitive (``store/bookkeeping.py``), without a store: the
filter's cells and their index, and the lease taken again when it vanishes between the take and
the look."""

from __future__ import annotations

from dircleaner.store import bookkeeping
from dircleaner.store.kv import ANY, Entry, Expect


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
