"""The search plan: which boxes of a frame the primary features are extracted from, at what resolution
and how many of them are described, so that the mandatory part fits the budget."""

from __future__ import annotations

from typing import Any

from objrec.boxes import union_area
from objrec.realtime.degrade import DegradeController, fit_scale
from objrec.types import Regions, SearchPlan

__all__ = ["SearchPlanner"]


class SearchPlanner:
    """Turns tracking windows and prefilter regions into a :class:`~objrec.types.SearchPlan`.

    Parameters
    ----------
    kind : str
        The primary detector kind (its extraction's cost-model stage is ``features_<kind>``).
    max_regions : int
        At most this many prefilter regions are searched (fewer at higher degrade levels).
    feature_cap : int or None
        Under a budget, the strongest keypoints described at degrade level 0 (a share of it at higher
        levels); None leaves the detector's own setting.
    whole_frame_fraction : float
        When the boxes cover more than this fraction of the frame, the whole frame is searched: a masked
        pass also builds and tests the boxes' mask, and its non-maximum suppression visits the whole grid,
        so from about three quarters of the frame on it costs as much as one pass without a mask, or more
        where the features gather in the boxes (``bench/bench_surf.py --coverage`` times both).
    min_features : int
        The feature cap never goes below this.
    retrieval_voters : int
        At most this many of the features vote in the retrieval unit (the size its cost is learned at);
        0 when the recognizer has no retrieval stage.
    """

    def __init__(
        self,
        kind: str,
        max_regions: int = 8,
        feature_cap: int | None = None,
        whole_frame_fraction: float = 0.75,
        min_features: int = 100,
        retrieval_voters: int = 0,
    ) -> None:
        self.kind = kind
        self.stage = f"features_{kind}"
        self.max_regions = max_regions
        self.feature_cap = feature_cap
        self.whole_frame_fraction = whole_frame_fraction
        self.min_features = min_features
        self.retrieval_voters = retrieval_voters

    def plan(
        self, shape: tuple[int, int], windows: Regions, proposals: Regions, degrade: DegradeController, sched: Any
    ) -> SearchPlan:
        """The plan for a frame of ``shape`` (rows, cols).

        ``windows`` (tracking) come first and are always searched; ``proposals`` (the prefilter's regions,
        best first) are cut to the level's count. Under a budget the resolution drops to what the cost
        model predicts fits the time left after retrieval (for a catalogue), matching and the first
        verification, but only then: a lower resolution loses the smaller objects. ``sched`` (a
        :class:`FrameScheduler`) supplies the cost model and the time left, and records what the plan leaves
        out.
        """
        h, w = shape[:2]
        level = degrade.current
        if degrade.level:
            sched.skip("degrade_level", "load", str(degrade.level))
        n = min(self.max_regions, level.regions)
        if len(proposals) > n:
            why = "degrade" if n < self.max_regions else "max_regions"
            sched.skip("region", why, f"{len(proposals) - n} of {len(proposals)}")
        boxes = windows.concat(proposals[:n])
        if not len(boxes):
            return SearchPlan(Regions.empty())
        pixels = union_area(boxes, (h, w))
        regions: Regions | None = boxes
        if pixels > self.whole_frame_fraction * h * w:
            regions, pixels = None, h * w
        scale = level.scale
        if sched.budget_ms is not None and sched.cost.samples(self.stage) >= sched.cost.min_samples:
            n = self.feature_cap or 2000
            after = sched.learned("matching", n) + sched.learned("verify", 100)
            if self.retrieval_voters:
                after += sched.learned("retrieval", min(n, self.retrieval_voters))
            scale = min(scale, fit_scale(sched.cost.predict(self.stage, pixels), sched.remaining() - after))
        if scale < 1.0:
            sched.skip("full_resolution", "degrade", f"{scale:g}")
        cap = None
        if sched.budget_ms is not None and self.feature_cap:
            cap = max(self.min_features, int(self.feature_cap * level.feature_share))
        return SearchPlan(regions, scale, cap, int(pixels))
