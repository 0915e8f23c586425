"""Deterministic synthetic metastores with a known ground truth, fast enough for 30M directories.

The dataset is the *end state* an S3 front-end leaves behind: a folder row for every directory ever
created and an object row for every object still alive; deleted objects are simply never written
(a small ``tmp/`` tree does go through ``put_objects``/``delete_objects`` to exercise that path).

Four layout families, taken from the key-design material in ``seeds/``, share the directories
(hex shards are two independent jobs):

========== ===== ===========================================================================
layout     share shape
========== ===== ===========================================================================
hex-root   15%   hex shards at the top of the bucket: ``a/1/b/image_1.jpg``, ``3f/a2/9c/obj-7.bin``
hex-data   20%   hex shards under named roots: ``data/3f/a2/9c/obj-123.bin``
dates      25%   ``logs/web/2026/04/11/AB/14/part-00000.log.gz``: 676 ``AA``..``ZZ`` per day
users      25%   ``users/u000042/photos/2024/trip-3/…``: Zipf fan-out, depth up to ~10, deep chains
ids        15%   ``orders/000100123/invoice.pdf``: sequential ids, wide partitions of ≤250k
========== ===== ===========================================================================

Deletes applied (all decided by the seed): lifecycle expiration of the oldest days of every log
stream (whole empty subtrees, depth 4), a mass delete in one live day (``2026/04/11``: ~90% of its
676 children emptied while the day keeps ``_SUCCESS``), deleted users and sub-trees, retention of
the oldest orders, and scattered single deletions (a leaf losing its only object). A feedback loop
keeps each layout's share of empty directories near ``SynthSpec.empty_fraction``.

How it is fast: the tree is generated depth-first, so a directory's emptiness is known when it is
left; rows are tokenised once per partition and spilled, bucketed by token range, to temp files;
the load then inserts one token bucket at a time, in near token order, so SQLite's B-trees grow at
their right edge. Layouts are independent jobs, generated in parallel processes; the output does
not depend on the number of workers.
"""

from dircleaner.synth.runner import (
    generate,
    iter_layout_keys,
    plan_jobs,
)
from dircleaner.synth.spec import (
    GENERATOR_VERSION,
    LAYOUT_MIX,
    MAX_EMPTY_FRACTION,
    SHAPES,
    LayoutStats,
    SynthResult,
    SynthSpec,
)

__all__ = [
    "GENERATOR_VERSION",
    "LAYOUT_MIX",
    "MAX_EMPTY_FRACTION",
    "SHAPES",
    "LayoutStats",
    "SynthResult",
    "SynthSpec",
    "generate",
    "iter_layout_keys",
    "plan_jobs",
]
