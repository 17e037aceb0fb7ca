"""Region metrics: detector repeatability and geometric correspondences (Mikolajczyk et al. 2005).

The protocol follows VLBenchmarks (Lenc, Gulshan and Vedaldi), which reproduces the IJCV 2005 benchmark:

1. keypoints become circles (radius ``size / 2``) or ellipses; each set is mapped into the other image with the
   local affine approximation of the homography at its centre;
2. only regions fully visible in both images are kept (``n1``, ``n2``);
3. for every candidate pair, region B is mapped into image A, both shapes are rescaled about their own centres so
   that region A has a radius of ``normalize_radius`` (30 px), and the overlap error ``1 - |A ∩ B| / |A ∪ B|`` is
   computed exactly;
4. pairs with overlap error below the threshold (0.4) are correspondences; a greedy one-to-one matching by
   increasing overlap error gives the matches;
5. repeatability = matches / min(n1, n2). The matching score (:mod:`objrec.metrics.descriptors`) counts the
   pairs that a one-to-one greedy nearest neighbour matching of the descriptors shares with the geometric
   matching, over the same denominator.

References
----------
K. Mikolajczyk, T. Tuytelaars, C. Schmid, A. Zisserman, J. Matas, F. Schaffalitzky, T. Kadir, L. Van Gool,
"A comparison of affine region detectors", IJCV 65(1/2):43-72, 2005. doi:10.1007/s11263-005-3848-x

K. Lenc, V. Gulshan, A. Vedaldi, "VLBenchmarks", 2012. https://github.com/vlfeat/vlbenchmarks
(``RepeatabilityBenchmark``, ``HomographyConsistencyModel``, ``fastEllipseOverlap``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np
from scipy.spatial import cKDTree

from objrec.geometry import check_homography
from objrec.metrics.ellipse import ellipse_overlap, ellipses_from_features, ellipses_in_box, warp_ellipses

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = [
    "ScalarFields",
    "RepeatabilityResult",
    "RegionGeometry",
    "repeatability",
    "geometric_correspondences",
    "region_geometry",
    "original_indices",
    "greedy_one_to_one",
]


class ScalarFields:
    """Mixin for result dataclasses: ``to_dict`` returns the fields shown in ``repr``."""

    def to_dict(self: DataclassInstance) -> dict[str, Any]:
        """Scalars only (for JSON reports), as plain ``int``/``float``; the per-match arrays are left out."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.repr:
                v = getattr(self, f.name)
                out[f.name] = int(v) if isinstance(v, int | np.integer) else float(v)
        return out


@dataclass(frozen=True, eq=False)
class RepeatabilityResult(ScalarFields):
    """Outcome of :func:`repeatability`.

    Attributes
    ----------
    repeatability : float
        ``n_matches / min(n1, n2)``; 0 when either image has no visible region.
    n_matches : int
        One-to-one geometric matches.
    n_correspondences : int
        Region pairs with overlap error below the threshold (before the one-to-one step).
    n1, n2 : int
        Regions of each image visible in both images.
    matches : (K, 2) int64
        Matched pairs as indices into the original ``f1`` and ``f2``.
    overlap_error : (K,) float64
        Overlap error of each match.
    """

    repeatability: float
    n_matches: int
    n_correspondences: int
    n1: int
    n2: int
    matches: np.ndarray = field(repr=False)
    overlap_error: np.ndarray = field(repr=False)


def _hw(shape: Any, name: str) -> tuple[int, int]:
    try:
        h, w = int(shape[0]), int(shape[1])
    except (TypeError, IndexError, ValueError):
        raise ValueError(f"{name}: expected an image shape (height, width[, channels]), got {shape!r}") from None
    if h <= 0 or w <= 0:
        raise ValueError(f"{name}: expected a positive height and width, got {shape!r}")
    return h, w


def greedy_one_to_one(i: np.ndarray, j: np.ndarray, cost: np.ndarray) -> np.ndarray:
    """Greedy one-to-one matching of weighted pairs, in order of increasing ``cost``.

    Equivalent to walking the pairs sorted by ``(cost, i, j)`` and keeping a pair when neither end is taken
    (VLBenchmarks' ``greedyBipartiteMatching``). It is computed in rounds without a per-pair Python loop: each
    round accepts every pair that is the best remaining pair of both its ends (a "locally dominant" pair), which
    the sequential greedy walk would also accept; the result is the same matching.

    Parameters
    ----------
    i, j : (E,) int
        Pair endpoints.
    cost : (E,) float
        Lower is better.

    Returns
    -------
    (K, 2) int64
        Accepted pairs ``(i, j)``, sorted by ``i``.
    """
    i = np.asarray(i, np.int64).ravel()
    j = np.asarray(j, np.int64).ravel()
    cost = np.asarray(cost, np.float64).ravel()
    if i.size == 0:
        return np.zeros((0, 2), np.int64)
    order = np.lexsort((j, i, cost))
    i, j = i[order], j[order]
    taken_i = np.zeros(i.max() + 1, bool)
    taken_j = np.zeros(j.max() + 1, bool)
    out_i, out_j = [], []
    alive = np.arange(i.size)
    while alive.size:
        ii, jj = i[alive], j[alive]
        # ``alive`` keeps the global order, so the first occurrence of an end is its best remaining pair.
        best_i = np.zeros(alive.size, bool)
        best_i[np.unique(ii, return_index=True)[1]] = True
        best_j = np.zeros(alive.size, bool)
        best_j[np.unique(jj, return_index=True)[1]] = True
        acc = best_i & best_j
        out_i.append(ii[acc])
        out_j.append(jj[acc])
        taken_i[ii[acc]] = True
        taken_j[jj[acc]] = True
        alive = alive[~(taken_i[ii] | taken_j[jj])]
    m = np.stack([np.concatenate(out_i), np.concatenate(out_j)], axis=1)
    return m[np.argsort(m[:, 0], kind="stable")]


def _overlap_upper_bound(
    R1: np.ndarray, R2: np.ndarray, d: np.ndarray, area1: np.ndarray, area2: np.ndarray
) -> np.ndarray:
    """Upper bound on the overlap of two ellipses inside circles of radii R1, R2 whose centres are d apart."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a1 = np.arccos(np.clip((d * d + R1 * R1 - R2 * R2) / (2 * d * R1), -1, 1))
        a2 = np.arccos(np.clip((d * d + R2 * R2 - R1 * R1) / (2 * d * R2), -1, 1))
        k = (-d + R1 + R2) * (d + R1 - R2) * (d - R1 + R2) * (d + R1 + R2)
        lens = R1 * R1 * a1 + R2 * R2 * a2 - 0.5 * np.sqrt(np.maximum(k, 0))
    lens = np.where(d >= R1 + R2, 0.0, lens)
    lens = np.where(d <= np.abs(R1 - R2), np.pi * np.minimum(R1, R2) ** 2, lens)
    inter = np.minimum(lens, np.minimum(area1, area2))
    # The overlap grows with the intersection at fixed areas, so the bound on one bounds the other.
    return inter / (area1 + area2 - inter) * (1 + 1e-9)


@dataclass(frozen=True, eq=False)
class RegionGeometry:
    """What the region protocol finds for one image pair, in positions among the visible regions.

    Attributes
    ----------
    vis1, vis2 : (n1,), (n2,) int64
        Indices of the regions of ``f1`` and ``f2`` visible in both images.
    pairs : (E, 2) int64
        Correspondences (overlap error below the threshold), as positions in ``vis1`` and ``vis2``.
    error : (E,) float64
        Overlap error of each correspondence.
    matches : (K, 2) int64
        The one-to-one geometric matching of the correspondences.
    match_error : (K,) float64
        Overlap error of each match.
    """

    vis1: np.ndarray  # indices of visible regions in f1
    vis2: np.ndarray
    pairs: np.ndarray  # (E, 2) correspondences, indices into vis1/vis2 positions
    error: np.ndarray  # (E,) overlap error
    matches: np.ndarray  # (K, 2) one-to-one, indices into vis1/vis2 positions
    match_error: np.ndarray


def _normalised_homography(H: Any, overlap_threshold: float, normalize_radius: float | None) -> np.ndarray:
    """Checked geometric parameters; ``H`` is returned scaled to ``H[2, 2] = 1`` (when non-zero)."""
    if not 0.0 < overlap_threshold < 1.0:
        raise ValueError(f"overlap_threshold: expected a value in (0, 1), got {overlap_threshold}")
    if normalize_radius is not None and not normalize_radius > 0:
        raise ValueError(f"normalize_radius: expected a positive radius or None, got {normalize_radius}")
    H = check_homography(H)
    if H[2, 2] != 0:
        H = H / H[2, 2]
    return H


def _visible_regions(
    H: np.ndarray,
    xy1: np.ndarray,
    S1: np.ndarray,
    xy2: np.ndarray,
    S2: np.ndarray,
    size1: tuple[int, int],
    size2: tuple[int, int],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Regions fully inside both images once mapped into the other one (VLBenchmarks' cropFrames).

    ``size1`` and ``size2`` are ``(height, width)``. Returns the indices of the visible regions of each
    image, ``vis1`` and ``vis2``, and the regions of image 2 mapped into image 1 (centres and shapes).
    """
    (h1, w1), (h2, w2) = size1, size2
    Hinv = np.linalg.inv(H)
    if Hinv[2, 2] != 0:
        Hinv = Hinv / Hinv[2, 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        xy1w, S1w = warp_ellipses(H, xy1, S1)
        xy2w, S2w = warp_ellipses(Hinv, xy2, S2)
        # Points beyond the horizon line (third coordinate <= 0) have no image in the other view.
        ok1 = ellipses_in_box(xy1, S1, w1, h1) & ellipses_in_box(xy1w, S1w, w2, h2)
        ok1 &= xy1 @ H[2, :2] + H[2, 2] > 0
        ok2 = ellipses_in_box(xy2w, S2w, w1, h1) & ellipses_in_box(xy2, S2, w2, h2)
        ok2 &= xy2 @ Hinv[2, :2] + Hinv[2, 2] > 0
    return np.flatnonzero(ok1), np.flatnonzero(ok2), xy2w, S2w


def _candidate_pairs(
    cA: np.ndarray,
    SA: np.ndarray,
    cB: np.ndarray,
    SB: np.ndarray,
    overlap_threshold: float,
    normalize_radius: float | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(ia, ib)`` of regions A and B (both in image A) that can reach the overlap threshold.

    Returns the pair indices and the scale ``s`` that gives region A the normalised radius (1 when
    ``normalize_radius`` is None).
    """
    detA = np.linalg.det(SA)
    detB = np.linalg.det(SB)
    rA = detA**0.25  # radius of the circle with the same area
    # Candidates as in VLBenchmarks' fastEllipseOverlap: centres closer than 4 radii of A (4 bounds the
    # elongation of Baumberg-adapted ellipses), and an area ratio that can reach the required overlap
    # (overlap <= min(area) / max(area)). Only these go through the exact overlap computation.
    tree = cKDTree(cB)
    lists = tree.query_ball_point(cA, r=4.0 * rA)
    counts = np.fromiter((len(x) for x in lists), np.int64, len(lists))
    ia = np.repeat(np.arange(cA.shape[0]), counts)
    ib = np.fromiter((k for x in lists for k in x), np.int64, int(counts.sum()))
    ratio = np.sqrt(np.minimum(detA[ia], detB[ib]) / np.maximum(detA[ia], detB[ib]))
    keep = ratio > 1.0 - overlap_threshold
    ia, ib = ia[keep], ib[keep]

    # Both shapes are scaled about their own centres (not the distance between them) so that region A has the
    # normalised radius: the same position error then costs the same overlap for small and large regions.
    s = normalize_radius / rA[ia] if normalize_radius is not None else np.ones(ia.size)
    # A cheap exact bound first: each ellipse lies in the circle of its major semi-axis, so the intersection
    # is at most the lens of those circles. Only pairs whose bound reaches the threshold get the exact overlap.
    d = np.linalg.norm(cA[ia] - cB[ib], axis=1)
    ub = _overlap_upper_bound(
        s * np.sqrt(np.linalg.eigvalsh(SA)[:, 1])[ia],
        s * np.sqrt(np.linalg.eigvalsh(SB)[:, 1])[ib],
        d,
        np.pi * s**2 * np.sqrt(detA[ia]),
        np.pi * s**2 * np.sqrt(detB[ib]),
    )
    keep = ub > 1.0 - overlap_threshold
    return ia[keep], ib[keep], s[keep]


def _pair_lookup(pairs: np.ndarray, values: np.ndarray, query: np.ndarray, n2: int) -> np.ndarray:
    """``values`` at the rows of ``pairs`` equal to each row of ``query``.

    The rows of ``pairs`` are unique index pairs ``(i, j)`` with ``j <= n2``, so a lookup by the key
    ``i * (n2 + 1) + j`` is exact; every row of ``query`` must be one of them.
    """
    key = pairs[:, 0] * (n2 + 1) + pairs[:, 1]
    order = np.argsort(key)
    pos = order[np.searchsorted(key[order], query[:, 0] * (n2 + 1) + query[:, 1])] if query.size else order[:0]
    return values[pos]


def region_geometry(
    f1: Any,
    f2: Any,
    H: Any,
    shape1: Any,
    shape2: Any,
    overlap_threshold: float,
    normalize_radius: float | None,
    radius_scale: float,
) -> RegionGeometry:
    """Visible regions, correspondences (overlap error below the threshold) and one-to-one matches.

    Parameters (``f1``, ``f2``, ``H``, ``shape1``, ``shape2``, ``overlap_threshold``, ``normalize_radius``,
    ``radius_scale``) are those of :func:`repeatability`; the other region metrics start from this result.

    Returns
    -------
    RegionGeometry
    """
    H = _normalised_homography(H, overlap_threshold, normalize_radius)
    size1, size2 = _hw(shape1, "shape1"), _hw(shape2, "shape2")
    xy1, S1 = ellipses_from_features(f1, radius_scale)
    xy2, S2 = ellipses_from_features(f2, radius_scale)
    vis1, vis2, xy2w, S2w = _visible_regions(H, xy1, S1, xy2, S2, size1, size2)
    empty = np.zeros((0, 2), np.int64)
    if vis1.size == 0 or vis2.size == 0:
        return RegionGeometry(vis1, vis2, empty, np.zeros(0), empty, np.zeros(0))

    # Everything is compared in image A: region A against region B mapped back.
    cA, SA = xy1[vis1], S1[vis1]
    cB, SB = xy2w[vis2], S2w[vis2]
    ia, ib, s = _candidate_pairs(cA, SA, cB, SB, overlap_threshold, normalize_radius)
    if ia.size == 0:
        return RegionGeometry(vis1, vis2, empty, np.zeros(0), empty, np.zeros(0))

    s2 = (s * s)[:, None, None]
    _, _, ov = ellipse_overlap(cA[ia], SA[ia] * s2, cB[ib], SB[ib] * s2)
    err = 1.0 - ov
    good = err < overlap_threshold
    pairs = np.stack([ia[good], ib[good]], axis=1)
    err = err[good]
    m = greedy_one_to_one(pairs[:, 0], pairs[:, 1], err)
    return RegionGeometry(vis1, vis2, pairs, err, m, _pair_lookup(pairs, err, m, vis2.size))


def original_indices(g: RegionGeometry, pairs: np.ndarray) -> np.ndarray:
    """Pairs of positions among the visible regions ``(g.vis1, g.vis2)`` as indices into ``f1`` and ``f2``.
    ``g``: the regions' geometry (:func:`region_geometry`); ``pairs``: (K, 2) positions among the visible regions."""
    return np.stack([g.vis1[pairs[:, 0]], g.vis2[pairs[:, 1]]], axis=1)


def repeatability(
    f1: Any,
    f2: Any,
    H: Any,
    shape1: Any,
    shape2: Any,
    overlap_threshold: float = 0.4,
    normalize_radius: float | None = 30.0,
    radius_scale: float = 0.5,
) -> RepeatabilityResult:
    """Detector repeatability after Mikolajczyk et al. (2005), as computed by VLBenchmarks.

    Parameters
    ----------
    f1, f2 : Features or tuple of (xy, S)
        Regions in image 1 and image 2: keypoints (circles of radius ``radius_scale * size``) or ellipses as
        centres ``(N, 2)`` and shape matrices ``(N, 2, 2)`` (``x^T S^{-1} x <= 1``).
    H : (3, 3) array
        Homography mapping pixels of image 1 to image 2 (``x2 ~ H x1``).
    shape1, shape2 : tuple
        Image shapes ``(height, width[, channels])``.
    overlap_threshold : float
        Maximum overlap error ``1 - |A ∩ B| / |A ∪ B|`` of a correspondence (0.4 in the paper).
    normalize_radius : float or None
        Rescale each pair so that the region of image 1 has this radius (30 px in the paper); None compares
        regions at their own size.
    radius_scale : float
        Region radius as a multiple of the keypoint ``size`` (OpenCV's diameter, hence 0.5).

    Returns
    -------
    RepeatabilityResult

    Notes
    -----
    A region counts only when it lies fully inside its own image and, mapped by the affine approximation of
    ``H`` at its centre, fully inside the other image. Candidates are pairs whose centres (in image 1) are
    closer than four region-1 radii and whose area ratio exceeds ``1 - overlap_threshold``; their overlap is
    computed exactly (see :func:`~objrec.metrics.ellipse.ellipse_overlap`), where the original code sampled
    a grid.

    References
    ----------
    K. Mikolajczyk et al., "A comparison of affine region detectors", IJCV 65(1/2):43-72, 2005.
    doi:10.1007/s11263-005-3848-x

    Examples
    --------
    >>> import numpy as np
    >>> xy = np.array([[50.0, 50.0], [120.0, 80.0]])
    >>> S = np.repeat(25.0 * np.eye(2)[None], 2, axis=0)  # circles of radius 5
    >>> r = repeatability((xy, S), (xy + [10.0, 0.0], S), np.array([[1, 0, 10], [0, 1, 0], [0, 0, 1.0]]),
    ...                   (200, 200), (200, 200))
    >>> r.repeatability, r.n_matches
    (1.0, 2)
    """
    g = region_geometry(f1, f2, H, shape1, shape2, overlap_threshold, normalize_radius, radius_scale)
    n1, n2 = g.vis1.size, g.vis2.size
    k = g.matches.shape[0]
    rep = k / min(n1, n2) if min(n1, n2) > 0 else 0.0
    matches = original_indices(g, g.matches) if k else g.matches
    return RepeatabilityResult(float(rep), k, g.pairs.shape[0], n1, n2, matches, g.match_error)


def geometric_correspondences(
    f1: Any,
    f2: Any,
    H: Any,
    shape1: Any,
    shape2: Any,
    overlap_threshold: float = 0.4,
    normalize_radius: float | None = 30.0,
    radius_scale: float = 0.5,
) -> tuple[np.ndarray, np.ndarray]:
    """All region pairs with overlap error below the threshold (before the one-to-one step).

    Parameters (``f1``, ``f2``, ``H``, ``shape1``, ``shape2``, ``overlap_threshold``, ``normalize_radius``,
    ``radius_scale``) are those of :func:`repeatability`.

    Returns
    -------
    pairs : (E, 2) int64
        Indices into the original ``f1`` and ``f2``.
    overlap_error : (E,) float64
    """
    g = region_geometry(f1, f2, H, shape1, shape2, overlap_threshold, normalize_radius, radius_scale)
    if g.pairs.shape[0] == 0:
        return np.zeros((0, 2), np.int64), np.zeros(0)
    return original_indices(g, g.pairs), g.error
