"""Brute-force nearest neighbours as a blocked float32 GEMM with a fused top-2.

Squared distances come from ``|a|² + |b|² − 2ab`` one block of query rows at a time, so memory stays
``block × M`` and the full ``N × M`` matrix never exists. The code takes its array module from the
inputs (NumPy here, CuPy on a GPU), so the same function runs resident on the device. It sits at the bottom
of the package's layers, so that matching, the model database and the rating all search with it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from objrec._threads import on_worker_thread, one_blas_thread, usable_cores, worker_pool
from objrec.backend import get_array_module

__all__ = ["knn2", "Matches", "ratio_match", "BruteForceIndex", "SpillIndex", "Fginn", "fginn_competitor"]

#: Query rows per GEMM block: 2048 x M float32 keeps a block under ~64 MB for M = 8k; block sizes from 256
#: up perform alike, the products being bound by writing their output.
DEFAULT_BLOCK = 2048
#: Query rows per product when the CPU rows are split over the cores (a 128 x 3k block is 1.5 MB, in cache).
CPU_BLOCK = 128
#: Opposite Laplacian signs never pair; distances of L2-normalised descriptors are below this bound.
_LAPLACIAN_WEIGHT = 2.0
#: Half-width of the overlap of a :class:`SpillIndex`'s two leaves, as a share of the median train descriptor
#: norm (41 for OpenCV's SIFT, whose descriptors have norm ~512). Without an overlap, a query near the split
#: loses its true neighbour on the other side; ``tests/matching/test_spill.py`` checks what this margin keeps
#: on the Oxford pairs against exact matching.
SPILL_MARGIN = 0.08
#: Neighbours searched per query for FGINN: the competitor must be found among them (see :class:`Fginn`).
FGINN_K = 8
#: Train keypoints of one object closer than this (model pixels) to the nearest neighbour's are taken as the
#: same physical point, seen in another synthesised view (MODS's spatial threshold).
FGINN_RADIUS = 10.0


class BruteForceIndex:
    """A train set prepared for repeated exact 2-NN queries (the model database's descriptors).

    Parameters
    ----------
    train : (M, D) float32, NumPy or CuPy
    laplacian : (M,) int, optional
        SURF's Laplacian signs (Bay et al. 2008, sec. 4.1): a query is ranked against the train rows of its
        own sign only (one index per sign); a query whose sign no train row has gets no neighbour.
    block : int
        Query rows per GEMM block.

    Notes
    -----
    One GEMM per block computes ``|t|² − 2 q·t`` directly, by augmenting the query with a column of
    ones and the train matrix with ``|t|²`` (``[q, 1] · [−2t, |t|²]ᵀ``); ``|q|²`` does not change the
    ranking, so it is added to the two selected values only. Elementwise passes over the block would cost
    more than the GEMM itself. The block GEMM is bound by writing its output, so reducing the descriptor
    dimension (PCA with exact re-ranking) does not make it faster.
    """

    def __init__(self, train: Any, laplacian: Any | None = None, block: int = DEFAULT_BLOCK) -> None:
        xp = get_array_module(train)
        t = xp.asarray(train, dtype=xp.float32)
        if t.ndim != 2:
            raise ValueError(f"train: expected (M, D) descriptors, got shape {t.shape}")
        if block < 1:
            raise ValueError(f"block: expected a positive integer, got {block}")
        self.xp = xp
        self.block = block
        self.m, self.dim = t.shape
        self.has_sign = laplacian is not None
        self.laplacian = None if laplacian is None else xp.asarray(laplacian)
        self.train = t
        # With signs, one unsigned index per sign: a query is ranked against its own sign's rows only (SURF's
        # rule, exactly), about half the products.
        self._groups: list[tuple[int, Any, BruteForceIndex]] = []
        if laplacian is not None:
            lap = self.laplacian
            for sign in (-1, 0, 1):
                rows = xp.nonzero(lap == sign)[0]
                if int(rows.shape[0]):
                    self._groups.append((sign, rows, BruteForceIndex(t[rows], None, block)))
            self._t_aug_T = None
        else:
            self._t_aug_T = xp.ascontiguousarray(xp.concatenate([-2.0 * t, (t * t).sum(axis=1)[:, None]], axis=1).T)

    def __len__(self) -> int:
        return int(self.m)

    def knn2(self, query: Any, laplacian: Any | None = None) -> tuple[Any, Any]:
        """``(index, dist2)`` of the two nearest train rows per query row (see :func:`knn2`).
        ``laplacian``: the query rows' Laplacian signs (SURF), given exactly when the index has the train rows' signs:
        rows of opposite signs are never neighbours."""
        return self.knn(query, 2, laplacian)

    def _query(self, query: Any, laplacian: Any | None) -> Any:
        """``query`` as float32 ``(N, D)`` rows, checked against the train rows and the sign rule."""
        q = self.xp.asarray(query, dtype=self.xp.float32)
        if q.ndim != 2 or (q.shape[0] and self.m and q.shape[1] != self.dim):
            raise ValueError(f"knn2: expected (N, {self.dim}) query descriptors, got shape {q.shape}")
        if (laplacian is None) == self.has_sign:
            raise ValueError("knn2: give Laplacian signs for both query and train, or for neither")
        return q

    def _augmented(self, q: Any) -> Any:
        """The query rows with a column of ones, ``[q, 1]``, the left factor of the distance GEMM."""
        qa = self.xp.empty((q.shape[0], self.dim + 1), dtype=self.xp.float32)
        qa[:, : self.dim] = q
        qa[:, self.dim] = 1.0
        return qa

    def distances(self, query: Any) -> Any:
        """``(N, M)`` float32 squared distances of every query row to every train row.

        The same GEMM the k-NN search ranks with (``|t|² − 2 q·t``, plus ``|q|²``), for algorithms that need
        the whole matrix rather than the nearest rows (a one-to-one assignment). Memory is ``N × M``; an
        index with Laplacian signs has no single matrix and raises ``ValueError``.
        """
        if self.has_sign:
            raise ValueError("distances: an index with Laplacian signs ranks each sign apart; build it without signs")
        q = self._query(query, None)
        xp = self.xp
        d = xp.zeros((q.shape[0], self.m), dtype=xp.float32)
        if q.shape[0] and self.m:
            xp.matmul(self._augmented(q), self._t_aug_T, out=d)
            d += (q * q).sum(axis=1)[:, None]
        return xp.maximum(d, 0, out=d)

    def knn(self, query: Any, k: int, laplacian: Any | None = None) -> tuple[Any, Any]:
        """``(index, dist2)`` of the ``k`` nearest train rows per query row, nearest first; ``(N, k)``
        arrays with -1 and ``inf`` where fewer than ``k`` rows qualify.
        ``query``: (N, D) descriptors; ``laplacian``: their Laplacian signs, as for :meth:`knn2`."""
        xp = self.xp
        if k < 1:
            raise ValueError(f"k: expected a positive integer, got {k}")
        q = self._query(query, laplacian)
        n, m = q.shape[0], self.m
        index = xp.full((n, k), -1, dtype=xp.int64)
        dist2 = xp.full((n, k), xp.inf, dtype=xp.float32)
        if n == 0 or m == 0:
            return index, dist2
        if self.has_sign:
            lap = xp.asarray(laplacian)
            if lap.shape != (n,):
                raise ValueError(f"knn2: expected ({n},) query Laplacian signs, got shape {lap.shape}")
            for sign, rows, sub in self._groups:
                _search_part(sub, rows, q, lap == sign, index, dist2)
            return index, dist2
        k = min(k, m)
        # The augmented query [q, 1] once, and one output block per worker reused: a fresh block per
        # iteration costs page faults on every write.
        qa = self._augmented(q)
        # A search already running on a worker thread (enrolment, a database's ratings) keeps to that thread:
        # its share of the pool would wait behind the caller's own tasks.
        workers = usable_cores() if xp is np and not on_worker_thread() else 1
        if workers > 1 and n >= 4 * CPU_BLOCK * workers:
            # CPU: each core runs one-thread products on its share of the rows, blocks small enough to stay in
            # its cache for the top-2 passes (two BLAS threads on large blocks spend longer in those passes).
            bs = min(self.block, CPU_BLOCK)
            cuts = [n * i // workers for i in range(workers + 1)]
            with one_blas_thread():
                jobs = [
                    worker_pool().submit(self._rows, q, qa, cuts[i], cuts[i + 1], bs, k, index, dist2)
                    for i in range(workers)
                ]
                for j in jobs:
                    j.result()
        else:
            self._rows(q, qa, 0, n, min(self.block, n), k, index, dist2)
        xp.maximum(dist2, 0, out=dist2)
        return index, dist2

    def _rows(self, q: Any, qa: Any, lo: int, hi: int, bs: int, k: int, index: Any, dist2: Any) -> None:
        """Top-``k`` of query rows ``[lo, hi)`` into ``index`` and ``dist2``, ``bs`` rows per product."""
        xp = self.xp
        buf = xp.empty((bs, self.m), dtype=xp.float32)
        for s in range(lo, hi, bs):
            nb = min(bs, hi - s)
            d = buf[:nb]
            xp.matmul(qa[s : s + nb], self._t_aug_T, out=d)
            cand, val = _topk(d, k, xp)
            index[s : s + nb, :k] = cand
            qb = q[s : s + nb]
            dist2[s : s + nb, :k] = val + (qb * qb).sum(axis=1)[:, None]


class SpillIndex:
    """Approximate 2-NN: a one-level spill tree whose two leaves are exact :class:`BruteForceIndex` es.

    The train rows are split at the median of their projection on their first principal axis; the leaves
    overlap by ``margin`` on either side of the split (a spill tree, Liu, Moore, Gray and Yang 2004), and
    each query is ranked against the one leaf on its side only. A query's true neighbour is missed only when
    the two lie on opposite sides with their projections more than ``margin`` apart, which true matches
    rarely are: the projection of a match's difference on one axis is a small part of its length. With
    little overlap each query meets about half the train rows, so half the products and top-2 passes.

    Parameters
    ----------
    train : (M, D) float32, NumPy or CuPy
    margin : float, optional
        Half-width of the leaves' overlap in descriptor units; default ``SPILL_MARGIN`` times the median
        train row norm.
    block : int
        Query rows per GEMM block.

    References
    ----------
    T. Liu, A. W. Moore, A. Gray and K. Yang, "An investigation of practical approximate nearest neighbor
    algorithms", NIPS 2004.
    """

    has_sign = False
    laplacian = None

    def __init__(self, train: Any, margin: float | None = None, block: int = DEFAULT_BLOCK) -> None:
        xp = get_array_module(train)
        t = xp.asarray(train, dtype=xp.float32)
        if t.ndim != 2:
            raise ValueError(f"train: expected (M, D) descriptors, got shape {t.shape}")
        self.xp = xp
        self.train = t
        self.m, self.dim = t.shape
        if self.m < 2:
            raise ValueError(f"train: a spill tree needs at least 2 rows, got {self.m}")
        mean = t.mean(axis=0)
        _, _, vt = xp.linalg.svd(t - mean, full_matrices=False)
        self.axis = xp.ascontiguousarray(vt[0].astype(xp.float32))
        p = t @ self.axis
        self.split = float(xp.median(p))
        if margin is None:
            margin = SPILL_MARGIN * float(xp.median(xp.sqrt((t * t).sum(axis=1))))
        if margin < 0:
            raise ValueError(f"margin: expected a value >= 0, got {margin}")
        self.margin = float(margin)
        p = p - self.split
        self._leaves = []
        for rows in (xp.nonzero(p < self.margin)[0], xp.nonzero(p >= -self.margin)[0]):
            self._leaves.append((rows, BruteForceIndex(t[rows], None, block)))

    def __len__(self) -> int:
        return int(self.m)

    @property
    def leaf_sizes(self) -> tuple[int, int]:
        """Train rows in the low and the high leaf (their sum exceeds ``M`` by the overlap)."""
        (low, _), (high, _) = self._leaves
        return int(low.shape[0]), int(high.shape[0])

    def knn2(self, query: Any, laplacian: Any | None = None) -> tuple[Any, Any]:
        """``(index, dist2)`` of the two nearest train rows of the query's leaf (see :func:`knn2`).
        ``query``: (N, D) descriptors; ``laplacian`` must be None (a spill tree holds no signs)."""
        return self.knn(query, 2, laplacian)

    def knn(self, query: Any, k: int, laplacian: Any | None = None) -> tuple[Any, Any]:
        """``(index, dist2)`` of the ``k`` nearest train rows of the query's leaf, nearest first.
        ``query``: (N, D) descriptors; ``laplacian`` must be None (a spill tree holds no signs)."""
        xp = self.xp
        if laplacian is not None:
            raise ValueError("knn2: a SpillIndex has no Laplacian signs; use BruteForceIndex for SURF signs")
        q = xp.asarray(query, dtype=xp.float32)
        if q.ndim != 2 or (q.shape[0] and q.shape[1] != self.dim):
            raise ValueError(f"knn2: expected (N, {self.dim}) query descriptors, got shape {q.shape}")
        n = q.shape[0]
        index = xp.full((n, k), -1, dtype=xp.int64)
        dist2 = xp.full((n, k), xp.inf, dtype=xp.float32)
        if n == 0:
            return index, dist2
        # One BLAS thread on the CPU: a two-thread product here leaves OpenBLAS's threads spinning through
        # the leaves' per-core products, which then run at about half speed.
        with one_blas_thread() if xp is np else contextlib.nullcontext():
            high = (q @ self.axis) >= self.split
            for side, (rows, leaf) in zip((~high, high), self._leaves, strict=True):
                _search_part(leaf, rows, q, side, index, dist2)
        return index, dist2


def _search_part(part: BruteForceIndex, rows: Any, q: Any, which: Any, index: Any, dist2: Any) -> None:
    """k-NN (k = ``index.shape[1]``) of the queries where ``which`` holds among ``part`` (train rows
    ``rows``), into ``index``/``dist2``."""
    xp = part.xp
    sel = xp.nonzero(which)[0]
    if int(sel.shape[0]) == 0:
        return
    si, sd = part.knn(q[sel], index.shape[1])
    index[sel] = xp.where(si >= 0, rows[xp.maximum(si, 0)], -1)
    dist2[sel] = sd


#: :func:`_topk` takes ``k`` passes of ``argmin`` up to this ``k``, one ``argpartition`` pass beyond
#: (``bench/bench_topk.py`` times both).
ARGMIN_MAX_K = 16


def _topk(d: Any, k: int, xp: Any) -> tuple[Any, Any]:
    """Indices and values of the ``k`` smallest entries per row, ascending; ``d`` is overwritten.

    Repeated ``argmin`` (SIMD-vectorised in NumPy, a tree reduction in CuPy) beats ``argpartition`` and a
    Numba insertion pass for k = 2 by an order of magnitude, and stays ahead of ``argpartition`` (an
    introselect per row, several times slower per element than a vectorised minimum) up to about
    :data:`ARGMIN_MAX_K` passes at the row lengths of a shortlist's descriptors; for larger ``k`` one
    ``argpartition`` pass and a sort of the ``k`` selected values cost less.
    """
    if k > ARGMIN_MAX_K and k < d.shape[1]:
        return _topk_partition(d, k, xp)
    return _topk_argmin(d, k, xp)


def _topk_partition(d: Any, k: int, xp: Any) -> tuple[Any, Any]:
    """:func:`_topk` by one ``argpartition`` pass and a sort of the ``k`` selected values (``k < d.shape[1]``)."""
    part = xp.argpartition(d, k - 1, axis=1)[:, :k]
    vals = xp.take_along_axis(d, part, axis=1)
    order = xp.argsort(vals, axis=1)
    return xp.take_along_axis(part, order, axis=1).astype(xp.int64), xp.take_along_axis(vals, order, axis=1)


def _topk_argmin(d: Any, k: int, xp: Any) -> tuple[Any, Any]:
    """:func:`_topk` by ``k`` passes of ``argmin``, each masking the minimum it found; ``d`` is overwritten."""
    n = d.shape[0]
    rows = xp.arange(n)
    idx = xp.empty((n, k), dtype=xp.int64)
    val = xp.empty((n, k), dtype=xp.float32)
    for j in range(k):
        i = d.argmin(axis=1)
        idx[:, j] = i
        val[:, j] = d[rows, i]
        if j + 1 < k:
            d[rows, i] = xp.inf
    return idx, val


def knn2(
    query: Any,
    train: Any,
    query_laplacian: Any | None = None,
    train_laplacian: Any | None = None,
    block: int = DEFAULT_BLOCK,
) -> tuple[Any, Any]:
    """Two nearest ``train`` rows for each ``query`` row (squared L2 distance), exactly.

    Parameters
    ----------
    query : (N, D) float32
    train : (M, D) float32
    query_laplacian, train_laplacian : (N,), (M,) int, optional
        SURF's Laplacian signs (see :class:`BruteForceIndex`).
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
    if (query_laplacian is None) != (train_laplacian is None):
        raise ValueError("knn2: give Laplacian signs for both query and train, or for neither")
    return BruteForceIndex(t, train_laplacian, block=block).knn2(q, query_laplacian)


@dataclass(frozen=True)
class Matches:
    """Putative correspondences: ``query_idx[k]`` matched ``train_idx[k]`` with ``distance[k]``.

    Attributes
    ----------
    query_idx, train_idx : np.ndarray
        (K,) int64 rows of the query and train descriptors matched.
    distance : np.ndarray
        (K,) float32 descriptor distance of each match.
    ratio : np.ndarray
        (K,) float32 its distance over its competitor's (the ratio test's figure).
    """

    query_idx: np.ndarray
    train_idx: np.ndarray
    distance: np.ndarray
    ratio: np.ndarray

    def __len__(self) -> int:
        return int(self.query_idx.shape[0])

    @classmethod
    def empty(cls) -> Matches:
        return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32), np.zeros(0, np.float32))


@dataclass(frozen=True)
class Fginn:
    """Where the train rows' keypoints lie, for the ratio test against the first geometrically inconsistent
    nearest neighbour (FGINN, Mishkin, Matas and Perdoch 2015).

    A model enrolled with synthesised views holds several near-identical descriptors of one physical point
    (found in several views); Lowe's second neighbour is then usually a copy of the first and the ratio test
    rejects the match. FGINN's competitor is the nearest neighbour after the first that belongs to another
    object or lies more than ``radius`` model pixels from the first one's keypoint; when all ``k - 1``
    further neighbours are consistent with the first, the k-th distance stands in for it (a lower bound on
    the competitor's distance, so the test errs towards rejecting).

    Attributes
    ----------
    xy : (M, 2) float32
        Model position of each train row's keypoint (same array module as the index).
    owner : (M,) int
        Object of each train row.
    radius : float
        Model pixels within which a neighbour of the same object is the same point.
    k : int
        Neighbours searched per query (at least 2).
    group : (M,) int, optional
        The object of each train row when objects have several enrolled views (``owner`` then numbers the
        views): a neighbour in another view of the first one's object may be the same physical point seen
        from elsewhere, whose position cannot be compared, so it is taken as consistent (never a competitor).
    """

    xy: Any
    owner: Any
    radius: float = FGINN_RADIUS
    k: int = FGINN_K
    group: Any = None

    def __post_init__(self) -> None:
        if int(self.k) < 2:
            raise ValueError(f"k: expected an integer >= 2, got {self.k}")
        if not self.radius >= 0:
            raise ValueError(f"radius: expected a distance >= 0, got {self.radius}")
        if self.xy.shape[0] != self.owner.shape[0] or self.xy.shape[1:] != (2,):
            raise ValueError(f"xy, owner: expected (M, 2) and (M,), got {self.xy.shape} and {self.owner.shape}")

    def competitor(self, index: Any, dist2: Any) -> Any:
        """Squared distance of each query's FGINN competitor from its sorted k-NN ``(index, dist2)``.
        ``index``, ``dist2``: (N, k) the neighbours' train rows and squared distances, nearest first."""
        xp = get_array_module(dist2)
        first = xp.maximum(index[:, :1], 0)
        rest = xp.maximum(index[:, 1:], 0)
        near = ((self.xy[rest] - self.xy[first]) ** 2).sum(axis=2) <= self.radius * self.radius
        same_view = self.owner[rest] == self.owner[first]
        consistent = near & same_view
        if self.group is not None:
            consistent |= (self.group[rest] == self.group[first]) & ~same_view
        consistent &= index[:, 1:] >= 0
        comp = fginn_competitor(dist2[:, 1:], consistent)
        return xp.where(xp.isinf(comp), dist2[:, -1], comp)

    def other_views(self, index: Any, dist2: Any) -> tuple[Any, Any, Any]:
        """For objects with several enrolled views (``group`` given): each query's nearest neighbour in every other
        view of its nearest neighbour's object, among the sorted k-NN ``(index, dist2)``, with its ratio to the
        nearest neighbour of another object (the k-th distance where none is among the k, as :meth:`competitor`).

        A point seen in two enrolled views has a descriptor in each; the nearest neighbour lies in one of them,
        and without these matches the other view's candidate lacks the point, so the matches of an object seen
        between two enrolled views are split between them and neither may reach verification's minimum.

        Returns ``(rows, cols, ratio)``: the query rows, the column of ``index`` each match is in (1 or more),
        and its distance ratio; only the first column of each view other than the nearest neighbour's.
        ``index``, ``dist2``: (N, k) the neighbours' train rows and squared distances, nearest first."""
        xp = get_array_module(dist2)
        valid = index >= 0
        safe = xp.maximum(index, 0)
        group, owner = self.group[safe], self.owner[safe]
        same = (group == group[:, :1]) & valid
        other = valid & ~same
        comp = xp.where(other, dist2, xp.inf).min(axis=1)
        comp = xp.where(xp.isinf(comp), dist2[:, -1], comp)
        k = index.shape[1]
        # Column j is a view's first: of the first's object, not the first's view, and no column before it of
        # the same view.
        new = same & (owner != owner[:, :1])
        for j in range(2, k):
            seen = (same[:, 1:j] & (owner[:, 1:j] == owner[:, j : j + 1])).any(axis=1)
            new[:, j] &= ~seen
        new[:, 0] = False
        rows, cols = xp.nonzero(new)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = xp.sqrt(dist2[rows, cols] / comp[rows])
        r = xp.where(comp[rows] > 0, r, 1.0).astype(xp.float32)
        return rows, cols, r


def fginn_competitor(dist2: Any, consistent: Any) -> Any:
    """Per row, the smallest ``dist2`` among the entries that are not ``consistent`` with the nearest
    neighbour (``inf`` where all are): the first geometrically inconsistent neighbour's distance."""
    xp = get_array_module(dist2)
    return xp.where(consistent, xp.inf, dist2).min(axis=1)


def ratio_match(
    query: Any,
    train: Any,
    ratio: float = 0.75,
    mutual: bool = False,
    query_laplacian: Any | None = None,
    train_laplacian: Any | None = None,
    block: int = DEFAULT_BLOCK,
    fginn: Fginn | None = None,
) -> Matches:
    """Lowe's ratio test on 2-NN (distance ratio, not squared), with an optional mutual check.

    With ``fginn`` (:class:`Fginn`, describing the train rows) the competitor of the nearest neighbour is the
    first geometrically inconsistent one among ``fginn.k`` neighbours instead of the second; with its ``group``
    (objects of several views) and without ``mutual``, a kept query is also matched to its nearest neighbour in
    each other view of the same object that passes the ratio test against the nearest other object
    (:meth:`Fginn.other_views`), so one query may have a match in each view. Only the surviving matches come back
    to the host.

    ``query``: (N, D) descriptors, NumPy or CuPy; ``train``: (M, D) descriptors or a :class:`BruteForceIndex` or
    :class:`SpillIndex` of them; a match is kept below ``ratio`` times its competitor's distance, with ``mutual``
    only when it is also the train row's nearest query row;
    ``query_laplacian``, ``train_laplacian``: the rows' Laplacian signs (SURF), both or neither (opposite signs
    never match); ``block``: query rows per GEMM block.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio: expected a value in (0, 1], got {ratio}")
    index = train if isinstance(train, (BruteForceIndex, SpillIndex)) else None
    if index is None:
        xp = get_array_module(query, train)
        if query.shape[0] == 0 or train.shape[0] == 0:
            return Matches.empty()
        index = BruteForceIndex(xp.asarray(train, dtype=xp.float32), train_laplacian, block=block)
    xp = index.xp
    if query.shape[0] == 0 or len(index) == 0:
        return Matches.empty()
    if fginn is None:
        idx, d2 = index.knn2(query, query_laplacian)
        dn = xp.sqrt(d2[:, 1])
    else:
        idx, d2 = index.knn(query, int(fginn.k), query_laplacian)
        dn = xp.sqrt(fginn.competitor(idx, d2))
    d1 = xp.sqrt(d2[:, 0])
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
        back, _ = knn2(index.train[:, : index.dim], query, index.laplacian, query_laplacian, block)
        qi = xp.arange(idx.shape[0])
        keep &= back[idx[:, 0], 0] == qi
    sel = xp.nonzero(keep)[0]
    out = Matches(sel, idx[sel, 0], d1[sel], r[sel])
    if fginn is not None and fginn.group is not None and not mutual:
        # A query kept in its nearest neighbour's view is matched in its object's other views too.
        rows, cols, rv = fginn.other_views(idx, d2)
        extra = keep[rows] & (rv < ratio)
        if query_laplacian is not None:
            extra &= d2[rows, cols] < (2 * _LAPLACIAN_WEIGHT) ** 2
        rows, cols, rv = rows[extra], cols[extra], rv[extra]
        if len(rows):
            out = Matches(
                xp.concatenate([out.query_idx, rows]),
                xp.concatenate([out.train_idx, idx[rows, cols]]),
                xp.concatenate([out.distance, xp.sqrt(d2[rows, cols])]),
                xp.concatenate([out.ratio, rv]),
            )
    if xp is not np:
        out = Matches(*(xp.asnumpy(a) for a in (out.query_idx, out.train_idx, out.distance, out.ratio)))
    return out
