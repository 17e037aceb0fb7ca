"""What a search plan costs: the cost model's predictions for a plan's extraction and the mandatory units after
it, which the planner and the sweep size their plans by.

:class:`PlanCosts` reads the frame's scheduler (its cost model and the time left) and learns one thing of its
own, the keypoints a frame gives per pixel extracted (:meth:`PlanCosts.observe`): the units after extraction
(the features tracked objects explain, retrieval for a catalogue, matching, the first verification) cost in
proportion to the keypoints described, which are known only once extracted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from objrec.realtime.degrade import fit_scale
from objrec.types import SearchPlan

if TYPE_CHECKING:
    from objrec.realtime.scheduler import CostModel, FrameScheduler

__all__ = [
    "PlanCosts",
    "plan_work",
    "COARSE_SAMPLING_COST",
    "FIRST_VERIFY_MATCHES",
    "FIRST_VERIFY_SHARE",
    "HINT_MATCHING",
    "PLANNED_VOTERS",
]

#: Extraction time at SURF's sample step 2 as a share of step 1's on the same pixels: the detector's samples
#: drop to a quarter, while the integral image, the description and per-call costs do not shrink
#: (``bench/bench_surf.py --sample-step`` times both).
COARSE_SAMPLING_COST = 0.55

#: The matches the first verification is sized at before the frame's candidates exist; a plan sized at its
#: feature cap (a search without a sweep) takes at most :data:`FIRST_VERIFY_SHARE` of the cap.
FIRST_VERIFY_MATCHES = 100
#: A frame's first verified candidate seldom holds more than this share of its described keypoints as matches:
#: the ratio test drops most of them, and the rest spread over the shortlist's objects.
FIRST_VERIFY_SHARE = 0.25

#: The cost-model stage of a hint's matching: the features of the hint's box against its object's views only,
#: far fewer than a search's matching compares them with.
HINT_MATCHING = "hint_matching"

#: The share of its voters a plan keeps retrieval's time for (the search itself then takes what fits, see
#: :meth:`PlanCosts.voters`). Retrieval costs in proportion to its voters, and the strongest half of them still
#: put the photographed object on a shortlist of a few about as often as all do, while a coarser extraction
#: (SURF's step 2, a lower resolution) loses the small and distant objects: at a large catalogue, where
#: retrieval is a large part of a frame, the time is better spent on the extraction's detail.
PLANNED_VOTERS = 0.5


def plan_work(plan: SearchPlan) -> float:
    """The cost model's size for a plan's extraction: the pixels extracted from (full-resolution pixels times
    the scale squared), weighted by the sampling step's share of the detector's work."""
    return plan.pixels * plan.scale * plan.scale * (COARSE_SAMPLING_COST if plan.sample_step == 2 else 1.0)


def _typical(cost: CostModel, units: list[tuple[str, float]]) -> tuple[float, float]:
    """The summed typical times of ``units`` ((cost-model stage, size) pairs) and the sum of their squared
    margins (see :meth:`PlanCosts.after`)."""
    return sum(cost.expected(stage, size) for stage, size in units), sum(cost.spread(stage) ** 2 for stage, _ in units)


class PlanCosts:
    """The predicted times of a primary search's plans.

    Parameters
    ----------
    stage : str
        The cost-model stage of the primary extraction (``features_<kind>``).
    feature_cap : int or None
        Under a budget, the strongest keypoints described at degrade level 0 (None: the detector's own setting).
    min_features : int
        A feature cap never goes below this.
    retrieval_voters : int
        At most this many of the features vote in the retrieval unit; 0 without a retrieval stage.
    """

    def __init__(
        self, stage: str, feature_cap: int | None = None, min_features: int = 100, retrieval_voters: int = 0
    ) -> None:
        self.stage = stage
        self.feature_cap = feature_cap
        self.min_features = min_features
        self.retrieval_voters = retrieval_voters
        self._density: dict[int, float] = {}  # keypoints per extracted pixel, per sampling step

    def fits(
        self,
        sched: FrameScheduler,
        cap: int | None,
        pixels: float,
        scale: float,
        step: int,
        *,
        verify: bool = True,
        reserve: float = 0,
    ) -> bool:
        """Whether extracting ``pixels`` at ``scale`` and ``step`` is predicted to fit the time left less
        ``reserve``, with the mandatory units after it (``verify``: a first verification among them).

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler: its cost model and the time left.
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            Full-resolution pixels extracted from.
        scale : float
            The plan's resolution, as a factor of full resolution.
        step : int
            SURF's sampling step (1 or 2).
        verify : bool
            A first verification is among the mandatory units after extraction.
        reserve : float
            Time in ms kept back from the time left.
        """
        return self.need(sched, cap, pixels, scale, step, verify) <= sched.remaining() - reserve

    def need(
        self, sched: FrameScheduler, cap: int | None, pixels: float, scale: float, step: int, verify: bool = True
    ) -> float:
        """Time extracting ``pixels`` at ``scale`` and ``step`` needs with the mandatory units after it
        (:meth:`tail`): their typical times and the margin a plan keeps for its tail.

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler.
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            Full-resolution pixels extracted from.
        scale : float
            The plan's resolution, as a factor of full resolution.
        step : int
            SURF's sampling step (1 or 2).
        verify : bool
            A first verification is among the units after extraction.
        """
        after, var = self.tail(sched, cap, pixels * scale * scale, step, verify)
        work = plan_work(SearchPlan(None, scale, pixels=int(pixels), sample_step=step))
        return sched.cost.expected(self.stage, work) + after + float(np.sqrt(var + sched.cost.spread(self.stage) ** 2))

    def fitting_scale(
        self,
        sched: FrameScheduler,
        cap: int | None,
        pixels: float,
        step: int,
        verify: bool = True,
        reserve: float = 0.0,
    ) -> float:
        """The largest resolution at which extracting ``pixels`` at ``step`` is predicted to fit the time left
        less ``reserve`` (the smallest when none does).

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler.
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            Full-resolution pixels extracted from.
        step : int
            SURF's sampling step (1 or 2).
        verify : bool
            A first verification is among the units after extraction.
        reserve : float
            Time in ms kept back from the time left.
        """
        left, margin = self.left(sched, cap, pixels, step, verify)
        work = plan_work(SearchPlan(None, pixels=int(pixels), sample_step=step))
        return fit_scale(lambda s: sched.cost.expected(self.stage, work * s * s) + margin, left - reserve)

    def frame_cap(self, sched: FrameScheduler, share: float = 1.0) -> int | None:
        """The feature cap of a search under the frame's budget (None without a budget or a cap).

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler (its budget).
        share : float
            The share of :attr:`feature_cap` the search takes, never below :attr:`min_features`.
        """
        if sched.budget_ms is None or not self.feature_cap:
            return None
        return max(self.min_features, int(self.feature_cap * share))

    def observe(self, plan: SearchPlan, n_features: int) -> None:
        """Learn the keypoints a frame gives per pixel extracted at the plan's sampling step: the time of the
        units after extraction follows the keypoints, not the cap.

        Parameters
        ----------
        plan : SearchPlan
            The plan searched (its pixels, scale and sampling step).
        n_features : int
            The keypoints its extraction gave.
        """
        px = plan.pixels * plan.scale * plan.scale
        if px <= 0:
            return
        d = n_features / px
        old = self._density.get(plan.sample_step)
        self._density[plan.sample_step] = d if old is None else 0.7 * old + 0.3 * d

    def voters(self, n_features: int, sched: FrameScheduler) -> int:
        """How many of a frame's ``n_features`` vote in retrieval: all up to ``retrieval_voters`` without a
        budget; under one, the most of that, 2/3, 1/2 and 1/3 of it whose retrieval, with matching and
        the first verification after it, is expected to fit the time left (the least when none does).
        Retrieval costs in proportion to its voters, and a shortlist of a few objects needs far fewer
        votes than a frame has features.

        Parameters
        ----------
        n_features : int
            The frame's described features.
        sched : FrameScheduler
            The frame's scheduler (its budget, cost model and time left).
        """
        n = min(n_features, self.retrieval_voters)
        if sched.budget_ms is None or sched.cost.samples("retrieval") < sched.cost.min_samples:
            return n
        for v in (n, 2 * n // 3, n // 2, n // 3):
            if self.after(sched, n_features, v)[0] <= sched.remaining():
                return max(1, v)
        return max(1, n // 3)

    def left(
        self, sched: FrameScheduler, cap: int | None, pixels: float, step: int, verify: bool = True, worst: bool = False
    ) -> tuple[float, float]:
        """The time left for extraction once the mandatory units after it have their typical time, for the
        keypoints expected from ``pixels`` at ``step`` (at most ``cap``; with ``worst``, ``cap`` itself where
        there is one), retrieval with :data:`PLANNED_VOTERS` of its voters; and the margin the plan keeps for
        its tail (the units' and extraction's). ``verify``: a first verification is among those units.

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler.
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            Full-resolution pixels extracted from.
        step : int
            SURF's sampling step (1 or 2).
        verify : bool
            A first verification is among the units after extraction.
        worst : bool
            Size the units at ``cap`` keypoints rather than the running density.
        """
        after, var = self.tail(sched, cap, pixels, step, verify, worst)
        return sched.remaining() - after, float(np.sqrt(var + sched.cost.spread(self.stage) ** 2))

    def tail(
        self, sched: FrameScheduler, cap: int | None, pixels: float, step: int, verify: bool = True, worst: bool = False
    ) -> tuple[float, float]:
        """:meth:`after` for the keypoints expected from ``pixels`` at ``step`` (at most ``cap``), retrieval
        with :data:`PLANNED_VOTERS` of its voters; with ``worst``, for ``cap`` keypoints where there is a cap:
        the keypoints of frames of one scene vary several times over, and a plan sized at their running
        density is late on every frame far richer than that, while a cap holds on any frame.

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler.
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            Pixels extracted, at the plan's resolution.
        step : int
            SURF's sampling step (1 or 2).
        verify : bool
            A first verification is among the units after extraction.
        worst : bool
            Size the units at ``cap`` keypoints where there is a cap.
        """
        n = self.keypoints(cap, pixels, step)
        if cap and worst:
            n = float(cap)
        return self.after(sched, n, min(n, self.retrieval_voters) * PLANNED_VOTERS, verify, worst and bool(cap))

    def keypoints(self, cap: int | None, pixels: float, step: int) -> float:
        """The keypoints expected from ``pixels`` at ``step``: the running density of the plans searched (the cap,
        or 2000, before any), at most ``cap``.

        Parameters
        ----------
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            Pixels extracted, at the plan's resolution.
        step : int
            SURF's sampling step (1 or 2).
        """
        d = self._density.get(step)
        n = float(cap or 2000) if d is None else d * pixels
        return min(n, float(cap)) if cap else n

    def hint_after(self, sched: FrameScheduler, pixels: float) -> float:
        """The time a hint's search needs after its extraction: the matching (:data:`HINT_MATCHING`) of the
        keypoints expected from ``pixels`` at full resolution (:meth:`keypoints`, at most the frame's cap)
        and the first verification, typical times plus their margins in quadrature (:func:`_typical`). At
        full resolution, so an upper bound for a box the extraction searches at a lower one.

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler.
        pixels : float
            Full-resolution pixels of the hint's box.
        """
        n = self.keypoints(self.frame_cap(sched), pixels, 1)
        after, var = _typical(sched.cost, [(HINT_MATCHING, n), ("verify", FIRST_VERIFY_MATCHES)])
        return after + float(np.sqrt(var))

    def after(
        self, sched: FrameScheduler, n_features: float, voters: float, verify: bool = True, capped: bool = False
    ) -> tuple[float, float]:
        """Typical time of the mandatory units after extraction (the features tracked objects explain, retrieval
        for a catalogue, matching, and with ``verify`` the first verification) and the sum of their squared
        margins. ``capped``: ``n_features`` is the plan's feature cap (a worst case), and the first verification
        is sized at :data:`FIRST_VERIFY_SHARE` of it, at most :data:`FIRST_VERIFY_MATCHES`, which is its size
        otherwise.

        Each stage's margin is its own high quantile over its typical time. The stages' deviations are
        close to independent, so the frame's tail is their root sum of squares: the plain sum of the
        margins would hold back time that frames almost never need.

        Parameters
        ----------
        sched : FrameScheduler
            The frame's scheduler (its cost model).
        n_features : float
            The keypoints described.
        voters : float
            The features voting in retrieval.
        verify : bool
            A first verification is among the units.
        capped : bool
            ``n_features`` is the plan's feature cap.
        """
        cost = sched.cost
        units = [("explained", n_features), ("matching", n_features)]
        if verify:
            first = min(FIRST_VERIFY_MATCHES, FIRST_VERIFY_SHARE * n_features) if capped else FIRST_VERIFY_MATCHES
            units.append(("verify", first))
        if self.retrieval_voters:
            units.append(("retrieval", voters))
        return _typical(cost, units)
