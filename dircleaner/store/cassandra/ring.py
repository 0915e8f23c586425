"""The token ring cut into splits along the cluster's own ranges, and routing to their replicas."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from cassandra.metadata import Murmur3Token
from cassandra.policies import (
    HostDistance,
    TokenAwarePolicy,
)

from dircleaner.model import MAX_TOKEN, MIN_TOKEN


def ring_splits(
    ring: Sequence[int], splits_per_range: int, lo: int = MIN_TOKEN, hi: int = MAX_TOKEN
) -> list[tuple[int, int]]:
    """Inclusive, sorted, disjoint token splits covering exactly ``[lo, hi]``.

    Each ring token owns ``(previous token, token]``; the range past the last token wraps to
    ``[MIN_TOKEN, first token]``. Each range is cut into ``splits_per_range`` equal splits.
    """
    tokens = sorted(set(ring))
    bounds: list[tuple[int, int]] = []
    if not tokens:
        bounds.append((MIN_TOKEN, MAX_TOKEN))
    else:
        bounds.append((MIN_TOKEN, tokens[0]))
        bounds.extend((a + 1, b) for a, b in itertools.pairwise(tokens))
        if tokens[-1] < MAX_TOKEN:
            bounds.append((tokens[-1] + 1, MAX_TOKEN))
    out: list[tuple[int, int]] = []
    for start, end in bounds:
        width = end - start + 1
        parts = min(splits_per_range, width)
        for j in range(parts):
            s = start + width * j // parts
            e = start + width * (j + 1) // parts - 1
            s, e = max(s, lo), min(e, hi)
            if s <= e:
                out.append((s, e))
    return out


def cql_token_bounds(lo: int, hi: int) -> tuple[int, int] | None:
    """``(a, b)`` for ``token > a AND token <= b`` covering inclusive ``[lo, hi]``, or None.

    Murmur3 never gives a partition MIN_TOKEN (the partitioner maps it to MAX_TOKEN), so
    ``token > MIN_TOKEN`` loses nothing, and a split that holds only MIN_TOKEN is empty: it must
    not be sent, because Cassandra reads ``(MIN, MIN]`` as the whole ring.
    """
    if hi <= MIN_TOKEN:
        return None
    return (lo - 1 if lo > MIN_TOKEN else MIN_TOKEN), hi


class RangeAwarePolicy(TokenAwarePolicy):  # type: ignore[misc]
    """TokenAwarePolicy that also routes token-range reads to a replica of their range.

    The driver can only route by partition key; a statement carrying a ``routing_token``
    attribute (set by our scans) is sent first to the live local replicas owning that token,
    then to the child policy's other hosts, so failover still works.
    """

    def make_query_plan(self, working_keyspace: Any = None, query: Any = None) -> Iterator[Any]:
        token = getattr(query, "routing_token", None)
        metadata = self._cluster_metadata
        keyspace = (query.keyspace if query is not None else None) or working_keyspace
        if token is None or keyspace is None or metadata is None or metadata.token_map is None:
            yield from super().make_query_plan(working_keyspace, query)
            return
        child = self._child_policy
        replicas = metadata.token_map.get_replicas(keyspace, Murmur3Token(token))
        for replica in replicas:
            if replica.is_up and child.distance(replica) == HostDistance.LOCAL:
                yield replica
        for host in child.make_query_plan(keyspace, query):
            if host not in replicas or child.distance(host) == HostDistance.REMOTE:
                yield host
