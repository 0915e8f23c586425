"""The prefix walk's reads on Cassandra, without a node: each partition a read returns maps
back to the key it was asked for, and one it did not ask for is a mapping error, not a row."""

from __future__ import annotations

from typing import Any

import pytest

from dircleaner.errors import SchemaError
from dircleaner.model import FolderRow
from dircleaner.store.cassandra.walkreads import WalkReads, _mapped, _Read
from dircleaner.store.records import DirectoryReads


def read(probe: bool) -> _Read:
    # The stored root parent is "/", the model's ""; "//a/" is the model's "/a/".
    keys = {"/": (11, ""), "a/": (22, "a/"), "//a/": (33, "/a/")}
    return _Read(probe, "b", keys, None, tuple(keys), 11)


@pytest.mark.parametrize("probe", [True, False])
def test_a_stored_parent_maps_back_to_its_token_and_model_parent(probe: bool) -> None:
    assert _mapped(read(probe), "/") == (11, "")
    assert _mapped(read(probe), "//a/") == (33, "/a/")


@pytest.mark.parametrize(("probe", "what"), [(True, "probe"), (False, "folders read")])
def test_a_partition_not_asked_for_is_a_mapping_error(probe: bool, what: str) -> None:
    with pytest.raises(SchemaError, match=f"the walk's {what} returned partition 'x/'"):
        _mapped(read(probe), "x/")


class Canned(WalkReads):
    def __init__(self, found: dict[tuple[str, str], list[FolderRow]]) -> None:
        self.found = found
        self.asked: list[Any] = []

    def _walk_reads(self, keys: Any, *, probe: bool) -> DirectoryReads:
        self.asked.append((list(keys), probe))
        return DirectoryReads(set(), self.found)


def test_folder_partitions_answer_in_the_order_asked_without_probing() -> None:
    row = FolderRow(1, "b", "a/", "c")
    store = Canned({("b", "a/"): [row]})
    keys = [("b", "z/"), ("b", "a/")]
    assert list(store.folder_partitions(keys)) == [(("b", "z/"), []), (("b", "a/"), [row])]
    assert store.asked == [(keys, False)]
