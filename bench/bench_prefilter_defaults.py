"""The prefilter's trained defaults on real scenes they never saw.

Trains ``RegionPrefilter().train(db, backgrounds=None)`` (what ``objrec train-prefilter`` and the first
``objrec run`` do without user backgrounds) for several object sets, then measures each on real
backgrounds that training never uses, split into a tuning part and a hold-out part:

- tuning: vtest.avi frames of the first half, every other ukbench_small photo of the first half of the
  folder, Oxford img1 of bark, bikes, boat, graf, and OpenCV's box_in_scene.png;
- hold-out: vtest.avi frames of the second half, ukbench_small photos of the second half, Oxford img1 of
  leuven, trees, ubc, wall, and OpenCV's graf3.png.

Figures, per object set and part: the mean share of empty-frame area rejected (backgrounds resized to
640x480) and the share of object area kept on scenes composed over the same backgrounds
(:func:`objrec.scenes.compose_scene`, 1-3 objects of 5-25% of the frame each). A part's figure is the mean
over its three sources (video frames, photos, still images), so that each kind of scene counts the same.

Object sets: ``demo`` (objrec.data.sample_objects), ``dvd-a`` (SMVS DVD references 001-005),
``dvd-b`` (006-010); ``--cover-sets N`` adds N sets of 3 ``dvd_covers`` drawn at random (``--seed``), and a
summary over them: how the defaults hold on object sets nobody chose (the least and the median rejection, video
frames alone and the three-source mean, and the least object area kept).

A trained prefilter is one draw: its scenes and its calibration split come from the training seed, and the
rejection of one unseen scene (the video frames are one scene) moves by tens of points from seed to seed.
``--train-seeds N`` trains every set N times (seeds ``--seed`` to ``--seed + N - 1``) and reports each seed's
figures with their mean, least and range; the single-seed lines and the cover-set summary are the first seed's.
Compare a change to the prefilter's training over several seeds, not by one seed's figure.

Run: ``.venv/bin/python bench/bench_prefilter_defaults.py [--data ../shared/data] [--sets demo,dvd-a]
[--cover-sets 8] [--train-seeds 4] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from objrec import ModelDB
from objrec.data import sample_objects
from objrec.prefilter import RegionPrefilter, regions_to_mask
from objrec.prefilter.scenes import load_backgrounds
from objrec.scenes import Distortion, compose_scene

TUNING_OXFORD = ("bark", "bikes", "boat", "graf")
HOLDOUT_OXFORD = ("leuven", "trees", "ubc", "wall")
FRAME = (640, 480)


def find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else []
    cands += [Path(os.environ["OBJREC_SHARED_DATA"])] if "OBJREC_SHARED_DATA" in os.environ else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "opencv_samples" / "vtest.avi").exists():
            return c
    sys.exit("shared data (opencv_samples/vtest.avi, ukbench_small/, oxford_affine/) not found; pass --data")


def background_parts(data: Path, n_photos: int) -> dict[str, dict[str, list[np.ndarray]]]:
    """The tuning and hold-out backgrounds by source: video, photos, still images (see the module docstring)."""
    frames = load_backgrounds([data / "opencv_samples" / "vtest.avi"], video_step=20)
    half = len(frames) // 2
    photos = sorted((data / "ukbench_small").glob("*.jpg"))
    mid = len(photos) // 2
    step = max(1, mid // n_photos)
    tune_photos = [cv2.imread(str(p)) for p in photos[:mid:step][:n_photos]]
    hold_photos = [cv2.imread(str(p)) for p in photos[mid::step][:n_photos]]
    oxford = data / "oxford_affine"
    tune_still = [cv2.imread(str(oxford / s / "img1.png")) for s in TUNING_OXFORD]
    tune_still.append(cv2.imread(str(data / "opencv_samples" / "box_in_scene.png")))
    hold_still = [cv2.imread(str(oxford / s / "img1.png")) for s in HOLDOUT_OXFORD]
    hold_still.append(cv2.imread(str(data / "opencv_samples" / "graf3.png")))
    return {
        "tuning": {"video": frames[:half], "photos": tune_photos, "still": tune_still},
        "hold-out": {"video": frames[half:], "photos": hold_photos, "still": hold_still},
    }


def cover_sets(data: Path, n: int, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """``n`` sets of 3 ``dvd_covers`` images drawn at random (without repeats within a set)."""
    covers = sorted((data / "dvd_covers").glob("*.jpg"))
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        picked = [covers[int(j)] for j in rng.choice(len(covers), 3, replace=False)]
        out[f"covers-{i + 1}"] = {p.stem: cv2.imread(str(p)) for p in picked}
    return out


def object_sets(data: Path, names: list[str]) -> dict[str, dict[str, np.ndarray]]:
    dvd = data / "smvs_dvd" / "reference"
    table = {
        "demo": lambda: sample_objects(),
        "dvd-a": lambda: {f"dvd{k:03d}": cv2.imread(str(dvd / f"{k:03d}.jpg")) for k in range(1, 6)},
        "dvd-b": lambda: {f"dvd{k:03d}": cv2.imread(str(dvd / f"{k:03d}.jpg")) for k in range(6, 11)},
    }
    unknown = [n for n in names if n not in table]
    if unknown:
        sys.exit(f"--sets: unknown set(s) {unknown}; expected some of {sorted(table)}")
    return {n: table[n]() for n in names}


def measure(pf: RegionPrefilter, objects: dict[str, np.ndarray], bgs: list[np.ndarray], seed: int) -> dict:
    """Empty-frame area rejected (mean over ``bgs``) and object area kept on one composed scene per background."""
    w, h = FRAME
    rejected = [1.0 - pf.propose(cv2.resize(bg, FRAME, interpolation=cv2.INTER_AREA)).area_fraction(w, h) for bg in bgs]
    rng = np.random.default_rng(seed)
    names = list(objects)
    kept = total = 0
    for bg in bgs:
        chosen = list(rng.choice(names, int(rng.integers(1, min(3, len(names)) + 1)), replace=False))
        d = Distortion(noise_sigma=float(rng.uniform(0, 3)), blur_sigma=float(rng.choice([0.0, 0.8])))
        sc = compose_scene(bg, {n: objects[n] for n in chosen}, rng, FRAME, area_fraction=(0.05, 0.25), distortion=d)
        o = sc.object_mask > 0
        kept += int((regions_to_mask(pf.propose(sc.image), (h, w)) & o).sum())
        total += int(o.sum())
    return {"empty_rejected": float(np.mean(rejected)), "object_area_kept": kept / max(total, 1), "n": len(bgs)}


def train_and_measure(objects: dict[str, np.ndarray], parts: dict, seed: int) -> dict:
    """Train the defaults for ``objects`` with ``seed`` (scenes and trees) and measure them on every part."""
    with tempfile.TemporaryDirectory(prefix="bench-pf-defaults-") as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        for n, img in objects.items():
            db.enroll(n, img)
        t0 = time.perf_counter()
        pf = RegionPrefilter(random_state=seed).train(db, None, seed=seed)
        out: dict = {"train_s": time.perf_counter() - t0}
    for part, sources in parts.items():
        per = {src: measure(pf, objects, bgs, 1000 + seed) for src, bgs in sources.items()}
        r = {k: float(np.mean([v[k] for v in per.values()])) for k in ("empty_rejected", "object_area_kept")}
        out[part] = {**r, "sources": per}
    return out


def seed_summary(runs: list[dict], seeds: list[int], parts: list[str]) -> dict:
    """Per part, over the training seeds: each seed's video-frame and three-source rejection and object area kept,
    with their mean, least and range (what a retrained prefilter of the same objects may give)."""
    out: dict = {"seeds": seeds}
    for part in parts:
        figs = {
            "video_rejected": [r[part]["sources"]["video"]["empty_rejected"] for r in runs],
            "rejected": [r[part]["empty_rejected"] for r in runs],
            "kept": [r[part]["object_area_kept"] for r in runs],
        }
        out[part] = {
            k: {"each": v, "mean": float(np.mean(v)), "min": float(np.min(v)), "range": float(np.ptp(v))}
            for k, v in figs.items()
        }
    return out


def _print_run(set_name: str, part: str, r: dict, train_s: float) -> None:
    per = r["sources"]
    print(
        f"[{set_name}] {part:8s}: empty area rejected {r['empty_rejected']:.1%}, object area kept "
        f"{r['object_area_kept']:.2%} ("
        + ", ".join(f"{k} {v['empty_rejected']:.1%}/{v['object_area_kept']:.2%}" for k, v in per.items())
        + f"; trained in {train_s:.1f} s)"
    )


def _print_seeds(set_name: str, part: str, s: dict) -> None:
    v, m, k = s["video_rejected"], s["rejected"], s["kept"]
    print(
        f"[{set_name}] {part:8s} over {len(v['each'])} training seeds: video frames rejected mean {v['mean']:.1%} "
        f"(least {v['min']:.1%}, range {v['range']:.1%}: " + ", ".join(f"{x:.1%}" for x in v["each"]) + "); "
        f"three sources mean {m['mean']:.1%} (least {m['min']:.1%}, range {m['range']:.1%}); "
        f"object area kept least {k['min']:.2%}"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="shared data folder (default: ../shared/data or $OBJREC_SHARED_DATA)")
    ap.add_argument("--sets", default="demo,dvd-a,dvd-b", help="comma-separated object sets: demo, dvd-a, dvd-b")
    ap.add_argument("--photos", type=int, default=60, help="ukbench_small photos in each part")
    ap.add_argument("--cover-sets", type=int, default=0, metavar="N", help="add N random sets of 3 dvd_covers")
    ap.add_argument("--seed", type=int, default=0, help="training seed (scenes and trees) and cover-set draw")
    ap.add_argument(
        "--train-seeds",
        type=int,
        default=1,
        metavar="N",
        help="train each set N times (seeds --seed .. --seed+N-1) and report the spread over them",
    )
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    if args.train_seeds < 1:
        ap.error(f"--train-seeds: expected at least 1, got {args.train_seeds}")
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    data = find_data(args.data)
    parts = background_parts(data, args.photos)
    print(
        "backgrounds: "
        + "; ".join(f"{k}: " + ", ".join(f"{src} {len(b)}" for src, b in v.items()) for k, v in parts.items())
    )
    res: dict = {}
    sets_to_run = object_sets(data, [s for s in args.sets.split(",") if s])
    sets_to_run.update(cover_sets(data, args.cover_sets, args.seed))
    seeds = [args.seed + k for k in range(args.train_seeds)]
    for set_name, objects in sets_to_run.items():
        runs = [train_and_measure(objects, parts, s) for s in seeds]
        res[set_name] = {**runs[0], "seed": seeds[0]}
        for part in parts:
            _print_run(set_name, part, runs[0][part], runs[0]["train_s"])
        if len(runs) > 1:
            res[set_name]["over_seeds"] = seed_summary(runs, seeds, list(parts))
            for part in parts:
                _print_seeds(set_name, part, res[set_name]["over_seeds"][part])
    sets = list(res)
    random_sets = [s for s in sets if s.startswith("covers-")]
    for part in parts if random_sets else []:
        video = [res[s][part]["sources"]["video"]["empty_rejected"] for s in random_sets]
        mean = [res[s][part]["empty_rejected"] for s in random_sets]
        kept = [res[s][part]["object_area_kept"] for s in random_sets]
        res[f"cover_sets_{part}"] = {
            "n": len(random_sets),
            "video_rejected_min": float(np.min(video)),
            "video_rejected_median": float(np.median(video)),
            "rejected_min": float(np.min(mean)),
            "rejected_median": float(np.median(mean)),
            "kept_min": float(np.min(kept)),
        }
        print(
            f"[{len(random_sets)} cover sets] {part:8s}: video frames rejected least {np.min(video):.1%}, median "
            f"{np.median(video):.1%}; three sources least {np.min(mean):.1%}, median {np.median(mean):.1%}; "
            f"object area kept least {np.min(kept):.2%}"
        )
    for part in parts:
        rej = float(np.mean([res[s][part]["empty_rejected"] for s in sets]))
        kept = float(np.mean([res[s][part]["object_area_kept"] for s in sets]))
        res[f"mean_{part}"] = {"empty_rejected": rej, "object_area_kept": kept}
        print(f"[mean] {part:8s}: empty area rejected {rej:.1%}, object area kept {kept:.2%}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
