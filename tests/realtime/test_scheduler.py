"""The scheduler and cost model under a fake clock: deterministic admission, degrade, overrun."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.realtime.scheduler import CostModel, FakeClock, FrameScheduler


def _unit(clock: FakeClock, ms: float, log: list, name: str):
    def fn():
        clock.advance(ms)
        log.append(name)
        return name

    return fn


def test_cost_model_learns_a_line_and_predicts_a_high_quantile():
    cm = CostModel(quantile=0.9, min_samples=3)
    rng = np.random.default_rng(0)
    for _ in range(60):
        x = rng.uniform(0, 100)
        cm.observe("s", x, 2.0 + 0.5 * x + rng.uniform(0, 1.0))  # uniform jitter in [0, 1)
    # The 90% quantile of the jitter is ~0.9 above its minimum: prediction sits near the upper band.
    assert 2.0 + 0.5 * 50 + 0.6 < cm.predict("s", 50) < 2.0 + 0.5 * 50 + 1.2
    assert cm.predict("s", 100) > cm.predict("s", 10)


def test_cost_model_prior_and_unknown_stage():
    cm = CostModel(prior_ms={"a": 4.0}, default_ms=1e9, min_samples=3)
    assert cm.predict("a") == 4.0
    assert cm.predict("never_seen") == 1e9  # never admitted blindly
    cm.observe("b", 1, 7.0)
    assert cm.predict("b") == 7.0  # too few samples: the worst seen so far
    with pytest.raises(ValueError, match="quantile"):
        CostModel(quantile=0.2)


def test_admission_is_deterministic_and_in_priority_order():
    clock = FakeClock()
    cm = CostModel(prior_ms={"opt": 10.0, "mand": 5.0}, min_samples=1000)  # priors only
    sched = FrameScheduler(budget_ms=33.0, cost=cm, clock=clock, safety_ms=1.0)
    sched.start()
    log: list = []
    assert sched.run("m", _unit(clock, 12, log, "m"), mandatory=True, stage="mand")[0]
    # remaining = 33 - 12 - 1 = 20: two optional 10 ms units fit, the third does not.
    assert sched.run("o1", _unit(clock, 10, log, "o1"), stage="opt")[0]
    assert sched.run("o2", _unit(clock, 9, log, "o2"), stage="opt")[0]
    assert not sched.run("o3", _unit(clock, 1, log, "o3"), stage="opt")[0]
    assert log == ["m", "o1", "o2"] and sched.skipped == ["o3"]
    assert clock.now() == 31.0 <= 33.0


def test_mandatory_work_runs_even_when_over_budget_and_teaches_the_model():
    clock = FakeClock()
    cm = CostModel(min_samples=1)
    sched = FrameScheduler(budget_ms=10.0, cost=cm, clock=clock, safety_ms=0.0)
    sched.start()
    log: list = []
    ran, _ = sched.run("big", _unit(clock, 25, log, "big"), mandatory=True)
    assert ran and sched.remaining() < 0
    assert cm.predict("big") == pytest.approx(25.0)  # the overrun was observed
    # Next frame: the same work as optional is now predicted not to fit and is degraded away.
    sched.start()
    assert not sched.run("big", _unit(clock, 25, log, "big"))[0]
    assert sched.skipped == ["big"]


def test_no_budget_admits_everything():
    clock = FakeClock()
    sched = FrameScheduler(budget_ms=None, clock=clock)
    sched.start()
    log: list = []
    for i in range(5):
        assert sched.run(f"u{i}", _unit(clock, 100, log, i))[0]
    assert len(log) == 5 and sched.skipped == []


def test_frame_start_time_counts_queueing():
    clock = FakeClock(100.0)
    sched = FrameScheduler(budget_ms=33.0, clock=clock, safety_ms=0.0)
    sched.start(t0=90.0)  # the frame waited 10 ms before processing began
    assert sched.elapsed() == 10.0 and sched.remaining() == 23.0


def test_recognizer_degrades_under_a_tight_budget_with_fake_clock(tmp_path):
    """With a budget too small for optional work, the recognizer skips it and says so; without one it runs."""
    from objrec import ModelDB, Recognizer
    from objrec.data import sample_background, sample_objects
    from objrec.scenes import compose_scene

    objs = sample_objects()
    db = ModelDB.create(tmp_path / "db")
    for n, img in objs.items():
        db.enroll(n, img)
    scene = compose_scene(sample_background((640, 480)), objs, rng=1, frame_size=(640, 480), area_fraction=(0.1, 0.15))

    class TickClock(FakeClock):
        """Every reading costs 1 ms: the frame's work takes deterministic, nonzero time."""

        def now(self):
            self.t += 1.0
            return self.t

    rec = Recognizer(db, budget_ms=8.0, clock=TickClock(), track=False)
    r = rec.process(scene.image)
    assert len(r.detections) == 1  # only the mandatory best candidate was verified
    assert any(s.startswith("verify:") for s in r.skipped)
    full = Recognizer(db, budget_ms=None, clock=FakeClock(), track=False).process(scene.image)
    assert len(full.detections) == 3 and full.skipped == []


def test_frame_runs_blas_on_one_thread_and_restores_it(tmp_path):
    """BLAS's spinning workers would steal the cores from the next stage: one thread inside a frame only."""
    from threadpoolctl import threadpool_info

    from objrec import ModelDB, Recognizer
    from objrec.data import sample_background, sample_objects

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    db = ModelDB.create(tmp_path / "db")
    for n, img in sample_objects().items():
        db.enroll(n, img)
    rec = Recognizer(db, budget_ms=None, track=False)
    seen = []
    inner = rec._process

    def spy(frame, sched):
        seen.append(blas_threads())
        return inner(frame, sched)

    rec._process = spy
    before = blas_threads()
    rec.process(sample_background((320, 240)))
    assert seen and seen[0] and all(n == 1 for n in seen[0])
    assert blas_threads() == before


def test_degrade_level_follows_the_load_of_the_mandatory_part(tmp_path):
    """Up one level per frame whose mandatory part used more than DEGRADE_HIGH of the budget, down one after
    DEGRADE_CALM quiet frames in a row; and the level shrinks what the mandatory search may describe."""
    import objrec.recognizer as R
    from objrec import ModelDB, Recognizer
    from objrec.data import sample_objects

    db = ModelDB.create(tmp_path / "db")
    for n, img in sample_objects().items():
        db.enroll(n, img)
    rec = Recognizer(db, budget_ms=30.0, clock=FakeClock(), track=False)
    top = len(R.DEGRADE_LEVELS) - 1
    busy, quiet, middle = 30.0 * (R.DEGRADE_HIGH + 0.05), 30.0 * (R.DEGRADE_LOW - 0.05), 30.0 * 0.6
    for k in range(top + 3):
        rec._adapt_level(busy)
        assert rec.level == min(k + 1, top)
    for _ in range(R.DEGRADE_CALM - 1):
        rec._adapt_level(quiet)
    assert rec.level == top
    rec._adapt_level(middle)  # not quiet: the count starts again
    for _ in range(R.DEGRADE_CALM - 1):
        rec._adapt_level(quiet)
    assert rec.level == top
    rec._adapt_level(quiet)
    assert rec.level == top - 1
    # Levels only ever shrink the search.
    regions, share, scale = zip(*R.DEGRADE_LEVELS, strict=True)
    assert list(regions) == sorted(regions, reverse=True) and list(share) == sorted(share, reverse=True)
    assert list(scale) == sorted(scale, reverse=True) and R.DEGRADE_LEVELS[0] == (8, 1.0, 1.0)
    # Without a budget there is nothing to degrade.
    free = Recognizer(db, budget_ms=None, clock=FakeClock(), track=False)
    free._adapt_level(1e6)
    assert free.level == 0
