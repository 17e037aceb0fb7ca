"""Shared types validate on construction; empty results have the right shapes."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.types import Detection, Failure, Features, FrameResult, Regions


def _features(n: int, d: int = 64) -> Features:
    rng = np.random.default_rng(0)
    return Features(
        rng.random((n, 2)), np.ones(n), np.zeros(n), np.ones(n), np.zeros(n), np.ones(n), rng.random((n, d)), "surf"
    )


def test_features_casts_and_validates():
    f = _features(5)
    assert f.xy.dtype == np.float32 and f.octave.dtype == np.int32 and f.laplacian.dtype == np.int8
    assert len(f) == 5 and f.descriptor_size == 64
    with pytest.raises(ValueError, match="size: expected 5 rows"):
        Features(f.xy, np.ones(4), f.angle, f.response, f.octave, f.laplacian, f.descriptors)
    with pytest.raises(ValueError, match=r"xy: expected shape \(N, 2\)"):
        Features(np.ones((5, 3)), f.size, f.angle, f.response, f.octave, f.laplacian, f.descriptors)


def test_features_empty_subset_concat_shift():
    e = Features.empty(128, "sift")
    assert len(e) == 0 and e.descriptors.shape == (0, 128) and e.xy.shape == (0, 2)
    f = _features(6)
    s = f.subset(np.array([True, False] * 3))
    assert len(s) == 3
    c = Features.concatenate([s, f])
    assert len(c) == 9
    np.testing.assert_allclose(f.shifted(10, -2).xy - f.xy, np.float32([[10, -2]] * 6))
    with pytest.raises(ValueError, match="mixed kinds"):
        Features.concatenate([f, Features.empty(64, "sift")])
    g = Features.from_arrays(f.to_arrays("p_"), "p_", kind="surf")
    np.testing.assert_array_equal(g.descriptors, f.descriptors)


def test_regions():
    r = Regions(np.array([[0, 0, 10, 10], [5, 5, 20, 10]]), np.array([0.9, 0.5]))
    assert r.boxes.dtype == np.int32 and len(r) == 2
    assert r.area_fraction(20, 10) == pytest.approx((100 + 75 - 25) / 200)
    assert len(Regions.empty()) == 0 and Regions.empty().boxes.shape == (0, 4)
    with pytest.raises(ValueError, match="x1 > x0"):
        Regions(np.array([[5, 0, 5, 10]]), np.array([1.0]))


def test_detection_normalises_and_validates():
    H = np.diag([2.0, 2.0, 2.0])
    d = Detection("a", 0.5, 10, H, np.zeros((4, 2)))
    assert d.homography[2, 2] == 1.0 and d.to_json()["homography"][0][0] == 1.0
    with pytest.raises(ValueError, match="score"):
        Detection("a", 1.5, 10, H, np.zeros((4, 2)))
    with pytest.raises(ValueError, match="homography"):
        Detection("a", 0.5, 10, np.full((3, 3), np.nan), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="name"):
        Detection("", 0.5, 10, H, np.zeros((4, 2)))


def test_frame_result_and_failure():
    assert FrameResult().deadline_met and FrameResult().detections == []
    with pytest.raises(TypeError):
        FrameResult(detections=["x"])
    f = Failure("too_few_matches", "3 < 8")
    assert not f and f.reason == "too_few_matches"


def test_detection_without_a_plane_has_an_outline_and_no_homography():
    hull = np.array([[10, 10], [60, 12], [55, 70], [12, 64]], np.float64)
    box = np.array([[10, 10], [60, 10], [60, 70], [10, 70]], np.float64)
    d = Detection("toy", 0.8, 25, None, box, outline=hull, view=1)
    doc = d.to_json()
    assert doc["homography"] is None and doc["outline"] == hull.tolist() and doc["view"] == 1
    with pytest.raises(ValueError, match="outline"):
        Detection("toy", 0.8, 25, None, box)  # neither a homography nor an outline
    with pytest.raises(ValueError, match="outline"):
        Detection("toy", 0.8, 25, None, box, outline=hull[:2])
    with pytest.raises(ValueError, match="view"):
        Detection("toy", 0.8, 25, np.eye(3), box, view=-1)
