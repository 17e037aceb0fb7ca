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
        SURF's Laplacian signs: a pair of different sign is charged a distance larger than any two
        L2-normalised descriptors can have (Bay et al. 2008, sec. 4.1), so it wins only where no train row
        of the same sign exists; :func:`ratio_match` drops such matches.
    block : int
        Query rows per GEMM block.

    Returns
    -------
    index : (N, 2) int64
        Nearest and second nearest train rows; -1 where ``M < 2``.
    dist2 : (N, 2) float32
        Their squared distances; ``inf`` where absent.

    Notes
    -----
    One GEMM per block computes ``|t|² − 2 q·t`` directly, by augmenting the query with a column of
    ones and the train matrix with ``|t|²`` (``[q, 1] · [−2t, |t|²]ᵀ``); ``|q|²`` does not change the
    ranking, so it is added to the two selected values only. Elementwise passes over the block would cost
    more than the GEMM itself.
    """
    xp = get_array_module(query, train)
    q = xp.asarray(query, dtype=xp.float32)
    t = xp.asarray(train, dtype=xp.float32)
    if q.ndim != 2 or t.ndim != 2 or (q.shape[1] != t.shape[1] and q.shape[0] and t.shape[0]):
        raise ValueError(f"knn2: expected (N, D) and (M, D) descriptors, got {q.shape} and {t.shape}")
    if block < 1:
        raise ValueError(f"block: expected a positive integer, got {block}")
    n, m = q.shape[0], t.shape[0]
    index = xp.full((n, 2), -1, dtype=xp.int64)
    dist2 = xp.full((n, 2), xp.inf, dtype=xp.float32)
    if n == 0 or m == 0:
        return index, dist2
    if (query_laplacian is None) != (train_laplacian is None):
        raise ValueError("knn2: give Laplacian signs for both query and train, or for neither")
    q = _with_sign(q, query_laplacian, xp)
    t = _with_sign(t, train_laplacian, xp)
    t_aug_T = xp.ascontiguousarray(xp.concatenate([-2.0 * t, (t * t).sum(axis=1)[:, None]], axis=1).T)
    q_sq = (q * q).sum(axis=1)
    ones = xp.ones((min(block, n), 1), dtype=xp.float32)
    rows = xp.arange(min(block, n))
    for s in range(0, n, block):
        qb = q[s : s + block]
        k = qb.shape[0]
        d = xp.concatenate([qb, ones[:k]], axis=1) @ t_aug_T
        r = rows[:k]
        i1 = d.argmin(axis=1)
        index[s : s + k, 0] = i1
        dist2[s : s + k, 0] = d[r, i1]
        if m > 1:
            d[r, i1] = xp.inf
            i2 = d.argmin(axis=1)
            index[s : s + k, 1] = i2
            dist2[s : s + k, 1] = d[r, i2]
    dist2 += q_sq[:, None]
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
    if query.shape[0] == 0 or train.shape[0] == 0:
        return Matches.empty()
    idx, d2 = knn2(query, train, query_laplacian, train_laplacian, block)
    d1 = xp.sqrt(d2[:, 0])
    dn = xp.sqrt(d2[:, 1])
    with np.errstate(divide="ignore", invalid="ignore"):
        # Two train rows at distance 0 (duplicates) are ambiguous: ratio 1, rejected as Lowe's test would.
        r = xp.where(dn > 0, d1 / dn, 1.0)
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
