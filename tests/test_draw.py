"""Annotated pictures: the statistics band is never covered, labels stay inside the picture."""

from __future__ import annotations

import numpy as np

from objrec.draw import color_for, draw_detections
from objrec.types import Detection


def _detection(name: str, corners) -> Detection:
    return Detection(name, 0.9, 40, np.eye(3), np.asarray(corners, np.float64))


def test_statistics_band_is_not_covered_and_labels_stay_inside():
    """A white frame (a white sky) with one object at the very top and one partly beyond the left edge: the
    title band is dark with only white text in it (no label colour, no outline), and every label's colour is
    inside the picture, below the band."""
    img = np.full((480, 640, 3), 255, np.uint8)
    top = _detection("cover", [[200, 2], [400, 2], [400, 200], [200, 200]])
    left = _detection("poster", [[-150, 250], [100, 250], [100, 450], [-150, 450]])
    out = draw_detections(img, [top, left], lines=["objrec run: 2 found", "p50 12 ms"])
    band = out[:30]
    assert band.shape[0] == 30
    grey = (band[..., 0] == band[..., 1]) & (band[..., 1] == band[..., 2])
    assert grey.all()  # dark band and white (anti-aliased grey) text only: no label colour, no outline
    assert (band < 128).mean() > 0.7  # mostly dark: white text stays readable
    for d in (top, left):
        c = np.array(color_for(d.name), np.uint8)
        ys, xs = np.nonzero((out == c).all(axis=2))
        assert len(ys) > 50 and ys.min() >= 30 and xs.min() >= 0
    assert (draw_detections(img, [top]) == color_for("cover")).all(axis=2)[:30].any()  # without lines, no band
