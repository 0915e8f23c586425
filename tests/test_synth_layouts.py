"""The generator's layouts: the names it knows, and the mass-deleted wide day it plans for."""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, cast

import pytest

from dircleaner.store.sqlite import SqliteStore
from dircleaner.synth import SynthSpec, generate, plan_jobs
from dircleaner.synth.groundtruth import read_truth
from dircleaner.synth.layouts import WIDE_DAY_EMPTIED, wide_day_empties, write_layout

EMPTIED_CHILDREN = round(676 * WIDE_DAY_EMPTIED)


def test_an_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown layout 'nope'"):
        write_layout("nope", cast(Any, None), random.Random(0), 1000, 0.05)


@pytest.mark.parametrize(("budget", "per_child"), [(5_000, 1.0), (30_000, 2.0), (200_000, 3.0)])
def test_the_wide_days_empties_count_each_childs_hour_directories(
    budget: int, per_child: float
) -> None:
    # A child of the wide day holds up to 0, 1 or 3 hour directories as the layout grows.
    assert wide_day_empties(budget) == EMPTIED_CHILDREN * per_child


def test_a_small_dataset_empties_the_wide_day_as_planned(tmp_path: Path) -> None:
    spec = SynthSpec(dirs=20_000, seed=3, timestamp_us=1_700_000_000_000_000)
    with SqliteStore.open(f"sqlite:///{tmp_path / 'meta.db'}", create=True) as store:
        generate(store, spec, tmp_path / "truth.txt", workers=1)
    dates = next(job.budget for job in plan_jobs(spec, tmp_path) if job.layout == "dates")
    children = re.compile(r"logs/[^/]+/2026/04/11/[A-Z]{2}/$")
    truth = read_truth(tmp_path / "truth.txt")
    emptied = [d for d in truth if children.match(d)]
    # The planned mass delete, plus the odd child that lost its only object besides; the day
    # itself keeps its _SUCCESS marker.
    assert wide_day_empties(dates) == EMPTIED_CHILDREN <= len(emptied) < 676
    assert {d.rsplit("/", 2)[0] + "/" for d in emptied}.isdisjoint(truth)
