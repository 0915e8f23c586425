"""The SQLite store's tombstone ledger (``store/sqlite/ledger.py``): charges summed per
partition over any number of chunks, expired ones neither counted nor kept, and the ledgers of
earlier releases' files read (opened for reading) or re-keyed (opened to write) with every
live charge."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from dircleaner.store.records import TombstoneCharge
from dircleaner.store.sqlite import SqliteStore, ledger
from tests.store_contract import T0


def url_of(path: Path) -> str:
    return f"sqlite:///{path}"


def test_charges_over_several_chunks_are_summed_per_partition(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "LEDGER_CHUNK", 3)
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        charges = [TombstoneCharge("b", f"p{i}/", "g", "r.0", i + 1) for i in range(10)]
        charges += [TombstoneCharge("b", f"p{i}/", "g", "r.1", 100) for i in range(0, 10, 4)]
        charges.append(TombstoneCharge("other", "p1/", "g", "r.0", 7))
        store.charge_tombstones(charges, 3600)
        asked = [("b", f"p{i}/") for i in range(12)] + [("other", "p1/")]
        expected = {("b", f"p{i}/"): i + 1 + (100 if i % 4 == 0 else 0) for i in range(10)}
        assert store.tombstones_charged(asked) == {**expected, ("other", "p1/"): 7}
        # A charge rewritten under its key replaces the one before (the deleter's running total).
        store.charge_tombstones([TombstoneCharge("b", "p3/", "g", "r.0", 40)], 3600)
        assert store.tombstones_charged([("b", "p3/")]) == {("b", "p3/"): 40}


def test_an_expired_charge_is_not_counted_and_is_purged(tmp_path: Path) -> None:
    with SqliteStore.open(url_of(tmp_path / "m.db"), create=True) as store:
        store.charge_tombstones([TombstoneCharge("b", "p/", "g", "live", 3)], 3600)
        store.charge_tombstones([TombstoneCharge("b", "p/", "g", "gone", 5)], -1)
        assert store.tombstones_charged([("b", "p/")]) == {("b", "p/"): 3}
        store.purge_expired(864_000)
        rows = store.db.conn.execute("SELECT charge, cost FROM ledger").fetchall()
        assert rows == [("live", 3)]


def test_a_ledger_keyed_by_parent_is_rekeyed_by_token_with_its_charges(tmp_path: Path) -> None:
    """Files written before the ledger was keyed by partition token (for sequential inserts)
    keep every live charge when opened: a lost charge would loosen the budget."""
    path = tmp_path / "m.db"
    SqliteStore.open(url_of(path), create=True).close()
    conn = sqlite3.connect(path)
    conn.executescript(
        "DROP TABLE ledger;"
        "CREATE TABLE ledger (bucket TEXT NOT NULL, parent TEXT NOT NULL,"
        " generation TEXT NOT NULL, charge TEXT NOT NULL, cost INTEGER NOT NULL,"
        " expires_us INTEGER NOT NULL, PRIMARY KEY (bucket, parent, generation, charge))"
        " WITHOUT ROWID;"
    )
    far = 2**62
    conn.executemany(
        "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?)",
        [
            ("b", "p/", "g", "r.0", 3, far),
            ("b", "p/", "g", "r.1", 2, far),
            ("b", "q/", "g", "r.0", 7, far),
        ],
    )
    conn.commit()
    conn.close()
    with SqliteStore.open(url_of(path)) as store:
        assert store.tombstones_charged([("b", "p/"), ("b", "q/"), ("b", "r/")]) == {
            ("b", "p/"): 5,
            ("b", "q/"): 7,
        }
        store.charge_tombstones([TombstoneCharge("b", "p/", "g", "s.0", 1)], 3600)
        assert store.tombstones_charged([("b", "p/")]) == {("b", "p/"): 6}
    conn = sqlite3.connect(path)
    assert {r[1] for r in conn.execute("PRAGMA table_info(ledger)")} >= {"token"}
    assert conn.execute("SELECT count(*) FROM ledger").fetchone() == (4,)
    conn.close()


def _ledger_of_an_earlier_release(path: Path, *, keyed_by_token: bool) -> None:
    """A metastore whose ledger has no token column (or no ledger at all), with two charges."""
    SqliteStore.open(url_of(path), create=True).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE ledger")
    if keyed_by_token:
        conn.execute("DROP TABLE kv")  # a file older still: neither table
    else:
        conn.execute(
            "CREATE TABLE ledger (bucket TEXT NOT NULL, parent TEXT NOT NULL,"
            " generation TEXT NOT NULL, charge TEXT NOT NULL, cost INTEGER NOT NULL,"
            " expires_us INTEGER NOT NULL, PRIMARY KEY (bucket, parent, generation, charge))"
            " WITHOUT ROWID"
        )
        conn.executemany(
            "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?)",
            [("b", "p/", "g", "r.0", 3, 2**62), ("b", "p/", "g", "r.1", 4, T0)],
        )
    conn.commit()
    conn.close()


def test_opened_for_reading_an_earlier_ledger_is_read_as_it_is(tmp_path: Path) -> None:
    """Not keyed by token: read by bucket and parent, its live charges summed; no ledger at
    all: nothing charged. Either way the file is left as it was."""
    for keyed, expected in ((False, {("b", "p/"): 3}), (True, {})):
        path = tmp_path / f"old-{keyed}.db"
        _ledger_of_an_earlier_release(path, keyed_by_token=keyed)
        before = path.read_bytes()
        with SqliteStore.open(url_of(path), read_only=True) as store:
            assert store.tombstones_charged([("b", "p/"), ("b", "q/")]) == expected
        assert path.read_bytes() == before
