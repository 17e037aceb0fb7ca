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


def merge_overlapping(boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge overlapping boxes whose union is no larger than the two boxes together.

    Two such boxes cost no more to process as their union, and their overlap would otherwise be processed
    twice. A merged box takes the larger score. Merging repeats until no pair qualifies: the first box
    (in order) with a qualifying partner takes the union with its first such partner, which is removed.

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
    from objrec.prefilter.region_kernels import merge_boxes

    boxes = np.array(boxes, np.int64).reshape(-1, 4)
    scores = np.array(scores, np.float64).reshape(-1)
    n = merge_boxes(boxes, scores) if len(boxes) > 1 else len(boxes)
    return boxes[:n].copy(), scores[:n].copy()


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

    from objrec.prefilter.region_kernels import decompose_labels

    labels, n = ndimage.label(np.asarray(mask, bool), np.ones((3, 3), int))
    if n == 0:
        return []
    boxes = np.array([(sl[0].start, sl[0].stop, sl[1].start, sl[1].stop) for sl in ndimage.find_objects(labels)])
    rects = decompose_labels(labels.astype(np.int32), n, boxes.astype(np.int64), float(min_fill))
    return [(int(x0), int(y0), int(x1), int(y1)) for x0, y0, x1, y1 in rects]


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
    ``regions``: the boxes, with their scores.
    """
    if len(regions) == 0:
        return regions
    grown = grow_regions(regions, shape, int(margin))
    boxes, scores = merge_overlapping(grown.boxes, grown.scores)
    order = np.argsort(-scores, kind="stable")
    return Regions(boxes[order], scores[order])
