"""Re-acquisition of lost tracks by alignment with their models.

A camera swung quickly blurs the frame and moves every object at once: the tracks lose their points and end
together, and when the view comes back the detector would have to find each object again, one search at a
time. Most of them are back where they were. A track that ended for lack of support is kept for
``window_ms`` of footage (:class:`ReacquireParams`), and its object is looked for where it was last: the model
is rendered through the track's last homography and aligned with the frame (:func:`~objrec.realtime.align.realign`,
pyramidal Lucas-Kanade followed by a RANSAC refit). An alignment has no descriptor matches behind it, so it
counts only when the appearance check confirms at least ``agreement`` of the model's strong
edges in view (a sharp view of the object confirms nearly all of them; an alignment caught on a blurred or
half-moved view, or on another object, far fewer). The object then starts a new track, as a detection
would (``state="detected"``).

Objects that stay where they are keep their places relative to each other, whatever the camera does. When a
track ends, its place relative to each object still followed is remembered (:func:`remember_layout`); while
one of those is followed (again), it places the lost object (:func:`placed`), which is then looked for there
rather than where it was last: after a swing of the camera the first object found again brings back the
others, objects that left the view are looked for as the view comes back to them (for ``layout_ms``), and an
object under a passing hand is looked for where its neighbours, shaken with the camera, say it is.

Every window is given in milliseconds of footage time and counted in the footage's frames
(:meth:`~objrec.realtime.tracker.Tracker.frames`), so it lasts as long at any frame rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import numpy as np

from objrec.geometry import map_points, model_corners, visible_part
from objrec.realtime.align import hiders, realign
from objrec.types import Detection

if TYPE_CHECKING:
    from objrec.realtime.tracker import Track, Tracker, TrackLike

__all__ = [
    "ReacquireParams",
    "REASONS",
    "waiting",
    "reacquire",
    "last_seen",
    "placed",
    "remember_layout",
    "LAYOUT_REASONS",
]

#: The reasons a track ends for which its object is looked for again where it was: its points were lost
#: (blur, fast motion, a cover passing over it). An object that left the view comes back elsewhere than where
#: it left (the edge of the frame); a track that failed its appearance check, gave way to others or was not
#: confirmed is not looked for either.
REASONS = ("support",)
#: The reasons a track ends for which its object is looked for where the objects seen with it place it
#: (:func:`remember_layout`): lost points, or the object left the view (it comes back where its neighbours
#: say, when they are followed again).
LAYOUT_REASONS = ("support", "visibility")


@dataclass(frozen=True)
class ReacquireParams:
    """Settings of re-acquisition (see the module notes); times in milliseconds of footage time.

    Attributes
    ----------
    window_ms : float
        A lost track's object is looked for where it was for this long after the track ended.
    first_ms : float
        ... in every frame for this long after the track ended, and then at most once in ``retry_ms``: a
        camera's quick swing is over within a few frames, and an object that moved away is not found where it
        was, while each look costs about as much as a small search (under a tight budget a look in every frame
        would leave no time for the search that finds the object where it went). A view sharp again is looked
        at within that time.
    retry_ms : float
        See ``first_ms``.
    agreement : float
        The least share of the model's strong edges in view the frame must confirm through a re-acquired
        homography (the detector's own verification asks for half, with its matches' evidence besides).
    layout_ms : float
        An object placed by its neighbours is looked for for this long after its track ended, and at most once
        in ``layout_retry_ms`` once ``window_ms`` has passed: an object taken away is not looked for in every
        frame.
    layout_retry_ms : float
        See ``layout_ms``.
    layout_seen_ms : float
        Two objects count as keeping their places when, over the last ``layout_seen_ms`` or more in which both
        were followed, one placed the other's corners the same within ``layout_steady_px`` pixels (a few times
        what tracking itself wanders by).
    layout_steady_px : float
        See ``layout_seen_ms``.
    layout_in_view : float
        An object placed by its neighbours is looked for once they place it wholly in view (this share of it):
        one at the edge is coming or going, and an alignment on the part in view would place the rest by
        extrapolation.
    """

    window_ms: float = 1000.0  # a second: 30 frames at 30 frames a second
    first_ms: float = 100.0  # 3 frames at 30 frames a second
    retry_ms: float = 100.0
    agreement: float = 0.8
    layout_ms: float = 10000.0  # ten seconds
    layout_retry_ms: float = 170.0  # 5 frames at 30 frames a second
    layout_seen_ms: float = 170.0
    layout_steady_px: float = 3.0
    layout_in_view: float = 0.95

    def __post_init__(self) -> None:
        for name in ("window_ms", "first_ms", "retry_ms", "layout_ms", "layout_retry_ms", "layout_seen_ms"):
            v = getattr(self, name)
            if not v >= 0:
                raise ValueError(f"{name}: expected a time in milliseconds >= 0, got {v!r}")


def waiting(tracker: Tracker, frame: int, sought: dict[str, int], shape: tuple[int, int] | None = None) -> list[Track]:
    """The ended planar tracks of ``tracker`` whose objects are looked for in frame ``frame`` (of ``shape``
    rows and columns), not tracked now: those ended for one of :data:`REASONS` within ``window_ms``
    (:class:`ReacquireParams`: in each frame of the first ``first_ms``, then at most once in ``retry_ms``); and
    those ended for one of :data:`LAYOUT_REASONS` within ``layout_ms`` that an object followed now places
    (:func:`placed`), at most once in ``layout_retry_ms`` after the first ``window_ms``; each time counted in
    the footage's frames (:meth:`~objrec.realtime.tracker.Tracker.frames`). One placed by its neighbours must be
    placed wholly in view (``layout_in_view``); one looked for where it was last must have been last seen at
    least as much in view as a new track needs (``min_anchor_visible``: an object mostly out of view would be
    found in vain). The least recently looked for come first (``sought``: object name to the frame it was last
    looked for). Older ones are forgotten, with their places in the layout."""
    if not tracker.enabled or tracker.templates is None or tracker.appearance is None:
        return []
    rp, frames = tracker.params.reacquire, tracker.frames
    window, first, retry = frames(rp.window_ms), frames(rp.first_ms), frames(rp.retry_ms)
    layout, layout_retry = frames(rp.layout_ms), frames(rp.layout_retry_ms)
    for name in [n for n, (_, ended, _) in tracker.ended.items() if frame - ended > layout]:
        del tracker.ended[name]
    tracked = {t.name for t in tracker.tracks}
    known = set(tracker.ended) | tracked
    for pair in [p for p in tracker.layout if not set(p) <= known]:
        del tracker.layout[pair]
    least = tracker.params.min_anchor_visible  # an object less in view than this would not anchor a track
    out: list[Track] = []
    for track, ended, why in tracker.ended.values():
        if track.name in tracked or getattr(track, "homography", None) is None:
            continue
        t = cast("Track", track)  # a track with a homography is planar
        recent = frame - ended <= window
        H = placed(tracker, t) if why in LAYOUT_REASONS else None
        if H is None:
            due = frame - ended <= first or frame - sought.get(t.name, ended) >= retry
            if recent and due and why in REASONS and t.visible >= least:
                out.append(t)
        elif recent or frame - sought.get(t.name, -layout_retry) >= layout_retry:
            if (t.visible if shape is None else _in_view(H, *t.model_size, shape)) >= rp.layout_in_view:
                out.append(t)
    return sorted(out, key=lambda t: sought.get(t.name, -1))


def _in_view(H: np.ndarray, w: int, h: int, shape: tuple[int, int]) -> float:
    return float(visible_part(H, map_points(H, model_corners(w, h)), w, h, shape)[2])


def last_seen(tracker: Tracker, t: Track) -> np.ndarray:
    """Where the object of the ended track ``t`` is looked for: where an object ``tracker`` follows now places it
    (:func:`placed`), or else its last homography."""
    H = placed(tracker, t)
    return t.homography if H is None else H


def placed(tracker: Tracker, t: TrackLike) -> np.ndarray | None:
    """The homography at which the objects ``tracker`` follows now place the object of the ended track ``t``: the first
    tracked (planar) object it was seen with, times its place relative to that one (:func:`remember_layout`);
    None when there is none. Objects that stay where they are (a shelf, a desk, a wall) keep their places
    relative to each other whatever the camera does, so one object followed again tells where the others
    are: after a swing of the camera, when a hand moves off one, when the view comes back to them."""
    for o in tracker.tracks:
        Ho = getattr(o, "homography", None)
        if Ho is None:
            continue
        R = tracker.layout.get((o.name, t.name))
        if R is None and (back := tracker.layout.get((t.name, o.name))) is not None:
            R = np.linalg.inv(back)
        if R is not None:
            return Ho @ R
    return None


def remember_layout(tracker: Tracker, t: TrackLike) -> None:
    """At the end of the planar track ``t``: its place relative to each planar track of ``tracker`` still followed
    (``tracker.layout[(other, t)]``: ``t``'s model to the other's model), both from the last frame ``t`` was
    followed in (``Track.history``; a track that followed a swing of the camera a frame longer than the others
    had moved on), where the two kept their places relative to each other while both were followed
    (:func:`_steady`). A relation stays as it was taken: when the other one ends later, the two are no longer
    seen together."""
    H = getattr(t, "homography", None)
    hist = dict(getattr(t, "history", ()))
    if H is None or not hist:
        return
    last = max(hist)
    for o in tracker.tracks:
        if o is t or o.name == t.name or getattr(o, "homography", None) is None:
            continue
        mine = dict(o.history)
        rp = tracker.params.reacquire
        R = _steady(hist, mine, last, t.model_size, tracker.frames(rp.layout_seen_ms), rp.layout_steady_px)
        if R is not None:
            tracker.layout[(o.name, t.name)] = R


def _steady(
    lost: dict[int, np.ndarray],
    seen: dict[int, np.ndarray],
    last: int,
    size: tuple[int, int],
    seen_frames: int,
    steady_px: float,
) -> np.ndarray | None:
    """The lost object's place in the seen object's model in frame ``last`` (``lost`` and ``seen``: frame to
    homography), when both were followed in it and in a frame at least ``seen_frames`` before, and the lost
    object's corners placed by the seen one then and in ``last`` are within ``steady_px`` of each other (in
    ``last``'s frame pixels); else None. Objects moved about independently (a hand holding
    one) do not keep their places, and one would place the other where it is not."""
    if last not in seen:
        return None
    early = [f for f in lost if f in seen and f <= last - seen_frames]
    if not early:
        return None
    R = np.linalg.inv(seen[last]) @ lost[last]
    R0 = np.linalg.inv(seen[min(early)]) @ lost[min(early)]
    c = model_corners(*size)
    drift = np.linalg.norm(map_points(seen[last] @ R0, c) - map_points(seen[last] @ R, c), axis=1).max()
    return R if drift <= steady_px else None


def reacquire(tracker: Tracker, t: Track, gray: np.ndarray) -> Detection | None:
    """The object of the ended track ``t`` looked for in ``gray`` where the objects followed now place it, or
    else where ``t`` last placed it (:func:`last_seen`; see the module notes): a detection of it, or None.
    Other tracks' outlines are hidden from the alignment and from the appearance check. ``tracker``: the
    stream's tracker (its tracks, model images and appearance check)."""
    if tracker.templates is None or tracker.appearance is None:
        raise ValueError("reacquire: the tracker needs model images (templates) and an appearance check")
    start = last_seen(tracker, t)
    w, h = t.model_size
    hidden = hiders(tracker.tracks, map_points(start, model_corners(w, h)))
    H, support = realign(gray, tracker.templates.get(t.name), start, t.model_size, hidden, tracker.params.realign)
    if H is None:
        return None
    share = tracker.appearance(gray, t.name, H, t.model_size, hidden)
    if not share >= tracker.params.reacquire.agreement:  # NaN (too little in view) fails too
        return None
    corners = map_points(H, model_corners(w, h))
    visible = visible_part(H, corners, w, h, gray.shape[:2])[2]
    return Detection(t.name, float(share), int(support), H, corners, float(visible))
