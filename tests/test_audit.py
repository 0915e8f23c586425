"""Tests of the audit log's format: batches, gzip members, torn writes, shared files, old logs."""

from __future__ import annotations

import gzip
import io
import json
import multiprocessing
import tracemalloc
import zlib
from pathlib import Path

import pytest

from dircleaner.audit import (
    PIECE_LINES,
    AuditLog,
    AuditLogFailed,
    BadAuditLog,
    audit_log_lines,
    iter_audit_entries,
    open_audit_log,
    read_audit_log,
)
from dircleaner.model import ActionKind, DeleteAction, FolderRow, PartitionKey
from dircleaner.restore import AuditSelection, plan_restore

BUCKET = "bkt"


def action(kind: ActionKind, parent: str, *names: str) -> DeleteAction:
    key = PartitionKey(7, BUCKET, parent)
    return DeleteAction(kind, key, tuple(FolderRow(7, BUCKET, parent, n) for n in names))


def batch_actions(index: int) -> list[DeleteAction]:
    """A batch as the deleter writes them: a few actions of each kind."""
    parent = f"logs/2026/04/{index:02d}/"
    return [
        action(ActionKind.PARTITION, parent, "AA", "AB"),
        action(ActionKind.ROW, parent, "AC"),
        action(ActionKind.RANGE, parent, "AD", "AE", "AF"),
        action(ActionKind.REWRITE, parent + "x/", "q"),
    ]


NAMES_PER_BATCH = 7


def log_of(batches: int, compressed: bool, generation: str = "g") -> list[bytes]:
    """Each batch's bytes as one write of the log."""
    buffer = io.BytesIO()
    log = AuditLog(buffer, generation, 5, scope="s", run_started_us=0, compressed=compressed)
    writes = []
    for index in range(batches):
        log.record_many(batch_actions(index))
        writes.append(buffer.getvalue())
        buffer.seek(0)
        buffer.truncate()
    return writes


def read(data: bytes) -> list[tuple[str, str, str]]:
    entries = iter_audit_entries(audit_log_lines(io.BytesIO(data)))
    return [(e["generation"], e["parent"], e["name"]) for e in entries]


def names_of(*batches: int) -> list[tuple[str, str, str]]:
    return [
        ("g", row.parent, row.name)
        for index in batches
        for a in batch_actions(index)
        for row in a.rows
    ]


# -- the format ------------------------------------------------------------------------------------


def test_each_batch_is_a_header_and_a_line_per_entry_with_the_batchs_fields() -> None:
    (write,) = log_of(1, compressed=False)
    lines = write.decode("utf-8").splitlines()
    assert json.loads(lines[0]) == {
        "format": 2,
        "delete_ts_us": 5,
        "generation": "g",
        "run_started": "1970-01-01T00:00:00Z",
        "scope": "s",
    }
    assert json.loads(lines[1]) == {
        "bucket": BUCKET,
        "parent": "logs/2026/04/00/",
        "name": "AA",
        "via": "partition",
    }
    assert len(lines) == 1 + NAMES_PER_BATCH
    (first, *_rest) = iter_audit_entries(write.decode("utf-8").splitlines(keepends=True))
    assert first == {
        "delete_ts_us": 5,
        "generation": "g",
        "run_started": "1970-01-01T00:00:00Z",
        "scope": "s",
        "bucket": BUCKET,
        "parent": "logs/2026/04/00/",
        "name": "AA",
        "via": "partition",
        "dir": "logs/2026/04/00/AA/",  # derived, not written
    }


def test_a_compressed_log_is_a_gzip_member_per_batch_that_zcat_reads() -> None:
    plain = log_of(3, compressed=False)
    packed = log_of(3, compressed=True)
    for member, text in zip(packed, plain, strict=True):
        unpacker = zlib.decompressobj(31)
        assert unpacker.decompress(member) == text
        assert unpacker.eof and not unpacker.unused_data  # one whole member per write
    assert gzip.decompress(b"".join(packed)) == b"".join(plain)
    assert read(b"".join(packed)) == read(b"".join(plain)) == names_of(0, 1, 2)


def test_a_batch_of_a_quarter_million_entries_is_made_within_a_few_pieces_of_memory() -> None:
    """One partition deletion of a wide parent (and a row delete after it) in one batch: the
    same entries as written one piece at a time, and the batch made without its lines as
    strings at once (they took about 60 MB here, more than a second of a night's memory)."""
    wide = action(ActionKind.PARTITION, "wide/", *(f"d{i:06d}" for i in range(250_000)))
    tail = action(ActionKind.ROW, "wide/", "z")
    plain = AuditLog(io.BytesIO(), "g", 5, compressed=False).batch([wide, tail])
    entries = [
        (e["name"], e["via"]) for e in iter_audit_entries(audit_log_lines(io.BytesIO(plain)))
    ]
    assert entries == [(r.name, "partition") for r in wide.rows] + [("z", "row")]
    log = AuditLog(io.BytesIO(), "g", 5, compressed=True)
    tracemalloc.start()
    try:
        packed = log.batch([wide, tail])
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert gzip.decompress(packed) == plain
    assert peak < 3 * len(packed) + 4 * PIECE_LINES * 100, (peak, len(packed))


def test_a_log_named_gz_is_written_compressed(tmp_path: Path) -> None:
    for name, compressed in (("a.jsonl.gz", True), ("a.jsonl", False)):
        path = tmp_path / name
        with open_audit_log(path) as stream:
            AuditLog(stream, "g", 5).write_ahead(batch_actions(0))
        assert path.read_bytes().startswith(b"\x1f\x8b") is compressed
        assert [(e["parent"], e["name"]) for e in read_audit_log(path)] == [
            (p, n) for _g, p, n in names_of(0)
        ]


def test_a_batch_is_a_fraction_of_the_old_one_line_per_entry_format() -> None:
    """The old format repeated the run's fields and ``dir`` on every line."""
    actions = [
        action(ActionKind.ROW, f"users/u{i:06d}/photos/2025/trip-{i % 7}/", f"edited-{i}")
        for i in range(32)
    ]
    old = "".join(
        json.dumps(
            {
                "bucket": "default",
                "dir": f"{r.parent}{r.name}/",
                "parent": r.parent,
                "name": r.name,
                "via": "row",
                "issued": "2026-11-27T14:06:58Z",
                "delete_ts_us": 1795787799588105,
                "generation": "20261127T140639.588105Z-4112ac02",
                "run_started": "2026-11-27T14:06:39Z",
                "scope": "sqlite:objects,folders@/var/lib/dircleaner/meta.db",
            },
            ensure_ascii=False,
        )
        + "\n"
        for a in actions
        for r in a.rows
    ).encode("utf-8")
    sizes = {}
    for compressed in (False, True):
        log = AuditLog(
            io.BytesIO(),
            "20261127T140639.588105Z-4112ac02",
            1795787799588105,
            scope="sqlite:objects,folders@/var/lib/dircleaner/meta.db",
            run_started_us=1_795_786_000_000_000,
            clock=lambda: 1_795_786_018_000_000,
            compressed=compressed,
        )
        sizes[compressed] = len(log.batch(actions))
    assert sizes[False] < len(old) / 2.5
    assert sizes[True] < len(old) / 8


# -- torn writes -----------------------------------------------------------------------------------


def test_a_last_member_cut_anywhere_by_a_kill_is_skipped() -> None:
    first, second, last = log_of(3, compressed=True)
    for cut in range(len(last)):
        assert read(first + second + last[:cut]) == names_of(0, 1), cut


def test_a_member_torn_by_a_killed_worker_and_followed_by_anothers_is_skipped() -> None:
    first, torn, after = log_of(3, compressed=True)
    for cut in range(1, len(torn)):
        assert read(first + torn[:cut] + after) == names_of(0, 2), cut


def test_a_plain_batch_torn_anywhere_and_continued_by_another_keeps_its_whole_lines() -> None:
    """Plain batches keep the old rule: a torn record is skipped, the whole lines before it
    (their deletes never sent: restoring them is a no-op) and the next batch are kept."""
    first, torn, after = log_of(3, compressed=False)
    newlines = [i for i, byte in enumerate(torn) if byte == ord("\n")]
    for cut in range(1, len(torn)):
        whole = max(0, sum(1 for end in newlines if cut > end) - 1)
        expected = names_of(0) + names_of(1)[:whole] + names_of(2)
        assert read(first + torn[:cut] + after) == expected, cut
        # at the end of the log, a last line cut just before its newline is whole JSON: kept
        json_whole = max(0, sum(1 for end in newlines if cut >= end) - 1)
        assert read(first + torn[:cut]) == names_of(0) + names_of(1)[:json_whole], cut


def test_workers_appending_batches_to_one_log_lose_none(tmp_path: Path) -> None:
    for name in ("shared.jsonl.gz", "shared.jsonl"):
        path = tmp_path / name
        context = multiprocessing.get_context("fork")
        procs = [context.Process(target=_append, args=(path, w)) for w in range(4)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
            assert proc.exitcode == 0
        entries = list(read_audit_log(path))
        assert len(entries) == 4 * 40 * NAMES_PER_BATCH
        # each entry carries the batch header of the process that wrote it
        assert all(e["parent"].startswith(e["generation"] + "/") for e in entries)


def _append(path: Path, worker: int) -> None:
    generation = f"w{worker}"
    with open_audit_log(path) as stream:
        log = AuditLog(stream, generation, 5)
        for index in range(40):
            actions = [
                DeleteAction(
                    a.kind,
                    a.partition,
                    tuple(FolderRow(7, BUCKET, f"{generation}/{r.parent}", r.name) for r in a.rows),
                )
                for a in batch_actions(index)
            ]
            log.write_ahead(actions)


def test_a_failed_write_is_one_error_before_the_batch_is_sent() -> None:
    class Full(io.BytesIO):
        name = "/var/log/dircleaner/audit.jsonl.gz"

        def write(self, data: object) -> int:
            raise OSError(28, "No space left on device")

    with pytest.raises(AuditLogFailed, match="No space left on device; nothing of this batch"):
        AuditLog(Full(), "g", 5).write_ahead(batch_actions(0))


# -- old logs --------------------------------------------------------------------------------------

#: two lines exactly as the previous format wrote them, one self-contained line per entry
OLD_LINES = (
    '{"bucket": "default", "dir": "logs/web/2026/01/07/SN/01/",'
    ' "parent": "logs/web/2026/01/07/SN/", "name": "01", "via": "partition",'
    ' "issued": "2026-11-27T14:06:58Z", "delete_ts_us":'
    ' 1795787799588105, "generation": "20261127T140639.588105Z-4112ac02", "run_started":'
    ' "2026-11-27T14:06:39Z", "scope": "s"}\n'
    '{"bucket": "default", "dir": "a/b/", "parent": "a/", "name": "b", "via": "range", "range":'
    ' ["b", "c"], "issued": "2026-11-27T14:06:59Z", "delete_ts_us": 1795787799588105,'
    ' "generation": "20261127T140639.588105Z-4112ac02", "run_started": "2026-11-27T14:06:39Z",'
    ' "scope": "s"}\n'
)


def test_an_old_log_followed_by_batches_reads_each_line_with_its_own_fields() -> None:
    batches = log_of(2, compressed=False)
    data = OLD_LINES.encode("utf-8") + b"".join(batches) + batches[0]  # the first batch twice
    entries = list(iter_audit_entries(audit_log_lines(io.BytesIO(data))))
    assert [e["generation"] for e in entries[:2]] == ["20261127T140639.588105Z-4112ac02"] * 2
    assert [e["issued"] for e in entries[:2]] == ["2026-11-27T14:06:58Z", "2026-11-27T14:06:59Z"]
    assert [(e["generation"], e["parent"], e["name"]) for e in entries[2:]] == names_of(0, 1, 0)
    with plan_restore(audit_log_lines(io.BytesIO(data)), AuditSelection(), "s") as plan:
        assert len(plan.rows) == 2 + 2 * NAMES_PER_BATCH
        assert plan.by_via == {"partition": 5, "range": 7, "row": 2, "rewrite": 2}
        assert plan.repeated == NAMES_PER_BATCH
        assert plan.generations == ["20261127T140639.588105Z-4112ac02", "g"]


def test_a_batch_of_an_unknown_format_is_refused_naming_its_line() -> None:
    lines = [OLD_LINES.splitlines(keepends=True)[0], '{"format": 3, "generation": "g"}\n']
    with pytest.raises(BadAuditLog, match="line 2: a batch of format 3, not 2"):
        list(iter_audit_entries(lines))


def test_members_larger_than_a_read_chunk_and_torn_ones_among_them_read_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wide partition's batch is a large member: fed to the decompressor in pieces, and read
    from the file in chunks smaller than it, it reads the same; torn, it is skipped."""
    import random

    import dircleaner.audit as module

    monkeypatch.setattr(module, "READ_CHUNK", 1000)
    rng = random.Random(7)
    names = [f"{rng.getrandbits(64):016x}" for _ in range(3000)]
    wide = [action(ActionKind.PARTITION, "wide/", *names)]
    buffer = io.BytesIO()
    log = AuditLog(buffer, "g", 5, compressed=True)
    log.record_many(wide)
    big = buffer.getvalue()
    assert len(big) > 5 * module.FEED > 5 * module.READ_CHUNK
    small = log_of(1, compressed=True)[0]
    expected_big = [("g", "wide/", n) for n in names]
    assert read(small + big + small) == names_of(0) + expected_big + names_of(0)
    for cut in (1, 10, len(big) // 2, len(big) - 9, len(big) - 1):
        assert read(small + big[:cut] + small) == names_of(0) + names_of(0), cut
        assert read(small + big[:cut]) == names_of(0), cut
