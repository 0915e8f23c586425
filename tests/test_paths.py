"""Tests of the path model: keys, directories, folder-index rows and filter keys."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dircleaner.errors import UsageError
from dircleaner.paths import (
    MAX_KEY_BYTES,
    InvalidKey,
    ancestors_inclusive,
    dir_of_row,
    directories_of,
    filter_key,
    folder_row_of,
    iter_ancestors_upward,
    parent_of_dir,
    split_key,
    validate_bucket,
    validate_key,
)

# -- split_key -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a/b/c.txt", ("a/b/", "c.txt")),
        ("a/b/", ("a/b/", "")),  # a marker lives in its own directory's partition
        ("top.txt", ("", "top.txt")),  # a root-level key lives in the root partition
        ("a//b", ("a//", "b")),
        ("/x", ("/", "x")),
        ("/", ("/", "")),
        ("a", ("", "a")),
        ("ü/ñ/é", ("ü/ñ/", "é")),
    ],
)
def test_split_key(key: str, expected: tuple[str, str]) -> None:
    assert split_key(key) == expected


def test_split_key_parts_concatenate_back_to_the_key() -> None:
    parent, name = split_key("x/y/z")
    assert parent + name == "x/y/z"
    assert "/" not in name


# -- ancestors_inclusive ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "expected"),
    [
        ("", []),
        ("a/", ["a/"]),
        ("a/b/", ["a/", "a/b/"]),
        ("a/b/c/", ["a/", "a/b/", "a/b/c/"]),
        ("a//", ["a/", "a//"]),
        ("/", ["/"]),
        ("//", ["/", "//"]),
        ("/x/", ["/", "/x/"]),
    ],
)
def test_ancestors_inclusive(directory: str, expected: list[str]) -> None:
    assert ancestors_inclusive(directory) == expected


# -- directories_of --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("a/b/c.txt", ["a/", "a/b/"]),
        ("a/b/", ["a/", "a/b/"]),  # a marker keeps its own directory and its ancestors
        ("root.txt", []),
        ("a//b", ["a/", "a//"]),
        ("/x", ["/"]),
        ("/", ["/"]),
        ("a/", ["a/"]),
        ("2026-04-11/AA/part-0001.parquet", ["2026-04-11/", "2026-04-11/AA/"]),
    ],
)
def test_directories_of(key: str, expected: list[str]) -> None:
    assert directories_of(key) == expected


# -- parent_of_dir ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "parent"),
    [
        ("a/b/", "a/"),
        ("a/b/c/", "a/b/"),
        ("a/", ""),
        ("/", ""),
        ("a//", "a/"),
        ("//", "/"),
        ("/x/", "/"),
        ("ü/ñ/", "ü/"),
    ],
)
def test_parent_of_dir(directory: str, parent: str) -> None:
    assert parent_of_dir(directory) == parent


# -- folder_row_of / dir_of_row --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "row"),
    [
        ("a/", ("", "a")),
        ("a/b/", ("a/", "b")),
        ("a/b/c/", ("a/b/", "c")),
        ("/", ("", "")),
        ("a//", ("a/", "")),
        ("//", ("/", "")),
        ("/x/", ("/", "x")),
        ("a b/'q\"/\\/", ("a b/'q\"/", "\\")),
    ],
)
def test_folder_row_of_and_back(directory: str, row: tuple[str, str]) -> None:
    assert folder_row_of(directory) == row
    assert dir_of_row(*row) == directory


@pytest.mark.parametrize("not_a_dir", ["a", "a/b", "", "a/b.txt"])
def test_folder_row_of_rejects_a_non_directory(not_a_dir: str) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        folder_row_of(not_a_dir)


def test_dir_of_row() -> None:
    assert dir_of_row("a/b/", "c") == "a/b/c/"
    assert dir_of_row("", "a") == "a/"
    assert dir_of_row("", "") == "/"


# -- iter_ancestors_upward -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("directory", "expected"),
    [
        ("a/b/c/", ["a/b/c/", "a/b/", "a/"]),
        ("a/", ["a/"]),
        ("", []),
        ("a//", ["a//", "a/"]),
        ("/x/", ["/x/", "/"]),
    ],
)
def test_iter_ancestors_upward(directory: str, expected: list[str]) -> None:
    assert list(iter_ancestors_upward(directory)) == expected


def test_iter_ancestors_upward_is_ancestors_inclusive_reversed() -> None:
    directory = "p/q/r/s/"
    assert list(iter_ancestors_upward(directory)) == ancestors_inclusive(directory)[::-1]


# -- validate_key ----------------------------------------------------------------------------------


def test_invalid_key_is_a_usage_error() -> None:
    assert issubclass(InvalidKey, UsageError)
    assert InvalidKey.exit_code == 2


def test_validate_key_rejects_an_empty_key() -> None:
    with pytest.raises(InvalidKey, match="empty key"):
        validate_key("")


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "a/b/c.txt",
        "a/",
        "/",
        "x" * MAX_KEY_BYTES,
        "é" * (MAX_KEY_BYTES // 2),  # 2 bytes each: exactly 1024 bytes
        "€" * 341 + "a",  # 3 bytes each: 1023 + 1 = 1024 bytes
        "😀" * 256,  # 4 bytes each: exactly 1024 bytes
        "tab\there\r\n and spaces ",
    ],
)
def test_validate_key_accepts(key: str) -> None:
    assert len(key.encode("utf-8")) <= MAX_KEY_BYTES
    validate_key(key)  # does not raise


@pytest.mark.parametrize(
    "key",
    [
        "x" * (MAX_KEY_BYTES + 1),
        "é" * (MAX_KEY_BYTES // 2) + "a",  # 1025 bytes, only 513 characters
        "€" * 341 + "ab",  # 1025 bytes
        "😀" * 256 + "a",  # 1025 bytes
        "a" * 1023 + "é",  # 1025 bytes, 1024 characters
    ],
)
def test_validate_key_rejects_1025_utf8_bytes(key: str) -> None:
    assert len(key.encode("utf-8")) == MAX_KEY_BYTES + 1
    with pytest.raises(InvalidKey, match="1025 UTF-8 bytes, over the 1024-byte limit"):
        validate_key(key)


def test_validate_key_counts_bytes_not_characters() -> None:
    key = "é" * 600  # 600 characters, 1200 bytes
    assert len(key) < MAX_KEY_BYTES
    with pytest.raises(InvalidKey, match="1200 UTF-8 bytes"):
        validate_key(key)


@pytest.mark.parametrize("key", ["\0", "a\0b", "a/b/\0", "\0/x"])
def test_validate_key_rejects_nul(key: str) -> None:
    with pytest.raises(InvalidKey, match="NUL"):
        validate_key(key)


def test_validate_key_rejects_a_lone_surrogate() -> None:
    with pytest.raises(InvalidKey, match="not valid UTF-8"):
        validate_key("a/\udc80")


@pytest.mark.parametrize("bucket", ["", "a\0b", "a\nb"])
def test_validate_bucket_rejects(bucket: str) -> None:
    with pytest.raises(UsageError, match="invalid bucket name"):
        validate_bucket(bucket)


def test_validate_bucket_accepts_a_plain_name() -> None:
    validate_bucket("logs-2026")  # does not raise


# -- filter_key ------------------------------------------------------------------------------------


def test_filter_key() -> None:
    assert filter_key("b", "a/b/") == b"b\x00a/b/"
    assert filter_key("", "/") == b"\x00/"
    assert filter_key("bü", "ñ/") == "bü\0ñ/".encode()
    assert filter_key("bü", "ñ/") == b"b\xc3\xbc\x00\xc3\xb1/"


def test_filter_key_separates_bucket_and_dir() -> None:
    # Without the NUL separator these two would collide.
    assert filter_key("ab", "c/") != filter_key("a", "bc/")


# -- properties ------------------------------------------------------------------------------------

ALPHABET = st.sampled_from(["/", "/", "/", "a", "b", "é", "😀", "'", '"', "\\", " ", ".", "\t"])
KEYS = st.lists(ALPHABET, min_size=1, max_size=30).map("".join)


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_every_directory_of_a_key_is_a_slash_terminated_prefix(key: str) -> None:
    dirs = directories_of(key)
    for directory in dirs:
        assert directory.endswith("/")
        assert key.startswith(directory)
    # One directory per '/' in the key's parent part, no more, no fewer, no duplicates.
    assert len(dirs) == split_key(key)[0].count("/")
    assert len(set(dirs)) == len(dirs)


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_ancestors_are_nested(key: str) -> None:
    dirs = directories_of(key)
    for outer, inner in itertools.pairwise(dirs):
        assert inner.startswith(outer)
        assert len(inner) > len(outer)
        assert parent_of_dir(inner) == outer
    if dirs:
        assert parent_of_dir(dirs[0]) == ""
        assert dirs[-1] == split_key(key)[0]


@settings(max_examples=300, deadline=None)
@given(KEYS)
def test_folder_row_round_trip(key: str) -> None:
    for directory in directories_of(key):
        parent, name = folder_row_of(directory)
        assert "/" not in name
        assert parent == parent_of_dir(directory)
        assert dir_of_row(parent, name) == directory
    assert list(iter_ancestors_upward(split_key(key)[0])) == directories_of(key)[::-1]
