"""A catalogue's matcher that reads shortlisted objects from the database gives what the in-memory matcher
over every object gives: the same candidates, matches, ratios and guided matches."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec import ModelDB, Recognizer
from objrec.data import synthetic_cover
from objrec.features import SURF
from objrec.matching.database import DatabaseMatcher
from objrec.matching.shortlist import ShortlistMatcher, prepare_indexes
from objrec.matching.stored import StoredMatcher
from objrec.scenes import compose_scene, place_homography

SURF_ONLY = {"surf": {"hessian_threshold": 400.0}}


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    db = ModelDB.create(tmp_path_factory.mktemp("stored") / "db", detectors=SURF_ONLY)
    covers = {f"c{i}": synthetic_cover(30 + i, (240, 320)) for i in range(7)}
    db.enroll_many(list(covers.items()), progress=False)
    shown = {n: covers[n] for n in ("c2", "c5")}
    homs = {
        "c2": place_homography((240, 320), (170, 240), 0.8, 12.0, (0.1, 0.0)),
        "c5": place_homography((240, 320), (470, 240), 0.8, -8.0, (0.0, 0.1)),
    }
    scene = compose_scene(synthetic_cover(99, (640, 480)), shown, rng=3, homographies=homs)
    feats = SURF(backend="cpu").detect_and_compute(scene.image)
    return db, feats, scene


def _same(a, b):
    assert [(c.object_index, c.name, c.model_size) for c in a] == [(c.object_index, c.name, c.model_size) for c in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x.model_xy, y.model_xy)
        np.testing.assert_array_equal(x.scene_xy, y.scene_xy)
        np.testing.assert_allclose(x.ratio, y.ratio, rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("fginn", [False, True])
def test_candidates_equal_the_in_memory_matcher(catalogue, fginn):
    db, feats, _ = catalogue
    memory = DatabaseMatcher(db.objects(), "surf", exact=True, fginn=fginn)
    stored = StoredMatcher(ModelDB.open(db.path), "surf", fginn=fginn)
    assert stored.names == memory.names and len(stored) == len(memory)
    np.testing.assert_array_equal(stored.object_counts(), memory.object_counts())
    for among in ([5, 2, 0], [2], [6, 5, 4, 3, 2, 1, 0]):
        got = stored.candidates(feats, among=among)
        assert {c.name for c in got} >= {"c2", "c5"} & {memory.names[i] for i in among}
        _same(got, memory.candidates(feats, among=among))
    _same(stored.candidates(feats), memory.candidates(feats))
    assert stored.candidates(feats, among=[]) == []


def test_guided_matches_equal_the_in_memory_matcher(catalogue):
    db, feats, scene = catalogue
    memory = DatabaseMatcher(db.objects(), "surf", exact=True)
    stored = StoredMatcher(ModelDB.open(db.path), "surf")
    c = memory.candidates(feats, among=[5])[0]
    H = next(o.homography for o in scene.objects if o.name == "c5")
    _same([stored.guided(c, feats, H)], [memory.guided(c, feats, H)])
    g = stored.guided(c, feats, H, radius=6.0)
    assert len(g) > 20 and g.object_index == 5
    proj = cv2.perspectiveTransform(g.model_xy.reshape(-1, 1, 2).astype(np.float64), H).reshape(-1, 2)
    assert np.linalg.norm(proj - g.scene_xy, axis=1).max() <= 6.0 + 1e-3


def test_a_recognizer_with_retrieval_reads_only_what_it_matches(catalogue):
    """With retrieval and a saved index the recognizer opens no descriptor file of the database at
    construction, and finds the objects the frame shows."""
    db, _, scene = catalogue
    prepare_indexes(db, kinds=["surf"])
    fresh = ModelDB.open(db.path)
    rec = Recognizer(fresh, retrieval=True, prefilter=None, track=False)
    matcher = rec.matchers["surf"]
    assert isinstance(matcher, ShortlistMatcher) and isinstance(matcher.matcher, StoredMatcher)
    assert not fresh.store.mapped  # no shard array mapped (nor its sha256 checked) yet
    names = {d.name for d in rec.process(scene.image).detections}
    assert names == {"c2", "c5"}
    read = {"surf.keypoints.npy", "surf.descriptors.npy", "images.npy", "thumbs.npy"}  # thumbnails: appearance check
    assert {k[1] for k in fresh.store.mapped} == read
    assert not fresh.store.hashed  # the objects read were checked on their own rows, no file was hashed whole
