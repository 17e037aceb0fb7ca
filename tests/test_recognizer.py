"""The Recognizer wires the stages: every unit goes through the scheduler, the frame runs guarded."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from objrec import Recognizer
from objrec.data import sample_background, sample_objects
from objrec.realtime.scheduler import FakeClock
from objrec.realtime.smoothing import SmoothParams
from objrec.scenes import Distortion, compose_scene, place_homography


class TickClock(FakeClock):
    """Every reading costs 1 ms: a frame's work takes deterministic, nonzero time."""

    def now(self):
        self.t += 1.0
        return self.t


@pytest.fixture(scope="module")
def db(sample_db):
    return sample_db


@pytest.fixture(scope="module")
def scene():
    objs = sample_objects()
    return compose_scene(sample_background((640, 480)), objs, rng=1, frame_size=(640, 480), area_fraction=(0.1, 0.15))


def _placed(scene, d) -> bool:
    """The outline agrees with the ground truth within 5% of the object's diagonal in the frame (the
    scene occludes some objects in part, which costs a few pixels)."""
    truth = scene.truth(d.name).corners
    diagonal = float(np.linalg.norm(truth.max(axis=0) - truth.min(axis=0)))
    return float(np.abs(d.corners - truth).max()) < 0.05 * diagonal


def test_tight_budget_verifies_only_the_mandatory_candidate_and_records_the_rest(db, scene):
    rec = Recognizer(db, budget_ms=8.0, clock=TickClock(), track=False)
    r = rec.process(scene.image)
    assert len(r.detections) == 1
    left = [s for s in r.skipped if s.unit == "verify"]
    assert left and all(s.reason == "budget" and s.subject in db.names for s in left)
    assert {"features_surf", "matching", "verification"} <= set(r.timings_ms)
    full = Recognizer(db, budget_ms=None, clock=FakeClock(), track=False).process(scene.image)
    assert sorted(d.name for d in full.detections) == sorted(db.names) and full.skipped == []
    assert all(_placed(scene, d) for d in full.detections)


def test_escalation_verifies_through_the_scheduler(db, scene):
    """Primary candidates cut to 6 matches are rejected as unsure; SIFT on their boxes finds the objects,
    each escalation and each of its verifications a scheduler unit."""
    rec = Recognizer(db, budget_ms=None, track=False)
    primary = rec.matchers["surf"]
    real = primary.candidates

    def weak(feats):
        return [dataclasses.replace(c, model_xy=c.model_xy[:6], scene_xy=c.scene_xy[:6]) for c in real(feats)]

    primary.candidates = weak
    r = rec.process(scene.image)
    assert {x.reason for x in rec.last_rejections} <= {"too_few_matches", "too_few_inliers"}
    units = [(u.unit, u.admitted) for u in rec.scheduler.records]
    assert ("escalate", True) in units
    first_escalation = units.index(("escalate", True))
    assert ("verify", True) in units[first_escalation:]
    assert sorted(d.name for d in r.detections) == sorted(db.names)
    assert all(_placed(scene, d) for d in r.detections)
    # Under a budget with no room left, escalation is recorded as skipped instead of running.
    tight = Recognizer(db, budget_ms=8.0, clock=TickClock(), track=False)
    tight.matchers["surf"].candidates = weak
    for _ in range(3):  # the cost model learns the escalation's cost
        t = tight.process(scene.image)
    assert any(s.unit == "escalate" and s.reason == "budget" for s in t.skipped)


def test_escalated_candidates_get_guided_matching(db, scene):
    """Primary candidates cut to 6 matches and SIFT's cut to 9 (fewer inliers than the minimum): guided
    matching with the SIFT features of the escalation's box recovers every object, where it belongs."""
    rec = Recognizer(db, budget_ms=None, track=False)

    def cut(matcher, n):
        real = matcher.candidates

        def few(feats, *args):
            return [
                dataclasses.replace(c, model_xy=c.model_xy[:n], scene_xy=c.scene_xy[:n]) for c in real(feats, *args)
            ]

        matcher.candidates = few

    cut(rec.matchers["surf"], 6)
    cut(rec.matchers["sift"], 9)
    r = rec.process(scene.image)
    units = [(u.unit, u.admitted) for u in rec.scheduler.records]
    first_escalation = units.index(("escalate", True))
    assert ("guided", True) in units[first_escalation:]
    assert sorted(d.name for d in r.detections) == sorted(db.names)
    assert all(_placed(scene, d) and d.inliers >= 20 for d in r.detections)


def test_frame_runs_blas_on_one_thread_and_restores_it(db):
    """BLAS's spinning workers would steal the cores from the next stage: one thread inside a frame only (for
    BLAS libraries with their own thread pool; one built on OpenMP shares FAISS's threads and is left alone)."""
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [
            i["num_threads"]
            for i in threadpool_info()
            if i["user_api"] == "blas" and i.get("threading_layer") != "openmp"
        ]

    rec = Recognizer(db, budget_ms=None, track=False)
    seen = []
    inner = rec.features.extract

    def spy(image, kind, plan):
        seen.append(blas_threads())
        return inner(image, kind, plan)

    rec.features.extract = spy
    before = blas_threads()
    rec.process(sample_background((320, 240)))
    assert seen and seen[0] and all(n == 1 for n in seen[0])
    assert blas_threads() == before


def test_found_objects_are_tracked_in_the_next_frames_and_not_without_tracking(db, scene):
    rec = Recognizer(db, budget_ms=None)
    first = rec.process(scene.image)
    assert sorted(d.name for d in first.detections) == sorted(db.names)
    assert {d.state for d in first.detections} == {"detected"}
    ids = {d.name: d.track_id for d in first.detections}
    assert None not in ids.values() and len(set(ids.values())) == 3
    for _ in range(2):
        r = rec.process(scene.image)
        assert {d.name: (d.state, d.track_id) for d in r.detections} == {n: ("tracked", i) for n, i in ids.items()}
        assert "track" in r.timings_ms and not r.lost
        for d in r.detections:  # the same frame again: the tracks stay on their anchors or come closer to the truth
            anchor = next(a for a in first.detections if a.name == d.name)
            err = [float(np.linalg.norm(x.corners - scene.truth(d.name).corners, axis=1).max()) for x in (d, anchor)]
            assert np.linalg.norm(d.corners - anchor.corners, axis=1).max() < 0.5 or err[0] < err[1]
            assert err[0] < max(err[1], 0.5)
    plain = Recognizer(db, budget_ms=None, track=False)
    for _ in range(2):
        r = plain.process(scene.image)
        assert {(d.state, d.track_id) for d in r.detections} == {("detected", None)}
        assert "track" not in r.timings_ms
    assert not plain.tracker.tracks and len(plain.tracker.windows(640, 480)) == 0


def test_result_is_json_friendly(db, scene):
    import json

    r = Recognizer(db, budget_ms=8.0, clock=TickClock(), track=False).process(scene.image)
    j = json.loads(json.dumps(r.to_json()))
    keys = {
        "detections",
        "latency_ms",
        "deadline_met",
        "timings_ms",
        "skipped",
        "prefilter_boxes",
        "prefilter_rejected",
        "lost",
    }
    assert set(j) == keys
    assert j["prefilter_boxes"] is None and j["prefilter_rejected"] is None  # no prefilter for this database
    assert all(set(s) == {"unit", "reason", "subject", "predicted_ms"} for s in j["skipped"])


@pytest.mark.gpu
def test_gpu_frame_is_uploaded_once_and_features_stay_on_the_device(db, scene, gpu_device):
    """On the GPU a frame goes to the device once; keypoints and descriptors never come back, only compact
    results (matched coordinates, counts)."""
    from objrec.backend import TransferCounter

    rec = Recognizer(db, budget_ms=None, backend="gpu", track=False, prefilter=None)
    rec.process(scene.image)  # compilation and buffers
    h, w = scene.image.shape[:2]
    with TransferCounter(all_threads=True) as tc:
        r = rec.process(scene.image)
    assert sorted(d.name for d in r.detections) == sorted(db.names)
    big_uploads = [t for t in tc.transfers if t.direction == "h2d" and t.nbytes >= 1024]
    assert [t.nbytes for t in big_uploads] == [h * w]  # the gray frame, once
    downloads = [t for t in tc.transfers if t.direction == "d2h"]
    assert not any(len(t.shape) == 2 and t.shape[1] in (64, 128) for t in downloads)  # no descriptor arrays
    matched = sum(int(d.inliers) for d in r.detections)
    assert tc.download_bytes < 64 * 1024 + 8 * 2 * 4 * matched  # match coordinates and scalars only
    print(f"per frame: {tc.uploads} uploads ({tc.upload_bytes} B), {tc.downloads} downloads ({tc.download_bytes} B)")


def _corner_jitter(corners: np.ndarray) -> float:
    """Mean distance each corner moves from one frame to the next (corners: frames, 4, 2): the shake a still
    scene's outline shows."""
    return float(np.linalg.norm(np.diff(corners, axis=0), axis=-1).mean())


def test_smoothing_steadies_the_corners_of_a_still_scene_with_sensor_noise(db):
    """Three objects side by side on a desk, the camera still, sensor noise of sigma 3 drawn anew in each
    frame at 30 fps (a fake clock): smoothed corners move from frame to frame less than half as much as each
    frame's own, which the smoothing recognizer keeps as ``raw_corners``. (Their spread about the mean is not
    the measure: the smoothing starts from the first frame's corners, so an offset of that frame stays in it
    while it converges, and where the raw corners hold within hundredths of a pixel that offset is most of the
    spread.)"""
    objs = sample_objects()
    places = {
        "pagoda": ((115, 250), -8.0, (0.1, 0.0)),
        "dahlia": ((320, 230), 5.0, (0.0, 0.1)),
        "cover": ((530, 245), 0.0, (-0.1, 0.05)),
    }
    truth = {
        n: place_homography((objs[n].shape[1], objs[n].shape[0]), c, 170.0 / objs[n].shape[1], r, t)
        for n, (c, r, t) in places.items()
    }
    frames = [
        compose_scene(
            sample_background((640, 480)), objs, rng=100 + k, frame_size=(640, 480),
            homographies=truth, distortion=Distortion(noise_sigma=3.0),
        ).image
        for k in range(12)
    ]  # fmt: skip
    clock = FakeClock()
    raw_rec, smooth_rec = Recognizer(db, clock=clock), Recognizer(db, clock=clock, smooth=True)
    raw, smooth = [], []
    for k, frame in enumerate(frames):
        clock.t = k * 1000.0 / 30.0
        raw.append({d.name: d for d in raw_rec.process(frame).detections})
        smooth.append({d.name: d for d in smooth_rec.process(frame).detections})
    for name in db.names:
        assert all(name in r and name in s for r, s in zip(raw, smooth, strict=True))
        assert all(r[name].raw_corners is None for r in raw)
        np.testing.assert_allclose([s[name].raw_corners for s in smooth], [r[name].corners for r in raw])
        jitter_raw = _corner_jitter(np.array([r[name].corners for r in raw]))
        jitter_smooth = _corner_jitter(np.array([s[name].corners for s in smooth]))
        assert jitter_smooth < 0.5 * jitter_raw, (name, jitter_smooth, jitter_raw)


def test_smoothing_time_steps_come_from_t0_and_nothing_is_kept_without_tracking(db):
    assert Recognizer(db).smoother is None
    assert Recognizer(db, smooth=SmoothParams(beta=0.1), track=False).smoother is None
    with pytest.raises(ValueError, match="smooth"):
        Recognizer(db, smooth="yes")
    rec = Recognizer(db, clock=FakeClock(5.0), smooth=True)
    seen = []
    rec.smoother.update = lambda detections, t_ms: seen.append(t_ms) or detections
    frame = sample_background((320, 240))
    rec.process(frame, t0=1.5)
    rec.process(frame)
    assert seen == [1.5, 5.0]


def test_warm_up_and_reset_leave_no_smoothed_corners(db, scene):
    rec = Recognizer(db, smooth=True)
    rec.warmup((240, 320), repeats=1)
    assert not rec.smoother.filters
    rec.process(scene.image)
    assert {name for name, _ in rec.smoother.filters} == set(db.names)
    rec.reset()
    assert not rec.smoother.filters


def test_two_copies_of_one_object_become_two_tracks_as_the_first_is_masked(db):
    """Two prints of one cover side by side: the first frame finds one copy (one detection per object and
    frame); its outline is cut out of the next frames' search, which finds the other copy. Each track sits on
    its own copy's ground-truth outline."""
    import cv2

    from objrec.geometry import map_points, model_corners

    cover = sample_objects()["cover"]
    h, w = cover.shape[:2]
    frame = sample_background((640, 480), seed=5).copy()
    truths = []
    for cx in (170, 470):
        s = 0.42 * 480 / h
        A = cv2.getRotationMatrix2D((w / 2, h / 2), 0.0, s)
        A[:, 2] += (cx - w / 2, 240 - h / 2)
        Hm = np.vstack([A, [0, 0, 1]])
        warped = cv2.warpPerspective(cover, Hm, (640, 480))
        inside = cv2.warpPerspective(np.full((h, w), 255, np.uint8), Hm, (640, 480)) > 0
        frame[inside] = warped[inside]
        truths.append(map_points(Hm, model_corners(w, h)))
    rec = Recognizer(db, budget_ms=None)
    seen = {}
    for _ in range(4):
        for d in rec.process(frame).detections:
            if d.name == "cover":
                seen[d.track_id] = d.corners
    assert len(seen) == 2, f"tracks of the cover: {sorted(seen)}"
    for q in seen.values():
        assert min(float(np.abs(q - t).max()) for t in truths) < 3.0
    a, b = seen.values()
    assert float(np.abs(a - b).max()) > 100.0  # two places, not one copy twice
    assert len([t for t in rec.tracker.tracks if t.name == "cover"]) == 2


def test_under_a_budget_a_new_track_is_reported_once_a_full_quality_look_agrees():
    """A new track's detection waits while the track is roughly anchored and never realigned; it is reported
    once a realignment succeeded or a confirmation agreed, and from then on whatever happens; a detection
    without a track, and every detection without a budget, is reported at once."""
    from types import SimpleNamespace

    from objrec.realtime.tracker import Tracker
    from objrec.recognizer import reportable
    from objrec.types import Detection

    def det(tid):
        q = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float64)
        return Detection("cover", 1.0, 20, np.eye(3), q, track_id=tid)

    new = SimpleNamespace(track_id=1, rough=True, aligned=-1, shown=False)
    confirmed = SimpleNamespace(track_id=2, rough=False, aligned=-1, shown=False)
    tracker = SimpleNamespace(tracks=[new, confirmed], mark_shown=Tracker.mark_shown)
    found = [det(1), det(2), det(None)]
    assert [d.track_id for d in reportable(tracker, found, 33.0)] == [2, None]
    assert [d.track_id for d in reportable(tracker, found, None)] == [1, 2, None]
    new.aligned = 7  # realigned in frame 7
    assert [d.track_id for d in reportable(tracker, found, 33.0)] == [1, 2, None]
    new.aligned = -1  # re-anchored later on a rough detection: once reported, it stays reported
    assert [d.track_id for d in reportable(tracker, found, 33.0)] == [1, 2, None]


def test_without_a_budget_a_photo_keeps_what_only_the_escalation_finds_with_tracking_on(shared_data, tmp_path):
    """A real phone photo (SMVS ``E63_015``, 640 px) of a cover that SURF alone does not find and the SIFT
    escalation does: with the recognizer's defaults (tracking on, as ``objrec detect`` runs) the single photo is
    reported as without tracking, at the same corners. Its track starts confirmed by the full-quality search
    that found it, so no same-frame confirmation with the primary detector alone drops it; the next frame of a
    still camera still shows it."""
    import cv2

    from objrec import ModelDB

    folder = shared_data / "smvs_dvd"
    db = ModelDB.create(tmp_path / "db")
    db.enroll("015", str(folder / "reference" / "015.jpg"))
    img = cv2.imread(str(folder / "queries" / "E63_015.jpg"))
    s = 640 / max(img.shape[:2])
    img = cv2.resize(img, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
    assert not Recognizer(db, detectors=["surf"], track=False).process(img).detections  # only SIFT finds it
    (plain,) = Recognizer(db, track=False).process(img).detections
    rec = Recognizer(db)
    (d,) = rec.process(img).detections
    assert d.name == plain.name == "015"
    assert float(np.abs(np.asarray(d.corners) - np.asarray(plain.corners)).max()) < 1.0
    assert [t.name for t in rec.tracker.tracks if not t.rough] == ["015"]
    assert [x.name for x in rec.process(img).detections] == ["015"]


def test_a_frame_whose_track_units_cannot_fit_searches_instead_of_waiting(db, scene):
    """Under a budget, an odd frame with a track due for confirmation is given to the tracks (realignment and
    confirmation first, the sweep only in what they leave). Where the cost model predicts that neither fits
    the frame, the frame runs the primary search's plan as any other frame does, instead of idling."""

    def second_frame(unit_ms):
        rec = Recognizer(db, budget_ms=33.0, clock=FakeClock())
        first = rec.process(scene.image)
        assert first.detections and rec.tracker.confirmation_due(1) is not None
        for stage in ("realign", "confirm"):
            for size in (1e3, 1e4, 1e5):
                rec.scheduler.cost.observe(stage, size, unit_ms)
        return rec.process(scene.image)

    cheap, dear = second_frame(1.0), second_frame(1000.0)
    assert "plan" not in cheap.timings_ms  # the frame went to the tracks
    assert "plan" in dear.timings_ms  # nothing for the tracks fits: the frame searched


def test_each_extra_part_of_the_sweep_a_frame_searches_is_recorded_in_its_result(monkeypatch):
    """The time a frame's search leaves goes to the sweep's next parts (``PrimarySearch.more_tiles``): each part
    searched is recorded beside the frame's own plan (its sweep record), so ``--stats`` and
    ``FrameResult.skipped`` show every part of the frame that was searched."""
    from types import SimpleNamespace

    from objrec.realtime.primary import PrimarySearch
    from objrec.realtime.scheduler import CostModel, FrameScheduler
    from objrec.types import Regions, SearchPlan, SkipRecord

    subjects = ["tile (0, 0, 40, 40) of 4x3", "whole frame at 0.5"]
    plans = [
        SearchPlan(Regions.from_boxes([[0, 0, 40, 40]]), 1.0, None, 1600, 1, (SkipRecord("region", "sweep", s),))
        for s in subjects
    ]
    searched = []
    search = PrimarySearch(
        "surf",
        features=None,
        matcher=None,
        planner=SimpleNamespace(next_tile=lambda *a: plans.pop(0) if plans else None),
        verifier=SimpleNamespace(run=lambda *a, **k: None),
        guided=SimpleNamespace(run=lambda *a, **k: None),
        tracker=SimpleNamespace(prioritise=lambda c: c),
    )
    monkeypatch.setattr(search, "extract", lambda state, sched, plan: searched.append(plan))
    monkeypatch.setattr(search, "match", lambda feats, sched: [])
    state = SimpleNamespace(shape=(64, 64), explained=([], []), verdicts=None)
    sched = FrameScheduler(33.0, CostModel(), FakeClock())
    sched.cost.observe("plan_tile", 1.0, 0.1)  # planning a part is known to fit
    sched.start()
    search.more_tiles(state, sched, Regions.full(64, 64), 1)
    assert len(searched) == 2
    assert [r.subject for r in sched.skipped if r.reason == "sweep"] == subjects


def test_an_object_whose_hints_keep_failing_is_not_hinted_again_until_a_frame_leaves_it_none():
    """Hints searched in vain HINT_TRIES frames in a row stop; a frame without a hint for the object, or the
    object found, starts its count again; other objects' hints are not held back."""
    from types import SimpleNamespace

    from objrec.realtime.frame import StreamState
    from objrec.recognizer import HINT_TRIES

    stream = StreamState()
    box, other = (10, 10, 150, 150), (300, 200, 420, 330)

    def frame(hints, shown=()):
        stream.keep_hints(hints, [SimpleNamespace(name=n) for n in shown])
        return [k for k, _ in stream.hints]

    assert frame([("cover#1", box)]) == ["cover#1"]  # first seen: searched next frame
    for _ in range(HINT_TRIES - 1):
        assert frame([("cover", box)]) == ["cover"]  # searched in vain, hinted again
    assert frame([("cover", box), ("other", other)]) == ["other"]  # the last try failed too: held back
    assert frame([("cover", box), ("other", other)]) == ["other"]  # held back while it keeps leaving hints
    assert frame([("other", other)]) == ["other"]  # a frame without a hint for it
    assert frame([("cover", box)]) == ["cover"]  # starts again
    assert frame([("cover", box)]) == ["cover"] and stream.hint_tries == {"cover": 1}
    assert frame([], shown=["cover"]) == [] and stream.hint_tries == {}  # found (open hints leave it out): no count
