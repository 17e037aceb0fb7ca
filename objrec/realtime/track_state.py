"""A track's life as states: what the tracker's transitions leave a track in.

A planar :class:`~objrec.realtime.tracker.Track` and a :class:`~objrec.realtime.solid_track.SolidTrack` go
through the same states. The state follows from two facts the tracker records separately, because they change
separately: whether a full-quality search of the track's box has found its object (``rough`` is False once it
has; a detection that re-anchors the track makes it rough again) and whether the track has been reported under
a budget (``shown``; a re-anchored track keeps it). Only the transitions of this module change them and the
other fields they name; :class:`~objrec.realtime.tracker.Tracker` offers them as its methods
(``Tracker.mark_shown``, ``Tracker.mark_confirmed``, ``Tracker.mark_lost``, ...), which the stages call with
their results.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

from objrec.geometry import map_points

if TYPE_CHECKING:
    from objrec.realtime.solid_track import SolidTrack
    from objrec.realtime.tracker import Track

__all__ = [
    "TrackState",
    "state_of",
    "mark_lost",
    "mark_shown",
    "mark_confirmed",
    "mark_asked",
    "mark_postponed",
    "mark_realigned",
    "mark_aligned",
    "reseed",
]


class TrackState(Enum):
    """The states of a track (see ``docs/tracking.md``, "A track's states").

    Attributes
    ----------
    STARTED
        Anchored on a detection or a re-acquisition, neither reported under a budget nor confirmed by a
        full-quality search. Without a budget every track is reported from its first frame, and a track stays
        in this state until it is confirmed.
    SHOWN
        Reported under a budget (a realignment onto its model or a confirmation agreed with it first), not
        confirmed since it was last anchored: a detection that re-anchors a confirmed track brings it back here.
    CONFIRMED
        A full-quality search of its box found its object (it confirmed or re-anchored the track).
    LOST
        Ended, for the reason the tracker gave (``LostTrack.reason``).
    """

    STARTED = "started"
    SHOWN = "shown"
    CONFIRMED = "confirmed"
    LOST = "lost"


def state_of(rough: bool, shown: bool, lost_reason: str | None) -> TrackState:
    """The state of a track with these fields: ended (``lost_reason`` given), confirmed (not ``rough``), reported
    under a budget (``shown``), or started."""
    if lost_reason is not None:
        return TrackState.LOST
    if not rough:
        return TrackState.CONFIRMED
    return TrackState.SHOWN if shown else TrackState.STARTED


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
