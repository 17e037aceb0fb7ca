"""Tracking from frame to frame: last frame's objects are searched first, in a window around them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from objrec.boxes import outline_box
from objrec.types import Candidate, Detection, Regions

__all__ = ["Track", "Tracker"]


@dataclass
class Track:
    """An object seen recently: its last outline and the frames since it was last confirmed."""

    name: str
    corners: np.ndarray
    age: int = 0


class Tracker:
    """Last frames' objects, as search windows for the next frame and a verification order.

    Parameters
    ----------
    enabled : bool
        Without tracking there are no windows and no preferred order.
    grow : float
        A window is the last outline's bounding box grown by this fraction of its size per side.
    max_age : int
        A track not confirmed for more than this many frames is dropped.
    """

    def __init__(self, enabled: bool = True, grow: float = 0.25, max_age: int = 1) -> None:
        self.enabled = enabled
        self.grow = grow
        self.max_age = max_age
        self.tracks: dict[str, Track] = {}

    def _ordered(self) -> list[Track]:
        return sorted(self.tracks.values(), key=lambda t: t.age) if self.enabled else []

    def windows(self, width: int, height: int) -> Regions:
        """Search windows, most recently confirmed first (too small ones dropped)."""
        boxes = [outline_box(t.corners, self.grow, width, height) for t in self._ordered()]
        return Regions.from_boxes([b for b in boxes if b is not None])

    def prioritise(self, candidates: list[Candidate]) -> list[Candidate]:
        """Tracked objects' candidates first (most recently confirmed first), then the others by matches."""
        rank = {t.name: i for i, t in enumerate(self._ordered())}
        return sorted(candidates, key=lambda c: (rank.get(c.name, len(rank)), -len(c)))

    def update(self, found: dict[str, Detection]) -> None:
        """Refresh confirmed objects, age the others and drop those older than ``max_age``."""
        if not self.enabled:
            return
        for name in list(self.tracks):
            if name not in found:
                self.tracks[name].age += 1
                if self.tracks[name].age > self.max_age:
                    del self.tracks[name]
        for name, d in found.items():
            self.tracks[name] = Track(name, d.corners, 0)

    def reset(self) -> None:
        self.tracks.clear()
