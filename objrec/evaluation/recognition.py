"""Recognition evaluation of one scene: build (or read) the scene, recognise, score against ground truth.

Two kinds of recognizer are compared:

- objrec's :class:`~objrec.recognizer.Recognizer` for ``surf``/``sift`` (and their GPU/Numba twins), on a model
  database enrolled in a per-process temporary folder from the task's object list, without prefilter or
  tracking (every scene is an unrelated still image), with the run's ``--budget-ms``;
- for ``opencv-sift``, ``orb`` and ``akaze``: :class:`~objrec.evaluation.baseline.FindObjBaseline` with the
  detector's features, objrec's exact 2-NN and Lowe's ratio test at 0.75 (on Hamming distances for binary
  descriptors) against each object, and objrec's geometric verification
  (:func:`~objrec.matching.verify.verify_homography`, default parameters), so that only the features differ.

Scoring: a detection is a true positive when it names an object present in the scene, no better-scored
detection already took that object, and it is localised: mean corner error at most ``corner_tolerance``
pixels (``match="corners"``), or, for objects partly outside the frame, the mean error of the model's grid
points inside the frame (``match="visible"``), or, for views of a 3-D object that no homography maps exactly
(COIL-100 at other turntable angles), the centre of its outline inside the true outline (``match="centre"``).
Precision is TP / detections, recall TP / objects present.
"""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.evaluation.baseline import FindObjBaseline
from objrec.evaluation.detectors import RECOGNIZER_DETECTORS
from objrec.types import Detection

__all__ = ["load_source", "build_scene", "score_detections", "evaluate_scene", "VISIBLE_GRID", "visible_grid_error"]


@functools.lru_cache(maxsize=256)
def _load_source_cached(source: str) -> np.ndarray:
    if source.startswith("demo:"):
        from objrec.data import sample_objects

        objs = sample_objects()
        name = source[5:]
        if name not in objs:
            raise ValueError(f"{source}: no embedded sample object {name!r} (have {sorted(objs)})")
        return objs[name]
    from objrec.datasets import load_image

    return load_image(Path(source))


def load_source(source: str) -> np.ndarray:
    """An object image: ``demo:<name>`` for :func:`objrec.data.sample_objects`, else an image file (BGR)."""
    img = _load_source_cached(source)
    return img.copy()


@functools.lru_cache(maxsize=16)
def _background(seed: int) -> np.ndarray:
    from objrec.data import sample_background

    return sample_background((960, 540), seed=seed)


def build_scene(scene: dict[str, Any]) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The scene image (BGR or gray uint8) and its truth ``[{name, H, corners, visible_fraction}]``.

    ``scene["mode"]`` is ``"file"`` (an image and the homographies of the objects in it) or ``"compose"`` (a
    background from :func:`objrec.data.sample_background`, objects placed with exact homographies by
    :func:`objrec.scenes.compose_scene`, occlusion and photometric distortion), a pure function of the spec.
    """
    from objrec.geometry import model_corners
    from objrec.scenes import Distortion, compose_scene

    if scene["mode"] == "file":
        from objrec.datasets import load_image

        img = load_image(Path(scene["image"]))
        truth = []
        for t in scene["truth"]:
            H = np.asarray(t["H"], np.float64)
            w, h = t["size"]
            c = cv2.perspectiveTransform(model_corners(w, h).reshape(-1, 1, 2), H).reshape(4, 2)
            truth.append(
                {
                    "name": t["name"],
                    "H": H,
                    "corners": c,
                    "visible_fraction": None,
                    "model_size": (int(w), int(h)),
                    "frame_size": (int(img.shape[1]), int(img.shape[0])),
                }
            )
        return img, truth
    objects = {p["name"]: load_source(p["source"]) for p in scene["place"]}
    homs = {p["name"]: np.asarray(p["H"], np.float64) for p in scene["place"]}
    s = compose_scene(
        _background(int(scene["background_seed"])),
        objects,
        rng=int(scene["rng_seed"]),
        frame_size=tuple(scene["frame_size"]),
        homographies=homs,
        inside=False,
        occlusion=float(scene.get("occlusion", 0.0)),
        distortion=Distortion(**scene.get("distortion", {})),
    )
    truth = [
        {
            "name": o.name,
            "H": o.homography,
            "corners": o.corners,
            "visible_fraction": o.visible_fraction,
            "model_size": tuple(o.model_size),
            "frame_size": tuple(scene["frame_size"]),
        }
        for o in s.objects
    ]
    return s.image, truth


def _inside(point: np.ndarray, quad: np.ndarray) -> bool:
    return cv2.pointPolygonTest(quad.astype(np.float32).reshape(-1, 1, 2), tuple(map(float, point)), False) >= 0


#: Points per side of the model grid on which ``match="visible"`` measures the error.
VISIBLE_GRID = 20


def visible_grid_error(H: np.ndarray, truth: dict[str, Any]) -> float | None:
    """Mean distance between the true and the found positions of the model grid points (cell centres of a
    :data:`VISIBLE_GRID` square grid) that the true homography puts inside the frame; None if none is inside.
    ``H``: the found homography; ``truth``: the scene's ground truth (its homography, model and frame sizes)."""
    from objrec.geometry import map_points

    w, h = truth["model_size"]
    fw, fh = truth["frame_size"]
    g = (np.arange(VISIBLE_GRID) + 0.5) / VISIBLE_GRID
    pts = np.stack(np.meshgrid(g * w, g * h), axis=-1).reshape(-1, 2)
    true = map_points(np.asarray(truth["H"], np.float64), pts)
    inside = (true[:, 0] >= 0) & (true[:, 0] < fw) & (true[:, 1] >= 0) & (true[:, 1] < fh)
    if not inside.any():
        return None
    found = map_points(np.asarray(H, np.float64), pts[inside])
    e = float(np.linalg.norm(found - true[inside], axis=1).mean())
    return e if np.isfinite(e) else None


def score_detections(
    detections: list[Detection], truth: list[dict[str, Any]], match: str = "corners", corner_tolerance: float = 10.0
) -> dict[str, Any]:
    """Match detections to ground truth (best score first, one detection per object) and count.

    ``match``: ``"corners"`` (mean corner error at most ``corner_tolerance``), ``"visible"`` (the same bound on
    :func:`visible_grid_error`, for objects partly outside the frame, whose corners a small error of the
    homography moves far), or ``"centre"`` (the detected outline's centre inside the true outline).

    Returns ``{"n_truth", "tp", "fp", "fn", "detections": [{name, score, inliers, corner_error, correct}],
    "corner_errors": [corner error of each true positive]}``; with ``"visible"`` the error reported as
    ``corner_error`` is the grid error.
    """
    if match not in ("corners", "centre", "visible"):
        raise ValueError(f"match: expected 'corners', 'centre' or 'visible', got {match!r}")
    by_name = {t["name"]: t for t in truth}
    taken: set[str] = set()
    rows, errs = [], []
    tp = 0
    for d in sorted(detections, key=lambda d: (-d.score, d.name)):
        t = by_name.get(d.name)
        err = None
        ok = False
        if t is not None:
            if match == "visible":
                if d.homography is None:
                    raise ValueError(f"match='visible': the detection of {d.name!r} has no homography (use 'corners')")
                e = visible_grid_error(d.homography, t)
                e = np.inf if e is None else e
            else:
                e = float(np.linalg.norm(np.asarray(d.corners) - t["corners"], axis=1).mean())
            err = round(e, 4) if np.isfinite(e) else None
            if match in ("corners", "visible"):
                loc = err is not None and err <= corner_tolerance
            else:
                loc = _inside(np.asarray(d.corners).mean(axis=0), t["corners"])
            ok = loc and d.name not in taken
        if ok:
            taken.add(d.name)
            tp += 1
            if err is not None:
                errs.append(err)
        rows.append(
            {
                "name": d.name,
                "score": round(float(d.score), 6),
                "inliers": int(d.inliers),
                "corner_error": err,
                "correct": ok,
            }
        )
    return {
        "n_truth": len(truth),
        "tp": tp,
        "fp": len(detections) - tp,
        "fn": len(truth) - tp,
        "detections": rows,
        "corner_errors": errs,
    }


_tmpdirs: list[str] = []


def _cleanup() -> None:
    for d in _tmpdirs:
        shutil.rmtree(d, ignore_errors=True)


atexit.register(_cleanup)


@functools.lru_cache(maxsize=4)
def _recognizer(detector: str, objects_json: str, budget_ms: float | None) -> Any:
    objects = {name: load_source(src) for name, src in json.loads(objects_json)}
    if detector not in RECOGNIZER_DETECTORS:
        return FindObjBaseline(objects, detector=detector, matcher="knn2", ratio=0.75, verification="objrec")
    from objrec.modeldb import ModelDB
    from objrec.recognizer import Recognizer

    kind, _, backend = detector.partition("-")
    tmp = tempfile.mkdtemp(prefix="objrec-eval-db-")
    _tmpdirs.append(tmp)
    db = ModelDB.create(Path(tmp) / "db", detectors={kind: {}})
    for name, img in objects.items():
        db.enroll(name, img)
    rec = Recognizer(db, budget_ms=budget_ms, backend=backend or "cpu", detectors=[kind], prefilter=None, track=False)
    rec.warmup((480, 640))
    return rec


def evaluate_scene(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one detector's recognizer on one scene (a ``"scene"`` task; see :mod:`objrec.evaluation`)."""
    budget = spec.get("budget_ms")
    rec = _recognizer(spec["detector"], json.dumps(spec["objects"]), budget)
    image, truth = build_scene(spec["scene"])
    if isinstance(rec, FindObjBaseline):
        t0 = time.perf_counter()
        found = rec.process(image)
        latency = (time.perf_counter() - t0) * 1e3
        dets, timings = found.detections, found.timings_ms
    else:
        r = rec.process(image)
        dets, timings, latency = r.detections, r.timings_ms, r.latency_ms
    out = score_detections(dets, truth, spec.get("match", "corners"), float(spec.get("corner_tolerance", 10.0)))
    out["visible_fraction"] = [
        None if t["visible_fraction"] is None else round(float(t["visible_fraction"]), 4) for t in truth
    ]
    out["latency_ms"] = round(float(latency), 3)
    out["deadline_met"] = None if budget is None else bool(latency <= budget)
    out["timings_ms"] = {k: round(float(v), 3) for k, v in timings.items()}
    return out
