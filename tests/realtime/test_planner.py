"""The search plan: windows first, regions cut by the degrade level, whole frame when nearly covered,
resolution dropped only when the cost model says the mandatory part would not fit."""

from __future__ import annotations

import numpy as np

from objrec.realtime.degrade import DegradeController
from objrec.realtime.planner import SearchPlanner
from objrec.realtime.scheduler import CostModel, FakeClock, FrameScheduler
from objrec.types import Regions


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
    assert [(r.unit, r.reason) for r in sched.skipped] == [("degrade_level", "load"), ("region", "degrade")]


def test_nearly_covered_frame_is_searched_whole_and_nothing_to_search_is_empty():
    sched = _sched(None)
    planner = SearchPlanner("surf")
    plan = planner.plan((480, 640), Regions.empty(), Regions.full(640, 480), DegradeController(None), sched)
    assert plan.regions is None and plan.pixels == 640 * 480 and plan.max_features is None
    assert planner.plan((480, 640), Regions.empty(), Regions.empty(), DegradeController(None), sched).empty


def test_resolution_drops_only_when_the_learned_cost_would_not_fit():
    sched = _sched(33.0)
    for px in (1e4, 2e4, 4e4):
        sched.cost.observe("features_surf", px, px / 1000.0)  # 1 ms per 1000 px
    planner = SearchPlanner("surf", feature_cap=1500)
    small = Regions.from_boxes([[0, 0, 100, 100]])  # 10 ms: fits
    assert planner.plan((480, 640), Regions.empty(), small, DegradeController(33.0), sched).scale == 1.0
    big = Regions.from_boxes([[0, 0, 200, 200]])  # 40 ms at full resolution, 22.5 ms at 0.75: fits
    plan = planner.plan((480, 640), Regions.empty(), big, DegradeController(33.0), sched)
    assert plan.scale == 0.75 and ("full_resolution", "degrade") in [(r.unit, r.reason) for r in sched.skipped]
