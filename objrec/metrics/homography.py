"""Homography accuracy: mean corner error of the image corners mapped by an estimate and by the truth.

The measure of the HPatches homography-estimation task as used by SuperPoint (DeTone et al. 2018) and
later work: an estimate is correct at ``t`` pixels when the four image corners it maps lie, on average,
within ``t`` pixels of where the true homography maps them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from objrec.geometry import map_points, model_corners
from objrec.types import Failure

__all__ = ["HomographyAccuracyResult", "corner_error", "homography_accuracy"]


def _as_h(H: Any, name: str) -> np.ndarray | None:
    """A 3x3 float64 homography, or None for a failed estimate (None, a falsy Failure, non-finite)."""
    if H is None or isinstance(H, Failure):
        return None
    H = np.asarray(H, np.float64)
    if H.shape != (3, 3):
        raise ValueError(f"{name}: expected a 3x3 homography, got shape {H.shape}")
    if not np.all(np.isfinite(H)):
        return None
    return H


def corner_error(H_est: Any, H_true: Any, w: float, h: float) -> float:
    """Mean Euclidean distance between the image corners mapped by ``H_est`` and by ``H_true``.

    Parameters
    ----------
    H_est : (3, 3) array, None or Failure
        The estimate; None, a :class:`~objrec.types.Failure` or a non-finite matrix gives ``inf``.
    H_true : (3, 3) array
        The ground truth.
    w, h : float
        Width and height of the source image; the corners are ``(0,0), (w,0), (w,h), (0,h)``.

    Returns
    -------
    float
        Mean corner error in pixels of the target image (``inf`` for a failed estimate or a corner mapped to
        infinity).

    Examples
    --------
    >>> import numpy as np
    >>> shifted = np.array([[1.0, 0, 3], [0, 1, 4], [0, 0, 1]])
    >>> corner_error(shifted, np.eye(3), 640, 480)
    5.0
    """
    Ht = _as_h(H_true, "H_true")
    if Ht is None:
        raise ValueError("H_true: expected a finite 3x3 homography")
    He = _as_h(H_est, "H_est")
    if He is None:
        return float("inf")
    c = model_corners(w, h)
    with np.errstate(divide="ignore", invalid="ignore"):  # a corner mapped to infinity is an error of inf
        d = np.linalg.norm(map_points(He, c) - map_points(Ht, c), axis=1)
    if not np.all(np.isfinite(d)):
        return float("inf")
    return float(d.mean())


@dataclass(frozen=True, eq=False)
class HomographyAccuracyResult:
    """Outcome of :func:`homography_accuracy`.

    Attributes
    ----------
    corner_error : float
        Mean corner error in pixels (``inf`` for a failed estimate).
    thresholds : tuple of float
    correct : dict
        Threshold to ``corner_error <= threshold``.
    """

    corner_error: float
    thresholds: tuple[float, ...]
    correct: dict[float, bool] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        err = self.corner_error
        return {
            "corner_error": float(err) if np.isfinite(err) else None,
            "correct": {str(t): bool(v) for t, v in self.correct.items()},
        }


def homography_accuracy(
    H_est: Any, H_true: Any, shape: Any, thresholds: Iterable[float] = (1, 3, 5)
) -> HomographyAccuracyResult:
    """Whether an estimated homography is correct at each corner-error threshold.

    Parameters
    ----------
    H_est : (3, 3) array, None or Failure
    H_true : (3, 3) array
    shape : tuple
        Source image shape ``(height, width[, channels])``.
    thresholds : iterable of float
        Pixel thresholds (1, 3, 5 by default).

    Returns
    -------
    HomographyAccuracyResult

    References
    ----------
    D. DeTone, T. Malisiewicz, A. Rabinovich, "SuperPoint: Self-supervised interest point detection and
    description", CVPR Workshops 2018 (homography estimation on HPatches). V. Balntas et al., "HPatches",
    CVPR 2017. doi:10.1109/CVPR.2017.410
    """
    try:
        h, w = float(shape[0]), float(shape[1])
    except (TypeError, IndexError, ValueError):
        raise ValueError(f"shape: expected (height, width[, channels]), got {shape!r}") from None
    th = tuple(float(t) for t in thresholds)
    err = corner_error(H_est, H_true, w, h)
    return HomographyAccuracyResult(err, th, {t: bool(err <= t) for t in th})
