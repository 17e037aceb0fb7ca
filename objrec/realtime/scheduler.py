"""Deadline-aware admission of work within a frame budget.

A frame's work is a mandatory part (always run) and optional *units* run in priority order only while a
learned cost model predicts they fit in what is left of the budget. The model learns online per
(stage, backend) as a function of a size variable (pixels, keypoints, candidates) and predicts a high
quantile, not the mean, so one slow run does not make the next frame late.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from objrec.types import SkipRecord

__all__ = [
    "PerfClock",
    "FakeClock",
    "CostModel",
    "FrameScheduler",
    "UnitRecord",
    "OVERHEAD",
    "RELEARN_AFTER",
    "LATE_TARGET",
    "LATE_STEP",
    "LATE_RESERVE_MAX",
    "RELATIVE_STAGES",
]


class PerfClock:
    """Milliseconds from ``time.perf_counter``."""

    def now(self) -> float:
        return time.perf_counter() * 1e3


#: The cost-model stage of a frame's work outside its units (see :class:`FrameScheduler`).
OVERHEAD = "frame_overhead"

#: An optional unit left out for the budget in this many frames in a row is admitted in the next frame where its
#: typical time fits (see :meth:`FrameScheduler.run`).
RELEARN_AFTER = 4

#: The share of frames a budget may miss: the scheduler's late reserve (see :class:`FrameScheduler`) settles where
#: this share of frames ends over the budget.
LATE_TARGET = 0.005
#: A late frame raises the late reserve by this share of the budget (times ``1 - LATE_TARGET``); a frame on time
#: lowers it by the same step times ``LATE_TARGET``.
LATE_STEP = 0.05
#: The late reserve never exceeds this share of the budget.
LATE_RESERVE_MAX = 0.25
#: A recognizer's late reserve at its first frame with a budget, as a share of it: two late frames' worth, which
#: the frames on time then wear down (by a two-hundredth of a step each) unless late frames confirm it.
LATE_RESERVE_START = 2 * LATE_STEP

#: ``FrameScheduler.start``'s default budget: the one the scheduler was made with (None means no budget).
_CONFIGURED: Any = object()


class FakeClock:
    """A clock that moves only when told to: deterministic scheduler tests."""

    def __init__(self, start: float = 0.0) -> None:
        self.t = float(start)

    def now(self) -> float:
        return self.t

    def advance(self, ms: float) -> None:
        self.t += float(ms)


@dataclass
class _Stage:
    xs: deque = field(default_factory=lambda: deque(maxlen=64))
    ts: deque = field(default_factory=lambda: deque(maxlen=64))
    coef: tuple[float, float] = (0.0, 0.0)
    margin: float = 0.0  # ms; a share of the line's time when ``scaled``
    dirty: bool = True
    relative: bool = False  # a stage of ``CostModel.relative``
    scaled: bool = False  # its last fit was on relative errors (all sizes positive): ``margin`` is a share
    spread: float = 0.0  # the margin in ms (at the mean size when ``scaled``)


#: Sizes spanning less than this share of their mean are too narrow to fit a line: the model is then
#: proportional to size.
NARROW_SIZES = 0.25
#: Stages (name prefixes) whose errors are modelled in proportion to their time: the escalation, whose size the
#: planner chooses anywhere from a small box at a reduced resolution to a whole frame at full resolution
#: (``objrec.realtime.planner.escalation_plan``). A run several times larger strays from the line by several
#: times more milliseconds, so an unweighted line is set by the largest runs' noise (its intercept overstates
#: a small run several times over) and one margin in milliseconds, their noise, keeps any small run out of a
#: budget that has room for it.
RELATIVE_STAGES = ("escalate_",)


class CostModel:
    """Online model of stage time ``t ≈ a + b·size``, predicting a high quantile.

    A least-squares line (``b >= 0``) over the last ``window`` observations plus the ``quantile`` of the
    residuals; ``t ≈ b·size`` through the mean when the sizes span less than :data:`NARROW_SIZES` of their
    mean or the line's intercept would be negative. Until ``min_samples`` observations exist, a prior
    (``prior_ms``, per stage) is used, and an unknown stage is predicted as ``default_ms`` so it is never
    admitted blindly into a tight budget.

    Parameters
    ----------
    quantile : float
        Residual quantile added to the line (0.95: admit only what fits 19 times out of 20).
    relative : tuple of str
        Stages (name prefixes) whose errors grow in proportion to their time (:data:`RELATIVE_STAGES`): the
        line is fitted to relative errors (weights ``1/size²``: ``t/size`` regressed on ``1/size``) and the
        margin is the ``quantile`` of the relative residuals, a share of the line's time at the size asked.
    """

    def __init__(
        self,
        quantile: float = 0.95,
        window: int = 64,
        min_samples: int = 3,
        prior_ms: dict[str, float] | None = None,
        default_ms: float = 1e9,
        relative: tuple[str, ...] = RELATIVE_STAGES,
    ) -> None:
        if not 0.5 <= quantile < 1.0:
            raise ValueError(f"quantile: expected a value in [0.5, 1), got {quantile}")
        self.quantile = quantile
        self.window = window
        self.min_samples = min_samples
        self.prior_ms = dict(prior_ms or {})
        self.default_ms = default_ms
        self.relative = tuple(relative)
        self._stages: dict[str, _Stage] = {}

    def observe(self, stage: str, size: float, ms: float) -> None:
        """Learn one observation of ``stage``: a unit of ``size`` (what its time grows with: pixels, features,
        matches) took ``ms`` milliseconds."""
        s = self._stages.get(stage)
        if s is None:
            s = _Stage(deque(maxlen=self.window), deque(maxlen=self.window), relative=stage.startswith(self.relative))
            self._stages[stage] = s
        s.xs.append(float(size))
        s.ts.append(float(ms))
        s.dirty = True

    def clear(self) -> None:
        """Forget every observation (the priors stay)."""
        self._stages.clear()

    def forget(self, stage: str) -> None:
        """Forget the observations of ``stage`` (its prior stays)."""
        self._stages.pop(stage, None)

    def samples(self, stage: str) -> int:
        s = self._stages.get(stage)
        return 0 if s is None else len(s.ts)

    def _fit(self, s: _Stage) -> None:
        # Closed-form least squares and a sorted-residual quantile, in plain Python over the window's few tens
        # of floats: a model refits several stages every frame, where NumPy's calls (let alone np.polyfit's SVD
        # and np.quantile) would cost more than the arithmetic.
        x, t = list(s.xs), list(s.ts)
        n = len(x)
        xm, tm = sum(x) / n, sum(t) / n
        narrow = xm > 0.0 and max(x) - min(x) < NARROW_SIZES * xm
        if s.relative and min(x) > 0.0:
            self._fit_relative(s, x, t, narrow)
            return
        a = b = 0.0
        if not narrow:
            sxx = sum((xi - xm) * (xi - xm) for xi in x)
            sxt = sum((xi - xm) * (ti - tm) for xi, ti in zip(x, t, strict=True))
            b = max(sxt / sxx if sxx > 0.0 else 0.0, 0.0)
            a = tm - b * xm
        if xm > 0.0 and (narrow or a < 0.0):
            # Sizes this close together fix the time but not the slope (noise would set it), and a negative
            # time at size 0 means a few slow runs at large sizes (a first call, a busy machine) tilted the
            # line: either way a plan asking for another size would get any extrapolation. Time
            # proportional to size extrapolates sanely.
            a, b = 0.0, tm / xm
        s.coef = (a, b)
        s.margin = max(0.0, self._quantile([ti - (a + b * xi) for xi, ti in zip(x, t, strict=True)]))
        s.spread = s.margin
        s.scaled = s.dirty = False

    def _fit_relative(self, s: _Stage, x: list[float], t: list[float], narrow: bool) -> None:
        """The line of a relative stage (all sizes positive): least squares on relative errors, which is the
        line of ``t/size`` over ``1/size`` (its slope is the intercept ``a``, its intercept the slope ``b``),
        both kept non-negative; proportional to size when the sizes are too narrow to fit it. The margin is
        the ``quantile`` of ``t / line - 1``."""
        n = len(x)
        u = [1.0 / xi for xi in x]
        y = [ti / xi for xi, ti in zip(x, t, strict=True)]
        um, ym = sum(u) / n, sum(y) / n
        suu = sum((ui - um) * (ui - um) for ui in u)
        a = 0.0
        if not narrow and suu > 0.0:
            a = max(sum((ui - um) * (yi - ym) for ui, yi in zip(u, y, strict=True)) / suu, 0.0)
        b = max(ym - a * um, 0.0)
        if b <= 0.0 and a <= 0.0:
            b = sum(t) / sum(x)
        s.coef = (a, b)
        s.margin = max(0.0, self._quantile([ti / max(a + b * xi, 1e-9) - 1.0 for xi, ti in zip(x, t, strict=True)]))
        s.spread = s.margin * (a + b * sum(x) / n)
        s.scaled, s.dirty = True, False

    def _quantile(self, values: list[float]) -> float:
        """The ``quantile`` of ``values``: linear interpolation between order statistics, as np.quantile."""
        v = sorted(values)
        k = self.quantile * (len(v) - 1)
        lo = int(k)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (k - lo) * (v[hi] - v[lo])

    def predict(self, stage: str, size: float = 1.0) -> float:
        """Predicted milliseconds for ``stage`` at ``size`` (a high quantile)."""
        s = self._fitted(stage)
        if s is None:
            seen = self._stages.get(stage)
            prior = self.prior_ms.get(stage, self.default_ms)
            if seen is not None and len(seen.ts):
                prior = max(prior if stage in self.prior_ms else 0.0, max(seen.ts))
            return float(prior)
        a, b = s.coef
        if s.scaled:
            return max(0.0, (a + b * float(size)) * (1.0 + s.margin))
        return max(0.0, a + b * float(size) + s.margin)

    def _fitted(self, stage: str) -> _Stage | None:
        """The stage with its line up to date, or None until it has ``min_samples`` observations."""
        s = self._stages.get(stage)
        if s is None or len(s.ts) < self.min_samples:
            return None
        if s.dirty:
            self._fit(s)
        return s

    def spread(self, stage: str) -> float:
        """The quantile margin ``predict`` adds to ``expected`` for ``stage`` (0 until learned); for a relative
        stage, the margin at its mean size."""
        s = self._fitted(stage)
        return 0.0 if s is None else s.spread

    def largest_size(self, stage: str, ms: float) -> float:
        """The largest size whose predicted time (:meth:`predict`, the high quantile) is at most ``ms``: 0 when
        not even size 0 fits, infinite when the prediction does not grow with size and fits. A stage not yet
        learned is predicted by its prior or :attr:`default_ms` at any size."""
        s = self._fitted(stage)
        if s is None:
            return float("inf") if self.predict(stage) <= ms else 0.0
        a, b = s.coef
        room = ms / (1.0 + s.margin) - a if s.scaled else ms - a - s.margin
        if room < 0.0:
            return 0.0
        return float("inf") if b <= 0.0 else room / b

    def expected(self, stage: str, size: float = 1.0) -> float:
        """Typical milliseconds for ``stage`` at ``size``: the line without the quantile margin (a plan of
        several units adds their margins in quadrature, see ``SearchPlanner``). 0 until learned."""
        s = self._fitted(stage)
        if s is None:
            return 0.0
        a, b = s.coef
        return max(0.0, a + b * float(size))


@dataclass
class UnitRecord:
    """One unit offered to the scheduler: its prediction, its time when it ran.

    Attributes
    ----------
    unit : str
        The unit's name (``FrameScheduler.run``'s ``unit``).
    subject : str
        What it was for (an object name, a region), or "".
    predicted_ms : float
        The cost model's prediction (NaN without a budget).
    actual_ms : float or None
        Its measured time; None when it was left out.
    admitted : bool
        It ran.
    mandatory : bool
        It was mandatory (run whatever the prediction).
    """

    unit: str
    subject: str
    predicted_ms: float
    actual_ms: float | None
    admitted: bool
    mandatory: bool


class FrameScheduler:
    """Admits optional units while the cost model predicts they fit the frame's remaining budget.

    Every unit is run through :meth:`run`: mandatory units always run, optional ones only when predicted
    to fit; each one's time teaches the cost model and is added to the frame's per-stage timings; every
    unit left out becomes a :class:`~objrec.types.SkipRecord`. A unit offered with ``relearn`` and left out
    in :data:`RELEARN_AFTER` frames in a row runs in the next frame where its typical time (the line without
    the quantile margin) fits: admitted by its high quantile alone it would, after one slow run, never run
    again to unlearn it.

    Parameters
    ----------
    budget_ms : float or None
        The frame budget; None admits everything.
    cost : CostModel
    clock : object with ``now() -> ms``
    safety_ms : float
        Kept in reserve for the work after the last unit (assembling the result, returning it) at the least.
        The frame's work outside its units (preparing the frame, planning, bookkeeping between units,
        assembling the result) is learned as the cost-model stage :data:`OVERHEAD` once frames end through
        :meth:`finish`: what a frame is predicted to need of it beyond what it has spent so far is kept in
        reserve instead, when that is more.
    late_start : float
        The late reserve's start, as a share of the first budget (see :attr:`late_reserve_ms`).

    Attributes
    ----------
    late_reserve_ms : float
        Time held back from every unit on top of that reserve, learned from the frames' outcomes: each frame
        that ends over its budget raises it and each frame on time lowers it a little
        (:data:`LATE_STEP`), so that it settles where :data:`LATE_TARGET` of the frames are late (an online
        quantile estimate, Robbins-Monro). The cost model predicts each unit's high quantile, but a frame
        runs many units, and their overruns, the work outside them and the machine's hiccups add up in a
        tail that no single unit's prediction holds; this reserve follows that tail as measured. It starts
        at ``late_start`` times the first budget (None until a frame with a budget starts; a recognizer
        starts it at :data:`LATE_RESERVE_START`).
    """

    def __init__(
        self,
        budget_ms: float | None,
        cost: CostModel | None = None,
        clock: Any = None,
        safety_ms: float = 1.0,
        late_start: float = 0.0,
    ) -> None:
        self.default_budget_ms = budget_ms
        self.budget_ms = budget_ms
        self.cost = cost or CostModel()
        self.clock = clock or PerfClock()
        self.safety_ms = safety_ms
        self.t0 = self.clock.now()
        self.records: list[UnitRecord] = []
        self.skipped: list[SkipRecord] = []
        self.timings: dict[str, float] = {}
        self.unit_ms = 0.0  # the time this frame's units took
        self.lag_ms = 0.0
        self.late_start = late_start
        self.late_reserve_ms: float | None = None  # set at the first frame with a budget
        self._left_out: dict[str, int] = {}  # stage -> frames in a row it was left out, this frame's included
        self._left_now: set[str] = set()  # the stages left out in this frame (one frame counts once)

    def start(self, t0: float | None = None, budget_ms: Any = _CONFIGURED) -> None:
        """Start a frame; ``t0`` is when the frame was handed over (default: now). ``budget_ms`` is the frame's
        budget (a number or None); by default the one the scheduler was made with."""
        self.t0 = self.clock.now() if t0 is None else t0
        self.budget_ms = self.default_budget_ms if budget_ms is _CONFIGURED else budget_ms
        self.records = []
        self.skipped = []
        self.timings = {}
        self.unit_ms = 0.0
        self._left_now = set()
        self.lag_ms = max(0.0, self.elapsed())  # handed over late: time spent before the frame's work began
        if self.late_reserve_ms is None and self.budget_ms is not None:
            self.late_reserve_ms = self.late_start * self.budget_ms

    def elapsed(self) -> float:
        return self.clock.now() - self.t0

    def remaining(self) -> float:
        if self.budget_ms is None:
            return float("inf")
        elapsed = self.elapsed()
        return self.budget_ms - elapsed - self.reserve(elapsed)

    def reserve(self, elapsed: float | None = None) -> float:
        """The time kept back from the units: the frame's predicted work outside its units (:data:`OVERHEAD`,
        a high quantile) less what it has spent on such work so far, and never less than ``safety_ms``."""
        if self.cost.samples(OVERHEAD) < self.cost.min_samples:
            return self.safety_ms + (self.late_reserve_ms or 0.0)
        spent = (self.elapsed() if elapsed is None else elapsed) - self.lag_ms - self.unit_ms
        return max(self.safety_ms, self.cost.predict(OVERHEAD) - spent) + (self.late_reserve_ms or 0.0)

    def finish(self) -> float:
        """End the frame: the cost model learns the frame's time outside its units (from when :meth:`start`
        was called, not from the hand-over time), and the late reserve whether the frame ended within its
        budget (from the hand-over time), from frames with a budget only. Returns the frame's elapsed time."""
        elapsed = self.elapsed()
        if self.budget_ms is not None:  # without a budget a frame does work a budget never admits
            self.cost.observe(OVERHEAD, 1.0, max(0.0, elapsed - self.lag_ms - self.unit_ms))
            late = elapsed > self.budget_ms
            step = LATE_STEP * self.budget_ms * ((1.0 - LATE_TARGET) if late else -LATE_TARGET)
            if self.late_reserve_ms is None:  # start() sets it at the first frame with a budget
                raise RuntimeError("FrameScheduler.finish: the frame's budget was set without start()")
            self.late_reserve_ms = min(max(0.0, self.late_reserve_ms + step), LATE_RESERVE_MAX * self.budget_ms)
        return elapsed

    def fits(self, stage: str, size: float = 1.0) -> bool:
        """Whether a unit of cost-model ``stage`` and ``size`` is predicted to fit the time left."""
        return self.budget_ms is None or self.cost.predict(stage, size) <= self.remaining()

    def run(
        self,
        unit: str,
        fn: Callable[..., Any],
        *args: Any,
        size: float = 1.0,
        mandatory: bool = False,
        stage: str | None = None,
        subject: str = "",
        timing: str | None = None,
        relearn: bool = False,
        after_ms: float = 0.0,
    ) -> Any:
        """Run ``fn(*args)`` if mandatory or predicted to fit, and learn its time. Returns its result, or the
        :class:`~objrec.types.SkipRecord` of the unit when it was left out (also kept in ``skipped``).

        ``unit`` names the unit in the records, ``fn`` is its work and ``size`` its size for the cost model
        (what its time grows with). ``stage`` names the cost-model entry (default ``unit``): units of one kind
        share it. ``timing``
        names the entry of the frame's timings the time is added to (default ``stage``). ``subject`` says
        what the unit was for (an object name, a region) in the records. ``relearn``: after
        :data:`RELEARN_AFTER` frames in a row that left the stage out, it runs where its typical time fits
        (for units that keep tracks right, which must not starve after one slow run). ``after_ms``: the time
        of the work that must follow this unit for it to be of use (its matching, run as a mandatory unit);
        the unit is admitted only when both fit.
        """
        stage = stage or unit
        # Without a budget nothing is admitted by prediction: predicting would refit the stage's line after
        # every observation for nothing.
        predicted = float("nan") if self.budget_ms is None else self.cost.predict(stage, size)
        if not mandatory and self.budget_ms is not None and predicted > (left := self.remaining() - after_ms):
            n, now = self._left_out.get(stage, 0), stage in self._left_now
            if not relearn or n - now < RELEARN_AFTER or self.cost.expected(stage, size) > left:
                self._left_out[stage] = n + (not now)
                self._left_now.add(stage)
                self.records.append(UnitRecord(unit, subject, predicted, None, False, False))
                record = SkipRecord(unit, "budget", subject, predicted)
                self.skipped.append(record)
                return record
        self._left_out.pop(stage, None)
        self._left_now.discard(stage)
        t = self.clock.now()
        result = fn(*args)
        actual = self.clock.now() - t
        self.unit_ms += actual
        self.cost.observe(stage, size, actual)  # an overrun teaches the model too
        key = timing or stage
        self.timings[key] = self.timings.get(key, 0.0) + actual
        self.records.append(UnitRecord(unit, subject, predicted, actual, True, mandatory))
        return result

    def record(self, skipped: Iterable[SkipRecord]) -> None:
        """Record work that was left out without being offered (a plan's regions, the degrade level's cuts)."""
        for r in skipped:
            self.records.append(UnitRecord(r.unit, r.subject, float("nan"), None, False, False))
            self.skipped.append(r)
