"""Generated distractor objects for catalogue runs at large N (``objrec eval catalogue:... --distractors DIR``).

Writes ``--n`` JPEG images ``gen<index>.jpg`` into ``--out`` (:mod:`distractor_images`): generated covers
(backgrounds, shapes and panels, text in OpenCV's Hershey fonts at varied sizes and layouts), several crops
of different photos tiled into one object, and warped crops of one photo. The photos are every real distractor
image (``dvd_covers``, ``ukbench_small``, ``ukbench``, Oxford affine, COIL-100 and ``vtest.avi`` frames, as
``bench/catalogue_plan.py`` lists them; never an SMVS cover). Deterministic for a given ``--seed``; a rerun
keeps the files already written and writes the rest. ``bench_catalogue_sizes.py`` makes the same files itself
(in ``--cache``/``gen_<seed>``) as its sizes need them.

    python bench/make_distractors.py --out /tmp/distractors --n 8000 [--data ../shared/data] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from catalogue_plan import real_distractors  # noqa: E402
from distractor_images import write_distractors  # noqa: E402


def data_root(arg: str | None) -> Path:
    env = os.environ.get("OBJREC_SHARED_DATA")
    for c in [Path(arg)] if arg else [Path(env)] if env else [ROOT.parent / "shared" / "data"]:
        if (c / "dvd_covers").is_dir() and (c / "ukbench_small").is_dir():
            return c
    sys.exit("shared data (dvd_covers/, ukbench_small/) not found; pass --data")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, required=True, help="images to write")
    ap.add_argument("--data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vtest-step", type=int, default=5, help="every k-th vtest.avi frame is a source photo")
    args = ap.parse_args()
    if args.n < 1:
        sys.exit("--n: expected at least 1")
    data = data_root(args.data)
    sources = [p for _, p in real_distractors(data, args.out / ".sources", args.vtest_step)]
    before = len(list(args.out.glob("gen*.jpg"))) if args.out.is_dir() else 0
    t0 = time.perf_counter()
    write_distractors(args.out, args.n, sources, args.seed)
    print(f"{args.out}: {args.n} images ({max(0, args.n - before)} written in {time.perf_counter() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
