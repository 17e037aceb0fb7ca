"""The One-Euro filter against the paper's equations, its jitter and lag, and the corner smoother's life cycle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from objrec.geometry import map_points, model_corners
from objrec.realtime.smoothing import CornerSmoother, OneEuroFilter, SmoothParams, is_convex
from objrec.types import Detection

FRAME_MS = 1000.0 / 30.0


def one_euro_reference(
    xs: list[float],
    ts_ms: list[float],
    min_cutoff: float,
    beta: float,
    d_cutoff: float,
    predict: bool = False,
    deadband: float = 0.0,
):
    """Algorithm 1 of Casiez et al. (CHI 2012) on a scalar signal, written out as a plain loop; with ``predict``
    the last estimate is first carried forward by the filtered speed less ``deadband`` (soft threshold), which
    also drives the cutoff."""

    def alpha(rate: float, cutoff: float) -> float:
        tau = 1.0 / (2.0 * math.pi * cutoff)
        te = 1.0 / rate
        return 1.0 / (1.0 + tau / te)

    out = []
    x_hat = dx_hat = t_prev = None
    for x, t in zip(xs, ts_ms, strict=True):
        if x_hat is None:
            x_hat, dx_hat = x, 0.0
        else:
            rate = 1000.0 / (t - t_prev)
            dx = (x - x_hat) * rate
            dx_hat = alpha(rate, d_cutoff) * dx + (1.0 - alpha(rate, d_cutoff)) * dx_hat
            v = math.copysign(max(abs(dx_hat) - deadband, 0.0), dx_hat)
            cutoff = min_cutoff + beta * abs(v)
            prior = x_hat + v / rate if predict else x_hat
            x_hat = alpha(rate, cutoff) * x + (1.0 - alpha(rate, cutoff)) * prior
        t_prev = t
        out.append(x_hat)
    return out


def _jitter(corners: np.ndarray) -> float:
    """Mean distance of each corner from its mean position over the frames (frames, 4, 2)."""
    return float(np.linalg.norm(corners - corners.mean(axis=0), axis=-1).mean())


def _square(x: float, y: float, side: float = 100.0) -> Detection:
    corners = np.array([[x, y], [x + side, y], [x + side, y + side], [x, y + side]], np.float64)
    H = np.array([[side / 200, 0, x], [0, side / 200, y], [0, 0, 1]], np.float64)  # a 200x200 model
    return Detection("a", 0.9, 30, H, corners, 0.8)


CLASSIC = {"predict": False, "deadband": 0.0}


@pytest.mark.parametrize(
    "params",
    [
        SmoothParams(),
        SmoothParams(1.0, 0.05, 1.0, **CLASSIC),
        SmoothParams(0.5, 0.2, 2.0, **CLASSIC),
        SmoothParams(3.0, 0.0, 1.0, **CLASSIC),
        SmoothParams(1.0, 0.5, 1.0, predict=True, deadband=0.0),
    ],
)
def test_filter_follows_the_paper_equations_element_by_element(params):
    rng = np.random.default_rng(4)
    n = 60
    ts = np.cumsum(rng.uniform(10.0, 70.0, n))  # uneven frame intervals, 14-100 fps
    xs = np.cumsum(rng.normal(0.0, 3.0, (n, 4, 2)), axis=0) + rng.uniform(0, 600, (4, 2))
    f = OneEuroFilter(params)
    got = np.array([f(x, t) for x, t in zip(xs, ts, strict=True)])
    for i, j in np.ndindex(4, 2):
        want = one_euro_reference(
            list(xs[:, i, j]), list(ts), params.min_cutoff, params.beta, params.d_cutoff, params.predict,
            params.deadband,
        )  # fmt: skip
        np.testing.assert_allclose(got[:, i, j], want, rtol=0, atol=1e-9)


def test_constant_signal_passes_unchanged():
    x = np.array([[12.5, -3.0], [640.25, 0.0]])
    f = OneEuroFilter()
    for k in range(50):
        np.testing.assert_allclose(f(x, k * FRAME_MS), x, rtol=0, atol=1e-9)


def test_still_corners_with_noise_jitter_at_most_half_as_much():
    """Corners of a still object with Gaussian noise of 1 px at 30 fps, default parameters."""
    rng = np.random.default_rng(0)
    truth = rng.uniform(0, 600, (4, 2))
    raw = truth + rng.normal(0.0, 1.0, (300, 4, 2))
    f = OneEuroFilter()
    smooth = np.array([f(x, k * FRAME_MS) for k, x in enumerate(raw)])
    assert _jitter(smooth[30:]) <= 0.5 * _jitter(raw[30:])


def test_ramp_and_step_are_followed_within_a_few_frames():
    """The classic filter on a corner moving 300 px/s for a second then stopping, and a 40 px jump: with beta > 0
    the lag stays a few pixels and is gone within a few frames; without the speed term it trails far behind."""
    ramp = np.minimum(np.arange(60), 30) * 300.0 / 30.0
    step = np.where(np.arange(60) < 30, 100.0, 140.0)
    for signal in (ramp, step):
        fast, slow = OneEuroFilter(SmoothParams(beta=0.05, **CLASSIC)), OneEuroFilter(SmoothParams(beta=0.0, **CLASSIC))
        lag_fast = np.array([abs(x - fast(np.array([x]), k * FRAME_MS)[0]) for k, x in enumerate(signal)])
        lag_slow = np.array([abs(x - slow(np.array([x]), k * FRAME_MS)[0]) for k, x in enumerate(signal)])
        assert lag_fast.max() <= 0.5 * lag_slow.max()
        assert lag_fast[34:].max() < 1.0  # within 4 frames of the motion's end
        assert lag_slow[34] > 5.0
    assert lag_fast[10:30].max() < 4.0  # during the ramp (10 px per frame), after it got going


def test_default_follows_a_ramp_without_lag_and_barely_overshoots():
    """The default (prediction with a dead band) on the same ramp and jump: within 0.2 px during the steady
    motion, at most 0.2 px past the stop, at most a pixel behind the jump in its own frame."""
    ramp = np.minimum(np.arange(60), 30) * 300.0 / 30.0
    step = np.where(np.arange(60) < 30, 100.0, 140.0)
    for signal in (ramp, step):
        f = OneEuroFilter(SmoothParams())
        lag = np.array([x - f(np.array([x]), k * FRAME_MS)[0] for k, x in enumerate(signal)])
        assert np.abs(lag[5:30]).max() < 0.2
        assert np.abs(lag[31:]).max() < 0.2
        assert abs(lag[30]) < 1.0


def test_a_repeated_timestamp_uses_the_last_time_step():
    a, b = OneEuroFilter(), OneEuroFilter()
    xs = [np.array([0.0]), np.array([5.0]), np.array([9.0])]
    got = [a(xs[0], 0.0), a(xs[1], FRAME_MS), a(xs[2], FRAME_MS)]
    want = [b(xs[0], 0.0), b(xs[1], FRAME_MS), b(xs[2], 2 * FRAME_MS)]
    np.testing.assert_array_equal(got, want)


def test_parameters_are_checked_by_name():
    with pytest.raises(ValueError, match="min_cutoff"):
        SmoothParams(min_cutoff=0.0)
    with pytest.raises(ValueError, match="d_cutoff"):
        SmoothParams(d_cutoff=-1.0)
    with pytest.raises(ValueError, match="beta"):
        SmoothParams(beta=-0.1)
    with pytest.raises(ValueError, match="x: expected shape"):
        f = OneEuroFilter()
        f(np.zeros((4, 2)), 0.0)
        f(np.zeros(3), FRAME_MS)


def test_smoother_refits_the_homography_and_keeps_the_raw_corners():
    s = CornerSmoother(model_size=lambda name: (200, 200))
    first = s.update([_square(100, 100)], 0.0)[0]
    np.testing.assert_array_equal(first.corners, first.raw_corners)  # a new object starts where it is
    d = _square(103, 98)
    out = s.update([d], FRAME_MS)[0]
    np.testing.assert_array_equal(out.raw_corners, d.corners)
    moved, jump = out.corners - first.corners, d.corners - first.corners
    assert np.all(np.abs(moved) > 0) and np.all(np.abs(moved) < np.abs(jump))  # part of the way
    np.testing.assert_allclose(map_points(out.homography, model_corners(200, 200)), out.corners, atol=1e-3)
    assert (out.name, out.score, out.inliers, out.visible_fraction) == ("a", d.score, d.inliers, 0.8)
    j = out.to_json()
    assert j["raw_corners"] == d.corners.tolist() and j["corners"] == out.corners.tolist()
    assert "raw_corners" not in d.to_json() and d.raw_corners is None


def test_an_object_missing_from_a_frame_restarts_where_it_comes_back():
    s = CornerSmoother(model_size=lambda name: (200, 200))
    for k in range(10):
        s.update([_square(100, 100)], k * FRAME_MS)
    s.update([], 10 * FRAME_MS)
    assert not s.filters
    back = s.update([_square(400, 300)], 11 * FRAME_MS)[0]
    np.testing.assert_array_equal(back.corners, _square(400, 300).corners)


def test_smoothed_corners_without_a_homography_restart_from_the_detection():
    """Three corners on a line are no convex outline: the detection keeps its own corners and homography."""
    d = _square(100, 100)
    flat = Detection("a", 0.9, 30, d.homography, [[0, 0], [10, 0], [20, 0], [0, 10]])
    assert is_convex(d.corners) and is_convex(d.corners[::-1]) and not is_convex(flat.corners)
    out = CornerSmoother(model_size=lambda name: (200, 200)).update([flat], 0.0)[0]
    np.testing.assert_array_equal(out.corners, flat.corners)
    np.testing.assert_array_equal(out.homography, flat.homography)
