"""Tracking windows, verification order and ageing."""

from __future__ import annotations

import numpy as np

from objrec.realtime.tracker import Tracker
from objrec.types import Candidate, Detection


def _det(name: str, x0: float, y0: float, x1: float, y1: float) -> Detection:
    corners = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
    H = np.array([[(x1 - x0) / 100, 0, x0], [0, (y1 - y0) / 100, y0], [0, 0, 1]], np.float64)
    return Detection(name, 0.9, 20, H, corners)


def _cand(name: str, n: int) -> Candidate:
    z = np.zeros((n, 2), np.float32)
    return Candidate(0, z, z, np.zeros(n, np.float32), name, (100, 100))


def test_window_is_the_outline_box_grown_and_clipped():
    t = Tracker(grow=0.25)
    t.update({"a": _det("a", 100, 100, 200, 180), "b": _det("b", 580, 400, 660, 470)})
    w = t.windows(640, 480)
    # a: 100 wide, 80 high, grown by 25 / 20 per side; b: clipped at the frame's right and bottom edges.
    assert w.boxes.tolist() == [[75, 80, 225, 200], [560, 382, 640, 480]]


def test_tracks_age_out_and_tracked_objects_are_verified_first():
    t = Tracker(max_age=1)
    t.update({"a": _det("a", 10, 10, 110, 110)})
    t.update({"b": _det("b", 300, 300, 400, 400)})  # a missed once: kept, older
    order = [c.name for c in t.prioritise([_cand("x", 50), _cand("a", 5), _cand("b", 10), _cand("y", 60)])]
    assert order == ["b", "a", "y", "x"]
    t.update({})
    assert set(t.tracks) == {"b"}  # a missed twice: dropped
    t.reset()
    assert len(t.windows(640, 480)) == 0


def test_disabled_tracker_has_no_windows_and_no_preference():
    t = Tracker(enabled=False)
    t.update({"a": _det("a", 10, 10, 110, 110)})
    assert len(t.windows(640, 480)) == 0
    assert [c.name for c in t.prioritise([_cand("a", 1), _cand("b", 9)])] == ["b", "a"]
