"""Cell scores to boxes: mask decomposition, merging, scaling to the frame, expansion for crops."""

from __future__ import annotations

from fractions import Fraction
from math import ceil, floor

import numpy as np
import pytest

import objrec.boxes
import objrec.prefilter
from objrec.prefilter.features import cell_grid
from objrec.prefilter.regions import cells_to_regions, decompose_mask, expand_regions, merge_overlapping
from objrec.types import Regions


def _random_masks():
    rng = np.random.default_rng(0)
    for k in range(30):
        shape = tuple(int(v) for v in rng.integers(1, 25, 2))
        yield rng.random(shape) < (0.05 + 0.9 * k / 30)
    yield np.eye(12, dtype=bool)  # a diagonal: one 8-connected component
    yield np.zeros((5, 7), bool)


def _paint(rects, shape) -> np.ndarray:
    count = np.zeros(shape, int)
    for r0, r1, c0, c1 in rects:
        count[r0:r1, c0:c1] += 1
    return count


def test_decompose_full_rectangles_cover_exactly_the_mask():
    for mask in _random_masks():
        rects = decompose_mask(mask, 1.0)
        count = _paint(rects, mask.shape)
        np.testing.assert_array_equal(count > 0, mask)
        assert count.max(initial=0) <= 1, "rectangles overlap"


def test_decompose_partial_fill_covers_the_mask_with_full_enough_rectangles():
    for mask in _random_masks():
        rects = decompose_mask(mask, 0.5)
        assert np.all(_paint(rects, mask.shape)[mask] >= 1)
        for r0, r1, c0, c1 in rects:
            sub = mask[r0:r1, c0:c1]
            assert sub.size <= 2 or sub.mean() >= 0.5
            # Tight: every border line of the rectangle holds a kept cell.
            assert sub[0].any() and sub[-1].any() and sub[:, 0].any() and sub[:, -1].any()
    diagonal = decompose_mask(np.eye(12, dtype=bool), 0.5)
    assert sum((r1 - r0) * (c1 - c0) for r0, r1, c0, c1 in diagonal) < 144 / 2


def _union(boxes, shape=(120, 120)) -> np.ndarray:
    m = np.zeros(shape, bool)
    for x0, y0, x1, y1 in boxes:
        m[y0:y1, x0:x1] = True
    return m


def _qualifies(a, b) -> bool:
    overlap = a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
    ux0, uy0, ux1, uy1 = min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3])
    area = lambda r: (r[2] - r[0]) * (r[3] - r[1])  # noqa: E731
    return overlap and (ux1 - ux0) * (uy1 - uy0) <= area(a) + area(b)


def test_merge_overlapping_against_pairwise_rule():
    rng = np.random.default_rng(1)
    for _ in range(60):
        n = int(rng.integers(1, 12))
        xy = rng.integers(0, 90, (n, 2))
        wh = rng.integers(1, 30, (n, 2))
        boxes = np.concatenate([xy, xy + wh], axis=1)
        scores = rng.random(n)
        out, out_scores = merge_overlapping(boxes, scores)
        assert len(out) <= n and len(out) == len(out_scores)
        assert not any(_qualifies(out[i], out[j]) for i in range(len(out)) for j in range(i + 1, len(out)))
        assert np.all(_union(out) >= _union(boxes)), "an input pixel is lost"
        assert out_scores.max() == scores.max() and set(out_scores) <= set(scores)
    # A box inside another is absorbed; two boxes side by side become one; an L shape stays two.
    np.testing.assert_array_equal(merge_overlapping([[0, 0, 10, 10], [2, 2, 5, 5]], [0.1, 0.9])[0], [[0, 0, 10, 10]])
    np.testing.assert_array_equal(merge_overlapping([[0, 0, 6, 4], [5, 0, 9, 4]], [1, 2])[0], [[0, 0, 9, 4]])
    assert len(merge_overlapping([[0, 0, 10, 2], [0, 0, 2, 10]], [1, 1])[0]) == 2


def test_expand_regions_grows_clips_merges_and_orders():
    grown = expand_regions(Regions.from_boxes([[10, 10, 20, 20]]), (480, 640), 16)
    np.testing.assert_array_equal(grown.boxes, [[0, 0, 36, 36]])
    r = Regions.from_boxes([[100, 100, 140, 140], [150, 100, 190, 140], [600, 440, 640, 480]], [0.2, 0.9, 0.5])
    e = expand_regions(r, (480, 640), 8)
    np.testing.assert_array_equal(e.boxes, [[92, 92, 198, 148], [592, 432, 640, 480]])
    np.testing.assert_array_equal(e.scores, np.float32([0.9, 0.5]))
    assert len(expand_regions(Regions.empty(), (480, 640), 8)) == 0


def _outward(edge: int, size: int, work: int) -> tuple[int, int]:
    v = Fraction(int(edge) * size, work)
    return floor(v), ceil(v)


@pytest.mark.parametrize(
    ("work", "frame"), [((240, 320), (480, 640)), ((239, 320), (479, 641)), ((97, 131), (517, 333))]
)
def test_cells_to_regions_scales_one_cell_exactly(work, frame):
    grid = cell_grid(*work, 16)
    ny, nx = grid.shape
    for i, j in [(0, 0), (ny - 1, nx - 1), (ny // 2, nx // 3)]:
        scores = np.zeros(grid.shape)
        scores[i, j] = 0.7
        r = cells_to_regions(scores, grid, frame, 0.5)
        x0, y0 = _outward(grid.xs[j], frame[1], work[1])[0], _outward(grid.ys[i], frame[0], work[0])[0]
        x1, y1 = _outward(grid.xs[j + 1], frame[1], work[1])[1], _outward(grid.ys[i + 1], frame[0], work[0])[1]
        np.testing.assert_array_equal(r.boxes, [[x0, y0, x1, y1]])
        np.testing.assert_array_equal(r.scores, np.float32([0.7]))
        m = cells_to_regions(scores, grid, frame, 0.5, margin=5).boxes[0]
        expect = [max(x0 - 5, 0), max(y0 - 5, 0), min(x1 + 5, frame[1]), min(y1 + 5, frame[0])]
        np.testing.assert_array_equal(m, expect)


def test_cells_to_regions_covers_kept_cells_and_orders_by_score():
    rng = np.random.default_rng(2)
    work, frame = (239, 320), (479, 641)
    grid = cell_grid(*work, 16)
    for _ in range(20):
        scores = rng.random(grid.shape) - 0.3  # negatives: stopped by an early stage
        t = float(rng.uniform(0.4, 0.69))
        dilate = int(rng.integers(0, 2))
        r = cells_to_regions(scores, grid, frame, t, dilate=dilate, min_fill=0.5, margin=3)
        b = r.boxes
        assert np.all((b[:, 0] >= 0) & (b[:, 1] >= 0) & (b[:, 2] <= frame[1]) & (b[:, 3] <= frame[0]))
        assert np.all(np.diff(r.scores) <= 0)
        covered = _union(b, frame)
        for i, j in zip(*np.nonzero(scores >= t), strict=True):
            y0 = _outward(grid.ys[i], frame[0], work[0])[0]
            x0 = _outward(grid.xs[j], frame[1], work[1])[0]
            y1 = _outward(grid.ys[i + 1], frame[0], work[0])[1]
            x1 = _outward(grid.xs[j + 1], frame[1], work[1])[1]
            assert covered[y0:y1, x0:x1].all()
        assert r.scores[0] == np.float32(scores.max())
    assert len(cells_to_regions(np.full(grid.shape, 0.2), grid, frame, 0.5)) == 0


def test_regions_to_mask_is_the_box_geometry_one():
    assert objrec.prefilter.regions_to_mask is objrec.boxes.regions_to_mask
