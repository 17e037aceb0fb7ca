"""Compiled loops of :mod:`objrec.prefilter.regions`: the split of labelled cell components into rectangles
and the merging of overlapping boxes.

Both run on every frame the prefilter sees, and many times in each threshold calibration, on a grid of a
few hundred cells and tens of boxes: loops this small cost more in NumPy calls than in arithmetic.
"""

from __future__ import annotations

import numpy as np

from objrec.kernel_cache import njit


@njit
def _count(labels, lab, r0, r1, c0, c1):  # pragma: no cover - compiled
    n = 0
    for r in range(r0, r1):
        for c in range(c0, c1):
            if labels[r, c] == lab:
                n += 1
    return n


@njit
def _shrink(labels, lab, r0, r1, c0, c1):  # pragma: no cover - compiled
    """The tight box of ``lab``'s cells inside ``[r0, r1) x [c0, c1)``; r0 == r1 when it holds none."""
    lo_r, hi_r, lo_c, hi_c = r1, r0, c1, c0
    for r in range(r0, r1):
        for c in range(c0, c1):
            if labels[r, c] == lab:
                lo_r, hi_r = min(lo_r, r), max(hi_r, r + 1)
                lo_c, hi_c = min(lo_c, c), max(hi_c, c + 1)
    if hi_r <= lo_r:
        return r0, r0, c0, c0
    return lo_r, hi_r, lo_c, hi_c


@njit
def _cut(labels, lab, r0, r1, c0, c1, along_rows):  # pragma: no cover - compiled
    """Offset of the cut: after the first line (past the first) with the fewest of ``lab``'s cells."""
    n = (r1 - r0) if along_rows else (c1 - c0)
    if n <= 2:
        return 1
    best, cut = -1, 1
    for k in range(1, n):
        if along_rows:
            s = _count(labels, lab, r0 + k, r0 + k + 1, c0, c1)
        else:
            s = _count(labels, lab, r0, r1, c0 + k, c0 + k + 1)
        if best < 0 or s < best:
            best, cut = s, k
    return cut


@njit
def decompose_labels(labels, n_labels, boxes, min_fill):  # pragma: no cover - compiled
    """Rectangles ``(r0, r1, c0, c1)`` of the components ``1..n_labels`` of ``labels`` (see
    :func:`objrec.prefilter.regions.decompose_mask`); ``boxes[k]`` is component ``k + 1``'s bounding box."""
    out = np.empty((max(16, 4 * labels.size), 4), np.int64)
    m = 0
    stack = np.empty((2 * labels.size + 4, 4), np.int64)
    for lab in range(1, n_labels + 1):
        stack[0] = boxes[lab - 1]
        top = 1
        while top > 0:
            top -= 1
            r0, r1, c0, c1 = _shrink(labels, lab, stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3])
            if r1 <= r0:
                continue
            size = (r1 - r0) * (c1 - c0)
            if _count(labels, lab, r0, r1, c0, c1) >= min_fill * size or size <= 2:
                out[m, 0], out[m, 1], out[m, 2], out[m, 3] = r0, r1, c0, c1
                m += 1
                continue
            along_rows = (r1 - r0) >= (c1 - c0)
            k = _cut(labels, lab, r0, r1, c0, c1, along_rows)
            if along_rows:
                stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = r0, r0 + k, c0, c1
                stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2], stack[top + 1, 3] = r0 + k, r1, c0, c1
            else:
                stack[top, 0], stack[top, 1], stack[top, 2], stack[top, 3] = r0, r1, c0, c0 + k
                stack[top + 1, 0], stack[top + 1, 1], stack[top + 1, 2], stack[top + 1, 3] = r0, r1, c0 + k, c1
            top += 2
    return out[:m].copy()


@njit
def merge_boxes(boxes, scores):  # pragma: no cover - compiled
    """Merge in place (see :func:`objrec.prefilter.regions.merge_overlapping`); returns the boxes kept."""
    n = boxes.shape[0]
    merged = True
    while merged and n > 1:
        merged = False
        for i in range(n):
            a0, a1, a2, a3 = boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3]
            area_a = (a2 - a0) * (a3 - a1)
            for j in range(n):
                b0, b1, b2, b3 = boxes[j, 0], boxes[j, 1], boxes[j, 2], boxes[j, 3]
                if j == i or not (b0 < a2 and a0 < b2 and b1 < a3 and a1 < b3):
                    continue
                u0, u1, u2, u3 = min(a0, b0), min(a1, b1), max(a2, b2), max(a3, b3)
                if (u2 - u0) * (u3 - u1) <= area_a + (b2 - b0) * (b3 - b1):
                    boxes[i, 0], boxes[i, 1], boxes[i, 2], boxes[i, 3] = u0, u1, u2, u3
                    scores[i] = max(scores[i], scores[j])
                    for k in range(j, n - 1):
                        boxes[k] = boxes[k + 1]
                        scores[k] = scores[k + 1]
                    n -= 1
                    merged = True
                    break
            if merged:
                break
    return n
