"""The metrics that say which kind of night ran, and the journal's backlog after a churn night
(new series beside ``metrics.py``'s, rendered by its ``render``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dircleaner.job.changed import ChangedCleanReport

#: the kinds of night (label ``kind`` of ``dircleaner_night``)
CHURN, FULL = "churn", "full"


@dataclass(frozen=True)
class ChurnFigures:
    """What a churn night tells monitoring of the journal."""

    slots_read: int
    entries_read: int
    #: directories checked (journaled, and parents the cascade added), and what that read
    checked: int
    reads: int
    #: directories put back in the journal for a later night (tombstones, budget)
    deferred: int
    #: the age of the oldest journal slot the night read that held a row
    oldest_entry_age_s: float

    @classmethod
    def of(cls, report: ChangedCleanReport) -> ChurnFigures:
        t = report.totals
        return cls(
            slots_read=len(report.slots.read),
            entries_read=t.entries,
            checked=t.journaled + t.parents,
            reads=t.reads.total,
            deferred=report.deferred,
            oldest_entry_age_s=round(report.oldest_entry_age_s, 1),
        )


#: (metric name, help, how to read it from a churn night)
_CHURN_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("journal_slots_read", "Hourly slots of the journal the churn night read.", "slots_read"),
    ("journal_entries_read", "Journal rows the churn night read.", "entries_read"),
    (
        "journal_checked_directories",
        "Directories the churn night checked: journaled, and parents of those it emptied.",
        "checked",
    ),
    (
        "journal_check_reads",
        "Partitions and rows the churn night's checks read.",
        "reads",
    ),
    (
        "journal_backlog_directories",
        "Directories the churn night put back in the journal for a later night (objects"
        " partitions full of tombstones, live partitions out of budget).",
        "deferred",
    ),
    (
        "journal_oldest_entry_age_seconds",
        "Age of the oldest journal slot holding a row the churn night read (about a day when"
        " no night is missed; 0: it read none).",
        "oldest_entry_age_s",
    ),
)


def night_gauges(
    night: str | None, churn: ChurnFigures | None
) -> list[tuple[str, str, float, str]]:
    """(name, help, value, labels) of the night's kind and, after a churn night, its journal
    figures."""
    out: list[tuple[str, str, float, str]] = []
    if night is not None:
        out.append(
            (
                "night",
                "1 for the kind of night this run was: churn (clean --changed) or full (run).",
                1.0,
                f'kind="{night}"',
            )
        )
    if churn is not None:
        out.extend(
            (name, help_text, float(getattr(churn, field)), "")
            for name, help_text, field in _CHURN_GAUGES
        )
    return out
