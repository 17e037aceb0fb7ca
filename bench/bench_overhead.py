"""Overhead of everything after feature extraction (matching, verification) against the extraction itself.

Acceptance: on a 1920x1080 scene composed from real images, with 3 enrolled objects of about
1000 features each, matching + verification cost at most 15% of the extraction time, as a ratio measured
in one run.

The scene: a 2x2 mosaic of Oxford affine images (wall, trees, ubc, leuven; real texture everywhere) with
crops of graf, boat and bark composited in by ``objrec.scenes.compose_scene`` at known homographies. The
objects are enrolled into a temporary ``objrec.ModelDB`` whose SIFT is capped at 1000 features per object.
The scene's SIFT is uncapped by default (``--scene-features 0``), the demanding case: every scene feature
is matched against all 3000 model features. Without ``../shared/data`` the objrec.data sample images stand
in (say so in the output).

Timed per repeat, after warm-up: extraction (objrec SIFT, OpenCV on the CPU) on the gray frame; matching
(``DatabaseMatcher.candidates``: 2-NN by blocked GEMM, ratio test, grouping); verification
(``CandidateVerifier.verify`` on each candidate: USAC homography and degeneracy checks; no frame is given,
so no appearance check). Medians over ``--repeats``.

The default matcher searches a database of 2048 SIFT descriptors or more through a one-level spill tree
of two exact GEMM leaves (``objrec.knn.SpillIndex``); the exact brute-force matcher
(``exact=True``) is timed in the same repeats, and the share of its ratio-test matches that the default
also finds is reported.

    python bench/bench_overhead.py --repeats 7
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cv2
import numpy as np
from baseline_findobj import thread_report  # noqa: E402  (one thread report for every bench)

FRAME = (1920, 1080)


def _find_shared_data() -> Path | None:
    env = os.environ.get("OBJREC_SHARED_DATA")
    cands = [Path(env)] if env else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "oxford_affine").is_dir():
            return c
    return None


def _read(path: Path) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise SystemExit(f"{path}: cannot read image")
    return img


def build_inputs(data: Path | None) -> tuple[np.ndarray, dict[str, np.ndarray], str]:
    """Background (at least 1920x1080) and object images, and a description of where they come from."""
    if data is not None:
        ox = data / "oxford_affine"
        tiles = [_read(ox / s / "img1.png") for s in ("wall", "trees", "ubc", "leuven")]
        tiles = [cv2.resize(t, (FRAME[0] // 2, FRAME[1] // 2), interpolation=cv2.INTER_AREA) for t in tiles]
        bg = np.vstack([np.hstack(tiles[:2]), np.hstack(tiles[2:])])
        objects = {
            "graf": _read(ox / "graf" / "img1.png")[120:520, 150:650],
            "boat": _read(ox / "boat" / "img1.png")[140:540, 175:675],
            "bark": _read(ox / "bark" / "img1.png")[56:456, 157:607],
        }
        return bg, objects, f"Oxford affine from {ox} (background wall/trees/ubc/leuven img1 mosaic)"
    from objrec.data import sample_background, sample_objects

    return sample_background(FRAME, seed=0), sample_objects(), "objrec.data sample images (no shared data)"


def _placements(objects: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from objrec.scenes import place_homography

    spots = [
        ((480, 330), 1.1, 12.0, (0.06, 0.0)),
        ((1000, 720), 1.0, -18.0, (0.0, 0.08)),
        ((1500, 330), 1.2, 5.0, (-0.05, 0.04)),
    ]
    out = {}
    for (name, img), (c, s, r, t) in zip(objects.items(), spots, strict=False):
        out[name] = place_homography((img.shape[1], img.shape[0]), c, s, r, t)
    return out


def verify_all(verifier, candidates, shape) -> tuple[list, list]:
    """``(detections, rejections)`` of the candidates, each verified by ``verifier``; detections best first."""
    from objrec.types import Detection

    results = [verifier.verify(c, shape) for c in candidates]
    detections = sorted((v for v in results if isinstance(v, Detection)), key=lambda d: -d.score)
    return detections, [v for v in results if not isinstance(v, Detection)]


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915 - the benchmark's sections in order, one script
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats, median reported (>= 5; default 7)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--model-features", type=int, default=1000, help="SIFT cap per enrolled object (default 1000)")
    ap.add_argument("--scene-features", type=int, default=0, help="SIFT cap on the scene (0: all; default 0)")
    ap.add_argument("--limit", type=float, default=0.15, help="acceptance limit on the ratio (default 0.15)")
    ap.add_argument("--no-shared-data", action="store_true", help="use objrec.data images even if shared data exists")
    ap.add_argument("--json", help="also write the summary to this file")
    args = ap.parse_args(argv)
    if args.repeats < 5:
        ap.error("--repeats: need at least 5")

    from objrec import ModelDB
    from objrec.features import SIFT
    from objrec.matching.database import DatabaseMatcher
    from objrec.matching.verifier import CandidateVerifier, aspect_limits
    from objrec.matching.verify import VerifyParams
    from objrec.scenes import compose_scene

    data = None if args.no_shared_data else _find_shared_data()
    bg, objects, source = build_inputs(data)
    homs = _placements(objects)
    scene = compose_scene(bg, objects, rng=0, frame_size=FRAME, homographies=homs)
    gray = cv2.cvtColor(scene.image, cv2.COLOR_BGR2GRAY)

    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db", detectors={"sift": {"n_features": args.model_features}})
        for name, img in objects.items():
            db.enroll(name, img)
        models = db.objects()
    matcher = DatabaseMatcher(models, "sift")
    exact = DatabaseMatcher(models, "sift", exact=True)
    sift = SIFT(n_features=args.scene_features, backend="cpu")
    verifier = CandidateVerifier(VerifyParams(), aspect_limits(models))

    def once():
        t0 = time.perf_counter()
        feats = sift.detect_and_compute(gray)
        t1 = time.perf_counter()
        cands = matcher.candidates(feats)
        t2 = time.perf_counter()
        detections, rejected = verify_all(verifier, cands, gray.shape[:2])
        t3 = time.perf_counter()
        exact_cands = exact.candidates(feats)
        t4 = time.perf_counter()
        verify_all(verifier, exact_cands, gray.shape[:2])
        t5 = time.perf_counter()
        ms = [(b - a) * 1e3 for a, b in ((t0, t1), (t1, t2), (t2, t3), (t3, t4), (t4, t5))]
        return (*ms, feats, detections, rejected, cands, exact_cands)

    for _ in range(args.warmup):
        once()
    runs = [once() for _ in range(args.repeats)]
    ext, mat, ver, emat, ever = (np.array([r[i] for r in runs]) for i in range(5))
    feats, detections, rejected, cands, exact_cands = runs[-1][5:]
    after = mat + ver
    ratio = float(np.median(after) / np.median(ext))
    exact_ratio = float(np.median(emat + ever) / np.median(ext))

    def pairs(cs):
        return {
            (c.object_index, *a, *b) for c in cs for a, b in zip(c.model_xy.tolist(), c.scene_xy.tolist(), strict=True)
        }

    found, reference = pairs(cands), pairs(exact_cands)
    agreement = len(found & reference) / max(len(reference), 1)

    errors = {}
    for d in detections:
        t = scene.truth(d.name)
        errors[d.name] = float(np.linalg.norm(d.corners - t.corners, axis=1).mean())

    summary = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "source": source,
        "image_size": list(FRAME),
        "threads": thread_report(),
        "opencv": cv2.__version__,
        "platform": platform.platform(),
        "model_features": {m.name: len(m.features["sift"]) for m in models},
        "scene_features": len(feats),
        "repeats": args.repeats,
        "median_ms": {
            "extraction": float(np.median(ext)),
            "matching": float(np.median(mat)),
            "verification": float(np.median(ver)),
            "matching+verification": float(np.median(after)),
            "exact matching": float(np.median(emat)),
            "exact verification": float(np.median(ever)),
        },
        "ratio": ratio,
        "exact_ratio": exact_ratio,
        "matches": {"default": len(found), "exact": len(reference), "exact_found_by_default": agreement},
        "ratio_per_repeat_median": float(np.median(after / ext)),
        "limit": args.limit,
        "passed": ratio <= args.limit,
        "detections": {d.name: {"inliers": d.inliers, "mean_corner_error_px": errors[d.name]} for d in detections},
        "rejections": [(r.name, r.reason) for r in rejected],
    }
    m = summary["median_ms"]
    print(f"command: {summary['command']}")
    print(f"data: {source}")
    print(f"image {FRAME[0]}x{FRAME[1]}; opencv {cv2.__version__}; threads {summary['threads']}")
    print(f"features: scene {len(feats)} (cap {args.scene_features or 'none'}), models {summary['model_features']}")
    print(
        f"median of {args.repeats}: extraction {m['extraction']:.1f} ms, matching {m['matching']:.1f} ms, "
        f"verification {m['verification']:.1f} ms"
    )
    print(
        f"ratio (matching+verification)/extraction = {ratio:.3f} (per-repeat median "
        f"{summary['ratio_per_repeat_median']:.3f}); limit {args.limit:.2f}: {'PASS' if summary['passed'] else 'FAIL'}"
    )
    print(
        f"exact brute force, same repeats: matching {m['exact matching']:.1f} ms, verification "
        f"{m['exact verification']:.1f} ms, ratio {exact_ratio:.3f}; the default found {agreement:.1%} of its "
        f"{len(reference)} ratio-test matches ({len(found)} in all)"
    )
    print(
        "detections: "
        + ", ".join(
            f"{k} ({v['inliers']} inliers, corner error {v['mean_corner_error_px']:.2f} px)"
            for k, v in summary["detections"].items()
        )
    )
    if rejected:
        print("rejected: " + ", ".join(f"{n}: {r}" for n, r in summary["rejections"]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
