"""The picture of a rating: the rated features over the image, coloured by how distinctive each is, the weak areas
shaded, and a band with the score and the reasons."""

from __future__ import annotations

import cv2
import numpy as np

from objrec.draw import draw_detections
from objrec.imageio import to_bgr
from objrec.rating.measures import GRID, MIN_CELL_FEATURES, RATIO, cell_counts
from objrec.rating.rater import Rating

__all__ = ["draw_rating", "distinctiveness_colour"]

#: Pictures of images smaller than this (longer side) are enlarged to it, so the band's text stays readable.
MIN_PICTURE_SIDE = 640


def distinctiveness_colour(ratio: np.ndarray) -> np.ndarray:
    """BGR colours (N, 3) for features by their query ratio: green when clearly distinctive (0.5 or less),
    through yellow, to red at a near twin (1)."""
    t = np.clip((np.asarray(ratio, np.float64) - 0.5) / 0.5, 0.0, 1.0)
    green = np.where(t < 0.5, 200, 200 * (1 - t) * 2)
    red = np.where(t < 0.5, 255 * t * 2, 255)
    return np.stack([np.zeros_like(t), green, red], axis=1).astype(np.uint8)


def draw_rating(image: np.ndarray, rating: Rating) -> np.ndarray:
    """A BGR picture of ``rating`` over ``image`` (the image that was rated).

    Grid cells without :data:`~objrec.rating.measures.MIN_CELL_FEATURES` distinctive features are darkened
    (the weak areas), each feature is a dot coloured by :func:`distinctiveness_colour`, and a band across the
    top states the score and each reason with its number.
    """
    out = to_bgr(image).copy()
    h, w = out.shape[:2]
    s = max(1.0, MIN_PICTURE_SIDE / max(h, w))
    if s > 1.0:
        out = cv2.resize(out, (round(w * s), round(h * s)), interpolation=cv2.INTER_NEAREST)
    H, W = out.shape[:2]
    xy = np.asarray(rating.xy, np.float64).reshape(-1, 2)
    ratio = np.asarray(rating.distinctiveness)
    counts = cell_counts(xy[ratio < RATIO], (h, w))
    weak = counts < MIN_CELL_FEATURES
    rows = np.minimum((np.arange(H) * GRID) // H, GRID - 1)
    cols = np.minimum((np.arange(W) * GRID) // W, GRID - 1)
    mask = weak[rows[:, None], cols[None, :]]
    shade = out.astype(np.float32)
    shade[mask] = shade[mask] * 0.35 + np.array([0, 0, 90], np.float32) * 0.65
    out = shade.astype(np.uint8)
    r = max(2, round(2 * max(H, W) / 800))
    for (x, y), c in zip(np.round(xy * s).astype(int), distinctiveness_colour(ratio), strict=True):
        cv2.circle(out, (int(x), int(y)), r, tuple(int(v) for v in c), -1, cv2.LINE_AA)
    lines = [f"rating {rating.score}/100 ({rating.version}, {rating.kind}: {len(xy)} features)"]
    lines += [f"-{x.cost:.0f}: {x.text}" for x in rating.reasons[:5]]
    return draw_detections(out, [], lines=lines)
