"""The tracking stage: objects found once are followed from frame to frame by their points.

Each detected object becomes a :class:`Track`: points of the object (Shi-Tomasi corners inside its outline,
with their positions on the model image) that pyramidal Lucas-Kanade follows into every new frame, all
tracks' points in one call (:class:`~objrec.realtime.flow.PointFlow`). The points that pass the
forward-backward check refit the object's homography robustly (RANSAC over model-to-frame correspondences,
so a point that drifts becomes an outlier instead of bending the outline); the appearance check of
verification (:func:`~objrec.matching.verify.edge_agreement` against the object's thumbnail) runs at a fixed
cadence and whenever support drops, and only a track that passes it gets new points. A track ends at once
(and is listed as lost) when too few of its points are followed, when its appearance check fails, or when
too little of it is left in the frame: it is never drawn where the object is not.

Detections of the detector meet the tracks here too (:meth:`Tracker.absorb`): a detection of a tracked
object re-anchors the track only when the two disagree by more than ``reanchor_px`` and the frame confirms the
detection's outline better than the track's (the appearance check), or when the track's support is low, so
re-anchoring never brings the detector's own jitter back; otherwise the detection confirms the track.
A detection that no track explains starts a new track (two copies of one object in view are two tracks). The
outlines of the tracks are where the detector need not look (:meth:`Tracker.outlines`).

An object verified without a plane (a detection with ``homography=None``) is followed by its points in the same
flow call and its outline moved by a robust similarity (:class:`~objrec.realtime.solid_track.SolidTrack`). It
has no appearance check (there is no homography to compare the thumbnail through): a detection of it re-anchors
its track when the detection's outline reaches beyond the track's by more than ``reanchor_px``, or when the
track's support is low, and otherwise confirms it and gives it new points.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import cv2
import numpy as np

from objrec.boxes import outline_box
from objrec.geometry import map_points, model_corners, robust_homography, visible_part
from objrec.realtime.align import AlignParams, ModelTemplates, hiders, lost_points
from objrec.realtime.flow import FlowParams, PointFlow, seed_points
from objrec.realtime.footage import FrameRate
from objrec.realtime.reacquire import ReacquireParams, remember_layout
from objrec.realtime.solid_track import SolidTrack
from objrec.realtime.track_checks import TrackChecks, agree
from objrec.realtime.track_kernels import dlt_homography
from objrec.realtime.track_state import TrackState, state_of
from objrec.types import Candidate, Detection, LostTrack, Regions

__all__ = ["TrackParams", "Track", "TrackLike", "TrackState", "Tracker", "fit_homography", "COVERED_FRAMES"]

#: A track remembers where it lost points (model pixels) over this many frames: another object may cover it there.
COVERED_FRAMES = 15

#: ``appearance(gray, name, homography, model_size, hidden_outlines) -> share`` (NaN: too little in view).
AppearanceCheck = Callable[[np.ndarray, str, np.ndarray, tuple[int, int], list], float]


class TrackLike(Protocol):
    """What a planar :class:`Track` and a :class:`~objrec.realtime.solid_track.SolidTrack` have in common: the
    interface of code that serves both (the tracker's bookkeeping, the outlines a search leaves out, the
    order of confirmations). ``homography`` is None for a solid track. Their fields are changed by the
    :class:`Tracker`'s methods only (and by the track's own, which the tracker calls)."""

    track_id: int
    name: str
    model_size: tuple[int, int]
    pts: np.ndarray
    score: float
    confirmed: int
    checked: int
    asked: int
    asked_before: int
    anchor_inliers: int
    rough: bool
    shown: bool
    seeded: int
    visible: float
    anchored_visible: float
    history: deque
    lost_reason: str | None

    @property
    def state(self) -> TrackState: ...

    @property
    def homography(self) -> np.ndarray | None: ...

    @property
    def corners(self) -> np.ndarray: ...

    @property
    def support(self) -> float: ...

    def predict(self) -> np.ndarray: ...

    def detection(self, state: str) -> Detection: ...


@dataclass(frozen=True)
class TrackParams:
    """Settings of the tracking stage.

    Attributes
    ----------
    max_tracked : int
        At most this many tracks. A new object beyond it takes the place of the track confirmed least
        recently (by the detector or by its appearance check), which is listed as lost (``"capacity"``).
    points : int
        Points followed per object: tens suffice for a homography; the flow's cost grows with their count.
    min_points : int
        A track with fewer points that pass the flow's check and agree with its homography ends.
    min_support : float
        ... and so does one left with less than this share of the points it had after its last
        replenishment (most of the object covered, blurred or gone).
    refit_px : float
        RANSAC's reprojection threshold for the homography refit.
    reanchor_px : float
        A detection of a tracked object moves the track only when a corner disagrees by more than this.
    appearance_every_ms : float
        Footage time between appearance checks of a track (sooner when its support falls below
        ``recheck_support``).
    recheck_support : float
        Support share below which the appearance check runs in the next frame, whatever the cadence.
    min_edge_agreement : float
        The appearance check's threshold (share of strong model edges the frame confirms).
    min_visible : float
        A track whose outline keeps less than this share of the object inside the frame ends.
    min_anchor_visible : float
        A detection starts a track only when at least this share of its object is in the frame: the
        outline of an object mostly outside is extrapolated from a small part and would be followed with
        that error (it is reported as detected, without a track, until more of it comes into view).
    realign_every_ms : float
        Footage time between realignments of a track's homography with the object's model image
        (:func:`~objrec.realtime.align.realign`: drift and an anchor's extrapolation taken out), the longest
        waiting first, each an optional unit (``SecondLooks.realign``); a new track is due at once; 0 never
        realigns. Needs the tracker's ``templates``.
    lost_window_ms : float
        For this long after a track ends, its last outline is searched first by the detector.
    confirm_every_ms : float
        Footage time between the detector's full-quality searches for a tracked object (one track per frame
        at most, while the budget allows), which re-anchor it when they disagree by more than
        ``reanchor_px``: the bound on how long drift can last.
    confirm_visible_gain : float
        A track is also looked at when its visible share has grown by this much since it was anchored.
    flow : FlowParams
        The optical flow's settings.
    reacquire : ReacquireParams
        Re-acquisition of lost tracks (:mod:`objrec.realtime.reacquire`).
    realign : AlignParams
        A track's realignment with its model (:func:`~objrec.realtime.align.realign`); its cadence is
        ``realign_every_ms``.

    Notes
    -----
    Times are milliseconds of footage time (:mod:`objrec.realtime.footage`), counted in the footage's frames
    (:meth:`Tracker.frames`): a file gives the same tracks at any processing speed, and a setting lasts as long
    at 25 frames a second as at 60. The defaults are whole frames at 30 frames a second.
    """

    max_tracked: int = 20
    points: int = 24
    min_points: int = 8
    min_support: float = 0.4
    refit_px: float = 2.0
    reanchor_px: float = 2.0
    appearance_every_ms: float = 500.0  # 15 frames at 30 frames a second
    recheck_support: float = 0.7
    min_edge_agreement: float = 0.5
    min_visible: float = 0.25
    min_anchor_visible: float = 0.5
    realign_every_ms: float = 170.0  # 5 frames
    lost_window_ms: float = 200.0  # 6 frames
    confirm_every_ms: float = 500.0  # 15 frames
    confirm_visible_gain: float = 0.15
    flow: FlowParams = field(default_factory=FlowParams)
    reacquire: ReacquireParams = field(default_factory=ReacquireParams)
    realign: AlignParams = field(default_factory=AlignParams)

    def __post_init__(self) -> None:
        if self.max_tracked < 1:
            raise ValueError(f"max_tracked: expected a positive int, got {self.max_tracked}")
        if not 4 <= self.min_points <= self.points:
            raise ValueError(f"min_points: expected 4..points ({self.points}), got {self.min_points}")
        for name in ("appearance_every_ms", "realign_every_ms", "lost_window_ms", "confirm_every_ms"):
            v = getattr(self, name)
            if not v >= 0:
                raise ValueError(f"{name}: expected a time in milliseconds >= 0, got {v!r}")


@dataclass(eq=False)
class Track:
    """One object followed from frame to frame.

    Attributes
    ----------
    track_id : int
        The track's number, unique in the stream.
    name : str
        The object's name.
    model_size : tuple of int
        The model image's (width, height).
    homography : np.ndarray
        (3, 3) map from the model image to the last frame.
    model_pts, pts : np.ndarray
        (k, 2) float32: the points on the model image, and where they are in the last frame.
    score : float
        The score of the detection it was anchored on.
    confirmed, checked : int
        Frame of the last detection that agreed with the track (or anchored it); of the last appearance check.
    anchored_visible : float
        The visible share when the detector last anchored or confirmed it.
    asked, asked_before : int
        The last frame the detector was asked to confirm it; ``asked`` before that request (restored when it is
        taken back: :meth:`Tracker.postpone`). -1: never.
    anchor_inliers : int
        Inliers of the detection it was anchored on.
    rough : bool
        Not yet confirmed by a full-quality search of its box (every new anchor starts so).
    shown : bool
        Reported under a budget (see :func:`objrec.recognizer.reportable`).
    seeded : int
        Points after the last replenishment.
    realigned, aligned : int
        The frame of its last realignment (-1: none since it was anchored); of its last one that moved it onto
        the model.
    again : bool
        Its last realignment moved it far: it is realigned again (:mod:`objrec.realtime.align`).
    visible : float
        The share of the object inside the frame.
    previous : np.ndarray or None
        The homography one frame before (None: just anchored).
    lost_pts : deque
        The model points lost, per frame, over the last :data:`COVERED_FRAMES` frames.
    history : deque
        (frame, homography) pairs followed, over the last :data:`COVERED_FRAMES` frames.
    lost_reason : str or None
        Why it ended (``LostTrack.reason``); None while it is followed.
    _corners : tuple of np.ndarray, or None
        Cache of (homography, its corners in the frame).
    """

    track_id: int
    name: str
    model_size: tuple[int, int]
    homography: np.ndarray
    model_pts: np.ndarray  # (k, 2) float32: the points on the model image
    pts: np.ndarray  # (k, 2) float32: where they are in the last frame
    score: float
    confirmed: int  # frame of the last detection that agreed with the track (or anchored it)
    checked: int  # frame of the last appearance check
    anchored_visible: float = 1.0  # the visible share when the detector last anchored or confirmed it
    asked: int = -1  # the last frame the detector was asked to confirm it
    asked_before: int = -1  # ``asked`` before the last request (restored when it is taken back: Tracker.postpone)
    anchor_inliers: int = 0  # inliers of the detection it was anchored on
    rough: bool = True  # not confirmed by a full-quality search of its box (new anchors start so, but without a budget)
    shown: bool = False  # reported under a budget (see objrec.recognizer.reportable)
    seeded: int = 0  # points after the last replenishment
    realigned: int = -1  # the frame of its last realignment (-1: none since it was anchored)
    aligned: int = -1  # the frame of its last realignment that moved it onto the model
    again: bool = False  # its last realignment moved it far: it is realigned again (objrec.realtime.align)
    visible: float = 1.0
    previous: np.ndarray | None = None  # the homography one frame before (None: just anchored)
    lost_pts: deque = field(default_factory=lambda: deque(maxlen=COVERED_FRAMES))  # model points lost, per frame
    history: deque = field(default_factory=lambda: deque(maxlen=COVERED_FRAMES))  # (frame, homography) followed
    lost_reason: str | None = None  # why it ended (LostTrack.reason); None while it is followed
    # (homography, its corners): asked for many times a frame, computed once per homography (a new homography
    # is always a new array: none is changed in place)
    _corners: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False)

    @property
    def state(self) -> TrackState:
        """The track's state (:class:`~objrec.realtime.track_state.TrackState`), from ``rough``, ``shown`` and
        ``lost_reason``."""
        return state_of(self.rough, self.shown, self.lost_reason)

    @property
    def corners(self) -> np.ndarray:
        cached = self._corners
        if cached is None or cached[0] is not self.homography:
            cached = self._corners = (self.homography, map_points(self.homography, model_corners(*self.model_size)))
        return cached[1].copy()

    def predict(self) -> np.ndarray:
        """Where the points are expected in the next frame: the last frame-to-frame motion repeated."""
        if self.previous is None:
            return self.pts
        motion = self.homography @ np.linalg.inv(self.previous)
        return map_points(motion, self.pts).astype(np.float32)

    @property
    def support(self) -> float:
        return len(self.pts) / max(self.seeded, 1)

    def follow(self, moved: np.ndarray, good: np.ndarray, shape: tuple[int, int], p: TrackParams) -> str | None:
        """Refit the homography to the followed points (``moved``, those ``good``) in a frame of ``shape``
        under the tracking settings ``p``; the reason the track ends, or None."""
        t = self
        need = max(p.min_points, int(np.ceil(p.min_support * t.seeded)))
        if int(good.sum()) < need:
            return "support"
        src, dst = t.model_pts[good], moved[good]
        H = fit_homography(src, dst)  # most frames: every point agrees, and RANSAC is not needed
        inl = np.zeros(0, bool) if H is None else np.linalg.norm(map_points(H, src) - dst, axis=1) <= p.refit_px
        if H is None or not inl.all():
            H, inl = robust_homography(src, dst, p.refit_px, max_iters=200)
            if H is None or int(inl.sum()) < need:
                return "support"
            H = fit_homography(src[inl], dst[inl])
            if H is None:
                return "support"
        corners = map_points(H, model_corners(*t.model_size))
        if not _convex(corners):
            return "support"
        visible = visible_part(H, corners, *t.model_size, shape)[2]
        if visible < p.min_visible:
            return "visibility"
        t.lost_pts.append(np.concatenate([t.model_pts[~good], src[~inl]]))
        t.previous, t.homography = t.homography, H
        t._corners = (H, corners)  # the outline just mapped is the new homography's
        # The points continue from where the refit puts them: each point's own flow error does not carry
        # over to the next frame, only the homography's (averaged over all the points).
        t.model_pts, t.visible = src[inl], visible
        t.pts = map_points(H, t.model_pts).astype(np.float32)
        return None

    def detection(self, state: str) -> Detection:
        return Detection(
            self.name, self.score, len(self.pts), self.homography, self.corners, self.visible,
            inlier_xy=self.pts.astype(np.float64), state=state, track_id=self.track_id,
        )  # fmt: skip


# A track's transitions: the only code that changes a track's life fields (``rough``, ``shown``, ``asked``,
# ``realigned``, ``aligned``, ``again``, ``lost_reason``) outside the track's own methods. The Tracker offers
# them as its methods, which the stages call with their results.


def mark_lost(t: Track | SolidTrack, reason: str) -> None:
    """Track ``t`` ended for ``reason`` (→ ``LOST``)."""
    t.lost_reason = reason


def mark_shown(t: Track | SolidTrack) -> None:
    """Track ``t`` reported under a budget (→ ``SHOWN`` while not confirmed): once reported, it stays
    reported (:func:`objrec.recognizer.reportable`)."""
    t.shown = True


def mark_confirmed(t: Track | SolidTrack) -> None:
    """A full-quality search of track ``t``'s box found its object (→ ``CONFIRMED``)."""
    t.rough = False


def mark_asked(t: Track | SolidTrack, frame: int) -> None:
    """The detector is asked to confirm track ``t`` in ``frame``; its ``asked`` before is kept as
    ``asked_before``, for :func:`mark_postponed`."""
    t.asked_before, t.asked = t.asked, frame


def mark_postponed(t: Track | SolidTrack) -> None:
    """The request just made of track ``t`` (:func:`mark_asked`) is taken back: its confirmation did not run,
    and ``asked`` is what it was before, so the track keeps its place in line."""
    t.asked = t.asked_before


def mark_realigned(t: Track, frame: int, homography: np.ndarray | None, moved_far: bool) -> None:
    """Track ``t`` realigned with its model in ``frame`` (:func:`~objrec.realtime.align.realign_in`): onto
    ``homography`` (None: the realignment failed, and the track stays as it is), its points moved onto it and
    its motion from the frame before keeping its size; ``moved_far``: the move was large enough for the track
    to be realigned again at once."""
    t.realigned = frame
    if homography is not None:
        if t.previous is not None:
            t.previous = homography @ np.linalg.inv(t.homography) @ t.previous
        t.homography = homography
        t.pts = map_points(homography, t.model_pts).astype(np.float32)
        t.aligned = frame
    t.again = moved_far


def mark_aligned(t: Track, frame: int) -> None:
    """Track ``t`` counts as realigned onto its model in ``frame`` (a re-acquisition, which is that
    alignment): reported at once, and not realigned again before its turn."""
    t.aligned = t.realigned = frame


def reseed(t: Track, pts: np.ndarray) -> None:
    """Planar track ``t``'s points replaced by ``pts`` (frame pixels, (k, 2) float32), mapped back onto its
    model through its homography."""
    t.pts = pts
    t.model_pts = map_points(np.linalg.inv(t.homography), pts).astype(np.float32)
    t.seeded = len(pts)


class Tracker:
    """The tracks of a stream, their optical flow, and the windows of tracks recently lost.

    Parameters
    ----------
    enabled : bool
        Without tracking every frame stands alone: no tracks, no windows, no preferred order.
    params : TrackParams, optional
    appearance : callable, optional
        The appearance check (see :data:`AppearanceCheck`); without it only the geometry is checked.
    templates : ModelTemplates, optional
        The objects' model images, for realigning tracks (``TrackParams.realign_every_ms``).

    Attributes
    ----------
    rate : FrameRate
        The footage's frame rate, which turns the settings' footage times into frame counts (:meth:`frames`);
        the recognizer gives it each frame's footage time.
    checks : TrackChecks
        The appearance check's cadence and verdict, the arbitration between a track and a detection, and the
        order of confirmations (:class:`~objrec.realtime.track_checks.TrackChecks`).
    """

    def __init__(
        self, enabled: bool = True, params: TrackParams | None = None, appearance: AppearanceCheck | None = None,
        templates: ModelTemplates | None = None,
    ) -> None:  # fmt: skip
        self.enabled = enabled
        self.params = params or TrackParams()
        self.appearance = appearance
        self.templates = templates
        self.flow = PointFlow(self.params.flow)
        self.tracks: list[Track | SolidTrack] = []
        self.recent: dict[str, tuple[np.ndarray, int]] = {}  # name -> (outline, frame lost)
        self.ended: dict[str, tuple[Track | SolidTrack, int, str]] = {}  # name -> (its last track, frame, reason)
        self.layout: dict[tuple[str, str], np.ndarray] = {}  # (seen, lost) -> lost's place in seen's model
        self._next_id = 1  # the next track's id
        self.rate = FrameRate()
        self.checks = TrackChecks(self.params, appearance, self.rate)

    def frames(self, ms: float) -> int:
        """``ms`` of footage time as a number of the footage's frames (:meth:`FrameRate.frames`)."""
        return self.rate.frames(ms)

    @property
    def n_points(self) -> int:
        return int(sum(len(t.pts) for t in self.tracks))

    def step(self, gray: np.ndarray, frame: int) -> tuple[list[Detection], list[LostTrack]]:
        """Follow every track into ``gray`` (frame number ``frame``): the tracked detections and the tracks
        lost in this frame."""
        if not self.enabled or not self.tracks:
            return [], []
        pts = np.concatenate([t.pts for t in self.tracks])
        guess = np.concatenate([t.predict() for t in self.tracks])
        moved, good = self.flow.track(gray, pts, guess)
        lost, kept, start = [], [], 0
        for t in self.tracks:
            k = len(t.pts)
            why = t.follow(moved[start : start + k], good[start : start + k], gray.shape[:2], self.params)
            start += k
            if why is None:
                kept.append(t)
                t.history.append((frame, t.homography))
            else:
                lost.append(self._end(t, why, frame))
        self.tracks = kept
        waiting = self.checks.waiting(kept, frame)  # checks on the regular cadence are spread over the frames
        for t in kept:
            if id(t) in waiting:
                continue
            why = self._check(t, gray, frame)
            if why is not None:
                lost.append(self._end(t, why, frame))
        ended = {x.track_id for x in lost}
        self.tracks = [t for t in self.tracks if t.track_id not in ended]
        out = [t.detection("tracked") for t in self.tracks]
        return out, lost

    def _check(self, t: Track | SolidTrack, gray: np.ndarray, frame: int) -> str | None:
        """The appearance check when due (:meth:`TrackChecks.check_due`); a track that passes it gets new points."""
        if not self.checks.check_due(t, frame):
            return None
        if isinstance(t, SolidTrack):  # no appearance check: new points come only with a re-detection
            t.checked = frame
            t.rebase()
            return None
        why = self.checks.failed(t, gray, self.tracks)
        if why is not None:
            return why
        t.checked = frame
        self._replenish(t, gray)
        return None

    def _replenish(self, t: Track, gray: np.ndarray) -> None:  # planar tracks only
        """Top ``t`` up with new corners inside its outline (mapped back onto the model), where neither another
        track nor something the track lost its points to lately may be in front (:func:`seed_points`)."""
        want = self.params.points - len(t.pts)
        if want >= max(4, self.params.points // 4):
            hidden = hiders(self.tracks, t.corners, t)
            new = seed_points(gray, t.corners, want, avoid=t.pts, hidden=hidden, kept=t.pts, lost=lost_points(t))
            if len(new):
                back = map_points(np.linalg.inv(t.homography), new).astype(np.float32)
                t.model_pts = np.concatenate([t.model_pts, back])
                t.pts = np.concatenate([t.pts, new])
        t.seeded = len(t.pts)

    def drop(self, t: Track | SolidTrack, reason: str, frame: int) -> LostTrack:
        """End track ``t`` now, for ``reason``, in frame number ``frame``."""
        if t in self.tracks:
            self.tracks.remove(t)
        return self._end(t, reason, frame)

    def _end(self, t: Track | SolidTrack, reason: str, frame: int, remember: bool = True) -> LostTrack:
        self.mark_lost(t, reason)
        if remember:  # for re-acquisition (not when a detection of this frame places the object)
            self.recent[t.name], self.ended[t.name] = (t.corners, frame), (t, frame, reason)
            remember_layout(self, t)
        return LostTrack(t.track_id, t.name, reason)

    # A track's transitions (written above, in this module): the stages call these with their results; nothing
    # else changes a track's fields.
    mark_lost = staticmethod(mark_lost)
    mark_shown = staticmethod(mark_shown)
    mark_confirmed = staticmethod(mark_confirmed)
    mark_asked = staticmethod(mark_asked)
    mark_realigned = staticmethod(mark_realigned)
    mark_aligned = staticmethod(mark_aligned)
    reseed = staticmethod(reseed)

    def absorb(
        self, found: list[Detection], tracked: list[Detection], gray: np.ndarray, frame: int,
        model_size: Callable[[str], tuple[int, int]], confirmed: bool = False,
    ) -> tuple[list[Detection], list[LostTrack]]:  # fmt: skip
        """The detector's detections (``found``) of this frame met with the ``tracked`` ones; ``gray``: the
        frame (grayscale), ``frame``: its number, ``model_size``: an object's name to its model's (width, height).
        ``confirmed``: the frame was searched at full quality (no budget), escalation included, so the tracks it
        anchors start confirmed (a confirmation by the primary detector alone drops what only the escalation finds).

        Returns the frame's detections: the tracked ones, but those re-anchored, then the new tracks and
        the re-anchored ones (``state="detected"``); and the tracks that ended here (given way beyond
        ``max_tracked``, or to a detection no track can start on). Without tracking, the detections as they are.
        """
        if not self.enabled:
            return list(found), []
        out, lost = [], []
        for d in found:
            t = self._owner(d)
            if t is not None and self.checks.keeps(t, d, gray, self.tracks):
                self._confirmed(t, d, gray, frame)
                continue
            if t is not None:
                self.tracks.remove(t)
                tracked = [x for x in tracked if x.track_id != t.track_id]
            new = self._start(d, gray, frame, model_size(d.name), t)
            if new is None:
                if t is not None:  # it gave way to a detection no track can follow: it ended (the detection places it)
                    why = "visibility" if d.visible_fraction < self.params.min_anchor_visible else "support"
                    lost.append(self._end(t, why, frame, remember=False))
                out.append(d)
                continue
            if confirmed:
                self.mark_confirmed(new)
            if len(self.tracks) >= self.params.max_tracked:
                old = min(self.tracks, key=lambda x: max(x.confirmed, x.checked))
                self.tracks.remove(old)
                lost.append(self._end(old, "capacity", frame))
                tracked = [x for x in tracked if x.track_id != old.track_id]
            self.tracks.append(new)
            self.recent.pop(d.name, None)
            out.append(new.detection("detected"))
        if self.tracks:  # the next frame's flow starts from this one (as step left it, or where new tracks began)
            self.flow.remember(gray)
        self.recent = {n: v for n, v in self.recent.items() if frame - v[1] < self.frames(self.params.lost_window_ms)}
        return tracked + out, lost

    def _owner(self, d: Detection) -> Track | SolidTrack | None:
        """The track of ``d``'s object whose outline holds ``d``'s centre (None: a new object)."""
        c = np.asarray(d.corners, np.float64).mean(axis=0)
        for t in self.tracks:
            q = np.float32(t.corners).reshape(-1, 1, 2)
            if t.name == d.name and cv2.pointPolygonTest(q, (float(c[0]), float(c[1])), False) >= 0:
                return t
        return None

    def _confirmed(self, t: Track | SolidTrack, d: Detection, gray: np.ndarray, frame: int) -> None:
        """Track ``t`` confirmed by the detection ``d``; a track without a plane gets new points with it."""
        t.confirmed, t.anchored_visible = frame, max(t.anchored_visible, d.visible_fraction)
        if isinstance(t, SolidTrack):
            t.replenish(gray, self.params.points)

    def _start(
        self, d: Detection, gray: np.ndarray, frame: int, size: tuple[int, int], old: Track | SolidTrack | None
    ) -> Track | SolidTrack | None:
        """A track for ``d`` (keeping ``old``'s id, and whether it was reported, when it re-anchors one), or None
        when too few points can be followed on it."""
        if d.visible_fraction < self.params.min_anchor_visible:
            return None
        tid = old.track_id if old is not None else self._next_id
        others = hiders(self.tracks, d.corners, old)
        new = anchor_track(d, gray, frame, size, tid, others, self.params)
        if new is None:
            return None
        if old is None:
            self._next_id = tid + 1
            return new
        self.mark_asked(new, old.asked)  # re-anchored: it keeps its place in line, and stays reported
        if old.shown:
            self.mark_shown(new)
        return new

    def confirmation(self, frame: int) -> Track | SolidTrack | None:
        """The track whose object the detector should search for again in this frame, at full quality (at
        most one per frame), or None.

        A track is due when no full-quality search has confirmed it since it was anchored (``rough``: a track
        anchored under a budget, on a search the budget may have degraded), when the
        detector last agreed with it (or was asked to) ``confirm_every_ms`` of footage ago or more, or when much more
        of it is in view than when it was anchored (an object entering the frame was anchored on the part then
        visible; the rest of its outline was extrapolated). Of those due, the unconfirmed first, then the one
        waiting longest. See :meth:`reanchor` for the outcome.
        """
        t = self.confirmation_due(frame)
        if t is not None:
            self.mark_asked(t, frame)
        return t

    def postpone(self, t: Track | SolidTrack) -> None:
        """The confirmation just chosen for ``t`` did not run (no room left): ``t`` keeps its place in line
        (:func:`~objrec.realtime.tracker.mark_postponed`)."""
        mark_postponed(t)

    def confirmation_due(self, frame: int) -> Track | SolidTrack | None:
        """The track :meth:`confirmation` would choose in frame ``frame``, not yet chosen; None when none is due."""
        return self.checks.confirmation_due(self.tracks, frame) if self.enabled else None

    def reanchor(
        self,
        t: Track | SolidTrack,
        d: Detection,
        detections: list[Detection],
        gray: np.ndarray,
        frame: int,
        scale: float = 1.0,
    ) -> list[Detection]:
        """The outcome of a full-quality search for track ``t``'s object, found as ``d`` by a search at resolution
        ``scale``: within ``reanchor_px / scale`` (a corner found at a lower resolution is as uncertain in
        frame pixels as it is coarser) it confirms the track; beyond, the track is re-anchored on ``d`` (same
        id, ``state="detected"``) and ``d`` replaces the track's detection in the frame's ``detections``
        (returned), unless the track stands against it (:meth:`TrackChecks.trusted`: a recent realignment with
        its model, or the appearance check). ``gray``: the frame (grayscale), ``frame``: its number."""
        self.mark_confirmed(t)
        p = self.params
        tol = p.reanchor_px / min(1.0, max(scale, 1e-3))
        if agree(t, d, tol) or t not in self.tracks or self.checks.trusted(t, d, gray, frame, tol, self.tracks):
            self._confirmed(t, d, gray, frame)
            return detections
        new = self._start(d, gray, frame, t.model_size, t)
        if new is None:
            return detections
        self.mark_confirmed(new)  # anchored on a full-quality search
        self.tracks[self.tracks.index(t)] = new
        return [new.detection("detected") if x.track_id == t.track_id else x for x in detections]

    def outlines(self) -> list[np.ndarray]:
        """The tracked objects' outlines (4, 2) in the current frame: the detector need not search them."""
        return [t.corners for t in self.tracks]

    def windows(self, width: int, height: int, grow: float = 0.25) -> Regions:
        """Search windows for the detector: the last outlines of tracks lost recently, most recent first, each
        box grown by ``grow`` times its size on each side and clipped to the frame's ``width`` x ``height`` (pixels)."""
        if not self.enabled:
            return Regions.empty()
        recent = [q for q, _ in sorted(self.recent.values(), key=lambda v: -v[1])]
        boxes = [outline_box(q, grow, width, height) for q in recent]
        return Regions.from_boxes([b for b in boxes if b is not None])

    def prioritise(self, candidates: list[Candidate]) -> list[Candidate]:
        """The order in which a frame's candidates are verified: recently lost objects first (most recent
        first), then objects not tracked, then objects already tracked, each group by matches.

        Under a budget the verifications after the first run only while they fit, so the order decides which
        objects a tight frame looks at. A tracked object is already followed; a candidate of it from the
        features outside its outline is at most a second copy in view, while a new object's candidate is what
        the search is for."""
        if not self.enabled:
            return sorted(candidates, key=lambda c: -len(c))
        rank = {n: i for i, (n, _) in enumerate(sorted(self.recent.items(), key=lambda kv: -kv[1][1]))}
        tracked = {t.name for t in self.tracks}
        last = len(rank) + 1
        return sorted(candidates, key=lambda c: (rank.get(c.name, last if c.name in tracked else len(rank)), -len(c)))

    def reset(self) -> None:
        """Forget every track (a new, unrelated sequence of frames follows)."""
        self.tracks.clear()
        self.recent.clear()
        self.ended.clear()
        self.layout.clear()
        self.flow.forget()
        self.rate.reset()


def anchor_track(
    d: Detection, gray: np.ndarray, frame: int, size: tuple[int, int], tid: int, others: list, p: TrackParams
) -> Track | SolidTrack | None:
    """A new track ``tid`` on detection ``d`` in ``gray`` (frame number ``frame``; model ``size``), its points
    seeded away from the ``others`` outlines; a solid track when ``d`` has no homography. None when too few
    points can be followed on it."""
    if d.homography is None:
        return SolidTrack.anchor(d, gray, tid, frame, size, p.points, p.min_points)
    pts = seed_points(gray, d.corners, p.points, hidden=others)
    if len(pts) < p.min_points:
        return None
    model = map_points(np.linalg.inv(d.homography), pts).astype(np.float32)
    v = d.visible_fraction
    return Track(
        tid, d.name, size, d.homography, model, pts, d.score, frame, frame, v,
        seeded=len(pts), visible=v, anchor_inliers=d.inliers,
    )  # fmt: skip


def fit_homography(src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """The least-squares homography mapping ``src`` onto ``dst`` ((k, 2) point pairs) by the normalised direct linear
    transform (Hartley and Zisserman, Multiple View Geometry, algorithm 4.2), compiled
    (:func:`~objrec.realtime.track_kernels.dlt_homography`): every track refits in every frame, where OpenCV's
    iterative refinement, or the same algorithm in NumPy calls, costs a large share of a track's frame. None
    when degenerate."""
    if len(src) < 4:
        return None
    H, ok = dlt_homography(
        np.ascontiguousarray(src, np.float64).reshape(-1, 2), np.ascontiguousarray(dst, np.float64).reshape(-1, 2)
    )
    return H if ok else None


def _convex(q: np.ndarray) -> bool:
    return bool(cv2.isContourConvex(np.float32(q).reshape(-1, 1, 2)))
