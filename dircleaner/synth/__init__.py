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
stream (whole empty subtrees, depth 4), days a lazy delete left behind (a run of most of a live
day's children emptied), a mass delete in one live day (``2026/04/11``: ~90% of its 676
children emptied while the day keeps ``_SUCCESS``), deleted users and sub-trees, deleted hex
shards, retention of the oldest orders (a run of thousands of empty siblings in one wide
partition), and scattered single deletions (a leaf losing its only object).

``SynthSpec.empty_fraction`` (0 to 0.9) is the share of the directories left empty, as the
ground truth counts them. The larger it is, the more of it comes from whole subtrees and runs
(``SHAPES["backlog"]``, 0.64, is the talk's 16M empty of 25M); a share of a few directories in
millions (``SHAPES["steady"]``, the talk's 352 of 31.5M) comes from lone deletions only.
``dircleaner.synth.shares`` gives each layout a whole number of empties, and the set pieces
(the wide day, the deleted ``tmp/`` uploads, a third of the odd names, a deep chain) only when
the share has room for them; a feedback per layout (``Writer.want_empty``) then holds the
layout to its number, whatever the seed and size: the share comes out within 0.4 percentage
points from 10k directories on, 0.01 from 100k on, and within a few directories at the
smallest shares.

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
