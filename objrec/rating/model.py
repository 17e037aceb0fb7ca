"""The score model: a reference image's measures mapped to a score 0-100 and the reasons that lowered it.

The score is 100 times a product of factors in [0, 1], each owned by one reason:

- ``few_features``: ``1 - exp(-n / features_scale)`` of the number ``n`` of features the detector finds (a
  saturating curve: more features help less and less once a view's share of them suffices for a homography);
- ``repetition``: the same curve of the *distinctive* features over that of all features, so a repeated texture
  loses exactly what its indistinct features would have given;
- ``fine_detail``: the saturating curve of the features still matched correctly when the image is seen blurred,
  or small, slightly blurred and from the side (``small_view_matches``,
  :func:`objrec.rating.measures.small_view_matches`): an image whose features are all small print, thin lines
  or fine texture is found only when seen large and sharp;
- ``hard_views``: ``floor + (1 - floor) * share`` (at most 1) of the image's credit in a few hard views of it
  (``hard_views``, :func:`objrec.rating.measures.hard_view_matches`: small, side-on, steep, out of focus,
  hand-held, each rendered over clutter and searched with the recognizer's escalation detector; a view with
  twice the correct matches a detection needs counts fully): how the image fares where recognition is hard;
- ``low_coverage``: ``1 - exp(-coverage / coverage_scale)`` of the share of grid cells holding distinctive
  features (features crowded in one part of the image vanish together under occlusion or when that part leaves
  the frame);
- ``low_contrast`` (or ``colour_only_contrast`` when the image's contrast is in its colours): the gray RMS
  contrast over ``contrast_ok``, capped at 1;
- ``too_few_pixels``: ``(short_side / min_side_px) ** 2`` below the minimum, the share of the pixels a usable
  reference has (fitted near 128 px, the smallest image Zappar accepts);
- ``jpeg_blocking`` and ``symmetry``: linear penalties above an onset, down to a floor;

Every reason has a basis (:data:`BASES`): the image's own pixels and features (``image``: texture, contrast,
repetition, size), rendered views of it (``views``), or what real photos of objects predict from the image
(``real_photos``); :func:`parts` adds up the points each basis cost.

**Objects with depth** (``shape="solid"``) are scored for what real photos of such an object do, which rendered
views of a flat print do not show: from another side, under other light, an object keeps the features of its own
print and texture and loses those on its outlines, folds and shading edges. Their score is

    ``100 * min(1, corner_features / solid_features_ok) ** solid_features_power * F_image ** solid_image_power
    * F_views ** solid_views_power``

with ``corner_features`` the distinctive features weighted by how corner-like their neighbourhoods are
(:func:`objrec.rating.measures.corner_weights`), reported as ``few_stable_features`` (basis ``real_photos``),
and ``F_image``, ``F_views`` the products of the image's and the views' factors above. Its parameters are fitted
against recognition in real photos of objects (each view of one half of the UKBench objects enrolled as solid,
the other views queried, by ``bench/bench_rating.py``), so that a score reads as the share of real photos in
which the object is found.

Each reason's cost in points splits the score's loss in proportion to ``-log`` of its factor, so the costs add up
to ``100 - score``; a reason is reported when its factor is below :data:`REPORT_BELOW`. The values of
:data:`WEIGHTS` that the calibration images can measure (the curves' scales, the contrast and the hard views'
floor) are fitted against recognition by ``bench/bench_rating.py`` on one half of those images; the others
(repetition, symmetry, blocking, the colour-only test) are set by the principles above. The features and
views are measured on the image turned upright (:func:`objrec.rating.measures.upright_turns`), so that an image and its
quarter turns are rated alike (JPEG blocking, a property of the pixels as decoded, is measured on them as
given).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from objrec.rating.measures import HARD_VIEWS

__all__ = ["Reason", "WEIGHTS", "MEASURE_KEYS", "REPORT_BELOW", "BASES", "SHAPES", "score_from_measures", "parts"]

#: The measures the model reads (see :func:`objrec.rating.rate`); every rating carries all of them.
MEASURE_KEYS = (
    "n_features",
    "distinctive_features",
    "repetition",
    "coverage",
    "gray_contrast",
    "chroma_contrast",
    "short_side",
    "model_scale",
    "blockiness",
    "symmetry",
    "small_view_matches",
    "hard_views",
    "corner_features",
)

#: What a reason's factor rests on: the image's own pixels and features, rendered views of the image, or the
#: behaviour of real photos of objects (a factor fitted against recognition in real photos).
BASES = ("image", "views", "real_photos")
#: The basis of each reason's code.
BASIS = {
    "few_features": "image",
    "repetition": "image",
    "fine_detail": "views",
    "hard_views": "views",
    "low_coverage": "image",
    "low_contrast": "image",
    "colour_only_contrast": "image",
    "too_few_pixels": "image",
    "jpeg_blocking": "image",
    "symmetry": "image",
    "few_stable_features": "real_photos",
    "views_disagree": "real_photos",
}
#: Reasons whose factors come from rendered views (``views``), raised to ``solid_views_power`` for a solid object.
VIEW_REASONS = tuple(code for code, basis in BASIS.items() if basis == "views")

#: The model's parameters (plain numbers, so a calibration can fit and store them).
WEIGHTS: dict[str, float] = {
    "features_scale": 14.69,  # features at which the feature curve reaches 1 - 1/e
    "coverage_scale": 0.0879,  # covered share of cells at which the coverage curve reaches 1 - 1/e
    "small_view_scale": 2.39,  # correct matches in the small views at which their curve reaches 1 - 1/e
    "hard_views_floor": 0.418,  # the hard-view factor of an image found in none of them
    "contrast_ok": 0.0914,  # gray RMS contrast from which contrast costs nothing (about 23 gray levels)
    "colour_ratio": 2.0,  # chroma contrast over gray contrast above which low contrast is colour-only
    "min_side_px": 122.5,  # shorter side below which an image has too few pixels
    "blocking_onset": 1.3,  # blockiness (1: none) from which blocking costs
    "blocking_slope": 1.0,  # factor lost per unit of blockiness above the onset
    "blocking_floor": 0.5,
    "symmetry_onset": 0.1,  # share of features explained by a symmetry from which it costs
    "symmetry_slope": 1.5,
    "symmetry_floor": 0.5,
    # objects with depth (shape "solid"), fitted on real photos:
    "solid_features_ok": 373.9,  # corner-weighted distinctive features from which a solid object loses nothing
    "solid_features_power": 0.257,
    "solid_image_power": 0.0049,  # weight of the image's own factors in a solid object's score
    "solid_views_power": 0.0,  # weight of the rendered views' factors (of a flat print) in a solid score: 0 by rule
    # objects of several views (objrec.rating.objects), fitted on real photos:
    "view_agreement_scale": 10.0,  # verified matches between views at which their factor reaches 1 - 1/e
}
#: The object shapes a score is computed for (as enrolment's ``shape``).
SHAPES = ("flat", "solid")

#: A reason is reported when its factor is below this.
REPORT_BELOW = 0.9


@dataclass(frozen=True)
class Reason:
    """Why a rating lost points.

    Attributes
    ----------
    code : str
        ``few_features``, ``repetition``, ``fine_detail``, ``hard_views``, ``low_coverage``, ``low_contrast``,
        ``colour_only_contrast``, ``too_few_pixels``, ``jpeg_blocking``, ``symmetry``; for objects with depth
        ``few_stable_features``; for objects of several views ``views_disagree``.
    value : float
        The measure that triggered it (a count, a share, a contrast, pixels).
    text : str
        One line for people, with the number.
    cost : float
        Points of the score it cost.
    basis : str
        What the reason rests on (:data:`BASES`): ``image``, ``views`` or ``real_photos``.
    """

    code: str
    value: float
    text: str
    cost: float = 0.0
    basis: str = "image"

    def to_json(self) -> dict:
        """``{"code", "value", "message", "cost", "basis"}``."""
        return {
            "code": self.code,
            "value": self.value,
            "message": self.text,
            "cost": round(self.cost, 1),
            "basis": self.basis,
        }


def _curve(x: float, scale: float) -> float:
    return 1.0 - math.exp(-max(0.0, x) / scale) if scale > 0 else 1.0


def _linear(x: float, onset: float, slope: float, floor: float) -> float:
    return min(1.0, max(floor, 1.0 - slope * (x - onset)))


def _factors(m: Mapping[str, float], w: Mapping[str, float]) -> list[tuple[str, float, float, str]]:
    """(code, factor, value, text) per reason."""
    n, nd = float(m["n_features"]), float(m["distinctive_features"])
    f_all = _curve(n, w["features_scale"])
    f_dist = _curve(nd, w["features_scale"])
    contrast, chroma = float(m["gray_contrast"]), float(m["chroma_contrast"])
    colour_only = chroma > w["colour_ratio"] * contrast and contrast < w["contrast_ok"]
    side, block, sym = float(m["short_side"]), float(m["blockiness"]), float(m["symmetry"])
    cov = float(m["coverage"])
    hard = float(m["hard_views"])
    factors = [
        ("few_features", f_all, n, f"few features: {n:.0f} found"),
        (
            "repetition",
            f_dist / f_all if f_all > 0 else 1.0,
            float(m["repetition"]),
            f"repetitive texture: {100 * m['repetition']:.0f}% of the features have a near twin ({nd:.0f} distinctive)",
        ),
        (
            "fine_detail",
            _curve(float(m["small_view_matches"]), w["small_view_scale"]),
            float(m["small_view_matches"]),
            f"detail too fine: {float(m['small_view_matches']):.0f} features still match when the image is seen "
            "blurred, or small and from the side",
        ),
        (
            "hard_views",
            min(1.0, w["hard_views_floor"] + (1.0 - w["hard_views_floor"]) * hard),
            hard,
            f"hard to find: {100 * hard:.0f}% credit in {len(HARD_VIEWS)} hard views "
            f"({', '.join(v[0] for v in HARD_VIEWS)})",
        ),
        (
            "low_coverage",
            _curve(cov, w["coverage_scale"]),
            cov,
            f"features crowded: distinctive features cover {100 * cov:.0f}% of the image",
        ),
        (
            "colour_only_contrast" if colour_only else "low_contrast",
            min(1.0, contrast / w["contrast_ok"]) if w["contrast_ok"] > 0 else 1.0,
            chroma if colour_only else contrast,
            f"contrast only in colour: chroma contrast {chroma:.3f}, gray {contrast:.3f}"
            if colour_only
            else f"low contrast: gray RMS contrast {contrast:.3f}",
        ),
        (
            "too_few_pixels",
            min(1.0, side / w["min_side_px"]) ** 2,
            side,
            f"too few pixels: shorter side {side:.0f} px (minimum {w['min_side_px']:.0f})",
        ),
        (
            "jpeg_blocking",
            _linear(block, w["blocking_onset"], w["blocking_slope"], w["blocking_floor"]),
            block,
            f"JPEG blocking: block-edge steps {block:.2f}x the steps inside blocks",
        ),
        (
            "symmetry",
            _linear(sym, w["symmetry_onset"], w["symmetry_slope"], w["symmetry_floor"]),
            sym,
            f"symmetric: {100 * sym:.0f}% of the features match a mirrored or rotated twin",
        ),
    ]
    # A measure that was not taken (NaN: a rating without rendered views) owns no factor.
    return [f for f in factors if not math.isnan(f[2])]


def _solid_factors(m: Mapping[str, float], w: Mapping[str, float]) -> list[tuple[str, float, float, str]]:
    """The factors of an object with depth: the flat factors raised to their basis' power, and the stable
    features' factor."""
    out = []
    for code, f, value, text in _factors(m, w):
        power = w["solid_views_power"] if code in VIEW_REASONS else w["solid_image_power"]
        if power > 0:
            out.append((code, max(0.0, f) ** power, value, text))
    n = float(m["corner_features"])
    if math.isnan(n):
        raise ValueError("corner_features: not measured (a rating for shape 'flat'); rate with shape='solid'")
    stable = min(1.0, max(0.0, n) / w["solid_features_ok"]) ** w["solid_features_power"]
    text = (
        f"few stable features for an object with depth: {float(m['distinctive_features']):.0f} distinctive features, "
        f"worth {n:.0f} weighted by how corner-like they are (photos from other sides and under other light keep "
        "corners, not outlines or shading edges)"
    )
    return [("few_stable_features", stable, n, text), *out]


def score_from_measures(
    measures: Mapping[str, float], weights: Mapping[str, float] = WEIGHTS, shape: str = "flat"
) -> tuple[int, list[Reason]]:
    """The score 0-100 of a rating's measures and the reasons that lowered it, costliest first.

    Parameters
    ----------
    measures : mapping
        At least the keys of :data:`MEASURE_KEYS` (a rating's ``measures``); a NaN measure was not taken and
        its reason costs nothing.
    weights : mapping
        The model's parameters (:data:`WEIGHTS`).
    shape : {"flat", "solid"}
        The object's shape (:data:`SHAPES`): a flat print is scored by the factors above, an object with depth
        by what real photos of one keep (the module's notes).

    Returns
    -------
    score : int
        0-100.
    reasons : list of Reason
        Those whose factor is below :data:`REPORT_BELOW`, by cost (largest first).

    Examples
    --------
    >>> blank = dict.fromkeys(MEASURE_KEYS, 0.0) | {"short_side": 480.0, "model_scale": 1.0, "blockiness": 1.0}
    >>> score, reasons = score_from_measures(blank)
    >>> score, reasons[0].code
    (0, 'few_features')
    >>> score_from_measures(blank, shape="solid")[1][0].code
    'few_stable_features'
    """
    missing = [k for k in MEASURE_KEYS if k not in measures]
    if missing:
        raise KeyError(f"measures: missing {', '.join(missing)}")
    if shape not in SHAPES:
        raise ValueError(f"shape: expected one of {', '.join(SHAPES)}, got {shape!r}")
    factors = _solid_factors(measures, weights) if shape == "solid" else _factors(measures, weights)
    product = math.prod(max(0.0, f) for _, f, _, _ in factors)
    score = int(round(100.0 * product))
    loss = 100.0 - 100.0 * product
    logs = [-math.log(min(1.0, max(f, 1e-6))) for _, f, _, _ in factors]
    total = sum(logs)
    reasons = [
        Reason(code, float(value), text, loss * lg / total if total > 0 else 0.0, BASIS[code])
        for (code, f, value, text), lg in zip(factors, logs, strict=True)
        if f < REPORT_BELOW
    ]
    # Ties (several factors at 0) keep the model's order, which puts the feature count first.
    reasons.sort(key=lambda r: -round(r.cost, 6))
    return score, reasons


def parts(reasons: list[Reason]) -> dict[str, float]:
    """Points lost per basis (:data:`BASES`), from the reasons' costs: how much of the score's loss is the
    image's own, how much its rendered views', how much predicted from real photos.

    Examples
    --------
    >>> parts([Reason("few_features", 3, "", 40.0), Reason("few_stable_features", 9, "", 5.0, "real_photos")])
    {'image': 40.0, 'views': 0.0, 'real_photos': 5.0}
    """
    return {b: round(float(sum(r.cost for r in reasons if r.basis == b)), 1) for b in BASES}
