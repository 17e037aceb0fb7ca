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

__all__ = ["REACQUIRE_FRAMES", "REACQUIRE_AGREEMENT", "REASONS", "waiting", "reacquire"]

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
    forgotten."""
    if not tracker.enabled or tracker.templates is None or tracker.appearance is None:
        return []
    for name in [n for n, (_, ended, _) in tracker.ended.items() if frame - ended > REACQUIRE_FRAMES]:
        del tracker.ended[name]
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


def reacquire(tracker: Any, t: Any, gray: np.ndarray) -> Detection | None:
    """The object of the ended track ``t`` looked for in ``gray`` where ``t`` last placed it (see the module
    notes): a detection of it, or None. Other tracks' outlines are hidden from the alignment and from the
    appearance check."""
    hidden = hiders(tracker.tracks, t.corners)
    H, support = realign(gray, tracker.templates.get(t.name), t.homography, t.model_size, hidden)
    if H is None:
        return None
    share = tracker.appearance(gray, t.name, H, t.model_size, hidden)
    if not share >= REACQUIRE_AGREEMENT:  # NaN (too little in view) fails too
        return None
    w, h = t.model_size
    corners = map_points(H, model_corners(w, h))
    visible = visible_part(H, corners, w, h, gray.shape[:2])[2]
    return Detection(t.name, float(share), int(support), H, corners, float(visible))
