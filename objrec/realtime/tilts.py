"""Tilted views of the frame: a search for objects seen far from head-on, on the query side.

A planar object seen at an angle ``theta`` from its normal is foreshortened by the *tilt* ``t = 1 / cos(theta)``
along one direction of the image (``t = 2`` at 60 degrees, ``t = 4`` at 75.5). Beyond a tilt of about 2 the
features of the enrolled front view no longer match those of the photo: detectors and descriptors are invariant to
rotation and scale, not to so strong a shear. Views rendered at enrolment (``views="affine"``) cover such angles
for the objects enrolled with them, at a cost per object; this stage covers them for every object, at a cost per
frame, as ASIFT (Morel and Yu, 2009) and MODS (Mishkin et al., 2015) do on the query side.

Without a budget, where candidates still had too little evidence after the escalation, the region around them
(the union of their boxes, with a margin) is resampled for each tilt ``t`` and each direction ``phi`` of the
foreshortening (rotations ``72 / t`` degrees apart, ASIFT's sampling): rotated by ``phi``, then stretched by
``sqrt(t)`` along x and shrunk by ``sqrt(t)`` along y, so that area is kept and a photo foreshortened by ``t``
along that x axis looks head-on again (at ``1 / sqrt(t)`` of its size). The primary detector's features of each
view are mapped back to frame pixels (positions, sizes and orientations through the view's affine map), matched
against the frame's suspects and verified, one view at a time: the matches of wrong views would sink the inlier
ratio of the right one. The first view that verifies an object no search had found ends the stage.

Its cost is that of a search of the region per view (5 views at ``t = 2``, 10 at ``t = 4``), paid in every frame
without a budget in which a candidate stays unsure, including photos that show no enrolled object; it is an
option (``Recognizer(tilts=...)``), off by default.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import cv2
import numpy as np

from objrec.boxes import outline_box
from objrec.types import Features

__all__ = ["DEFAULT_TILTS", "check_tilts", "parse_tilts", "tilted_views", "to_frame", "search_region", "search"]

#: The tilts ``tilts=True`` searches: 60 and 75.5 degrees from the normal, every other tilt of ASIFT's series
#: (``sqrt(2)``, 2, ``2 sqrt(2)``, 4, ...), so half its views.
DEFAULT_TILTS = (2.0, 4.0)
#: Each side of the region searched in tilted views is grown by this share of the unsure boxes' union.
MARGIN = 0.25
#: A view's shorter side is kept at least this many pixels.
MIN_SIDE = 16


def check_tilts(tilts: bool | Sequence[float] | None, budget_ms: float | None) -> tuple[float, ...]:
    """The tilts a recognizer searches, checked: ``True`` gives :data:`DEFAULT_TILTS`, ``False``/None/empty none;
    a sequence must hold numbers above 1 (a tilt of 1 is the frame itself). Raises ValueError for anything else,
    and for tilts together with a recognizer's ``budget_ms``: the search runs only in frames without a budget."""
    if tilts is None or tilts is False:
        return ()
    if tilts is True:
        out: tuple[float, ...] = DEFAULT_TILTS
    else:
        try:
            out = tuple(sorted(float(t) for t in tilts))
        except (TypeError, ValueError):
            raise ValueError(f"tilts: expected True, False or a sequence of numbers above 1, got {tilts!r}") from None
        if any(not np.isfinite(t) or t <= 1.0 for t in out):
            raise ValueError(f"tilts: every tilt must be a finite number above 1, got {tilts!r}")
    if out and budget_ms is not None:
        raise ValueError(
            f"tilts: the search of tilted views runs only in frames without a budget (budget_ms={budget_ms}); "
            "use tilts with budget_ms=None"
        )
    return out


def parse_tilts(text: str | None, budget_ms: float | None = None) -> tuple[float, ...]:
    """The tilts of a command line's ``--tilts 2,4``: ``text``, its comma-separated value (None when not given: no
    tilts), checked as :func:`check_tilts` checks them against the command's ``budget_ms``; errors name
    ``--tilts``."""
    if text is None:
        return ()
    try:
        tilts = [float(t) for t in text.split(",")]
    except ValueError:
        raise ValueError(f"--tilts: expected comma-separated numbers above 1, got {text!r}") from None
    try:
        return check_tilts(tilts, budget_ms)
    except ValueError as exc:
        raise ValueError(f"--tilts: {str(exc).removeprefix('tilts: ')}") from None


def search_region(boxes: Sequence[Sequence[int]], shape: tuple[int, int]) -> tuple[int, int, int, int] | None:
    """The region searched in tilted views: the union of ``boxes`` (x0, y0, x1, y1) grown by :data:`MARGIN` of
    its sides on each side, within a frame of ``shape`` (rows, cols) (:func:`~objrec.boxes.outline_box` of the
    boxes' corners; None when too little of it lies in the frame)."""
    h, w = shape
    return outline_box(np.asarray(boxes, np.float64).reshape(-1, 2), MARGIN, w, h)


def _corners(w: int, h: int, a: np.ndarray) -> np.ndarray:
    return np.array([[0, 0, 1], [w, 0, 1], [w, h, 1], [0, h, 1]], np.float64) @ a.T


def tilted_views(
    gray: np.ndarray, box: tuple[int, int, int, int], tilts: Sequence[float]
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The views of ``gray``'s ``box`` (x0, y0, x1, y1) for each of ``tilts`` and each direction, in order of tilt,
    then angle: ``(view, back)`` with ``back`` the 2x3 affine map from the view's pixels to the frame's.

    Each view is the box rotated by ``phi`` and stretched by ``sqrt(t)`` along x, interpolated (no aliasing when
    enlarging), then shrunk by ``sqrt(t)`` along y by area averaging (the anti-aliased subsampling ASIFT's
    simulated tilt needs)."""
    x0, y0, x1, y1 = box
    crop = np.ascontiguousarray(gray[y0:y1, x0:x1])
    h, w = crop.shape[:2]
    if h < MIN_SIDE or w < MIN_SIDE:
        return
    for t in tilts:
        s = float(np.sqrt(t))
        n = max(1, int(round(180.0 / (72.0 / t))))
        for k in range(n):
            rot = cv2.getRotationMatrix2D((w / 2.0, h / 2.0), k * 180.0 / n, 1.0)
            a = np.diag([s, 1.0]) @ rot
            c = _corners(w, h, a)
            a[:, 2] -= c.min(0)
            wide, tall = (int(np.ceil(v)) for v in c.max(0) - c.min(0))
            view = cv2.warpAffine(crop, a, (wide, tall), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
            rows = max(MIN_SIDE, int(round(tall / s)))
            view = cv2.resize(view, (wide, rows), interpolation=cv2.INTER_AREA)
            full = np.diag([1.0, rows / tall, 1.0]) @ np.vstack([a, [0.0, 0.0, 1.0]])
            back = np.linalg.inv(full)[:2]
            back[:, 2] += (x0, y0)
            yield view, back


def to_frame(feats: Features, back: np.ndarray) -> Features:
    """``feats`` of a view mapped to frame pixels by its 2x3 affine map ``back``: positions through the map,
    orientations through its linear part, sizes by the square root of its area factor."""
    if not len(feats):
        return feats
    xp = feats.xp
    lin = back[:, :2]
    xy = feats.xy @ xp.asarray(lin.T, xp.float32) + xp.asarray(back[:, 2], xp.float32)
    rad = xp.deg2rad(feats.angle)
    d = xp.stack([xp.cos(rad), xp.sin(rad)], axis=1) @ xp.asarray(lin.T, xp.float32)
    angle = xp.where(feats.angle < 0, feats.angle, xp.rad2deg(xp.arctan2(d[:, 1], d[:, 0])) % 360.0)
    size = feats.size * np.float32(np.sqrt(abs(np.linalg.det(lin))))
    return feats.replace(xy=xy, angle=angle, size=size)


def search(looks: Any, state: Any, sched: Any, tilts: Sequence[float]) -> None:
    """The ``tilts`` views of the region around the frame's open unsure boxes searched, one view at a time, as
    optional units of stage ``tilt_<kind>`` (the primary detector's), until one verifies an object not found
    before (see the module notes). ``looks``: the recognizer's
    :class:`~objrec.realtime.searches.SecondLooks`; ``state``, ``sched``: the frame's state and scheduler."""
    verdicts = state.verdicts
    boxes = verdicts.open_unsure()
    if not tilts or sched.budget_ms is not None or not boxes:
        return
    kind = looks.primary
    det, matcher = looks.features.detector(kind, 1), looks.matchers[kind]
    among = looks.suspects(state)
    known = set(verdicts.found)
    region = search_region(boxes, state.shape)
    if region is None:
        return
    for i, (view, back) in enumerate(tilted_views(state.image.host, region, tilts)):
        feats, candidates = sched.run(
            "tilt", _view_search, det, matcher, view, back, among,
            size=view.size, stage=f"tilt_{kind}", subject=f"{kind}:{i}",
        )  # fmt: skip
        looks.settle(feats, candidates, kind, verdicts, sched)
        if set(verdicts.found) - known:
            return


def _view_search(det: Any, matcher: Any, view: np.ndarray, back: np.ndarray, among: list[int] | None) -> tuple:
    """One view's features in frame pixels and their candidates among the records ``among``."""
    feats = to_frame(det.detect_and_compute(view, None), back)
    return feats, matcher.candidates(feats, among) if len(feats) else []
