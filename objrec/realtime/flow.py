"""Sparse optical flow for the tracking stage: every track's points followed in one pyramidal Lucas-Kanade call.

OpenCV's ``calcOpticalFlowPyrLK`` costs a pyramid per image (built inside each call: the Python binding takes
images, not prebuilt pyramids) plus a share per point, so all tracks' points go into one call per direction,
on the part of the frame around them. A point is kept when both directions converge and the
backward flow returns within ``fb_max_px`` of where it started (Kalal et al., "Forward-Backward Error:
Automatic Detection of Tracking Failures", ICPR 2010): a point that slid along an edge, left the object or
was covered does not come back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from objrec.geometry import forward_backward

__all__ = ["FlowParams", "PointFlow", "seed_points"]


@dataclass(frozen=True)
class FlowParams:
    """Settings of the tracking stage's optical flow.

    Attributes
    ----------
    win_size : int
        Side of Lucas-Kanade's window in pixels. Smaller windows cost less per point and follow the
        object's own texture rather than its surroundings; they converge over shorter motions per level.
    max_level : int
        Pyramid levels above the frame (0: the frame only). Each level doubles the motion beyond the
        prediction that converges (the tracks predict each point from their last two homographies, so a
        steady pan costs no levels).
    fb_max_px : float
        A point whose backward flow returns further than this from its start is dropped.
    max_iters, epsilon : int, float
        Lucas-Kanade's stopping criteria per pyramid level.
    """

    win_size: int = 11
    max_level: int = 2
    fb_max_px: float = 0.7
    max_iters: int = 20
    epsilon: float = 0.03

    def __post_init__(self) -> None:
        if self.win_size < 5 or self.win_size % 2 == 0:
            raise ValueError(f"win_size: expected an odd number >= 5, got {self.win_size}")
        if not 0 <= self.max_level <= 6:
            raise ValueError(f"max_level: expected 0..6, got {self.max_level}")
        if not self.fb_max_px > 0:
            raise ValueError(f"fb_max_px: expected a positive number, got {self.fb_max_px}")


class PointFlow:
    """Follows points from the previous frame to the current one, forward and backward.

    The last frame passed to :meth:`track` (or :meth:`remember`) is kept for the next one.
    """

    def __init__(self, params: FlowParams | None = None) -> None:
        self.params = params or FlowParams()
        self._prev: np.ndarray | None = None

    def remember(self, gray: np.ndarray) -> None:
        """Keep ``gray`` as the previous frame (a frame whose objects were just found)."""
        self._prev = gray

    def forget(self) -> None:
        self._prev = None

    def track(
        self, gray: np.ndarray, pts: np.ndarray, guess: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Follow ``pts`` (N, 2) float32 from the previous frame into ``gray``, starting from ``guess`` (N, 2)
        (where the points are predicted to be; default: where they were).

        Returns the new positions (N, 2) float32 and a boolean mask of the points that passed the
        forward-backward check. ``gray`` becomes the previous frame. Without a previous frame of the same
        size every point fails. Both calls run on the part of the frames around the points and their
        predictions (the pyramids are built per call, in proportion to the pixels).
        """
        prev, self._prev = self._prev, gray
        pts = np.asarray(pts, np.float32).reshape(-1, 2)
        n = len(pts)
        if prev is None or prev.shape != gray.shape or n == 0:
            return pts.copy(), np.zeros(n, bool)
        guess = pts if guess is None else np.asarray(guess, np.float32).reshape(-1, 2)
        p = self.params
        h, w = gray.shape[:2]
        # A window at the top level reaches (win_size / 2) * 2**max_level frame pixels, plus the motion beyond
        # the guess that converges there; the crop needs no more around the points.
        reach = (p.win_size // 2 + 1) * 2**p.max_level + p.win_size
        both = np.concatenate([pts, guess])
        x0, y0 = np.maximum(np.floor(both.min(axis=0)) - reach, 0).astype(int)
        x1, y1 = np.minimum(np.ceil(both.max(axis=0)) + reach + 1, [w, h]).astype(int)
        if x1 - x0 < p.win_size or y1 - y0 < p.win_size:
            return pts.copy(), np.zeros(n, bool)
        off = np.array([x0, y0], np.float32)
        a, b = prev[y0:y1, x0:x1], gray[y0:y1, x0:x1]
        criteria = (p.max_iters, p.epsilon)
        p1, good = forward_backward(a, b, pts - off, guess - off, p.win_size, p.max_level, criteria, p.fb_max_px)
        out = p1 + off
        good &= (out[:, 0] >= 0) & (out[:, 1] >= 0) & (out[:, 0] <= w - 1) & (out[:, 1] <= h - 1)
        return out, good


def seed_points(
    gray: np.ndarray,
    outline: np.ndarray,
    n: int,
    avoid: np.ndarray | None = None,
    hidden: Sequence[np.ndarray] = (),
    kept: np.ndarray | None = None,
    lost: np.ndarray | None = None,
) -> np.ndarray:
    """Up to ``n`` strong corners (Shi-Tomasi) of ``gray`` inside ``outline`` (4, 2) shrunk towards its centre,
    spread by a minimum distance that follows the outline's size, away from the ``avoid`` points and outside the
    ``hidden`` outlines (other objects', which may be in front: a corner there may be theirs, and would carry the
    track away with them).

    ``kept`` and ``lost`` are where the track kept its points and where it lost points lately (frame pixels):
    a corner nearer to one it lost than to every one it kept is left out, since something not tracked may be
    in front there (a hand), whose corners would carry the track away as it moves. The strongest corners
    that remain are taken.

    Returns (k, 2) float32 positions in frame pixels (refined to sub-pixel accuracy).
    """
    h, w = gray.shape[:2]
    q = np.asarray(outline, np.float64).reshape(-1, 2)
    c = q.mean(axis=0)
    inner = c + 0.88 * (q - c)  # a window on the border would follow the background too
    x0, y0 = np.floor(np.clip(inner.min(axis=0), 0, [w, h])).astype(int)
    x1, y1 = np.ceil(np.clip(inner.max(axis=0), 0, [w, h])).astype(int)
    if x1 - x0 < 8 or y1 - y0 < 8 or n <= 0:
        return np.zeros((0, 2), np.float32)
    mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
    cv2.fillConvexPoly(mask, np.round(inner - [x0, y0]).astype(np.int32), 255)
    side = float(np.sqrt(max(cv2.contourArea(inner.astype(np.float32)), 1.0)))
    min_dist = max(4.0, side / (2.0 * np.sqrt(n)))
    for other in hidden:
        cv2.fillPoly(mask, [np.round(np.asarray(other, np.float64).reshape(-1, 2) - [x0, y0]).astype(np.int32)], 0)
    if avoid is not None and len(avoid):
        for x, y in np.round(np.asarray(avoid) - [x0, y0]).astype(int):
            cv2.circle(mask, (int(x), int(y)), int(min_dist), 0, -1)
    screen = kept is not None and lost is not None and len(kept) > 0 and len(lost) > 0
    roi = gray[y0:y1, x0:x1]
    # Some of the strongest corners may be screened out: more are found, at the same spacing.
    found = cv2.goodFeaturesToTrack(roi, 3 * n if screen else n, 0.01, min_dist, mask=mask, blockSize=5)
    if found is None:
        return np.zeros((0, 2), np.float32)
    if screen:
        xy = found.reshape(-1, 2) + np.array([x0, y0], np.float32)
        from scipy.spatial import cKDTree  # imported on first use: it adds to every process's start-up

        found = found[cKDTree(kept).query(xy)[0] <= cKDTree(lost).query(xy)[0]][:n]
        if not len(found):
            return np.zeros((0, 2), np.float32)
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 10, 0.03)
    found = cv2.cornerSubPix(roi, np.ascontiguousarray(found, np.float32), (3, 3), (-1, -1), crit)
    return (found.reshape(-1, 2) + np.array([x0, y0], np.float32)).astype(np.float32)
