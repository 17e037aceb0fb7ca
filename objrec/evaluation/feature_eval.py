"""Feature-level evaluation of one image pair: repeatability, matching score, MMA, homography accuracy, time.

The metrics are :mod:`objrec.metrics` (Mikolajczyk et al. 2005 protocol, HPatches-style MMA and homography
accuracy); this module adds the pieces around them: the ratio test (on Hamming distances for binary
descriptors), the RANSAC homography estimate, and the record layout.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.datasets import DatasetError, ImagePair, image_sizes
from objrec.evaluation.config import EvalConfig, finish_task
from objrec.evaluation.detectors import (
    BINARY_DETECTORS,
    check_some_task,
    extract,
    reference_path,
    requested_detectors,
)
from objrec.geometry import usable_homography
from objrec.knn import ratio_match
from objrec.metrics import homography_accuracy, matching_score, mean_matching_accuracy
from objrec.types import Features

__all__ = [
    "ratio_test_matches",
    "estimate_homography",
    "evaluate_pair",
    "build_feature_tasks",
    "HOMOGRAPHY_THRESHOLDS",
    "MMA_THRESHOLDS",
]

HOMOGRAPHY_THRESHOLDS = (1.0, 3.0, 5.0)
MMA_THRESHOLDS = tuple(float(t) for t in range(1, 11))


def ratio_test_matches(f1: Features, f2: Features, ratio: float = 0.8, binary: bool = False) -> np.ndarray:
    """Lowe's ratio test from ``f1`` to ``f2``: (K, 2) int64 index pairs.

    For float descriptors the test compares L2 distances (``d1 < ratio * d2``). For binary descriptors stored as
    unpacked bits the squared L2 distance is the Hamming distance, and the test compares Hamming distances, as
    OpenCV's matcher with ``NORM_HAMMING`` would; ``ratio_match`` takes the square root of squared distances,
    so the threshold handed to it is ``sqrt(ratio)``.
    """
    if len(f1) == 0 or len(f2) == 0:
        return np.zeros((0, 2), np.int64)
    r = float(np.sqrt(ratio)) if binary else float(ratio)
    m = ratio_match(f1.descriptors, f2.descriptors, ratio=r)
    return np.stack([m.query_idx, m.train_idx], axis=1).astype(np.int64)


def estimate_homography(
    xy1: np.ndarray, xy2: np.ndarray, ransac_px: float = 3.0, max_iters: int = 2000, confidence: float = 0.995
) -> tuple[np.ndarray | None, int]:
    """``cv2.findHomography`` with RANSAC on matched points: the estimate (None when it fails) and its inliers.

    OpenCV's RNG is reseeded first, so the estimate is a pure function of the matches.
    ``xy1``, ``xy2``: (N, 2) the matched points in image 1 and image 2; ``ransac_px``: RANSAC's inlier threshold in
    pixels; ``max_iters``: its most iterations; ``confidence``: its confidence.
    """
    if len(xy1) < 4:
        return None, 0
    cv2.setRNGSeed(0)
    H, mask = cv2.findHomography(
        np.asarray(xy1, np.float64).reshape(-1, 1, 2),
        np.asarray(xy2, np.float64).reshape(-1, 1, 2),
        cv2.RANSAC,
        ransac_px,
        maxIters=max_iters,
        confidence=confidence,
    )
    if mask is None or not usable_homography(H):
        return None, 0
    return H / H[2, 2], int(mask.sum())


def _r(x: float | None, nd: int = 6) -> float | None:
    if x is None or not np.isfinite(x):
        return None
    return round(float(x), nd)


def evaluate_pair(spec: dict[str, Any]) -> dict[str, Any]:
    """Evaluate one detector on one image pair (a ``"pair"`` task; see :mod:`objrec.evaluation`).

    Returns the record's ``result``: feature counts, ``repeatability``, ``matching_score``, ``mma``,
    ``homography`` and ``time_ms`` (detection time of each image; ``None`` for precomputed features).
    """
    name = spec["detector"]
    ref = spec.get("reference_dir")
    mf = int(spec.get("max_features", 0))
    f1, shape1, t1 = extract(name, spec["img1"], mf, ref)
    f2, shape2, t2 = extract(name, spec["imgN"], mf, ref)
    H = np.asarray(spec["H"], np.float64)
    ms = matching_score(f1, f2, H, shape1, shape2)
    mma = mean_matching_accuracy(f1, f2, H, thresholds=MMA_THRESHOLDS)
    binary = name in BINARY_DETECTORS
    m = ratio_test_matches(f1, f2, float(spec.get("ratio", 0.8)), binary)
    H_est, n_inl = estimate_homography(f1.xy[m[:, 0]], f2.xy[m[:, 1]], float(spec.get("ransac_px", 3.0)))
    acc = homography_accuracy(H_est, H, shape1, HOMOGRAPHY_THRESHOLDS)
    return {
        "n_features": [len(f1), len(f2)],
        "repeatability": _r(ms.repeatability),
        "matching_score": _r(ms.matching_score),
        "n_correspondences": int(ms.n_matches),
        "n_correct_matches": int(ms.n_correct),
        "n_visible": [int(ms.n1), int(ms.n2)],
        "mma": [_r(a) for a in mma.accuracy],
        "n_mutual_matches": int(mma.n_matches),
        "homography": {
            "n_ratio_matches": int(len(m)),
            "n_inliers": n_inl,
            "corner_error": _r(acc.corner_error, 4),
            "correct": {f"{t:g}": bool(v) for t, v in acc.correct.items()},
        },
        "time_ms": {"detect_1": _r(t1, 3), "detect_N": _r(t2, 3)},
    }


def default_reference_dir(pairs: list[ImagePair]) -> Path:
    """``<dataset root>/../reference/opencv_surf`` for Oxford pairs at ``<root>/<seq>/imgN``."""
    root = Path(pairs[0].img1_path).resolve().parent.parent
    return root.parent / "reference" / "opencv_surf"


def _selected_pairs(cfg: EvalConfig, load: Callable[[str, list[str] | None], list[ImagePair]]) -> list[ImagePair]:
    """The pairs of ``cfg.sequences`` and ``cfg.pairs``, every image read once."""
    pairs = load(cfg.path, cfg.sequences)
    if cfg.pairs:
        bad = sorted(set(cfg.pairs) - {p.index for p in pairs})
        if bad:
            raise ValueError(f"--pairs: no pair 1->{bad[0]} in {cfg.path} (have 2..{max(p.index for p in pairs)})")
        pairs = [p for p in pairs if p.index in set(cfg.pairs)]
    if not pairs:
        raise DatasetError(f"{cfg.path}: no image pairs selected")
    image_sizes([p.img1_path for p in pairs] + [p.imgN_path for p in pairs])
    return pairs


def _surf_reference_dir(cfg: EvalConfig, pairs: list[ImagePair]) -> Path:
    """The folder of OpenCV's precomputed SURF features, every file the pairs need checked."""
    ref_dir = Path(cfg.surf_reference) if cfg.surf_reference else default_reference_dir(pairs)
    if not ref_dir.is_dir():
        raise DatasetError(f"{ref_dir}: OpenCV SURF reference folder not found (give --surf-reference DIR)")
    for p in pairs:
        for img in (p.img1_path, p.imgN_path):
            rp = reference_path(ref_dir, img)
            if not rp.is_file():
                raise DatasetError(f"{rp}: OpenCV SURF reference file not found")
    return ref_dir


def build_feature_tasks(
    cfg: EvalConfig,
    load: Callable[[str, list[str] | None], list[ImagePair]],
    default: tuple[str, ...],
    surf_reference: bool,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``pair`` task per available detector and image pair ``1 -> N`` of a feature dataset.

    Parameters
    ----------
    cfg : EvalConfig
        The run configuration.
    load : callable
        ``load(root, sequences) -> [ImagePair]``, the dataset's loader.
    default : tuple of str
        The detectors run when ``cfg.detectors`` names none.
    surf_reference : bool
        Whether the dataset has OpenCV's precomputed SURF features (``opencv-surf-ref``).

    Returns
    -------
    tasks : list of dict
        The task specs, with their ids.
    status : dict
        Detector name -> ``{available, note}``.
    """
    detectors, status = requested_detectors(cfg, default)
    pairs = _selected_pairs(cfg, load)
    ref_dir = None
    if "opencv-surf-ref" in detectors:
        if not surf_reference:
            status["opencv-surf-ref"] = {"available": False, "note": "reference files exist for the Oxford set only"}
        else:
            ref_dir = _surf_reference_dir(cfg, pairs)
            status["opencv-surf-ref"]["note"] = f"precomputed, read from {ref_dir}"
    tasks = []
    for det in detectors:
        if not status[det]["available"]:
            continue
        for p in pairs:
            spec = {
                "type": "pair",
                "detector": det,
                "label": p.name,
                "img1": str(Path(p.img1_path).resolve()),
                "imgN": str(Path(p.imgN_path).resolve()),
                "H": p.H.tolist(),
                "max_features": int(cfg.max_features),
                "ratio": float(cfg.ratio),
                "ransac_px": float(cfg.ransac_px),
                "meta": {"dataset": p.dataset, "seq": p.seq, "kind": p.kind, "index": int(p.index)},
            }
            if det == "opencv-surf-ref":
                assert ref_dir is not None  # found above whenever this detector is available
                spec["reference_dir"] = str(ref_dir.resolve())
            tasks.append(finish_task(spec))
    check_some_task(tasks, status, cfg)
    return tasks, status
