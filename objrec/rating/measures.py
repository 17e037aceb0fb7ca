"""The raw measures of a reference image's rating: distinctiveness of its features, the area they cover, contrast
in gray and in colour only, JPEG blocking, symmetry, and how the image fares in a few small or hard views of it.

Each function takes arrays and returns numbers (or per-feature arrays); none reads files or knows the score.
"""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from objrec.data import synthetic_cover
from objrec.geometry import map_points, model_corners, robust_homography
from objrec.imageio import to_bgr, to_gray
from objrec.knn import BruteForceIndex, knn2, ratio_match
from objrec.scenes import CAMERA_FOCAL_PX, Distortion, camera_view, compose_scene, tilted_plane

__all__ = [
    "RATIO",
    "TRUE_MATCH_DISTANCE",
    "GRID",
    "MIN_CELL_FEATURES",
    "nearest_other_distance",
    "query_ratio",
    "cell_counts",
    "rms_contrast",
    "chroma_contrast",
    "blockiness",
    "symmetry_share",
    "mirror_descriptors",
    "CORNER_SIDE_PX",
    "CORNER_SCALE",
    "corner_weights",
    "ratio_pairs",
    "SMALL_VIEWS",
    "small_view_matches",
    "HARD_VIEWS",
    "HARD_FULL_MATCHES",
    "upright_turns",
    "quarter_turned",
    "quarter_turned_points",
    "hard_view_matches",
    "hard_view_share",
]

#: Lowe's ratio threshold of the matcher (0.75 as in find_obj.py): a feature is distinctive when a query's
#: match to it would pass this test against its nearest other feature of the same image.
RATIO = 0.75
#: Typical descriptor distance of a true match between a reference image and a phone photo of it, as a fraction
#: of the descriptor's norm, per detector kind: the median over ratio-test matches that are RANSAC inliers
#: (5 px) between SMVS DVD references 1-25 and two phone photos of each, default detectors. Kinds not listed
#: use the largest value (the strictest test).
TRUE_MATCH_DISTANCE = {"surf": 0.15, "sift": 0.24}
#: Coverage grid: the image is cut into GRID x GRID cells.
GRID = 8
#: The hard views :func:`small_view_matches` renders, as (longer side in px, Gaussian blur sigma, tilt in degrees
#: about the centre line parallel to the shorter side): the image seen at a typical size (240 px) through a strong
#: defocus, and seen smaller (160 px), slightly defocused and from the side, as in a hand-held shot. Both remove
#: the fine detail, so an image whose features live only in small print, thin lines or fine texture keeps few
#: matches in them.
SMALL_VIEWS = ((240, 2.5, 0.0), (160, 1.5, 30.0))
#: Focal length of the pinhole camera of a tilted view, in units of the view's longer side: about a 60 degree
#: field of view across a 640 px frame for a 240 px view, as the operating envelope's views are rendered.
VIEW_FOCAL = 530.0 / 240.0
#: Matches within this many pixels of the view (mapped back into the image) of where their model feature lies
#: count as correct.
VIEW_TOLERANCE_PX = 4.0
#: Gray margin around a rendered view, so the detector's filters see the image's edges as a frame shows them.
VIEW_MARGIN_PX = 32
#: A cell counts as covered when it holds at least this many distinctive features: a homography needs four
#: correspondences, and a single feature per cell gives none to spare when one fails.
MIN_CELL_FEATURES = 2


def nearest_other_distance(descriptors: np.ndarray) -> np.ndarray:
    """Distance from each descriptor to its nearest other descriptor of the same set, relative to its own norm.

    The exact 2-NN of the set against itself (:func:`objrec.knn.knn2`): the nearest is the descriptor itself
    (or a duplicate, at the same distance 0), the second its nearest other, so duplicates (a tiled pattern)
    give 0.

    Parameters
    ----------
    descriptors : (N, D) ndarray

    Returns
    -------
    (N,) float32 ndarray
        ``inf`` where the set has a single descriptor.
    """
    d = np.ascontiguousarray(descriptors, np.float32)
    n = len(d)
    if n < 2:
        return np.full(n, np.inf, np.float32)
    _, dist2 = knn2(d, d)
    norm = np.sqrt(np.einsum("ij,ij->i", d, d))
    out = np.sqrt(np.maximum(dist2[:, 1], 0.0))
    return np.where(norm > 0, out / np.maximum(norm, 1e-12), 0.0).astype(np.float32)


def query_ratio(nearest_other: np.ndarray, kind: str) -> np.ndarray:
    """The ratio test's value a query would see when it matches each feature at the typical true-match distance.

    A query descriptor ``q`` of model feature ``m`` lies at about ``delta`` (:data:`TRUE_MATCH_DISTANCE`) from
    it in a direction unrelated to the nearest other model feature ``m'`` (at ``n`` from ``m``); in a high
    dimension the two offsets are nearly orthogonal, so ``|q - m'| ~ sqrt(n^2 + delta^2)`` and the ratio is
    ``delta / sqrt(n^2 + delta^2)``. Below :data:`RATIO` the feature is distinctive; a repeated feature
    (``n`` near 0) gives a ratio near 1 and its matches fail the test.

    Parameters
    ----------
    nearest_other : (N,) ndarray
        :func:`nearest_other_distance`.
    kind : str
        The detector kind.

    Returns
    -------
    (N,) float32 ndarray in (0, 1]

    References
    ----------
    D. G. Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004,
    doi:10.1023/B:VISI.0000029664.99615.94 (the ratio test).
    """
    delta = TRUE_MATCH_DISTANCE.get(kind, max(TRUE_MATCH_DISTANCE.values()))
    n = np.asarray(nearest_other, np.float64)
    with np.errstate(invalid="ignore"):
        r = delta / np.sqrt(np.square(n) + delta * delta)
    return np.where(np.isfinite(n), r, 0.0).astype(np.float32)


def cell_counts(xy: np.ndarray, shape: tuple[int, int], grid: int = GRID) -> np.ndarray:
    """How many of the points ``xy`` (N, 2) fall in each cell of a ``grid`` x ``grid`` cut of an image of
    ``shape`` (H, W); returns a (grid, grid) int array indexed [row, column]."""
    h, w = shape
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    cx = np.clip((xy[:, 0] * grid / w).astype(int), 0, grid - 1)
    cy = np.clip((xy[:, 1] * grid / h).astype(int), 0, grid - 1)
    return np.bincount(cy * grid + cx, minlength=grid * grid).reshape(grid, grid)


def rms_contrast(gray: np.ndarray) -> float:
    """RMS contrast: the standard deviation of the gray levels over 255 (0 for a flat image, 0.5 at most).

    References
    ----------
    E. Peli, "Contrast in complex images", JOSA A 7(10), 1990, doi:10.1364/JOSAA.7.002032.
    """
    return float(np.std(gray, dtype=np.float64) / 255.0)


def chroma_contrast(image: np.ndarray) -> float:
    """Contrast in colour alone: the RMS spread of the CIELAB a* and b* channels over 255 (0 for gray images).

    An image whose regions differ only in hue has a high chroma contrast and a near-zero
    :func:`rms_contrast`: recognition works on gray and sees nothing.
    """
    if image.ndim == 2:
        return 0.0
    h, w = image.shape[:2]
    s = min(1.0, 320 / max(h, w))  # a global spread: a small copy measures it as well, in a fraction of the time
    small = image if s == 1.0 else cv2.resize(image, (round(w * s), round(h * s)), interpolation=cv2.INTER_AREA)
    lab = cv2.cvtColor(to_bgr(small), cv2.COLOR_BGR2Lab)
    sd = cv2.meanStdDev(lab)[1].reshape(-1)  # per channel, accumulated in double precision
    return float(np.sqrt(sd[1] ** 2 + sd[2] ** 2) / 255.0)


def blockiness(gray: np.ndarray, block: int = 8) -> float:
    """JPEG blocking: mean absolute gray step across 8x8 block boundaries over the mean step inside blocks.

    About 1 for an image without blocking; block-wise quantisation (strong JPEG compression) puts steps on
    the block grid and raises it. Horizontal and vertical steps are averaged. Along each axis the grid starts at
    the first pixel, as JPEG's does, or at the last, where an image turned or flipped after decoding has it
    (whichever has the larger steps). The image must be measured as decoded, before any resizing.

    References
    ----------
    Z. Wang, H. R. Sheikh and A. C. Bovik, "No-reference perceptual quality assessment of JPEG compressed
    images", Proc. ICIP 2002, doi:10.1109/ICIP.2002.1038064.
    """
    g = np.asarray(gray, np.float32)
    ratios = []
    for d in (np.abs(np.diff(g, axis=1)), np.abs(np.diff(g, axis=0)).T):
        if d.shape[1] < 2 * block:
            continue
        best = 0.0
        # The step between pixels 8k-1 and 8k (a grid from the first pixel) or L-8k-1 and L-8k (from the last).
        for phase in {block - 1, d.shape[1] % block}:
            at = np.zeros(d.shape[1], bool)
            at[phase::block] = True
            inside = float(d[:, ~at].mean())
            best = max(best, float(d[:, at].mean()) / inside if inside > 1e-6 else 1.0)
        ratios.append(best)
    return float(np.mean(ratios)) if ratios else 1.0


#: :func:`corner_weights` measures images whose shorter side is longer than this scaled down to it (the features'
#: positions and sizes with them): a bounded cost, and the same structure relative to the object at any size.
CORNER_SIDE_PX = 480
#: A feature's neighbourhood for :func:`corner_weights`: the structure tensor's integration scale (Gaussian sigma)
#: is this share of the feature's diameter (OpenCV ``KeyPoint.size``), between 1 and 16 px, rounded to a power
#: of two.
CORNER_SCALE = 0.25


def _structure_ratio(products: list[np.ndarray], sigma: float, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``l2 / l1`` of the structure tensor whose gradient products ``products`` (gx², gy², gx·gy) are integrated
    by a Gaussian of ``sigma`` px, at the pixels (``xs``, ``ys``); 0 where the gradients vanish."""
    a, b, c = (np.asarray(cv2.GaussianBlur(q, (0, 0), sigma)[ys, xs], np.float64) for q in products)
    half, root = (a + b) / 2, np.sqrt(np.maximum((a - b) ** 2 / 4 + c * c, 0.0))
    return np.where(half > 1e-12, (half - root) / np.maximum(half + root, 1e-12), 0.0)


def corner_weights(gray: np.ndarray, xy: np.ndarray, size: np.ndarray) -> np.ndarray:
    """How corner-like each feature's neighbourhood is: 1 where its gradients point every way (a corner, a
    printed mark, isotropic texture), 0 where they all point one way (a straight edge, an outline, a fold, a
    shading boundary).

    Per feature, the ratio ``l2 / l1`` of the eigenvalues of the image's structure tensor (gradients at 0.7 px,
    integrated over a Gaussian of :data:`CORNER_SCALE` times the feature's diameter, at most 16 px, on the
    image scaled to a shorter side of at most :data:`CORNER_SIDE_PX`); tensors of 4 px and more are integrated
    on a copy halved once per octave above 2 px (``cv2.pyrDown``), which keeps the cost near that of the first
    two octaves.

    A photo of an object with depth taken from another side, or under other light, changes the features on its
    outlines and shading edges (another background behind the outline, a moved highlight) and keeps the corners
    of its own print and texture: the weights say which kind each feature is.

    Parameters
    ----------
    gray : (H, W) uint8 ndarray
    xy : (N, 2) ndarray
        Feature positions, in pixels of ``gray``.
    size : (N,) ndarray
        Feature diameters in pixels of ``gray``.

    Returns
    -------
    (N,) float64 ndarray in [0, 1]

    References
    ----------
    C. Harris and M. Stephens, "A combined corner and edge detector", Alvey Vision Conference 1988 (the
    structure tensor's eigenvalues tell corners from edges).

    Examples
    --------
    >>> import numpy as np
    >>> img = np.zeros((480, 480), np.uint8); img[:, 240:] = 255; img[200:280, 40:120] = 255
    >>> w = corner_weights(img, [[240, 100], [40, 200]], [16, 16])
    >>> round(float(w[0]), 2), bool(w[1] > 0.3)
    (0.0, True)
    """
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    out = np.zeros(len(xy))
    if len(xy) == 0:
        return out
    s = min(1.0, CORNER_SIDE_PX / min(gray.shape[:2]))
    g = np.asarray(gray)
    if s < 1.0:
        g = cv2.resize(g, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
    g = cv2.GaussianBlur(g.astype(np.float32) / 255.0, (0, 0), 0.7)
    gx, gy = cv2.Sobel(g, cv2.CV_32F, 1, 0), cv2.Sobel(g, cv2.CV_32F, 0, 1)
    products: list[Any] = [gx * gx, gy * gy, gx * gy]
    sigma = np.clip(np.asarray(size, np.float64).reshape(-1) * s * CORNER_SCALE, 1.0, 16.0)
    octave = np.rint(np.log2(sigma)).astype(np.int64)  # 0..4: sigma 1, 2, 4, 8, 16 px
    pts = xy * s
    for o in range(int(octave.max()) + 1):
        if o >= 2:  # halve once per octave above 2 px: the tensor at 2**o px is one at 2 px of that copy
            products = [cv2.pyrDown(q) for q in products]
        sel = octave == o
        if not sel.any():
            continue
        k = 2.0 ** max(0, o - 1)
        h, w = products[0].shape
        xs = np.clip((pts[sel, 0] / k).astype(np.int64), 0, w - 1)
        ys = np.clip((pts[sel, 1] / k).astype(np.int64), 0, h - 1)
        out[sel] = _structure_ratio(products, 2.0**o / k, xs, ys)
    return out


def mirror_descriptors(kind: str, descriptors: np.ndarray) -> np.ndarray:
    """The descriptors the left-right mirror of each feature's patch has: SIFT's or SURF's (k, 128) or (k, 64)
    rows rearranged, without extracting anything from a mirrored image (Loy and Eklundh, 2006).

    Both descriptors are a 4 x 4 grid of cells over the feature's oriented window. Mirrored, the window's grid
    runs the other way along one axis (the first index of the grid as OpenCV's SIFT and objrec's SURF lay it
    out), SIFT's eight orientation bins of each cell turn the other way (bin ``b`` becomes ``-b`` mod 8), and
    SURF's sums of responses across that axis change sign (the second of each cell's four values).

    Parameters
    ----------
    kind : str
        ``"sift"`` (128 values) or ``"surf"`` (64).
    descriptors : np.ndarray
        (k, 128) or (k, 64) rows.
    """
    d = np.asarray(descriptors)
    per = {"sift": 8, "surf": 4}.get(kind)
    if per is None or d.ndim != 2 or d.shape[1] != 16 * per:
        raise ValueError(f"mirror_descriptors: expected (k, {16 * (per or 0)}) {kind} descriptors, got {d.shape}")
    grid = np.arange(d.shape[1]).reshape(4, 4, per)[::-1]
    if kind == "sift":
        return d[:, grid[:, :, (-np.arange(8)) % 8].reshape(-1)]
    out = d[:, grid.reshape(-1)].copy()
    out[:, 1::4] *= -1
    return out


def symmetry_share(
    features: Any, shape: tuple[int, int], strongest: int = 500, min_share: float = 0.05, min_inliers: int = 8
) -> float:
    """Share of an image's features that a symmetry of the image explains by one homography other than the
    identity (a mirror, a half turn, a shift of a repeated pattern).

    The ``strongest`` features (by detector response) are matched, with the ratio test, to their own mirrored
    descriptors (:func:`mirror_descriptors`; with rotation-invariant descriptors a left-right mirror's twins
    also find up-down ones) and to themselves (the nearest other feature: half-turn and repeated twins). Each
    set of pairs that lie apart by more than 2% of the image's diagonal is fitted with a RANSAC homography
    (:func:`~objrec.geometry.robust_homography`); the largest inlier count over the number of features is
    returned. A symmetry that explains fewer than ``min_share`` of the features (or ``min_inliers``) counts as
    none (0): it leaves a pose unambiguous. So RANSAC draws only the samples it needs to find, at 99.5%
    confidence, a homography that that many of the pairs agree with, and a set of fewer pairs is not fitted;
    most images have only a few tens of pairs, few of them agreeing. A symmetric reference makes the pose
    ambiguous: a view can be explained by the homography or by its mirrored twin. The features are those
    rated, as extracted for enrolment: nothing is extracted again.

    Parameters
    ----------
    features : Features
        SIFT or SURF features of the image (on the host).
    shape : tuple of int
        The image's (rows, cols).
    strongest : int
        Features used at most.
    min_share : float
        The smallest share of the features that counts as a symmetry.
    min_inliers : int
        The fewest inliers that count as a symmetry.

    References
    ----------
    G. Loy and J.-O. Eklundh, "Detecting symmetry and symmetric constellations of features", ECCV 2006,
    doi:10.1007/11744047_39 (a feature's symmetric twin matches its mirrored descriptor).
    """
    d = np.asarray(features.descriptors, np.float32)
    xy = np.asarray(features.xy, np.float64).reshape(-1, 2)
    if len(d) > strongest:
        keep = np.argsort(-np.asarray(features.response), kind="stable")[:strongest]
        d, xy = d[keep], xy[keep]
    need = max(min_inliers, 4, int(np.ceil(min_share * len(d))))
    if len(d) < need:
        return 0.0
    diag = float(np.hypot(*shape[:2]))
    self_idx, self_d2 = BruteForceIndex(d).knn(d, 3)  # the first neighbour is the feature itself
    mirror_idx, mirror_d2 = knn2(d, mirror_descriptors(features.kind, d))
    best = 0
    for idx, d2, skip in ((self_idx, self_d2, 1), (mirror_idx, mirror_d2, 0)):
        q = np.nonzero(d2[:, skip] < RATIO**2 * d2[:, skip + 1])[0]
        a, b = xy[q], xy[idx[q, skip]]
        apart = np.linalg.norm(a - b, axis=1) > 0.02 * diag
        n = int(apart.sum())
        if n < need:
            continue
        # samples for 99.5% confidence of one all-inlier sample where ``need`` of the ``n`` pairs agree
        iters = int(np.clip(np.ceil(np.log(0.005) / np.log1p(-(min(need / n, 0.999) ** 4))), 1, 2000))
        # RANSAC: RHO's sampler rejects samples whose order a mirror reverses, and mirrors are what is sought
        H, inl = robust_homography(a[apart], b[apart], 0.01 * diag, max_iters=iters, sampler="ransac")
        if H is not None:
            best = max(best, int(inl.sum()))
    return best / len(d) if best >= need else 0.0


def _tilted(view: np.ndarray, tilt_deg: float, focal: float) -> tuple[np.ndarray, np.ndarray]:
    """``view`` seen by a pinhole camera of focal length ``focal`` (px) with its plane turned by ``tilt_deg``
    about its centre line parallel to its shorter side (:func:`~objrec.scenes.tilted_plane`: its longer side is
    foreshortened, so an image and its quarter turn are seen alike), cropped to its outline; and the
    homography from ``view``'s pixels to the result's."""
    h, w = view.shape
    centre = np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1]], np.float64)
    # Turned about x the other way round: the quarter turn clockwise of a wide image then sees its near side
    # where the wide image's tilt puts it.
    tilt = tilted_plane(tilt_deg, "y", focal) if w >= h else tilted_plane(-tilt_deg, "x", focal)
    T = tilt @ centre
    T = T / T[2, 2]
    q = map_points(T, model_corners(w, h))
    lo, hi = np.floor(q.min(axis=0)), np.ceil(q.max(axis=0))
    T = np.array([[1, 0, -lo[0]], [0, 1, -lo[1]], [0, 0, 1]]) @ T
    size = (max(8, int(hi[0] - lo[0])), max(8, int(hi[1] - lo[1])))
    return cv2.warpPerspective(view, T, size, flags=cv2.INTER_LINEAR, borderValue=128), T


def small_view_matches(
    gray: np.ndarray,
    xy: np.ndarray,
    descriptors: np.ndarray,
    detect: Any,
    views: tuple[tuple[int, float, float], ...] = SMALL_VIEWS,
    noise_sigma: float = 2.0,
    seed: int = 0,
) -> list[int]:
    """Per view of ``views``, how many of the image's features a recognizer would still match correctly in it.

    Each view is the image scaled so its longer side is the view's size (area interpolation), blurred by the
    view's sigma, turned by the view's tilt (:func:`_tilted`), set on a mid-gray margin of
    :data:`VIEW_MARGIN_PX` with sensor noise ``noise_sigma``;
    ``detect(gray) -> Features`` (the rated detector) finds its features, which are matched to the image's own
    (``xy``, ``descriptors``) with Lowe's ratio test at :data:`RATIO`. A match counts when its model feature lies
    within :data:`VIEW_TOLERANCE_PX` view pixels of where the view's feature maps back: the view's geometry is
    known, so no RANSAC is needed. Images whose features are all fine detail (small print, thin lines, fine
    texture) keep few: those are the images found only when seen large and sharp.

    Parameters
    ----------
    gray : (H, W) uint8 ndarray
        The image as enrolment reads it.
    xy, descriptors : ndarray
        The image's features (positions in ``gray``'s pixels) as enrolment extracts them.
    detect : callable
        The detector, as a frame would be searched.
    views : tuple of (int, float, float)
        (longer side px, blur sigma, tilt in degrees, about the centre line parallel to the shorter side) per
        view.
    noise_sigma : float
        Gaussian noise added to each view (gray levels).
    seed : int
        Seeds the noise.

    Returns
    -------
    list of int
        Correct matches per view.
    """
    h, w = gray.shape
    mxy = np.asarray(xy, np.float32).reshape(-1, 2)
    md = np.asarray(descriptors, np.float32)
    rng = np.random.default_rng(seed)
    counts = []
    for side, sigma, tilt in views:
        s = side / max(h, w)
        view = cv2.resize(gray, (max(8, round(w * s)), max(8, round(h * s))), interpolation=cv2.INTER_AREA)
        if sigma > 0:
            view = cv2.GaussianBlur(view, (0, 0), sigma)
        m = VIEW_MARGIN_PX
        T = None
        if tilt:
            view, T = _tilted(view, tilt, VIEW_FOCAL * side)
        canvas: np.ndarray = np.full((view.shape[0] + 2 * m, view.shape[1] + 2 * m), 128.0, np.float32)
        canvas[m:-m, m:-m] = view
        canvas += rng.normal(0.0, noise_sigma, canvas.shape).astype(np.float32)
        q = detect(np.clip(canvas, 0, 255).astype(np.uint8)).to_host()
        if len(q) == 0 or len(md) < 2:
            counts.append(0)
            continue
        back = np.asarray(q.xy, np.float64).reshape(-1, 2) - m
        if T is not None:
            back = map_points(np.linalg.inv(T), back)
        qxy = (back / s).astype(np.float32)
        counts.append(_correct_matches(qxy, q.descriptors, mxy, md, VIEW_TOLERANCE_PX / s))
    return counts


def ratio_pairs(qd: np.ndarray, md: np.ndarray, ratio: float = RATIO) -> tuple[np.ndarray, np.ndarray]:
    """(query rows, model rows) of the query descriptors ``qd`` whose nearest model descriptor of ``md`` passes
    Lowe's ratio test (:func:`objrec.knn.ratio_match`: exact 2-NN, L2)."""
    if len(qd) == 0 or len(md) < 2:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    m = ratio_match(np.asarray(qd, np.float32), np.asarray(md, np.float32), ratio=ratio)
    return np.asarray(m.query_idx, np.int64), np.asarray(m.train_idx, np.int64)


def _correct_matches(qxy: np.ndarray, qd: np.ndarray, mxy: np.ndarray, md: np.ndarray, tolerance: float) -> int:
    """Query features (``qxy``, ``qd``) whose ratio-test match (:data:`RATIO`) among the model features
    (``mxy``, ``md``) lies within ``tolerance`` of them, both positions given in the same pixels."""
    qi, ti = ratio_pairs(qd, md)
    if not len(qi):
        return 0
    return int((np.linalg.norm(np.asarray(qxy)[qi] - np.asarray(mxy)[ti], axis=1) <= tolerance).sum())


#: The hard views :func:`hard_view_matches` renders, one per way a camera makes an object hard to find, as
#: (name, object's longer side in px, in-plane rotation in degrees, tilt in degrees, foreshortened side
#: ``"short"`` or ``"long"``, photometric distortion): small (a cover across a room), small and seen from the
#: side, steep (seen from above), out of focus, and hand-held (turned, tilted, soft, noisy and compressed at
#: once). They are not the operating envelope's views: the rating predicts the envelope, it does not replay it.
HARD_VIEWS: tuple[tuple[str, float, float, float, str, Distortion], ...] = (
    ("small", 60.0, 0.0, 0.0, "short", Distortion(noise_sigma=4)),
    ("side-on", 95.0, 0.0, 45.0, "short", Distortion(blur_sigma=0.8, noise_sigma=4)),
    ("steep", 160.0, 0.0, 55.0, "long", Distortion(noise_sigma=4)),
    ("out of focus", 200.0, 0.0, 0.0, "short", Distortion(blur_sigma=2.7, noise_sigma=4)),
    ("hand-held", 130.0, -70.0, 35.0, "short", Distortion(blur_sigma=1.2, noise_sigma=8, jpeg_quality=50)),
)
#: Clutter around a hard view's object (px): its frame is the outline's bounding box grown by this, cut from
#: the frame a 640x480 camera (:data:`~objrec.scenes.CAMERA_FOCAL_PX`) would take, so the detector sees the
#: object's edges against clutter and searches no more pixels than that.
HARD_MARGIN_PX = 32
#: Correct matches at which a hard view counts as fully found: twice the ten inliers a detection's verification
#: requires, so that a view with a bare minimum counts for half.
HARD_FULL_MATCHES = 20
#: Seeds the hard views' background clutter and noise: any fixed value.
HARD_SEED = 101
#: A match in a hard view is correct when the view's feature lies within this many frame pixels of where the
#: view's known homography puts its model feature.
HARD_TOLERANCE_PX = 3.0


def upright_turns(gray: np.ndarray) -> int:
    """Quarter turns clockwise (0-3) that bring the image's brightest half (of top, left, bottom, right, on a
    32x32 reduction) to the top: the same upright image for an image and any quarter turn of it, so that views
    rendered from it do not depend on which way up the image was given."""
    small = cv2.resize(gray, (32, 32), interpolation=cv2.INTER_AREA).astype(np.float64)
    halves = [small[:16].sum(), small[:, :16].sum(), small[16:].sum(), small[:, 16:].sum()]  # top, left, bottom, right
    return int(np.argmax(halves))  # a clockwise quarter turn brings the left half to the top


def quarter_turned(image: np.ndarray, k: int) -> np.ndarray:
    """``image`` turned ``k`` quarter turns clockwise."""
    for _ in range(k % 4):
        image = cv2.rotate(image, cv2.ROTATE_90_CLOCKWISE)
    return image


def quarter_turned_points(xy: np.ndarray, shape: tuple[int, int], k: int) -> np.ndarray:
    """Points ``xy`` (pixel centres) of an image of ``shape`` (h, w), where they lie once the image is turned
    ``k`` quarter turns clockwise (:func:`quarter_turned`; a negative ``k`` turns back)."""
    out = np.asarray(xy, np.float32).reshape(-1, 2).copy()
    h, w = shape
    for _ in range(k % 4):
        out = np.column_stack([h - 1 - out[:, 1], out[:, 0]]).astype(np.float32)
        h, w = w, h
    return out


def _hard_frame(
    model_size: tuple[int, int], size: float, rotation: float, tilt: float, axis: str
) -> tuple[np.ndarray, tuple[int, int]]:
    """The model→frame homography of one hard view and its frame (w, h): the camera's 640x480 view of the
    object, cut to the outline's bounding box plus :data:`HARD_MARGIN_PX`."""
    H = camera_view(model_size, size, (640, 480), CAMERA_FOCAL_PX, rotation, tilt, axis)
    q = map_points(H, model_corners(*model_size))
    lo, hi = np.floor(q.min(axis=0)) - HARD_MARGIN_PX, np.ceil(q.max(axis=0)) + HARD_MARGIN_PX
    shift = np.array([[1, 0, -lo[0]], [0, 1, -lo[1]], [0, 0, 1]], np.float64)
    return shift @ H, (int(hi[0] - lo[0]), int(hi[1] - lo[1]))


def hard_view_matches(
    image: np.ndarray,
    xy: np.ndarray,
    descriptors: np.ndarray,
    detect: Any,
    views: tuple[tuple[str, float, float, float, str, Distortion], ...] = HARD_VIEWS,
    seed: int = HARD_SEED,
) -> list[int]:
    """Per view of ``views``, how many of the image's features a recognizer would still match correctly in it.

    Each view places the image, centred, as a pinhole
    camera of focal length :data:`~objrec.scenes.CAMERA_FOCAL_PX` sees it at the view's size, tilt and in-plane
    rotation (:func:`~objrec.scenes.camera_view`; the tilt foreshortens the image's shorter or longer side),
    over drawn clutter (shapes, gradients and text, :func:`~objrec.data.synthetic_cover`: not a photo, so no
    reference image can find itself in it) in a frame cut around the object (:data:`HARD_MARGIN_PX`), and
    distorts the frame (:func:`~objrec.scenes.compose_scene`). ``detect(gray) -> Features`` finds the frame's
    features, which are matched to the image's own (``xy``, ``descriptors``) with Lowe's ratio test at
    :data:`RATIO`; a match is correct when the view's feature lies within :data:`HARD_TOLERANCE_PX` of where
    the view's homography puts its model feature (the geometry is known, so no RANSAC is needed).

    Parameters
    ----------
    image : (H, W) or (H, W, 3) uint8 ndarray
        The image as enrolment reads it, turned upright (:func:`upright_turns`, :func:`quarter_turned`) so that
        the views do not depend on which way up it was given.
    xy, descriptors : ndarray
        Its features (positions in ``image``'s pixels) as enrolment extracts them from it.
    detect : callable
        The detector a frame is searched with.
    views, seed
        See :data:`HARD_VIEWS`, :data:`HARD_SEED`.

    Returns
    -------
    list of int
        Correct matches per view.
    """
    mxy = np.asarray(xy, np.float64).reshape(-1, 2)
    h, w = image.shape[:2]
    md = np.asarray(descriptors, np.float32)
    if len(md) < 2:  # the ratio test needs two model features: no view can match
        return [0] * len(views)
    counts = []
    for i, (_, size, rotation, tilt, side, distortion) in enumerate(views):
        axis = "y" if (side == "short") == (h >= w) else "x"  # "y" foreshortens the width
        H, frame_size = _hard_frame((w, h), size, rotation, tilt, axis)
        scene = compose_scene(
            synthetic_cover(seed, frame_size),
            {"image": image},
            np.random.default_rng([seed, i]),
            frame_size=frame_size,
            homographies={"image": H},
            distortion=distortion,
        )
        q = detect(to_gray(scene.image)).to_host()
        if len(q) == 0:
            counts.append(0)
            continue
        qxy = np.asarray(q.xy, np.float64).reshape(-1, 2)
        counts.append(_correct_matches(qxy, q.descriptors, map_points(H, mxy), md, HARD_TOLERANCE_PX))
    return counts


def hard_view_share(counts: list[int], full: int = HARD_FULL_MATCHES) -> float:
    """The hard views' mean credit: a view counts ``min(1, correct matches / full)``.
    ``counts``: each hard view's correct matches; ``full``: the correct matches that earn a view full credit."""
    return float(np.mean([min(1.0, c / full) for c in counts])) if counts else 0.0
