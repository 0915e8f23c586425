"""The tombstone ledger: what each run charged each folders partition, each charge with a TTL.

A primitive of the store rather than key-value bookkeeping: the clean reads it on its hot path,
the charges of thousands of partitions a slice, as ``IN`` reads of ``LEDGER_READ_KEYS``
partitions each. Its statements are prepared here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dircleaner.store.cassandra.mapping import _q, padded_in
from dircleaner.store.cassandra.requests import CassandraRequests, InStatements, Params
from dircleaner.store.cassandra.session import _ttl
from dircleaner.store.records import TombstoneCharge

#: partitions per read of the tombstone ledger (one request per chunk, not per partition)
LEDGER_READ_KEYS = 64


class CassandraLedger:
    """``charge_tombstones`` and ``tombstones_charged`` on the table ``tables.ledger``."""

    def __init__(self, requests: CassandraRequests) -> None:
        self._requests = requests
        cfg = requests.config
        ledger = f"{_q(cfg.keyspace)}.{_q(cfg.tables.ledger)}"
        p = requests.prepare
        self._put = p(
            f"INSERT INTO {ledger} (bucket, parent, generation, charge, cost)"
            " VALUES (?, ?, ?, ?, ?) USING TTL ?"
        )
        self._read = InStatements(
            p,
            f"SELECT parent, generation, charge, cost FROM {ledger}"
            " WHERE bucket = ? AND parent IN (",
            ")",
        )

    def charge(self, charges: Sequence[TombstoneCharge], ttl_s: float) -> None:
        ttl = _ttl(ttl_s)
        params = [(*charge, ttl) for charge in charges]
        r = self._requests
        r.raise_first(r.run_many(self._put, params, "meta", retry=True))

    def charged(self, partitions: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """The ledger's live charges of ``partitions``, LEDGER_READ_KEYS partitions per read.

        One read per chunk of one bucket's partitions, ``concurrency`` in flight::

            SELECT parent, generation, charge, cost FROM ledger WHERE bucket = ? AND parent IN (…)

        (a short chunk padded to a power of two by repeating its last key, as the re-check
        pads). Each charge is counted once by its key, so a repeated partition cannot count
        twice; a chunk's answer is read to its last page.
        """
        parents_of: dict[str, list[str]] = {}
        for bucket, parent in dict.fromkeys(partitions):
            parents_of.setdefault(bucket, []).append(parent)
        items: list[tuple[Any, Params]] = []
        for bucket, parents in parents_of.items():
            for start in range(0, len(parents), LEDGER_READ_KEYS):
                padded = padded_in(parents[start : start + LEDGER_READ_KEYS], LEDGER_READ_KEYS)
                items.append((self._read(len(padded)), (bucket, *padded)))
        r = self._requests
        results = r.run_statements(items, "meta", retry=True)
        r.raise_first(results)
        charges: dict[tuple[str, str, str, str], int] = {}
        for (_stmt, params), result in zip(items, results, strict=True):
            for parent, generation, charge, cost in result:  # every page
                charges[(str(params[0]), parent, generation, charge)] = int(cost)
        out: dict[tuple[str, str], int] = {}
        for (bucket, parent, _generation, _charge), cost in charges.items():
            out[(bucket, parent)] = out.get((bucket, parent), 0) + cost
        return {key: total for key, total in out.items() if total}
