"""Prefilter files: round trip, the shipped format, damaged and foreign files, staleness."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import warnings
from importlib.resources import files

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
)
from objrec.prefilter.storage import SCHEMA_VERSION, default_path, load_prefilter, save_prefilter
from objrec.scenes import compose_scene


@pytest.fixture(scope="module")
def frame():
    return compose_scene(sample_background(), sample_objects(), rng=3, frame_size=(640, 480)).image


@pytest.fixture
def saved(trained, tmp_path):
    return trained.save(tmp_path / "pf")


def _rewrite_npz(npath, jpath, arrays):
    """Replace the array file and record its sha256, so only the arrays themselves are wrong."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    npath.write_bytes(buf.getvalue())
    m = json.loads(jpath.read_text())
    m["arrays"]["sha256"] = hashlib.sha256(buf.getvalue()).hexdigest()
    jpath.write_text(json.dumps(m))


def test_round_trip_gives_identical_scores_and_state(trained, saved, frame, db):
    jpath, npath = saved
    assert jpath.name == "pf.json" and npath.name == "pf.npz"
    assert sorted(p.name for p in jpath.parent.iterdir()) == ["pf.json", "pf.npz"], "no temporary files left"
    m = json.loads(jpath.read_text())
    assert m["format"] == "objrec-prefilter" and m["schema_version"] == SCHEMA_VERSION
    assert m["arrays"] == {"file": "pf.npz", "sha256": hashlib.sha256(npath.read_bytes()).hexdigest()}
    assert m["database_id"] == db.database_id and m["feature_names"] == list(FEATURE_NAMES)
    loaded = RegionPrefilter.load(npath)
    X, *_ = trained.frame_features(frame)
    np.testing.assert_array_equal(loaded.cell_scores(X), trained.cell_scores(X))
    a, b = trained.propose(frame), loaded.propose(frame)
    np.testing.assert_array_equal(a.boxes, b.boxes)
    np.testing.assert_array_equal(a.scores, b.scores)
    assert loaded.get_params() == trained.get_params()
    assert loaded.threshold_ == trained.threshold_ and loaded.feature_params_ == trained.feature_params_
    np.testing.assert_array_equal(loaded.stage_thresholds_, trained.stage_thresholds_)
    np.testing.assert_array_equal(loaded.color_lut_, trained.color_lut_)
    np.testing.assert_array_equal(loaded.texture_lut_, trained.texture_lut_)
    assert loaded.object_names_ == trained.object_names_ and loaded.estimators_ is None
    assert loaded.training_report_["n_scenes"] == trained.training_report_["n_scenes"]


def test_shipped_demo_prefilter_keeps_its_format(tmp_path, frame):
    """The demo files load; writing the loaded prefilter again gives the same manifest fields and arrays."""
    shipped = files("objrec.data") / "demo_prefilter.json"
    pf = RegionPrefilter.load(shipped)
    jpath, npath = pf.save(tmp_path / "again")
    old, new = json.loads(shipped.read_text()), json.loads(jpath.read_text())
    assert set(new) == set(old)
    for key in ("params", "feature_params", "feature_names", "database_id", "object_names", "n_features_in"):
        assert new[key] == old[key], key
    assert new["threshold"] == old["threshold"] and new["stage_thresholds"] == old["stage_thresholds"]
    with (
        np.load(files("objrec.data") / "demo_prefilter.npz") as a,
        np.load(npath) as b,
    ):
        assert sorted(a.files) == sorted(b.files)
        for k in a.files:
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    again = RegionPrefilter.load(jpath)
    np.testing.assert_array_equal(again.propose(frame).boxes, pf.propose(frame).boxes)


def test_save_needs_a_fitted_prefilter(tmp_path):
    with pytest.raises(NotFittedError):
        save_prefilter(RegionPrefilter(), tmp_path / "pf")
    assert list(tmp_path.iterdir()) == []


def test_damaged_arrays_name_the_file(saved):
    jpath, npath = saved
    data = npath.read_bytes()
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    npath.write_bytes(bytes(flipped))
    with pytest.raises(PrefilterError, match=r"pf\.npz.*sha256"):
        RegionPrefilter.load(jpath)
    npath.write_bytes(data[: len(data) // 2])
    m = json.loads(jpath.read_text())
    m["arrays"]["sha256"] = hashlib.sha256(data[: len(data) // 2]).hexdigest()
    jpath.write_text(json.dumps(m))
    with pytest.raises(PrefilterError, match=r"pf\.npz.*not a readable"):
        RegionPrefilter.load(jpath)
    npath.unlink()
    with pytest.raises(PrefilterError, match=r"pf\.npz.*not found"):
        RegionPrefilter.load(jpath)


def test_malformed_arrays_and_pickles_are_refused(saved):
    jpath, npath = saved
    with np.load(npath) as z:
        arrays = {k: z[k] for k in z.files}
    _rewrite_npz(npath, jpath, {k: v for k, v in arrays.items() if k != "color_lut"})
    with pytest.raises(PrefilterError, match=r"pf\.npz.*arrays missing or malformed"):
        load_prefilter(jpath)
    loop = dict(arrays, tree_left=arrays["tree_left"].copy())
    loop["tree_left"][0] = 0
    _rewrite_npz(npath, jpath, loop)
    with pytest.raises(PrefilterError, match=r"pf\.npz.*child index"):
        load_prefilter(jpath)
    _rewrite_npz(npath, jpath, dict(arrays, color_lut=np.array([{"code": "runs on load"}], dtype=object)))
    with pytest.raises(PrefilterError, match=r"pf\.npz"):
        load_prefilter(jpath)


def test_foreign_or_tampered_manifest_names_the_file(saved, tmp_path):
    jpath, _ = saved
    good = json.loads(jpath.read_text())
    cases = [
        ("{not json", r"pf\.json.*not valid JSON"),
        (json.dumps([1, 2]), r"pf\.json.*JSON object"),
        (json.dumps({"format": "objrec-modeldb", "schema_version": 1}), r"pf\.json.*not an objrec prefilter"),
        (json.dumps(dict(good, schema_version=SCHEMA_VERSION + 1)), r"pf\.json.*newer"),
        (json.dumps(dict(good, feature_names=["mean"])), r"pf\.json.*other cell features"),
        (json.dumps({k: v for k, v in good.items() if k != "params"}), r"pf\.json.*lacks or mangles"),
        (json.dumps(dict(good, params=dict(good["params"], cell_size=0))), r"pf\.json.*cell_size"),
        (json.dumps(dict(good, arrays=dict(good["arrays"], sha256="0" * 64))), r"pf\.npz.*sha256"),
    ]
    for text, pattern in cases:
        jpath.write_text(text)
        with pytest.raises(PrefilterError, match=pattern):
            RegionPrefilter.load(jpath)
    # The array file is looked up next to the manifest, whatever path the manifest gives.
    jpath.write_text(json.dumps(dict(good, arrays=dict(good["arrays"], file="../elsewhere/pf.npz"))))
    assert RegionPrefilter.load(jpath).threshold_ == good["threshold"]
    with pytest.raises(PrefilterError, match="missing.json.*not found"):
        RegionPrefilter.load(tmp_path / "missing.json")


def test_stale_and_absent_prefilters(trained, db, tmp_path):
    other = ModelDB.create(tmp_path / "db2", detectors={"sift": {"n_features": 100}})
    other.enroll("cover", sample_objects()["cover"])
    assert default_path(other) == RegionPrefilter.default_path(other) == other.path / "prefilter.json"
    got = RegionPrefilter.load_for(other)
    assert not got and got.reason == "absent" and "prefilter.json" in got.detail
    trained.save(default_path(other))  # trained for the first database
    with pytest.warns(StalePrefilterWarning, match="trained for database"):
        got = RegionPrefilter.load_for(other)
    assert not got and got.reason == "stale"
    with pytest.raises(StalePrefilterError, match="prefilter.json"):
        RegionPrefilter.load_for(other, on_stale="raise")
    with pytest.raises(StalePrefilterError, match=f"not {other.database_id}"):
        RegionPrefilter.load(default_path(other), database_id=other.database_id)
    with pytest.raises(ValueError, match="on_stale"):
        RegionPrefilter.load_for(other, on_stale="ignore")


def test_load_for_a_fresh_database(trained, db, tmp_path):
    copy = tmp_path / "db"
    shutil.copytree(db.path, copy)
    fresh = ModelDB.open(copy)
    trained.save(default_path(fresh))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pf = RegionPrefilter.load_for(fresh)
    assert pf and pf.database_id_ == db.database_id


def test_prefilter_stays_valid_through_remove_and_rename_but_not_enrolment(trained, db, tmp_path):
    """Removing or renaming objects keeps a prefilter's training valid (same positives or fewer); enrolling
    does not (the new object was never a positive). The manifest commit carries the earlier ids."""
    copy = tmp_path / "db"
    shutil.copytree(db.path, copy)
    fresh = ModelDB.open(copy)
    trained.save(default_path(fresh))
    first = fresh.names[0]
    fresh.rename(first, "renamed")
    fresh.remove(fresh.names[1])
    reopened = ModelDB.open(copy)
    assert reopened.database_id != db.database_id and db.database_id in reopened.compatible_ids
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert RegionPrefilter.load_for(reopened)
    reopened.enroll("late", sample_objects()[first])
    assert reopened.compatible_ids == []
    with pytest.warns(StalePrefilterWarning):
        assert not RegionPrefilter.load_for(ModelDB.open(copy))
