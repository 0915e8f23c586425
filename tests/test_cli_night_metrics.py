"""The series that say which kind of night ran and, after a churn night, the journal's figures."""

from __future__ import annotations

from dircleaner.cli.metrics import RunMetrics, render
from dircleaner.cli.night_metrics import CHURN, FULL, ChurnFigures, night_gauges

FIGURES = ChurnFigures(
    slots_read=24,
    entries_read=900,
    checked=950,
    reads=1400,
    deferred=3,
    oldest_entry_age_s=90_000.0,
)


def test_the_kind_of_night_is_a_label_and_the_journal_figures_follow_a_churn_night() -> None:
    assert night_gauges(None, None) == []
    (full,) = night_gauges(FULL, None)
    assert full[0] == "night" and full[2:] == (1.0, 'kind="full"')
    churn = {name: value for name, _help, value, _labels in night_gauges(CHURN, FIGURES)}
    assert churn == {
        "night": 1.0,
        "journal_slots_read": 24.0,
        "journal_entries_read": 900.0,
        "journal_checked_directories": 950.0,
        "journal_check_reads": 1400.0,
        "journal_backlog_directories": 3.0,
        "journal_oldest_entry_age_seconds": 90_000.0,
    }


def test_rendered_beside_the_runs_own_series() -> None:
    text = render(RunMetrics(night=CHURN, churn=FIGURES), success=True, finished_at=1.0)
    assert '# TYPE dircleaner_night gauge\ndircleaner_night{kind="churn"} 1\n' in text
    assert "dircleaner_journal_backlog_directories 3\n" in text
    assert "dircleaner_journal_" not in render(RunMetrics(night=FULL), success=True, finished_at=1)
