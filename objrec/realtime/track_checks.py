"""The tracker's checks of its tracks: the appearance check's cadence and verdict, the arbitration between a
track and a detection of its object, and the order in which the detector is asked to confirm tracks.

:class:`TrackChecks` decides and changes nothing: :class:`~objrec.realtime.tracker.Tracker` asks it and applies
the outcome through a track's transitions (the tracker's ``mark_*`` methods). The appearance check is
verification's (:func:`~objrec.matching.verify.edge_agreement` against the object's thumbnail, through the
track's homography), away from the other tracks that may be in front of it (:func:`~objrec.realtime.align.hiders`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np

from objrec.realtime.align import aligned_within, hiders
from objrec.realtime.footage import FrameRate
from objrec.realtime.solid_track import SolidTrack
from objrec.types import Detection

if TYPE_CHECKING:
    from objrec.realtime.tracker import AppearanceCheck, Track, TrackParams

__all__ = ["TrackChecks", "agree", "ALIGNED_TRUST", "APPEARANCE_MARGIN"]

#: A track realigned with its model recently keeps its outline against a detection that disagrees by up to
#: this many times ``reanchor_px`` (a detection's own error); beyond, the appearance check decides (see
#: :meth:`TrackChecks.trusted`).
ALIGNED_TRUST = 4.0

#: Shares of confirmed model edges closer than this do not tell two outlines of one object apart.
APPEARANCE_MARGIN = 0.05


class TrackChecks:
    """When a tracker's tracks are checked and confirmed, and what the frame says of their outlines.

    Parameters
    ----------
    params : TrackParams
    appearance : callable or None
        The appearance check (:data:`~objrec.realtime.tracker.AppearanceCheck`); without it only the geometry is
        checked and nothing is arbitrated.
    rate : FrameRate
        The footage's frame rate, which turns the settings' footage times into frame counts.
    """

    def __init__(self, params: TrackParams, appearance: AppearanceCheck | None, rate: FrameRate) -> None:
        self.params = params
        self.appearance = appearance
        self.rate = rate

    def share(self, t: Track | SolidTrack, H: np.ndarray, gray: np.ndarray, tracks: Sequence) -> float:
        """The appearance check of ``t``'s object seen through ``H`` in ``gray``, away from the outlines of the
        ``tracks`` that may hide it; NaN when too little is in view to judge."""
        assert self.appearance is not None  # its callers run it only where there is a check
        return self.appearance(gray, t.name, H, t.model_size, hiders(tracks, t.corners, t))

    def check_due(self, t: Track | SolidTrack, frame: int) -> bool:
        """Whether track ``t``'s appearance check is due in ``frame``: ``appearance_every_ms`` after its last,
        or at once when its support dropped below ``recheck_support``."""
        p = self.params
        return frame - t.checked >= self.rate.frames(p.appearance_every_ms) or t.support < p.recheck_support

    def waiting(self, tracks: Sequence[Track | SolidTrack], frame: int) -> set[int]:
        """The ``id`` of each of ``tracks`` whose check on the regular cadence waits for a later frame: the checks
        are spread over the frames (the most overdue first, as many per frame as keep every track on its
        cadence), so tracks anchored together are not all checked in one frame; a track whose support dropped
        never waits."""
        p = self.params
        every = self.rate.frames(p.appearance_every_ms)
        quota = -(-len(tracks) // max(every, 1))
        overdue = sorted((t for t in tracks if frame - t.checked >= every), key=lambda t: t.checked)
        return {id(t) for t in overdue[quota:] if t.support >= p.recheck_support}

    def failed(self, t: Track, gray: np.ndarray, tracks: Sequence) -> str | None:
        """``"appearance"`` when planar track ``t`` fails its appearance check in ``gray``: too few of its model's
        edges confirmed, or too little in view to judge while its points are going; None when it passes (or
        there is no check).

        Parameters
        ----------
        t : Track
            The planar track checked.
        gray : np.ndarray
            The frame, grayscale.
        tracks : sequence of tracks
            The stream's tracks: the parts of ``t`` other tracks cover are left out of the check.
        """
        if self.appearance is None:
            return None
        p = self.params
        share = self.share(t, t.homography, gray, tracks)
        if share < p.min_edge_agreement:
            return "appearance"
        if np.isnan(share) and t.support < p.recheck_support:
            return "appearance"  # too little in view to judge, and its points are going: not confirmed
        return None

    def keeps(self, t: Track | SolidTrack, d: Detection, gray: np.ndarray, tracks: Sequence) -> bool:
        """Whether track ``t`` stays as it is when the detector finds its object as ``d``: they agree within
        ``reanchor_px`` and the track's support holds; or, when they disagree, the frame confirms the track's
        outline clearly better than the detection's (the appearance check as the arbiter: a detection under
        a tight budget, or of an object partly out of view, can be the worse of the two), or, without a
        clear difference, the detection has no more inliers than the one the track was anchored on. With
        either verified without a plane there is no arbiter: agreement (:func:`agree`) alone keeps it.

        Parameters
        ----------
        t : Track or SolidTrack
            The track.
        d : Detection
            The detector's detection of its object.
        gray : np.ndarray
            The frame, grayscale.
        tracks : sequence of tracks
            The stream's tracks, for the appearance check (:meth:`failed`).
        """
        p = self.params
        if t.support < p.recheck_support:
            return False
        if agree(t, d, p.reanchor_px):
            return True
        if self.appearance is None or t.homography is None or d.homography is None:
            return False  # nothing to arbitrate with: the rule alone, beyond the tolerance
        preferred = self.prefers_track(t, d, gray, tracks)
        return d.inliers <= t.anchor_inliers if preferred is None else preferred

    def prefers_track(self, t: Track | SolidTrack, d: Detection, gray: np.ndarray, tracks: Sequence) -> bool | None:
        """True when the frame confirms ``t``'s outline clearly better than ``d``'s, False when the other way
        round, None when the appearance check tells them apart by no more than :data:`APPEARANCE_MARGIN`
        (or cannot judge either, or there is no check).

        Parameters
        ----------
        t : Track or SolidTrack
            The track.
        d : Detection
            The detection of its object.
        gray : np.ndarray
            The frame, grayscale.
        tracks : sequence of tracks
            The stream's tracks, for the appearance check (:meth:`failed`).
        """
        if self.appearance is None or t.homography is None or d.homography is None:
            return None
        mine, theirs = self.share(t, t.homography, gray, tracks), self.share(t, d.homography, gray, tracks)
        if np.isfinite(mine) and np.isfinite(theirs) and abs(mine - theirs) > APPEARANCE_MARGIN:
            return bool(mine > theirs)
        return None

    def trusted(
        self, t: Track | SolidTrack, d: Detection, gray: np.ndarray, frame: int, tol: float, tracks: Sequence
    ) -> bool:
        """Whether track ``t`` stands against the confirmation ``d`` that disagrees with it beyond ``tol``: the
        frame confirms its outline clearly better (the appearance check), or it was realigned with its model
        within ``realign_every_ms`` and either they disagree by no more than :data:`ALIGNED_TRUST` times ``tol``
        or the appearance check cannot tell them apart. A realignment found the whole model where the track is;
        a confirmation's inliers may hold a part of it only, and its far corners then follow.

        Parameters
        ----------
        t : Track or SolidTrack
            The track.
        d : Detection
            The confirmation's detection of its object.
        gray : np.ndarray
            The frame, grayscale.
        frame : int
            The frame's number.
        tol : float
            The agreement tolerance in frame pixels.
        tracks : sequence of tracks
            The stream's tracks, for the appearance check (:meth:`failed`).
        """
        aligned = aligned_within(t, frame, self.rate.frames(self.params.realign_every_ms))
        if aligned and agree(t, d, ALIGNED_TRUST * tol):
            return True
        prefers = self.prefers_track(t, d, gray, tracks)
        return bool(prefers) or (aligned and prefers is None)

    def confirmation_due(self, tracks: Sequence[Track | SolidTrack], frame: int) -> Track | SolidTrack | None:
        """The one of ``tracks`` whose object the detector should search for again in ``frame`` (see
        :meth:`~objrec.realtime.tracker.Tracker.confirmation`), or None when none is due: the unconfirmed
        first, then the one waiting longest."""
        waiting = [t for t in tracks if self._due(t, frame)]
        return min(waiting, key=lambda x: (not x.rough, max(x.confirmed, x.asked))) if waiting else None

    def _due(self, t: Track | SolidTrack, frame: int) -> bool:
        p = self.params
        if t.asked == frame:
            return False
        last = max(t.confirmed, t.asked)
        grown = t.visible > t.anchored_visible + p.confirm_visible_gain and frame - t.asked > 1
        return t.rough or frame - last >= self.rate.frames(p.confirm_every_ms) or grown


def agree(t: Track | SolidTrack, d: Detection, tolerance_px: float) -> bool:
    """Whether track ``t`` and detection ``d`` place the object alike: every corner within ``tolerance_px`` for
    two homographies; with either verified without a plane, ``d``'s outline within ``t``'s grown by
    ``tolerance_px`` (an outline is the hull of the points that happened to match, so one inside the other
    agrees)."""
    if isinstance(t, SolidTrack):
        return t.explains(d, tolerance_px)
    if d.homography is None:
        assert d.outline is not None  # a detection without a homography always has an outline (Detection)
        q = np.float32(t.corners).reshape(-1, 1, 2)
        return all(cv2.pointPolygonTest(q, (float(x), float(y)), True) >= -tolerance_px for x, y in d.outline)
    return float(np.linalg.norm(t.corners - np.asarray(d.corners), axis=1).max()) <= tolerance_px
