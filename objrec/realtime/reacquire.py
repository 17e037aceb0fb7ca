"""Re-acquisition of lost tracks by alignment with their models.

A camera swung quickly blurs the frame and moves every object at once: the tracks lose their points and end
together, and when the view comes back the detector would have to find each object again, one search at a
time. Most of them are back where they were. A track that ended for lack of support is kept
for :data:`REACQUIRE_FRAMES` frames, and its object is looked for where it was last: the model is rendered
through the track's last homography and aligned with the frame (:func:`~objrec.realtime.align.realign`,
pyramidal Lucas-Kanade followed by a RANSAC refit). An alignment has no descriptor matches behind it, so it
counts only when the appearance check confirms at least :data:`REACQUIRE_AGREEMENT` of the model's strong
edges in view (a sharp view of the object confirms nearly all of them; an alignment caught on a blurred or
half-moved view, or on another object, far fewer). The object then starts a new track, as a detection
would (``state="detected"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from objrec.boxes import map_points, model_corners
from objrec.matching.verify import visible_part
from objrec.realtime.align import hiders, realign
from objrec.types import Detection

__all__ = [
    "REACQUIRE_FRAMES",
    "REACQUIRE_AGREEMENT",
    "REASONS",
    "waiting",
    "reacquire",
    "last_seen",
    "learn_motion",
    "moved_since",
]

#: A lost track's object is looked for where it was for this many frames after the track ended (a second at
#: 30 frames a second).
REACQUIRE_FRAMES = 30
#: The least share of the model's strong edges in view the frame must confirm through a re-acquired
#: homography (the detector's own verification asks for half, with its matches' evidence besides).
REACQUIRE_AGREEMENT = 0.8
#: The reasons a track ends for which its object is looked for again: its points were lost (blur, fast
#: motion, a cover passing over it). An object that left the view comes back elsewhere than where it left
#: (the edge of the frame); a track that failed its appearance check, gave way to others or was not
#: confirmed is not looked for either.
REASONS = ("support",)


def waiting(tracker: Any, frame: int, sought: dict[str, int]) -> list[Any]:
    """The ended planar tracks of ``tracker`` whose objects are looked for in frame ``frame``: ended for one of
    :data:`REASONS` within :data:`REACQUIRE_FRAMES` frames, not tracked now, and last seen at least as much in
    view as a new track needs (``min_anchor_visible``: one leaving the frame would be found in vain), the least
    recently looked for first (``sought``: object name to the frame it was last looked for). Older ones are
    forgotten, with what was learned of the view's motion since they ended."""
    if not tracker.enabled or tracker.templates is None or tracker.appearance is None:
        return []
    for name in [n for n, (_, ended, _) in tracker.ended.items() if frame - ended > REACQUIRE_FRAMES]:
        del tracker.ended[name]
    for f in [f for f in tracker.motion if frame - f > REACQUIRE_FRAMES]:
        del tracker.motion[f]
    tracked = {t.name for t in tracker.tracks}
    least = tracker.params.min_anchor_visible  # an object less in view than this would not anchor a track
    out = [
        t
        for t, _, why in tracker.ended.values()
        if why in REASONS
        and t.name not in tracked
        and getattr(t, "homography", None) is not None
        and getattr(t, "visible", 1.0) >= least
    ]
    return sorted(out, key=lambda t: sought.get(t.name, -1))


def last_seen(tracker: Any, t: Any) -> np.ndarray:
    """Where the object of the ended track ``t`` is looked for: its last homography, moved as the view moved
    since, when an object lost in the same frame has been found again (:func:`moved_since`); or else its
    homography in an earlier frame (``Track.history``) where other objects were lost, moved as the view moved
    since then: a track that followed a swing of the camera for a frame or two longer than the others ended
    further along it, where the object no longer is."""
    ended = tracker.ended.get(t.name)
    if ended is None or ended[0] is not t:
        return t.homography
    M = moved_since(tracker, ended[1])
    if M is not None:
        return M @ t.homography
    for frame, H in reversed(getattr(t, "history", ())):
        M = moved_since(tracker, frame + 1, within=0)  # tracks that ended in the frame after this one's
        if M is not None:
            return M @ H
    return t.homography


def reacquire(tracker: Any, t: Any, gray: np.ndarray) -> Detection | None:
    """The object of the ended track ``t`` looked for in ``gray`` where ``t`` last placed it, moved as the view
    moved since where that is known (:func:`last_seen`; see the module notes): a detection of it, or None.
    Other tracks' outlines are hidden from the alignment and from the appearance check."""
    start = last_seen(tracker, t)
    w, h = t.model_size
    hidden = hiders(tracker.tracks, map_points(start, model_corners(w, h)))
    H, support = realign(gray, tracker.templates.get(t.name), start, t.model_size, hidden)
    if H is None:
        return None
    share = tracker.appearance(gray, t.name, H, t.model_size, hidden)
    if not share >= REACQUIRE_AGREEMENT:  # NaN (too little in view) fails too
        return None
    corners = map_points(H, model_corners(w, h))
    visible = visible_part(H, corners, w, h, gray.shape[:2])[2]
    return Detection(t.name, float(share), int(support), H, corners, float(visible))


def learn_motion(tracker: Any, d: Detection) -> None:
    """Where ``d`` finds an object whose planar track ended for lack of support, the move of the view since
    that frame (the old homography to ``d``'s), kept in ``tracker.motion`` for the other objects lost in the
    same frames (:func:`moved_since`)."""
    old = tracker.ended.get(d.name)
    if old is None or d.homography is None or old[2] not in REASONS:
        return
    H = getattr(old[0], "homography", None)
    if H is not None:
        tracker.motion[old[1]] = np.asarray(d.homography, np.float64) @ np.linalg.inv(H)


def moved_since(tracker: Any, frame: int, within: int = 1) -> np.ndarray | None:
    """How the view moved since ``frame`` (a homography of frame pixels), learned from an object lost within
    ``within`` frames of it and found again (the nearest such frame; the latest learned there); None when none
    was. A camera swung out and back, or shaken while the view was blurred, moves every object in view alike
    (exactly so for objects on one plane), so one object found again tells where the others lost with it are."""
    near = [f for f in tracker.motion if abs(f - frame) <= within]
    return None if not near else tracker.motion[min(near, key=lambda f: abs(f - frame))]
