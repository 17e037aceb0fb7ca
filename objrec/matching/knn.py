"""Brute-force nearest neighbours as a blocked float32 GEMM with a fused top-2.

Squared distances come from ``|a|² + |b|² − 2ab`` one block of query rows at a time, so memory stays
``block × M`` and the full ``N × M`` matrix never exists. The code takes its array module from the
inputs (NumPy here, CuPy on a GPU), so the same function runs resident on the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from objrec.backend import get_array_module

__all__ = ["knn2", "Matches", "ratio_match"]

#: Query rows per GEMM block: 2048 x M float32 keeps a block under ~64 MB for M = 8k.
DEFAULT_BLOCK = 2048
#: Laplacian-sign column weight: a sign mismatch adds (2c)² to the squared distance, more than any two
#: L2-normalised descriptors can be apart (4), so such pairs never win.
_LAPLACIAN_WEIGHT = 2.0


def _with_sign(desc: Any, laplacian: Any | None, xp) -> Any:
    if laplacian is None:
        return desc
    col = (laplacian.astype(xp.float32) * _LAPLACIAN_WEIGHT)[:, None]
    return xp.concatenate([desc, col], axis=1)


def knn2(
    query: Any,
    train: Any,
    query_laplacian: Any | None = None,
    train_laplacian: Any | None = None,
    block: int = DEFAULT_BLOCK,
) -> tuple[Any, Any]:
    """Two nearest ``train`` rows for each ``query`` row (squared L2 distance).

    Parameters
    ----------
    query : (N, D) float32
    train : (M, D) float32
    query_laplacian, train_laplacian : (N,), (M,) int, optional
        SURF's Laplacian signs; pairs of different sign are excluded (Bay et al. 2008, sec. 4.1).
    block : int
        Query rows per GEMM block.

    Returns
    -------
    index : (N, 2) int64
        Nearest and second nearest train rows; -1 where ``M < 2``.
    dist2 : (N, 2) float32
        Their squared distances; ``inf`` where absent.
    """
    xp = get_array_module(query, train)
    q = xp.asarray(query, dtype=xp.float32)
    t = xp.asarray(train, dtype=xp.float32)
    if q.ndim != 2 or t.ndim != 2 or (q.shape[1] != t.shape[1] and q.shape[0] and t.shape[0]):
        raise ValueError(f"knn2: expected (N, D) and (M, D) descriptors, got {q.shape} and {t.shape}")
    n, m = q.shape[0], t.shape[0]
    index = xp.full((n, 2), -1, dtype=xp.int64)
    dist2 = xp.full((n, 2), xp.inf, dtype=xp.float32)
    if n == 0 or m == 0:
        return index, dist2
    if (query_laplacian is None) != (train_laplacian is None):
        raise ValueError("knn2: give Laplacian signs for both query and train, or for neither")
    q = _with_sign(q, query_laplacian, xp)
    t = _with_sign(t, train_laplacian, xp)
    t_sq = (t * t).sum(axis=1)
    tT = xp.ascontiguousarray(t.T)
    rows = xp.arange(min(block, n))
    for s in range(0, n, block):
        qb = q[s : s + block]
        d = qb @ tT
        d *= -2.0
        d += t_sq[None, :]
        d += (qb * qb).sum(axis=1)[:, None]
        r = rows[: qb.shape[0]]
        i1 = d.argmin(axis=1)
        d1 = d[r, i1]
        index[s : s + qb.shape[0], 0] = i1
        dist2[s : s + qb.shape[0], 0] = d1
        if m > 1:
            d[r, i1] = xp.inf
            i2 = d.argmin(axis=1)
            index[s : s + qb.shape[0], 1] = i2
            dist2[s : s + qb.shape[0], 1] = d[r, i2]
    xp.maximum(dist2, 0, out=dist2)
    return index, dist2


@dataclass(frozen=True)
class Matches:
    """Putative correspondences: ``query_idx[k]`` matched ``train_idx[k]`` with ``distance[k]``."""

    query_idx: np.ndarray
    train_idx: np.ndarray
    distance: np.ndarray
    ratio: np.ndarray

    def __len__(self) -> int:
        return int(self.query_idx.shape[0])

    @classmethod
    def empty(cls) -> Matches:
        return cls(
            np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.float32)
        )


def ratio_match(
    query: Any,
    train: Any,
    ratio: float = 0.75,
    mutual: bool = False,
    query_laplacian: Any | None = None,
    train_laplacian: Any | None = None,
    block: int = DEFAULT_BLOCK,
) -> Matches:
    """Lowe's ratio test on 2-NN (distance ratio, not squared), with an optional mutual check.

    Only the surviving matches come back to the host.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio: expected a value in (0, 1], got {ratio}")
    xp = get_array_module(query, train)
    idx, d2 = knn2(query, train, query_laplacian, train_laplacian, block)
    if idx.shape[0] == 0:
        return Matches.empty()
    d1 = xp.sqrt(d2[:, 0])
    dn = xp.sqrt(d2[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        r = xp.where(dn > 0, d1 / dn, xp.where(d1 > 0, 1.0, 0.0))
    # A lone train descriptor has no second neighbour: its ratio is 0 when it is within the sign rule.
    r = xp.where(xp.isinf(dn) & xp.isfinite(d1), 0.0, r).astype(xp.float32)
    keep = (r < ratio) & xp.isfinite(d1)
    if query_laplacian is not None:
        # A winner of the other sign only wins because nothing of the same sign exists.
        keep &= d2[:, 0] < (2 * _LAPLACIAN_WEIGHT) ** 2
    if mutual:
        back, _ = knn2(train, query, train_laplacian, query_laplacian, block)
        qi = xp.arange(idx.shape[0])
        keep &= back[idx[:, 0], 0] == qi
    sel = xp.nonzero(keep)[0]
    out = Matches(sel, idx[sel, 0], d1[sel], r[sel])
    if xp is not np:
        out = Matches(*(a.get() for a in (out.query_idx, out.train_idx, out.distance, out.ratio)))
    return out
