"""The path model: keys, directories, folder-index rows and filter keys.

A directory is a ``/``-terminated proper prefix of an object key; key ``a/b/c.txt`` lives in
directory ``a/b/`` whose ancestors are ``a/`` and ``a/b/``. A key ending in ``/`` is a directory
*marker*: it is stored in its own directory's partition (parent ``a/b/``, name ``""``), so it keeps
that directory and all of its ancestors non-empty. The root (parent ``""``) is never a directory.

Both index tables are partitioned by parent: an object row is ``(bucket, parent, name)`` with
``key = parent + name``; a folder row is ``(bucket, parent, name)`` meaning directory
``parent + name + "/"`` exists.
"""

from __future__ import annotations

from collections.abc import Iterator

from dircleaner.errors import UsageError

MAX_KEY_BYTES = 1024
DEFAULT_BUCKET = "default"
SEP = "/"


class InvalidKey(UsageError):
    """An object key is empty, too long or not valid text."""


def validate_key(key: str) -> None:
    """Raise InvalidKey unless ``key`` is a storable S3 key (1..1024 UTF-8 bytes, no NUL)."""
    if not key:
        raise InvalidKey("empty key")
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidKey("key is not valid UTF-8 text") from exc
    if size > MAX_KEY_BYTES:
        raise InvalidKey(f"key is {size} UTF-8 bytes, over the {MAX_KEY_BYTES}-byte limit")
    if "\0" in key:
        raise InvalidKey("key contains a NUL character")


def validate_bucket(bucket: str) -> None:
    """Raise UsageError unless ``bucket`` is a usable bucket name."""
    if not bucket or "\0" in bucket or "\n" in bucket:
        raise UsageError(f"invalid bucket name {bucket!r}")


def split_key(key: str) -> tuple[str, str]:
    """Split a key into its object row's (parent, name): at the last ``/``."""
    cut = key.rfind(SEP) + 1
    return key[:cut], key[cut:]


def ancestors_inclusive(directory: str) -> list[str]:
    """Every directory from the top down to ``directory`` itself (``""`` gives none)."""
    out: list[str] = []
    start = 0
    while True:
        cut = directory.find(SEP, start)
        if cut < 0:
            return out
        out.append(directory[: cut + 1])
        start = cut + 1


def directories_of(key: str) -> list[str]:
    """The directories an object key keeps non-empty (its parent and all ancestors)."""
    return ancestors_inclusive(split_key(key)[0])


def iter_ancestors_upward(directory: str) -> Iterator[str]:
    """``directory`` and then each ancestor, deepest first (the root excluded)."""
    current = directory
    while current:
        yield current
        current = parent_of_dir(current)


def parent_of_dir(directory: str) -> str:
    """The parent of a directory (``"a/b/"`` → ``"a/"``; ``"a/"`` → ``""``, the root)."""
    return directory[: directory.rfind(SEP, 0, len(directory) - 1) + 1]


def folder_row_of(directory: str) -> tuple[str, str]:
    """The folders-index row (parent, name) that lists ``directory``."""
    if not directory.endswith(SEP):
        raise ValueError(f"not a directory (no trailing '/'): {directory!r}")
    parent = parent_of_dir(directory)
    return parent, directory[len(parent) : -1]


def dir_of_row(parent: str, name: str) -> str:
    """The directory a folders-index row lists."""
    return parent + name + SEP


def filter_key(bucket: str, directory: str) -> bytes:
    """Canonical bytes hashed into the filter: ``bucket + "\\0" + dir`` in UTF-8."""
    return (bucket + "\0" + directory).encode("utf-8")
