"""The feature stage: features in frame pixels equal the detectors' own on the same pixels."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_background
from objrec.features import SIFT, SURF
from objrec.features.extract import FeatureStage
from objrec.types import Regions, SearchPlan


@pytest.fixture(scope="module")
def gray():
    return cv2.cvtColor(sample_background((320, 240), seed=4), cv2.COLOR_BGR2GRAY)


def _sorted_xy(f):
    return f.xy[np.lexsort((f.xy[:, 1], f.xy[:, 0]))]


def test_surf_regions_in_one_pass_equal_surf_with_the_same_regions(gray):
    stage = FeatureStage({"surf": {"hessian_threshold": 400}}, backend="cpu")
    image = stage.frame_image(gray)
    regions = Regions.from_boxes([[10, 20, 150, 140], [200, 100, 310, 230]])
    got = stage.extract(image, "surf", SearchPlan(regions, pixels=1))
    ref = SURF(400, backend="cpu").detect_and_compute(gray, regions=regions)
    assert len(got) == len(ref) > 10
    np.testing.assert_array_equal(got.xy, ref.xy)
    np.testing.assert_array_equal(got.descriptors, ref.descriptors)


def test_a_small_region_searched_on_its_crop_keeps_the_whole_frames_features():
    """A region covering a small part of a 1280x720 frame is searched on the crop that holds it with a margin:
    every keypoint the whole-frame pass finds away from the region's edge is found at the same place, with the
    same descriptor, and nearly all of those near the edge (the largest filters reach past the margin)."""
    from objrec.features.extract import CROP_MARGIN

    big = cv2.cvtColor(sample_background((1280, 720), seed=6), cv2.COLOR_BGR2GRAY)
    stage = FeatureStage({"surf": {"hessian_threshold": 200}}, backend="cpu")
    box = [400, 200, 760, 480]
    got = stage.extract(stage.frame_image(big), "surf", SearchPlan(Regions.from_boxes([box]), pixels=1))
    ref = SURF(200, backend="cpu").detect_and_compute(big, regions=Regions.from_boxes([box]))
    x, y = ref.xy[:, 0], ref.xy[:, 1]
    inner = (
        (x >= box[0] + CROP_MARGIN)
        & (x < box[2] - CROP_MARGIN)
        & (y >= box[1] + CROP_MARGIN)
        & (y < box[3] - CROP_MARGIN)
    )
    d2 = ((ref.xy[:, None, :] - got.xy[None, :, :]) ** 2).sum(-1)
    nearest = d2.argmin(axis=1)
    same = d2[np.arange(len(ref)), nearest] < 0.01**2
    desc = np.linalg.norm(ref.descriptors - got.descriptors[nearest], axis=1)
    assert inner.sum() > 50
    # Integral sums from another origin round differently: the same keypoints and descriptors but for the odd
    # one at a near tie (an extremum, a dominant orientation).
    assert same[inner].mean() >= 0.99 and same.mean() >= 0.95
    assert np.median(desc[same]) < 1e-4 and np.mean(desc[same] < 0.01) >= 0.97


def test_frames_are_sampled_at_the_plans_step_whatever_the_enrolled_parameters(gray):
    """The plan's sample step overrides the database's SURF parameters (enrolment keeps OpenCV's step)."""
    stage = FeatureStage({"surf": {"hessian_threshold": 400}, "sift": {}}, backend="cpu")
    image = stage.frame_image(gray)
    got = stage.extract(image, "surf", SearchPlan(None, pixels=1, sample_step=2))
    coarse = SURF(400, backend="cpu", sample_step=2).detect_and_compute(gray)
    fine = SURF(400, backend="cpu").detect_and_compute(gray)
    assert len(got) == len(coarse) > 10 and len(coarse) != len(fine)
    np.testing.assert_array_equal(got.descriptors, coarse.descriptors)
    again = stage.extract(image, "surf", SearchPlan(None, pixels=1))
    np.testing.assert_array_equal(again.descriptors, fine.descriptors)
    assert len(stage.extract(image, "sift", SearchPlan(None, pixels=1, sample_step=2))) > 10
    with pytest.raises(ValueError, match="sample_step"):
        SearchPlan(None, sample_step=4)


def test_feature_cap_describes_the_strongest_only(gray):
    stage = FeatureStage({"surf": {"hessian_threshold": 100}}, backend="cpu")
    image = stage.frame_image(gray)
    full = stage.extract(image, "surf", SearchPlan(None))
    capped = stage.extract(image, "surf", SearchPlan(None, max_features=25))
    assert len(full) > 25 and len(capped) == 25
    np.testing.assert_array_equal(capped.response, full.response[:25])


def test_sift_crops_are_shifted_into_the_frame(gray):
    stage = FeatureStage({"sift": {}}, backend="cpu")
    image = stage.frame_image(gray)
    box = [40, 30, 240, 200]
    got = stage.extract(image, "sift", SearchPlan(Regions.from_boxes([box])))
    ref = SIFT(backend="cpu").detect_and_compute(np.ascontiguousarray(gray[30:200, 40:240]))
    assert len(got) == len(ref) > 10
    np.testing.assert_allclose(got.xy, ref.xy + np.float32([40, 30]))
    assert np.all((got.xy >= [40, 30]) & (got.xy < [240, 200]))


@pytest.mark.parametrize("kind", ["surf", "sift"])
def test_a_plans_crop_is_searched_alone_and_shifted_into_the_frame(gray, kind):
    """A plan with a crop (a tile of the sweep) gives the detector's own features of that crop and nothing
    from around it, in frame pixels; regions inside the crop restrict the search as they do on a frame."""
    stage = FeatureStage({kind: {"hessian_threshold": 400} if kind == "surf" else {}}, backend="cpu")
    image = stage.frame_image(gray)
    crop = (40, 30, 240, 200)
    det = SURF(400, backend="cpu") if kind == "surf" else SIFT(backend="cpu")
    alone = np.ascontiguousarray(gray[30:200, 40:240])
    got = stage.extract(image, kind, SearchPlan(Regions.from_boxes([crop]), pixels=1, crop=crop))
    ref = det.detect_and_compute(alone)
    assert len(got) == len(ref) > 10
    np.testing.assert_allclose(got.xy, ref.xy + np.float32([40, 30]))
    np.testing.assert_array_equal(got.descriptors, ref.descriptors)
    if kind == "surf":
        part = SearchPlan(Regions.from_boxes([(60, 50, 180, 150)]), pixels=1, crop=crop)
        ref = det.detect_and_compute(alone, regions=Regions.from_boxes([(20, 20, 140, 120)]))
        np.testing.assert_allclose(stage.extract(image, kind, part).xy, ref.xy + np.float32([40, 30]))


def test_lower_resolution_comes_back_in_full_resolution_pixels(gray):
    stage = FeatureStage({"surf": {"hessian_threshold": 400}}, backend="cpu")
    image = stage.frame_image(gray)
    got = stage.extract(image, "surf", SearchPlan(None, scale=0.75))
    small = cv2.resize(gray, (240, 180), interpolation=cv2.INTER_AREA)
    ref = SURF(400, backend="cpu").detect_and_compute(small)
    assert len(got) == len(ref) > 5
    np.testing.assert_allclose(got.xy, ref.xy * np.float32([320 / 240, 240 / 180]), rtol=1e-6)
    np.testing.assert_allclose(got.size, ref.size * (320 / 240), rtol=1e-6)


def test_empty_plan_gives_empty_features(gray):
    stage = FeatureStage({"surf": {}}, backend="cpu")
    image = stage.frame_image(gray)
    f = stage.extract(image, "surf", SearchPlan(Regions.empty()))
    assert len(f) == 0 and f.descriptors.shape == (0, 64) and f.kind == "surf"


def test_sift_box_at_a_lower_resolution_equals_opencv_on_the_resized_crop_mapped_back(gray):
    """An escalation's plan (one box, scale < 1): OpenCV's SIFT on the crop resized with INTER_AREA, its
    keypoints scaled back by the crop's own size ratio and shifted by the box's corner."""
    stage = FeatureStage({"sift": {}}, backend="cpu")
    box = [40, 30, 280, 210]
    got = stage.extract(stage.frame_image(gray), "sift", SearchPlan(Regions.from_boxes([box]), scale=0.5))
    crop = cv2.resize(gray[30:210, 40:280], (120, 90), interpolation=cv2.INTER_AREA)
    kps, desc = cv2.SIFT_create().detectAndCompute(crop, None)
    ref = np.float32([k.pt for k in kps]) * np.float32([240 / 120, 180 / 90]) + np.float32([40, 30])
    assert len(got) == len(kps) > 10
    order = np.lexsort((ref[:, 1], ref[:, 0]))
    np.testing.assert_allclose(_sorted_xy(got), ref[order], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(np.sort(got.size), np.sort(np.float32([k.size for k in kps]) * 2.0), rtol=1e-5)


def test_snapped_boxes_hold_the_box_on_the_grid_inside_the_frame():
    from objrec.features.extract import snap_box

    rng = np.random.default_rng(2)
    for _ in range(500):
        w, h = (int(v) for v in rng.integers(40, 1400, 2))
        x0, x1 = sorted(int(v) for v in rng.integers(0, w + 1, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h + 1, 2))
        a0, b0, a1, b1 = snap_box(x0, y0, x1, y1, w, h, 32)
        assert 0 <= a0 <= x0 and 0 <= b0 <= y0 and x1 <= a1 <= w and y1 <= b1 <= h
        assert a0 % 32 == 0 and b0 % 32 == 0
        assert (a1 % 32 == 0 or a1 == w) and (b1 % 32 == 0 or b1 == h)
        assert a1 - a0 < x1 - x0 + 64 and b1 - b0 < y1 - y0 + 64
