"""Box geometry shared by every stage: boxes are ``(x0, y0, x1, y1)`` int pixels, x1/y1 exclusive.

A frame's boxes travel as :class:`objrec.types.Regions`; these functions are the one place where boxes
are clipped, grown, rasterised, compared with outlines or derived from point sets (outlines and points
mapped through a homography are :mod:`objrec.geometry`'s). They take anything with a ``boxes`` array (a
``Regions``) or an ``(N, 4)`` array of boxes, so this module depends on nothing else of objrec.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from typing import Any

import cv2
import numpy as np

__all__ = [
    "MIN_BOX_SIDE",
    "clip_box",
    "box_area",
    "covered_share",
    "grow_regions",
    "regions_to_mask",
    "union_area",
    "subtract_boxes",
    "clip_boxes",
    "outline_box",
    "points_box",
    "inner_boxes",
    "covered_region",
    "inside_polygons",
]

#: Boxes narrower or lower than this (px) hold too little for a descriptor and are dropped.
MIN_BOX_SIDE = 16
#: Up to this many boxes, :func:`union_area` works in plain Python; beyond, on arrays.
FEW_BOXES = 16


def clip_box(
    x0: float, y0: float, x1: float, y1: float, width: int, height: int, min_side: int = MIN_BOX_SIDE
) -> tuple[int, int, int, int] | None:
    """The box rounded outwards to whole pixels and clipped to the frame; None when less than ``min_side``
    remains on either axis.
    ``x0``, ``y0``, ``x1``, ``y1``: the box's corners in pixels; ``width``, ``height``: the frame's size in pixels."""
    bx0, by0 = max(0, math.floor(x0)), max(0, math.floor(y0))
    bx1, by1 = min(width, math.ceil(x1)), min(height, math.ceil(y1))
    if bx1 - bx0 < min_side or by1 - by0 < min_side:
        return None
    return bx0, by0, bx1, by1


def box_area(box: tuple[int, int, int, int] | np.ndarray) -> int:
    """Pixels of a box (0 for an empty or inverted one)."""
    return int(max(0, box[2] - box[0]) * max(0, box[3] - box[1]))


def covered_share(box: tuple[int, int, int, int], other: tuple[int, int, int, int]) -> float:
    """The share of ``box``'s area inside ``other``."""
    w = min(box[2], other[2]) - max(box[0], other[0])
    h = min(box[3], other[3]) - max(box[1], other[1])
    return max(0, w) * max(0, h) / max(1, box_area(box))


def _boxes_of(regions: Any) -> np.ndarray:
    """The ``(N, 4)`` boxes of a ``Regions`` or of an array of boxes."""
    return np.asarray(getattr(regions, "boxes", regions)).reshape(-1, 4)


def grow_regions(regions: Any, shape: tuple[int, int], margin: int) -> Any:
    """Every box of ``regions`` (a ``Regions``) grown by ``margin`` px per side and clipped to a frame of
    ``shape`` (rows, cols); boxes left empty are dropped with their scores."""
    if not len(regions):
        return regions
    h, w = shape[:2]
    b = regions.boxes.astype(np.int64)
    out = np.stack(
        [
            np.maximum(b[:, 0] - margin, 0),
            np.maximum(b[:, 1] - margin, 0),
            np.minimum(b[:, 2] + margin, w),
            np.minimum(b[:, 3] + margin, h),
        ],
        axis=1,
    )
    keep = (out[:, 2] > out[:, 0]) & (out[:, 3] > out[:, 1])
    return dataclasses.replace(regions[keep], boxes=out[keep].astype(np.int32))


def regions_to_mask(regions: Any, shape: tuple[int, int], dtype: type = bool) -> np.ndarray:
    """A mask of ``shape`` (rows, cols) and ``dtype``, 1 (True) inside the union of the boxes.
    ``regions``: the boxes, a :class:`~objrec.types.Regions` or an (N, 4) array of (x0, y0, x1, y1)."""
    h, w = shape[:2]
    mask: np.ndarray = np.zeros((h, w), dtype)
    for x0, y0, x1, y1 in _boxes_of(regions).tolist():
        mask[max(y0, 0) : max(min(y1, h), 0), max(x0, 0) : max(min(x1, w), 0)] = 1
    return mask


def union_area(regions: Any, shape: tuple[int, int]) -> int:
    """Pixels of a frame of ``shape`` covered by the union of the boxes.

    Exact, on the grid the boxes' own edges make (coordinate compression): a cell of that grid is either
    inside some box or outside all of them, so the area is the sum of the covered cells' areas. The boxes are
    drawn onto that grid as corner differences whose running sums count the boxes over each cell, so the cost
    grows with the grid's cells and the boxes, not with the frame's pixels.
    ``regions``: the boxes, a :class:`~objrec.types.Regions` or an (N, 4) array of (x0, y0, x1, y1).
    """
    h, w = shape[:2]
    b = _boxes_of(regions).astype(np.int64).reshape(-1, 4)
    if len(b) <= FEW_BOXES:
        return _union_area_few(b.tolist(), w, h)
    b = np.stack([np.clip(b[:, 0], 0, w), np.clip(b[:, 1], 0, h), np.clip(b[:, 2], 0, w), np.clip(b[:, 3], 0, h)], 1)
    b = b[(b[:, 2] > b[:, 0]) & (b[:, 3] > b[:, 1])]
    if not len(b):
        return 0
    xs = np.unique(b[:, [0, 2]])
    ys = np.unique(b[:, [1, 3]])
    ix0, ix1 = np.searchsorted(xs, b[:, 0]), np.searchsorted(xs, b[:, 2])
    iy0, iy1 = np.searchsorted(ys, b[:, 1]), np.searchsorted(ys, b[:, 3])
    # +1 at each box's top-left cell and past its bottom-right, -1 past its other two edges.
    nx = len(xs)
    corners = np.concatenate([iy0 * nx + ix0, iy1 * nx + ix1, iy0 * nx + ix1, iy1 * nx + ix0])
    signs = np.repeat([1.0, 1.0, -1.0, -1.0], len(b))
    count = np.bincount(corners, signs, len(ys) * nx).reshape(len(ys), nx)
    covered = count.cumsum(axis=0).cumsum(axis=1)[:-1, :-1] > 0.5  # (cells in y, cells in x): boxes over each
    return int(np.diff(ys) @ covered @ np.diff(xs))


def _union_area_few(boxes: list[list[int]], w: int, h: int) -> int:
    """:func:`union_area` of a few boxes in plain Python (array calls would cost more than the arithmetic): the
    frame cut into columns at the boxes' x edges, and in each column the merged length of the boxes across it."""
    b = [
        (max(x0, 0), max(y0, 0), min(x1, w), min(y1, h))
        for x0, y0, x1, y1 in boxes
        if min(x1, w) > max(x0, 0) and min(y1, h) > max(y0, 0)
    ]
    if len(b) <= 1:
        return (b[0][2] - b[0][0]) * (b[0][3] - b[0][1]) if b else 0
    xs = sorted({x for x0, _, x1, _ in b for x in (x0, x1)})
    area = 0
    for xa, xb in itertools.pairwise(xs):
        spans = sorted((y0, y1) for x0, y0, x1, y1 in b if x0 <= xa and x1 >= xb)
        covered, top = 0, 0
        bottom: int | None = None  # the merged span's bottom (top, bottom), None before the first span
        for y0, y1 in spans:
            if bottom is None or y0 > bottom:
                covered += 0 if bottom is None else bottom - top
                top, bottom = y0, y1
            elif y1 > bottom:
                bottom = y1
        covered += 0 if bottom is None else bottom - top
        area += covered * (xb - xa)
    return area


def outside_share(box: tuple[int, int, int, int], regions: Any, shape: tuple[int, int]) -> float:
    """Share of ``box``'s pixels (clipped to the frame) that no box of ``regions`` covers (1.0 for an empty
    box)."""
    h, w = shape[:2]
    x0, y0, x1, y1 = max(int(box[0]), 0), max(int(box[1]), 0), min(int(box[2]), w), min(int(box[3]), h)
    if x1 <= x0 or y1 <= y0:
        return 1.0
    covered = regions_to_mask(regions, (h, w))[y0:y1, x0:x1]
    return float(1.0 - covered.mean())


def subtract_boxes(
    boxes: np.ndarray, holes: list[tuple[int, int, int, int]], min_side: int = MIN_BOX_SIDE
) -> tuple[np.ndarray, np.ndarray]:
    """``boxes`` (N, 4) less the ``holes``: each box cut into the bands above, below, left and right of every
    hole it overlaps, bands thinner than ``min_side`` dropped. Returns the pieces (M, 4) int32 and, for each,
    the index of the box it came from."""
    pieces = [(tuple(int(v) for v in b), i) for i, b in enumerate(np.asarray(boxes).reshape(-1, 4))]
    for hx0, hy0, hx1, hy1 in holes:
        out: list[tuple[tuple[int, ...], int]] = []
        for (x0, y0, x1, y1), i in pieces:
            if hx0 >= x1 or hx1 <= x0 or hy0 >= y1 or hy1 <= y0:
                out.append(((x0, y0, x1, y1), i))
                continue
            my0, my1 = max(y0, hy0), min(y1, hy1)
            for piece in (
                (x0, y0, x1, hy0), (x0, hy1, x1, y1), (x0, my0, hx0, my1), (hx1, my0, x1, my1),
            ):  # fmt: skip
                if piece[2] - piece[0] >= min_side and piece[3] - piece[1] >= min_side:
                    out.append((piece, i))
        pieces = out
    if not pieces:
        return np.zeros((0, 4), np.int32), np.zeros(0, np.int64)
    return np.array([p for p, _ in pieces], np.int32), np.array([i for _, i in pieces], np.int64)


def clip_boxes(
    boxes: np.ndarray, box: tuple[int, int, int, int], min_side: int = MIN_BOX_SIDE
) -> tuple[np.ndarray, np.ndarray]:
    """Boolean mask of the ``boxes`` (N, 4) that keep at least ``min_side`` per side inside ``box``, and the
    boxes clipped to it (those rows only)."""
    b = np.asarray(boxes, np.int64).reshape(-1, 4)
    c = np.concatenate([np.maximum(b[:, :2], box[:2]), np.minimum(b[:, 2:], box[2:])], axis=1)
    keep = (c[:, 2] - c[:, 0] >= min_side) & (c[:, 3] - c[:, 1] >= min_side)
    return keep, c[keep].astype(np.int32)


def outline_box(outline: np.ndarray, grow: float, width: int, height: int) -> tuple[int, int, int, int] | None:
    """Bounding box of an outline ((N, 2) points), grown by ``grow`` times its size per side, clipped.
    ``width``, ``height``: the frame's size in pixels."""
    lo, hi = outline.min(axis=0), outline.max(axis=0)
    g = (hi - lo) * grow
    (x0, y0), (x1, y1) = lo - g, hi + g
    return clip_box(x0, y0, x1, y1, width, height)


def inner_boxes(outline: np.ndarray, width: int, height: int, rows: int = 6) -> list[tuple[int, int, int, int]]:
    """Boxes inside a convex outline ((N, 2) points), clipped to the frame: its height cut into ``rows`` bands
    (fewer for a low outline), each narrowed to the columns the outline covers over the whole band. Across a
    band a convex outline's left edge is furthest right, and its right edge furthest left, at the band's top
    or bottom line, so the box between them lies inside the outline (to the pixel the rounding adds). Bands
    narrower or lower than :data:`MIN_BOX_SIDE` are dropped; an upright rectangle is covered whole, a rotated
    one mostly. Plain Python: an outline has a few corners, and this runs for every tracked object per plan
    (array calls would cost more than the arithmetic).
    ``width``, ``height``: the frame's size in pixels."""
    pts = [(float(x), float(y)) for x, y in np.asarray(outline, np.float64).reshape(-1, 2).tolist()]
    top, bottom = math.ceil(min(p[1] for p in pts)), math.floor(max(p[1] for p in pts))
    rows = max(1, min(rows, (bottom - top) // MIN_BOX_SIDE))
    lines = [top + (bottom - top) * k // rows for k in range(rows + 1)]
    # The edges a horizontal line can cross (horizontal ones left out: their ends are crossings of the edges
    # next to them), each with its vertical extent; a line at y crosses at px + (y - py) (rx - px) / (ry - py).
    edges = [
        (min(py, ry), max(py, ry), px, py, rx - px, ry - py)
        for (px, py), (rx, ry) in zip(pts, pts[1:] + pts[:1], strict=True)
        if py != ry
    ]
    spans: list[tuple[float, float] | None] = []
    for y in lines:
        xs = [px + (y - py) * dx / dy for lo, hi, px, py, dx, dy in edges if lo <= y <= hi]
        spans.append((min(xs), max(xs)) if xs else None)
    out: list[tuple[int, int, int, int]] = []
    for k in range(rows):
        a, b = spans[k], spans[k + 1]
        if a is None or b is None:
            continue
        y0, y1 = lines[k], lines[k + 1]
        box = clip_box(math.ceil(max(a[0], b[0])), y0, math.floor(min(a[1], b[1])), y1, width, height)
        if box is not None and out and out[-1][3] == box[1] and (out[-1][0], out[-1][2]) == (box[0], box[2]):
            box, out = (box[0], out[-1][1], box[2], box[3]), out[:-1]  # one box for bands of the same columns
        if box is not None:
            out.append(box)
    return out


def covered_region(points: np.ndarray, grow: float = 1.2) -> np.ndarray | None:
    """Where a tracked object lost points lately (``points`` (k, 2), frame pixels): their convex hull grown by
    ``grow`` about its centre (the points keep apart). Another object in front covers the tracked one there,
    so its features are not the tracked object's to explain. None for fewer than 3 points."""
    p = np.asarray(points, np.float32).reshape(-1, 2)
    if len(p) < 3:
        return None
    hull = cv2.convexHull(p).reshape(-1, 2)
    c = hull.mean(axis=0)
    return (c + grow * (hull - c)).astype(np.float32)


def inside_polygons(xy: np.ndarray, polygons: Sequence[np.ndarray]) -> np.ndarray:
    """Which of the points ``xy`` (n, 2) lie inside any of the convex ``polygons`` ((N, 2) each, either winding)."""
    xy = np.asarray(xy, np.float32).reshape(-1, 2)
    inside = np.zeros(len(xy), bool)
    for q in polygons:
        path = np.float32(q).reshape(-1, 2)
        lo, hi = path.min(axis=0), path.max(axis=0)
        near = np.flatnonzero(np.all((xy >= lo) & (xy <= hi), axis=1))  # only these can lie inside
        if not len(near):
            continue
        # Same-side test against each edge of the convex polygon.
        e = np.roll(path, -1, axis=0) - path
        d = xy[near, None, :] - path[None, :, :]
        cross = e[None, :, 0] * d[:, :, 1] - e[None, :, 1] * d[:, :, 0]
        inside[near] |= np.all(cross >= 0, axis=1) | np.all(cross <= 0, axis=1)
    return inside


def points_box(
    xy: np.ndarray, width: int, height: int, grow: float = 0.5, min_grow: float = 32.0
) -> tuple[int, int, int, int] | None:
    """Where a point set lies: the box of its middle 90% (robust to a few stray matches), grown by ``grow``
    times its size per side but at least ``min_grow`` px, clipped; None for fewer than 2 points.
    ``xy``: (N, 2) points in frame pixels; ``width``, ``height``: the frame's size in pixels."""
    if len(xy) < 2:
        return None
    lo, hi = np.percentile(xy, 5, axis=0), np.percentile(xy, 95, axis=0)
    g = np.maximum((hi - lo) * grow, min_grow)
    (x0, y0), (x1, y1) = lo - g, hi + g
    return clip_box(x0, y0, x1, y1, width, height)
