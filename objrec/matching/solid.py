"""Geometric verification without a plane: epipolar geometry and local similarity frames that agree.

A homography holds only for a flat object (or a camera that only rotates). An object with depth seen from two
viewpoints obeys epipolar geometry instead: every match satisfies ``x2^T F x1 = 0`` for one fundamental matrix
``F``. That constraint alone is weak evidence, because it is one equation per match (a point only has to lie near
a line) and ``F`` has seven degrees of freedom: on unrelated photos, a robust fit finds dozens of "inliers" among
the ratio-test matches. So :func:`verify_solid` asks two independent questions of every match and keeps the matches
that pass both:

1. **Local similarity agrees with the neighbours.** A SIFT or SURF keypoint carries a local frame (position, scale,
   orientation), so one match predicts a similarity transform between the neighbourhoods of its two ends (scale
   ratio, rotation). A surface with depth is still smooth at the scale of a few keypoints, so the model-space
   neighbours of a correct match are mapped to where its similarity puts them, with about the same scale ratio and
   rotation; wrong matches agree with their neighbours only by chance (Lowe's Hough clustering of keypoint frames,
   and the single-correspondence hypotheses of Philbin et al., use the same property).
2. **Epipolar geometry.** The locally consistent matches fit one fundamental matrix (OpenCV's USAC with MAGSAC++),
   with the oriented epipolar constraint (the points lie in front of both cameras on the same side). When one
   homography explains nearly all of them (a planar object, where ``F`` is not determined), the homography's
   inliers are the support instead.

The support must also spread in two directions and over a share of the model image. There is no appearance check
against the model's thumbnail: the comparison of :func:`~objrec.matching.verify.edge_agreement` resamples the frame
through one homography, which an object with depth does not follow; the local-frame test above already compares
the two views patch by patch (each match's descriptor, scale and orientation, with its neighbours'), which is the
stricter geometric test that replaces it.

References
----------
Hartley, Zisserman, *Multiple View Geometry in Computer Vision*, 2nd ed., Cambridge University Press, 2004,
doi:10.1017/CBO9780511811685 (the fundamental matrix, ch. 9 and 11).

Chum, Werner, Matas, "Epipolar geometry estimation via RANSAC benefits from the oriented epipolar constraint",
ICPR 2004, doi:10.1109/ICPR.2004.1334020.

Barath, Noskova, Ivashechkin, Matas, "MAGSAC++, a fast, reliable and accurate robust estimator", CVPR 2020,
doi:10.1109/CVPR42600.2020.00138.

Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004,
doi:10.1023/B:VISI.0000029664.99615.94 (consistency of keypoint frames).

Philbin, Chum, Isard, Sivic, Zisserman, "Object retrieval with large vocabularies and fast spatial matching",
CVPR 2007, doi:10.1109/CVPR.2007.383172.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from objrec.types import Failure

__all__ = ["SolidParams", "SolidVerified", "verify_solid", "local_consistency", "SOLID_REASONS"]

#: Every reason a candidate can be rejected for by :func:`verify_solid`.
SOLID_REASONS = {
    "too_few_matches": "fewer putative matches than min_matches",
    "too_few_distinct": "the matches cluster on too few distinct model or scene points",
    "inconsistent": "fewer matches than min_inliers agree with their neighbours' local similarity",
    "estimation_failed": "USAC returned neither a fundamental matrix nor a homography",
    "too_few_inliers": "fewer matches than min_inliers are both locally consistent and epipolar (or planar) inliers",
    "collinear": "the supporting matches lie (nearly) on one line, in the model or the scene",
    "inliers_clustered": "the supporting matches cover less of the model image than min_model_coverage",
}


@dataclass(frozen=True)
class SolidParams:
    """Parameters of :func:`verify_solid`.

    Parameters
    ----------
    min_matches : int
        Fewer putative matches are rejected at once.
    min_inliers : int
        The least support: matches that are locally consistent and inliers of the epipolar (or planar) model,
        counted on distinct model and scene points. A fundamental matrix is fitted exactly to 7 matches, so a
        support near that tests nothing epipolar; 10 leaves at least 3 matches checked against each fit, and no
        wrong pair of the tuning set (``bench/bench_solid.py``) reaches even 8.
    neighbours : int
        Each match is compared with this many nearest matches in the model image.
    min_agreeing : int
        A match is locally consistent when at least this many of its neighbours agree with it.
    max_scale_change : float
        Two neighbouring matches agree when their scale ratios differ by at most this factor ...
    max_angle_change : float
        ... their rotations by at most this many degrees ...
    position_tolerance : float
        ... and the neighbour lies within this share of its distance (plus ``position_px``) of where the match's
        similarity puts it.
    position_px : float
        Localisation error of a keypoint in the frame, pixels.
    epipolar_px : float
        MAGSAC's threshold (pixels) for the fundamental matrix and the homography.
    planar_share : float
        When a homography explains at least this share of the epipolar support, the object is taken as planar
        (the fundamental matrix is then not determined) and the homography's inliers are the support.
    min_model_coverage : float
        The support's convex hull in the model image must cover at least this share of the model image.
    min_spread : float
        The smaller singular value of the centred support must reach this share of the larger (both images).
    max_iters, confidence : int, float
        USAC's limits.
    """

    min_matches: int = 12
    min_inliers: int = 10
    neighbours: int = 8
    min_agreeing: int = 2
    max_scale_change: float = 1.6
    max_angle_change: float = 25.0
    position_tolerance: float = 0.35
    position_px: float = 3.0
    epipolar_px: float = 2.0
    planar_share: float = 0.9
    min_model_coverage: float = 0.01
    min_spread: float = 0.05
    max_iters: int = 2000
    confidence: float = 0.999

    def __post_init__(self) -> None:
        if self.neighbours < self.min_agreeing or self.min_agreeing < 1:
            raise ValueError(
                f"min_agreeing: expected 1 <= min_agreeing <= neighbours ({self.neighbours}), got {self.min_agreeing}"
            )
        if self.max_scale_change < 1.0:
            raise ValueError(f"max_scale_change: expected a factor >= 1, got {self.max_scale_change}")


@dataclass
class SolidVerified:
    """A candidate verified without a plane.

    Attributes
    ----------
    inliers : (M,) bool
        The supporting matches (locally consistent and epipolar, or planar, inliers).
    n_inliers : int
        The support's size, each model and scene point counted once (the smaller of the two distinct counts).
    outline : (K, 2) float64
        Convex hull of the supporting scene points, frame pixels, counter-clockwise as ``cv2.convexHull`` gives it.
    box : (4,) int
        ``(x0, y0, x1, y1)`` bounding the outline, clipped to the frame.
    score : float
        Confidence in [0, 1].
    fundamental : (3, 3) ndarray or None
        The fundamental matrix (model pixels to frame lines: ``x_scene^T F x_model = 0``); None for a planar view.
    homography : (3, 3) ndarray or None
        The homography when the view is planar (``mode == "planar"``), else None.
    mode : {"epipolar", "planar"}
    info : dict
        ``matches``, ``consistent`` (locally consistent matches), ``epipolar`` and ``planar`` inlier counts among
        them, ``model_coverage``.
    """

    inliers: np.ndarray
    n_inliers: int
    outline: np.ndarray
    box: np.ndarray
    score: float
    fundamental: np.ndarray | None
    homography: np.ndarray | None
    mode: str
    info: dict = field(default_factory=dict)


def _similarity_terms(model_frames: np.ndarray, scene_frames: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per match, the log scale ratio and the rotation (radians) from the model keypoint to the scene one.

    OpenCV's keypoint angles are measured in image coordinates (y down), where a positive angle turns from +x
    towards +y; a rotation of the image by ``theta`` in that sense adds ``theta`` to every keypoint's angle."""
    log_scale = np.log(np.maximum(scene_frames[:, 0], 1e-6) / np.maximum(model_frames[:, 0], 1e-6))
    rotation = np.radians(scene_frames[:, 1] - model_frames[:, 1])
    return log_scale, rotation


def local_consistency(
    model_xy: np.ndarray,
    scene_xy: np.ndarray,
    model_frames: np.ndarray,
    scene_frames: np.ndarray,
    params: SolidParams | None = None,
) -> np.ndarray:
    """(M,) int: for each match, how many of its ``neighbours`` nearest matches (in the model image) agree with it.

    Match ``i`` maps the model neighbourhood of its keypoint to the scene by the similarity of its two keypoint
    frames: scale ratio ``s_i`` (scene size over model size) and rotation ``r_i`` (scene angle less model angle).
    Its neighbour ``j`` agrees when the two similarities are alike (scale ratios within ``max_scale_change``,
    rotations within ``max_angle_change``) and ``j``'s scene point lies where ``i``'s similarity sends ``j``'s
    model point, within ``position_tolerance`` of the predicted offset's length plus ``position_px``.

    ``model_frames`` and ``scene_frames`` are (M, 2) arrays of (size, angle in degrees) in OpenCV's ``KeyPoint``
    convention. Upright keypoints (angle -1 on both sides, as upright SURF gives) then count as unrotated, which
    is what an upright detector assumes of its views. ``model_xy`` and ``scene_xy`` are the matches' (M, 2) points
    in the model image and the frame, row by row; ``params`` the settings named above (default:
    :class:`SolidParams`'s).
    """
    p = params or SolidParams()
    m = len(model_xy)
    k = min(p.neighbours, m - 1)
    if k < 1:
        return np.zeros(m, np.int64)
    from scipy.spatial import cKDTree  # imported on first use: it adds to every process's start-up

    _, nbr = cKDTree(model_xy).query(model_xy, k + 1)
    nbr = nbr[:, 1:]  # (M, k), the match itself dropped (duplicates of a point are each other's neighbours)
    log_s, rot = _similarity_terms(model_frames, scene_frames)
    scale_ok = np.abs(log_s[:, None] - log_s[nbr]) <= np.log(p.max_scale_change)
    turn = (rot[:, None] - rot[nbr] + np.pi) % (2 * np.pi) - np.pi
    angle_ok = np.abs(turn) <= np.radians(p.max_angle_change)
    d_model = model_xy[nbr] - model_xy[:, None, :]  # (M, k, 2)
    c, s = np.cos(rot)[:, None], np.sin(rot)[:, None]
    scale = np.exp(log_s)[:, None]
    pred = np.stack([c * d_model[..., 0] - s * d_model[..., 1], s * d_model[..., 0] + c * d_model[..., 1]], -1)
    pred *= scale[..., None]
    err = np.linalg.norm(scene_xy[nbr] - scene_xy[:, None, :] - pred, axis=-1)
    pos_ok = err <= p.position_tolerance * np.linalg.norm(pred, axis=-1) + p.position_px
    return (scale_ok & angle_ok & pos_ok).sum(axis=1)


def _oriented(F: np.ndarray, x1: np.ndarray, x2: np.ndarray) -> np.ndarray:
    """(M,) bool: the matches on the majority side of the oriented epipolar constraint (Chum et al. 2004):
    ``(e2 x x2) . (F x1)`` has one sign for every match seen by two real cameras."""
    e2 = np.linalg.svd(F.T)[2][-1]  # F^T e2 = 0
    h1, h2 = np.c_[x1, np.ones(len(x1))], np.c_[x2, np.ones(len(x2))]
    side = np.einsum("ij,ij->i", np.cross(e2, h2), h1 @ F.T)
    return side > 0 if (side > 0).sum() >= (side < 0).sum() else side < 0


def _robust_mask(kind: str, x1: np.ndarray, x2: np.ndarray, p: SolidParams) -> tuple[np.ndarray | None, np.ndarray]:
    """A MAGSAC fundamental matrix or homography and its inlier mask (all False when estimation fails)."""
    none = np.zeros(len(x1), bool)
    need = 8 if kind == "F" else 4
    if len(x1) < need:
        return None, none
    cv2.setRNGSeed(0)
    try:
        if kind == "F":
            M, mask = cv2.findFundamentalMat(x1, x2, cv2.USAC_MAGSAC, p.epipolar_px, p.confidence, p.max_iters)
            if M is not None and M.shape != (3, 3):  # several solutions stacked: keep the first
                M = M[:3]
        else:
            M, mask = cv2.findHomography(
                x1, x2, cv2.USAC_MAGSAC, p.epipolar_px, maxIters=p.max_iters, confidence=p.confidence
            )
    except cv2.error:  # USAC asserts on some degenerate samples (e.g. every model it tries is rejected)
        return None, none
    if M is None or mask is None or not np.all(np.isfinite(M)):
        return None, none
    return M, mask.ravel().astype(bool)


def _geometric_support(x1: np.ndarray, x2: np.ndarray, consistent: np.ndarray, p: SolidParams) -> tuple | Failure:
    """The matches among ``consistent`` that fit one fundamental matrix (on the right side of the oriented
    epipolar constraint), or one homography when that explains nearly as many (``planar_share``): ``(support
    mask, F or None, H or None, planar, epipolar inliers, homography inliers)``."""
    idx = np.flatnonzero(consistent)
    F, fmask = _robust_mask("F", x1[idx], x2[idx], p)
    if F is not None:
        fmask &= _oriented(F, x1[idx], x2[idx])
    H, hmask = _robust_mask("H", x1[idx], x2[idx], p)
    if F is None and H is None:
        return Failure("estimation_failed", "no fundamental matrix or homography")
    planar = H is not None and hmask.sum() >= p.planar_share * fmask.sum()
    support = np.zeros(len(x1), bool)
    support[idx[hmask if planar else fmask]] = True
    return support, None if planar else F, H if planar else None, bool(planar), int(fmask.sum()), int(hmask.sum())


def _support_checks(
    model_xy: np.ndarray, scene_xy: np.ndarray, size: tuple[int, int], p: SolidParams
) -> Failure | None:
    """Spread and coverage of the supporting matches."""
    for pts in (model_xy, scene_xy):
        sv = np.linalg.svd(pts - pts.mean(axis=0), compute_uv=False)
        if sv[1] < p.min_spread * sv[0]:
            return Failure("collinear", f"support nearly collinear (singular values {sv[0]:.1f}, {sv[1]:.1f})")
    hull = cv2.convexHull(np.asarray(model_xy, np.float32))
    coverage = cv2.contourArea(hull) / max(1.0, float(size[0] * size[1]))
    if coverage < p.min_model_coverage:
        return Failure("inliers_clustered", f"support covers {coverage:.3f} of the model image")
    return None


def _outline(scene_xy: np.ndarray, scene_shape: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """The convex hull of the supporting scene points and its bounding box ``(x0, y0, x1, y1)`` in the frame."""
    outline = cv2.convexHull(np.asarray(scene_xy, np.float32)).reshape(-1, 2).astype(np.float64)
    rows, cols = scene_shape[:2]
    lo, hi = np.floor(outline.min(axis=0)), np.ceil(outline.max(axis=0))
    return outline, np.array([max(0, lo[0]), max(0, lo[1]), min(cols, hi[0]), min(rows, hi[1])], np.int64)


def _score(n: int, consistent: int, min_inliers: int) -> float:
    """Saturating in the support, weighted by its share of the locally consistent matches (as
    :func:`~objrec.matching.verify.score_from_inliers`)."""
    if n < min_inliers or consistent <= 0:
        return 0.0
    return float(np.clip((1.0 - np.exp(-(n - min_inliers + 1) / 15.0)) * np.sqrt(min(1.0, n / consistent)), 0, 1))


def _check_inputs(
    model_xy: np.ndarray, scene_xy: np.ndarray, model_frames: np.ndarray | None, scene_frames: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    x1 = np.ascontiguousarray(model_xy, np.float64).reshape(-1, 2)
    x2 = np.ascontiguousarray(scene_xy, np.float64).reshape(-1, 2)
    if len(x1) != len(x2):
        raise ValueError(f"model_xy and scene_xy: expected the same number of points, got {len(x1)} and {len(x2)}")
    frames: list[np.ndarray | None] = []
    for name, f in (("model_frames", model_frames), ("scene_frames", scene_frames)):
        if f is None:
            frames.append(None)
            continue
        f = np.asarray(f, np.float64)
        if f.shape != (len(x1), 2):
            raise ValueError(f"{name}: expected an ({len(x1)}, 2) array of (size, angle), got shape {f.shape}")
        frames.append(f)
    return x1, x2, frames[0], frames[1]


def _consistent_matches(
    x1: np.ndarray, x2: np.ndarray, f1: np.ndarray | None, f2: np.ndarray | None, p: SolidParams
) -> np.ndarray | Failure:
    """The matches ``x1 -> x2`` that agree with their neighbours (:func:`local_consistency`; all of them without
    keypoint frames ``f1``, ``f2``), as a mask; the rejection when there are too few matches, too few distinct
    points or too few consistent matches to verify."""
    n = len(x1)
    if n < max(8, p.min_matches):
        return Failure("too_few_matches", f"{n} matches < {max(8, p.min_matches)}")
    distinct = min(len(np.unique(np.round(x1), axis=0)), len(np.unique(np.round(x2), axis=0)))
    if distinct < p.min_inliers:
        return Failure("too_few_distinct", f"{distinct} distinct points < {p.min_inliers}")
    if f1 is None or f2 is None:
        consistent = np.ones(n, bool)
    else:
        consistent = local_consistency(x1, x2, f1, f2, p) >= p.min_agreeing
    nc = int(consistent.sum())
    if nc < p.min_inliers:
        return Failure("inconsistent", f"{nc} locally consistent matches < {p.min_inliers}")
    return consistent


def verify_solid(
    model_xy: np.ndarray,
    scene_xy: np.ndarray,
    model_size: tuple[int, int],
    scene_shape: tuple[int, int],
    params: SolidParams | None = None,
    model_frames: np.ndarray | None = None,
    scene_frames: np.ndarray | None = None,
) -> SolidVerified | Failure:
    """Verify a candidate's putative matches as a view of an object with depth (or a flat one).

    Parameters
    ----------
    model_xy, scene_xy : (M, 2) array
        The putative matches (ratio-test survivors) in model-image and frame pixels.
    model_size, scene_shape : (int, int)
        The model image's (width, height) and the frame's (rows, cols).
    params : SolidParams, optional
    model_frames, scene_frames : (M, 2) array, optional
        (size, angle in degrees) of each match's keypoints, OpenCV's ``KeyPoint`` convention. Without them only
        the epipolar test is left, which is far weaker (see the module notes).

    Returns
    -------
    SolidVerified or Failure
        A falsy :class:`~objrec.types.Failure` with a ``reason`` among :data:`SOLID_REASONS` when rejected.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> xy = rng.uniform(0, 400, (60, 2))
    >>> frames = np.c_[np.full(60, 10.0), np.zeros(60)]
    >>> bool(verify_solid(xy, xy + 20, (400, 400), (480, 640), model_frames=frames, scene_frames=frames))
    True
    >>> verify_solid(xy, rng.permutation(xy), (400, 400), (480, 640), model_frames=frames, scene_frames=frames).reason
    'inconsistent'
    """
    p = params or SolidParams()
    x1, x2, f1, f2 = _check_inputs(model_xy, scene_xy, model_frames, scene_frames)
    n = len(x1)
    consistent = _consistent_matches(x1, x2, f1, f2, p)
    if isinstance(consistent, Failure):
        return consistent
    nc = int(consistent.sum())
    fit = _geometric_support(x1, x2, consistent, p)
    if isinstance(fit, Failure):
        return fit
    support, F, H, planar, n_epipolar, n_planar = fit
    # Many matches onto one scene point (repeated texture) or from one model point count once.
    k = min(len(np.unique(np.round(x1[support]), axis=0)), len(np.unique(np.round(x2[support]), axis=0)))
    if k < p.min_inliers:
        return Failure("too_few_inliers", f"{k} distinct supporting matches < {p.min_inliers}")
    fail = _support_checks(x1[support], x2[support], model_size, p)
    if fail is not None:
        return fail
    outline, box = _outline(x2[support], scene_shape)
    coverage = cv2.contourArea(cv2.convexHull(np.asarray(x1[support], np.float32))) / float(
        model_size[0] * model_size[1]
    )
    info = {"matches": n, "consistent": nc, "epipolar": n_epipolar, "planar": n_planar,
            "model_coverage": float(coverage)}  # fmt: skip
    return SolidVerified(
        support,
        k,
        outline,
        box,
        _score(k, nc, p.min_inliers),
        F,
        H,
        "planar" if planar else "epipolar",
        info,
    )
