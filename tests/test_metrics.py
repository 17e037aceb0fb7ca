"""Feature and homography metrics against hand-computed cases, brute-force references and real data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from objrec.metrics import (
    corner_error,
    ellipse_overlap,
    ellipses_from_features,
    features_from_opencv_reference,
    geometric_correspondences,
    greedy_descriptor_matches,
    greedy_one_to_one,
    homography_accuracy,
    matching_score,
    mean_matching_accuracy,
    mutual_nearest_neighbours,
    repeatability,
    warp_ellipses,
)
from objrec.types import Failure, Features


def make_features(xy, size, descriptors=None, kind="sift") -> Features:
    xy = np.asarray(xy, np.float32).reshape(-1, 2)
    n = xy.shape[0]
    size = np.broadcast_to(np.asarray(size, np.float32), (n,))
    if descriptors is None:
        descriptors = np.random.default_rng(0).random((n, 16), np.float32)
    z = np.zeros(n, np.float32)
    return Features(xy, size, z, z, np.zeros(n, np.int32), np.zeros(n, np.int8), descriptors, kind)


def circles(xy, r):
    xy = np.asarray(xy, np.float64).reshape(-1, 2)
    r = np.broadcast_to(np.asarray(r, np.float64), (xy.shape[0],))
    return xy, (r**2)[:, None, None] * np.eye(2)[None]


def lens_area(r: float, d: float) -> float:
    """Intersection area of two circles of radius r whose centres are d apart."""
    if d >= 2 * r:
        return 0.0
    return 2 * r * r * math.acos(d / (2 * r)) - 0.5 * d * math.sqrt(4 * r * r - d * d)


def translation(tx, ty):
    return np.array([[1.0, 0, tx], [0, 1, ty], [0, 0, 1]])


# --- exact ellipse overlap ----------------------------------------------------------------------------------


def test_concentric_circles_r_and_2r_overlap_error_is_three_quarters():
    c, S = circles([[10.0, 20.0]], 3.0)
    _, S2 = circles([[10.0, 20.0]], 6.0)
    inter, union, ov = ellipse_overlap(c, S, c, S2)
    assert inter[0] == pytest.approx(math.pi * 9)
    assert union[0] == pytest.approx(math.pi * 36)
    assert 1 - ov[0] == pytest.approx(0.75, abs=1e-12)


@pytest.mark.parametrize("d", [0.0, 0.3, 1.0, 2.5, 4.0, 5.9, 6.0, 9.0])
def test_equal_circles_offset_give_the_lens_area(d):
    r = 3.0
    c1, S = circles([[0.0, 0.0]], r)
    c2 = np.array([[d * 0.6, d * 0.8]])  # not axis aligned
    inter, union, ov = ellipse_overlap(c1, S, c2, S)
    lens = lens_area(r, d)
    assert inter[0] == pytest.approx(lens, abs=1e-9)
    assert ov[0] == pytest.approx(lens / (2 * math.pi * r * r - lens), abs=1e-9)


def test_perpendicular_congruent_ellipses_have_the_analytic_intersection():
    # Semi-axes (a, b) along x and along y, same centre: intersection 4ab atan(b/a).
    a, b = 2.0, 0.5
    c = np.zeros((1, 2))
    inter, union, ov = ellipse_overlap(c, np.diag([a * a, b * b])[None], c, np.diag([b * b, a * a])[None])
    want = 4 * a * b * math.atan(b / a)
    assert inter[0] == pytest.approx(want, rel=1e-9)
    assert ov[0] == pytest.approx(want / (2 * math.pi * a * b - want), rel=1e-9)


def test_identical_and_nested_ellipses():
    c = np.array([[5.0, -2.0]])
    S = np.array([[[9.0, 2.0], [2.0, 4.0]]])
    assert ellipse_overlap(c, S, c, S)[2][0] == pytest.approx(1.0)
    # Internally tangent circles: radius 1 inside radius 2, touching at one point.
    c1, S1 = circles([[0.0, 0.0]], 2.0)
    c2, S2 = circles([[1.0, 0.0]], 1.0)
    assert ellipse_overlap(c1, S1, c2, S2)[2][0] == pytest.approx(0.25, abs=1e-9)
    assert ellipse_overlap(c2, S2, c1, S1)[2][0] == pytest.approx(0.25, abs=1e-9)


def _grid_overlap(c1, S1, c2, S2, n=700):
    """Brute-force reference: count grid points inside each ellipse."""
    r = max(np.sqrt(np.linalg.eigvalsh(S1)).max(), np.sqrt(np.linalg.eigvalsh(S2)).max())
    lo, hi = np.minimum(c1, c2) - r, np.maximum(c1, c2) + r
    X, Y = np.meshgrid(np.linspace(lo[0], hi[0], n), np.linspace(lo[1], hi[1], n))
    P = np.stack([X.ravel(), Y.ravel()], 1)

    def inside(c, S):
        d = P - c
        return np.einsum("pi,ij,pj->p", d, np.linalg.inv(S), d) <= 1

    a, b = inside(c1, S1), inside(c2, S2)
    return (a & b).sum() / max((a | b).sum(), 1)


def test_random_ellipses_agree_with_a_brute_force_grid_and_are_symmetric():
    rng = np.random.default_rng(3)
    n = 40
    A = rng.normal(size=(2, n, 2, 2))
    S1 = A[0] @ A[0].transpose(0, 2, 1) + 0.1 * np.eye(2)
    S2 = A[1] @ A[1].transpose(0, 2, 1) + 0.1 * np.eye(2)
    c1 = rng.normal(size=(n, 2))
    c2 = c1 + 0.6 * rng.normal(size=(n, 2))
    _, _, ov = ellipse_overlap(c1, S1, c2, S2)
    ref = np.array([_grid_overlap(c1[k], S1[k], c2[k], S2[k]) for k in range(n)])
    assert np.abs(ov - ref).max() < 3e-3
    assert (ref > 0.05).sum() > n // 2  # the cases do overlap
    np.testing.assert_allclose(ellipse_overlap(c2, S2, c1, S1)[2], ov, atol=1e-9)
    # Overlap is affine invariant.
    M = np.array([[1.7, 0.4], [-0.3, 0.9]])
    t = np.array([4.0, -7.0])
    _, _, ov_affine = ellipse_overlap(c1 @ M.T + t, M @ S1 @ M.T, c2 @ M.T + t, M @ S2 @ M.T)
    np.testing.assert_allclose(ov_affine, ov, atol=1e-9)


def test_warp_ellipses_uses_the_local_affine_map():
    xy, S = circles([[10.0, 20.0]], 2.0)
    H = np.array([[2.0, 0.0, 5.0], [0.0, 3.0, -1.0], [0.0, 0.0, 1.0]])
    p, Sw = warp_ellipses(H, xy, S)
    np.testing.assert_allclose(p, [[25.0, 59.0]])
    np.testing.assert_allclose(Sw[0], np.diag([16.0, 36.0]))


# --- one-to-one matching --------------------------------------------------------------------------------------


def _greedy_loop(i, j, cost):
    taken_i, taken_j, out = set(), set(), []
    for k in np.lexsort((j, i, cost)):
        if i[k] not in taken_i and j[k] not in taken_j:
            taken_i.add(i[k])
            taken_j.add(j[k])
            out.append((i[k], j[k]))
    return sorted(out)


def test_greedy_one_to_one_equals_the_sequential_greedy_walk():
    rng = np.random.default_rng(5)
    for trial in range(20):
        e = rng.integers(1, 300)
        i = rng.integers(0, 40, e)
        j = rng.integers(0, 30, e)
        cost = rng.integers(0, 8, e).astype(float) if trial % 2 else rng.random(e)  # with and without ties
        got = [tuple(p) for p in greedy_one_to_one(i, j, cost)]
        assert got == _greedy_loop(i, j, cost)
    assert greedy_one_to_one([], [], []).shape == (0, 2)


def test_greedy_descriptor_matches_equals_the_sorted_walk_over_all_pairs():
    rng = np.random.default_rng(7)
    d1 = rng.random((23, 8))
    d2 = rng.random((31, 8))
    D = np.linalg.norm(d1[:, None] - d2[None], axis=2)
    ii, jj = np.meshgrid(np.arange(23), np.arange(31), indexing="ij")
    want = _greedy_loop(ii.ravel(), jj.ravel(), D.ravel())
    got = [tuple(p) for p in greedy_descriptor_matches(d1, d2)]
    assert got == want and len(got) == 23


def test_mutual_nearest_neighbours():
    d1 = np.array([[0.0, 0], [10, 0], [10.5, 0]])
    d2 = np.array([[0.2, 0], [10.2, 0]])
    m = mutual_nearest_neighbours(d1, d2)
    assert m.tolist() == [[0, 0], [1, 1]]  # 2 -> 1 is not mutual (1 is closer to it)


# --- repeatability and matching score -----------------------------------------------------------------------


def _random_points(n, lo, hi, rng):
    xy = rng.uniform(lo, hi, size=(n, 2))
    return xy


def test_identity_with_identical_features_gives_one():
    rng = np.random.default_rng(1)
    xy = _random_points(80, 30, 370, rng)
    f = make_features(xy, rng.uniform(4, 12, 80), rng.random((80, 32), np.float32))
    r = repeatability(f, f, np.eye(3), (400, 400), (400, 400))
    assert (r.repeatability, r.n_matches, r.n1, r.n2) == (1.0, 80, 80, 80)
    np.testing.assert_array_equal(r.matches, np.stack([np.arange(80)] * 2, 1))
    ms = matching_score(f, f, np.eye(3), (400, 400), (400, 400))
    assert ms.matching_score == 1.0 and ms.n_correct == 80 and ms.repeatability == 1.0
    # Reports get the scalars as plain Python numbers, never the per-match arrays.
    d = ms.to_dict()
    assert d == {
        "matching_score": 1.0,
        "n_correct": 80,
        "n_descriptor_matches": 80,
        "repeatability": 1.0,
        "n_matches": 80,
        "n_correspondences": d["n_correspondences"],
        "n1": 80,
        "n2": 80,
    }
    assert d["n_correspondences"] >= 80
    assert all(type(v) in (int, float) for v in d.values())
    assert r.to_dict() == {k: d[k] for k in ("repeatability", "n_matches", "n_correspondences", "n1", "n2")}


def test_known_translation_and_scale_homographies():
    rng = np.random.default_rng(2)
    # A 4x4 grid, 50 px apart: no region can be confused with a neighbour.
    xy = 40.0 + 50.0 * np.stack(np.meshgrid(np.arange(4), np.arange(4)), -1).reshape(-1, 2)
    size = rng.uniform(4, 10, 16)
    desc = rng.random((16, 16), np.float32)
    f1 = make_features(xy, size, desc)
    # Translation by (15, -7): image 2 is the same size, every region stays inside.
    f2 = make_features(xy + [15, -7], size, desc)
    r = repeatability(f1, f2, translation(15, -7), (300, 300), (300, 300))
    assert r.repeatability == 1.0 and r.n_matches == 16
    # Scale 2: positions and sizes double.
    H = np.diag([2.0, 2.0, 1.0])
    f2 = make_features(xy * 2, size * 2, desc)
    r = repeatability(f1, f2, H, (300, 300), (600, 600))
    assert r.repeatability == 1.0
    assert matching_score(f1, f2, H, (300, 300), (600, 600)).matching_score == 1.0
    # Same positions but sizes not scaled: area ratio 1/4 caps the overlap at 0.25, no correspondence.
    r = repeatability(f1, make_features(xy * 2, size, desc), H, (300, 300), (600, 600))
    assert r.repeatability == 0.0 and r.n_correspondences == 0
    # The wrong homography (a 25 px shift) finds nothing either.
    r = repeatability(f1, make_features(xy, size, desc), translation(25, 0), (300, 300), (300, 300))
    assert r.n_matches == 0 and r.n1 == r.n2 == 16


def test_regions_outside_the_common_area_are_excluded():
    # Image 1 is 200x100 (w x h), image 2 is the left half of it (100x100), H = identity.
    xy = np.array([[30.0, 50], [70, 50], [130, 50], [170, 50], [97, 50], [3, 50]])
    f = make_features(xy, 8.0)  # radius 4
    r = repeatability(f, f, np.eye(3), (100, 200), (100, 100))
    # (130, 50) and (170, 50) fall outside image 2; (97, 50) and (3, 50) are not fully inside it.
    assert (r.n1, r.n2) == (2, 2)
    assert r.repeatability == 1.0
    assert sorted(r.matches[:, 0].tolist()) == [0, 1]
    # A region of image 2 that maps outside image 1 is dropped from n2.
    f2 = make_features([[30.0, 50], [70, 50], [50, 50]], 8.0)
    r = repeatability(f.subset(np.array([0, 1])), f2, translation(-20, 0), (100, 100), (100, 100))
    # Mapped into image 2, region (30, 50) of image 1 lands at (10, 50): inside. Back-projection of (30, 50)
    # from image 2 lands at (50, 50), (70, 50) at (90, 50), (50, 50) at (70, 50): all inside image 1.
    assert (r.n1, r.n2) == (2, 3)
    assert r.n_matches == 1  # (30,50) -> (10,50) has no partner; (70,50) -> (50,50) does


def test_points_beyond_the_horizon_are_not_visible():
    # w = 1 - 0.01 x < 0 at x = 150: the point "maps" to (500, 600), inside image 2, but through infinity.
    H = np.array([[1.0, 0, -400], [0, 1, -400], [-0.01, 0, 1]])
    f1 = make_features([[150.0, 100.0], [50.0, 100.0]], 4.0)
    f2 = make_features([[500.0, 600.0]], 4.0)
    r = repeatability(f1, f2, H, (200, 200), (1000, 1000))
    assert r.n1 == 0 and r.repeatability == 0.0


def test_correspondences_match_a_brute_force_search_over_all_pairs():
    # Random circles under a projective H (so the mapped regions are ellipses); the candidate pruning must
    # not lose any pair that the exact overlap accepts.
    rng = np.random.default_rng(11)
    H = np.array([[0.9, 0.15, 12.0], [-0.1, 1.05, 5.0], [2e-4, -1e-4, 1.0]])
    xy1 = rng.uniform(20, 280, (150, 2))
    p = np.c_[xy1, np.ones(150)] @ H.T
    xy2 = np.concatenate([p[:, :2] / p[:, 2:] + rng.normal(0, 1.5, (150, 2)), rng.uniform(20, 280, (50, 2))])
    f1 = make_features(xy1, rng.uniform(3, 14, 150))
    f2 = make_features(xy2, rng.uniform(3, 14, 200))
    pairs, err = geometric_correspondences(f1, f2, H, (300, 300), (300, 300))
    got = {tuple(q): e for q, e in zip(pairs.tolist(), err, strict=True)}

    r = repeatability(f1, f2, H, (300, 300), (300, 300))
    assert r.n_correspondences == len(got) > 50
    # Brute force over every pair of visible regions: region B mapped into image 1, both rescaled so that A
    # has radius 30, centre distance under 4 radii of A (VLBenchmarks' candidate rule), exact overlap.
    cA, SA = ellipses_from_features(f1)
    cB, SB = warp_ellipses(np.linalg.inv(H), *ellipses_from_features(f2))
    ia, ib = np.meshgrid(np.arange(150), np.arange(200), indexing="ij")
    ia, ib = ia.ravel(), ib.ravel()
    rA = np.linalg.det(SA) ** 0.25
    s2 = (30.0 / rA[ia]) ** 2
    near = np.linalg.norm(cA[ia] - cB[ib], axis=1) < 4 * rA[ia]
    _, _, ov = ellipse_overlap(cA[ia], SA[ia] * s2[:, None, None], cB[ib], SB[ib] * s2[:, None, None])
    ok = near & (1 - ov < 0.4)
    want = {(int(a), int(b)): 1 - o for a, b, o in zip(ia[ok], ib[ok], ov[ok], strict=True)}
    # Restrict the brute force to the regions visible in both images (what the metric counts).
    vis_a = {a for a in range(150) if _visible(cA[a], SA[a], H, 300, 300)}
    vis_b = {b for b in range(200) if _visible_b(xy2[b], f2.size[b] / 2, cB[b], SB[b], 300, 300)}
    want = {k: v for k, v in want.items() if k[0] in vis_a and k[1] in vis_b}
    assert set(got) == set(want)
    for k, e in got.items():
        assert e == pytest.approx(want[k], abs=1e-9)


def _visible(c, S, H, w, h):
    p, Sw = warp_ellipses(H, c[None], S[None])
    r = math.sqrt(S[0, 0])
    inside1 = r < c[0] < w - r and r < c[1] < h - r
    rx, ry = math.sqrt(Sw[0, 0, 0]), math.sqrt(Sw[0, 1, 1])
    return inside1 and rx < p[0, 0] < w - rx and ry < p[0, 1] < h - ry


def _visible_b(xy, r, c, S, w, h):
    rx, ry = math.sqrt(S[0, 0]), math.sqrt(S[1, 1])
    return r < xy[0] < w - r and r < xy[1] < h - r and rx < c[0] < w - rx and ry < c[1] < h - ry


def test_one_to_one_is_enforced_and_the_best_overlap_wins():
    f1 = make_features([[100.0, 100.0]], 10.0)
    f2 = make_features([[102.0, 100.0], [100.0, 100.0], [101.0, 100.0]], 10.0)
    r = repeatability(f1, f2, np.eye(3), (200, 200), (200, 200))
    assert r.n_correspondences == 3
    assert r.n_matches == 1
    assert r.matches.tolist() == [[0, 1]]  # the exact one
    assert r.repeatability == 1.0  # 1 / min(1, 3)
    assert r.overlap_error[0] == pytest.approx(0.0, abs=1e-12)


def test_normalisation_to_30_px_radius_uses_the_lens_formula():
    # Two radius-5 circles 6 px apart. Normalised, the radii become 30 while the centres stay 6 px apart.
    f1 = make_features([[100.0, 100.0]], 10.0)
    f2 = make_features([[106.0, 100.0]], 10.0)
    lens30 = lens_area(30, 6)
    want30 = 1 - lens30 / (2 * math.pi * 900 - lens30)
    pairs, err = geometric_correspondences(f1, f2, np.eye(3), (200, 200), (200, 200))
    assert pairs.tolist() == [[0, 0]] and err[0] == pytest.approx(want30, abs=1e-9)
    # Without normalisation the same pair overlaps too little (error 0.76 > 0.4).
    lens5 = lens_area(5, 6)
    assert 1 - lens5 / (2 * math.pi * 25 - lens5) > 0.4
    r = repeatability(f1, f2, np.eye(3), (200, 200), (200, 200), normalize_radius=None)
    assert r.n_matches == 0


def test_matching_score_counts_only_geometric_matches():
    rng = np.random.default_rng(4)
    xy = _random_points(50, 30, 270, rng)
    desc = rng.random((50, 16), np.float32)
    f1 = make_features(xy, 8.0, desc)
    # Same regions, but the descriptors of the last 20 are permuted among themselves: those 20 descriptor
    # matches point at the wrong region.
    perm = np.arange(50)
    perm[30:] = np.roll(perm[30:], 1)
    f2 = make_features(xy, 8.0, desc[perm])
    ms = matching_score(f1, f2, np.eye(3), (300, 300), (300, 300))
    assert ms.repeatability == 1.0
    assert ms.n_descriptor_matches == 50
    # Each region's geometric match is itself (zero overlap error), so the 20 permuted ones are wrong.
    assert ms.n_correct == 30
    assert ms.matching_score == pytest.approx(30 / 50)
    assert sorted(ms.matches[:, 0].tolist()) == list(range(30))


def test_matching_score_needs_descriptors_of_one_kind():
    f = make_features([[50.0, 50.0]], 8.0)
    g = make_features([[50.0, 50.0]], 8.0, kind="surf")
    with pytest.raises(ValueError, match="kinds"):
        matching_score(f, g, np.eye(3), (100, 100), (100, 100))


def test_empty_inputs_give_zero_scores():
    f = make_features([[50.0, 50.0]], 8.0)
    e = Features.empty(16, "sift")
    assert repeatability(f, e, np.eye(3), (100, 100), (100, 100)).repeatability == 0.0
    assert matching_score(e, f, np.eye(3), (100, 100), (100, 100)).matching_score == 0.0
    assert mean_matching_accuracy(e, f, np.eye(3)).n_matches == 0
    with pytest.raises(ValueError, match="H"):
        repeatability(f, f, np.ones((2, 3)), (100, 100), (100, 100))


def test_mean_matching_accuracy_thresholds():
    rng = np.random.default_rng(6)
    xy = rng.uniform(0, 500, (40, 2))
    desc = rng.random((40, 16), np.float32)
    f1 = make_features(xy, 5.0, desc)
    H = translation(10, 20)
    # Every match is off by exactly 2.5 px.
    f2 = make_features(xy + [10 + 1.5, 20 + 2.0], 5.0, desc)
    res = mean_matching_accuracy(f1, f2, H)
    assert res.n_matches == 40
    np.testing.assert_allclose(res.errors, 2.5, atol=1e-4)
    np.testing.assert_array_equal(res.accuracy, [0, 0, 1, 1, 1, 1, 1, 1, 1, 1])
    # Half of them point at the wrong keypoint.
    f2 = make_features(xy + [10, 20], 5.0, np.concatenate([desc[:20], desc[20:][::-1]]))
    res = mean_matching_accuracy(f1, f2, H, thresholds=[1, 5])
    assert res.accuracy.tolist() == [0.5, 0.5]


# --- homography accuracy --------------------------------------------------------------------------------------


def test_corner_error_of_shifted_and_scaled_homographies():
    H_true = np.array([[0.9, 0.1, 5.0], [-0.05, 1.1, 3.0], [1e-4, 0.0, 1.0]])
    assert corner_error(H_true, H_true, 640, 480) == pytest.approx(0.0, abs=1e-9)
    # Shifted by (3, 4) after the true map: every corner is 5 px off.
    assert corner_error(translation(3, 4) @ H_true, H_true, 640, 480) == pytest.approx(5.0)
    # Scale 1.01 about the origin on a 100x100 image: corner errors 0, 1, sqrt(2), 1.
    want = (0 + 1 + math.sqrt(2) + 1) / 4
    assert corner_error(np.diag([1.01, 1.01, 1.0]), np.eye(3), 100, 100) == pytest.approx(want)
    # Scale of the matrix does not matter.
    assert corner_error(3.0 * translation(3, 4), np.eye(3), 10, 10) == pytest.approx(5.0)


def test_homography_accuracy_flags_and_failures():
    res = homography_accuracy(translation(3, 4), np.eye(3), (480, 640, 3))
    assert res.corner_error == pytest.approx(5.0)
    assert res.correct == {1.0: False, 3.0: False, 5.0: True}
    for bad in (None, Failure("too_few_matches"), np.full((3, 3), np.nan)):
        res = homography_accuracy(bad, np.eye(3), (480, 640))
        assert res.corner_error == math.inf and not any(res.correct.values())
        assert res.to_dict()["corner_error"] is None
    with pytest.raises(ValueError, match="3x3"):
        corner_error(np.eye(2), np.eye(3), 10, 10)


# --- OpenCV SURF reference files and real data ----------------------------------------------------------------


def test_opencv_surf_reference_loads(shared_data, tmp_path):
    f = features_from_opencv_reference(shared_data / "reference/opencv_surf/graf_img1.npz")
    assert f.kind == "surf" and f.descriptors.dtype == np.float32 and f.descriptor_size == 64
    assert len(f) > 1000 and set(np.unique(f.laplacian)) <= {-1, 1}
    with pytest.raises(ValueError, match="nope.npz"):
        features_from_opencv_reference(tmp_path / "nope.npz")
    np.savez(tmp_path / "partial.npz", xy=np.zeros((1, 2), np.float32))
    with pytest.raises(ValueError, match="partial.npz.*missing"):
        features_from_opencv_reference(tmp_path / "partial.npz")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="junk.npz"):
        features_from_opencv_reference(tmp_path / "junk.npz")


@pytest.fixture(scope="module")
def oxford_sift(shared_data):
    import cv2

    from objrec.features.sift import keypoints_to_features

    sift = cv2.SIFT_create(nfeatures=1500)
    cache = {}

    def get(seq, n):
        if (seq, n) not in cache:
            gray = cv2.imread(str(shared_data / "oxford_affine" / seq / f"img{n}.png"), cv2.IMREAD_GRAYSCALE)
            kps, desc = sift.detectAndCompute(gray, None)
            cache[seq, n] = (keypoints_to_features(kps, desc, "sift", 128), gray.shape)
        return cache[seq, n]

    return get


def test_sift_on_graf_falls_with_viewpoint_and_leuven_is_repeatable(shared_data, oxford_sift):
    root = shared_data / "oxford_affine"
    f1, s1 = oxford_sift("graf", 1)
    rep, ms = [], []
    for n in range(2, 7):
        fn, sn = oxford_sift("graf", n)
        res = matching_score(f1, fn, np.loadtxt(root / "graf" / f"H1to{n}p"), s1, sn)
        rep.append(res.repeatability)
        ms.append(res.matching_score)
    # Repeatability and matching score fall with the viewpoint change; SIFT fails beyond about 50 degrees.
    assert rep[0] > 0.5
    assert all(a >= b for a, b in zip(rep, rep[1:], strict=False)) and rep[0] > rep[2] > rep[4]
    assert ms[4] < 0.1 and ms[0] > 0.3
    f1, s1 = oxford_sift("leuven", 1)
    f2, s2 = oxford_sift("leuven", 2)
    H = np.loadtxt(root / "leuven" / "H1to2p")  # H[2,2] != 1 in this file
    res = matching_score(f1, f2, H, s1, s2)
    assert res.repeatability > 0.5
    mma = mean_matching_accuracy(f1, f2, H)
    assert mma.accuracy[2] > 0.8 and np.all(np.diff(mma.accuracy) >= 0)
