"""From cell scores to boxes: kept cells grouped into rectangles, scaled to the frame, overlaps merged.

Boxes are ``(x0, y0, x1, y1)`` int pixels, x1/y1 exclusive, carried as :class:`objrec.types.Regions`.
Generic box geometry (growing, clipping, rasterising) lives in :mod:`objrec.boxes`; this module holds what
is particular to the prefilter: the decomposition of a cell mask into rectangles and the rule that merges
overlapping boxes.
"""

from __future__ import annotations

import numpy as np

from objrec.boxes import grow_regions
from objrec.prefilter.features import CellGrid
from objrec.types import Regions

__all__ = ["cells_to_regions", "decompose_mask", "merge_overlapping", "expand_regions"]


def _areas(boxes: np.ndarray) -> np.ndarray:
    return (boxes[..., 2] - boxes[..., 0]) * (boxes[..., 3] - boxes[..., 1])


def merge_overlapping(boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping boxes whose union is no larger than the two boxes together.

    Two such boxes cost no more to process as their union, and their overlap would otherwise be processed
    twice. A merged box takes the larger score. Merging repeats until no pair qualifies.

    Parameters
    ----------
    boxes : (N, 4) int array
        ``(x0, y0, x1, y1)``, x1/y1 exclusive.
    scores : (N,) array

    Returns
    -------
    boxes : (M, 4) int64
    scores : (M,) float64
    """
    boxes = np.array(boxes, np.int64).reshape(-1, 4)
    scores = np.array(scores, np.float64).reshape(-1)
    merged = True
    while merged and len(boxes) > 1:
        merged = False
        for i in range(len(boxes)):
            b = boxes[i]
            union = np.concatenate([np.minimum(boxes[:, :2], b[:2]), np.maximum(boxes[:, 2:], b[2:])], axis=1)
            overlap = (boxes[:, 0] < b[2]) & (b[0] < boxes[:, 2]) & (boxes[:, 1] < b[3]) & (b[1] < boxes[:, 3])
            ok = overlap & (_areas(union) <= _areas(boxes) + _areas(b))
            ok[i] = False
            if ok.any():
                j = int(np.flatnonzero(ok)[0])
                boxes[i] = union[j]
                scores[i] = max(scores[i], scores[j])
                boxes = np.delete(boxes, j, axis=0)
                scores = np.delete(scores, j)
                merged = True
                break
    return boxes, scores


def _split(sub: np.ndarray, r0: int, r1: int, c0: int, c1: int) -> list[tuple[int, int, int, int]]:
    """Two halves of a rectangle, cut along its longer side at the line with the fewest kept cells."""
    axis = 1 if (r1 - r0) >= (c1 - c0) else 0
    line = sub.sum(axis=axis)
    cut = 1 + int(np.argmin(line[1:])) if len(line) > 2 else 1
    if axis == 1:
        return [(r0, r0 + cut, c0, c1), (r0 + cut, r1, c0, c1)]
    return [(r0, r1, c0, c0 + cut), (r0, r1, c0 + cut, c1)]


def decompose_mask(mask: np.ndarray, min_fill: float) -> list[tuple[int, int, int, int]]:
    """Rectangles ``(r0, r1, c0, c1)`` (ends exclusive) covering the True cells of ``mask``.

    Each 8-connected component starts as its bounding box; a rectangle less than ``min_fill`` full (of
    its own component's cells) is split in two along its longer side, at the line with the fewest kept
    cells, and each half shrunk to the cells it holds, until every rectangle is full enough or at most
    2 cells. A sparse diagonal component thus gives several small boxes instead of one box over the
    frame. With ``min_fill=1`` the rectangles are disjoint and their union is exactly the mask.

    Parameters
    ----------
    mask : (ny, nx) bool
    min_fill : float in [0, 1]

    Returns
    -------
    list of (r0, r1, c0, c1)
    """
    from scipy import ndimage

    labels, _ = ndimage.label(mask, np.ones((3, 3), int))
    out: list[tuple[int, int, int, int]] = []
    for lab, sl in enumerate(ndimage.find_objects(labels), start=1):
        comp = labels == lab
        stack = [(sl[0].start, sl[0].stop, sl[1].start, sl[1].stop)]
        while stack:
            r0, r1, c0, c1 = stack.pop()
            sub = comp[r0:r1, c0:c1]
            rows = np.flatnonzero(sub.any(axis=1))
            cols = np.flatnonzero(sub.any(axis=0))
            if len(rows) == 0:
                continue
            r0, r1, c0, c1 = r0 + rows[0], r0 + rows[-1] + 1, c0 + cols[0], c0 + cols[-1] + 1
            sub = comp[r0:r1, c0:c1]
            if sub.mean() >= min_fill or sub.size <= 2:
                out.append((int(r0), int(r1), int(c0), int(c1)))
            else:
                stack += _split(sub, r0, r1, c0, c1)
    return out


def cells_to_regions(
    scores: np.ndarray,
    grid: CellGrid,
    frame_shape: tuple[int, int],
    threshold: float,
    dilate: int = 0,
    min_fill: float = 0.5,
    margin: int = 0,
) -> Regions:
    """Regions of a frame from the scores of its cells, best first.

    Cells scoring at least ``threshold`` are kept, grown by ``dilate`` cells (8-neighbourhood), cut into
    rectangles by :func:`decompose_mask`, scaled from working to frame pixels (rounded outwards), grown by
    ``margin`` pixels and clipped to the frame; overlapping boxes are merged by :func:`merge_overlapping`.
    A region's score is the largest non-negative cell score inside its rectangle.

    Parameters
    ----------
    scores : (ny, nx) array
        Cell scores on ``grid`` (negative: stopped by an early cascade stage).
    grid : CellGrid
        The cells, in working-resolution pixels; its last edges give the working size.
    frame_shape : (h, w)
        Size of the frame the boxes refer to.
    threshold : float
    dilate : int
    min_fill : float
    margin : int

    Returns
    -------
    Regions
        Empty when no cell is kept.
    """
    kept = scores >= threshold
    if not kept.any():
        return Regions.empty()
    if dilate:
        from scipy import ndimage

        kept = ndimage.binary_dilation(kept, np.ones((3, 3), bool), iterations=int(dilate))
    rects = np.array(decompose_mask(kept, float(min_fill)), np.int64).reshape(-1, 4)
    fh, fw = frame_shape[:2]
    wh, ww = int(grid.ys[-1]), int(grid.xs[-1])
    r0, r1, c0, c1 = rects.T
    # Integer arithmetic: rounding outwards is exact, so a box never leaves the frame by a rounding error.
    boxes = np.stack(
        [
            (grid.xs[c0] * fw) // ww,
            (grid.ys[r0] * fh) // wh,
            -((-grid.xs[c1] * fw) // ww),
            -((-grid.ys[r1] * fh) // wh),
        ],
        axis=1,
    )
    pos = np.maximum(scores, 0.0)
    rect_scores = np.array([pos[a:b, c:d].max() for a, b, c, d in rects], np.float32)
    grown = grow_regions(Regions(boxes, rect_scores), (fh, fw), int(margin))
    merged, merged_scores = merge_overlapping(grown.boxes, grown.scores)
    order = np.argsort(-merged_scores, kind="stable")
    return Regions(merged[order], merged_scores[order])


def expand_regions(regions: Regions, shape: tuple[int, int], margin: int) -> Regions:
    """Boxes grown by ``margin`` pixels, clipped to a frame of ``shape`` (h, w), overlaps merged, best first.

    Meant for crops that feed a detector: with ``margin`` about the largest descriptor radius, keypoints
    near a box edge keep their support.
    """
    if len(regions) == 0:
        return regions
    grown = grow_regions(regions, shape, int(margin))
    boxes, scores = merge_overlapping(grown.boxes, grown.scores)
    order = np.argsort(-scores, kind="stable")
    return Regions(boxes[order], scores[order])
