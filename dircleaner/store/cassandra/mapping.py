"""How the model's keys map onto a real metastore's columns: stored parents, tokens, identifiers."""

from __future__ import annotations

from collections.abc import Sequence

from cassandra.metadata import Murmur3Token

from dircleaner.errors import (
    SchemaError,
    UsageError,
)
from dircleaner.store.cassandra.config import (
    CassandraConfig,
)


def _q(identifier: str) -> str:
    """Double-quote a validated identifier (config validated it as [A-Za-z_][A-Za-z0-9_]*)."""
    return f'"{identifier}"'


def stored_parent(cfg: CassandraConfig, parent: str) -> str:
    """Model parent → stored value; a bijection, so no two parents share a partition.

    The root ``""`` is stored as ``root_parent``. With a ``parent_prefix`` every other parent is
    stored behind it (``a/`` → ``/a/``). Without one, parents are stored as they are, except
    that a parent starting with the root's value gets it once more in front (``/`` → ``//``),
    so a key such as ``/x`` cannot land in the root's partition.
    """
    root, prefix = cfg.root_parent, cfg.parent_prefix
    if parent == "":
        return root
    if prefix:
        return prefix + parent
    return root + parent if parent.startswith(root) else parent


def model_parent(cfg: CassandraConfig, stored: str) -> str:
    """Stored value → model parent (the inverse of stored_parent)."""
    root, prefix = cfg.root_parent, cfg.parent_prefix
    if stored == root:
        return ""
    if prefix:
        if not stored.startswith(prefix):
            raise SchemaError(
                f"stored parent {stored!r} lacks the configured parent_prefix {prefix!r};"
                " check the [cassandra] mapping"
            )
        return stored[len(prefix) :]
    return stored[len(root) :] if stored.startswith(root) else stored


def partition_token(values: Sequence[str]) -> int:
    """The Murmur3 token Cassandra gives a partition key of text columns, computed here.

    The routing key is what the driver builds for a bound statement: a single column's UTF-8
    bytes, or for a composite key each component as a 2-byte length, the bytes and a 0 byte.
    """
    parts = [value.encode("utf-8") for value in values]
    if any(len(part) > 0xFFFF for part in parts):
        raise UsageError("a partition key component is longer than 65535 bytes")
    if len(parts) == 1:
        key = parts[0]
    else:
        key = b"".join(len(part).to_bytes(2, "big") + part + b"\0" for part in parts)
    return int(Murmur3Token.hash_fn(key))


def partition_tokens(
    cfg: CassandraConfig, keys: Sequence[tuple[str, str]]
) -> list[tuple[str, int, str, str]]:
    """``(bucket, token, stored parent, parent)`` of each model key ``(bucket, parent)``.

    The same tokens as ``partition_token`` of the bound key values, computed per batch: the
    bucket's serialized component once per bucket, not once per key (the walk and the re-check
    compute tens of thousands of tokens a wave).
    """
    hash_fn = Murmur3Token.hash_fn
    root, prefix = cfg.root_parent, cfg.parent_prefix
    no_bucket = cfg.columns.bucket is None
    heads: dict[str, bytes] = {}
    out: list[tuple[str, int, str, str]] = []
    for bucket, parent in keys:
        # stored_parent, inlined: this loop runs once per directory walked or re-checked
        if not parent:
            stored = root
        elif prefix:
            stored = prefix + parent
        else:
            stored = root + parent if parent.startswith(root) else parent
        tail = stored.encode("utf-8")
        if len(tail) > 0xFFFF:
            raise UsageError("a partition key component is longer than 65535 bytes")
        if no_bucket:
            if bucket != cfg.bucket_name:
                raise UsageError(
                    f"this metastore has no bucket column; its only bucket is"
                    f" {cfg.bucket_name!r}, not {bucket!r}"
                )
            out.append((bucket, int(hash_fn(tail)), stored, parent))
            continue
        head = heads.get(bucket)
        if head is None:
            raw = bucket.encode("utf-8")
            if len(raw) > 0xFFFF:
                raise UsageError("a partition key component is longer than 65535 bytes")
            head = heads[bucket] = len(raw).to_bytes(2, "big") + raw + b"\0"
        key = head + len(tail).to_bytes(2, "big") + tail + b"\0"
        out.append((bucket, int(hash_fn(key)), stored, parent))
    return out


def in_size(keys: int, batch: int) -> int:
    """The ``IN`` size a chunk of ``keys`` partitions is padded to: a power of two or ``batch``."""
    return min(1 << (keys - 1).bit_length(), batch)


def padded_in(values: Sequence[str], batch: int) -> list[str]:
    """A chunk's ``IN`` values padded to ``in_size`` by repeating the last one (Cassandra reads
    a key repeated in ``IN`` once), so few statements are prepared: one per size."""
    out = list(values)
    return out + [out[-1]] * (in_size(len(out), batch) - len(out))
