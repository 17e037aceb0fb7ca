"""Compiled loops of the tracking stage: the least-squares homography of a track's points, every frame.

Every track refits its homography in every frame from a few tens of points. In NumPy that is some thirty
small array operations around one SVD, and their call overhead costs several times the arithmetic; compiled,
the fit is one call.
"""

from __future__ import annotations

import numpy as np

from objrec.kernel_cache import njit

#: Second-least over largest eigenvalue of the DLT's normal matrix below which point pairs are degenerate.
DEGENERATE = 1e-12


@njit
def _normalise(x, out):  # pragma: no cover - compiled
    """Points moved to their centroid and scaled to a mean distance of sqrt(2) from it, into ``out``; returns
    ``(cx, cy, scale)``."""
    n = x.shape[0]
    cx = 0.0
    cy = 0.0
    for i in range(n):
        cx += x[i, 0]
        cy += x[i, 1]
    cx /= n
    cy /= n
    d = 0.0
    for i in range(n):
        d += np.sqrt((x[i, 0] - cx) ** 2 + (x[i, 1] - cy) ** 2)
    k = np.sqrt(2.0) / max(d / n, 1e-12)
    for i in range(n):
        out[i, 0] = (x[i, 0] - cx) * k
        out[i, 1] = (x[i, 1] - cy) * k
    return cx, cy, k


@njit
def dlt_homography(src, dst):  # pragma: no cover - compiled
    """The normalised direct linear transform (Hartley and Zisserman, algorithm 4.2) of ``src`` -> ``dst``
    ((N, 2) float64 each, N >= 4): ``(H, ok)``, ``H[2, 2] = 1``; ``ok`` is False when the points are degenerate
    (the null space is not one-dimensional) or the result is not finite.

    The solution is the eigenvector of ``A^T A`` (9 x 9) with the least eigenvalue,
    the squared singular values of the DLT matrix ``A``, as OpenCV's own least-squares solver finds it: on
    normalised points the squared condition costs no accuracy that matters. A second-least eigenvalue below
    :data:`DEGENERATE` of the largest (a singular value ratio of 1e-6) marks a degenerate configuration.
    """
    n = src.shape[0]
    a = np.empty((n, 2))
    b = np.empty((n, 2))
    ax, ay, ka = _normalise(src, a)
    bx, by, kb = _normalise(dst, b)
    A = np.zeros((2 * n, 9))
    for i in range(n):
        u, v = a[i, 0], a[i, 1]
        x, y = b[i, 0], b[i, 1]
        A[2 * i, 0], A[2 * i, 1], A[2 * i, 2] = u, v, 1.0
        A[2 * i, 6], A[2 * i, 7], A[2 * i, 8] = -x * u, -x * v, -x
        A[2 * i + 1, 3], A[2 * i + 1, 4], A[2 * i + 1, 5] = u, v, 1.0
        A[2 * i + 1, 6], A[2 * i + 1, 7], A[2 * i + 1, 8] = -y * u, -y * v, -y
    M = A.T @ A
    ev, vec = np.linalg.eigh(M)
    H = np.zeros((3, 3))
    if ev[1] < DEGENERATE * ev[8]:
        return H, False
    Hn = np.ascontiguousarray(vec[:, 0]).reshape(3, 3)
    Ta = np.array([[ka, 0.0, -ka * ax], [0.0, ka, -ka * ay], [0.0, 0.0, 1.0]])
    Tb_inv = np.array([[1.0 / kb, 0.0, bx], [0.0, 1.0 / kb, by], [0.0, 0.0, 1.0]])
    H = Tb_inv @ (Hn @ Ta)
    if not np.all(np.isfinite(H)) or abs(H[2, 2]) < 1e-12:
        return H, False
    return H / H[2, 2], True
