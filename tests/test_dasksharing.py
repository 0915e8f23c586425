"""A rate shared by Dask tasks (``workers/dasksharing.py``): the sharers travel by their name, and
away from a worker a slice counts itself alone (the shares on a real cluster are in
``test_rateshare.py``)."""

from __future__ import annotations


def test_a_dask_rate_travels_by_its_name_and_counts_one_outside_a_worker() -> None:
    import pickle

    from dircleaner.workers.dasksharing import DaskSharers

    sharers = DaskSharers("dircleaner-run-rate-0")
    assert pickle.loads(pickle.dumps(sharers)) == sharers
    # Away from a Dask worker (no scheduler to ask) a slice counts itself alone.
    assert sharers.count() == 1
    assert sharers.start_fraction(0.25) == 0.25
    sharers.ended_at(0.8)
    assert sharers.start_fraction(0.25) == 0.8
