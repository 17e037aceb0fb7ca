"""Guided matching: a second chance for a candidate with too little evidence.

A candidate with a handful of inliers among its ratio-test matches is neither confirmed nor refuted by them.
Its tentative homography predicts where each model keypoint must appear in the frame; matching every model
keypoint only against the frame's keypoints within ``radius`` pixels of that prediction, with a looser
ratio (the window has already removed most of the competition Lowe's test guards against), recovers the
true matches the global ratio test lost, while adding few wrong ones (they must fall in the window too).
The result is verified again as usual (USAC, local optimisation, least-squares refit on all inliers), so a
wrong tentative homography gains nothing.

References
----------
R. Hartley, A. Zisserman, "Multiple View Geometry in Computer Vision", 2nd ed., 2004, sec. 4.9 (guided
matching).

D. Mishkin, J. Matas, M. Perdoch, "MODS: Fast and robust method for two-view matching", CVIU 141, 2015.
doi:10.1016/j.cviu.2015.08.005 (first geometrically inconsistent nearest neighbour, FGINN).
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from objrec.backend import get_array_module, to_numpy
from objrec.geometry import map_homogeneous
from objrec.knn import BruteForceIndex, fginn_competitor
from objrec.matching.verify import VerifyParams, quad_checks

__all__ = ["tentative_homography", "guided_matches", "window_pairs"]


def tentative_homography(
    model_xy: np.ndarray,
    scene_xy: np.ndarray,
    model_size: tuple[int, int],
    frame_shape: tuple[int, int],
    params: VerifyParams,
    min_inliers: int = 5,
) -> np.ndarray | None:
    """A model-to-frame mapping from a few matches, or None when fewer than ``min_inliers`` support it or its
    outline fails the geometric checks.

    A homography (MAGSAC at twice the verification threshold) is tried first; a handful of noisy points
    often gives a wild one (part of the model behind the camera), so an affine map (RANSAC, three points a
    sample, far better conditioned) is the fallback: guided matching only needs it to predict keypoint
    positions within its window.

    Parameters
    ----------
    model_xy, scene_xy : np.ndarray
        (n, 2) the matches' points in the model image and in the frame, row by row.
    model_size : tuple of int
        The model image's (width, height).
    frame_shape : tuple of int
        The frame's (rows, cols).
    params : VerifyParams
        The verification's parameters: its threshold (doubled here), iterations and outline checks.
    min_inliers : int
        The least support of the mapping.
    """
    if len(model_xy) < max(min_inliers, 4):
        return None
    src = np.ascontiguousarray(model_xy, np.float64).reshape(-1, 1, 2)
    dst = np.ascontiguousarray(scene_xy, np.float64).reshape(-1, 1, 2)
    thr = 2.0 * params.reproj_threshold
    cv2.setRNGSeed(0)
    H, mask = cv2.findHomography(src, dst, cv2.USAC_MAGSAC, thr, maxIters=params.max_iters)
    for attempt in ("homography", "affine"):
        if attempt == "affine":
            A, mask = cv2.estimateAffine2D(src, dst, method=cv2.RANSAC, ransacReprojThreshold=thr)
            H = None if A is None else np.vstack([A, [0.0, 0.0, 1.0]])
        if H is None or mask is None or int(mask.sum()) < min_inliers or not np.all(np.isfinite(H)):
            continue
        H = H / H[2, 2]
        if quad_checks(H, model_size[0], model_size[1], frame_shape, params)[0] is None:
            return H
    return None


def window_pairs(pred: Any, scene_xy: Any, radius: float) -> Any:
    """(M, N) bool: which of the ``N`` frame keypoints lie within ``radius`` px of each of the ``M`` predicted
    positions (squared float32 distance ``<= radius**2``).

    On the host the pairs come from a k-d tree (SciPy), a little beyond the radius, and are then decided by
    the same float32 test as the dense form, so both give the same answer; the dense ``M x N x 2``
    difference array of the broadcast is several times the cost of the descriptor GEMM at a few thousand
    keypoints a side. On the GPU the broadcast is cheap and stays.

    Parameters
    ----------
    pred : array
        (M, 2) float32 predicted positions in the frame, NumPy or CuPy.
    scene_xy : array
        (N, 2) float32 frame keypoints, on the same device.
    radius : float
        The window's radius in frame pixels.
    """
    xp = get_array_module(scene_xy)
    r2 = np.float32(radius) * np.float32(radius)
    if xp is not np:
        return ((pred[:, None, :] - scene_xy[None, :, :]) ** 2).sum(axis=2) <= r2
    near = np.zeros((len(pred), len(scene_xy)), bool)
    if not len(pred) or not len(scene_xy):
        return near
    from scipy.spatial import cKDTree  # imported on first use: it adds to every process's start-up

    pairs = cKDTree(pred).sparse_distance_matrix(cKDTree(scene_xy), radius * 1.001 + 1e-3, output_type="ndarray")
    i, j = pairs["i"], pairs["j"]
    keep = ((pred[i] - scene_xy[j]) ** 2).sum(axis=1) <= r2
    near[i[keep], j[keep]] = True
    return near


def guided_matches(
    H: np.ndarray,
    model_xy: np.ndarray,
    model_desc: Any,
    scene_xy: Any,
    scene_desc: Any,
    radius: float = 12.0,
    ratio: float = 0.9,
    model_sign: Any = None,
    scene_sign: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Matches of model keypoints to frame keypoints within ``radius`` px of where ``H`` predicts them.

    Each model keypoint takes its nearest frame descriptor among those in its window if that is closer than
    ``ratio`` times the nearest descriptor outside the window (the first geometrically inconsistent
    neighbour of MODS's FGINN: in-window look-alikes of a true match do not veto it, and a keypoint alone
    in its window still needs descriptor evidence); keypoints of opposite Laplacian signs (SURF) never
    match. Descriptor arrays may be NumPy or CuPy (the work stays
    where they are); returns host index arrays ``(model_idx, scene_idx)``.

    Parameters
    ----------
    H : np.ndarray
        (3, 3) model-to-frame mapping.
    model_xy : np.ndarray
        (M, 2) model keypoints.
    model_desc : array
        (M, D) their descriptors.
    scene_xy : array
        (N, 2) frame keypoints.
    scene_desc : array
        (N, D) their descriptors.
    radius : float
        The window's radius in frame pixels.
    ratio : float
        The ratio test against the nearest descriptor outside the window.
    model_sign, scene_sign : array, optional
        The keypoints' Laplacian signs (SURF); None: not compared.
    """
    xp = get_array_module(scene_desc)
    hom = map_homogeneous(H, model_xy)
    ok = hom[:, 2] > 1e-9
    pred = np.full((len(model_xy), 2), np.nan, np.float32)
    pred[ok] = (hom[ok, :2] / hom[ok, 2:3]).astype(np.float32)
    s = xp.asarray(scene_xy, dtype=np.float32)
    # Only model keypoints predicted within ``radius`` of the scene keypoints' bounding box can have a
    # window with a keypoint in it; the others are left out before the quadratic work.
    if len(pred) and int(s.shape[0]):
        lo, hi = to_numpy(s.min(axis=0)) - radius, to_numpy(s.max(axis=0)) + radius
        cand = np.flatnonzero(np.all((pred >= lo) & (pred <= hi), axis=1))
    else:
        cand = np.zeros(0, np.int64)
    xc = xp.asarray(cand)
    near = window_pairs(xp.asarray(pred[cand]), s, radius)
    if model_sign is not None and scene_sign is not None:
        near &= xp.asarray(model_sign)[xc][:, None] == xp.asarray(scene_sign)[None, :]
    m, q = xp.asarray(model_desc, dtype=np.float32)[xc], xp.asarray(scene_desc, dtype=np.float32)
    d2 = BruteForceIndex(q).distances(m)
    inside = xp.where(near, d2, xp.inf)
    best = inside.argmin(axis=1)
    d1 = inside[xp.arange(d2.shape[0]), best]
    # FGINN: the competitor is the nearest descriptor outside the window (geometrically inconsistent), so a
    # keypoint that is merely the only one in its window is not taken on geometry alone.
    outside = fginn_competitor(d2, near)
    keep = xp.isfinite(d1) & (d1 < (ratio * ratio) * outside)
    mi = xp.flatnonzero(keep)
    return cand[to_numpy(mi)].astype(np.int64), to_numpy(best[mi]).astype(np.int64)
