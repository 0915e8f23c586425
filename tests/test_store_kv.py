"""The key-value primitive's helpers (``store/kv.py``), without a store; the primitive itself is
in ``store_contract.py``, the bookkeeping's keys on it in ``test_bookkeeping.py``."""

from __future__ import annotations

import pytest

from dircleaner.store.kv import ANY, MAX_VALUE_BYTES, Expect, check_write, prefix_end


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
