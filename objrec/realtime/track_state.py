"""A track's life as states: what the tracker's transitions leave a track in.

A planar :class:`~objrec.realtime.tracker.Track` and a :class:`~objrec.realtime.solid_track.SolidTrack` go
through the same states. The state follows from two facts the tracker records separately, because they change
separately: whether a full-quality search of the track's box has found its object (``rough`` is False once it
has; a detection that re-anchors the track makes it rough again, unless it was found without a budget, which is
by such a search) and whether the track has been reported under
a budget (``shown``; a re-anchored track keeps it). Only the transitions written in
:mod:`objrec.realtime.tracker` change them and the other fields they name, offered as the
:class:`~objrec.realtime.tracker.Tracker`'s methods (``Tracker.mark_shown``, ``Tracker.mark_confirmed``,
``Tracker.mark_lost``, ...), which the stages call with their results.
"""

from __future__ import annotations

from enum import Enum

__all__ = ["TrackState", "state_of"]


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
