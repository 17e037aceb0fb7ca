"""Planar-tracking metrics on real footage: alignment error, precision and success curves.

As the planar-tracking benchmarks report them (POT-210: Liang et al. 2018; POIC, TMT, PlanarTrack follow it):

- the **alignment error** of a frame is the root mean square of the four corner distances,
  ``e_AL = sqrt(mean_i |c_i - g_i|^2)``;
- **precision** at ``t`` is the share of scored frames with ``e_AL <= t`` (``p@5`` and ``p@15`` are the usual
  summaries); a scored frame without an estimate fails at every threshold;
- the **homography discrepancy** of a frame is ``e_H = 1/4 sum_i |c_i - (H H*^-1)(c_i)|`` with ``H`` and ``H*``
  the estimated and true homographies from the reference's corners to the frame's and ``c_i`` the corners of
  the square [-1, 1]^2; **success** at ``t`` is the share of scored frames with ``e_H <= t``.

References
----------
Liang, P., Wu, Y., Lu, H., Wang, L., Liao, C., Ling, H. (2018). Planar object tracking in the wild: a
benchmark. ICRA 2018, 651-658. doi:10.1109/ICRA.2018.8461037
"""

from __future__ import annotations

import cv2
import numpy as np

from objrec.geometry import map_points

__all__ = [
    "PRECISION_THRESHOLDS",
    "SUCCESS_THRESHOLDS",
    "alignment_error",
    "corners_homography",
    "homography_discrepancy",
    "precision_curve",
    "success_curve",
]

#: Thresholds of the precision plot, in pixels (0 to 20 in steps of 0.5).
PRECISION_THRESHOLDS = np.arange(0, 20.25, 0.5)
#: Thresholds of the success plot (homography discrepancy, 0 to 10 in steps of 0.5).
SUCCESS_THRESHOLDS = np.arange(0, 10.25, 0.5)
_SQUARE = np.array([[-1.0, -1.0], [1.0, -1.0], [1.0, 1.0], [-1.0, 1.0]])


def alignment_error(corners: np.ndarray | None, truth: np.ndarray) -> float:
    """``e_AL`` of one frame: the root mean square of the distances between the four ``corners`` and the four
    ``truth`` corners (both ``(4, 2)``); ``inf`` without an estimate (None or not finite).

    Examples
    --------
    >>> alignment_error(np.zeros((4, 2)), np.array([[3.0, 4.0], [0, 0], [0, 0], [0, 0]]))
    2.5
    """
    if corners is None:
        return float("inf")
    c = np.asarray(corners, np.float64).reshape(4, 2)
    if not np.all(np.isfinite(c)):
        return float("inf")
    d2 = ((c - np.asarray(truth, np.float64).reshape(4, 2)) ** 2).sum(axis=1)
    return float(np.sqrt(d2.mean()))


def corners_homography(model_corners: np.ndarray, frame_corners: np.ndarray) -> np.ndarray | None:
    """The homography mapping four model corners onto four frame corners (None when they are degenerate).
    ``model_corners``, ``frame_corners``: (4, 2) points in the same order."""
    src = np.asarray(model_corners, np.float64).reshape(4, 2)
    dst = np.asarray(frame_corners, np.float64).reshape(4, 2)
    if not (np.all(np.isfinite(src)) and np.all(np.isfinite(dst))):
        return None
    H = cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32)).astype(np.float64)
    if not np.all(np.isfinite(H)) or abs(np.linalg.det(H)) < 1e-12:
        return None
    return H / H[2, 2]


def homography_discrepancy(H: np.ndarray | None, H_true: np.ndarray) -> float:
    """``e_H`` of one frame (see the module docstring); ``inf`` without an estimate.
    ``H``: the estimated homography (None: none); ``H_true``: the ground truth's.

    Examples
    --------
    >>> homography_discrepancy(np.eye(3), np.eye(3))
    0.0
    """
    if H is None or not np.all(np.isfinite(H)):
        return float("inf")
    try:
        M = np.asarray(H, np.float64) @ np.linalg.inv(np.asarray(H_true, np.float64))
    except np.linalg.LinAlgError:
        return float("inf")
    with np.errstate(divide="ignore", invalid="ignore"):  # a corner mapped to infinity: inf
        mapped = map_points(M, _SQUARE)
    d = np.linalg.norm(mapped - _SQUARE, axis=1)
    return float(d.mean()) if np.all(np.isfinite(d)) else float("inf")


def precision_curve(errors: np.ndarray, thresholds: np.ndarray = PRECISION_THRESHOLDS) -> np.ndarray:
    """Share of ``errors`` (one per scored frame; ``inf`` for a frame without an estimate) at or below each
    threshold.
    ``errors``: the frames' errors in pixels; ``thresholds``: the thresholds in pixels.

    Examples
    --------
    >>> precision_curve(np.array([1.0, 4.0, np.inf]), np.array([0.0, 5.0])).tolist()
    [0.0, 0.6666666666666666]
    """
    e = np.asarray(errors, np.float64)
    if e.size == 0:
        return np.full(len(thresholds), np.nan)
    return (e[None, :] <= np.asarray(thresholds, np.float64)[:, None]).mean(axis=1)


def success_curve(discrepancies: np.ndarray, thresholds: np.ndarray = SUCCESS_THRESHOLDS) -> np.ndarray:
    """Share of frames whose homography discrepancy is at or below each threshold (as :func:`precision_curve`).
    ``discrepancies``: the frames' ``e_H``; ``thresholds``: the thresholds."""
    return precision_curve(discrepancies, thresholds)
