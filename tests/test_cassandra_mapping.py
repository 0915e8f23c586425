"""The Cassandra store's mapping without a node: the model's parents to the stored ones and back,
one to one, and the partition tokens of the bound keys."""

from __future__ import annotations

import pytest

from dircleaner.errors import SchemaError, UsageError
from dircleaner.store.cassandra.config import CassandraConfig, Columns
from dircleaner.store.cassandra.mapping import (
    model_parent,
    partition_token,
    partition_tokens,
    stored_parent,
)

PARENTS = ["", "/", "//", "a/", "/a/", "a//", "<root>/", "<root>", "ü/日/", "a/b/c/"]


@pytest.mark.parametrize(
    "cfg",
    [
        CassandraConfig(),
        CassandraConfig(root_parent="<root>"),
        CassandraConfig(root_parent="/", parent_prefix="/"),
        CassandraConfig(root_parent="ROOT", parent_prefix="P:"),
    ],
    ids=["default", "named-root", "absolute-paths", "prefixed"],
)
def test_parent_mapping_is_one_to_one(cfg: CassandraConfig) -> None:
    stored = [stored_parent(cfg, p) for p in PARENTS]
    assert all(stored)  # partition keys cannot be empty
    assert len(set(stored)) == len(PARENTS)
    assert [model_parent(cfg, s) for s in stored] == PARENTS
    assert stored_parent(cfg, "") == cfg.root_parent


def test_default_parent_mapping() -> None:
    cfg = CassandraConfig()
    assert [stored_parent(cfg, p) for p in ("", "a/", "/", "/a/")] == ["/", "a/", "//", "//a/"]


def test_foreign_stored_parent_under_a_prefix_is_a_schema_error() -> None:
    with pytest.raises(SchemaError, match="parent_prefix"):
        model_parent(CassandraConfig(parent_prefix="/"), "a/")


@pytest.mark.parametrize(
    "cfg",
    [
        CassandraConfig(),
        CassandraConfig(root_parent="<root>"),
        CassandraConfig(root_parent="/", parent_prefix="/"),
        CassandraConfig(columns=Columns(bucket=None), bucket_name="only"),
    ],
    ids=["default", "named-root", "absolute-paths", "no-bucket-column"],
)
def test_partition_tokens_are_partition_token_of_the_bound_key(cfg: CassandraConfig) -> None:
    bucket = "only" if cfg.columns.bucket is None else "b1"
    keys = [(bucket, p) for p in PARENTS]
    if cfg.columns.bucket is not None:
        keys += [("ü", "a/"), ("b", "a/")]
    got = partition_tokens(cfg, keys)
    stored = [stored_parent(cfg, p) for _, p in keys]
    pairs = zip(keys, stored, strict=True)
    bound = [(s,) if cfg.columns.bucket is None else (b, s) for (b, _), s in pairs]
    assert got == [
        (b, partition_token(v), s, p) for (b, p), v, s in zip(keys, bound, stored, strict=True)
    ]
    if cfg.columns.bucket is None:
        with pytest.raises(UsageError, match="no bucket column"):
            partition_tokens(cfg, [("other", "a/")])
    with pytest.raises(UsageError, match="65535 bytes"):
        partition_tokens(cfg, [(bucket, "x" * 65536)])
