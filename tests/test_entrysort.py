"""Tests of the external sort behind restore: unique rows, the last entry wins, files cleaned up."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.entrysort import EntrySort, SpillFailed

Entry = tuple[str, str, str, str]

entries_strategy = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.sampled_from(["", "x/", "x/y/"]),
        st.sampled_from(["m", "n", "o", "ü"]),
        st.sampled_from(["row", "range", "partition"]),
    ),
    max_size=60,
)


def last_wins(entries: list[Entry]) -> list[tuple[tuple[str, str, str], str]]:
    """What a dict in log order makes of the entries: each row once, its last via."""
    latest: dict[tuple[str, str, str], str] = {}
    for bucket, parent, name, via in entries:
        latest[(bucket, parent, name)] = via
    return sorted(latest.items())


@settings(max_examples=150, deadline=None)
@given(entries_strategy, st.integers(1, 7), st.integers(2, 4))
def test_every_chunking_gives_each_row_once_with_its_last_via(
    entries: list[Entry], chunk: int, fan_in: int
) -> None:
    with EntrySort(chunk_entries=chunk, fan_in=fan_in, block_entries=2) as sort:
        for entry in entries:
            sort.add(*entry)
        assert list(sort) == last_wins(entries)
        assert list(sort) == last_wins(entries)  # read again: the same


def test_a_long_log_spills_to_at_most_fan_in_files_which_close_removes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    entries = [
        ("b", f"p{i % 97}/", f"n{i % 1013}", "row" if i % 2 else "range") for i in range(5000)
    ]
    sort = EntrySort(chunk_entries=100, fan_in=4, block_entries=16)
    for entry in entries:
        sort.add(*entry)
        assert sort.spilled_files < 4
    assert sort.spilled_files > 0
    assert list(sort) == last_wins(entries)
    assert any(tmp_path.iterdir())
    sort.close()
    assert not any(tmp_path.iterdir())


def test_a_short_log_never_touches_the_disk(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with EntrySort(chunk_entries=10) as sort:
        for i in range(9):
            sort.add("b", "", f"n{i}", "row")
        assert len(list(sort)) == 9
        assert sort.spilled_files == 0
    assert not any(tmp_path.iterdir())


def test_a_temporary_directory_that_cannot_be_written_is_one_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # A directory under a regular file cannot be written, by root either (a read-only
    # directory would not stop root).
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setattr(tempfile, "tempdir", str(blocker / "tmp"))
    sort = EntrySort(chunk_entries=2)
    with pytest.raises(SpillFailed, match="cannot spill the audit log's entries to"):
        for i in range(3):
            sort.add("b", "", f"n{i}", "row")
    sort.close()


def test_a_full_disk_while_spilling_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import dircleaner.entrysort as module

    def no_space(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "_dump_blocks", no_space)
    sort = EntrySort(chunk_entries=2)
    with pytest.raises(SpillFailed) as failed:
        for i in range(3):
            sort.add("b", "", f"n{i}", "row")
    assert "No space left on device; nothing was written" in str(failed.value)
    sort.close()


def test_adding_after_reading_began_is_refused() -> None:
    with EntrySort() as sort:
        sort.add("b", "", "n", "row")
        list(sort)
        with pytest.raises(RuntimeError):
            sort.add("b", "", "m", "row")
