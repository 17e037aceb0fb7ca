"""The degrade controller's steps and the resolution choice."""

from __future__ import annotations

import pytest

from objrec.realtime.degrade import DEGRADE_LEVELS, SCALE_LEVELS, DegradeController, fit_scale


def test_level_follows_the_load_of_the_mandatory_part():
    """Up one level per frame over ``high``, down one after ``calm`` quiet frames in a row; a frame between
    the thresholds restarts the count."""
    c = DegradeController(30.0, high=0.7, low=0.5, calm=10)
    top = len(DEGRADE_LEVELS) - 1
    busy, quiet, middle = 30.0 * 0.75, 30.0 * 0.45, 30.0 * 0.6
    for k in range(top + 3):
        c.observe(busy)
        assert c.level == min(k + 1, top)
    for _ in range(9):
        c.observe(quiet)
    assert c.level == top
    c.observe(middle)
    for _ in range(9):
        c.observe(quiet)
    assert c.level == top
    c.observe(quiet)
    assert c.level == top - 1 and c.current == DEGRADE_LEVELS[top - 1]
    c.reset()
    assert c.level == 0


def test_without_a_budget_there_is_nothing_to_degrade():
    c = DegradeController(None)
    c.observe(1e6)
    assert c.level == 0


def test_levels_only_ever_shrink_the_search():
    for attr in ("regions", "feature_share", "scale"):
        values = [getattr(lv, attr) for lv in DEGRADE_LEVELS]
        assert values == sorted(values, reverse=True)
    assert DEGRADE_LEVELS[0].feature_share == 1.0 and DEGRADE_LEVELS[0].scale == 1.0
    with pytest.raises(ValueError, match="low, high"):
        DegradeController(10.0, high=0.4, low=0.5)


@pytest.mark.parametrize("predicted, share", [(10, 20), (10, 10), (10, 6), (10, 5.5), (10, 2), (10, -1), (0, -1)])
def test_fit_scale_is_the_largest_level_whose_predicted_cost_fits(predicted, share):
    """Work predicted to cost nothing keeps full resolution, even when the frame is already late."""
    s = fit_scale(lambda x: predicted * x * x, share)
    fitting = [x for x in SCALE_LEVELS if predicted * x * x <= max(share, 0.0) or predicted == 0]
    assert s == (max(fitting) if fitting else min(SCALE_LEVELS))
