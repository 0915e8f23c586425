"""What the generator is asked for and what it reports: the spec, the layout mix, results."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from dircleaner.errors import UsageError
from dircleaner.paths import validate_bucket

Progress = Callable[[int], None]
#: An index row as ``BulkLoader.bulk_insert`` takes it: (token, bucket, parent, name, ts).
Row = tuple[int, str, str, str, int]

DAY_US = 86_400 * 1_000_000

#: (layout, share of the directories). Each is generated as an independent job.
LAYOUT_MIX: tuple[tuple[str, float], ...] = (
    ("hex-root", 0.15),
    ("hex-data", 0.20),
    ("dates", 0.25),
    ("users", 0.25),
    ("ids", 0.15),
)

#: bump whenever the same spec would generate a different dataset (benchmarks key caches on it)
GENERATOR_VERSION = 3

#: The largest share of empty directories the generator makes (every layout keeps live roots).
MAX_EMPTY_FRACTION = 0.9
#: The two clusters of the talk this tool comes from, as shares of empty directories: a steady
#: night (352 empty of 31.5M directories) and a backlog after lazy deletes piled up (16M of 25M).
SHAPES: Mapping[str, float] = MappingProxyType({"steady": 352 / 31_500_000, "backlog": 16 / 25})


@dataclass(frozen=True)
class SynthSpec:
    """What to generate: about ``dirs`` directories, a share of them empty, all from ``seed``.

    ``empty_fraction``: the share of the directories (folder rows) left empty, with no object in
    their subtree; the ground truth lists exactly these.
    """

    dirs: int
    seed: int = 0
    bucket: str = "default"
    empty_fraction: float = 0.05
    #: Write time in µs; default now - 1 day, so ``--min-age`` never spares the dataset.
    timestamp_us: int | None = None

    def __post_init__(self) -> None:
        if self.dirs < 1:
            raise UsageError(f"dirs must be positive, got {self.dirs}")
        if not 0.0 <= self.empty_fraction <= MAX_EMPTY_FRACTION:
            raise UsageError(
                f"empty_fraction must be in [0, {MAX_EMPTY_FRACTION}], got {self.empty_fraction}"
            )
        validate_bucket(self.bucket)


@dataclass(frozen=True)
class LayoutStats:
    """What one layout contributed."""

    name: str
    dirs: int
    empty_dirs: int
    objects: int


@dataclass(frozen=True)
class SynthResult:
    """What was generated, exactly (``dirs`` is the folder-row count, not the target)."""

    dirs: int
    empty_dirs: int
    objects: int
    seconds: float
    generate_seconds: float = 0.0
    load_seconds: float = 0.0
    layouts: tuple[LayoutStats, ...] = ()
    timestamp_us: int = 0
    truth_path: Path | None = None

    @property
    def empty_fraction(self) -> float:
        """Share of the directories that are empty."""
        return self.empty_dirs / self.dirs if self.dirs else 0.0
