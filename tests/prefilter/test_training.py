"""Training for a database: provenance, region-threshold calibration, appearance tables, coverage."""

from __future__ import annotations

import numpy as np
import pytest

from objrec import ModelDB
from objrec.data import sample_background, sample_objects
from objrec.prefilter import RegionPrefilter, regions_to_mask, train_prefilter
from objrec.prefilter.features import cell_features, cell_grid
from objrec.prefilter.scenes import SceneSet, default_backgrounds, generate_scenes
from objrec.prefilter.training import (
    SceneCells,
    calibrate_region_threshold,
    learn_appearance,
    scene_features,
    scene_region_masks,
)
from objrec.scenes import compose_scene


@pytest.fixture(scope="module")
def small_scenes():
    """Ten 320x240 scenes (working size 160), cell features with learnt tables, a prefilter fitted on them."""
    scenes = generate_scenes(sample_objects(), default_backgrounds(2), 10, 160, 16, (320, 240), seed=4)
    cl, tl = learn_appearance(scenes, range(0, 10, 2))
    X, frac, groups = scene_features(scenes, 16, cl, tl, None)
    pf = RegionPrefilter(max_depth=4, min_samples_leaf=5, work_size=160, target_recall=0.9)
    pf.fit(X, frac >= 0.25, groups=groups, recall_weight=frac, color_lut=cl, texture_lut=tl)
    return scenes, X, groups, pf


def test_trained_prefilter_knows_its_database(trained, db):
    assert trained.database_id_ == db.database_id
    assert trained.object_names_ == db.names
    report = trained.training_report_
    assert report["n_scenes"] == 80 and report["calibration_scenes"] == 20
    assert report["calibration_region_area_recall"] >= trained.target_recall
    assert trained.color_lut_.any() and trained.texture_lut_.any()


def test_region_threshold_is_the_largest_meeting_target(small_scenes):
    """Bisection over the candidate thresholds gives what a scan over all of them gives."""
    scenes, X, groups, pf = small_scenes
    which = [i for i in range(len(scenes.images)) if scenes.n_objects[i] > 0]
    chosen = calibrate_region_threshold(pf, SceneCells(scenes, X, groups, (320, 240)), which)
    cand = np.unique(pf.cell_scores(X[np.isin(groups, which)]))
    cand = np.concatenate([[0.0], cand[cand > 0]])
    total = sum(float(scenes.masks[i].sum()) for i in which)
    best = 0.0
    for t in cand:
        masks = scene_region_masks(pf, SceneCells(scenes, X, groups, (320, 240)), which, float(t))
        kept = sum(float((m * scenes.masks[i]).sum()) for m, i in zip(masks, which, strict=True))
        if kept / total >= pf.target_recall:
            best = max(best, float(t))
    assert chosen == best
    empty = [i for i in range(len(scenes.images)) if scenes.n_objects[i] == 0]
    assert calibrate_region_threshold(pf, SceneCells(scenes, X, groups, (320, 240)), empty) == pf.stage_thresholds_[-1]


def test_train_method_is_train_prefilter_whatever_was_fitted_before(db):
    kwargs = dict(n_scenes=8, frame_size=(320, 240), seed=3)
    bgs = default_backgrounds(2)
    params = dict(work_size=160, max_depth=3, min_samples_leaf=5, random_state=1)
    by_function = train_prefilter(db, bgs, prefilter=RegionPrefilter(**params), **kwargs)
    used = RegionPrefilter(**params).fit(np.random.default_rng(0).random((100, 3)), np.arange(100) % 2)
    by_method = used.train(db, bgs, **kwargs)
    assert by_method is used
    for k, v in by_function.cascade_.to_arrays().items():
        np.testing.assert_array_equal(by_method.cascade_.to_arrays()[k], v, err_msg=k)
    assert by_method.threshold_ == by_function.threshold_ and by_method.n_features_in_ == by_function.n_features_in_
    np.testing.assert_array_equal(by_method.color_lut_, by_function.color_lut_)


def test_train_rejects_too_few_scenes_and_empty_databases(db, tmp_path):
    with pytest.raises(ValueError, match="n_scenes"):
        train_prefilter(db, None, n_scenes=3)
    empty = ModelDB.create(tmp_path / "empty", detectors={"sift": {}})
    with pytest.raises(ValueError, match="no enrolled objects"):
        train_prefilter(empty)


def test_learn_appearance_favours_object_colours():
    red = np.zeros((32, 32, 3), np.uint8)
    red[..., 2] = 200
    img = red.copy()
    img[:, 16:] = (200, 0, 0)  # blue background on the right half
    mask = np.zeros((32, 32), np.float32)
    mask[:, :16] = 1.0
    scenes = SceneSet([img], [np.zeros(4)], [mask], [1])
    cl, _ = learn_appearance(scenes, [0])
    code = lambda b, g, r: (b >> 4) * 256 + (g >> 4) * 16 + (r >> 4)  # noqa: E731
    assert cl[code(0, 0, 200)] > 0 > cl[code(200, 0, 0)]
    assert cl[code(0, 200, 0)] == pytest.approx(0.0, abs=1e-6), "a colour seen nowhere carries no evidence"


def test_scene_features_stack_scenes_in_order(small_scenes):
    scenes, X, groups, pf = small_scenes
    start = 0
    for i, img in enumerate(scenes.images):
        Xi, grid = cell_features(img, 16, pf.color_lut_, pf.texture_lut_, pf.feature_params_)
        n = grid.shape[0] * grid.shape[1]
        np.testing.assert_array_equal(X[start : start + n], Xi)
        assert np.all(groups[start : start + n] == i)
        start += n
    assert start == len(X)


def test_propose_covers_objects_in_new_scenes(trained):
    objects = sample_objects()
    kept = total = 0
    for seed in range(6):
        bg = sample_background((960, 540), seed=20 + seed)
        scene = compose_scene(bg, objects, rng=seed, frame_size=(640, 480), area_fraction=(0.05, 0.2))
        regions = trained.propose(scene.image)
        assert len(regions) >= 1
        obj = scene.object_mask > 0
        kept += (regions_to_mask(regions, (480, 640)) & obj).sum()
        total += obj.sum()
    assert kept / total >= 0.97


def test_region_masks_use_the_frame_margin_at_working_scale(small_scenes):
    scenes, X, groups, pf = small_scenes
    masks = scene_region_masks(pf, SceneCells(scenes, X, groups, (320, 240)), [0], pf.threshold_)
    wh, ww = scenes.images[0].shape[:2]
    grid = cell_grid(wh, ww, 16)
    kept = pf.predict(X[groups == 0]).reshape(grid.shape).astype(bool)
    for i, j in zip(*np.nonzero(kept), strict=True):
        # margin 8 frame px is 4 working px at half size: the cell and 4 px around it are inside.
        y0, y1 = max(grid.ys[i] - 4, 0), min(grid.ys[i + 1] + 4, wh)
        x0, x1 = max(grid.xs[j] - 4, 0), min(grid.xs[j + 1] + 4, ww)
        assert masks[0][y0:y1, x0:x1].all()
