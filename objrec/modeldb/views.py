"""View synthesis at enrolment: model features from affine-warped copies of the model image (ASIFT style).

A planar object seen at a grazing angle is foreshortened along one direction by the tilt ``t = 1 / cos θ``
of the camera's latitude ``θ``. SIFT and SURF are invariant to similarities only, so beyond a transition
tilt of about 2-2.5 between model and scene their descriptors no longer agree. Simulating the tilts on the
model side (Morel and Yu 2009) restores the match: each synthesised view rotates the model image by a
longitude ``φ``, blurs it along x (anti-aliasing, ``σ = c·sqrt(t² − 1)``) and subsamples x by ``t``. The
features of every view are mapped back to model coordinates through the inverse affine map and stored
with the object, so the recognizer matches a frame against them like any other model features.

Views multiply a model's near-duplicate descriptors (one physical point is found in several views), which
defeats Lowe's ratio test; the database matcher then takes the first geometrically inconsistent neighbour
as the competitor (FGINN, :func:`objrec.knn.fginn_competitor`).

References
----------
J.-M. Morel, G. Yu, "ASIFT: A new framework for fully affine invariant image comparison", SIAM Journal on
Imaging Sciences 2(2), 2009. doi:10.1137/080732730

D. Mishkin, J. Matas, M. Perdoch, "MODS: Fast and robust method for two-view matching", CVIU 141, 2015.
doi:10.1016/j.cviu.2015.08.005
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from objrec.features.model import MAX_MODEL_SIDE, detect_features, model_detector
from objrec.imageio import to_gray
from objrec.types import Features

__all__ = [
    "VIEWS",
    "AFFINE_TILTS",
    "LONGITUDE_STEP",
    "ANTIALIAS_SIGMA",
    "View",
    "check_views",
    "affine_views",
    "view_affine",
    "warp_view",
    "map_to_model",
    "view_features",
    "add_view_features",
    "view_rows",
    "TILT_TOLERANCE",
    "covered_tilt",
]

#: Accepted values of the ``views`` enrolment setting ("none" is the same as None: the model image only).
VIEWS = ("none", "affine")
#: Simulated tilts of ``views="affine"``: ASIFT's geometric series ``sqrt(2)**k`` up to 16 (a latitude of about
#: 86°). With descriptors matching across a residual tilt of about 2 (:data:`TILT_TOLERANCE`), the views reach
#: frames at transition tilts up to about 32 from the model image. Each tilt level adds about 2.5 times the
#: model image's own features (LONGITUDE_STEP gives ``2.5·t`` views of ``1/t`` of its area), and fewer at the
#: highest levels, where the views are narrow strips; levels beyond 16 would add their share of database size
#: and matching time again for views only a few dozen pixels wide.
AFFINE_TILTS = tuple(float(2 ** (k // 2)) * (math.sqrt(2.0) if k % 2 else 1.0) for k in range(1, 9))
#: Transition tilt that SIFT and SURF descriptors still match across (Morel and Yu 2009 measure about 2 to
#: 2.5): a frame is within reach of an object's views when its tilt relative to the nearest simulated view is
#: at most this, so views up to tilt ``T`` cover frames up to ``TILT_TOLERANCE · T``.
TILT_TOLERANCE = 2.0
#: Longitude step at tilt ``t`` is ``LONGITUDE_STEP / t`` degrees over [0, 180) (Morel and Yu 2009, sec. 4).
LONGITUDE_STEP = 72.0
#: Anti-aliasing blur before subsampling x by ``t``: ``σ = ANTIALIAS_SIGMA · sqrt(t² − 1)`` (ASIFT's c = 0.8).
ANTIALIAS_SIGMA = 0.8


@dataclass(frozen=True)
class View:
    """One simulated camera: tilt ``t >= 1`` (x subsampled by ``t``) after an in-plane rotation by
    ``longitude`` degrees (counter-clockwise as the image is displayed)."""

    tilt: float
    longitude: float

    def __post_init__(self) -> None:
        if not (np.isfinite(self.tilt) and self.tilt >= 1.0):
            raise ValueError(f"tilt: expected a number >= 1, got {self.tilt}")
        if not np.isfinite(self.longitude):
            raise ValueError(f"longitude: expected a finite number of degrees, got {self.longitude}")


def check_views(views: Any) -> str | None:
    """The normalised ``views`` setting: None for the model image only, else its name.

    Raises
    ------
    ValueError
        For anything but None or one of :data:`VIEWS`, naming the allowed values.
    """
    if views is None:
        return None
    if not isinstance(views, str) or views.lower() not in VIEWS:
        raise ValueError(f"views: expected None or one of {', '.join(repr(v) for v in VIEWS)}, got {views!r}")
    return None if views.lower() == "none" else views.lower()


def affine_views(tilts: tuple[float, ...] = AFFINE_TILTS, step: float = LONGITUDE_STEP) -> list[View]:
    """ASIFT's sampling of the view sphere: for each tilt ``t``, longitudes ``0, b/t, 2b/t, ... < 180``
    with ``b = step`` degrees (the model image itself, tilt 1, is not included).
    ``tilts``: the tilts sampled (besides 1)."""
    out = []
    for t in tilts:
        n = math.ceil(180.0 * t / step - 1e-9)
        out += [View(float(t), k * step / t) for k in range(n)]
    return out


def view_affine(view: View, width: int, height: int) -> tuple[np.ndarray, tuple[int, int]]:
    """The 2x3 affine map from model pixels to the view's pixels, and the view's size ``(width, height)``.

    The rotated image is shifted so its bounding box starts at 0, then x is divided by the tilt.
    ``view``: the view's tilt and longitude; ``width``, ``height``: the model image's size in pixels.
    """
    a = math.radians(view.longitude)
    c, s = math.cos(a), math.sin(a)
    # Counter-clockwise on screen (y points down): x' = c x + s y, y' = -s x + c y.
    R = np.array([[c, s], [-s, c]])
    corners = np.array([[0, 0], [width - 1, 0], [width - 1, height - 1], [0, height - 1]], float) @ R.T
    lo = corners.min(axis=0)
    size = corners.max(axis=0) - lo
    S = np.diag([1.0 / view.tilt, 1.0])
    A = np.hstack([S @ R, (S @ -lo)[:, None]])
    w = int(math.floor(size[0] / view.tilt)) + 1
    h = int(math.floor(size[1])) + 1
    return A, (w, h)


def warp_view(gray: np.ndarray, view: View) -> tuple[np.ndarray, np.ndarray]:
    """The view of a gray image: rotation, blur along x by ``ANTIALIAS_SIGMA·sqrt(t²−1)``, x subsampled
    by ``t``. Returns the image and the 2x3 affine map from ``gray``'s pixels to the view's."""
    h, w = gray.shape[:2]
    A, (vw, vh) = view_affine(view, w, h)
    t = view.tilt
    # Rotate first at full resolution (the map of view_affine without its x scaling), blur, then subsample,
    # so the blur acts along the direction that is compressed. Borders replicate the edge: a constant fill
    # would put a strong artificial edge along the object's outline.
    R = A.copy()
    R[0] *= t
    rw = int(math.floor((vw - 1) * t)) + 1
    rotated = cv2.warpAffine(gray, R, (rw, vh), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    if t == 1.0:
        return rotated, A
    sigma = ANTIALIAS_SIGMA * math.sqrt(t * t - 1.0)
    blurred = cv2.GaussianBlur(rotated, (0, 1), sigmaX=sigma, sigmaY=0.0, borderType=cv2.BORDER_REPLICATE)
    S = np.array([[1.0 / t, 0.0, 0.0], [0.0, 1.0, 0.0]])
    out = cv2.warpAffine(blurred, S, (vw, vh), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
    return out, A


def map_to_model(feats: Features, A: np.ndarray, width: int, height: int, scale: float = 1.0) -> Features:
    """Features found in a view mapped back to model pixels through the inverse of ``A`` (model to view).

    Positions are mapped exactly; a keypoint's size is scaled by ``sqrt(|det A⁻¹|)`` (the geometric mean of
    the stretch of its circle) and its orientation is the direction its angle's unit vector takes under
    ``A⁻¹``. Keypoints that land outside the ``width`` x ``height`` model image are dropped. ``scale`` is the
    model image's own scale (the view was made from the model image resized by it): positions and sizes are
    divided by it, as for the model image's own features.
    ``feats``: the view's features, in the view's pixels.
    """
    if len(feats) == 0:
        return feats
    Ainv = cv2.invertAffineTransform(np.asarray(A, np.float64))
    L = Ainv[:, :2]
    xy = (feats.xy.astype(np.float64) @ L.T + Ainv[:, 2]) / scale
    keep = (xy[:, 0] >= 0) & (xy[:, 0] <= width - 1) & (xy[:, 1] >= 0) & (xy[:, 1] <= height - 1)
    rad = np.radians(feats.angle[keep].astype(np.float64))
    d = np.stack([np.cos(rad), np.sin(rad)], axis=1) @ L.T
    angle = np.where(feats.angle[keep] >= 0, np.degrees(np.arctan2(d[:, 1], d[:, 0])) % 360.0, feats.angle[keep])
    size = feats.size[keep] * math.sqrt(abs(np.linalg.det(L))) / scale
    return Features(
        xy[keep],
        size,
        angle,
        feats.response[keep],
        feats.octave[keep],
        feats.laplacian[keep],
        feats.descriptors[keep],
        feats.kind,
    )


def view_features(
    gray: np.ndarray,
    detect: dict[str, Any],
    views: list[View],
    width: int,
    height: int,
    scale: float = 1.0,
) -> dict[str, list[Features]]:
    """Features of each view of ``gray`` per detector kind, in model pixels (one entry per view, in order).

    Parameters
    ----------
    gray : (H, W) uint8
        The model image at the resolution features are extracted from (the model image resized by ``scale``).
    detect : dict of kind -> callable
        ``detect[kind](image) -> Features``, the detectors the database uses.
    views : list of View
    width, height : int
        The model image's full-resolution size (keypoints outside it are dropped).
    scale : float
        ``gray``'s scale relative to the full-resolution model image.
    """
    out: dict[str, list[Features]] = {kind: [] for kind in detect}
    for view in views:
        image, A = warp_view(gray, view)
        for kind, fn in detect.items():
            out[kind].append(map_to_model(fn(image), A, width, height, scale))
    return out


def add_view_features(
    image: np.ndarray, feats: dict[str, Features], detectors: dict[str, dict[str, Any]], views: str
) -> tuple[dict[str, Features], dict[str, Any]]:
    """A model image's features (``feats``, from :func:`objrec.features.model.extract_model_features`) followed by
    those of its synthesised ``views`` (a :data:`VIEWS` name), per detector kind, in model pixels.

    Views are made from the model image at the resolution its own features come from (longer side at most
    :data:`objrec.features.model.MAX_MODEL_SIDE`), with the database's detectors.
    ``image``: the model image; ``detectors``: the database's detector settings (kind -> settings).

    Returns
    -------
    features : dict of kind -> Features
        The image's own features first, then each view's, in the order of the table.
    table : dict
        ``{"views": [[tilt, longitude], ...], "n_features": {kind: [count, ...]}}``, the image itself first
        as ``[1, 0]``: which keypoints came from which view (JSON, for the object table).
    """
    if check_views(views) != "affine":
        raise ValueError(f"views: expected one of {', '.join(repr(v) for v in VIEWS[1:])}, got {views!r}")
    gray = to_gray(image)
    h, w = gray.shape
    scale = min(1.0, MAX_MODEL_SIDE / max(h, w))
    if scale != 1.0:
        gray = cv2.resize(gray, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
    dets = {kind: model_detector(kind, params) for kind, params in detectors.items()}
    detect = {kind: (lambda img, kind=kind: detect_features(kind, dets[kind], img)) for kind in detectors}
    chosen = affine_views()
    per_view = view_features(gray, detect, chosen, w, h, scale)
    table = {
        "views": [[1.0, 0.0]] + [[v.tilt, v.longitude] for v in chosen],
        "n_features": {kind: [len(feats[kind])] + [len(f) for f in per_view[kind]] for kind in feats},
    }
    return {kind: Features.concatenate([feats[kind], *per_view[kind]]) for kind in feats}, table


def view_rows(
    table: dict[str, Any] | None, kind: str, n: int, H: np.ndarray, center: tuple[float, float], keep: int = 2
) -> np.ndarray:
    """Rows of an object's ``n`` keypoints of ``kind`` that come from the image itself and from the ``keep``
    views closest to how the model-to-frame homography ``H`` sees the model around ``center``.

    The frame sees the model through the local affine map ``J`` (the Jacobian of ``H`` at ``center``); a
    view with linear map ``L`` sees it as ``L``, so the frame sees that view through ``J·L⁻¹``, and the view
    whose ``J·L⁻¹`` is nearest to a similarity (smallest ratio of singular values) has the descriptors most
    like the frame's. All rows are returned without a view table (an object enrolled without views).
    """
    if not table:
        return np.arange(n)
    counts = np.asarray(table["n_features"][kind], np.int64)
    start = np.r_[0, np.cumsum(counts)]
    x, y = center
    p = H @ [x, y, 1.0]
    J = (H[:2, :2] * p[2] - np.outer(p[:2], H[2, :2])) / (p[2] * p[2])
    score = []
    for t, lon in table["views"]:
        A, _ = view_affine(View(float(t), float(lon)), 2, 2)
        sv = np.linalg.svd(J @ np.linalg.inv(A[:, :2]), compute_uv=False)
        score.append(sv[0] / max(sv[1], 1e-12))
    best = set(np.argsort(score)[:keep].tolist()) | {0}
    return np.concatenate([np.arange(start[i], start[i + 1]) for i in sorted(best)])


def covered_tilt(table: dict[str, Any] | None) -> float:
    """The largest tilt between model and frame that an object's views cover: ``TILT_TOLERANCE`` times the
    largest simulated tilt of its view table (``TILT_TOLERANCE`` alone for an object without views, whose
    own features already tolerate that much).

    Geometric verification uses it as the object's limit on the change of aspect ratio: a view of a planar
    object at tilt ``t`` changes its aspect ratio by up to ``t``, so a fixed limit below this would reject
    the very views the synthesised tilts were enrolled for.
    """
    tilts = [float(t) for t, _ in (table or {}).get("views", [])] or [1.0]
    return TILT_TOLERANCE * max(tilts)
