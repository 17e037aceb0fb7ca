"""Rating an object enrolled from several views (``objrec db add-view``): what its views say together.

A single image cannot show how an object changes from one side to another; two enrolled views of it can. The
object's rating combines

- its views' own ratings, as the chance that at least one of them is found (``1 - prod(1 - s_i / 100)``): each
  view covers the photos taken from near its side;
- how well its views agree: the verified matches between each view and the view that agrees with it best
  (:func:`view_agreement`; ratio-test matches of the rated detector's features that fit one fundamental matrix
  for an object with depth, one homography for a flat one), their median over the views. An object whose views
  share many features keeps them from one viewpoint to the next, as the photos it will be found in do; views
  that share few show an object that changes too much between them. The factor is
  ``1 - exp(-agreement / view_agreement_scale)`` (:data:`~objrec.rating.model.WEIGHTS`), fitted on objects of
  two enrolled views against recognition in their other photos.

An object of one view is rated as that view. The rating comes from the enrolled views only, never from photos
the object will be searched in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from objrec.rating.measures import ratio_pairs
from objrec.rating.model import BASES, WEIGHTS, Reason, parts
from objrec.types import Features

__all__ = ["ObjectRating", "view_agreement", "rate_object", "AGREEMENT_MIN_MATCHES"]

#: Ratio-test matches below which two views count as not agreeing at all (a fundamental matrix needs 8 points
#: and a robust fit some to spare).
AGREEMENT_MIN_MATCHES = 12
#: Epipolar distance (px) within which a match fits the views' fundamental matrix (MAGSAC), and reprojection
#: distance (px) for the homography of a flat object (RANSAC, as recognition verifies).
EPIPOLAR_PX = 1.5
HOMOGRAPHY_PX = 5.0


@dataclass(frozen=True)
class ObjectRating:
    """How well an object enrolled from several views will be recognised.

    Attributes
    ----------
    name : str
        The object.
    score : int
        0-100.
    view_scores : list of int
        Each view's own rating, in view order.
    agreement : float or None
        The median over views of the verified matches with the best-agreeing other view; None for one view.
    shape : str
        ``flat`` or ``solid``.
    reasons : list of Reason
        What lowered the object's score, costliest first (``views_disagree`` when its views share few features).
    """

    name: str
    score: int
    view_scores: list[int]
    agreement: float | None
    shape: str
    reasons: list[Reason] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """``{"name", "score", "view_scores", "agreement", "shape", "reasons", "parts"}``."""
        return {
            "name": self.name,
            "score": self.score,
            "view_scores": list(self.view_scores),
            "agreement": self.agreement,
            "shape": self.shape,
            "reasons": [r.to_json() for r in self.reasons],
            "parts": parts(self.reasons),
        }

    def summary(self) -> str:
        """One line: the score, the views' scores and their agreement."""
        views = ", ".join(f"{s}" for s in self.view_scores)
        agree = "" if self.agreement is None else f", {self.agreement:.0f} verified matches between views"
        why = "; ".join(r.text for r in self.reasons)
        n = len(self.view_scores)
        return f"{self.score}/100 from {n} view{'s' if n > 1 else ''} ({views}{agree})" + (f": {why}" if why else "")


def view_agreement(a: Features, b: Features, solid: bool) -> int:
    """Verified matches between two enrolled views of an object: ratio-test matches of ``a``'s features among
    ``b``'s that fit one fundamental matrix (``solid``: MAGSAC, :data:`EPIPOLAR_PX`) or one homography
    (RANSAC, :data:`HOMOGRAPHY_PX`); 0 with fewer than :data:`AGREEMENT_MIN_MATCHES` ratio-test matches.

    Parameters
    ----------
    a, b : Features
        The two views' features of one detector kind (on the host).
    solid : bool
        Whether the object has depth (no plane maps one view onto the other).

    Returns
    -------
    int
    """
    qi, ti = ratio_pairs(a.descriptors, b.descriptors)
    if len(qi) < AGREEMENT_MIN_MATCHES:
        return 0
    p = np.asarray(a.xy, np.float64)[qi]
    q = np.asarray(b.xy, np.float64)[ti]
    if solid:
        _, mask = cv2.findFundamentalMat(p, q, cv2.USAC_MAGSAC, EPIPOLAR_PX, 0.999, 10000)
    else:
        _, mask = cv2.findHomography(p, q, cv2.RANSAC, HOMOGRAPHY_PX)
    return 0 if mask is None else int(mask.sum())


def _agreement(features: Sequence[Features], solid: bool) -> float:
    """The median over views of each view's verified matches with the other view that agrees with it best."""
    n = len(features)
    pair = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            pair[i, j] = pair[j, i] = view_agreement(features[i], features[j], solid)
    return float(np.median(pair.max(axis=1)))


def rate_object(
    name: str,
    view_scores: Sequence[int],
    features: Sequence[Features | None],
    shape: str = "flat",
    weights: Mapping[str, float] = WEIGHTS,
) -> ObjectRating:
    """Rate an object from its enrolled views' ratings and features (see the module's notes).

    Parameters
    ----------
    name : str
        The object's name.
    view_scores : sequence of int
        Each view's rating (0-100), for the object's shape.
    features : sequence of Features
        Each view's features of the rated detector kind, in the same order (unused, and may be None, for an
        object of one view).
    shape : {"flat", "solid"}
    weights : mapping
        The score model's parameters (``view_agreement_scale``).

    Returns
    -------
    ObjectRating

    Examples
    --------
    >>> rate_object("one view", [64], [None]).score
    64
    """
    scores = [int(s) for s in view_scores]
    if not scores or len(scores) != len(features):
        raise ValueError(
            f"{name}: expected one score and one feature set per view, got {len(scores)} and {len(features)}"
        )
    if len(scores) == 1:
        return ObjectRating(name, scores[0], scores, None, shape)
    if any(f is None for f in features):
        raise ValueError(f"{name}: every view of an object of several views needs its features")
    agreement = _agreement([f.to_host() for f in features if f is not None], shape == "solid")
    covered = 1.0 - math.prod(1.0 - min(100, max(0, s)) / 100.0 for s in scores)
    factor = 1.0 - math.exp(-agreement / weights["view_agreement_scale"])
    score = int(round(100.0 * covered * factor))
    reasons = []
    if factor < 0.9:
        text = (
            f"views disagree: {agreement:.0f} verified matches between its views (the object changes much "
            "between viewpoints; photos between them keep few features)"
        )
        reasons.append(Reason("views_disagree", agreement, text, 100.0 * covered - score, BASES[2]))
    return ObjectRating(name, score, scores, agreement, shape, reasons)
