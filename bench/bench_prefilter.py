"""Acceptance benchmark of the region prefilter.

Trains a prefilter for the three demo objects (objrec.data.sample_objects) on scenes composed over the
first half of vtest.avi's frames plus the built-in backgrounds (``--defaults-only``: the built-in ones alone,
as ``objrec train-prefilter`` without ``--backgrounds``), then measures on held-out scenes whose backgrounds
were never used in training (the second half of vtest.avi, or all of it, and Oxford affine images):

1. object area kept (objects covering 5-25% of a 640x480 frame) and frame area rejected on empty frames;
2. cost: ``propose`` vs OpenCV SIFT on the same 640x480 frames, interleaved, medians after warm-up;
3. recognition: SIFT on crops of the proposed regions (box + margin) vs on the full frame, matched with
   DatabaseMatcher and verified; recall and feature-extraction time.

Run: ``.venv/bin/python bench/bench_prefilter.py [--data ../shared/data] [--json out.json]``
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from objrec import ModelDB
from objrec.data import sample_objects
from objrec.features import SIFT
from objrec.matching import DatabaseMatcher, VerifyParams
from objrec.matching.verifier import CandidateVerifier, aspect_limits
from objrec.prefilter import RegionPrefilter, expand_regions, regions_to_mask
from objrec.prefilter.scenes import default_backgrounds
from objrec.scenes import Distortion, compose_scene
from objrec.types import Detection, Features

OXFORD = ("bark", "bikes", "boat", "graf", "leuven", "trees", "ubc", "wall")


def find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else []
    cands += [Path(os.environ["OBJREC_SHARED_DATA"])] if "OBJREC_SHARED_DATA" in os.environ else []
    here = Path(__file__).resolve()
    cands += [p / "shared" / "data" for p in here.parents]
    for c in cands:
        if (c / "opencv_samples" / "vtest.avi").exists():
            return c
    sys.exit("shared data (opencv_samples/vtest.avi, oxford_affine/) not found; pass --data")


def video_frames(path: Path) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    out = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        out.append(f)
    cap.release()
    return out


def detect(matcher: DatabaseMatcher, verifier: CandidateVerifier, feats: Features, shape) -> list[Detection]:
    """The verified detections among the matcher's candidates (geometry only: no frame for the appearance check)."""
    results = (verifier.verify(c, shape) for c in matcher.candidates(feats))
    return [v for v in results if isinstance(v, Detection)]


def sift_regions(sift: SIFT, gray: np.ndarray, regions) -> Features:
    parts = []
    for x0, y0, x1, y1 in regions.boxes:
        crop = gray[y0:y1, x0:x1]
        if crop.shape[0] < 16 or crop.shape[1] < 16:
            continue
        parts.append(sift.detect_and_compute(crop).shifted(float(x0), float(y0)))
    return Features.concatenate(parts) if parts else Features.empty(128, "sift")


def main() -> int:  # noqa: C901, PLR0912, PLR0915 - the benchmark's sections in order, one script
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", help="shared data folder (default: ../shared/data or $OBJREC_SHARED_DATA)")
    ap.add_argument("--train-scenes", type=int, default=500)
    ap.add_argument("--test-scenes", type=int, default=120)
    ap.add_argument("--timing-frames", type=int, default=20)
    ap.add_argument(
        "--crop-margin",
        type=int,
        default=0,
        help="px added around boxes for SIFT crops (boxes carry the prefilter's own margin)",
    )
    ap.add_argument("--recognition-objects", type=int, default=1, help="objects per recognition scene (1-3)")
    ap.add_argument(
        "--defaults-only",
        action="store_true",
        help="train on the built-in backgrounds only (what train-prefilter does without --backgrounds); "
        "every vtest frame (step 10) is then a test background",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    import numba

    print(f"threads: numba {numba.get_num_threads()}, OpenCV {cv2.getNumThreads()}, cpus {os.cpu_count()}")
    data = find_data(args.data)
    frames = video_frames(data / "opencv_samples" / "vtest.avi")
    half = len(frames) // 2
    train_bg = default_backgrounds() if args.defaults_only else frames[:half:10] + default_backgrounds()
    test_video = frames[::10] if args.defaults_only else frames[half::10]
    test_oxford = [cv2.imread(str(data / "oxford_affine" / s / f"img{k}.png")) for s in OXFORD for k in (1, 4)]
    test_bg = test_video + test_oxford
    if args.defaults_only:
        print(
            f"training backgrounds: the {len(train_bg)} built-in ones (no vtest); test: {len(test_video)} vtest "
            f"frames (all, step 10) + {len(test_oxford)} Oxford images (img1, img4 of {', '.join(OXFORD)})"
        )
    else:
        print(
            f"training backgrounds: {len(frames[:half:10])} vtest frames (0..{half - 1}, step 10) + "
            f"{len(train_bg) - len(frames[:half:10])} built-in; test: {len(test_video)} vtest frames "
            f"({half}.., step 10) + {len(test_oxford)} Oxford images (img1, img4 of {', '.join(OXFORD)})"
        )

    tmp = tempfile.mkdtemp(prefix="bench-prefilter-")
    atexit.register(shutil.rmtree, tmp, True)
    db = ModelDB.create(Path(tmp) / "db")
    objects = sample_objects()
    for n, img in objects.items():
        db.enroll(n, img)
    t0 = time.perf_counter()
    pf = RegionPrefilter(random_state=args.seed).train(db, train_bg, n_scenes=args.train_scenes, seed=args.seed)
    t_train = time.perf_counter() - t0
    print(f"trained in {t_train:.1f} s: {json.dumps(pf.training_report_)}")

    # 1. held-out scenes: object area kept; empty frames: area rejected.
    rng = np.random.default_rng(1000 + args.seed)
    names = list(objects)
    scenes = []
    for i in range(args.test_scenes):
        bg = test_bg[i % len(test_bg)]
        k = int(rng.integers(1, 4))
        chosen = list(rng.choice(names, k, replace=False))
        d = Distortion(noise_sigma=float(rng.uniform(0, 3)), blur_sigma=float(rng.choice([0.0, 0.8])))
        scenes.append(
            (
                i,
                compose_scene(
                    bg, {n: objects[n] for n in chosen}, rng, (640, 480), area_fraction=(0.05, 0.25), distortion=d
                ),
            )
        )
    kept = total = 0
    per_scene = []
    for _, sc in scenes:
        m = regions_to_mask(pf.propose(sc.image), (480, 640))
        o = sc.object_mask > 0
        kept += int((m & o).sum())
        total += int(o.sum())
        per_scene.append((m & o).sum() / max(o.sum(), 1))
    rej = []
    for bg in test_bg:
        img = cv2.resize(bg, (640, 480), interpolation=cv2.INTER_AREA)
        rej.append(1.0 - pf.propose(img).area_fraction(640, 480))
    rej = np.array(rej)
    nv = len(test_video)
    res = {
        "object_area_kept": kept / total,
        "object_area_kept_worst_scene": float(min(per_scene)),
        "empty_rejected_mean": float(rej.mean()),
        "empty_rejected_video": float(rej[:nv].mean()),
        "empty_rejected_oxford": float(rej[nv:].mean()),
        "empty_rejected_oxford_per_image": {
            f"{s}/img{k}": round(float(v), 3)
            for (s, k), v in zip([(s, k) for s in OXFORD for k in (1, 4)], rej[nv:], strict=True)
        },
    }
    print(
        f"[area] object area kept {res['object_area_kept']:.2%} over {len(scenes)} held-out scenes "
        f"(worst scene {res['object_area_kept_worst_scene']:.2%}); empty frames: rejected "
        f"{res['empty_rejected_mean']:.1%} on average ({nv} vtest frames {res['empty_rejected_video']:.1%}, "
        f"{len(test_oxford)} Oxford images {res['empty_rejected_oxford']:.1%})"
    )

    # 2. cost on 640x480 frames, interleaved, medians after warm-up.
    sift = SIFT(backend="cpu")
    tp, ts = [], []
    timing = [sc.image for _, sc in scenes[: args.timing_frames]]
    for img in timing[:3]:
        pf.propose(img)
        sift.detect_and_compute(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY))
    for img in timing:
        gray = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        for _ in range(3):
            t = time.perf_counter()
            pf.propose(img)
            tp.append(time.perf_counter() - t)
        t = time.perf_counter()
        sift.detect_and_compute(gray)
        ts.append(time.perf_counter() - t)
    res["propose_ms_median"] = float(np.median(tp) * 1e3)
    res["sift_ms_median"] = float(np.median(ts) * 1e3)
    res["propose_over_sift"] = res["propose_ms_median"] / res["sift_ms_median"]
    print(
        f"[cost] 640x480: propose {res['propose_ms_median']:.2f} ms, OpenCV SIFT {res['sift_ms_median']:.1f} ms "
        f"(medians over {len(timing)} frames after warm-up) -> {res['propose_over_sift']:.2%} of SIFT"
    )

    # 3. recognition with and without the prefilter, on scenes holding --recognition-objects objects
    #    (each 5-25% of the frame) over the held-out backgrounds.
    rec_scenes = []
    for i in range(args.test_scenes):
        chosen = list(rng.choice(names, args.recognition_objects, replace=False))
        d = Distortion(noise_sigma=float(rng.uniform(0, 3)), blur_sigma=float(rng.choice([0.0, 0.8])))
        bg = test_bg[(7 * i + 3) % len(test_bg)]
        rec_scenes.append(
            (
                i,
                compose_scene(
                    bg, {n: objects[n] for n in chosen}, rng, (640, 480), area_fraction=(0.05, 0.25), distortion=d
                ),
            )
        )
    models = db.objects()
    matcher = DatabaseMatcher(models, "sift")
    verifier = CandidateVerifier(VerifyParams(), aspect_limits(models))
    hit_full = hit_pf = n_obj = 0
    t_full, t_pf = [], []
    for _, sc in rec_scenes:
        gray = cv2.cvtColor(sc.image, cv2.COLOR_BGR2GRAY)
        t = time.perf_counter()
        f_full = sift.detect_and_compute(gray)
        t_full.append(time.perf_counter() - t)
        t = time.perf_counter()
        regions = expand_regions(pf.propose(sc.image), gray.shape, args.crop_margin)
        f_pf = sift_regions(sift, gray, regions)
        t_pf.append(time.perf_counter() - t)
        for feats, counter in ((f_full, "full"), (f_pf, "pf")):
            dets = {d.name: d for d in detect(matcher, verifier, feats, gray.shape)}
            for o in sc.objects:
                if o.visible_fraction < 0.5:
                    continue
                d = dets.get(o.name)
                ok = d is not None and float(np.linalg.norm(d.corners - o.corners, axis=1).mean()) < 10.0
                if counter == "full":
                    hit_full += ok
                    n_obj += 1
                else:
                    hit_pf += ok
    res["recall_full"] = hit_full / max(n_obj, 1)
    res["recall_prefilter"] = hit_pf / max(n_obj, 1)
    res["feature_ms_full_total"] = float(np.sum(t_full) * 1e3)
    res["feature_ms_prefilter_total"] = float(np.sum(t_pf) * 1e3)
    res["feature_time_drop"] = res["feature_ms_full_total"] / res["feature_ms_prefilter_total"]
    print(
        f"[recognition] {len(rec_scenes)} scenes, {args.recognition_objects} object(s) each, {n_obj} objects: "
        f"recall full frame {res['recall_full']:.1%}, with prefilter "
        f"{res['recall_prefilter']:.1%} ({100 * (res['recall_prefilter'] - res['recall_full']):+.1f} points); "
        f"feature extraction {res['feature_ms_full_total']:.0f} ms -> {res['feature_ms_prefilter_total']:.0f} ms "
        f"(propose + SIFT on crops with {args.crop_margin} px margin): {res['feature_time_drop']:.2f}x less"
    )
    checks = {
        "area kept >= 99%": res["object_area_kept"] >= 0.99,
        "empty area rejected >= 75%": res["empty_rejected_mean"] >= 0.75,
        "propose <= 3% of SIFT": res["propose_over_sift"] <= 0.03,
        "recall within 1 point": res["recall_prefilter"] >= res["recall_full"] - 0.01,
        "feature time drop >= 3x": res["feature_time_drop"] >= 3.0,
    }
    res["checks"] = checks
    print("checks: " + ", ".join(f"{k}: {'PASS' if v else 'FAIL'}" for k, v in checks.items()))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
