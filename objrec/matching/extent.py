"""Where a candidate's object lies in the frame, from a few of its matches: the object's predicted extent.

A match of two keypoints with a size and an orientation (SURF's, SIFT's) fixes a similarity transform on
its own: the scale is the ratio of the sizes, the rotation the difference of the angles, and the model point
goes to the frame point. Mapped through it, the model's outline lands where the object is, to within what
perspective and the keypoints' noise allow. Matches of the object agree on that place; chance matches of
other things scatter (the generalised Hough transform of Lowe's recognition by SIFT, "Distinctive Image
Features from Scale-Invariant Keypoints", IJCV 2004, section 7.1, with one bin around each match).

A candidate with too few matches to verify, found where only part of its object lay in the searched part of
the frame, is then known by where the whole of it lies: the next search looks there (see
:attr:`objrec.matching.verdicts.FrameVerdicts.hints`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from objrec.boxes import clip_box
from objrec.geometry import model_corners
from objrec.types import Candidate

__all__ = ["Extent", "predicted_extent", "EXTENT_SUPPORT", "EXTENT_GROW"]

#: The fewest matches that must agree on the object's place: two chance matches of another thing agree now and
#: then; three within the tolerances below seldom do.
EXTENT_SUPPORT = 3
#: Two matches agree when the object's centres they predict lie within this share of the object's predicted
#: diagonal, their scales within :data:`SCALE_RATIO` of each other and their rotations within
#: :data:`ANGLE_DEG` (the tolerances of Lowe's Hough bins, a quarter of the model's size, a factor of two in
#: scale and 30 degrees, tightened a little: a match's own frame is measured, not binned).
CENTRE_SHARE = 0.2
SCALE_RATIO = 1.5
ANGLE_DEG = 30.0
#: The predicted box is grown by this share of its size on each side: perspective, which a similarity does
#: not model, and the object's motion until the next frame.
EXTENT_GROW = 0.2
#: At most this many of a candidate's matches (its best by the ratio test) are compared pairwise.
MAX_MATCHES = 64


class Extent(NamedTuple):
    """Where a candidate's matches place its object (:func:`predicted_extent`).

    Attributes
    ----------
    box : (int, int, int, int)
        (x0, y0, x1, y1) around the placed model image, grown by :data:`EXTENT_GROW`, clipped to the frame.
    support : int
        The matches that agree on the place.
    in_view : float
        The share of the placed model image's bounding box inside the frame.
    """

    box: tuple[int, int, int, int]
    support: int
    in_view: float


def predicted_extent(candidate: Candidate, width: int, height: int, support: int = EXTENT_SUPPORT) -> Extent | None:
    """Where in a ``width`` x ``height`` frame the candidate's matches place its whole model image (an
    :class:`Extent`); None when fewer than ``support`` matches agree, the candidate has no keypoint frames,
    or the place misses the frame.

    Each match's similarity maps the model's centre and scale; the match with the most others agreeing
    (:data:`CENTRE_SHARE`, :data:`SCALE_RATIO`, :data:`ANGLE_DEG`) and those others give the place: the
    median of their centres, scales and (about the first's) rotations."""
    mf, sf = candidate.model_frames, candidate.scene_frames
    n = len(candidate)
    if mf is None or sf is None or n < support:
        return None
    keep = np.argsort(candidate.ratio, kind="stable")[:MAX_MATCHES] if n > MAX_MATCHES else np.arange(n)
    mxy = np.asarray(candidate.model_xy, np.float64)[keep]
    sxy = np.asarray(candidate.scene_xy, np.float64)[keep]
    msz, ssz = np.asarray(mf, np.float64)[keep].T, np.asarray(sf, np.float64)[keep].T
    ok = (msz[0] > 0) & (ssz[0] > 0)
    if ok.sum() < support:
        return None
    mxy, sxy, msz, ssz = mxy[ok], sxy[ok], msz[:, ok], ssz[:, ok]
    scale = ssz[0] / msz[0]
    theta = np.radians(ssz[1] - msz[1])
    w, h = candidate.model_size
    centre = np.array([w / 2.0, h / 2.0])
    d = centre - mxy
    c, s = np.cos(theta), np.sin(theta)
    pred = sxy + scale[:, None] * np.stack([c * d[:, 0] - s * d[:, 1], s * d[:, 0] + c * d[:, 1]], axis=1)
    diag = float(np.hypot(w, h))
    dist = np.linalg.norm(pred[:, None, :] - pred[None, :, :], axis=2)
    near = dist <= CENTRE_SHARE * diag * np.minimum(scale[:, None], scale[None, :])
    log_s = np.log(scale)
    near &= np.abs(log_s[:, None] - log_s[None, :]) <= np.log(SCALE_RATIO)
    turn = np.abs((np.degrees(theta)[:, None] - np.degrees(theta)[None, :] + 180.0) % 360.0 - 180.0)
    near &= turn <= ANGLE_DEG
    votes = near.sum(axis=1)
    best = int(np.argmax(votes))
    agree = int(votes[best])
    if agree < support:
        return None
    member = near[best]
    k = float(np.median(scale[member]))
    rel = (theta[member] - theta[best] + np.pi) % (2 * np.pi) - np.pi
    t = float(theta[best] + np.median(rel))
    mid = np.median(pred[member], axis=0)
    corners = model_corners(w, h) - centre
    rot = np.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]])
    placed = mid + k * corners @ rot.T
    lo, hi = placed.min(axis=0), placed.max(axis=0)
    inside = np.clip(np.minimum(hi, (width, height)) - np.maximum(lo, 0.0), 0.0, None)
    in_view = float(inside[0] * inside[1] / max((hi - lo)[0] * (hi - lo)[1], 1e-9))
    g = (hi - lo) * EXTENT_GROW
    (x0, y0), (x1, y1) = lo - g, hi + g
    box = clip_box(x0, y0, x1, y1, width, height)
    return None if box is None else Extent(box, agree, in_view)
