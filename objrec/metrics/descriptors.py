"""Descriptor metrics: matching score (Mikolajczyk et al. 2005) and mean matching accuracy (HPatches).

Descriptors are compared by their L2 distance through :class:`~objrec.knn.BruteForceIndex`, the
exact nearest-neighbour search the recognizer matches with: the mutual nearest neighbours come from its
1-NN in both directions, and the one-to-one greedy matching walks its full distance matrix.

References
----------
K. Mikolajczyk, T. Tuytelaars, C. Schmid, A. Zisserman, J. Matas, F. Schaffalitzky, T. Kadir, L. Van Gool,
"A comparison of affine region detectors", IJCV 65(1/2):43-72, 2005. doi:10.1007/s11263-005-3848-x

V. Balntas, K. Lenc, A. Vedaldi, K. Mikolajczyk, "HPatches: A benchmark and evaluation of handcrafted and
learned local descriptors", CVPR 2017. doi:10.1109/CVPR.2017.410

M. Dusmanu et al., "D2-Net: A trainable CNN for joint description and detection of local features", CVPR 2019
(mean matching accuracy on HPatches sequences).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objrec.geometry import check_homography
from objrec.knn import BruteForceIndex
from objrec.metrics.ellipse import project_points
from objrec.metrics.regions import ScalarFields, original_indices, region_geometry
from objrec.types import Features

__all__ = [
    "MatchingScoreResult",
    "MatchingAccuracyResult",
    "matching_score",
    "mean_matching_accuracy",
    "greedy_descriptor_matches",
    "mutual_nearest_neighbours",
    "features_from_opencv_reference",
]


@dataclass(frozen=True, eq=False)
class MatchingScoreResult(ScalarFields):
    """Outcome of :func:`matching_score`.

    Attributes
    ----------
    matching_score : float
        ``n_correct / min(n1, n2)``.
    n_correct : int
        Descriptor matches that are also geometric matches.
    n_descriptor_matches : int
        One-to-one descriptor matches among the visible regions (``min(n1, n2)`` when both are non-empty).
    repeatability, n_matches, n_correspondences, n1, n2
        The geometric side, as in :class:`RepeatabilityResult`.
    matches : (K, 2) int64
        The correct descriptor matches, as indices into the original ``f1`` and ``f2``.
    """

    matching_score: float
    n_correct: int
    n_descriptor_matches: int
    repeatability: float
    n_matches: int
    n_correspondences: int
    n1: int
    n2: int
    matches: np.ndarray = field(repr=False)


@dataclass(frozen=True, eq=False)
class MatchingAccuracyResult:
    """Outcome of :func:`mean_matching_accuracy`.

    Attributes
    ----------
    thresholds : (T,) float64
        Reprojection error thresholds in pixels.
    accuracy : (T,) float64
        Fraction of the mutual nearest-neighbour matches with error ``<= threshold`` (0 when there are none).
    n_matches : int
    errors : (K,) float64
        Reprojection error of each match, ``|H x1 - x2|``.
    matches : (K, 2) int64
    """

    thresholds: np.ndarray
    accuracy: np.ndarray
    n_matches: int
    errors: np.ndarray = field(repr=False)
    matches: np.ndarray = field(repr=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "thresholds": [float(t) for t in self.thresholds],
            "accuracy": [float(a) for a in self.accuracy],
            "n_matches": int(self.n_matches),
        }


def greedy_descriptor_matches(d1: np.ndarray, d2: np.ndarray) -> np.ndarray:
    """One-to-one descriptor matching by increasing L2 distance (VLBenchmarks' ``'1to1'`` strategy).

    Computed as rounds of mutual nearest neighbours among the still unmatched descriptors, which gives the
    same matching as the greedy walk over all ``N x M`` distances sorted in increasing order. The distances
    are :meth:`~objrec.knn.BruteForceIndex.distances`, one matrix for both directions, so the first
    global minimum of a round is mutual in it.
    ``d1``, ``d2``: (N, D) and (M, D) descriptors.

    Returns
    -------
    (K, 2) int64
        Pairs ``(i, j)`` sorted by ``i``; ``K = min(N, M)``.
    """
    n1, n2 = len(d1), len(d2)
    if n1 == 0 or n2 == 0:
        return np.zeros((0, 2), np.int64)
    D = BruteForceIndex(np.asarray(d2, np.float32)).distances(d1)
    r_best = D.argmin(axis=1)
    c_best = D.argmin(axis=0)
    row_alive = np.ones(n1, bool)
    col_alive = np.ones(n2, bool)
    out_i, out_j = [], []
    while True:
        rows = np.flatnonzero(row_alive)
        if rows.size == 0 or not col_alive.any():
            break
        # The first global minimum among the remaining pairs is always mutual, so every round makes progress.
        acc_i = rows[c_best[r_best[rows]] == rows]
        acc_j = r_best[acc_i]
        out_i.append(acc_i)
        out_j.append(acc_j)
        row_alive[acc_i] = False
        col_alive[acc_j] = False
        D[acc_i, :] = np.inf
        D[:, acc_j] = np.inf
        # A nearest neighbour among the remaining ones changes only when it was taken.
        stale_r = np.flatnonzero(row_alive & ~col_alive[r_best])
        if stale_r.size:
            r_best[stale_r] = D[stale_r].argmin(axis=1)
        stale_c = np.flatnonzero(col_alive & ~row_alive[c_best])
        if stale_c.size:
            c_best[stale_c] = D[:, stale_c].argmin(axis=0)
    m = np.stack([np.concatenate(out_i), np.concatenate(out_j)], axis=1)
    return m[np.argsort(m[:, 0], kind="stable")]


def mutual_nearest_neighbours(d1: np.ndarray, d2: np.ndarray) -> np.ndarray:
    """Pairs ``(i, j)`` where ``j`` is the L2 nearest neighbour of ``i`` and ``i`` that of ``j``.

    Each direction is one exact nearest-neighbour search (:class:`~objrec.knn.BruteForceIndex`).
    ``d1``, ``d2``: (N, D) and (M, D) descriptors.

    Returns
    -------
    (K, 2) int64
        Pairs sorted by ``i``.
    """
    if len(d1) == 0 or len(d2) == 0:
        return np.zeros((0, 2), np.int64)
    a, b = np.asarray(d1, np.float32), np.asarray(d2, np.float32)
    nn12 = BruteForceIndex(b).knn(a, 1)[0][:, 0]
    nn21 = BruteForceIndex(a).knn(b, 1)[0][:, 0]
    i = np.flatnonzero(nn21[nn12] == np.arange(len(a)))
    return np.stack([i, nn12[i]], axis=1).astype(np.int64)


def _check_descriptors(f1: Any, f2: Any) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(f1, Features) or not isinstance(f2, Features):
        raise TypeError("f1, f2: descriptor metrics need Features (with descriptors)")
    if f1.kind != f2.kind:
        raise ValueError(f"f1, f2: descriptors of different kinds do not match ({f1.kind!r} vs {f2.kind!r})")
    if f1.descriptor_size != f2.descriptor_size:
        raise ValueError(f"f1, f2: descriptor sizes differ ({f1.descriptor_size} vs {f2.descriptor_size})")
    return f1.descriptors, f2.descriptors


def matching_score(
    f1: Features,
    f2: Features,
    H: Any,
    shape1: Any,
    shape2: Any,
    overlap_threshold: float = 0.4,
    normalize_radius: float | None = 30.0,
    radius_scale: float = 0.5,
    require_geometric_match: bool = True,
) -> MatchingScoreResult:
    """Descriptor matching score after Mikolajczyk et al. (2005), as computed by VLBenchmarks.

    Among the regions visible in both images (as for :func:`repeatability`), descriptors are matched one to
    one, greedily by increasing L2 distance. A descriptor match is correct when the pair is also a geometric
    match; the score is ``n_correct / min(n1, n2)``.

    Parameters
    ----------
    f1, f2 : Features
        Keypoints with descriptors of the same kind and size.
    H, shape1, shape2, overlap_threshold, normalize_radius, radius_scale
        As in :func:`repeatability`.
    require_geometric_match : bool
        True (VLBenchmarks' ``'MatchingScore'`` mode): the descriptor match must coincide with the one-to-one
        geometric match. False: any pair with overlap error below the threshold counts (the paper's wording).

    Returns
    -------
    MatchingScoreResult

    References
    ----------
    K. Mikolajczyk et al., "A comparison of affine region detectors", IJCV 65(1/2):43-72, 2005.
    doi:10.1007/s11263-005-3848-x
    """
    d1, d2 = _check_descriptors(f1, f2)
    g = region_geometry(f1, f2, H, shape1, shape2, overlap_threshold, normalize_radius, radius_scale)
    n1, n2 = g.vis1.size, g.vis2.size
    denom = min(n1, n2)
    rep = g.matches.shape[0] / denom if denom else 0.0
    if denom == 0:
        return MatchingScoreResult(0.0, 0, 0, 0.0, 0, 0, n1, n2, np.zeros((0, 2), np.int64))
    dm = greedy_descriptor_matches(d1[g.vis1], d2[g.vis2])
    ref = g.matches if require_geometric_match else g.pairs
    base = n2 + 1
    correct = np.isin(dm[:, 0] * base + dm[:, 1], ref[:, 0] * base + ref[:, 1])
    good = dm[correct]
    matches = original_indices(g, good)
    k = int(correct.sum())
    return MatchingScoreResult(
        k / denom, k, dm.shape[0], float(rep), g.matches.shape[0], g.pairs.shape[0], n1, n2, matches
    )


def mean_matching_accuracy(
    f1: Features,
    f2: Features,
    H: Any,
    thresholds: Iterable[float] = range(1, 11),
) -> MatchingAccuracyResult:
    """Mean matching accuracy: the fraction of mutual nearest-neighbour matches within ``t`` px, for each ``t``.

    The protocol of the HPatches image-sequence evaluation in D2-Net (Dusmanu et al. 2019) and later work:
    all keypoints, mutual nearest neighbours of the L2 descriptor distance, reprojection error
    ``|H x1 - x2|`` measured in image 2.

    Parameters
    ----------
    f1, f2 : Features
    H : (3, 3) array
        Maps image 1 to image 2.
    thresholds : iterable of float
        Pixel thresholds (1..10 by default).

    Returns
    -------
    MatchingAccuracyResult
        ``accuracy`` is 0 at every threshold when there are no matches.

    References
    ----------
    V. Balntas, K. Lenc, A. Vedaldi, K. Mikolajczyk, "HPatches: A benchmark and evaluation of handcrafted
    and learned local descriptors", CVPR 2017. doi:10.1109/CVPR.2017.410
    """
    d1, d2 = _check_descriptors(f1, f2)
    H = check_homography(H)
    th = np.asarray(list(thresholds), np.float64)
    if th.ndim != 1 or th.size == 0:
        raise ValueError(f"thresholds: expected a non-empty sequence of pixel thresholds, got {th!r}")
    m = mutual_nearest_neighbours(d1, d2)
    if m.shape[0] == 0:
        return MatchingAccuracyResult(th, np.zeros(th.size), 0, np.zeros(0), m)
    p = project_points(H, f1.xy[m[:, 0]])
    err = np.linalg.norm(p - f2.xy[m[:, 1]].astype(np.float64), axis=1)
    err = np.where(np.isfinite(err), err, np.inf)
    acc = (err[None, :] <= th[:, None]).mean(axis=1)
    return MatchingAccuracyResult(th, acc, m.shape[0], err, m)


def features_from_opencv_reference(npz_path: str | os.PathLike) -> Features:
    """OpenCV's own SURF output stored in ``reference/opencv_surf/*.npz`` as :class:`~objrec.types.Features`.

    The files hold ``xy``, ``size``, ``angle``, ``response``, ``octave``, ``laplacian`` and ``descriptors``
    (float16 in the Oxford files, float32 in the box files) in OpenCV's conventions.

    Raises
    ------
    ValueError
        Naming the file when it is missing, not an ``.npz`` archive, or lacks an array.
    """
    p = Path(npz_path)
    if not p.is_file():
        raise ValueError(f"{p}: no such file")
    names = ("xy", "size", "angle", "response", "octave", "laplacian", "descriptors")
    try:
        with np.load(p, allow_pickle=False) as z:
            missing = [n for n in names if n not in z.files]
            if missing:
                raise ValueError(f"{p}: missing arrays {missing} (has {sorted(z.files)})")
            arrays = {n: np.asarray(z[n]) for n in names}
    except ValueError as exc:
        if str(p) in str(exc):
            raise
        raise ValueError(f"{p}: not a readable .npz archive ({exc})") from exc
    except (OSError, EOFError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{p}: not a readable .npz archive ({exc})") from exc
    arrays["descriptors"] = arrays["descriptors"].astype(np.float32)
    try:
        return Features(**arrays, kind="surf")
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from exc
