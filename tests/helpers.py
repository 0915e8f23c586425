"""Shared test helpers: datasets with known truth, and running the CLI."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from dircleaner.audit import read_audit_log
from dircleaner.cli import cli
from dircleaner.paths import directories_of


def invoke(store_url: str, *args: str, input: bytes | str | None = None) -> Result:
    """Run the CLI in-process against ``store_url``."""
    return CliRunner().invoke(cli, ["--store", store_url, *args], input=input)


def said(result: Result) -> str:
    """What a command said on stderr after naming its store (and what it created there), the
    first lines of every command that writes."""
    lines = result.stderr.splitlines(keepends=True)
    if lines and lines[0].startswith("store: "):
        lines = lines[1:]
        while lines and lines[0].startswith("created "):
            lines = lines[1:]
    return "".join(lines)


def expected_dirs(put: Iterable[str], deleted: Iterable[str]) -> tuple[set[str], set[str]]:
    """(all directories ever created, the non-empty ones) for keys put and then deleted."""
    put = list(put)
    dead = set(deleted)
    every = {d for key in put for d in directories_of(key)}
    live = {d for key in put if key not in dead for d in directories_of(key)}
    return every, live


def audit_entries(path: Path) -> list[dict[str, Any]]:
    """Every entry of an audit log (plain or compressed), with its batch's fields."""
    if not path.exists():
        return []
    return list(read_audit_log(path))


def audit_lines_written(path: Path) -> int:
    """Complete lines in an audit log that a running clean may be appending to: a reader can
    see a large write in part, so a torn last line is neither counted nor parsed."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def row_tombstones_per_partition(entries: Sequence[dict[str, str]]) -> Counter[tuple[str, str]]:
    """Row deletes per (bucket, parent) partition in an audit log."""
    return Counter((e["bucket"], e["parent"]) for e in entries if e["via"] == "row")


def tombstones_per_partition(entries: Sequence[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """Tombstones per (bucket, parent) partition an audit log's row and range deletes wrote:
    1 per row delete, 2 per range delete (its bounds; one line per directory it removed)."""
    out = row_tombstones_per_partition(entries)
    ranges = {(e["bucket"], e["parent"], *e["range"]) for e in entries if e["via"] == "range"}
    out.update((bucket, parent) for bucket, parent, _first, _last in ranges for _ in range(2))
    return out


def write_toml(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def write_lines(path: Path, lines: Iterable[str]) -> Path:
    path.write_bytes(b"".join(line.encode("utf-8") + b"\n" for line in lines))
    return path


#: a run that deletes all it may at once: no age cut-off, no fraction guard, no throttle
EAGER = ("--min-age", "0", "--max-delete-fraction", "1", "--rate", "0")


def run_eagerly(store_url: str, audit: Path, *extra: str) -> Result:
    """``dircleaner run`` with EAGER options, auditing to ``audit``."""
    return invoke(store_url, "run", *EAGER, "--audit-log", str(audit), *extra)


#: a label every sample of a metrics file carries: which kind of run, which store
RUN_LABEL = re.compile(r'(command|store)="(?:[^"\\]|\\.)*",?')


def samples_of(text: str) -> dict[str, float]:
    """A metrics file's samples, keyed by name and their own labels (``phase``, ``pass``)
    without the labels every sample carries (``command``, ``store``: ``run_labels``)."""
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            values[RUN_LABEL.sub("", series).replace(",}", "}").replace("{}", "")] = float(value)
    return values


def run_labels(text: str) -> set[str]:
    """The ``command``/``store`` labels of every sample of a metrics file (one set: all the
    same)."""
    return {
        ",".join(m.group(0).rstrip(",") for m in RUN_LABEL.finditer(line.rsplit(" ", 1)[0]))
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def small_store(tmp_path: Path) -> str:
    """An SQLite store of 60 objects in 60 leaf directories, 9 of them emptied."""
    keys = [f"data/{i % 7}/{i}/obj" for i in range(60)]
    url = f"sqlite:///{tmp_path}/meta.db"
    assert invoke(url, "import-keys", str(write_lines(tmp_path / "k.txt", keys))).exit_code == 0
    assert invoke(url, "delete-keys", str(write_lines(tmp_path / "d.txt", keys[:9]))).exit_code == 0
    return url


def one_line_error(output: str) -> str:
    """The one error line (after the line naming the store, of a command that writes)."""
    lines = [line for line in output.splitlines() if line.strip()]
    if lines and lines[0].startswith("store: "):
        lines = lines[1:]
    assert len(lines) == 1, output
    assert lines[0].startswith("Error: ")
    return lines[0]
