"""The search plan: windows first, regions cut by the degrade level, whole frame when nearly covered,
sampling step, then resolution, coarsened only when the cost model says the mandatory part would not fit."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.boxes import regions_to_mask, union_area
from objrec.realtime.degrade import DegradeController
from objrec.realtime.planner import (
    COARSE_SAMPLING_COST,
    COARSE_SUBJECT,
    COARSE_SWEEP_SCALE,
    ESCALATION_PIXELS,
    FIRST_VERIFY_MATCHES,
    FIRST_VERIFY_SHARE,
    PLANNED_VOTERS,
    SearchPlanner,
    plan_work,
)
from objrec.realtime.scheduler import CostModel, FakeClock, FrameScheduler
from objrec.realtime.sweep import SWEEP_OVERLAP, TILES_PER_COARSE
from objrec.types import Regions, SearchPlan


def _sched(budget):
    s = FrameScheduler(budget, CostModel(min_samples=3), FakeClock(), safety_ms=0.0)
    s.start()
    return s


def _proposals(n):
    return Regions.from_boxes([[20 * i, 0, 20 * i + 40, 40] for i in range(n)], np.linspace(1, 0.1, n))


def test_windows_come_first_and_regions_are_cut_to_the_level():
    sched = _sched(33.0)
    degrade = DegradeController(33.0)
    degrade.level = 2  # two regions at this level
    windows = Regions.from_boxes([[300, 300, 400, 400]])
    plan = SearchPlanner("surf", max_regions=8, feature_cap=1500).plan(
        (480, 640), windows, _proposals(5), degrade, sched
    )
    assert plan.regions.boxes.tolist() == [[300, 300, 400, 400], [0, 0, 40, 40], [20, 0, 60, 40]]
    assert plan.pixels == 100 * 100 + 60 * 40
    assert plan.scale == 1.0 and plan.max_features == int(1500 * degrade.current.feature_share)
    assert plan.sample_step == 2  # above level 0, SURF samples coarsely
    assert sched.skipped == []  # the planner changes nothing of the scheduler: the plan carries its cuts
    assert [(r.unit, r.reason) for r in plan.skipped] == [
        ("degrade_level", "load"),
        ("region", "degrade"),
        ("fine_sampling", "degrade"),
    ]


def test_nearly_covered_frame_is_searched_whole_and_nothing_to_search_is_empty():
    sched = _sched(None)
    planner = SearchPlanner("surf")
    plan = planner.plan((480, 640), Regions.empty(), Regions.full(640, 480), DegradeController(None), sched)
    assert plan.regions is None and plan.pixels == 640 * 480 and plan.max_features is None
    assert planner.plan((480, 640), Regions.empty(), Regions.empty(), DegradeController(None), sched).empty


def _learned(sched):
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 1000.0)  # 1 ms per 1000 px at sample step 1


def test_sampling_then_resolution_coarsen_only_when_the_learned_cost_would_not_fit():
    planner = SearchPlanner("surf", feature_cap=1500)

    def plan(side):
        sched = _sched(33.0)
        _learned(sched)
        p = planner.plan(
            (480, 640), Regions.empty(), Regions.from_boxes([[0, 0, side, side]]), DegradeController(33.0), sched
        )
        return p, [(r.unit, r.reason) for r in p.skipped]

    small, skipped = plan(100)  # 10 ms: fits
    assert (small.sample_step, small.scale, skipped) == (1, 1.0, [])
    big, skipped = plan(200)  # 40 ms at step 1; at step 2, 0.55 of it: fits
    assert (big.sample_step, big.scale, skipped) == (2, 1.0, [("fine_sampling", "degrade")])
    huge, skipped = plan(300)  # 90 ms at step 1, 49.5 ms at step 2, 27.8 ms at step 2 and 0.75
    assert (huge.sample_step, huge.scale) == (2, 0.75) and ("full_resolution", "degrade") in skipped
    assert plan_work(huge) == pytest.approx(300 * 300 * 0.75**2 * COARSE_SAMPLING_COST)  # the pixels extracted from


def test_a_catalogue_plan_keeps_time_for_half_of_retrievals_voters_not_all():
    """Retrieval learned at 0.05 ms a voter (15 ms for all 300), extraction at 1 ms per 1000 px: a 150 px box
    (22.5 ms) keeps full detail with time for half the voters (7.5 ms) in a 33 ms frame, where time for all of
    them would have coarsened it; a larger box is coarsened still."""
    planner = SearchPlanner("surf", feature_cap=1500, retrieval_voters=300)

    def plan(side):
        sched = _sched(33.0)
        _learned(sched)
        for v in (100, 200, 300):
            sched.cost.observe("retrieval", v, 0.05 * v)
        box = Regions.from_boxes([[0, 0, side, side]])
        return planner.plan((480, 640), Regions.empty(), box, DegradeController(33.0), sched)

    assert 22.5 + 15.0 > 33.0 >= 22.5 + 15.0 * PLANNED_VOTERS
    fine = plan(150)
    assert (fine.sample_step, fine.scale) == (1, 1.0)
    coarse = plan(170)  # 28.9 ms at step 1: with 7.5 ms of retrieval it does not fit
    assert coarse.sample_step == 2


def _matching_learned(sched, ms_per_feature):
    for n in (200, 800, 1500):
        sched.cost.observe("matching", n, ms_per_feature * n)


def test_without_a_sweep_fewer_keypoints_are_described_before_resolution_drops():
    """Extraction at 1 ms per 1000 px (12.4 ms for a 150 px box at step 2), matching at 0.02 ms a keypoint: 1500
    keypoints (30 ms) do not fit a 33 ms frame even at 0.75, two thirds of them (20 ms) do at full resolution. The
    plan is sized at its cap, not at the keypoints frames had so far: a richer frame must fit too."""
    planner = SearchPlanner("surf", feature_cap=1500)
    planner.observe(SearchPlan(None, pixels=150 * 150, sample_step=2), 50)  # sparse frames so far
    sched = _sched(33.0)
    _learned(sched)
    _matching_learned(sched, 0.02)
    box = Regions.from_boxes([[0, 0, 150, 150]])
    plan = planner.plan((480, 640), Regions.empty(), box, DegradeController(33.0), sched)
    assert (plan.sample_step, plan.scale, plan.max_features) == (2, 1.0, 1000)
    assert ("keypoints", "budget", "1000 of 1500") in [(r.unit, r.reason, r.subject) for r in plan.skipped]
    extraction = sched.cost.expected("features_surf", plan_work(plan))
    assert extraction + sched.cost.expected("matching", plan.max_features) <= 33.0

    # A sweep keeps its cap (its tiles keep the detail instead).
    swept = SearchPlanner("surf", feature_cap=1500, sweep=True).plan(
        (480, 640), Regions.empty(), box, DegradeController(33.0), sched
    )
    assert swept.max_features == 1500

    # Where not even the least cap (100 keypoints, 25 ms) fits at full resolution, the resolution drops, and
    # with it (7 ms of extraction) the most keypoints that fit are described.
    slow = _sched(33.0)
    _learned(slow)
    _matching_learned(slow, 0.25)
    plan = planner.plan((480, 640), Regions.empty(), box, DegradeController(33.0), slow)
    assert (plan.scale, plan.max_features) == (0.75, 100)
    assert 12.375 + 25.0 > 33.0 >= 150 * 150 * 0.75**2 * COARSE_SAMPLING_COST / 1000 + 25.0
    assert ("keypoints", "budget", "100 of 1500") in [(r.unit, r.reason, r.subject) for r in plan.skipped]


def test_the_first_verification_is_sized_by_the_keypoints_the_plan_describes():
    """Verification learned at 0.2 ms a match: a plan describing at most 200 keypoints keeps time for a first
    candidate of a quarter of them (50 matches, 10 ms), not of 100 matches (20 ms), so a 150 px box (22.5 ms
    at step 1) keeps fine sampling in a 33 ms frame."""
    sched = _sched(33.0)
    _learned(sched)
    for m in (10, 50, 100):
        sched.cost.observe("verify", m, 0.2 * m)
    box = Regions.from_boxes([[0, 0, 150, 150]])
    plan = SearchPlanner("surf", feature_cap=200).plan((480, 640), Regions.empty(), box, DegradeController(33.0), sched)
    assert 22.5 + 0.2 * FIRST_VERIFY_SHARE * 200 <= 33.0 < 22.5 + 0.2 * FIRST_VERIFY_MATCHES
    assert (plan.sample_step, plan.scale, plan.max_features, plan.skipped) == (1, 1.0, 200, ())


def test_a_fixed_sample_step_is_kept_and_resolution_drops_instead():
    sched = _sched(33.0)
    _learned(sched)
    big = Regions.from_boxes([[0, 0, 200, 200]])  # 40 ms at full resolution, 22.5 ms at 0.75: fits
    plan = SearchPlanner("surf", feature_cap=1500, sample_step=1).plan(
        (480, 640), Regions.empty(), big, DegradeController(33.0), sched
    )
    assert plan.sample_step == 1 and plan.scale == 0.75
    assert ("full_resolution", "degrade") in [(r.unit, r.reason) for r in plan.skipped]
    no_budget = SearchPlanner("surf").plan((480, 640), Regions.empty(), big, DegradeController(None), _sched(None))
    assert no_budget.sample_step == 1 and no_budget.scale == 1.0


def _swept(planner, n, ms_per_px=1 / 2000.0, shape=(480, 640), tracked=()):
    """``n`` plans of ``planner`` in frames of ``shape``, each with a fresh 33 ms budget and an extraction cost of
    ``ms_per_px`` ms per pixel of work, each carried out (advanced) after it was made."""
    plans = []
    for _ in range(n):
        sched = _sched(33.0)
        for px in (1e4, 2e4, 4e4):
            sched.cost.observe("features_surf", px, px * ms_per_px)
        h, w = shape
        plan = planner.plan(shape, Regions.empty(), Regions.full(w, h), DegradeController(33.0), sched, tracked=tracked)
        plans.append(plan)
        planner.rounds.advance(plan)
    return plans


def test_sweep_takes_turns_between_full_resolution_tiles_and_a_coarse_pass_of_the_frame():
    """With the sweep on and a learned cost of 1 ms per 2000 px, a 33 ms budget fits neither the whole frame
    nor it at a usable resolution. The plans then take turns: tiles of a grid at full resolution and the fine
    step, each searched as a crop of its own, and after every TILES_PER_COARSE of them the whole frame at the
    coarse pass's resolution (for objects too large for a tile). Over one round the tiles cover the frame, and
    the next round repeats them in the same order."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    plans = _swept(planner, 8 * (TILES_PER_COARSE + 1))
    period = TILES_PER_COARSE + 1
    tiles = [p for i, p in enumerate(plans) if i % period != TILES_PER_COARSE]
    coarse = [p for i, p in enumerate(plans) if i % period == TILES_PER_COARSE]
    assert TILES_PER_COARSE >= 2 and len(coarse) == 8
    covered = np.zeros((480, 640), bool)
    boxes = []
    for plan in tiles:
        assert plan.scale == 1.0 and plan.sample_step == 1
        assert plan.pixels < 66_000  # predicted to fit
        assert [r.subject.startswith("tile") for r in plan.skipped if r.reason == "sweep"] == [True]
        ((x0, y0, x1, y1),) = plan.regions.boxes.tolist()
        assert plan.crop == (x0, y0, x1, y1)
        covered[y0:y1, x0:x1] = True
        boxes.append((x0, y0, x1, y1))
    assert covered.all()
    n = len(set(boxes))
    assert boxes[:n] == boxes[n : 2 * n] or 2 * n > len(boxes)  # the round repeats in the same order
    for plan in coarse:
        assert plan.regions is None and plan.scale == COARSE_SWEEP_SCALE and plan.crop is None
        subjects = [r.subject for r in plan.skipped if r.reason == "sweep"]
        assert subjects == [f"{COARSE_SUBJECT} at {COARSE_SWEEP_SCALE:g}"]


def test_a_tile_that_fits_only_at_a_low_resolution_is_searched_in_two_pieces_at_full_resolution():
    """At 1 ms per 800 px a 33 ms frame fits the 4x3 grid's smallest tiles (its corners) whole at full resolution
    (at the coarse step), but the larger ones only below the sweep's least resolution, where the small objects
    are lost. Those are searched instead in two pieces at full resolution, cut across the tile's longer side,
    one part of the sweep each, before the sweep moves on: the pieces (each searched as a crop of its own)
    together cover the tile, overlap by half the tiles' overlap, and every tile of the round is searched."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    plans = _swept(planner, 40, ms_per_px=1 / 800.0)
    tiles = []
    for plan in plans:
        (subject,) = [r.subject for r in plan.skipped if r.reason == "sweep"]
        if subject.startswith("tile"):
            assert plan.scale >= planner.min_sweep_scale
            tiles.append((subject, tuple(plan.regions.boxes[0].tolist()), plan.crop))
    pieces = [i for i, (subject, _, _) in enumerate(tiles) if subject.endswith("piece 1 of 2")]
    assert len(pieces) >= 4 and any(", piece" not in subject for subject, _, _ in tiles)
    for i in pieces:
        (first, a, crop_a), (second, b, crop_b) = tiles[i], tiles[i + 1]
        name = first.split(", piece")[0]
        assert second == f"{name}, piece 2 of 2" and crop_a == a and crop_b == b
        x0, y0, x1, y1 = (int(v) for v in name.split("(")[1].split(")")[0].split(", "))
        assert name.endswith("of 4x3")
        if x1 - x0 >= y1 - y0:  # cut across the longer side
            assert (a[0], a[1], a[3]) == (x0, y0, y1) and (b[1], b[2], b[3]) == (y0, x1, y1)
            overlap, tiles_overlap = a[2] - b[0], SWEEP_OVERLAP * 640
        else:
            assert (a[0], a[1], a[2]) == (x0, y0, x1) and (b[0], b[2], b[3]) == (x0, x1, y1)
            overlap, tiles_overlap = a[3] - b[1], SWEEP_OVERLAP * 480
        assert abs(overlap - tiles_overlap / 2) <= 1  # the pieces overlap by half the tiles' overlap
    names = {subject.split(", piece")[0] for subject, _, _ in tiles}
    assert len(names) == 12  # the whole round


def test_without_room_for_the_coarse_pass_the_sweep_searches_tiles_only():
    """At 1 ms per 500 px the coarse pass (the frame at half resolution, even at the coarse step) is predicted
    at over 40 ms: it never fits a 33 ms frame, and every plan searches the next tile."""
    plans = _swept(SearchPlanner("surf", feature_cap=1500, sweep=True), 8, ms_per_px=1 / 500.0)
    for plan in plans:
        assert [r.subject.startswith("tile") for r in plan.skipped if r.reason == "sweep"] == [True]
    assert len({tuple(p.regions.boxes[0].tolist()) for p in plans}) == 8  # one new tile per frame


def test_a_round_of_the_sweep_keeps_its_grid_when_the_time_left_changes():
    """The grid is chosen when a round starts; a frame with more time left in the middle of the round still
    searches that round's next tile (else the round would skip tiles and leave parts of the frame unseen)."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    first = _swept(planner, 2)[0]
    grid = [r.subject for r in first.skipped if r.reason == "sweep"][0].split(" of ")[1]
    roomy = _swept(planner, 2, ms_per_px=1 / 4000.0)[0]  # twice the room: a coarser grid would fit
    assert [r.subject for r in roomy.skipped if r.reason == "sweep"][0].endswith(f" of {grid}")
    assert roomy.regions.boxes.tolist() != first.regions.boxes.tolist()  # the round's next tile


def test_tracked_boxes_are_cut_out_of_the_proposals():
    sched = _sched(None)
    planner = SearchPlanner("surf")
    outline = np.array([[100, 100], [500, 100], [500, 400], [100, 400]], np.float64)
    plan = planner.plan(
        (480, 640), Regions.empty(), Regions.full(640, 480), DegradeController(None), sched, tracked=[outline]
    )
    assert plan.regions is not None
    mask = np.zeros((480, 640), bool)
    for x0, y0, x1, y1 in plan.regions.boxes.tolist():
        mask[y0:y1, x0:x1] = True
    assert not mask[100:400, 100:500].any() and mask.sum() == 640 * 480 - 400 * 300


def test_a_rotated_tracked_object_leaves_its_neighbours_in_the_search():
    """A tracked object turned by 40 degrees: the search leaves out pixels inside its outline only, so the
    corners of its bounding box, where a neighbouring object may lie, are still searched; most of the outline
    is left out."""
    outline = cv2.boxPoints(((320.0, 240.0), (300.0, 200.0), 40.0))
    planner = SearchPlanner("surf", whole_frame_fraction=1.0)  # boxes, however much of the frame they cover
    plan = planner.plan(
        (480, 640), Regions.empty(), Regions.full(640, 480), DegradeController(None), _sched(None), tracked=[outline]
    )
    searched = regions_to_mask(plan.regions.boxes, (480, 640))
    inside = np.zeros((480, 640), np.uint8)
    cv2.fillConvexPoly(inside, np.round(outline).astype(np.int32), 1)
    inside = inside.astype(bool)
    x0, y0 = np.floor(outline.min(axis=0)).astype(int)
    x1, y1 = np.ceil(outline.max(axis=0)).astype(int)
    in_box = np.zeros_like(inside)
    in_box[y0:y1, x0:x1] = True
    assert searched[in_box & ~inside].mean() > 0.9  # the box's corners outside the outline
    assert searched[inside].mean() < 0.5


def _escalation_sched(budget, used_ms):
    """A scheduler ``used_ms`` into a frame of ``budget`` whose escalation costs 0.5 ms + 0.1 ms per 1000 pixels."""
    clock = FakeClock()
    s = FrameScheduler(budget, CostModel(min_samples=3), clock, safety_ms=0.0)
    for px in (10_000, 50_000, 100_000, 200_000):
        s.cost.observe("escalate_sift", px, 0.5 + 1e-4 * px)
    s.start()
    clock.advance(used_ms)
    return s


def test_escalation_is_searched_at_the_largest_resolution_that_fits_down_to_its_floor():
    box = (100, 50, 500, 350)  # 120,000 pixels
    px = 400 * 300
    full = SearchPlanner.escalation_plan(box)
    assert full.scale == 1.0 and full.pixels == px and full.regions.boxes.tolist() == [list(box)]
    assert SearchPlanner.escalation_plan(box, _escalation_sched(None, 30.0), "escalate_sift").scale == 1.0
    # Room for 13 ms, the whole box costs 12.5 ms: full resolution.
    assert SearchPlanner.escalation_plan(box, _escalation_sched(33.0, 20.0), "escalate_sift").scale == 1.0
    # Room for 5 ms: brute force over scales in steps of 0.01 gives the largest that fits.
    sched = _escalation_sched(33.0, 28.0)
    plan = SearchPlanner.escalation_plan(box, sched, "escalate_sift")
    fitting = [s for s in np.arange(1, 101) / 100 if sched.cost.predict("escalate_sift", px * s * s) <= 5.0]
    assert plan.scale == pytest.approx(max(fitting)) and plan.scale < 1.0
    assert plan_work(plan) == pytest.approx(px * plan.scale**2)
    assert [(r.unit, r.reason) for r in plan.skipped] == [("full_resolution", "budget")]
    # Room for 1 ms: not below the floor's pixels (the scheduler then skips the unit).
    tight = SearchPlanner.escalation_plan(box, _escalation_sched(33.0, 32.0), "escalate_sift")
    assert px * tight.scale**2 == pytest.approx(ESCALATION_PIXELS, rel=1e-6)
    # A box smaller than the floor keeps full resolution.
    small = (0, 0, 100, 100)
    assert SearchPlanner.escalation_plan(small, _escalation_sched(33.0, 32.0), "escalate_sift").scale == 1.0


def test_a_sweep_tile_without_proposals_is_searched_whole_and_costed_at_its_pixels():
    """Where the prefilter proposes nothing inside the sweep's tile, the tile is searched whole; every plan's
    pixels (what the cost model learns the extraction's time against) are those of the boxes it searches."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    quadrant_free = Regions.from_boxes([(320, 0, 640, 480), (0, 240, 320, 480)])  # nothing top left
    whole_tiles = 0
    for _ in range(12):
        sched = _sched(33.0)
        for px in (1e4, 2e4, 4e4):
            sched.cost.observe("features_surf", px, px / 2000.0)
        plan = planner.plan((480, 640), Regions.empty(), quadrant_free, DegradeController(33.0), sched)
        assert any(r.reason == "sweep" for r in plan.skipped)
        assert plan.pixels == union_area(plan.regions, (480, 640)) > 0
        ((x0, y0, x1, y1),) = plan.regions.boxes.tolist() if len(plan.regions) == 1 else ((0, 0, 0, 0),)
        whole_tiles += x1 <= 320 and y1 <= 240 and x1 > 0
        planner.rounds.advance(plan)
    assert whole_tiles >= 1


@pytest.mark.parametrize("prefilter_ms, pays", [(2.0, True), (30.0, False)])
def test_the_prefilter_runs_during_a_sweep_only_when_it_can_save_its_own_time(prefilter_ms, pays):
    """While the sweep is under way the prefilter can save at most the extraction of a tile (at the scale and
    step the sweep uses) over extracting nothing: at 1 ms per 2000 px a tile of at most 66,000 px saves less
    than 33 ms, so a 30 ms prefilter is left out and a 2 ms one runs; before any sweep, and without a
    budget, it always runs."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    sched = _sched(33.0)
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 2000.0)
    for _ in range(3):
        sched.cost.observe("prefilter", 1.0, prefilter_ms)
    assert planner.prefilter_pays(sched)  # no sweep under way yet
    plan = planner.plan((480, 640), Regions.empty(), Regions.full(640, 480), DegradeController(33.0), sched)
    saving = sched.cost.expected("features_surf", plan_work(plan)) - sched.cost.expected("features_surf", 0.0)
    assert any(r.reason == "sweep" for r in plan.skipped) and 2.0 < saving < 30.0
    assert planner.prefilter_pays(sched, plan.sweep_work) == pays  # the recognizer keeps it for the next frame
    assert planner.prefilter_pays(_sched(None))  # without a budget there is no sweep to weigh it against


def test_windows_beyond_what_fits_wait_and_the_most_recent_are_searched():
    """Six windows of tracks lost at once (300 x 300 px each, apart) at 1 ms per 2000 px of extraction: at the
    lowest resolution and the coarse step each costs about 14 ms, so a 33 ms frame searches the two most
    recent (listed first) and records the other four as left out; without a budget all are searched."""
    windows = Regions.from_boxes([[x, y, x + 300, y + 300] for y in (0, 400) for x in (0, 400, 800)])
    sched = _sched(33.0)
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 2000.0)
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    plan = planner.plan((720, 1280), windows, Regions.empty(), DegradeController(33.0), sched)
    assert plan.regions.boxes.tolist() == windows.boxes[:2].tolist()
    assert [(r.unit, r.reason, r.subject) for r in plan.skipped if r.unit == "window"] == [
        ("window", "budget", "4 of 6")
    ]
    free = SearchPlanner("surf").plan((720, 1280), windows, Regions.empty(), DegradeController(None), _sched(None))
    assert free.pixels == 6 * 300 * 300 and not [r for r in free.skipped if r.unit == "window"]


def test_the_next_tile_keeps_the_reserve_for_units_after_it():
    """A frame's extra tile of the sweep is planned only when it fits the time left less what later units were
    given (``reserve``): the same frame with 20 ms kept for them gets none."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    _swept(planner, 2)  # a round under way (a tile, then the coarse pass): a tile is due next
    sched = _sched(33.0)
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 2000.0)
    full = Regions.full(640, 480)
    plan = planner.next_tile((480, 640), full, sched, 1)
    assert plan is not None and plan.crop is not None
    cost = sched.cost.expected("features_surf", plan_work(plan))
    assert 33.0 - 20.0 < cost  # does not fit with 20 ms kept
    assert planner.next_tile((480, 640), full, sched, 1, reserve=20.0) is None


def test_when_the_coarse_pass_is_due_but_does_not_fit_the_next_tile_is_searched():
    """At the fine step the coarse pass (76,800 px of work at 1 ms per 2000 px: over 33 ms) does not fit a
    frame's remaining time; the frame then searches the round's next tile rather than nothing, and the coarse
    pass stays due."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    *_, first = _swept(planner, TILES_PER_COARSE)  # tiles: the coarse pass is due next
    sched = _sched(33.0)
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 2000.0)
    plan = planner.next_tile((480, 640), Regions.full(640, 480), sched, 1)
    assert plan is not None and plan.crop is not None and plan.crop != first.crop
    assert planner.rounds.coarse_due


def test_the_next_tile_cuts_out_the_tracked_objects_it_is_given_not_those_of_an_earlier_call():
    """The cut of the tracked outlines is kept between a frame's calls with the same proposals and outlines;
    another frame's outlines (a new list) are cut anew: a tracked object moved over the tile is left out of it,
    and the part it left is searched again."""
    planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
    _swept(planner, 1)  # a round under way; below, its first tile (at the top left) is asked for again
    sched = _sched(33.0)
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 2000.0)
    full = Regions.full(640, 480)
    here = [np.array([[0, 0], [150, 0], [150, 150], [0, 150]], np.float64)]
    there = [np.array([[400, 300], [550, 300], [550, 450], [400, 450]], np.float64)]

    def covered_by(tracked):
        planner.rounds.tile_index -= planner.rounds.tile_index > 0  # the same tile again
        planner.rounds.coarse_due = False
        plan = planner.next_tile((480, 640), full, sched, 1, tracked, [])
        assert plan is not None and plan.crop is not None
        mask = np.zeros((480, 640), bool)
        for x0, y0, x1, y1 in plan.regions.boxes.tolist():
            mask[y0:y1, x0:x1] = True
        return mask

    first = covered_by(here)
    assert not first[20:130, 20:130].any()  # inside the tracked outline: cut out
    again = covered_by(here)
    assert np.array_equal(first, again)
    moved = covered_by(there)  # a new frame: the object is elsewhere, and the tile is searched where it was
    assert moved[20:130, 20:130].all()


def _least_sched(room_ms):
    """A 33 ms frame with ``room_ms`` left: extraction learned at 1 ms per 1000 px (step 1), planning at 2 ms."""
    clock = FakeClock()
    sched = FrameScheduler(33.0, CostModel(min_samples=3), clock, safety_ms=0.0)
    _learned(sched)
    for _ in range(3):
        sched.cost.observe("plan", 1.0, 2.0)
    sched.start()
    clock.advance(33.0 - room_ms)
    return sched


def test_the_least_search_is_the_finest_sweep_tile_at_the_lowest_resolution_and_the_coarse_step():
    """The least search a frame can make: planning plus the largest tile of the sweep's finest grid (the whole
    frame without a sweep) at scale 0.75 and step 2; no plan made with no time left extracts more."""
    from objrec.realtime.sweep import SWEEP_GRIDS, largest_tile

    sched = _least_sched(30.0)
    tile = largest_tile(640, 480, *SWEEP_GRIDS[-1])
    swept = SearchPlanner("surf", sweep=True)
    assert swept.least_ms((480, 640), sched) == pytest.approx(2.0 + tile * 0.75**2 * COARSE_SAMPLING_COST / 1000)
    whole = SearchPlanner("surf")
    assert whole.least_ms((480, 640), sched) == pytest.approx(2.0 + 640 * 480 * 0.75**2 * COARSE_SAMPLING_COST / 1000)
    assert whole.least_ms((480, 640), _sched(None)) == 0.0
    # A frame with no time left: the planner's own plan is at the lowest resolution and the coarse step, and
    # its extraction no larger than the least search's.
    late = _least_sched(0.0)
    for planner, px in ((swept, tile), (whole, 640 * 480)):
        p = planner.plan((480, 640), Regions.empty(), Regions.full(640, 480), DegradeController(33.0), late)
        assert (p.scale, p.sample_step) == (0.75, 2)
        assert plan_work(p) <= px * 0.75**2 * COARSE_SAMPLING_COST + 1e-6


@pytest.mark.parametrize(
    ("room_ms", "upkeep_ms", "waits"),
    [(5.0, 3.0, True), (5.0, 0.0, False), (30.0, 3.0, False)],
)
def test_the_search_waits_only_for_the_tracks_upkeep_and_only_when_its_least_part_no_longer_fits(
    room_ms, upkeep_ms, waits
):
    """After re-acquisitions or realignments took time, a search whose least part (about 20 ms here) does not
    fit the 5 ms left waits; with 30 ms left it runs; without upkeep it runs whatever the time left (a frame
    whose tracking alone fills the budget must still find new objects); without a budget it never waits."""
    planner = SearchPlanner("surf", sweep=True)
    sched = _least_sched(room_ms)
    assert 5.0 < planner.least_ms((480, 640), sched) < 30.0
    assert planner.waits((480, 640), sched, upkeep_ms) is waits
    assert planner.waits((480, 640), _sched(None), upkeep_ms) is False


def test_sweep_plans_are_those_of_tiles_computed_afresh_for_every_step(monkeypatch):
    """A plan tries a tile at each sampling step and the sweep keeps the last tile's contents for the next try:
    over frames of changing windows and proposals, with budgets from ample to tight, a tile planned again in the
    next frames over other boxes, every plan equals the plan of a planner that computes each tile's contents
    afresh (so nothing kept outlives its frame's boxes)."""
    from objrec.realtime import sweep

    rng = np.random.default_rng(11)
    frames = []
    for _ in range(40):
        n = int(rng.integers(0, 24))
        xy = rng.integers(0, 560, (n, 2))
        props = Regions.from_boxes(np.concatenate([xy, xy + rng.integers(24, 120, (n, 2))], 1), rng.random(n))
        k = int(rng.integers(0, 3))
        wxy = rng.integers(0, 500, (k, 2))
        windows = Regions.from_boxes(np.concatenate([wxy, wxy + 100], 1))
        frames.append((windows, props, float(rng.choice([12.0, 20.0, 33.0, 60.0]))))

    def plans(fresh):
        planner = SearchPlanner("surf", feature_cap=1500, sweep=True)
        if fresh:
            monkeypatch.setattr(
                planner.rounds,
                "_part_in",
                lambda boxes, n, windows, region, shape: sweep._in_tile(
                    windows, Regions(boxes.boxes[n:], boxes.scores[n:]), region, shape
                ),
            )
        out = []
        for i, (windows, props, budget) in enumerate(frames):
            sched = _sched(budget)
            for px in (1e4, 4e4, 3e5):
                sched.cost.observe("features_surf", px, px / 2000.0)
            plan = planner.plan((480, 640), windows, props, DegradeController(budget), sched)
            boxes = None if plan.regions is None else plan.regions.boxes.tolist()
            out.append((boxes, plan.pixels, plan.scale, plan.sample_step, plan.crop, plan.skipped))
            if i % 3 == 2:  # the other frames' plans were not carried out: their tile comes again, other boxes in it
                planner.rounds.advance(plan)
        return out

    kept, afresh = plans(False), plans(True)
    assert kept == afresh
    tiles = [r.subject for p in kept for r in p[5] if r.reason == "sweep"]
    assert len(tiles) >= 10 and len(set(tiles)) >= 3  # the sweep's tiles, planned again and in turn
