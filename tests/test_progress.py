"""progress.py: a total expected where the reports give none (raised by a count that passes it),
and a phase counted in actions rather than in the items they cover."""

from __future__ import annotations

from dataclasses import dataclass

from dircleaner.progress import ActionCounter, expecting, no_progress

Report = tuple[str, int, int | None]


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Report] = []

    def __call__(self, phase: str, done: int, total: int | None) -> None:
        self.seen.append((phase, done, total))


@dataclass
class Action:
    rows: tuple[str, ...]


def test_no_expectation_is_the_progress_itself() -> None:
    shown = Recorder()
    assert expecting(shown, "sweep", None) is shown
    no_progress("sweep", 1, None)  # silent, takes any report


def test_the_expected_total_fills_the_phase_s_reports_and_a_count_past_it_raises_it() -> None:
    shown = Recorder()
    report = expecting(shown, "sweep", 100)
    report("sweep", 10, None)
    report("sweep", 150, None)
    report("sweep", 160, 200)  # a total the report knows wins
    report("build", 5, None)  # another phase goes through as it came
    assert shown.seen == [
        ("sweep", 10, 100),
        ("sweep", 150, 150),
        ("sweep", 160, 200),
        ("build", 5, None),
    ]


def test_a_counted_phase_reports_actions_done_not_rows() -> None:
    shown = Recorder()
    counter = ActionCounter(shown, "clean", 3)
    actions = [Action(("a", "b", "c")), Action(("d",)), Action(("e", "f"))]
    handed = counter.through(iter(actions))
    assert next(handed) is actions[0]
    counter("clean", 2, None)  # the first action's rows not all done yet
    counter("clean", 3, None)
    assert next(handed) is actions[1]
    assert next(handed) is actions[2]
    counter("clean", 6, None)  # both the others at once
    counter("plan", 7, 9)  # another phase goes through as it came
    assert shown.seen == [("clean", 0, 3), ("clean", 1, 3), ("clean", 3, 3), ("plan", 7, 9)]
