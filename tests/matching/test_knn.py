"""Brute-force 2-NN, Lowe's ratio test and the mutual check against independent references.

References: float64 distances from ``scipy.spatial.distance.cdist`` and plain Python loops, FAISS's own exact
flat index (``faiss.IndexFlatL2``), and OpenCV's ``BFMatcher.knnMatch(k=2)`` on real SIFT descriptors.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from scipy.spatial.distance import cdist

from objrec.knn import ARGMIN_MAX_K, BruteForceIndex, Matches, knn2, ratio_match


def _ref_knn2(query: np.ndarray, train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two nearest neighbours by a full float64 distance matrix (the reference)."""
    n, m = len(query), len(train)
    index = np.full((n, 2), -1, np.int64)
    dist2 = np.full((n, 2), np.inf)
    if n == 0 or m == 0:
        return index, dist2
    d2 = cdist(query.astype(np.float64), train.astype(np.float64), "sqeuclidean")
    order = np.argsort(d2, axis=1, kind="stable")[:, :2]
    index[:, : order.shape[1]] = order
    dist2[:, : order.shape[1]] = np.take_along_axis(d2, order, axis=1)
    return index, dist2


def _ref_ratio(query: np.ndarray, train: np.ndarray, ratio: float) -> dict[int, tuple[int, float]]:
    """Lowe's ratio test as find_obj.py writes it: keep ``d1 < ratio * d2`` (distances, not squared).

    A lone train descriptor has no second neighbour; the match is kept (objrec's documented rule).
    Returns ``{query index: (train index, d1 / d2)}``.
    """
    out = {}
    for i, q in enumerate(query.astype(np.float64)):
        d = np.sqrt(((train.astype(np.float64) - q) ** 2).sum(axis=1))
        if len(d) == 0:
            continue
        order = np.argsort(d)
        if len(d) == 1:
            out[i] = (int(order[0]), 0.0)
        elif d[order[0]] < ratio * d[order[1]]:
            out[i] = (int(order[0]), float(d[order[0]] / d[order[1]]))
    return out


def _structured(rng: np.random.Generator, n: int, m: int, dim: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """Train descriptors and queries of which about half are noisy copies of train rows (so the ratio
    test has true matches to keep), the others unrelated. Continuous data: no exact ties."""
    train = rng.random((m, dim), dtype=np.float32)
    query = rng.random((n, dim), dtype=np.float32)
    if m:
        k = n // 2
        src = rng.integers(0, m, k)
        query[:k] = train[src] + rng.normal(0, rng.uniform(0.01, 0.25, (k, 1)), (k, dim)).astype(np.float32)
    return query, train


@pytest.mark.parametrize(
    "n, m",
    [(0, 0), (0, 5), (5, 0), (1, 1), (1, 2), (2, 1), (2, 2), (37, 1), (37, 2), (100, 53), (300, 257)],
)
@pytest.mark.parametrize("block", [1, 3, 7, 64, 2048])
def test_knn2_matches_brute_force(n, m, block):
    rng = np.random.default_rng(1000 * n + m + block)
    query, train = _structured(rng, n, m)
    idx, d2 = knn2(query, train, block=block)
    ref_idx, ref_d2 = _ref_knn2(query, train)
    assert idx.shape == (n, 2) and idx.dtype == np.int64
    assert d2.shape == (n, 2) and d2.dtype == np.float32
    np.testing.assert_array_equal(idx, ref_idx)
    finite = np.isfinite(ref_d2)
    np.testing.assert_array_equal(np.isfinite(d2), finite)
    np.testing.assert_allclose(d2[finite], ref_d2[finite], rtol=1e-4, atol=1e-4)


def _faiss_flat(query: np.ndarray, train: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(index, dist2)`` of the ``k`` nearest train rows from FAISS's exact flat index (-1 where absent)."""
    faiss = pytest.importorskip("faiss")
    flat = faiss.IndexFlatL2(train.shape[1])
    flat.add(np.ascontiguousarray(train, np.float32))
    dist2, index = flat.search(np.ascontiguousarray(query, np.float32), k)
    return index.astype(np.int64), dist2


@pytest.mark.parametrize(
    "n, m, k", [(1, 1, 2), (40, 2, 2), (300, 257, 2), (300, 257, 5), (200, 90, 8), (200, 300, ARGMIN_MAX_K + 4)]
)
def test_knn_equals_faiss_flat_index(n, m, k):
    """Neighbours and squared distances of the exact k-NN equal FAISS's flat index (continuous data: no ties)."""
    rng = np.random.default_rng(17 * n + m + k)
    query, train = _structured(rng, n, m, dim=64)
    idx, d2 = knn2(query, train) if k == 2 else BruteForceIndex(train).knn(query, k)
    ref_idx, ref_d2 = _faiss_flat(query, train, k)
    np.testing.assert_array_equal(idx, ref_idx)
    found = ref_idx >= 0
    np.testing.assert_array_equal(np.isfinite(d2), found)
    np.testing.assert_allclose(d2[found], ref_d2[found], rtol=1e-4, atol=1e-4)


def test_knn2_equals_faiss_flat_index_on_real_sift(shared_data):
    """On real SIFT descriptors (integer components, ties possible) the nearest neighbour agrees with FAISS's
    flat index wherever the two nearest are not within rounding of each other."""
    d1 = _sift(shared_data / "opencv_samples" / "box.png")
    d2 = _sift(shared_data / "opencv_samples" / "box_in_scene.png")
    idx, dist2 = knn2(d1, d2)
    ref_idx, ref_d2 = _faiss_flat(d1, d2, 3)
    np.testing.assert_allclose(dist2, ref_d2[:, :2], rtol=1e-4, atol=0.5)
    clear = (ref_d2[:, 1] - ref_d2[:, 0] > 1.0) & (ref_d2[:, 2] - ref_d2[:, 1] > 1.0)
    assert clear.mean() > 0.95
    np.testing.assert_array_equal(idx[clear], ref_idx[clear, :2])


def test_distances_are_the_matrix_the_knn_ranks_by():
    """The full matrix of :meth:`BruteForceIndex.distances` equals float64 distances, and its row minima are
    the exact nearest neighbours :meth:`BruteForceIndex.knn` returns, with the same values."""
    rng = np.random.default_rng(5)
    query, train = _structured(rng, 150, 120, dim=32)
    index = BruteForceIndex(train)
    D = index.distances(query)
    assert D.shape == (150, 120) and D.dtype == np.float32
    np.testing.assert_allclose(D, cdist(query.astype(np.float64), train.astype(np.float64), "sqeuclidean"), atol=1e-4)
    idx, d2 = index.knn(query, 1)
    np.testing.assert_array_equal(idx[:, 0], D.argmin(axis=1))
    np.testing.assert_array_equal(d2[:, 0], D.min(axis=1))
    assert index.distances(query[:0]).shape == (0, 120)
    with pytest.raises(ValueError, match="Laplacian"):
        BruteForceIndex(train, np.ones(120, np.int8)).distances(query)


def test_knn2_accepts_float64_and_rejects_dimension_mismatch():
    rng = np.random.default_rng(3)
    query, train = rng.random((20, 16)), rng.random((30, 16))
    idx, _ = knn2(query, train)
    np.testing.assert_array_equal(idx, _ref_knn2(query, train)[0])
    with pytest.raises(ValueError, match="descriptors"):
        knn2(rng.random((4, 16), dtype=np.float32), rng.random((4, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="Laplacian"):
        knn2(query, train, query_laplacian=np.ones(20, np.int8))


def _unit(a: np.ndarray) -> np.ndarray:
    return (a / np.linalg.norm(a, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("block", [5, 2048])
def test_knn2_laplacian_sign_pruning_equals_per_sign_brute_force(block):
    # SURF descriptors are unit vectors; the sign weight relies on that.
    rng = np.random.default_rng(7)
    query, train = _structured(rng, 120, 90, dim=64)
    query, train = _unit(query), _unit(train)
    qlap = rng.choice(np.array([-1, 1], np.int8), len(query))
    tlap = rng.choice(np.array([-1, 1], np.int8), len(train))
    idx, d2 = knn2(query, train, qlap, tlap, block=block)
    for sign in (-1, 1):
        qs, ts = np.nonzero(qlap == sign)[0], np.nonzero(tlap == sign)[0]
        assert len(ts) >= 2
        ref_idx, ref_d2 = _ref_knn2(query[qs], train[ts])
        # Different-sign pairs are never chosen while two same-sign rows exist.
        np.testing.assert_array_equal(tlap[idx[qs]], sign)
        np.testing.assert_array_equal(idx[qs], ts[ref_idx])
        np.testing.assert_allclose(d2[qs], ref_d2, rtol=1e-4, atol=1e-5)


def test_ratio_match_laplacian_never_pairs_opposite_signs():
    rng = np.random.default_rng(8)
    query, train = _structured(rng, 80, 60, dim=64)
    query, train = _unit(query), _unit(train)
    qlap = rng.choice(np.array([-1, 1], np.int8), len(query))
    tlap = rng.choice(np.array([-1, 1], np.int8), len(train))
    m = ratio_match(query, train, 0.8, query_laplacian=qlap, train_laplacian=tlap)
    assert len(m) > 10
    np.testing.assert_array_equal(qlap[m.query_idx], tlap[m.train_idx])
    # The same matches as running the ratio test separately within each sign.
    want = {}
    for sign in (-1, 1):
        qs, ts = np.nonzero(qlap == sign)[0], np.nonzero(tlap == sign)[0]
        for qi, (tj, _) in _ref_ratio(query[qs], train[ts], 0.8).items():
            want[int(qs[qi])] = int(ts[tj])
    assert dict(zip(m.query_idx.tolist(), m.train_idx.tolist(), strict=True)) == want


def test_ratio_match_laplacian_query_without_same_sign_partner_is_dropped():
    rng = np.random.default_rng(9)
    train = _unit(rng.random((6, 64)))
    # Query 0 is a near copy of train row 2 but of the opposite sign; every train row is +1.
    query = _unit(np.stack([train[2] + 1e-3, train[4] + 1e-3]))
    m = ratio_match(query, train, 0.75, query_laplacian=np.int8([-1, 1]), train_laplacian=np.ones(6, np.int8))
    assert m.query_idx.tolist() == [1] and m.train_idx.tolist() == [4]


@pytest.mark.parametrize("ratio", [0.6, 0.75, 0.9])
@pytest.mark.parametrize("n, m", [(1, 1), (3, 1), (1, 2), (150, 2), (150, 120)])
def test_ratio_match_equals_lowe_loop(ratio, n, m):
    rng = np.random.default_rng(int(ratio * 100) + 7 * n + m)
    query, train = _structured(rng, n, m)
    got = ratio_match(query, train, ratio, block=16)
    ref = _ref_ratio(query, train, ratio)
    # float32 vs float64 can only disagree right at the threshold: leave such queries out.
    near = set()
    if m >= 2:
        rd = np.sqrt(_ref_knn2(query, train)[1])
        near = set(np.nonzero(np.abs(rd[:, 0] / rd[:, 1] - ratio) < 1e-4)[0].tolist())
    got_map = {q: t for q, t in zip(got.query_idx.tolist(), got.train_idx.tolist(), strict=True) if q not in near}
    ref_map = {q: t for q, (t, _) in ref.items() if q not in near}
    assert got_map == ref_map
    if n >= 100:
        assert len(ref_map) > 20  # the comparison is not vacuous
    # Reported distance and ratio agree with the reference.
    for k, q in enumerate(got.query_idx.tolist()):
        if q in ref:
            d = np.linalg.norm(query[q].astype(np.float64) - train[ref[q][0]])
            assert got.distance[k] == pytest.approx(d, rel=1e-4, abs=1e-4)
            assert got.ratio[k] == pytest.approx(ref[q][1], rel=1e-3, abs=1e-4)
    assert np.all(got.ratio < ratio)


def test_ratio_match_empty_and_arguments():
    rng = np.random.default_rng(11)
    t = rng.random((5, 16), dtype=np.float32)
    for q, tr in ((np.zeros((0, 16), np.float32), t), (t, np.zeros((0, 16), np.float32))):
        out = ratio_match(q, tr)
        assert isinstance(out, Matches) and len(out) == 0
        assert out.query_idx.dtype == np.int64 and out.distance.dtype == np.float32
    for bad in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError, match="ratio"):
            ratio_match(t, t, bad)


def test_ratio_match_mutual_with_empty_train_returns_empty():
    q = np.random.default_rng(12).random((4, 16), dtype=np.float32)
    out = ratio_match(q, np.zeros((0, 16), np.float32), mutual=True)
    assert len(out) == 0


def test_ratio_match_rejects_exact_duplicate_train_rows():
    # Small integers: the GEMM is exact, both distances are exactly 0.
    rng = np.random.default_rng(13)
    train = rng.integers(0, 8, (5, 16)).astype(np.float32)
    train[1] = train[0]
    assert _ref_ratio(train[:1], train, 0.75) == {}
    assert len(ratio_match(train[:1], train, 0.75)) == 0


@pytest.mark.parametrize("n, m", [(1, 1), (2, 2), (60, 40), (40, 60)])
def test_ratio_match_mutual_equals_loop(n, m):
    rng = np.random.default_rng(n * 31 + m)
    query, train = _structured(rng, n, m)
    got = ratio_match(query, train, 0.9, mutual=True, block=8)
    d = cdist(query.astype(np.float64), train.astype(np.float64))
    want = {}
    for q, (t, _) in _ref_ratio(query, train, 0.9).items():
        if int(np.argmin(d[:, t])) == q:
            want[q] = t
    assert dict(zip(got.query_idx.tolist(), got.train_idx.tolist(), strict=True)) == want
    # Mutual is a subset of the plain ratio test.
    plain = ratio_match(query, train, 0.9)
    assert set(got.query_idx.tolist()) <= set(plain.query_idx.tolist())
    if n >= 40:
        assert 0 < len(got) < len(plain) or len(got) == len(plain) > 0


def _sift(path):
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    assert img is not None, path
    _, desc = cv2.SIFT_create().detectAndCompute(img, None)
    return desc.astype(np.float32)


def test_knn2_and_ratio_match_agree_with_opencv_bfmatcher(shared_data):
    d1 = _sift(shared_data / "opencv_samples" / "box.png")
    d2 = _sift(shared_data / "opencv_samples" / "box_in_scene.png")
    assert len(d1) > 300 and len(d2) > 300
    raw = cv2.BFMatcher(cv2.NORM_L2).knnMatch(d1, d2, k=2)
    cv_idx = np.array([[a.trainIdx, b.trainIdx] for a, b in raw])
    cv_dist = np.array([[a.distance, b.distance] for a, b in raw], np.float64)
    idx, dist2 = knn2(d1, d2, block=100)
    # Distances are defined even under ties; SIFT vectors are ~512 long, so allow float32 GEMM rounding.
    np.testing.assert_allclose(dist2, cv_dist**2, rtol=1e-4, atol=0.5)
    # Indices: equal wherever the neighbours are not (near) ties.
    ref_d2 = cdist(d1.astype(np.float64), d2.astype(np.float64), "sqeuclidean")
    ref_sorted = np.sort(ref_d2, axis=1)
    clear = (ref_sorted[:, 1] - ref_sorted[:, 0] > 1.0) & (ref_sorted[:, 2] - ref_sorted[:, 1] > 1.0)
    assert clear.mean() > 0.95
    np.testing.assert_array_equal(idx[clear], cv_idx[clear])
    # Ratio test: find_obj.py's filter_matches on OpenCV's matches.
    want = {i: int(a.trainIdx) for i, (a, b) in enumerate(raw) if a.distance < 0.75 * b.distance}
    border = np.abs(cv_dist[:, 0] / cv_dist[:, 1] - 0.75) < 1e-3
    m = ratio_match(d1, d2, 0.75)
    got = {q: t for q, t in zip(m.query_idx.tolist(), m.train_idx.tolist(), strict=True) if not border[q]}
    assert got == {q: t for q, t in want.items() if not border[q]}
    assert len(want) > 50


@pytest.mark.parametrize("cores", [1, 2, 3])
def test_knn2_rows_split_over_cores_equal_brute_force(monkeypatch, cores):
    """Enough queries to take the CPU path that splits rows over the cores (uneven shares with 3)."""
    import objrec.knn as K

    monkeypatch.setattr(K, "usable_cores", lambda: cores)
    rng = np.random.default_rng(11)
    n = 4 * K.CPU_BLOCK * cores + 37
    query, train = _structured(rng, n, 300, dim=64)
    idx, d2 = K.BruteForceIndex(train).knn2(query)
    ref_idx, ref_d2 = _ref_knn2(query, train)
    np.testing.assert_array_equal(idx, ref_idx)
    np.testing.assert_allclose(d2, ref_d2, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_distances_and_knn_on_cupy_equal_numpy(gpu_device):
    """The distance matrix and the k-NN stay on the device and agree with the host's."""
    import cupy

    rng = np.random.default_rng(9)
    query, train = _structured(rng, 400, 300, dim=64)
    cpu, gpu = BruteForceIndex(train), BruteForceIndex(cupy.asarray(train))
    D = gpu.distances(cupy.asarray(query))
    assert isinstance(D, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(D), cpu.distances(query), rtol=1e-4, atol=1e-4)
    i_g, d_g = gpu.knn(cupy.asarray(query), 5)
    i_c, d_c = cpu.knn(query, 5)
    np.testing.assert_array_equal(cupy.asnumpy(i_g), i_c)
    np.testing.assert_allclose(cupy.asnumpy(d_g), d_c, rtol=1e-4, atol=1e-4)


def test_searches_on_every_worker_thread_at_once_finish_and_agree_with_one_on_the_main_thread():
    """A search that would spread its rows over the worker pool keeps to its own thread when it already runs on
    one: with every pool thread searching, shares submitted to the pool would wait behind them forever."""
    from objrec._threads import usable_cores, worker_pool
    from objrec.knn import CPU_BLOCK, knn2

    rng = np.random.default_rng(11)
    workers = max(2, usable_cores())
    query = rng.random((4 * CPU_BLOCK * workers + 7, 16), dtype=np.float32)
    train = rng.random((300, 16), dtype=np.float32)
    want_idx, want_d2 = knn2(query, train)  # the main thread spreads its rows over the pool
    jobs = [worker_pool().submit(knn2, query, train) for _ in range(usable_cores())]
    for job in jobs:
        idx, d2 = job.result(timeout=120)
        np.testing.assert_array_equal(idx, want_idx)
        np.testing.assert_allclose(d2, want_d2, rtol=1e-5, atol=1e-5)
