"""The warm-up: what a first call costs (compilation, imports, allocation) does not stay in the cost model."""

from __future__ import annotations

import numpy as np

from objrec import Recognizer
from objrec.realtime.scheduler import FakeClock


def test_a_slow_first_call_is_forgotten_and_the_rest_is_learned(sample_db, monkeypatch):
    """The first extraction stalls 300 ms on the recognizer's clock, as a compilation would, the others take
    5 ms; after the warm-up the cost model has only the 5 ms extractions, and has learned each stage it saw
    from the teaching passes alone."""
    clock = FakeClock()
    rec = Recognizer(sample_db, budget_ms=33, prefilter=None, track=False, clock=clock)
    real = rec.features.extract
    calls = []

    def first_call_stalls(*args, **kwargs):
        calls.append(1)
        clock.advance(300.0 if len(calls) == 1 else 5.0)
        return real(*args, **kwargs)

    monkeypatch.setattr(rec.features, "extract", first_call_stalls)
    rec.warmup((480, 640), repeats=3)
    cost = rec.scheduler.cost
    stage = cost._stages["features_surf"]
    assert len(calls) >= 2 * 3 + 2  # a first pass at both sampling steps, then three teaching passes
    assert max(stage.ts) == 5.0  # the stalled call is not among the observations
    assert cost.predict("features_surf", max(stage.xs)) < 300.0
    assert cost.samples("features_surf") >= cost.min_samples and cost.samples("matching") >= cost.min_samples
    assert rec.degrade.level == 0 and rec.scheduler.default_budget_ms == rec.budget_ms == 33


def test_the_escalation_is_learned_at_the_sizes_a_budget_asks_for(sample_db):
    """After the warm-up, the secondary detector's escalation has a learned cost line whose sizes span the
    boxes of ``ESCALATION_SHARES`` of the frame (the smallest near ``ESCALATION_PIXELS``) at each of
    ``ESCALATION_SCALES``, so a budgeted frame can admit it."""
    from objrec.realtime.planner import ESCALATION_PIXELS
    from objrec.realtime.warmup import ESCALATION_SCALES, ESCALATION_SHARES

    rec = Recognizer(sample_db, budget_ms=33, prefilter=None, track=False)
    assert rec.kinds[1:] == ["sift"]
    rec.warmup((480, 640), repeats=3)
    cost = rec.scheduler.cost
    assert cost.samples("escalate_sift") >= cost.min_samples
    sizes = sorted(set(cost._stages["escalate_sift"].xs))
    full = [int(640 * np.sqrt(s)) * int(480 * np.sqrt(s)) for s in ESCALATION_SHARES]
    assert abs(min(full) - ESCALATION_PIXELS) < 0.05 * ESCALATION_PIXELS
    for scale in ESCALATION_SCALES:  # plan_work: the pixels searched, at the plan's resolution
        assert all(any(abs(x - w * scale * scale) <= 0.01 * w for x in sizes) for w in full)
    assert np.isfinite(cost.predict("escalate_sift", ESCALATION_PIXELS))


def test_the_confirmation_is_learned_as_a_budget_runs_it(sample_db):
    """With a budget and tracking, the warm-up leaves the confirmation a learned cost line from confirmations of
    boxes at the budget's resolution (at most ``CONFIRM_PIXELS`` searched), none of the passes' whole-box ones:
    the stream's first confirmations, which pay for what it does for the first time, are then not its only
    measure. Without a budget the confirmation is learned from the stream alone."""
    from objrec.realtime.searches import CONFIRM_PIXELS

    rec = Recognizer(sample_db, budget_ms=33, prefilter=None, track=True)
    rec.warmup((480, 640), repeats=3)
    cost = rec.scheduler.cost
    assert cost.samples("confirm") >= cost.min_samples
    assert max(cost._stages["confirm"].xs) <= CONFIRM_PIXELS * 1.01
    assert 0.0 < cost.expected("confirm", CONFIRM_PIXELS) < rec.budget_ms
    assert not rec.tracker.tracks and rec.stream.index == 0  # the warm-up's tracks are gone

    free = Recognizer(sample_db, budget_ms=None, prefilter=None, track=True)
    free.warmup((480, 640), repeats=3)
    assert free.scheduler.cost.samples("confirm") == 0
