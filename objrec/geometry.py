"""Plane geometry shared by every stage: a model's outline, points mapped through a homography, the checks a
homography must pass, and the part of a mapped outline a frame shows.

A model image of ``width`` x ``height`` pixels has the outline :func:`model_corners`; a detection's corners are
that outline mapped through its homography (:func:`map_points`), and :func:`visible_part` is how much of the
model a frame shows. An estimated homography is used only when :func:`usable_homography`; one given as an
argument is checked by :func:`check_homography`. This module depends on nothing else of objrec.
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


def check_homography(H: Any, name: str = "H") -> np.ndarray:
    """``H`` as a float64 3x3 array, checked finite and non-singular.

    Raises
    ------
    ValueError
        Naming ``name``, when ``H`` is not a finite 3x3 matrix or is singular.
    """
    H = np.asarray(H, np.float64)
    if H.shape != (3, 3) or not np.all(np.isfinite(H)):
        raise ValueError(f"{name}: expected a finite 3x3 homography, got shape {H.shape}")
    if singular_homography(H):
        raise ValueError(f"{name}: the homography is singular")
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
