"""Rating a reference image as enrolment would store it: its measures, score and reasons, and what a picture of
the rating needs (the features and how distinctive each is)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from objrec.features.extract import KIND_ORDER
from objrec.features.model import (
    DEFAULT_DETECTORS,
    MAX_MODEL_SIDE,
    detect_features,
    extract_model_features,
    model_detector,
)
from objrec.imageio import InputError, check_frame, read_image, to_bgr, to_gray
from objrec.rating.measures import (
    GRID,
    MIN_CELL_FEATURES,
    RATIO,
    blockiness,
    cell_counts,
    chroma_contrast,
    corner_weights,
    hard_view_matches,
    hard_view_share,
    nearest_other_distance,
    quarter_turned,
    quarter_turned_points,
    query_ratio,
    rms_contrast,
    small_view_matches,
    symmetry_share,
    upright_turns,
)
from objrec.rating.model import SHAPES, WEIGHTS, Reason, parts, score_from_measures
from objrec.types import Features

__all__ = [
    "RATING_VERSION",
    "FEATURES_ONLY",
    "VIEW_MEASURES",
    "Rating",
    "rate",
    "read_reference",
    "rated_kind",
    "hard_view_kind",
    "features_only",
]

#: The version of the measures and the score model; stored with every rating so a database can tell which
#: ratings an updated model would change.
RATING_VERSION = "rating-6"
#: The suffix of a stored rating version (:attr:`Rating.stored_version`) computed without the rendered views it
#: needs (:func:`features_only` tells).
FEATURES_ONLY = "+features"
#: The measures that need rendered views of the image (:func:`~objrec.rating.measures.small_view_matches` and
#: :func:`~objrec.rating.measures.hard_view_matches`): the costly part of a rating, which a rating from the
#: image's own features (``rate(..., views=False)``, as enrolment stores it) leaves out.
VIEW_MEASURES = ("small_view_matches", "hard_views")


@dataclass(frozen=True, eq=False)
class Rating:
    """How well a reference image will be recognised, and why not.

    Attributes
    ----------
    score : int
        0-100 (see :mod:`objrec.rating.model`); 75 or more is a good reference, under 40 a poor one.
    reasons : list of Reason
        What lowered the score, costliest first, each with the number that triggered it.
    measures : dict of str -> float
        The raw measures (keys :data:`~objrec.rating.model.MEASURE_KEYS`).
    version : str
        :data:`RATING_VERSION`.
    kind : str
        The detector whose features were rated (:func:`rated_kind`).
    xy : (N, 2) float32 ndarray
        Those features' positions, in pixels of the image as given.
    distinctiveness : (N,) float32 ndarray
        Per feature, the ratio test's value a query would see (:func:`~objrec.rating.measures.query_ratio`):
        below :data:`~objrec.rating.measures.RATIO` it is distinctive, near 1 it has a twin in the image.
    shape : tuple of int
        The image's (height, width).
    views : bool
        Whether the rating is complete: the measures of rendered views (:data:`VIEW_MEASURES`) took part, or
        its shape's score does not use them. Without them their factors count as 1, so the score is an upper
        bound of the full rating's; ``objrec rate`` and :meth:`~objrec.modeldb.ModelDB.rate` compute the full
        one.
    object_shape : str
        The shape the image was scored for (:data:`~objrec.rating.model.SHAPES`): ``flat`` (a print, a cover,
        a poster) or ``solid`` (an object with depth).
    """

    score: int
    reasons: list[Reason]
    measures: dict[str, float]
    version: str = RATING_VERSION
    kind: str = ""
    xy: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))
    distinctiveness: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))
    shape: tuple[int, int] = (0, 0)
    views: bool = True
    object_shape: str = "flat"

    @property
    def codes(self) -> list[str]:
        """The reasons' codes, costliest first."""
        return [r.code for r in self.reasons]

    @property
    def parts(self) -> dict[str, float]:
        """Points lost per basis (:func:`~objrec.rating.model.parts`): the image's own, its rendered views',
        and what real photos predict."""
        return parts(self.reasons)

    def to_json(self) -> dict[str, Any]:
        """``{"score", "object_shape", "reasons": [{"code", "value", "message", "cost", "basis"}], "parts", "measures",
        "version", "kind", "views"}``."""
        return {
            "score": self.score,
            "object_shape": self.object_shape,
            "reasons": [r.to_json() for r in self.reasons],
            "parts": self.parts,
            # a measure not taken (NaN) is null: JSON has no NaN
            "measures": {k: None if math.isnan(v) else round(float(v), 4) for k, v in self.measures.items()},
            "version": self.version,
            "kind": self.kind,
            "views": self.views,
        }

    def summary(self) -> str:
        """One line: the score and the reasons with their numbers."""
        why = "; ".join(r.text for r in self.reasons)
        how = ("" if self.views else " without views") + (
            " as an object with depth" if self.object_shape == "solid" else ""
        )
        return f"{self.score}/100{how}" + (f" ({why})" if why else "")

    @property
    def stored_version(self) -> str:
        """The version a database records for this rating: :data:`RATING_VERSION`, with :data:`FEATURES_ONLY`
        for a rating without the rendered views it needs."""
        return self.version if self.views else self.version + FEATURES_ONLY


def features_only(stored_version: str | None) -> bool:
    """Whether a stored rating version (:attr:`Rating.stored_version`) is of a rating without the rendered
    views it needs, which ``objrec db info --rating`` completes."""
    return (stored_version or "").endswith(FEATURES_ONLY)


def read_reference(image: Any, name: str = "image") -> np.ndarray:
    """A reference image's pixels as enrolment reads them: a file decoded by
    :func:`~objrec.imageio.read_image`, or a checked array; BGRA and (H, W, 3) images come back BGR.
    ``image``: a path or an array; ``name``: what errors call it."""
    if isinstance(image, str | os.PathLike):
        img = read_image(image)
    elif isinstance(image, np.ndarray) or image is None:
        img = check_frame(image, name)
    else:
        raise InputError(f"{name}: expected an image file path or a uint8 array, got {type(image).__name__}")
    return to_bgr(img) if img.ndim == 3 else img


def rated_kind(kinds: Any) -> str:
    """The detector kind a rating uses among ``kinds``: the recognizer's primary one (the first of
    :data:`~objrec.features.extract.KIND_ORDER` present), which serves every frame."""
    kinds = list(kinds)
    if not kinds:
        raise ValueError("detectors: expected at least one detector kind, got none")
    return next((k for k in KIND_ORDER if k in kinds), kinds[0])


def hard_view_kind(kinds: Any) -> str:
    """The detector kind the rating's hard views are searched with among ``kinds``: the recognizer's escalation
    (the last of :data:`~objrec.features.extract.KIND_ORDER` present), which takes over where the primary
    detector is unsure, as it is in small, steep or blurred views; the only kind when there is one."""
    kinds = list(kinds)
    present = [k for k in KIND_ORDER if k in kinds]
    return present[-1] if present else rated_kind(kinds)


def _feature_measures(f: Features, kind: str, gray: np.ndarray, shape: str) -> tuple[dict, Any, Any]:
    """Features, distinctive features, repetition share, coverage, symmetry and, for a solid object (only its
    score uses them; NaN otherwise), the corner-weighted distinctive features of one detector's features (on
    the host) of the image ``gray``."""
    ratio = query_ratio(nearest_other_distance(f.descriptors), kind)
    xy = np.asarray(f.xy, np.float32).reshape(-1, 2)
    distinct = ratio < RATIO
    nd = int(distinct.sum())
    covered = cell_counts(xy[distinct], gray.shape[:2]) >= MIN_CELL_FEATURES
    m = {
        "n_features": float(len(xy)),
        "distinctive_features": float(nd),
        "repetition": 1.0 - nd / len(xy) if len(xy) else 0.0,
        "coverage": float(covered.sum()) / (GRID * GRID),
        "symmetry": symmetry_share(f, gray.shape[:2]),
        "corner_features": float(corner_weights(gray, xy[distinct], np.asarray(f.size)[distinct]).sum())
        if shape == "solid"
        else float("nan"),
    }
    return m, xy, ratio


def _needs_views(shape: str, weights: dict[str, float]) -> bool:
    """Whether the score of an object of ``shape`` uses the rendered views' measures."""
    return shape == "flat" or weights["solid_views_power"] > 0


def rate(
    image: Any,
    *,
    detectors: dict[str, dict[str, Any]] | None = None,
    features: dict[str, Features] | None = None,
    weights: dict[str, float] | None = None,
    views: bool = True,
    shape: str = "flat",
) -> Rating:
    """Rate a reference image: how well objrec will recognise it, and what lowers that.

    The image is rated as enrolment stores it: read the same way, with features extracted by
    :func:`~objrec.features.model.extract_model_features` (the longer side scaled to at most
    :data:`~objrec.features.model.MAX_MODEL_SIDE`, coordinates in the image's own pixels).

    Parameters
    ----------
    image : path or ndarray
        An image file, or a gray or BGR(A) uint8 array.
    detectors : dict of kind -> parameters, optional
        A database's detectors (default :data:`~objrec.features.model.DEFAULT_DETECTORS`); the primary one
        (:func:`rated_kind`) is rated, the hard views (:func:`~objrec.rating.measures.hard_view_matches`)
        are searched with the escalation's (:func:`hard_view_kind`), and only those two kinds' features are
        extracted.
    features : dict of kind -> Features, optional
        Features already extracted from this image as enrolment does (enrolment passes its own, so nothing is
        extracted twice); ``detectors`` then only gives the detectors' parameters for the small and hard views
        (:func:`~objrec.rating.measures.small_view_matches`).
    weights : dict, optional
        The score model's parameters (default :data:`~objrec.rating.model.WEIGHTS`).
    views : bool
        Render and search the small and hard views (:data:`VIEW_MEASURES`, most of a rating's cost) where the
        shape's score uses them. Without them the rating comes from the image's own features as given (with
        ``features``, nothing is extracted) and the pixels: the views' factors count as 1 and their measures
        are NaN.
    shape : {"flat", "solid"}
        What the image shows, as enrolment's ``shape``: a flat print (a cover, a poster, a box face) or an
        object with depth, scored for what real photos of such an object keep
        (:func:`~objrec.rating.model.score_from_measures`); a solid object's score uses no rendered views.

    Returns
    -------
    Rating

    Raises
    ------
    InputError
        For a missing, unreadable, empty, 16-bit or oversized image.
    ValueError
        For an unknown ``shape``.

    Examples
    --------
    >>> import numpy as np
    >>> r = rate(np.full((240, 320), 128, np.uint8))
    >>> r.score, r.codes[0]
    (0, 'few_features')
    """
    if shape not in SHAPES:
        raise ValueError(f"shape: expected one of {', '.join(SHAPES)}, got {shape!r}")
    img = read_reference(image)
    dets = dict(detectors or DEFAULT_DETECTORS)
    w = WEIGHTS if weights is None else weights
    kinds = dets if features is None else features
    if not (views and _needs_views(shape, w)):
        # complete when the shape's score uses no views
        return replace(
            _rate_features(img, dets, rated_kind(kinds), features, w, shape), views=not _needs_views(shape, w)
        )
    return _rate_with_views(img, dets, features, w, shape)


def _rate_with_views(
    given_img: np.ndarray,
    dets: dict[str, dict[str, Any]],
    features: dict[str, Features] | None,
    weights: dict[str, float],
    shape: str,
) -> Rating:
    """A full rating: features and views measured on the image turned upright (:func:`upright_turns`), so that an
    image and its quarter turns get the same rating; features given for the image as it is serve when it is
    upright."""
    kinds = dets if features is None else features
    kind, hard_kind = rated_kind(kinds), hard_view_kind(kinds)
    given_gray = to_gray(given_img)
    turns = upright_turns(given_gray)
    img = quarter_turned(given_img, turns)
    gray = quarter_turned(given_gray, turns)
    h, w = gray.shape
    params = {k: dets.get(k, DEFAULT_DETECTORS.get(k, {})) for k in {kind, hard_kind}}
    have = dict(features or {}) if turns == 0 else {}
    missing = {k: p for k, p in params.items() if k not in have}
    if missing:
        have.update(extract_model_features(img, missing))
    f = have[kind].to_host()
    m, xy, ratio = _feature_measures(f, kind, gray, shape)
    det = model_detector(kind, params[kind])
    small = small_view_matches(gray, xy, f.descriptors, lambda g: detect_features(kind, det, g))
    fh = have[hard_kind].to_host()
    hard_det = model_detector(hard_kind, params[hard_kind])
    hard = hard_view_matches(img, fh.xy, fh.descriptors, lambda g: detect_features(hard_kind, hard_det, g))
    m.update(_pixel_measures(given_img, given_gray))
    m.update(
        # the geometric mean of the small views' correct matches (plus one): an image must survive all of them
        small_view_matches=float(np.exp(np.mean(np.log1p(small))) - 1.0),
        hard_views=hard_view_share(hard),
    )
    score, reasons = score_from_measures(m, weights, shape)
    back = quarter_turned_points(xy, (h, w), -turns)  # the features where the image as given has them
    return Rating(score, reasons, m, RATING_VERSION, kind, back, ratio, given_gray.shape[:2], object_shape=shape)


def _pixel_measures(img: np.ndarray, gray: np.ndarray) -> dict[str, float]:
    """The measures of the pixels alone, of ``img`` as given (``gray``: its gray); none depends on which way up
    it is."""
    h, w = gray.shape
    return {
        "gray_contrast": rms_contrast(gray),
        "chroma_contrast": chroma_contrast(img),
        "short_side": float(min(h, w)),
        "model_scale": min(1.0, MAX_MODEL_SIDE / max(h, w)),
        "blockiness": blockiness(gray),  # on the pixels as given: the JPEG blocks' grid is theirs
    }


def _rate_features(
    img: np.ndarray,
    dets: dict[str, dict[str, Any]],
    kind: str,
    features: dict[str, Features] | None,
    weights: dict[str, float],
    shape: str,
) -> Rating:
    """A rating without rendered views: the primary detector's features of the image as given (extracted only
    when not given; a feature's count, distinctiveness, cell coverage and corner-likeness do not depend on which
    way up the image is, and the features' symmetry is measured from their descriptors) and the measures of its
    pixels, none of which depends on which way up the image is either."""
    if features is None or kind not in features:
        features = extract_model_features(img, {kind: dets.get(kind, DEFAULT_DETECTORS.get(kind, {}))})
    given_gray = to_gray(img)
    f = features[kind].to_host()
    m, xy, ratio = _feature_measures(f, kind, given_gray, shape)
    m.update(_pixel_measures(img, given_gray))
    m.update(dict.fromkeys(VIEW_MEASURES, float("nan")))
    score, reasons = score_from_measures(m, weights, shape)
    return Rating(score, reasons, m, RATING_VERSION, kind, xy, ratio, given_gray.shape[:2], object_shape=shape)
