"""The escalation: the secondary detector searches the unsure region only, at a resolution that fits the time
left, as a unit whose cost the scheduler predicts and that is skipped, with a record, when it does not fit."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.features.extract import FrameImage
from objrec.realtime.frame import FrameState
from objrec.realtime.planner import ESCALATION_PIXELS, HINT_MATCHING, SearchPlanner, plan_work
from objrec.realtime.scheduler import RELEARN_AFTER, CostModel, FakeClock, FrameScheduler
from objrec.realtime.searches import SecondLooks
from objrec.realtime.tracker import Tracker
from objrec.types import Candidate, Detection, Features, Rejection, SearchPlan, SkipRecord


class _Stage:
    """A feature stage that records the plans it is given and finds nothing."""

    def __init__(self):
        self.plans = []

    def extract(self, image, kind, plan):
        self.plans.append((kind, plan))
        return Features.empty(128, kind)


class _Nothing:
    def candidates(self, feats, among=None):
        return []

    def run(self, *args, **kwargs):
        return None


def _frame_with_unsure_candidate(rng):
    """A 640x480 frame whose one candidate was rejected for too few inliers, its matches around (300, 200)."""
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 33.0)
    xy = (rng.normal(0, 1, (40, 2)) * [60, 40] + [300, 200]).astype(np.float32)
    c = Candidate(3, xy.copy(), xy, np.full(40, 0.5, np.float32), "cover", (300, 400))
    state.verdicts.add(c, Rejection("cover", "too_few_inliers", 40))
    return state, xy


def _looks(stage):
    nothing = _Nothing()
    planner = SearchPlanner("surf")
    return SecondLooks(stage, {"surf": nothing, "sift": nothing}, nothing, nothing, planner, ["surf", "sift"], [])


def _learned(budget_ms, room_ms, stage, ms_at, sizes):
    """A scheduler with ``room_ms`` left of a ``budget_ms`` frame whose cost model learned ``stage`` exactly on the
    line ``ms_at(pixels)`` at ``sizes``."""
    clock = FakeClock()
    s = FrameScheduler(budget_ms, CostModel(min_samples=3), clock, safety_ms=0.0)
    for px in sizes:
        s.cost.observe(stage, px, ms_at(px))
    s.start()
    clock.advance(budget_ms - room_ms)
    return s


def _sched(room_ms):
    """A scheduler with ``room_ms`` left of a 33 ms frame; the escalation costs 1 ms + 0.2 ms per 1000 pixels."""
    return _learned(33.0, room_ms, "escalate_sift", lambda px: 1.0 + 2e-4 * px, (20_000, 60_000, 120_000))


def _expected_box(xy, w=640, h=480):
    """The middle 90% of the matches grown by half its size per side (at least 32 px), clipped: computed here
    with NumPy as the reference for the unsure region."""
    lo, hi = np.percentile(xy, 5, axis=0), np.percentile(xy, 95, axis=0)
    g = np.maximum((hi - lo) * 0.5, 32.0)
    x0, y0 = np.floor(np.maximum(lo - g, 0)).astype(int)
    x1, y1 = np.ceil(np.minimum(hi + g, [w, h])).astype(int)
    return [int(x0), int(y0), int(x1), int(y1)]


def test_escalation_searches_the_unsure_region_at_a_predicted_cost_that_fits():
    state, xy = _frame_with_unsure_candidate(np.random.default_rng(0))
    stage = _Stage()
    sched = _sched(room_ms=10.0)
    _looks(stage).escalate(state, sched)
    [(kind, plan)] = stage.plans
    box = plan.regions.boxes[0].tolist()
    assert kind == "sift" and np.abs(np.array(box) - _expected_box(xy)).max() <= 1
    px = (box[2] - box[0]) * (box[3] - box[1])
    assert px > 45_000  # too large for 10 ms at full resolution (1 + 0.2 * 45 = 10 ms)...
    assert plan.scale < 1.0 and px * plan.scale**2 >= ESCALATION_PIXELS  # ...so at a lower one, above the floor
    [unit] = [u for u in sched.records if u.unit == "escalate"]
    assert unit.admitted and unit.subject == "sift:0"
    assert unit.predicted_ms == pytest.approx(1.0 + 2e-4 * plan_work(plan), rel=1e-5)  # the line it learned
    assert unit.predicted_ms <= 10.0
    assert any(r.unit == "full_resolution" and r.reason == "budget" for r in sched.skipped)


def test_escalation_that_does_not_fit_is_skipped_with_a_record():
    state, _ = _frame_with_unsure_candidate(np.random.default_rng(0))
    stage = _Stage()
    sched = _sched(room_ms=4.0)  # the floor's 25,000 pixels cost 6 ms
    _looks(stage).escalate(state, sched)
    assert stage.plans == []
    [skip] = [r for r in sched.skipped if r.unit == "escalate"]
    assert isinstance(skip, SkipRecord) and skip.reason == "budget" and skip.subject == "sift:0"
    assert skip.predicted_ms == pytest.approx(1.0 + 2e-4 * ESCALATION_PIXELS, rel=1e-3) and skip.predicted_ms > 4.0


def test_escalation_without_a_budget_searches_the_box_at_full_resolution():
    state, xy = _frame_with_unsure_candidate(np.random.default_rng(1))
    state.budget_ms = None
    stage = _Stage()
    sched = FrameScheduler(None, CostModel(), FakeClock())
    sched.start()
    _looks(stage).escalate(state, sched)
    [(_, plan)] = stage.plans
    assert plan.scale == 1.0 and np.abs(plan.regions.boxes[0] - _expected_box(xy)).max() <= 1


class _BoxStage:
    """A feature stage that records the boxes a confirmation searches and finds nothing."""

    def __init__(self):
        self.boxes = []

    def extract_box(self, image, kind, box, scale):
        self.boxes.append(box)
        return Features.empty(64, kind)


class _OneTrack:
    """A tracker with one track due for confirmation; records postponements."""

    def __init__(self):
        self.track = type("T", (), {})()
        self.track.name, self.track.rough = "cover", False
        self.track.corners = np.array([[200, 150], [350, 150], [350, 330], [200, 330]], np.float64)
        self.postponed = 0

    def confirmation(self, frame):
        return self.track

    def postpone(self, t):
        assert t is self.track
        self.postponed += 1


def _confirm_sched():
    """A 33 ms scheduler whose confirmation usually costs 8 ms, once 30 ms."""
    clock = FakeClock()
    s = FrameScheduler(33.0, CostModel(min_samples=3), clock, safety_ms=0.0)
    for ms in (8.0, 8.2, 7.8, 8.1, 7.9, 30.0):
        s.cost.observe("confirm", 25_000, ms)
    return s, clock


def test_a_confirmation_left_out_for_the_budget_runs_again_on_its_typical_time():
    """One slow confirmation lifts the unit's high quantile above the room a frame leaves: it is left out (the
    track keeps its place in line). After RELEARN_AFTER frames in a row have left it out, the next frame
    where its typical time fits runs it, so the cost model can unlearn the slow run."""
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 33.0)
    stage, tracker = _BoxStage(), _OneTrack()
    looks = SecondLooks(stage, {"surf": _Nothing()}, _Nothing(), _Nothing(), SearchPlanner("surf"), ["surf"], ["cover"])
    sched, clock = _confirm_sched()
    for frame in range(RELEARN_AFTER + 1):
        sched.start()
        clock.advance(33.0 - 15.0)
        assert sched.cost.expected("confirm", 25_000) <= 15.0 < sched.cost.predict("confirm", 25_000)
        looks.confirm(state, sched, tracker, frame)
        ran = frame == RELEARN_AFTER
        assert len(stage.boxes) == int(ran)
        assert [r.unit for r in sched.skipped if r.unit == "confirm"] == ([] if ran else ["confirm"])
    assert tracker.postponed == RELEARN_AFTER


class _DueTracker(_OneTrack):
    """One track due for both realignment and confirmation (for :meth:`SecondLooks.turn_reserve`)."""

    def __init__(self):
        super().__init__()
        self.track.realigned = -1
        self.tracks = [self.track]
        self.enabled, self.templates = True, {}
        self.params = type("P", (), {"realign_every_ms": 170.0})()

    def frames(self, ms):
        return round(ms * 30 / 1000)

    def confirmation_due(self, frame):
        return self.track


@pytest.mark.parametrize("room, held", [(30.0, "both"), (7.0, "realign"), (3.0, "none")])
def test_a_frame_given_to_the_tracks_keeps_what_their_units_are_predicted_to_take(room, held):
    """The realignment (5 ms for this outline) and the confirmation (8 ms) are kept their predicted times where
    each fits the time left after the one before, as the scheduler will admit them; nothing is kept for a unit
    that will not run."""
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 33.0)
    tracker = _DueTracker()
    looks = SecondLooks(_BoxStage(), {"surf": _Nothing()}, _Nothing(), _Nothing(), SearchPlanner("surf"), ["surf"], [])
    clock = FakeClock()
    sched = FrameScheduler(33.0, CostModel(min_samples=3, quantile=0.5), clock, safety_ms=0.0)
    area = 150.0 * 180.0  # the outline of _OneTrack
    for _ in range(3):
        sched.cost.observe("realign", area, 5.0)
        sched.cost.observe("confirm", 25_000, 8.0)
    sched.start()
    clock.advance(33.0 - room)
    want = {"both": 13.0, "realign": 5.0, "none": 0.0}[held]
    assert looks.turn_reserve(state, sched, tracker, 10) == pytest.approx(want, abs=1e-6)


class _LostTracker:
    """Lost objects to look for; the tracks their re-acquisitions start (marked by the tracker's transition)."""

    mark_aligned = staticmethod(Tracker.mark_aligned)

    def __init__(self, names):
        ghost = {"model_size": (100, 100), "corners": np.float32([[0, 0], [9, 0], [9, 9], [0, 9]])}
        self.lost = [type("Ghost", (), {"name": n, **ghost})() for n in names]
        self.tracks = []

    def absorb(self, found, tracked, gray, frame, model_size):
        (d,) = found
        t = type("T", (), {"track_id": len(self.tracks) + 1, "aligned": -1, "realigned": -1, "name": d.name})()
        self.tracks.append(t)
        return [type("D", (), {"track_id": t.track_id, "name": d.name})()], []


@pytest.mark.parametrize("back", [{"a", "b", "c", "d", "e", "f", "g"}, set()])
def test_re_acquisition_goes_on_while_objects_are_found_and_stops_after_a_few_are_not(monkeypatch, back):
    """Seven lost objects, all back in view: all are looked for and found in one frame, and their tracks count
    as realigned in it (reported at once); none back (the view still blurred): the search stops after
    MAX_REALIGNS attempts."""
    import objrec.realtime.searches as searches

    names = ["a", "b", "c", "d", "e", "f", "g"]
    tried = []

    def fake(tracker, t, gray):
        tried.append(t.name)
        return type("Det", (), {"name": t.name})() if t.name in back else None

    monkeypatch.setattr(searches, "waiting", lambda tracker, frame, sought, shape: list(tracker.lost))
    monkeypatch.setattr(searches, "reacquire", fake)
    tracker = _LostTracker(names)
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), None)
    looks = SecondLooks(_BoxStage(), {"surf": _Nothing()}, _Nothing(), _Nothing(), SearchPlanner("surf"), ["surf"], [])
    tracked, lost, looked = looks.reacquire(state, FrameScheduler(None), tracker, 7, {})
    assert looked == tried and lost == []
    if back:
        assert tried == names and [d.name for d in tracked] == names
        assert all(t.aligned == t.realigned == 7 for t in tracker.tracks)
    else:
        assert tried == names[: searches.MAX_REALIGNS] and tracked == []


class _Matcher:
    """A matcher that records what each call matched against (``among``) and proposes one candidate per call."""

    def __init__(self, name):
        self.calls, self.name = [], name

    def candidates(self, feats, among=None):
        self.calls.append(None if among is None else list(among))
        xy = np.zeros((12, 2), np.float32)
        return [Candidate(0, xy, xy, np.full(12, 0.5, np.float32), self.name, (300, 400))]


class _Verifier:
    """Finds the candidates named in ``finds`` (a detection per candidate), rejects the others."""

    def __init__(self, finds):
        self.finds, self.seen = set(finds), []

    def run(self, candidates, verdicts, sched, first_mandatory):
        for c in candidates:
            self.seen.append(c.name)
            if c.name in self.finds:
                corners = np.array([[0, 0], [300, 0], [300, 400], [0, 400]], np.float64)
                verdicts.found[c.name] = Detection(c.name, 0.9, 20, np.eye(3), corners)


# Record keys of the database in its order: "cover" has two views, the others one.
_KEYS = ["poster", "cover", "cover#1", "other", "third"]


def _escalation(budget_ms, finds):
    """A frame whose unsure candidate is "cover" and whose primary search also proposed "other", a matcher for
    the secondary detector, and the escalation run with ``budget_ms`` (room for the box when there is one)."""
    state, _ = _frame_with_unsure_candidate(np.random.default_rng(0))
    state.budget_ms = budget_ms
    xy = np.zeros((3, 2), np.float32)
    state.candidates = [Candidate(3, xy, xy, np.full(3, 0.5, np.float32), "other", (300, 400))]
    sift, verifier = _Matcher("poster"), _Verifier(finds)
    looks = SecondLooks(_Stage(), {"surf": _Nothing(), "sift": sift}, verifier, _Nothing(), SearchPlanner("surf"),
                        ["surf", "sift"], _KEYS)  # fmt: skip
    if budget_ms is None:
        sched = FrameScheduler(None, CostModel(), FakeClock())
        sched.start()
    else:
        sched = _sched(room_ms=30.0)
    looks.escalate(state, sched)
    return sift, verifier, sched


def test_escalation_matches_the_box_against_the_frames_suspects_without_retrieval():
    """Every view of the unsure object first, then the primary search's other candidates; under a budget that
    is all, found or not."""
    sift, verifier, sched = _escalation(33.0, finds=())
    assert sift.calls == [[1, 2, 3]]  # cover, cover#1, other: not poster or third
    assert verifier.seen == ["poster"]
    assert [u.unit for u in sched.records if u.admitted] == ["escalate"]


def test_escalation_without_a_budget_lets_the_matcher_choose_when_the_suspects_are_not_found():
    sift, verifier, sched = _escalation(None, finds=())
    assert sift.calls == [[1, 2, 3], None]  # the suspects, then the matcher's own choice (its retrieval)
    assert verifier.seen == ["poster", "poster"]
    assert sched.cost.samples("escalate_sift") == 1 and sched.cost.samples("escalate_sift_retrieved") == 1
    assert set(sched.timings) == {"escalate_sift"}  # one entry in the frame's timings, both matchings in it


def test_escalation_without_a_budget_stops_at_the_suspects_when_they_are_found():
    sift, verifier, _ = _escalation(None, finds=("poster",))
    assert sift.calls == [[1, 2, 3]]


def _hint_sched(room_ms):
    """A 16 ms scheduler with ``room_ms`` left; the primary extraction costs 0.5 ms + 0.1 ms per 1000 pixels."""
    return _learned(16.0, room_ms, "features_surf", lambda px: 0.5 + 1e-4 * px, (10_000, 40_000, 80_000))


def _hinted(room_ms, tracked=(), finds=()):
    """Two hints ("cover" and "other") searched with ``room_ms`` left: the plans the primary detector was given,
    what each was matched against, what was verified, and the scheduler."""
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 16.0)
    state.verdicts.tracked = [(n, np.zeros((4, 2))) for n in tracked]
    stage, surf, verifier = _Stage(), _Matcher("poster"), _Verifier(finds)
    looks = SecondLooks(stage, {"surf": surf, "sift": _Nothing()}, verifier, _Nothing(), SearchPlanner("surf"),
                        ["surf", "sift"], _KEYS)  # fmt: skip
    sched = _hint_sched(room_ms)
    looks.hinted(state, sched, [("cover#1", (100, 50, 260, 230)), ("other", (400, 300, 560, 470))])
    return stage.plans, surf.calls, verifier.seen, sched


def test_a_hint_is_searched_by_the_primary_detector_in_its_box_against_its_objects_views():
    plans, calls, seen, sched = _hinted(room_ms=12.0)
    # Each box a crop of its own, at full resolution: it fits the time left.
    assert [(k, p.crop, p.regions.boxes.tolist(), p.scale) for k, p in plans] == [
        ("surf", (100, 50, 260, 230), [[100, 50, 260, 230]], 1.0),
        ("surf", (400, 300, 560, 470), [[400, 300, 560, 470]], 1.0),
    ]
    assert calls == [[1, 2], [3]]  # every view of "cover" (the hint named its second), then "other" alone
    assert seen == ["poster", "poster"]  # its candidates verified
    units = [(u.unit, u.subject, u.admitted) for u in sched.records if u.unit == "hint"]
    assert units == [("hint", "cover", True), ("hint", "other", True)]
    assert sched.records[0].predicted_ms == pytest.approx(0.5 + 1e-4 * 160 * 180, rel=1e-3)  # the extraction's line
    assert set(sched.timings) == {"hint"}


def test_a_large_hint_box_is_searched_at_the_resolution_that_fits_down_to_the_escalations_floor():
    """As an escalation's box (escalation_plan): the largest resolution whose extraction fits the time left, but
    never below ESCALATION_PIXELS; a box that does not fit even there is left out with a record."""
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 16.0)
    stage = _Stage()
    looks = SecondLooks(stage, {"surf": _Matcher("poster"), "sift": _Nothing()}, _Verifier(()), _Nothing(),
                        SearchPlanner("surf"), ["surf", "sift"], _KEYS)  # fmt: skip
    box = (0, 0, 400, 250)  # 100,000 pixels: 10.5 ms at full resolution
    looks.hinted(state, _hint_sched(6.0), [("cover", box)])
    [(_, plan)] = stage.plans
    assert plan.crop == box and plan.scale < 1.0 and 0.5 + 1e-4 * plan_work(plan) <= 6.0
    assert plan_work(plan) >= ESCALATION_PIXELS
    sched = _hint_sched(2.0)  # the floor's 25,000 pixels cost 3 ms
    looks.hinted(state, sched, [("cover", box)])
    assert len(stage.plans) == 1 and [(r.unit, r.subject) for r in sched.skipped] == [("hint", "cover")]


def test_a_hint_that_does_not_fit_is_skipped_with_a_record_and_one_already_followed_is_not_searched():
    plans, _, _, sched = _hinted(room_ms=4.0, tracked=("other",))  # "cover" fits (3.4 ms); "other" is followed
    assert [p.crop for _, p in plans] == [(100, 50, 260, 230)]
    plans, _, _, sched = _hinted(room_ms=2.9)  # neither fits, even at the escalation's floor (3.0 ms)
    assert plans == [] and [(r.unit, r.reason, r.subject) for r in sched.skipped if r.unit == "hint"] == [
        ("hint", "budget", "cover"),
        ("hint", "budget", "other"),
    ]


def test_a_hint_keeps_the_time_its_matching_and_first_verification_take_after_its_extraction():
    """A hint whose extraction alone fits the time left, but not with the matching that must follow it, is left
    out (an extraction that takes all the time left makes the frame late by its matching); with room for both it
    is searched, and its matching is a mandatory unit of its own, learned apart from the extraction."""
    box = (100, 50, 260, 230)  # 28,800 pixels: 3.38 ms to extract at full resolution, 2.99 ms at the floor

    def run(room_ms):
        state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 16.0)
        stage, planner = _Stage(), SearchPlanner("surf")
        planner.observe(SearchPlan(None, pixels=100_000), 500)  # 0.005 keypoints per pixel: 144 in the box
        looks = SecondLooks(stage, {"surf": _Matcher("poster"), "sift": _Nothing()}, _Verifier(()), _Nothing(),
                            planner, ["surf", "sift"], _KEYS)  # fmt: skip
        sched = _hint_sched(room_ms)
        for n in (50, 150, 300):
            sched.cost.observe(HINT_MATCHING, n, 0.02 * n)  # 2.88 ms for the box's 144 keypoints
        looks.hinted(state, sched, [("cover", box)])
        return stage.plans, sched

    plans, sched = run(5.0)  # the floor's 2.99 ms fit the 5 ms left, not with the matching's 2.88 ms after them
    assert plans == [] and [(r.unit, r.subject) for r in sched.skipped] == [("hint", "cover")]
    plans, sched = run(7.0)
    assert [(p.crop, p.scale) for _, p in plans] == [(box, 1.0)]
    units = [(u.unit, u.mandatory) for u in sched.records if u.admitted and u.unit.startswith("hint")]
    assert units == [("hint", False), ("hint_matching", True)]
    assert sched.cost.samples(HINT_MATCHING) == 4 and sched.cost.samples("features_surf") == 4
    assert set(sched.timings) == {"hint"}


def test_an_object_found_by_one_hint_is_not_searched_again_by_another():
    state = FrameState(np.zeros((480, 640), np.uint8), FrameImage(np.zeros((480, 640), np.uint8)), 16.0)
    stage = _Stage()
    looks = SecondLooks(stage, {"surf": _Matcher("cover"), "sift": _Nothing()}, _Verifier({"cover"}), _Nothing(),
                        SearchPlanner("surf"), ["surf", "sift"], _KEYS)  # fmt: skip
    looks.hinted(state, _hint_sched(12.0), [("cover", (0, 0, 100, 100)), ("cover#1", (300, 300, 400, 400))])
    assert len(stage.plans) == 1 and list(state.verdicts.found) == ["cover"]
