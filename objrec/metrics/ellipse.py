"""Elliptical regions: construction from keypoints, warping through a homography, exact pairwise overlap.

An ellipse is a centre ``c`` (2,) and a symmetric positive-definite shape matrix ``S`` (2, 2), the region
``{x : (x - c)^T S^{-1} (x - c) <= 1}`` (VLFeat/VLBenchmarks' "ellipse frame"; a circle of radius ``r`` has
``S = r^2 I``). Arrays of ellipses are ``(N, 2)`` centres and ``(N, 2, 2)`` shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from objrec.geometry import map_homogeneous, map_points

__all__ = [
    "ellipses_from_features",
    "warp_ellipses",
    "ellipses_in_box",
    "ellipse_overlap",
    "homography_jacobian",
    "project_points",
]


def ellipses_from_features(features: Any, radius_scale: float = 0.5) -> tuple[np.ndarray, np.ndarray]:
    """Circular regions of keypoints: centre ``xy`` and radius ``radius_scale * size``.

    Parameters
    ----------
    features : Features or tuple of (xy, S)
        Keypoints (``size`` is OpenCV's diameter, so the default ``radius_scale=0.5`` gives its radius), or
        ellipses given directly as centres ``(N, 2)`` and shape matrices ``(N, 2, 2)``.
    radius_scale : float
        Region radius as a multiple of ``size``.

    Returns
    -------
    xy : (N, 2) float64
    S : (N, 2, 2) float64
    """
    if isinstance(features, tuple):
        if len(features) != 2:
            raise ValueError(f"ellipses: expected a (xy, S) tuple, got a tuple of {len(features)}")
        xy = np.asarray(features[0], np.float64)
        S = np.asarray(features[1], np.float64)
        if xy.ndim != 2 or xy.shape[1] != 2:
            raise ValueError(f"ellipses: expected centres of shape (N, 2), got {xy.shape}")
        if S.shape != (xy.shape[0], 2, 2):
            raise ValueError(f"ellipses: expected shape matrices of shape ({xy.shape[0]}, 2, 2), got {S.shape}")
        return xy, S
    xy = np.asarray(features.xy, np.float64)
    r = radius_scale * np.asarray(features.size, np.float64)
    if np.any(r <= 0):
        raise ValueError("features: every keypoint needs size > 0 to define its region")
    S = np.zeros((xy.shape[0], 2, 2))
    S[:, 0, 0] = S[:, 1, 1] = r * r
    return xy, S


def project_points(H: np.ndarray, xy: np.ndarray) -> np.ndarray:
    """Map ``(N, 2)`` points through the homography ``H`` (dividing by the third coordinate:
    :func:`~objrec.geometry.map_points`).
    ``xy``: the points."""
    return map_points(np.asarray(H, np.float64), xy)


def homography_jacobian(H: np.ndarray, xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mapped points and the Jacobian of ``H`` at each point (its local affine approximation).

    For ``p = (H x)_{1,2} / (H x)_3`` the Jacobian is ``(H[:2, :2] - p h3^T) / (H x)_3`` with
    ``h3 = H[2, :2]``.
    ``xy``: (N, 2) points.

    Returns
    -------
    p : (N, 2) float64
    J : (N, 2, 2) float64
    """
    H = np.asarray(H, np.float64)
    p, w = map_points(H, xy), map_homogeneous(H, xy)[:, 2]
    J = (H[None, :2, :2] - p[:, :, None] * H[None, None, 2, :2]) / w[:, None, None]
    return p, J


def warp_ellipses(H: np.ndarray, xy: np.ndarray, S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Map ellipses through ``H`` with the affine approximation at each centre: ``S' = J S J^T``.

    This is VLBenchmarks' ``'linearise'`` warp method (Mikolajczyk's original benchmark code), which the
    IJCV 2005 figures were computed with.
    ``xy``: (N, 2) ellipse centres; ``S``: (N, 2, 2) their shape matrices.
    """
    p, J = homography_jacobian(H, xy)
    return p, J @ S @ np.swapaxes(J, 1, 2)


def ellipses_in_box(xy: np.ndarray, S: np.ndarray, width: float, height: float) -> np.ndarray:
    """Which ellipses lie fully inside the image ``0 < x < width``, ``0 < y < height``.

    The test uses the axis-aligned extent of each ellipse, ``sqrt(S_xx)`` and ``sqrt(S_yy)``, as
    VLBenchmarks' ``isEllipseInBBox`` does.
    ``xy``: (N, 2) ellipse centres; ``S``: (N, 2, 2) their shape matrices (``x^T S^{-1} x <= 1``).
    """
    rx = np.sqrt(S[:, 0, 0])
    ry = np.sqrt(S[:, 1, 1])
    x, y = xy[:, 0], xy[:, 1]
    return (x - rx > 0) & (y - ry > 0) & (x + rx < width) & (y + ry < height)


def _sym_sqrt(S: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric square root of SPD matrices and its inverse, batched."""
    lam, V = np.linalg.eigh(S)
    if np.any(lam <= 0):
        raise ValueError("ellipse_overlap: every shape matrix must be positive definite")
    r = np.sqrt(lam)
    Vt = np.swapaxes(V, 1, 2)
    return (V * r[:, None, :]) @ Vt, (V / r[:, None, :]) @ Vt


def _trig_eval(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``A0 + A1 cos t + B1 sin t + A2 cos 2t + B2 sin 2t`` with ``coef = (A0, A1, B1, A2, B2)`` per row."""
    A0, A1, B1, A2, B2 = (coef[:, k, None] for k in range(5))
    return A0 + A1 * np.cos(t) + B1 * np.sin(t) + A2 * np.cos(2 * t) + B2 * np.sin(2 * t)


def _trig_deriv(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    A1, B1, A2, B2 = (coef[:, k, None] for k in range(1, 5))
    return -A1 * np.sin(t) + B1 * np.cos(t) - 2 * A2 * np.sin(2 * t) + 2 * B2 * np.cos(2 * t)


def _trig_roots(coef: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Real roots in ``[-pi, pi)`` of degree-2 trigonometric polynomials, at most 4 per row.

    With ``z = exp(i t)``, ``z^2 f(t)`` is a quartic in ``z`` whose roots on the unit circle are the real
    roots of ``f``; they are found as eigenvalues of stacked companion matrices and polished by Newton steps
    on ``f``. When the second harmonic vanishes (a circle against a circle) the quartic degenerates and the
    first-harmonic equation is solved in closed form instead.

    Returns
    -------
    t : (P, 4) float64
    valid : (P, 4) bool
    """
    P = coef.shape[0]
    A0, A1, B1, A2, B2 = coef.T
    a4 = (A2 - 1j * B2) / 2
    a3 = (A1 - 1j * B1) / 2
    a1 = (A1 + 1j * B1) / 2
    a0 = (A2 + 1j * B2) / 2
    scale = np.max(np.abs(coef), axis=1)
    quartic = np.abs(a4) > 1e-6 * scale
    t = np.zeros((P, 4))
    valid = np.zeros((P, 4), bool)

    q = np.flatnonzero(quartic)
    if q.size:
        C = np.zeros((q.size, 4, 4), np.complex128)
        C[:, 0, 0] = -a3[q] / a4[q]
        C[:, 0, 1] = -A0[q] / a4[q]
        C[:, 0, 2] = -a1[q] / a4[q]
        C[:, 0, 3] = -a0[q] / a4[q]
        C[:, 1, 0] = C[:, 2, 1] = C[:, 3, 2] = 1.0
        z = np.linalg.eigvals(C)
        t[q] = np.angle(z)
        # Tangency makes a double root that rounding splits off the circle by ~sqrt(eps): keep near-circle
        # roots (a spurious breakpoint only splits an arc in two, the sum is unchanged).
        valid[q] = np.abs(np.abs(z) - 1.0) < 1e-5

    d = np.flatnonzero(~quartic & (scale > 0))
    if d.size:
        R = np.hypot(A1[d], B1[d])
        phi = np.arctan2(B1[d], A1[d])
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = -A0[d] / R
        ok = (R > 0) & (np.abs(ratio) <= 1)
        acos = np.arccos(np.clip(ratio, -1, 1))
        t[d, 0] = phi + acos
        t[d, 1] = phi - acos
        valid[d, 0] = valid[d, 1] = ok

    for _ in range(3):
        f = _trig_eval(coef, t)
        df = _trig_deriv(coef, t)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(np.abs(df) > 1e-12, f / df, 0.0)
        t = t - np.clip(step, -0.05, 0.05)
    t = np.mod(t + np.pi, 2 * np.pi) - np.pi
    return t, valid


def _breakpoints(t: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Sorted arc breakpoints (P, 4); invalid slots repeat a valid one (zero-length arcs), or 0 if none."""
    fill = np.where(valid.any(axis=1), np.where(valid, t, np.inf).min(axis=1), 0.0)
    return np.sort(np.where(valid, t, fill[:, None]), axis=1)


def _arcs(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end parameters of the 4 arcs between sorted breakpoints (the last one wraps by 2 pi)."""
    start = b
    end = np.concatenate([b[:, 1:], b[:, :1] + 2 * np.pi], axis=1)
    return start, end


def _det2(A: np.ndarray) -> np.ndarray:
    """Determinants of a stack of 2x2 matrices ``(P, 2, 2)``."""
    return A[:, 0, 0] * A[:, 1, 1] - A[:, 0, 1] * A[:, 1, 0]


def _as_pairs(
    c1: np.ndarray, S1: np.ndarray, c2: np.ndarray, S2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Centres ``(P, 2)`` and shapes ``(P, 2, 2)`` as float64, checked to have the same number of rows."""
    c1 = np.asarray(c1, np.float64).reshape(-1, 2)
    c2 = np.asarray(c2, np.float64).reshape(-1, 2)
    S1 = np.asarray(S1, np.float64).reshape(-1, 2, 2)
    S2 = np.asarray(S2, np.float64).reshape(-1, 2, 2)
    P = c1.shape[0]
    if not (c2.shape[0] == S1.shape[0] == S2.shape[0] == P):
        raise ValueError(
            f"ellipse_overlap: expected the same number of rows, got {P}, {S1.shape[0]}, {c2.shape[0]}, {S2.shape[0]}"
        )
    return c1, S1, c2, S2


def _circle_coefficients(c: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Coefficients ``(P, 5)`` of ``f(t) = (u - c)^T Q (u - c) - 1`` on the unit circle ``u = (cos t, sin t)``.

    ``f < 0`` inside the ellipse ``(x - c)^T Q (x - c) <= 1``; see :func:`_trig_eval` for the order.
    """
    Qc = np.einsum("pij,pj->pi", Q, c)
    return np.stack(
        [
            (Q[:, 0, 0] + Q[:, 1, 1]) / 2 + np.einsum("pi,pi->p", c, Qc) - 1,
            -2 * Qc[:, 0],
            -2 * Qc[:, 1],
            (Q[:, 0, 0] - Q[:, 1, 1]) / 2,
            Q[:, 0, 1],
        ],
        axis=1,
    )


def _ellipse_breakpoints(tb: np.ndarray, c: np.ndarray, Minv: np.ndarray) -> np.ndarray:
    """The intersection points at unit-circle parameters ``tb`` as sorted parameters ``s`` of the ellipse
    ``x = c + M (cos s, sin s)``."""
    pts = np.stack([np.cos(tb), np.sin(tb)], axis=-1) - c[:, None, :]
    v = np.einsum("pij,pkj->pki", Minv, pts)
    return np.sort(np.arctan2(v[..., 1], v[..., 0]), axis=1)


def _circle_arcs_area(coef: np.ndarray, tb: np.ndarray, tol: float) -> np.ndarray:
    """Green's theorem contribution of the unit-circle arcs inside the second ellipse.

    Boundary points count as inside, so that two identical ellipses give their area once (the second
    ellipse's arcs, in :func:`_ellipse_arcs_area`, need to be strictly inside).
    """
    t0, t1 = _arcs(tb)
    inside = _trig_eval(coef, (t0 + t1) / 2) <= tol
    return 0.5 * np.sum((t1 - t0) * inside, axis=1)


def _ellipse_arcs_area(c: np.ndarray, M: np.ndarray, detM: np.ndarray, sb: np.ndarray, tol: float) -> np.ndarray:
    """Green's theorem contribution of the arcs of ``x = c + M (cos s, sin s)`` strictly inside the unit disc."""
    s0, s1 = _arcs(sb)
    sm = (s0 + s1) / 2
    mid = c[:, None, :] + np.einsum("pij,pkj->pki", M, np.stack([np.cos(sm), np.sin(sm)], axis=-1))
    inside = np.sum(mid * mid, axis=-1) - 1 < -tol
    du = np.stack([np.cos(s1) - np.cos(s0), np.sin(s1) - np.sin(s0)], axis=-1)
    Mdu = np.einsum("pij,pkj->pki", M, du)
    cross = c[:, None, 0] * Mdu[..., 1] - c[:, None, 1] * Mdu[..., 0]
    return 0.5 * np.sum((cross + detM[:, None] * (s1 - s0)) * inside, axis=1)


def ellipse_overlap(
    c1: np.ndarray, S1: np.ndarray, c2: np.ndarray, S2: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact intersection area, union area and overlap (intersection over union) of ellipse pairs.

    Pairs are taken row by row: ``(c1[k], S1[k])`` against ``(c2[k], S2[k])``.

    Parameters
    ----------
    c1, c2 : (P, 2) array
        Centres.
    S1, S2 : (P, 2, 2) array
        Shape matrices (``x^T S^{-1} x <= 1``), symmetric positive definite.

    Returns
    -------
    intersection, union, overlap : (P,) float64
        Areas in pixels^2 and their ratio. The overlap error of Mikolajczyk et al. (2005) is
        ``1 - overlap``.

    Notes
    -----
    The first ellipse is mapped to the unit disc by the affine map ``x -> S1^{-1/2} (x - c1)`` (which scales
    every area by the same factor, so the ratio is unchanged). The boundary of the intersection consists of
    the arcs of each ellipse that lie inside the other, between the (up to four) intersection points of the
    two conics; its area follows from Green's theorem, ``A = 1/2 \\oint (x dy - y dx)``, which is exact for
    elliptical arcs: for ``x(t) = c + M (cos t, sin t)`` an arc from ``t0`` to ``t1`` contributes
    ``1/2 [c x M (u(t1) - u(t0)) + det(M) (t1 - t0)]``. Unlike the grid sampling of the original benchmark
    code, the result is exact to rounding.

    Examples
    --------
    >>> import numpy as np
    >>> c = np.zeros((1, 2))
    >>> inter, union, ov = ellipse_overlap(c, np.eye(2)[None], c, 4 * np.eye(2)[None])
    >>> round(float(1 - ov[0]), 6)  # concentric circles of radius r and 2r
    0.75
    """
    c1, S1, c2, S2 = _as_pairs(c1, S1, c2, S2)
    if c1.shape[0] == 0:
        z = np.zeros(0)
        return z, z, z

    L1, L1inv = _sym_sqrt(S1)
    # The second ellipse in the frame where the first is the unit disc: centre c, shape S = M M^T.
    c = np.einsum("pij,pj->pi", L1inv, c2 - c1)
    M, Minv = _sym_sqrt(L1inv @ S2 @ L1inv)
    detM = _det2(M)

    coef = _circle_coefficients(c, Minv @ Minv)
    tb = _breakpoints(*_trig_roots(coef))
    sb = _ellipse_breakpoints(tb, c, Minv)
    tol = 1e-9
    area = _circle_arcs_area(coef, tb, tol) + _ellipse_arcs_area(c, M, detM, sb, tol)

    area1, area2 = np.pi, np.pi * detM
    inter = np.clip(area, 0.0, np.minimum(area1, area2))
    union = area1 + area2 - inter
    scale = _det2(L1)  # back to pixel units
    return inter * scale, union * scale, inter / union
