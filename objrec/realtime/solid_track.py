"""A track of an object verified without a plane, followed by its points and a robust 2D motion.

An object with depth does not follow a homography from its model image, so its track keeps no model: it
follows points in the frame (the detection's inliers, topped up with Shi-Tomasi corners inside its outline)
with the same optical flow as the planar tracks, and moves the detection's outline with a similarity
(rotation, uniform scale, translation) fitted robustly to the followed points. Between nearby frames the image
of a rigid object moves close to a similarity; over longer spans its depth shows (parallax, faces turning),
so the similarity is fitted from a reference (the positions at the anchor, renewed at a cadence) rather than
from the first frame, and the points themselves continue from where the flow puts them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import cv2
import numpy as np

from objrec.geometry import outline_in_frame
from objrec.realtime.flow import seed_points
from objrec.realtime.track_state import TrackState, state_of
from objrec.types import Detection

if TYPE_CHECKING:
    from objrec.realtime.tracker import TrackParams

__all__ = ["SolidTrack", "spread_subset"]


@dataclass(eq=False)
class SolidTrack:
    """One object verified without a plane, followed from frame to frame.

    There is no appearance check for such a track: the check compares the frame with the enrolled image
    through a homography, which an object with depth does not follow. The detector's re-detections confirm
    it instead, and only they give it new points (see :meth:`replenish`); without them it ends when too few
    of its points are followed (``"support"``) or too little of its outline is left in the frame
    (``"visibility"``).

    Attributes
    ----------
    ref_pts : (k, 2) float32
        The points where they were in the reference frame (the anchor, or the last :meth:`rebase`).
    pts : (k, 2) float32
        Where they are in the last frame.
    ref_outline, outline : (n, 2) float64
        The object's outline (convex) in the reference frame and in the last frame.
    motion : (3, 3) float64
        The reference-to-last-frame similarity.
    step_motion : (3, 3) float64 or None
        The last frame-to-frame motion (None: just anchored), which predicts the next frame.
    track_id : int
        The track's number, unique in the stream.
    name : str
        The object's name.
    model_size : tuple of int
        The model image's (width, height).
    score : float
        The score of the detection it was anchored on.
    confirmed, checked, asked, asked_before, anchor_inliers, seeded : int
        As a planar :class:`~objrec.realtime.tracker.Track`'s (frame numbers, -1 for never; the anchor's inliers;
        points after the last replenishment).
    rough, shown : bool
        As a planar track's: not yet confirmed by a full-quality search; reported under a budget.
    visible, anchored_visible : float
        The share of the outline inside the frame, now and when the detector last anchored or confirmed it.
    view : int
        The enrolled view of the object its detection matched.
    lost_reason : str or None
        Why it ended (``LostTrack.reason``); None while it is followed.
    history : deque
        ``(frame, None)`` entries, as a planar track's (it has no homography).

    References
    ----------
    Fischler, M. A. and Bolles, R. C., "Random sample consensus", Communications of the ACM 24(6), 1981,
    doi:10.1145/358669.358692 (the robust fit). Kalal, Z., Mikolajczyk, K. and Matas, J., "Forward-Backward
    Error: Automatic Detection of Tracking Failures", ICPR 2010, doi:10.1109/ICPR.2010.675 (the flow's check).
    """

    track_id: int
    name: str
    model_size: tuple[int, int]
    ref_pts: np.ndarray
    pts: np.ndarray
    ref_outline: np.ndarray
    score: float
    confirmed: int
    checked: int
    view: int = 0
    asked: int = -1
    asked_before: int = -1
    anchor_inliers: int = 0
    rough: bool = True
    shown: bool = False
    seeded: int = 0
    visible: float = 1.0
    anchored_visible: float = 1.0
    motion: np.ndarray = field(default_factory=lambda: np.eye(3))
    step_motion: np.ndarray | None = None
    lost_reason: str | None = None  # why it ended (LostTrack.reason); None while it is followed

    homography = None  # no plane: the interface of a planar track, for code that serves both
    history: deque = field(default_factory=lambda: deque(maxlen=1))  # (frame, None): as a planar track's

    @classmethod
    def anchor(
        cls,
        d: Detection,
        gray: np.ndarray,
        track_id: int,
        frame: int,
        size: tuple[int, int],
        points: int,
        min_points: int,
    ) -> SolidTrack | None:
        """A track for the detection ``d`` (``homography=None``) of an object whose model image is ``size``
        (width, height) in ``gray``: up to ``points`` of its inliers,
        spread over it, and strong corners inside its outline up to ``points`` in all; None when fewer than
        ``min_points`` can be followed.

        Parameters
        ----------
        d : Detection
            The detection (``homography=None``).
        gray : np.ndarray
            The frame, grayscale.
        track_id : int
            The new track's number.
        frame : int
            The frame's number.
        size : tuple of int
            The model image's (width, height).
        points : int
            The most points the track follows.
        min_points : int
            The fewest it can be followed with.
        """
        outline = np.asarray(d.outline, np.float64)
        inl = np.zeros((0, 2), np.float32) if d.inlier_xy is None else np.asarray(d.inlier_xy, np.float32)
        pts = spread_subset(inl, points)
        if len(pts) < points:
            pts = np.concatenate([pts, seed_points(gray, outline, points - len(pts), avoid=pts)])
        if len(pts) < min_points:
            return None
        return cls(
            track_id, d.name, size, pts.copy(), pts, outline, d.score, frame, frame, d.view,
            anchor_inliers=d.inliers, seeded=len(pts), visible=d.visible_fraction,
            anchored_visible=d.visible_fraction,
        )  # fmt: skip

    @property
    def state(self) -> TrackState:
        """The track's state (:class:`~objrec.realtime.track_state.TrackState`), as a planar track's."""
        return state_of(self.rough, self.shown, self.lost_reason)

    @property
    def outline(self) -> np.ndarray:
        return _apply(self.motion, self.ref_outline)

    @property
    def corners(self) -> np.ndarray:
        """The box around the outline, as (4, 2) corners."""
        q = self.outline
        (x0, y0), (x1, y1) = q.min(axis=0), q.max(axis=0)
        return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)

    @property
    def support(self) -> float:
        return len(self.pts) / max(self.seeded, 1)

    def predict(self) -> np.ndarray:
        """Where the points are expected in the next frame: the last frame-to-frame motion repeated."""
        if self.step_motion is None:
            return self.pts
        return _apply(self.step_motion, self.pts).astype(np.float32)

    def follow(self, moved: np.ndarray, good: np.ndarray, shape: tuple[int, int], p: TrackParams) -> str | None:
        """Fit the similarity from the reference to the followed points (``moved``, those ``good``) in a frame of
        ``shape`` with RANSAC (``p.refit_px``: :class:`~objrec.realtime.tracker.TrackParams`); the reason the
        track ends, or None.

        Parameters
        ----------
        moved : np.ndarray
            (k, 2) float32: where the flow put the points.
        good : np.ndarray
            (k,) bool: the points that passed the flow's check.
        shape : tuple of int
            The frame's (rows, cols).
        p : TrackParams
            The tracking settings.
        """
        need = max(p.min_points, int(np.ceil(p.min_support * self.seeded)))
        if int(good.sum()) < need:
            return "support"
        src, dst = self.ref_pts[good], moved[good]
        A, mask = cv2.estimateAffinePartial2D(
            src, dst, method=cv2.RANSAC, ransacReprojThreshold=p.refit_px, maxIters=200, confidence=0.995
        )
        if A is None or not np.all(np.isfinite(A)) or np.linalg.det(A[:, :2]) <= 1e-6:
            return "support"
        inl = mask.ravel().astype(bool)
        if int(inl.sum()) < need:
            return "support"
        M = np.vstack([A, [0.0, 0.0, 1.0]])
        visible = _inside_share(_apply(M, self.ref_outline), shape)
        if visible < p.min_visible:
            return "visibility"
        self.step_motion = M @ np.linalg.inv(self.motion)
        self.motion, self.visible = M, visible
        self.ref_pts, self.pts = src[inl], dst[inl].astype(np.float32)
        return None

    def rebase(self) -> None:
        """Make the last frame the reference: the similarity is then fitted over the frames since, a span
        short enough for an object with depth to move close to one."""
        self.ref_outline, self.ref_pts = self.outline, self.pts.copy()
        self.motion = np.eye(3)

    def replenish(self, gray: np.ndarray, points: int) -> None:
        """Top the track up with corners inside its outline to ``points`` (for a track the detector has just
        confirmed: the object is where the track says), and rebase it.

        Parameters
        ----------
        gray : np.ndarray
            The frame, grayscale.
        points : int
            The points the track is topped up to.
        """
        want = points - len(self.pts)
        if want > 0:
            new = seed_points(gray, self.outline, want, avoid=self.pts)
            self.pts = np.concatenate([self.pts, new]).astype(np.float32)
        self.seeded = len(self.pts)
        self.rebase()

    def explains(self, d: Detection, tolerance_px: float) -> bool:
        """Whether the detection ``d`` lies within the track's outline grown by ``tolerance_px``: its own outline
        (or its corners, for a detection with a homography), every vertex."""
        theirs = np.asarray(d.outline if d.homography is None else d.corners, np.float64)
        q = np.float32(self.outline).reshape(-1, 1, 2)
        return all(cv2.pointPolygonTest(q, (float(x), float(y)), True) >= -tolerance_px for x, y in theirs)

    def detection(self, state: str) -> Detection:
        return Detection(
            self.name, self.score, len(self.pts), None, self.corners, self.visible,
            inlier_xy=self.pts.astype(np.float64), state=state, track_id=self.track_id, view=self.view,
            outline=self.outline,
        )  # fmt: skip


def spread_subset(xy: np.ndarray, n: int) -> np.ndarray:
    """Up to ``n`` of the points ``xy`` (k, 2) spread over them: farthest-point sampling from the one nearest
    their centroid (Gonzalez, "Clustering to minimize the maximum intercluster distance", Theoretical Computer
    Science 38, 1985, doi:10.1016/0304-3975(85)90224-5)."""
    xy = np.asarray(xy, np.float32).reshape(-1, 2)
    if len(xy) <= n:
        return xy.copy()
    if n <= 0:
        return xy[:0].copy()
    first = int(np.argmin(((xy - xy.mean(axis=0)) ** 2).sum(axis=1)))
    chosen = [first]
    dist = ((xy - xy[first]) ** 2).sum(axis=1)
    for _ in range(n - 1):
        i = int(np.argmax(dist))
        chosen.append(i)
        dist = np.minimum(dist, ((xy - xy[i]) ** 2).sum(axis=1))
    return xy[chosen].copy()


def _apply(M: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """Points (k, 2) moved by the affine map in the top two rows of ``M``."""
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    return xy @ M[:2, :2].T + M[:2, 2]


def _inside_share(outline: np.ndarray, shape: tuple[int, int]) -> float:
    """The share of the convex ``outline``'s area inside a frame of ``shape`` (height, width)."""
    h, w = shape[:2]
    q = np.float32(outline).reshape(-1, 2)
    area = float(cv2.contourArea(q))
    if area <= 0:
        return 0.0
    inter, _ = outline_in_frame(q, w, h)
    return float(np.clip(inter / area, 0.0, 1.0))
