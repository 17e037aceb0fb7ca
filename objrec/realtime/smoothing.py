"""Steady corners: the One-Euro filter on each tracked object's corners, and the homography refitted to them.

A detector's corners move by a pixel or more from frame to frame even on a still object (a keypoint more or
less, sensor noise); drawn as they are, outlines shake. The One-Euro filter (Casiez, Roussel and Vogel, 2012)
is a first-order low-pass filter whose cutoff rises with the signal's speed: a still object is smoothed
hard, a moving one followed with little lag. A first-order filter still trails a steady motion by the speed
times its time constant, which a hand-held camera shows as an outline lagging behind the object; so by
default the filter also predicts: it blends each sample with its last estimate carried forward by the
filtered speed, less a dead band that takes the speed a still corner's noise shows for no motion.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import cv2
import numpy as np

from objrec.geometry import model_corners
from objrec.types import Detection

__all__ = ["SmoothParams", "OneEuroFilter", "CornerSmoother", "smoothing_alpha", "is_convex"]

#: The frame rate assumed for a time step that cannot be measured (the second sample of a filter whose
#: timestamps did not advance), in Hz.
FALLBACK_RATE_HZ = 30.0


def smoothing_alpha(cutoff_hz: np.ndarray | float, dt_s: float) -> np.ndarray | float:
    """The smoothing factor of a first-order low-pass filter with cutoff ``cutoff_hz`` sampled every ``dt_s``
    seconds: ``1 / (1 + tau / dt)`` with the time constant ``tau = 1 / (2 pi cutoff)``."""
    tau = 1.0 / (2.0 * math.pi * cutoff_hz)
    return 1.0 / (1.0 + tau / dt_s)


@dataclass(frozen=True)
class SmoothParams:
    """Parameters of the One-Euro filter (Casiez et al. 2012), for positions in pixels.

    Attributes
    ----------
    min_cutoff : float
        Cutoff frequency in Hz when the position is still. Lower: less jitter, more lag when motion starts.
        A still corner's white noise is scaled by ``sqrt(alpha / (2 - alpha))``, the spread of an exponential
        average: with the default 1 Hz, 0.42 at 15 fps, 0.31 at 30 fps and 0.22 at 60 fps (the speed term
        lets a little more through).
    beta : float
        How fast the cutoff rises with speed, in Hz per (px/s): the cutoff is ``min_cutoff + beta * |speed|``
        (the speed less ``deadband``). Higher: the estimate follows changes of motion sooner, more jitter is
        let through while moving. With ``predict`` off, a corner moving at ``v`` px/s trails by about
        ``v / (2 pi cutoff)``: 0.05 (the filter's classic setting) at 60 px/s, 2 px a frame at 30 fps, trails
        by 1.5 px.
    d_cutoff : float
        Cutoff frequency in Hz of the low-pass filter on the speed estimate (1 Hz, the paper's choice).
    predict : bool
        Blend each sample with the last estimate carried forward by the filtered speed (less ``deadband``)
        instead of the last estimate itself: a constant-speed motion is followed without lag, at the price
        of a little overshoot when a motion stops, for as long as the speed estimate takes to settle
        (``1 / (2 pi d_cutoff)``).
    deadband : float
        Speeds up to this (px/s) are taken for a still corner's noise: the filtered speed is shrunk towards 0
        by it (soft threshold) before it predicts and raises the cutoff. A still corner with noise of 1 px per
        frame at 30 fps shows a filtered speed spread of about 13 px/s; a hand-held camera's steady motion is
        tens of px/s.

    Notes
    -----
    The defaults were chosen on real footage (``objrec eval video:`` on ``real_video/visp_postcard``: the
    median alignment error of the smoothed corners against the raw ones) with the jitter of a still scene's
    corners under added noise no higher than the classic filter's (``min_cutoff`` 1, ``beta`` 0.05, no
    prediction), and confirmed on the other clips and on a composed hand-held scene (``bench/README.md``,
    "How to tune"). ``SmoothParams(beta=0.05, predict=False, deadband=0.0)`` is the classic One-Euro filter.

    References
    ----------
    Casiez, G., Roussel, N., Vogel, D. (2012). 1€ filter: a simple speed-based low-pass filter for noisy
    input in interactive systems. CHI '12, 2527-2530. doi:10.1145/2207676.2208639
    """

    min_cutoff: float = 1.0
    beta: float = 1.0
    d_cutoff: float = 1.0
    predict: bool = True
    deadband: float = 15.0

    def __post_init__(self) -> None:
        for name in ("min_cutoff", "d_cutoff"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: expected a positive frequency in Hz, got {value!r}")
        for name in ("beta", "deadband"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: expected a non-negative number, got {value!r}")
        if not isinstance(self.predict, bool):
            raise ValueError(f"predict: expected True or False, got {self.predict!r}")


class OneEuroFilter:
    """The One-Euro filter on an array of positions (each element filtered on its own), with time steps from
    the samples' timestamps.

    Parameters
    ----------
    params : SmoothParams, optional
        Cutoffs and speed coefficient (default: :class:`SmoothParams`'s).

    Notes
    -----
    For a sample ``x`` at time ``t`` (Algorithm 1 of the paper), with ``Te`` the time since the previous
    sample and ``alpha(fc) = 1 / (1 + tau / Te)``, ``tau = 1 / (2 pi fc)``::

        dx     = (x - x_hat_prev) / Te
        dx_hat = alpha(d_cutoff) * dx + (1 - alpha(d_cutoff)) * dx_hat_prev
        fc     = min_cutoff + beta * |dx_hat|
        x_hat  = alpha(fc) * x + (1 - alpha(fc)) * x_hat_prev

    Here ``|dx_hat|`` in the cutoff is first shrunk by ``deadband`` towards 0 (``v``), and with ``predict``
    ``x_hat_prev`` in the last line is carried forward first: ``x_hat_prev + v * Te``.

    The first sample passes unchanged, with a speed of 0. A timestamp that does not advance (a repeated or
    out-of-order one) is filtered with the last time step measured, or :data:`FALLBACK_RATE_HZ` before any.

    References
    ----------
    Casiez, G., Roussel, N., Vogel, D. (2012). 1€ filter: a simple speed-based low-pass filter for noisy
    input in interactive systems. CHI '12, 2527-2530. doi:10.1145/2207676.2208639

    Examples
    --------
    >>> f = OneEuroFilter(SmoothParams(min_cutoff=1.0, beta=0.0))
    >>> f(np.array([10.0]), 0.0)
    array([10.])
    >>> f(np.array([11.0]), 1000 / 30)  # one frame at 30 fps later: alpha = 1 / (1 + 30 / (2 pi))
    array([10.17317072])
    """

    def __init__(self, params: SmoothParams | None = None) -> None:
        self.params = params or SmoothParams()
        self.reset()

    def reset(self) -> None:
        """Forget the signal: the next sample starts the filter again."""
        self.x_hat: np.ndarray | None = None
        self.dx_hat: np.ndarray | None = None
        self.t_ms: float | None = None
        self.dt_s: float | None = None

    def __call__(self, x: np.ndarray, t_ms: float) -> np.ndarray:
        """The filtered value of sample ``x`` taken at ``t_ms`` (milliseconds on any clock that only advances).

        Parameters
        ----------
        x : ndarray
            The sample; every sample of a filter has the same shape.
        t_ms : float
            Its timestamp in milliseconds.

        Returns
        -------
        ndarray
            The filtered sample (float64, the shape of ``x``).
        """
        x = np.asarray(x, np.float64)
        if self.x_hat is None:
            self.x_hat, self.dx_hat, self.t_ms = x.copy(), np.zeros_like(x), float(t_ms)
            return x.copy()
        assert self.dx_hat is not None and self.t_ms is not None  # set with x_hat by the first sample
        if x.shape != self.x_hat.shape:
            raise ValueError(f"x: expected shape {self.x_hat.shape} as the filter's earlier samples, got {x.shape}")
        dt = (float(t_ms) - self.t_ms) / 1e3
        if dt > 0:
            self.dt_s, self.t_ms = dt, float(t_ms)
        dt = self.dt_s or 1.0 / FALLBACK_RATE_HZ
        p = self.params
        a_d = smoothing_alpha(p.d_cutoff, dt)
        self.dx_hat = a_d * (x - self.x_hat) / dt + (1.0 - a_d) * self.dx_hat
        speed = np.sign(self.dx_hat) * np.maximum(np.abs(self.dx_hat) - p.deadband, 0.0)
        a = smoothing_alpha(p.min_cutoff + p.beta * np.abs(speed), dt)
        prior = self.x_hat + speed * dt if p.predict else self.x_hat
        self.x_hat = a * x + (1.0 - a) * prior
        return self.x_hat.copy()


def is_convex(quad: np.ndarray) -> bool:
    """The (4, 2) corners are a strictly convex quadrilateral (every turn the same way, none straight)."""
    edges = np.roll(quad, -1, axis=0) - quad
    turns = edges[:, 0] * np.roll(edges[:, 1], -1) - edges[:, 1] * np.roll(edges[:, 0], -1)
    return bool(np.all(turns > 0) or np.all(turns < 0))


class CornerSmoother:
    """A One-Euro filter on the corners of each object in view; each detection's homography refitted to its
    smoothed corners.

    Parameters
    ----------
    params : SmoothParams, optional
        The filter's parameters (default: :class:`SmoothParams`'s).
    model_size : callable
        ``model_size(name) -> (width, height)`` of the object's model image, whose outline
        (:func:`objrec.geometry.model_corners`) the refitted homography maps onto the smoothed corners.

    Notes
    -----
    Objects are told apart by their detection's name and ``track_id`` (two copies of one object are two
    tracks of the :class:`~objrec.realtime.tracker.Tracker`). A track missing from a frame is forgotten at
    once: when it is found again its filter starts afresh from the new corners, so an outline is never pulled
    towards where the object was before. Smoothed
    corners that are not a convex quadrilateral (no view of a flat object in front of the camera) restart
    the object's filter from the detection's own corners, which it then keeps with its own homography.
    """

    def __init__(self, params: SmoothParams | None = None, *, model_size: Callable[[str], tuple[int, int]]) -> None:
        self.params = params or SmoothParams()
        self.model_size = model_size
        self.filters: dict[tuple[str, int | None], OneEuroFilter] = {}

    def update(self, detections: list[Detection], t_ms: float) -> list[Detection]:
        """The frame's detections with smoothed corners and homographies, in the same order.

        Parameters
        ----------
        detections : list of Detection
            The frame's detections as verified (one per object).
        t_ms : float
            The frame's capture time in milliseconds.

        Returns
        -------
        list of Detection
            Each with ``corners`` smoothed, ``homography`` mapping the model's outline onto them and
            ``raw_corners`` the detection's own corners; score, inliers and visible fraction as verified.
        """
        seen = {_key(d) for d in detections}
        self.filters = {k: f for k, f in self.filters.items() if k in seen}
        return [self._smoothed(d, t_ms) for d in detections]

    def _smoothed(self, d: Detection, t_ms: float) -> Detection:
        if d.homography is None:  # an object verified without a plane: its outline is its own
            return d
        f = self.filters.setdefault(_key(d), OneEuroFilter(self.params))
        corners = f(d.corners, t_ms)
        if not is_convex(corners):
            f.reset()
            return dataclasses.replace(d, raw_corners=f(d.corners, t_ms))
        w, h = self.model_size(d.name)
        H = cv2.getPerspectiveTransform(model_corners(w, h).astype(np.float32), corners.astype(np.float32))
        return dataclasses.replace(d, homography=H, corners=corners, raw_corners=d.corners)

    def reset(self) -> None:
        """Forget every object (a new, unrelated sequence of frames follows)."""
        self.filters.clear()


def _key(d: Detection) -> tuple[str, int | None]:
    """A filter per track (two copies of one object are two tracks), per object name without tracking ids."""
    return d.name, d.track_id
