"""A catalogue's matcher that reads shortlisted objects from the database gives what the in-memory matcher
over every object gives: the same candidates, matches, ratios and guided matches."""

from __future__ import annotations

import os

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


def test_read_ahead_advises_the_objects_own_rows(catalogue, monkeypatch):
    """``ModelDB.read_ahead`` asks the kernel for exactly the byte ranges of the object's rows: the bytes at each
    advised range of each file are the object's stored image bytes, keypoint rows and descriptor rows."""
    db, _, _ = catalogue
    fresh = ModelDB.open(db.path)
    advised = []

    def advise(fd, offset, length, advice):
        assert advice == os.POSIX_FADV_WILLNEED
        advised.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length))

    if not hasattr(os, "posix_fadvise") or not os.path.isdir("/proc/self/fd"):
        pytest.skip("needs posix_fadvise and /proc")
    monkeypatch.setattr(os, "posix_fadvise", advise)
    fresh.read_ahead(["c4"])
    got = {}
    for path, offset, length in advised:
        with open(path, "rb") as f:
            f.seek(offset)
            got[os.path.basename(path)] = f.read(length)
    shard, row = fresh.store.locate("c4")
    a, b = (int(x) for x in shard.offsets["image"][row : row + 2])
    lo, hi = (int(x) for x in shard.offsets["surf"][row : row + 2])
    arr = lambda name: np.load(os.path.join(db.path, "shards", shard.id, name), allow_pickle=False)  # noqa: E731
    assert got == {
        "images.npy": arr("images.npy")[a:b].tobytes(),
        "surf.keypoints.npy": arr("surf.keypoints.npy")[lo:hi].tobytes(),
        "surf.descriptors.npy": arr("surf.descriptors.npy")[lo:hi].tobytes(),
    }
    with pytest.raises(KeyError, match="unknown object 'nope'"):
        fresh.read_ahead(["nope"])


def test_the_matcher_knows_what_it_has_read_and_read_ahead(catalogue, monkeypatch):
    db, feats, _ = catalogue
    stored = StoredMatcher(ModelDB.open(db.path), "surf")
    asked = []
    monkeypatch.setattr(stored.db, "read_ahead", lambda names: asked.append(list(names)))
    assert stored.unread([3, 1, 4]) == [3, 1, 4]
    stored.read([1])
    assert stored.unread([3, 1, 4]) == [3, 4]
    stored.read_ahead([3])
    stored.settle()
    assert asked == [["c3"]] and stored.read_ahead_before(3) and not stored.read_ahead_before(4)
    stored.candidates(feats, among=[3, 4])  # a match reads what it matches
    assert stored.unread([3, 1, 4]) == [] and not stored.read_ahead_before(3)


class _Shortlisted:
    """A matcher whose objects are unread until read, each read taking ``ms`` on ``clock``; records what it
    was asked."""

    def __init__(self, clock=None, ms=0.0, ahead=()):
        self.read_now, self.ahead_asked, self.ahead = [], [], set(ahead)
        self.clock, self.ms = clock, ms

    def unread(self, objects):
        return [int(i) for i in objects if int(i) not in self.read_now]

    def read(self, objects):
        self.read_now += list(objects)
        if self.clock is not None:
            self.clock.advance(self.ms * len(objects))

    def read_ahead(self, objects):
        self.ahead_asked += list(objects)

    def read_ahead_before(self, i):
        return i in self.ahead


def test_reads_that_do_not_fit_are_read_ahead_and_left_to_a_later_frame():
    from objrec.realtime.scheduler import CostModel, FakeClock, FrameScheduler
    from objrec.recognizer import read_shortlist

    shortlist = np.array([7, 2, 5])
    # No budget: everything is read and matched.
    m = _Shortlisted()
    sched = FrameScheduler(None, CostModel(), FakeClock())
    sched.start()
    assert read_shortlist(m, shortlist, sched).tolist() == [7, 2, 5] and m.read_now == [7, 2, 5]
    # A budget with room for one read from the disk: the best object is read, the others are read ahead and
    # left out of this frame's match.
    clock = FakeClock()
    sched = FrameScheduler(33.0, CostModel(prior_ms={"read": 12.0, "read_ahead": 1.0}), clock, safety_ms=2.0)
    sched.start()
    clock.advance(10.0)
    m = _Shortlisted(clock, 12.0)
    assert read_shortlist(m, shortlist, sched).tolist() == [7] and m.read_now == [7] and m.ahead_asked == [2, 5]
    # Once read ahead, an object's read is predicted as a read from memory, and fits.
    m2 = _Shortlisted(clock, 1.0, ahead={2, 5})
    m2.read_now = [7]
    sched.start()
    clock.advance(25.0)
    assert read_shortlist(m2, shortlist, sched).tolist() == [7, 2, 5] and m2.read_now == [7, 2, 5]
    assert [r.unit for r in sched.records] == ["read", "read"]
