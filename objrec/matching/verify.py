"""Geometric verification: homography by OpenCV's USAC with degeneracy checks and reason codes.

The checks judge the geometry of the view, never the object's size in the frame: an object larger than the
frame, or partly outside it, is a detection whose outline (corners) may lie outside the image and whose
``visible_fraction`` says how much of the model the frame shows. What is judged: the model must lie in front
of the camera, map to a simple convex quadrilateral with its orientation kept, through a well-conditioned
homography, with enough of it visible; the inliers must spread over the visible part in two directions.

Geometry alone cannot tell an object from another one that shares part of its artwork (a logo, a title's
lettering, the same picture in another edition's layout): the shared part verifies. :func:`edge_agreement`
judges the rest: with the homography, the frame is resampled onto the model's thumbnail grid and the
model's strong edges are looked up there; the object must be confirmed over most of its visible outline,
not only where the matches are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from objrec.geometry import map_homogeneous, map_points, model_corners, polygon_area, usable_homography, visible_part
from objrec.types import Detection, Failure

__all__ = [
    "VerifyParams",
    "Verified",
    "verify_homography",
    "quad_checks",
    "homography_condition",
    "score_from_inliers",
    "edge_agreement",
    "REASONS",
]

#: Every reason a candidate can be rejected for.
REASONS = {
    "too_few_matches": "fewer putative matches than min_matches",
    "estimation_failed": "USAC returned no homography",
    "too_few_inliers": "fewer inliers than min_inliers",
    "low_inlier_ratio": "inliers / matches below min_inlier_ratio",
    "too_few_distinct": "inliers cluster on too few distinct model or scene points",
    "collinear": "inliers lie (nearly) on one line, in the model or the scene",
    "inliers_clustered": "the inliers cover too small a part of the visible outline (min_inlier_coverage)",
    "not_verified": "not verified: beyond the candidate limit or the frame budget",
    "behind_camera": "the homography sends part of the model behind the camera",
    "not_convex": "the projected model outline is not a convex quadrilateral",
    "self_intersecting": "the projected outline crosses itself",
    "mirrored": "the homography flips the model (negative orientation)",
    "ill_conditioned": "the normalised homography's condition number exceeds max_condition",
    "area": "visible projected area below min_area_px (or the outline above max_area_fraction of the frame)",
    "scale_change": "area change versus the model outside the allowed range",
    "aspect": "aspect ratio change beyond max_aspect_change",
    "perspective": "perspective terms too strong (extreme foreshortening)",
    "explained": "most of its inliers are inliers of a stronger detection (artwork the two objects share)",
    "inconsistent": "too few matches agree with their neighbours' local similarity (an object verified without a "
    "plane, objrec.matching.solid)",
    "appearance": "the frame confirms too few of the visible model's edges (min_edge_agreement): the matches lie on "
    "artwork this object shares with what is in view",
}

_METHODS = {
    "magsac": cv2.USAC_MAGSAC,
    "ransac": cv2.RANSAC,
    "usac_default": cv2.USAC_DEFAULT,
    "lmeds": cv2.LMEDS,
}


@dataclass(frozen=True)
class VerifyParams:
    """Verification parameters (all exposed to users; defaults chosen for 640x480 to 1080p frames).

    ``min_area_px`` applies to the part of the outline inside the frame; ``max_area_fraction`` (None: no
    limit) caps the whole outline's area as a multiple of the frame's, for callers who know their objects
    never come closer; ``max_condition`` bounds the condition number of the homography between the model
    and the frame each scaled to unit size; ``min_inlier_coverage`` is the least area of the inliers'
    convex hull, as a share of the visible outline's area; ``min_edge_agreement`` (None: not checked) is the
    least share of the visible model's strong edges that the frame must confirm (:func:`edge_agreement`;
    by chance about ``2 * EDGE_ANGLE_DEG / 180`` of them agree).

    Parameters
    ----------
    method : str
        The robust estimator: ``"magsac"``, ``"ransac"``, ``"usac_default"`` or ``"lmeds"`` (OpenCV's).
    reproj_threshold : float
        The estimator's inlier threshold in frame pixels.
    max_iters : int
        The estimator's most iterations.
    confidence : float
        The estimator's confidence.
    min_matches : int
        Fewer putative matches (at least 4) are not tried.
    min_inliers : int
        A homography needs this many inliers, and as many distinct inlier points in model and frame.
    min_inlier_ratio : float
        ... and this share of the matches as inliers.
    scale_range : (float, float)
        The outline's area over the model's, lowest and highest.
    max_aspect_change : float
        The outline's aspect ratio (mean lengths of opposite sides) against the model's, at most this factor
        either way.
    max_perspective : float
        Opposite sides of the outline differ in length by at most this share of the longer.
    min_spread : float
        The inliers' second singular value over their first, in model and frame, at least this (not on a line).
    min_area_px, max_area_fraction, max_condition, min_inlier_coverage, min_edge_agreement
        See above.
    """

    method: str = "magsac"
    reproj_threshold: float = 5.0
    max_iters: int = 2000
    confidence: float = 0.999
    min_matches: int = 8
    min_inliers: int = 10
    min_inlier_ratio: float = 0.15
    min_area_px: float = 400.0
    max_area_fraction: float | None = None
    max_condition: float = 1e4
    min_inlier_coverage: float = 0.01
    scale_range: tuple[float, float] = (1e-3, 64.0)
    max_aspect_change: float = 5.0
    max_perspective: float = 0.8
    min_spread: float = 0.05
    min_edge_agreement: float | None = 0.5

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise ValueError(f"method: expected one of {sorted(_METHODS)}, got {self.method!r}")


@dataclass
class Verified:
    """A verified candidate: homography, inlier mask and score.

    Attributes
    ----------
    homography : np.ndarray
        (3, 3) model-to-frame homography.
    inliers : np.ndarray
        Bool mask over the candidate's matches.
    n_inliers : int
        The inliers' count.
    score : float
        In [0, 1] (:func:`score_from_inliers`).
    corners : np.ndarray
        (4, 2) the model's corners mapped into the frame.
    info : dict
        Figures of the verification (``matches``, ``inlier_coverage``, ...).
    visible_fraction : float
        The share of the model's outline inside the frame.
    """

    homography: np.ndarray
    inliers: np.ndarray  # bool mask over the candidate's matches
    n_inliers: int
    score: float
    corners: np.ndarray
    info: dict = field(default_factory=dict)
    visible_fraction: float = 1.0

    def to_detection(self, name: str) -> Detection:
        return Detection(name, self.score, self.n_inliers, self.homography, self.corners, self.visible_fraction)


def _cross(o: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    return float((a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]))


def _segments_cross(p1: np.ndarray, p2: np.ndarray, p3: np.ndarray, p4: np.ndarray) -> bool:
    d1, d2 = _cross(p3, p4, p1), _cross(p3, p4, p2)
    d3, d4 = _cross(p1, p2, p3), _cross(p1, p2, p4)
    return (d1 * d2 < 0) and (d3 * d4 < 0)


def homography_condition(H: np.ndarray, width: int, height: int, frame_shape: tuple[int, int]) -> float:
    """Condition number of ``H`` between the model (``width`` x ``height`` pixels) and the frame (``frame_shape``:
    rows, cols), each scaled and centred to unit size (Hartley's normalisation: without it the number would
    measure the pixel units, not the mapping)."""

    def unit(w: float, h: float) -> np.ndarray:
        s = 2.0 / max(w, h, 1.0)
        return np.array([[s, 0, -s * w / 2], [0, s, -s * h / 2], [0, 0, 1.0]])

    fh, fw = frame_shape[:2]
    Hn = unit(fw, fh) @ H @ np.linalg.inv(unit(width, height))
    sv = np.linalg.svd(Hn / np.abs(Hn).max(), compute_uv=False)
    return float(sv[0] / sv[2]) if sv[2] > 0 else float("inf")


def quad_checks(
    H: np.ndarray, width: int, height: int, scene_shape: tuple[int, int], p: VerifyParams
) -> tuple[str | None, np.ndarray]:
    """Degeneracy checks of a homography through the model outline it produces.

    Returns ``(reason or None, corners)``; ``corners`` are the model's (0,0),(w,0),(w,h),(0,h) mapped
    (NaN when part of the model lies behind the camera). The outline may reach beyond the frame.

    Parameters
    ----------
    H : np.ndarray
        (3, 3) model-to-frame homography.
    width, height : int
        The model image's size in pixels.
    scene_shape : tuple of int
        The frame's (rows, cols).
    p : VerifyParams
        The limits checked.
    """
    hom = map_homogeneous(H, model_corners(width, height))
    if np.any(hom[:, 2] <= 1e-9):
        return "behind_camera", np.full((4, 2), np.nan)
    q = hom[:, :2] / hom[:, 2:3]
    if _segments_cross(q[0], q[1], q[2], q[3]) or _segments_cross(q[1], q[2], q[3], q[0]):
        return "self_intersecting", q
    turns = [_cross(q[i], q[(i + 1) % 4], q[(i + 2) % 4]) for i in range(4)]
    if not (all(t > 0 for t in turns) or all(t < 0 for t in turns)):
        return "not_convex", q
    # Image coordinates (y down): the model outline (0,0),(w,0),(w,h),(0,h) turns with positive cross.
    if turns[0] < 0:
        return "mirrored", q
    if homography_condition(H, width, height, scene_shape) > p.max_condition:
        return "ill_conditioned", q
    area = polygon_area(q)
    sh, sw = scene_shape[:2]
    if p.max_area_fraction is not None and area > p.max_area_fraction * sw * sh:
        return "area", q
    if visible_part(H, q, width, height, scene_shape)[1] < p.min_area_px:
        return "area", q
    if not p.scale_range[0] <= area / float(width * height) <= p.scale_range[1]:
        return "scale_change", q
    # Aspect: mean lengths of opposite sides against the model's w/h.
    wq = 0.5 * float(np.linalg.norm(q[1] - q[0]) + np.linalg.norm(q[2] - q[3]))
    hq = 0.5 * float(np.linalg.norm(q[3] - q[0]) + np.linalg.norm(q[2] - q[1]))
    change = (wq / max(hq, 1e-9)) / (width / height)
    if not 1.0 / p.max_aspect_change <= change <= p.max_aspect_change:
        return "aspect", q
    # Foreshortening: opposite sides whose lengths differ by more than the limit.
    for a, b in (
        (np.linalg.norm(q[1] - q[0]), np.linalg.norm(q[2] - q[3])),
        (np.linalg.norm(q[3] - q[0]), np.linalg.norm(q[2] - q[1])),
    ):
        if min(a, b) < (1.0 - p.max_perspective) * max(a, b):
            return "perspective", q
    return None, q


#: The comparison grid is split into EDGE_BLOCKS x EDGE_BLOCKS blocks, each judged on its own strongest edges
#: and counted equally, so the answer says how much of the outline is confirmed, wherever its texture is.
EDGE_BLOCKS = 4
#: A block's strong edges: its pixels above this quantile of its own gradient magnitude.
EDGE_QUANTILE = 0.75
#: A block is judged when its strongest gradient reaches this share of the visible model's 90th percentile
#: (flat blocks, such as a plain margin, have no edges to confirm).
TEXTURED_BLOCK = 0.25
#: A model edge is confirmed where the frame's gradient lies within this angle of it, either sign (a contrast
#: reversal under other lighting still confirms the edge).
EDGE_ANGLE_DEG = 20.0
#: Fewer judged blocks, or strong edge pixels, in view than these are too few to judge: the check passes.
MIN_EDGE_BLOCKS = 4
MIN_EDGE_PIXELS = 40
#: Frame pixels at or above this gray level are saturated (glare on a glossy cover, a light source): what
#: lies under them is unknown, so they are not judged.
SATURATED = 250
#: The comparison grid's least side (cells): an object smaller in the frame than the thumbnail is compared
#: at its own size in frame pixels, down to this.
MIN_EDGE_GRID = 24
#: Grid cells covering fewer frame pixels than this (the far side of a steep view) are not judged.
MIN_CELL_PIXELS = 0.5
#: The frame is sampled this many times finer than the grid, then area-averaged onto it (anti-aliasing).
EDGE_OVERSAMPLE = 4


def _gradients(img: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return cv2.Sobel(img, cv2.CV_32F, 1, 0, ksize=3), cv2.Sobel(img, cv2.CV_32F, 0, 1, ksize=3)


def _resolved(to_frame: np.ndarray, g: int) -> np.ndarray:
    """(g, g) uint8: 1 where a grid cell covers at least :data:`MIN_CELL_PIXELS` frame pixels under
    ``to_frame`` (grid cells to frame pixels). A homography scales areas at ``p`` by ``det(M) / w(p)^3``
    (``M`` normalised to ``M[2, 2] = 1``, ``w`` its third coordinate of ``p``); where a steep view squeezes
    the model, the frame holds less detail than the grid and its resampled edges are blur, not evidence."""
    m = to_frame / to_frame[2, 2]
    c = np.arange(g) + 0.5
    wv = m[2, 0] * c[None, :] + m[2, 1] * c[:, None] + 1.0
    return (abs(np.linalg.det(m)) / np.abs(wv) ** 3 >= MIN_CELL_PIXELS).astype(np.uint8)


def edge_agreement(
    frame_gray: np.ndarray,
    thumb: np.ndarray,
    H: np.ndarray,
    model_size: tuple[int, int],
    hidden: list[np.ndarray] | tuple = (),
) -> tuple[float, int]:
    """The share of the visible model's strong edges that the frame confirms under ``H``, and their count.

    ``thumb`` is the model image in gray on a square grid over its outline (``ModelDB.thumbnail``). The frame
    is resampled onto that grid through ``H`` (model pixels to frame pixels), at the thumbnail's resolution
    or, for an object smaller in the frame, at its own. A strong model edge is confirmed where the frame's
    gradient direction is within :data:`EDGE_ANGLE_DEG` of the model's: gradient direction survives changes
    of lighting, contrast, blur and glare that defeat comparing intensities. The grid's textured blocks
    (:data:`EDGE_BLOCKS`) are judged on their own strongest edges and averaged, each counting equally.
    Parts outside the frame, or inside ``hidden`` outlines (frame-pixel quadrilaterals of objects found in
    front), are not judged. Returns the share and the number of strong edge pixels judged; the share is NaN
    when too little is in view (:data:`MIN_EDGE_BLOCKS`, :data:`MIN_EDGE_PIXELS`). ``frame_gray`` is the
    frame in gray (uint8) and ``model_size`` the model image's (width, height).
    """
    w, h = model_size
    corners = map_points(H, model_corners(w, h))
    side = np.sqrt(max(polygon_area(corners), 1.0))
    g = int(np.clip(side, MIN_EDGE_GRID, thumb.shape[0])) // EDGE_BLOCKS * EDGE_BLOCKS
    model = thumb if g == thumb.shape[0] else cv2.resize(thumb, (g, g), interpolation=cv2.INTER_AREA)
    fine = g * EDGE_OVERSAMPLE
    to_frame = H @ np.diag([w / fine, h / fine, 1.0])  # fine grid -> model pixels -> frame pixels
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    seen = cv2.warpPerspective(frame_gray, to_frame, (fine, fine), flags=flags)
    mask = np.full(frame_gray.shape[:2], 255, np.uint8)
    for q in hidden:
        cv2.fillPoly(mask, [np.round(np.asarray(q, np.float64)).astype(np.int32).reshape(-1, 1, 2)], 0)
    shown = cv2.warpPerspective(mask, to_frame, (fine, fine), flags=cv2.INTER_NEAREST | cv2.WARP_INVERSE_MAP)
    shown[seen >= SATURATED] = 0  # glare: the frame shows nothing of the object there
    seen = cv2.resize(seen, (g, g), interpolation=cv2.INTER_AREA)
    # Cells wholly in view, shrunk by the Sobel kernel's reach so no gradient touches the border.
    in_view = (cv2.resize(shown, (g, g), interpolation=cv2.INTER_AREA) == 255).astype(np.uint8)
    visible: np.ndarray = cv2.erode(in_view, np.ones((3, 3), np.uint8))
    visible &= _resolved(H @ np.diag([w / g, h / g, 1.0]), g)
    mx, my = _gradients(model.astype(np.float32))
    fx, fy = _gradients(seen.astype(np.float32))
    mag = np.hypot(mx, my)
    inside = visible.astype(bool) & (mag > 0)
    if inside.sum() < MIN_EDGE_PIXELS:
        return float("nan"), int(inside.sum())
    agree = np.abs(mx * fx + my * fy) > np.cos(np.radians(EDGE_ANGLE_DEG)) * mag * np.hypot(fx, fy)
    floor = TEXTURED_BLOCK * np.quantile(mag[inside], 0.9)
    shares, strong = _block_shares(mag, inside, agree, floor)
    n = int(strong.sum())
    if len(shares) < MIN_EDGE_BLOCKS or n < MIN_EDGE_PIXELS:
        return float("nan"), n
    return float(np.mean(shares)), n


def _blocks(a: np.ndarray) -> np.ndarray:
    """(g, g) -> (EDGE_BLOCKS**2, (g // EDGE_BLOCKS)**2): the grid's blocks as rows (g a multiple of them)."""
    b = a.shape[0] // EDGE_BLOCKS
    return a.reshape(EDGE_BLOCKS, b, EDGE_BLOCKS, b).swapaxes(1, 2).reshape(EDGE_BLOCKS**2, b * b)


def _block_shares(
    mag: np.ndarray, inside: np.ndarray, agree: np.ndarray, floor: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per judged block, the share of its strong edges that agree, and the strong edges of those blocks.

    A block is judged when it has enough pixels in view and its strongest gradient reaches ``floor``; its
    strong edges are its in-view pixels at or above the :data:`EDGE_QUANTILE` quantile of their magnitudes
    (NumPy's linear interpolation, computed on the sorted rows)."""
    m, ins, agr = _blocks(mag), _blocks(inside), _blocks(agree)
    count = ins.sum(axis=1)
    ranked = np.sort(np.where(ins, m, np.inf), axis=1)
    pos = EDGE_QUANTILE * np.maximum(count - 1, 0)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, np.maximum(count - 1, 0))
    low, high = ranked[np.arange(len(m)), lo], ranked[np.arange(len(m)), hi]
    step = np.subtract(high, low, out=np.zeros_like(low), where=np.isfinite(high))  # no pixel in view: inf
    threshold = low + (pos - lo) * step
    peak = np.where(ins, m, -np.inf).max(axis=1)
    judged = (count >= MIN_EDGE_PIXELS // EDGE_BLOCKS) & (peak >= floor)
    strong = ins & (m >= threshold[:, None]) & judged[:, None]
    shares = (agr & strong).sum(axis=1)[judged] / strong.sum(axis=1)[judged]
    return shares, strong


def score_from_inliers(n_inliers: int, n_matches: int, min_inliers: int) -> float:
    """Confidence in [0, 1]: saturating in the inlier count, weighted by the inlier ratio.

    ``1 - exp(-(n - min_inliers + 1) / 15)`` reaches 0.5 about 10 inliers above the minimum and 0.95
    about 45 above; multiplied by ``sqrt(inlier ratio)`` so a homography fitted to a small share of the
    matches scores lower.

    Parameters
    ----------
    n_inliers : int
        The homography's inliers.
    n_matches : int
        The putative matches it was fitted to.
    min_inliers : int
        Fewer inliers score 0.
    """
    if n_inliers < min_inliers or n_matches <= 0:
        return 0.0
    count = 1.0 - np.exp(-(n_inliers - min_inliers + 1) / 15.0)
    ratio = np.sqrt(min(1.0, n_inliers / n_matches))
    return float(np.clip(count * ratio, 0.0, 1.0))


def verify_homography(
    model_xy: np.ndarray,
    scene_xy: np.ndarray,
    width: int,
    height: int,
    scene_shape: tuple[int, int],
    params: VerifyParams | None = None,
    rng_seed: int | None = 0,
) -> Verified | Failure:
    """Fit model→scene homography to putative matches and check that it is a plausible object view.

    Returns :class:`Verified` or a falsy :class:`~objrec.types.Failure` whose ``reason`` is a key of
    :data:`REASONS`.

    Parameters
    ----------
    model_xy, scene_xy : np.ndarray
        (n, 2) the putative matches' points in the model image and in the frame, row by row.
    width, height : int
        The model image's size in pixels.
    scene_shape : tuple of int
        The frame's (rows, cols).
    params : VerifyParams, optional
        Verification parameters (default: :class:`VerifyParams`'s).
    rng_seed : int or None
        Seed of OpenCV's random generator before the robust fit, for repeatable results (None: left as it is).
    """
    p = params or VerifyParams()
    n = len(model_xy)
    if n < max(4, p.min_matches):
        return Failure("too_few_matches", f"{n} matches < {max(4, p.min_matches)}")
    src = np.ascontiguousarray(model_xy, np.float64).reshape(-1, 1, 2)
    dst = np.ascontiguousarray(scene_xy, np.float64).reshape(-1, 1, 2)
    if rng_seed is not None:
        cv2.setRNGSeed(int(rng_seed))
    H, mask = cv2.findHomography(
        src, dst, _METHODS[p.method], p.reproj_threshold, maxIters=p.max_iters, confidence=p.confidence
    )
    if mask is None or not usable_homography(H):
        return Failure("estimation_failed", "no homography")
    H = H / H[2, 2]
    inl = mask.ravel().astype(bool)
    k = int(inl.sum())
    if k < p.min_inliers:
        return Failure("too_few_inliers", f"{k} inliers < {p.min_inliers}")
    if k / n < p.min_inlier_ratio:
        return Failure("low_inlier_ratio", f"{k}/{n} < {p.min_inlier_ratio}")
    # Many matches onto one scene point (repeated texture) or from one model point are not evidence.
    distinct = min(len(np.unique(np.round(model_xy[inl]), axis=0)), len(np.unique(np.round(scene_xy[inl]), axis=0)))
    if distinct < p.min_inliers:
        return Failure("too_few_distinct", f"{distinct} distinct inlier points < {p.min_inliers}")
    # Inliers on (nearly) one line do not constrain a homography: require spread in two directions.
    for pts in (model_xy[inl], scene_xy[inl]):
        sv = np.linalg.svd(pts - pts.mean(axis=0), compute_uv=False)
        if sv[1] < p.min_spread * sv[0]:
            return Failure("collinear", f"inliers nearly collinear (singular values {sv[0]:.1f}, {sv[1]:.1f})")
    # MAGSAC's output is not a least-squares fit to its inliers; polish it (sub-pixel corners).
    H_ls, _ = cv2.findHomography(src[inl], dst[inl], 0)
    if H_ls is not None and np.all(np.isfinite(H_ls)) and abs(H_ls[2, 2]) > 1e-12:
        H = H_ls / H_ls[2, 2]
    reason, corners = quad_checks(H, width, height, scene_shape, p)
    if reason is not None:
        return Failure(reason, REASONS[reason])
    poly, visible_px, visible = visible_part(H, corners, width, height, scene_shape)
    # Inliers in one small patch of a large visible outline (repeated texture, a logo shared by many
    # objects) do not show that the rest of the outline is there.
    hull = cv2.convexHull(np.asarray(scene_xy[inl], np.float32)).reshape(-1, 2).astype(np.float64)
    coverage = polygon_area(hull) / max(visible_px, 1e-9)
    if coverage < p.min_inlier_coverage:
        return Failure("inliers_clustered", f"inlier hull covers {coverage:.3f} of the visible outline")
    score = score_from_inliers(k, n, p.min_inliers)
    return Verified(H, inl, k, score, corners, {"matches": n, "inlier_coverage": coverage}, visible)
