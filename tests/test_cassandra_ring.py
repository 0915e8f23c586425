"""Token ranges without a node: the ring cut into splits, IN sizes, partition tokens, and the
routing of token-range reads to a replica of their range."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from types import SimpleNamespace

import pytest
from cassandra.metadata import Murmur3Token
from cassandra.policies import HostDistance
from cassandra.query import SimpleStatement

from dircleaner.errors import UsageError
from dircleaner.model import MAX_TOKEN, MIN_TOKEN, Shard
from dircleaner.store.cassandra.mapping import in_size, partition_token
from dircleaner.store.cassandra.ring import RangeAwarePolicy, cql_token_bounds, ring_splits

# -- token splits ----------------------------------------------------------------------------------


def assert_exact_cover(splits: list[tuple[int, int]], lo: int, hi: int) -> None:
    assert splits[0][0] == lo and splits[-1][1] == hi
    for (_, end), (start, _) in itertools.pairwise(splits):
        assert start == end + 1
    assert all(s <= e for s, e in splits)


def test_ring_splits_without_a_ring() -> None:
    splits = ring_splits([], 8)
    assert len(splits) == 8
    assert_exact_cover(splits, MIN_TOKEN, MAX_TOKEN)


@pytest.mark.parametrize(
    "ring",
    [
        [0],
        [-5, 7, 1000],
        [MIN_TOKEN, 0],
        [MAX_TOKEN],
        [MIN_TOKEN, MAX_TOKEN],
        [-(2**62), 3, 2**62, 2**63 - 10],
    ],
)
@pytest.mark.parametrize("per_range", [1, 3, 8])
def test_ring_splits_cover_the_ring_once(ring: list[int], per_range: int) -> None:
    assert_exact_cover(ring_splits(ring, per_range), MIN_TOKEN, MAX_TOKEN)
    for shard in (Shard(0, 4), Shard(3, 4), Shard(1, 3)):
        lo, hi = shard.token_range()
        assert_exact_cover(ring_splits(ring, per_range, lo, hi), lo, hi)


def test_ring_splits_follow_the_ring() -> None:
    splits = ring_splits([-100, 100], 2)
    ends = {e for _, e in splits}
    assert {-100, 100} <= ends  # no split straddles a ring token
    assert len(splits) == 6


def test_tiny_ranges_are_not_split_below_one_token() -> None:
    splits = ring_splits([0, 1, 2], 8)
    assert (1, 1) in splits and (2, 2) in splits
    assert_exact_cover(splits, MIN_TOKEN, MAX_TOKEN)


def test_cql_token_bounds() -> None:
    assert cql_token_bounds(MIN_TOKEN, 5) == (MIN_TOKEN, 5)
    assert cql_token_bounds(MIN_TOKEN + 1, 5) == (MIN_TOKEN, 5)
    assert cql_token_bounds(-3, 5) == (-4, 5)
    assert cql_token_bounds(6, MAX_TOKEN) == (5, MAX_TOKEN)
    # (MIN, MIN] would read as the whole ring; no partition has token MIN anyway.
    assert cql_token_bounds(MIN_TOKEN, MIN_TOKEN) is None


def test_in_sizes_are_powers_of_two_up_to_the_batch() -> None:
    sizes = [in_size(n, 100) for n in (1, 2, 3, 5, 33, 64, 65, 99, 100)]
    assert sizes == [1, 2, 4, 8, 64, 64, 100, 100, 100]
    assert (in_size(1, 1), in_size(5, 7), in_size(7, 7)) == (1, 7, 7)
    assert len({in_size(n, 100) for n in range(1, 101)}) == 8  # statements prepared at most


def test_partition_token_is_the_token_cassandra_computes() -> None:
    # SELECT token(...) on Cassandra 5.0, for a composite and a single-column partition key.
    assert partition_token(("b", "a/")) == 9067011995731547961
    assert partition_token(("b1", "ü/日/")) == -5182798177890093462
    assert partition_token(("ü/日/",)) == -1465017121307446527
    with pytest.raises(UsageError, match="65535 bytes"):
        partition_token(("b", "x" * 65536))


# -- routing of token-range reads ------------------------------------------------------------------


class FakeHost:
    def __init__(self, name: str, up: bool = True) -> None:
        self.name, self.is_up = name, up

    def __repr__(self) -> str:
        return self.name


class FakeChildPolicy:
    def __init__(self, hosts: list[FakeHost]) -> None:
        self.hosts = hosts

    def distance(self, host: FakeHost) -> object:
        return HostDistance.LOCAL

    def make_query_plan(self, keyspace: object = None, query: object = None) -> Iterator[FakeHost]:
        return iter(self.hosts)


class FakeTokenMap:
    def __init__(self, owner: dict[int, list[FakeHost]]) -> None:
        self.owner = owner
        self.asked: list[tuple[str, int]] = []

    def get_replicas(self, keyspace: str, token: Murmur3Token) -> list[FakeHost]:
        self.asked.append((keyspace, token.value))
        return self.owner[token.value]


def routed_plan(token: int | None, replicas: list[FakeHost]) -> tuple[list[str], FakeTokenMap]:
    """The plan (host names) for a statement routed to ``token``, owned by ``replicas``."""
    hosts = [FakeHost("h1"), FakeHost("h2"), *replicas]
    token_map = FakeTokenMap({42: replicas})
    policy = RangeAwarePolicy(FakeChildPolicy(hosts))
    policy._cluster_metadata = SimpleNamespace(token_map=token_map)
    stmt = SimpleStatement("SELECT 1", keyspace="ks")
    if token is not None:
        stmt.routing_token = token
    return [h.name for h in policy.make_query_plan(None, stmt)], token_map


def test_range_reads_go_to_a_replica_of_their_range_first() -> None:
    plan, token_map = routed_plan(42, [FakeHost("h3")])
    assert plan == ["h3", "h1", "h2"]
    assert token_map.asked == [("ks", 42)]


def test_a_down_replica_is_skipped_and_other_hosts_follow() -> None:
    plan, _ = routed_plan(42, [FakeHost("h3", up=False)])
    assert plan == ["h1", "h2"]


def test_statements_without_a_routing_token_use_the_child_plan() -> None:
    plan, token_map = routed_plan(None, [FakeHost("h3")])
    assert plan == ["h1", "h2", "h3"]
    assert token_map.asked == []
