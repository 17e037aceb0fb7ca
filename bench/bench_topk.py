"""Benchmark: the k smallest entries per row of a distance block, by k passes of ``argmin`` and by one
``argpartition`` pass plus a sort of the k selected (``objrec.knn``'s ``_topk_argmin`` and
``_topk_partition``, between which ``_topk`` chooses at ``ARGMIN_MAX_K``).

Blocks of ``DEFAULT_BLOCK`` query rows against shortlists of ``--lengths`` descriptors, float32, random;
medians over ``--repeats`` after a warm-up, each time less that of copying the block (both methods write into it).
Reported per (row length, k): both times and their ratio (argmin passes / argpartition: below 1, the passes win).

    python bench/bench_topk.py [--repeats 15] [--ks 2,4,8,12,16,24,32]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from objrec.knn import ARGMIN_MAX_K, DEFAULT_BLOCK, _topk_argmin, _topk_partition


def median_ms(fn, d0: np.ndarray, k: int, repeats: int) -> float:
    """Median time of ``fn(d, k, np)`` on a fresh copy ``d`` of ``d0``, less the copy's own median time."""
    copy, run = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        d = d0.copy()
        copy.append(time.perf_counter() - t)
        t = time.perf_counter()
        d = d0.copy()
        fn(d, k, np)
        run.append(time.perf_counter() - t)
    return 1e3 * (float(np.median(run)) - float(np.median(copy)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--ks", default="2,4,8,12,16,24,32")
    ap.add_argument("--lengths", default="2000,20000")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    ks = [int(x) for x in args.ks.split(",")]
    print(f"numpy {np.__version__}; rows per block {DEFAULT_BLOCK}; ARGMIN_MAX_K = {ARGMIN_MAX_K}")
    print("row length     k   argmin passes ms   argpartition ms   ratio")
    for m in (int(x) for x in args.lengths.split(",")):
        d0 = rng.random((DEFAULT_BLOCK, m), dtype=np.float32)
        for k in ks:
            _topk_argmin(d0.copy(), k, np)  # warm-up
            _topk_partition(d0.copy(), k, np)
            a = median_ms(_topk_argmin, d0, k, args.repeats)
            p = median_ms(_topk_partition, d0, k, args.repeats)
            print(f"{m:10d} {k:5d} {a:18.2f} {p:17.2f} {a / p:7.2f}")


if __name__ == "__main__":
    main()
