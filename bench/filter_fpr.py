"""What a lower false-positive rate costs per key: the filter kernels at two or more ``--fpr``.

    python bench/filter_fpr.py --capacity 30000000 --keys 1000000 --fprs 0.01 0.005

Each rate gets a filter sized for ``--capacity`` directories (a 30M-sized table misses the CPU
caches as the build and the sweep do at that scale), then times, per key: adding ``--keys`` keys,
testing them again (members: every hash probed), and testing as many absent keys (a test stops at
the first clear bit). The rates alternate within each of ``--repeat`` rounds; medians are printed.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import numpy.typing as npt

from dircleaner.filter.bloom import BloomFilter, load_kernels


def _packed(keys: list[bytes]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(k) for k in keys], out=offsets[1:])
    return np.frombuffer(b"".join(keys), dtype=np.uint8), offsets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--capacity", type=int, default=30_000_000)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--fprs", type=float, nargs="+", default=[0.01, 0.005])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    load_kernels()
    n = args.keys
    members = _packed([f"default/dir{i:08d}/sub{i % 977}/".encode() for i in range(n)])
    absent = _packed([f"default/none{i:08d}/x/".encode() for i in range(n)])
    times: dict[float, list[tuple[float, float, float]]] = {p: [] for p in args.fprs}
    for _ in range(args.repeat):
        for p in args.fprs:
            filt = BloomFilter.for_capacity(args.capacity, p, 7)
            t0 = time.perf_counter()
            filt.add_ranges(members[0], members[1][:-1], members[1][1:])
            t1 = time.perf_counter()
            assert filt.contains_packed(*members).all()
            t2 = time.perf_counter()
            filt.contains_packed(*absent)
            t3 = time.perf_counter()
            times[p].append((t1 - t0, t2 - t1, t3 - t2))
    print("| fpr | k | bits | add ns/key | member test ns/key | absent test ns/key |")
    print("|---|---|---|---|---|---|")
    for p, runs in times.items():
        filt = BloomFilter.for_capacity(args.capacity, p, 7)
        add, member, miss = (np.median(np.array(runs), axis=0) / n * 1e9).tolist()
        print(f"| {p:g} | {filt.k} | {filt.m:,} | {add:.0f} | {member:.0f} | {miss:.0f} |")


if __name__ == "__main__":
    main()
