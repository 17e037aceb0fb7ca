"""Generated distractor objects for catalogue runs at large N (``objrec eval catalogue:... --distractors DIR``).

Writes ``--n`` JPEG images into ``--out``, none showing an SMVS DVD cover:

* **generated covers** (half of them): :func:`objrec.data.synthetic_cover` (a colour gradient, 25-40 filled
  and outlined shapes and lines, 3-5 lines of text in one font, print grain) at a random size between
  240x320 and 420x560 and aspect ratio; titles share one vocabulary and font, as real covers share type;
* **crops and warps of real photos** (the other half): a random crop (45-90% of each side) of one of the 234
  ``dvd_covers`` or the 1692 ``ukbench_small`` thumbnails (household objects, CD covers), warped by a random
  perspective (corners moved up to 12% of the side), rotated by a multiple of 90 degrees half of the time,
  with a random gain, gamma and hue shift, resized to 300-560 pixels on the long side.

The images are deterministic for a given ``--seed``, and a rerun keeps the files already written.

    python bench/make_distractors.py --out /tmp/distractors --n 8000 [--data ../shared/data] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from objrec.data import synthetic_cover  # noqa: E402


def data_root(arg: str | None) -> Path:
    env = os.environ.get("OBJREC_SHARED_DATA")
    for c in [Path(arg)] if arg else [Path(env)] if env else [ROOT.parent / "shared" / "data"]:
        if (c / "dvd_covers").is_dir() and (c / "ukbench_small").is_dir():
            return c
    sys.exit("shared data (dvd_covers/, ukbench_small/) not found; pass --data")


def cover(rng: np.random.Generator) -> np.ndarray:
    w = int(rng.integers(240, 421))
    h = int(w * rng.uniform(1.0, 1.45))
    return synthetic_cover(int(rng.integers(1 << 31)), (w, h))


def crop_and_warp(src: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    h, w = src.shape[:2]
    cw, ch = int(w * rng.uniform(0.45, 0.9)), int(h * rng.uniform(0.45, 0.9))
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = src[y0 : y0 + ch, x0 : x0 + cw]
    side = int(rng.integers(300, 561))
    s = side / max(cw, ch)
    ow, oh = max(32, int(cw * s)), max(32, int(ch * s))
    quad = np.float32([[0, 0], [cw, 0], [cw, ch], [0, ch]])
    jitter = rng.uniform(-0.12, 0.12, (4, 2)) * [ow, oh]
    dst = np.float32([[0, 0], [ow, 0], [ow, oh], [0, oh]] + jitter)
    dst -= dst.min(0)
    size = (int(np.ceil(dst[:, 0].max())), int(np.ceil(dst[:, 1].max())))
    H = cv2.getPerspectiveTransform(quad, dst)
    img = cv2.warpPerspective(img, H, size, flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REFLECT)
    if rng.random() < 0.5:
        img = np.ascontiguousarray(np.rot90(img, int(rng.integers(1, 4))))
    gain, gamma = rng.uniform(0.75, 1.25), rng.uniform(0.8, 1.25)
    lut = np.clip(255.0 * np.clip(gain * np.arange(256) / 255.0, 0, 1) ** gamma, 0, 255).astype(np.uint8)
    hsv = cv2.cvtColor(cv2.LUT(img, lut), cv2.COLOR_BGR2HSV)
    hsv[..., 0] = ((hsv[..., 0].astype(np.int32) + int(rng.integers(0, 180))) % 180).astype(np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--n", type=int, required=True, help="images to write")
    ap.add_argument("--data")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.n < 1:
        sys.exit("--n: expected at least 1")
    data = data_root(args.data)
    sources = sorted((data / "dvd_covers").glob("*.jpg")) + sorted((data / "ukbench_small").glob("*.jpg"))
    if not sources:
        sys.exit(f"{data}: no source images in dvd_covers/ or ukbench_small/")
    args.out.mkdir(parents=True, exist_ok=True)
    written = 0
    for i in range(args.n):
        path = args.out / f"gen{i:05d}.jpg"
        if path.exists():
            continue
        rng = np.random.default_rng([args.seed, i])  # each image from its own seed: a rerun resumes
        if i % 2 == 0:
            img = cover(rng)
        else:
            src = cv2.imread(str(sources[int(rng.integers(len(sources)))]))
            if src is None:
                continue
            img = crop_and_warp(src, rng)
        tmp = path.with_name(path.name + ".part.jpg")
        if not cv2.imwrite(str(tmp), img, [cv2.IMWRITE_JPEG_QUALITY, 90]):
            sys.exit(f"{tmp}: could not be written")
        os.replace(tmp, path)
        written += 1
        if written % 1000 == 0:
            print(f"{written} written", flush=True)
    print(f"{args.out}: {len(list(args.out.glob('gen*.jpg')))} images ({written} written now)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
