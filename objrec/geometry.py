"""Plane geometry shared by every stage: a model's outline, points mapped through a homography, the checks a
homography must pass, and the part of a mapped outline a frame shows.

A model image of ``width`` x ``height`` pixels has the outline :func:`model_corners`; a detection's corners are
that outline mapped through its homography (:func:`map_points`), and :func:`visible_part` is how much of the
model a frame shows. An estimated homography is used only when :func:`usable_homography`; one given as an
argument is checked by :func:`check_homography`. Tracking's two measurements live here too, for every stage that
follows points: :func:`forward_backward` (pyramidal Lucas-Kanade both ways, points kept where they come back) and
:func:`robust_homography` (the homography that most of the followed points agree with). This module depends on
nothing else of objrec.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

__all__ = [
    "model_corners",
    "map_points",
    "map_homogeneous",
    "polygon_area",
    "visible_part",
    "outline_in_frame",
    "usable_homography",
    "singular_homography",
    "check_homography",
    "forward_backward",
    "robust_homography",
]


def model_corners(width: float, height: float) -> np.ndarray:
    """A ``width`` x ``height`` model image's outline ``(0,0), (w,0), (w,h), (0,h)`` as (4, 2) float64 (x, y):
    what a detection's corners are, mapped through its homography."""
    return np.array([[0, 0], [width, 0], [width, height], [0, height]], np.float64)


def map_points(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """``(N, 2)`` points mapped through the homography ``H`` (dividing by the third coordinate,
    :func:`map_homogeneous`). A point whose third coordinate is 0 maps to infinity (or NaN), with NumPy's
    warning for a division by zero: callers that expect such points silence it (``np.errstate``).
    ``pts``: (N, 2) points."""
    hom = map_homogeneous(H, pts)
    return hom[:, :2] / hom[:, 2:3]


def map_homogeneous(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """``(N, 2)`` points mapped through the homography ``H`` as ``(N, 3)`` homogeneous coordinates, before the
    division by the third, ``w``: for a camera's homography the sign of ``w`` says on which side of the
    camera's focal plane a point lies, and ``w`` near 0 that it maps near infinity.
    ``pts``: (N, 2) points."""
    pts = np.asarray(pts, np.float64).reshape(-1, 2)
    return pts @ H[:, :2].T + H[:, 2]


def usable_homography(H: np.ndarray | None) -> bool:
    """Whether the estimate ``H`` (None: none was found) can be used: finite, with an ``H[2, 2]`` that it can be
    normalised by."""
    return H is not None and bool(np.all(np.isfinite(H))) and abs(H[2, 2]) >= 1e-12


def singular_homography(H: np.ndarray) -> bool:
    """Whether the finite 3x3 ``H`` is singular for its scale: ``|det H|`` below 1e-12 of its largest entry
    cubed."""
    return bool(abs(np.linalg.det(H)) < 1e-12 * max(np.abs(H).max() ** 3, 1e-300))


def check_homography(
    H: Any, name: str = "H", normalise: bool = False, error: type[ValueError] = ValueError
) -> np.ndarray:
    """``H`` as a float64 3x3 array, checked numeric, finite and non-singular.

    Parameters
    ----------
    H : array_like
        The homography given (an argument, or one read from a file).
    name : str
        What every error names: the argument, or the file (and the place in it) it was read from.
    normalise : bool
        Also scale it so that ``H[2, 2] == 1`` (an error when ``H[2, 2]`` is 0).
    error : type
        The ``ValueError`` subclass raised (a loader's own, such as ``DatasetError``).

    Raises
    ------
    ValueError
        Of type ``error``, naming ``name`` and what is wrong.
    """
    try:
        H = np.asarray(H, np.float64)
    except (TypeError, ValueError) as exc:
        raise error(f"{name}: homography is not numeric ({exc})") from None
    if H.shape != (3, 3):
        raise error(f"{name}: expected a 3x3 homography, got shape {H.shape}")
    if not np.all(np.isfinite(H)):
        raise error(f"{name}: homography has non-finite entries")
    if normalise:
        if abs(H[2, 2]) < 1e-12 * np.abs(H).max():
            raise error(f"{name}: homography has H[2,2] = {float(H[2, 2])!r}, cannot normalise")
        H = H / H[2, 2]
    if singular_homography(H):
        raise error(f"{name}: the homography is singular")
    return H


def polygon_area(poly: np.ndarray) -> float:
    """The area of the simple polygon ``poly`` ((n, 2) vertices in order), by the shoelace formula."""
    # In plain Python over the few corners of an outline: NumPy's calls would cost more than the arithmetic,
    # and every tracked object's outline is measured in every frame.
    pts = np.asarray(poly, np.float64).reshape(-1, 2).tolist()
    s = 0.0
    for (x0, y0), (x1, y1) in zip(pts, pts[1:] + pts[:1], strict=True):
        s += x0 * y1 - y0 * x1
    return 0.5 * abs(s)


def visible_part(
    H: np.ndarray, corners: np.ndarray, width: int, height: int, frame_shape: tuple[int, int]
) -> tuple[np.ndarray, float, float]:
    """The part of a projected outline inside the frame: ``(polygon, area_px, visible_fraction)``.

    ``corners`` is the model outline mapped by ``H`` (convex, in front of the camera); the polygon is its
    intersection with the frame in frame pixels, and ``visible_fraction`` the share of the model's area it
    shows (measured back in model pixels, so foreshortening does not bias it).
    ``width``, ``height``: the model image's size in pixels; ``frame_shape``: the frame's (rows, cols).
    """
    fh, fw = frame_shape[:2]
    c = np.asarray(corners, np.float64)
    if c.min() >= 0 and c[:, 0].max() <= fw and c[:, 1].max() <= fh:  # wholly in view: nothing to clip
        return c, polygon_area(c), 1.0
    area, poly = outline_in_frame(corners, fw, fh)
    if poly is None or area <= 0:
        return np.zeros((0, 2), np.float64), 0.0, 0.0
    poly = poly.reshape(-1, 2).astype(np.float64)
    model_area = polygon_area(map_points(np.linalg.inv(H), poly))
    return poly, float(area), float(min(1.0, model_area / float(width * height)))


def outline_in_frame(outline: np.ndarray, width: int, height: int) -> tuple[float, np.ndarray | None]:
    """The part of the convex ``outline`` ((n, 2), frame pixels) inside a ``width`` x ``height`` frame: its area
    and its polygon ((k, 1, 2) float32; None where they do not meet), by ``cv2.intersectConvexConvex``."""
    frame = model_corners(width, height).astype(np.float32)
    area, poly = cv2.intersectConvexConvex(np.asarray(outline, np.float32), frame)
    return float(area), poly


def forward_backward(
    a: np.ndarray,
    b: np.ndarray,
    p0: np.ndarray,
    guess: np.ndarray | None,
    win_size: int,
    max_level: int,
    criteria: tuple[int, float],
    fb_max_px: float,
) -> tuple[np.ndarray, np.ndarray]:
    """The points ``p0`` of image ``a`` followed into image ``b`` by pyramidal Lucas-Kanade, and which of them
    to trust: ``(p1, good)``, (k, 2) float32 and (k,) bool.

    A point is trusted when the flow converges both ways and the backward flow from ``b`` returns within
    ``fb_max_px`` pixels of where it started (Kalal, Mikolajczyk and Matas, "Forward-Backward Error: Automatic
    Detection of Tracking Failures", ICPR 2010): a point that slid along an edge, left the object or was covered
    does not come back.

    Parameters
    ----------
    a, b : np.ndarray
        The two gray images (uint8, the same size).
    p0 : np.ndarray
        (k, 2) float32 points of ``a``.
    guess : np.ndarray or None
        (k, 2) float32 predicted positions in ``b`` to start from; the backward flow then starts from ``p0``,
        where a trusted point returns. None: no prediction, and each direction starts where its points are.
    win_size : int
        Side of Lucas-Kanade's window in pixels.
    max_level : int
        Pyramid levels above the image.
    criteria : tuple of (int, float)
        The iterations and the step (pixels) at which each level stops.
    fb_max_px : float
        The forward-backward error above which a point is dropped.
    """
    p0 = np.ascontiguousarray(p0, np.float32).reshape(-1, 1, 2)
    if not len(p0):
        return np.zeros((0, 2), np.float32), np.zeros(0, bool)
    kw: dict[str, Any] = {
        "winSize": (win_size, win_size),
        "maxLevel": max_level,
        "criteria": (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, int(criteria[0]), float(criteria[1])),
    }
    if guess is None:
        p1, st1, _ = cv2.calcOpticalFlowPyrLK(a, b, p0, None, **kw)
        back, st2, _ = cv2.calcOpticalFlowPyrLK(b, a, p1, None, **kw)
    else:
        init = np.ascontiguousarray(guess, np.float32).reshape(-1, 1, 2)
        p1, st1, _ = cv2.calcOpticalFlowPyrLK(a, b, p0, init, flags=cv2.OPTFLOW_USE_INITIAL_FLOW, **kw)
        back, st2, _ = cv2.calcOpticalFlowPyrLK(b, a, p1, p0.copy(), flags=cv2.OPTFLOW_USE_INITIAL_FLOW, **kw)
    fb = np.linalg.norm((back - p0).reshape(-1, 2), axis=1)
    good = (st1.ravel() == 1) & (st2.ravel() == 1) & (fb <= fb_max_px)
    return p1.reshape(-1, 2), good


def robust_homography(
    src: np.ndarray, dst: np.ndarray, px: float, max_iters: int, confidence: float = 0.995, sampler: str = "rho"
) -> tuple[np.ndarray | None, np.ndarray]:
    """The homography mapping most of ``src`` onto ``dst`` ((k, 2) point pairs) within ``px`` pixels, and which
    pairs agree with it: ``(H, inliers)``; ``H`` is None (no pair agreeing) when there is none or it is not
    :func:`usable_homography`.

    Both samplers refine the best hypothesis on its inliers. ``"rho"`` is OpenCV's RHO (Bazargani, Bilaniuk
    and Laganiere, "A fast and robust homography scheme for real-time planar target detection", Journal of
    Real-Time Image Processing 15(4), 2018): it needs fewer hypotheses than RANSAC over the few tens of
    followed points a track refits from in every frame. ``"ransac"`` (Fischler and Bolles, 1981) draws its
    hypotheses uniformly: for a refit made now and then from points of uneven quality (a realignment's), and
    for a map that may be a mirror (RHO discards samples whose order the map reverses).

    Parameters
    ----------
    src, dst : np.ndarray
        (k, 2) corresponding points.
    px : float
        The reprojection error (``dst`` pixels) within which a pair agrees.
    max_iters : int
        Hypotheses drawn at the most.
    confidence : float
        The chance of having drawn an all-inlier sample at which the search stops.
    sampler : str
        ``"rho"`` or ``"ransac"``.
    """
    methods = {"rho": cv2.RHO, "ransac": cv2.RANSAC}
    if sampler not in methods:
        raise ValueError(f"sampler: expected one of {sorted(methods)}, got {sampler!r}")
    none = np.zeros(len(src), bool)
    if len(src) < 4:
        return None, none
    H, mask = cv2.findHomography(
        np.asarray(src, np.float64).reshape(-1, 2), np.asarray(dst, np.float64).reshape(-1, 2), methods[sampler], px,
        maxIters=int(max_iters), confidence=float(confidence),
    )  # fmt: skip
    if not usable_homography(H) or mask is None:
        return None, none
    return H / H[2, 2], mask.ravel().astype(bool)
