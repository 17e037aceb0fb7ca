"""RegionPrefilter: fitting, proposing on generated scenes, files, stale and damaged models, CLI."""

from __future__ import annotations

import argparse
import json
import warnings

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from objrec import ModelDB
from objrec.data import sample_background, sample_objects
from objrec.prefilter import (
    FEATURE_NAMES,
    PrefilterError,
    RegionPrefilter,
    StalePrefilterError,
    StalePrefilterWarning,
    expand_regions,
    regions_to_mask,
)
from objrec.prefilter.cli import register
from objrec.scenes import compose_scene
from objrec.types import Regions


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = ModelDB.create(tmp_path_factory.mktemp("pf") / "db")
    for name, img in sample_objects().items():
        d.enroll(name, img)
    return d


@pytest.fixture(scope="module")
def trained(db):
    return RegionPrefilter(random_state=0).train(db, None, n_scenes=80, seed=1)


def test_unfitted_prefilter_raises():
    pf = RegionPrefilter()
    frame = np.zeros((64, 64, 3), np.uint8)
    with pytest.raises(NotFittedError):
        pf.propose(frame)
    with pytest.raises(NotFittedError):
        pf.save("/tmp/never-written")


def test_params_are_stored_not_validated_in_init():
    pf = RegionPrefilter(cell_size=-3)
    assert pf.get_params()["cell_size"] == -3
    with pytest.raises(ValueError, match="cell_size"):
        pf.fit(np.zeros((4, 2)), [0, 1, 0, 1])


def test_fit_on_features_and_exact_proba():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 5)).astype(np.float32)
    y = (X[:, 0] > 0.8).astype(int)
    pf = RegionPrefilter(max_depth=4, min_samples_leaf=5).fit(X, y)
    assert pf.n_features_in_ == 5 and pf.threshold_ == pf.stage_thresholds_[-1]
    np.testing.assert_array_equal(pf.predict_proba(X), pf.estimators_[0].predict_proba(X))
    assert pf.training_report_["calibration_area_recall"] >= 0.99
    casc = RegionPrefilter(max_depth=(2, 5), cascade=2, min_samples_leaf=5).fit(X, y)
    assert len(casc.stage_thresholds_) in (1, 2)
    with pytest.raises(ValueError, match="labels"):
        pf.fit(X, np.arange(len(X)))


def test_propose_covers_objects_in_new_scenes(trained):
    objects = sample_objects()
    kept = total = 0
    for seed in range(6):
        bg = sample_background((960, 540), seed=20 + seed)
        scene = compose_scene(bg, objects, rng=seed, frame_size=(640, 480), area_fraction=(0.05, 0.2))
        regions = trained.propose(scene.image)
        assert isinstance(regions, Regions) and len(regions) >= 1
        b = regions.boxes
        assert np.all((b[:, 0] >= 0) & (b[:, 1] >= 0) & (b[:, 2] <= 640) & (b[:, 3] <= 480))
        assert np.all(np.diff(regions.scores) <= 0), "ordered by score"
        mask = regions_to_mask(regions, (480, 640))
        obj = scene.object_mask > 0
        kept += (mask & obj).sum()
        total += obj.sum()
    assert kept / total >= 0.97


def test_propose_gray_and_blank(trained):
    gray = np.full((480, 640), 128, np.uint8)
    r = trained.propose(gray)
    assert isinstance(r, Regions)
    assert r.area_fraction(640, 480) <= 0.5
    grown = expand_regions(Regions(np.array([[10, 10, 20, 20]]), np.ones(1)), (480, 640), 16)
    np.testing.assert_array_equal(grown.boxes, [[0, 0, 36, 36]])


def test_save_load_roundtrip(trained, tmp_path, db):
    jpath, npath = trained.save(tmp_path / "pf")
    assert jpath.name == "pf.json" and npath.name == "pf.npz"
    m = json.loads(jpath.read_text())
    assert m["database_id"] == db.database_id and m["feature_names"] == list(FEATURE_NAMES)
    loaded = RegionPrefilter.load(npath)
    frame = compose_scene(sample_background(), sample_objects(), rng=3, frame_size=(640, 480)).image
    a, b = trained.propose(frame), loaded.propose(frame)
    np.testing.assert_array_equal(a.boxes, b.boxes)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert loaded.get_params() == trained.get_params()


def test_damaged_files_name_the_file(trained, tmp_path):
    jpath, npath = trained.save(tmp_path / "pf")
    data = bytearray(npath.read_bytes())
    data[len(data) // 2] ^= 0xFF
    npath.write_bytes(bytes(data))
    with pytest.raises(PrefilterError, match="pf.npz.*sha256"):
        RegionPrefilter.load(jpath)
    npath.unlink()
    with pytest.raises(PrefilterError, match="pf.npz.*not found"):
        RegionPrefilter.load(jpath)
    jpath.write_text("{not json")
    with pytest.raises(PrefilterError, match="pf.json.*not valid JSON"):
        RegionPrefilter.load(jpath)
    jpath.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(PrefilterError, match="not an objrec prefilter"):
        RegionPrefilter.load(jpath)
    with pytest.raises(PrefilterError, match="not found"):
        RegionPrefilter.load(tmp_path / "missing.json")


def test_tampered_manifest_and_newer_schema(trained, tmp_path):
    jpath, _ = trained.save(tmp_path / "pf")
    m = json.loads(jpath.read_text())
    m["schema_version"] = 99
    jpath.write_text(json.dumps(m))
    with pytest.raises(PrefilterError, match="newer"):
        RegionPrefilter.load(jpath)
    m["schema_version"] = 1
    m["arrays"]["sha256"] = "0" * 64
    jpath.write_text(json.dumps(m))
    with pytest.raises(PrefilterError, match="sha256"):
        RegionPrefilter.load(jpath)


def test_load_for_absent_stale_and_fresh(trained, tmp_path):
    other = ModelDB.create(tmp_path / "db2")
    other.enroll("cover", sample_objects()["cover"])
    got = RegionPrefilter.load_for(other)
    assert not got and got.reason == "absent"
    trained.save(RegionPrefilter.default_path(other))  # trained for the first database
    with pytest.warns(StalePrefilterWarning, match="trained for database"):
        got = RegionPrefilter.load_for(other)
    assert not got and got.reason == "stale"
    with pytest.raises(StalePrefilterError):
        RegionPrefilter.load_for(other, on_stale="raise")
    with pytest.raises(StalePrefilterError):
        RegionPrefilter.load(RegionPrefilter.default_path(other), database_id=other.database_id)


def test_load_for_fresh_database(db, trained):
    trained.save(RegionPrefilter.default_path(db))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pf = RegionPrefilter.load_for(db)
    assert pf and pf.database_id_ == db.database_id


def test_cli_train_prefilter(db, tmp_path, capsys):
    parser = argparse.ArgumentParser(prog="objrec")
    sub = parser.add_subparsers(dest="command")
    register(sub)
    out = tmp_path / "out" / "pf"
    args = parser.parse_args(
        ["train-prefilter", "--db", str(db.path), "--scenes", "12", "--no-progress", "--out", str(out)]
    )
    assert args.func(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert RegionPrefilter.load(out, database_id=db.database_id).threshold_ >= 0
    with pytest.raises(SystemExit):
        parser.parse_args(["train-prefilter", "--db", "x", "--frame-size", "10"])


def test_compiled_inference_on_real_frame_features(trained, shared_data):
    """Cell features of real video frames through the compiled cascade == each sklearn tree's output."""
    import cv2

    from objrec.prefilter.tree import FlatTree

    cap = cv2.VideoCapture(str(shared_data / "opencv_samples" / "vtest.avi"))
    ok, frame = cap.read()
    cap.release()
    assert ok
    X, *_ = trained.frame_features(frame)
    probs = [est.predict_proba(X)[:, 1] for est in trained.estimators_]
    for est, p in zip(trained.estimators_, probs, strict=True):
        np.testing.assert_array_equal(FlatTree.from_sklearn(est).predict_proba(X)[:, 1], p)
    expect = probs[-1]
    for k in range(len(probs) - 2, -1, -1):
        expect = np.where(probs[k] < trained.stage_thresholds_[k], probs[k] - 1.0, expect)
    np.testing.assert_array_equal(trained.cell_scores(X), expect)
