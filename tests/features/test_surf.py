"""SURF: stages against brute-force references, OpenCV's own output, and OpenCV's invariance tests.

OpenCV's SURF is not in pip's OpenCV, so ``shared/data/reference/opencv_surf`` holds its output (made with a
nonfree build, hessianThreshold=400, nOctaves=4, nOctaveLayers=3). The invariance tests follow opencv_contrib
``modules/xfeatures2d/test/test_rotation_and_scale_invariance.cpp`` with OpenCV's definitions (features2d
``test_detectors_invariance.impl.hpp``, ``test_descriptors_invariance.impl.hpp``, ``test_invariance_utils.hpp``)
and thresholds; OpenCV's rotation image (tsukuba.png) is not in the shared data, so a real Oxford image of
similar size takes its place.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from scipy.spatial import cKDTree

from objrec.backend import BackendError
from objrec.features import SURF
from objrec.features import _surf_kernels as K
from objrec.features._surf_stages import integral_image
from objrec.features.surf_tables import hessian_boxes, surf_plan
from objrec.imageio import InputError
from objrec.types import Features, Regions

# --------------------------------------------------------------------------- helpers


def _textured(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A deterministic image with blobs of many sizes (plenty of Hessian maxima), smoothed noise on top."""
    rng = np.random.default_rng(seed)
    img = np.full((h, w), 128, np.float32)
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(max(4, h * w // 300)):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        s = rng.uniform(1.5, 8.0)
        img += rng.choice([-1, 1]) * rng.uniform(40, 90) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    img += cv2.GaussianBlur(rng.normal(0, 12, (h, w)).astype(np.float32), (0, 0), 1.0)
    return np.clip(img, 0, 255).astype(np.uint8)


def _gray(path) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    assert img is not None, path
    return img


def _circle_intersect_ratio(p0: np.ndarray, r0: np.ndarray, p1: np.ndarray, r1: np.ndarray) -> np.ndarray:
    """OpenCV's ``calcIntersectRatio``: intersection over union of two discs, elementwise."""
    c = np.hypot(*(p0 - p1).T)
    r0 = r0.astype(np.float64)
    r1 = r1.astype(np.float64)
    area = np.zeros_like(c)
    mn, mx = np.minimum(r0, r1), np.maximum(r0, r1)
    inside = c + mn <= mx
    area[inside] = np.pi * mn[inside] ** 2
    part = (c < r0 + r1) & ~inside
    if np.any(part):
        cc, a0, a1 = c[part], r0[part], r1[part]
        h0 = np.clip((a0**2 + cc**2 - a1**2) / (2 * a0 * cc), -1, 1)
        h1 = np.clip((a1**2 + cc**2 - a0**2) / (2 * a1 * cc), -1, 1)
        A0, A1 = 2 * np.arccos(h0), 2 * np.arccos(h1)
        area[part] = 0.5 * a0**2 * (A0 - np.sin(A0)) + 0.5 * a1**2 * (A1 - np.sin(A1))
    return area / (np.pi * (r0**2 + r1**2) - area)


def _match_keypoints(pts0: np.ndarray, size0: np.ndarray, pts1: np.ndarray, size1: np.ndarray):
    """OpenCV's ``matchKeyPoints``: for each keypoint 0 (already mapped), the keypoint 1 of largest overlap."""
    tree = cKDTree(pts1)
    best = np.full(len(pts0), -1)
    ratio = np.zeros(len(pts0))
    reach = 0.5 * size0 + 0.5 * float(size1.max())
    for i, cand in enumerate(tree.query_ball_point(pts0, reach)):
        if not cand:
            continue
        cand = np.asarray(cand)
        r = _circle_intersect_ratio(
            np.repeat(pts0[i : i + 1], len(cand), 0), np.full(len(cand), 0.5 * size0[i]), pts1[cand], 0.5 * size1[cand]
        )
        j = int(np.argmax(r))
        if r[j] > 0:
            best[i], ratio[i] = cand[j], r[j]
    return best, ratio


def _nearest_descriptor(d0: np.ndarray, d1: np.ndarray) -> np.ndarray:
    """Brute-force L2 nearest neighbour of each row of ``d0`` among ``d1`` (BFMatcher.match)."""
    d0 = d0.astype(np.float64)
    d1 = d1.astype(np.float64)
    dist = (d0 * d0).sum(1)[:, None] + (d1 * d1).sum(1)[None, :] - 2 * d0 @ d1.T
    return np.argmin(dist, axis=1)


def _rotate_image(img: np.ndarray, mask: np.ndarray, angle: float):
    """OpenCV's ``rotateImage`` (test_invariance_utils.hpp): rotate about the centre onto a diag x diag canvas."""
    h, w = img.shape
    diag = float(np.sqrt(np.float32(w * w + h * h)))
    a = np.deg2rad(angle)
    lu = np.array([[1, 0, -(w // 2)], [0, 1, -(h // 2)], [0, 0, 1]], np.float64)
    rd = np.array([[1, 0, diag / 2], [0, 1, diag / 2], [0, 0, 1]], np.float64)
    rot = np.array([[np.cos(a), -np.sin(a), 0], [np.sin(a), np.cos(a), 0], [0, 0, 1]], np.float64)
    H = rd @ rot @ lu
    size = (int(round(diag)), int(round(diag)))
    return cv2.warpPerspective(img, H, size), cv2.warpPerspective(mask, H, size), H


def _apply_h(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    return cv2.perspectiveTransform(pts.reshape(-1, 1, 2).astype(np.float64), H).reshape(-1, 2)


def _reference_agreement(ours: Features, ref) -> tuple[float, float]:
    """Fraction of OpenCV's keypoints that we reproduce (1 px, 10% size, same Laplacian sign), and the
    median cosine between the descriptors of the reproduced ones."""
    rxy, rsize, rlap = ref["xy"], ref["size"], ref["laplacian"]
    rdesc = ref["descriptors"].astype(np.float64)
    tree = cKDTree(ours.xy)
    hit = np.zeros(len(rxy), bool)
    cos = []
    for i, cand in enumerate(tree.query_ball_point(rxy, 1.0)):
        for j in sorted(cand, key=lambda j: np.hypot(*(ours.xy[j] - rxy[i]))):
            if abs(ours.size[j] - rsize[i]) <= 0.1 * rsize[i] and ours.laplacian[j] == rlap[i]:
                hit[i] = True
                a = ours.descriptors[j].astype(np.float64)
                cos.append(a @ rdesc[i] / (np.linalg.norm(a) * np.linalg.norm(rdesc[i]) + 1e-12))
                break
    return float(hit.mean()), float(np.median(cos)) if cos else 0.0


# --------------------------------------------------------------------------- stage tests


def test_hessian_boxes_are_the_9x9_pattern_scaled():
    b9 = hessian_boxes(9)
    assert [tuple(b[:4]) for b in b9[:3]] == [(0, 2, 3, 7), (3, 2, 6, 7), (6, 2, 9, 7)]
    assert np.allclose([b[4] for b in b9[:3]], [1 / 15, -2 / 15, 1 / 15])
    assert np.allclose([b[4] for b in b9[6:]], [1 / 9, -1 / 9, -1 / 9, 1 / 9])
    for size in (15, 21, 27, 18, 30, 54, 216):
        bb = hessian_boxes(size)
        # each filter spans its size, lobes are symmetric, and the weights of Dxx/Dyy sum to zero over area
        assert bb[2][2] == size and bb[5][3] == size
        for lo, hi in ((0, 3), (3, 6), (6, 10)):
            assert abs(sum(w * (x2 - x1) * (y2 - y1) for x1, y1, x2, y2, w in bb[lo:hi])) < 1e-9


def _det_reference(img: np.ndarray, plan: dict) -> np.ndarray:
    """Fast-Hessian by direct sums of pixels under every box, a plain loop over every sample."""
    H, W = img.shape
    a = img.astype(np.float64)
    out = np.zeros(plan["det_len"], np.float64)
    L = plan["n_layers"]
    for o, (off, rows, cols, step, _, _) in enumerate(plan["oinfo"]):
        for l in range(L):
            size, m, ni, nj = plan["linfo"][o, l, :4]
            bb = hessian_boxes(int(size))
            for i in range(rows):
                for j in range(cols):
                    i0, j0 = i - m, j - m
                    if not (0 <= i0 < ni and 0 <= j0 < nj):
                        continue
                    ty, tx = i0 * step, j0 * step
                    d = [w * a[ty + y1 : ty + y2, tx + x1 : tx + x2].sum() for x1, y1, x2, y2, w in bb]
                    dxx, dyy, dxy = sum(d[0:3]), sum(d[3:6]), sum(d[6:10])
                    out[off + l * rows * cols + i * cols + j] = dxx * dyy - 0.81 * dxy * dxy
    return out


def _run_det(img: np.ndarray, n_octaves: int, n_layers: int, mask=None, sample_step: int = 1, target: str = "cpu"):
    # ``target`` chooses the integral image's type: float64 as the CPU pipeline makes it, integers as a device's
    H, W = img.shape
    plan = surf_plan(H, W, n_octaves, n_layers, sample_step)
    det = np.full(plan["det_len"], np.nan, np.float32)
    S = integral_image(img, np, target)
    M = integral_image(mask, np) if mask is not None else np.zeros(1, np.int32)
    gr, gc = plan["grid"]
    kern = K.kernels_for("cpu")
    args = (S, M, det, plan["oinfo"], plan["linfo"], plan["boxes"], plan["wts"], int(mask is not None))
    no_boxes, counts = np.zeros((1, 4), np.int32), np.zeros(2 * gr + 2, np.int64)
    kern["det"](gr, 1, *args, plan["n_oct"], plan["n_layers"], H, W, gc, no_boxes, 0, counts)
    return plan, det, S, M


def test_integral_image_is_exact_for_every_target():
    # Sums of a bright frame pass 2^31: the CPU's float64 and a device's int64 must both hold them exactly.
    img = np.full((3000, 3000), 255, np.uint8)
    img[::7, ::3] = 0
    want = np.zeros((3001, 3001), np.int64)
    want[1:, 1:] = img.astype(np.int64).cumsum(0).cumsum(1)
    cpu, dev = integral_image(img, np, "cpu"), integral_image(img, np, "cuda")
    assert cpu.dtype == np.float64 and dev.dtype == np.int64 and want.max() > 2**31
    np.testing.assert_array_equal(cpu.astype(np.int64), want.ravel())
    np.testing.assert_array_equal(dev, want.ravel())
    assert integral_image(img[:100, :100], np, "cuda").dtype == np.int32


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_hessian_matches_direct_box_sums(target):
    # Both integral types (the CPU's float64, a device's int32) give the direct sums, in the first octave
    # (sampled at step 1: the rows the CPU vectorises) and in the second (strided).
    img = _textured(44, 52, seed=1)
    plan, det, _, _ = _run_det(img, n_octaves=2, n_layers=2, target=target)
    ref = _det_reference(img, plan)
    assert not np.isnan(det).any(), "every sample of every layer must be written"
    assert np.count_nonzero(ref) > 1000
    np.testing.assert_allclose(det, ref, rtol=1e-4, atol=1e-2 * np.abs(ref).max() * 1e-4)


def test_nms_matches_a_plain_loop():
    img = _textured(96, 112, seed=2)
    plan, det, S, M = _run_det(img, n_octaves=2, n_layers=3)
    flags = np.full(plan["flag_len"], 7, np.uint8)
    gr, gc = plan["grid"]
    thr = 5.0
    K.kernels_for("cpu")["nms"](
        gr,
        1,
        det,
        flags,
        plan["oinfo"],
        plan["linfo"],
        M,
        0,
        plan["n_oct"],
        plan["n_layers"] - 2,
        thr,
        img.shape[1],
        gc,
    )
    want = np.zeros_like(flags)
    L = plan["n_layers"]
    for o, (off, rows, cols, _, _, foff) in enumerate(plan["oinfo"]):
        cube = det[off : off + L * rows * cols].reshape(L, rows, cols)
        for l in range(1, L - 1):
            mg = plan["linfo"][o, l, 5]
            for i in range(mg, rows - mg):
                for j in range(mg, cols - mg):
                    v = cube[l, i, j]
                    nb = cube[l - 1 : l + 2, i - 1 : i + 2, j - 1 : j + 2].copy()
                    nb[1, 1, 1] = -np.inf
                    if v > thr and v > nb.max():
                        want[foff + (l - 1) * rows * cols + i * cols + j] = 1
    assert want.sum() > 20
    np.testing.assert_array_equal(flags, want)


def test_keypoints_have_opencv_fields():
    f = SURF(200, backend="cpu").detect_and_compute(_textured(160, 200, seed=3))
    assert f.kind == "surf" and len(f) > 20 and f.descriptors.shape == (len(f), 64)
    assert set(np.unique(f.laplacian)) <= {-1, 1}
    assert np.all((f.angle >= 0) & (f.angle < 360))
    assert np.all(np.diff(f.response) <= 0), "strongest first"
    assert np.all(f.response > 200)
    assert np.all((f.octave >= 0) & (f.octave < 4))
    np.testing.assert_allclose(np.linalg.norm(f.descriptors, axis=1), 1.0, atol=1e-4)
    # sizes are interpolated filter sizes, rounded as OpenCV does: within one layer step of the layer size
    assert np.all(f.size == np.round(f.size)) and f.size.min() >= 9


def test_cross_regression_from_opencv():
    # opencv_contrib Features2d_RotationInvariance2_Detector_SURF: five keypoints, one at (50, 50), the other
    # four with equal responses.
    cross = np.full((100, 100), 255, np.uint8)
    cv2.line(cross, (30, 50), (69, 50), 100, 3)
    cv2.line(cross, (50, 30), (50, 69), 100, 3)
    f = SURF(8000.0, 3, 4, extended=True, upright=False, backend="cpu").detect_and_compute(cross)
    assert len(f) == 5
    centre = f.xy[:, 0] == 50.0
    assert centre.sum() == 1
    others = f.response[~centre]
    assert np.all(np.abs(others - others[0]) / others[0] < 1e-6)


def test_max_features_keeps_the_strongest():
    img = _textured(160, 200, seed=4)
    full = SURF(100, backend="cpu").detect_and_compute(img)
    s = SURF(100, max_features=25, backend="cpu")
    top = s.detect_and_compute(img)
    assert len(full) > 25 and len(top) == 25
    assert s.last_stats_["described"] == 25, "the strongest are chosen before description, not after"
    np.testing.assert_array_equal(top.xy, full.xy[:25])
    np.testing.assert_array_equal(top.descriptors, full.descriptors[:25])
    assert len(SURF(100, max_features=0, backend="cpu").detect_and_compute(img)) == 0


def test_mask_restricts_computation_and_results():
    img = _textured(200, 240, seed=5)
    mask = np.zeros(img.shape, np.uint8)
    mask[40:140, 60:170] = 255
    s = SURF(100, backend="cpu")
    full = s.detect_and_compute(img)
    det_full = next(iter(s._plans_.values()))["det"].copy()
    part = s.detect_and_compute(img, mask)
    det_part = next(iter(s._plans_.values()))["det"]
    assert 0 < len(part) < len(full)
    # every masked keypoint is one of the full run's (same position, size, response, descriptor)
    key_full = {(float(x), float(y), float(z)) for (x, y), z in zip(full.xy, full.size, strict=True)}
    assert all((float(x), float(y), float(z)) in key_full for (x, y), z in zip(part.xy, part.size, strict=True))
    # OpenCV's mask test: the mask covers at least half of the detection filter (a square of side `size`)
    for (x, y), z in zip(part.xy, part.size, strict=True):
        r = z / 2
        y0, y1, x0, x1 = (int(max(v, 0)) for v in (y - r, y + r + 1, x - r, x + r + 1))
        assert mask[y0:y1, x0:x1].mean() >= 0.4 * 255
    # full-run keypoints well inside the mask are all kept
    pairs = zip(full.xy, full.size, strict=True)
    inside = [(x, y) for (x, y), z in pairs if 40 + z < y < 140 - z and 60 + z < x < 170 - z]
    got = {(float(x), float(y)) for x, y in part.xy}
    assert inside and all((float(x), float(y)) in got for x, y in inside)
    # the Hessian was not evaluated far from the mask: octave 0, layer 0 is zero there
    plan = next(iter(s._plans_.values()))
    rows, cols = plan["oinfo"][0, 1], plan["oinfo"][0, 2]
    layer0_part = det_part[: rows * cols].reshape(rows, cols)
    layer0_full = det_full[: rows * cols].reshape(rows, cols)
    far = np.ones((rows, cols), bool)
    far[40 - 30 : 140 + 30, 60 - 30 : 170 + 30] = False
    assert np.count_nonzero(layer0_full[far]) > 1000
    assert np.count_nonzero(layer0_part[far]) == 0
    computed = np.count_nonzero(det_part) / max(np.count_nonzero(det_full), 1)
    assert computed < 0.6
    # an empty mask computes nothing and finds nothing
    assert len(s.detect_and_compute(img, np.zeros(img.shape, bool))) == 0


def _same_features(a: Features, b: Features) -> None:
    assert len(a) == len(b)
    for name in ("xy", "size", "angle", "response", "octave", "laplacian", "descriptors"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_regions_equal_the_mask_of_their_union_and_restrict_the_work():
    img = _textured(200, 240, seed=5)
    # overlapping boxes, one reaching past the frame (clipped), one tiny
    boxes = np.array([[20, 30, 110, 120], [90, 100, 170, 190], [200, -10, 260, 60], [5, 180, 9, 184]], np.int32)
    regions = Regions(boxes, np.ones(len(boxes), np.float32))
    union = np.zeros(img.shape, np.uint8)
    for x0, y0, x1, y1 in boxes:
        union[max(y0, 0) : y1, max(x0, 0) : x1] = 1
    s = SURF(100, backend="cpu")
    by_mask = s.detect_and_compute(img, union)
    det_mask = next(iter(s._plans_.values()))["det"].copy()
    stats_mask = dict(s.last_stats_)
    by_regions = s.detect_and_compute(img, regions=regions)
    det_regions = next(iter(s._plans_.values()))["det"]
    stats_regions = dict(s.last_stats_)
    assert len(by_regions) > 10
    _same_features(by_regions, by_mask)
    np.testing.assert_array_equal(det_regions, det_mask)
    # the same Hessians are evaluated, but the boxes path visits only the columns their filters reach
    assert stats_regions["det_samples"] == stats_mask["det_samples"]
    assert stats_mask["det_visited"] == stats_mask["det_samples_frame"]
    assert stats_regions["det_visited"] == stats_regions["det_samples"]
    assert stats_regions["det_visited"] < 0.8 * stats_mask["det_visited"]
    # keypoints lie inside the union (OpenCV's mask rule puts the centre's filter half inside)
    xi, yi = by_regions.xy.astype(int).T
    assert union[np.clip(yi, 0, 199), np.clip(xi, 0, 239)].mean() > 0.9


def test_regions_with_mask_small_regions_and_edge_cases():
    img = _textured(200, 240, seed=6)
    s = SURF(100, backend="cpu")
    mask = np.zeros(img.shape, np.uint8)
    mask[:, 50:200] = 1
    boxes = np.array([[10, 10, 120, 150]], np.int32)
    regions = Regions(boxes, np.ones(1, np.float32))
    both = s.detect_and_compute(img, mask, regions)
    visited_both = s.last_stats_["det_visited"]
    inter = mask.copy()
    inter[:, :] = 0
    inter[10:150, 50:120] = 1
    _same_features(both, s.detect_and_compute(img, inter))
    assert visited_both < s.last_stats_["det_visited"]
    # a region covering the frame is the same as no region
    _same_features(s.detect_and_compute(img, regions=Regions.full(240, 200)), s.detect_and_compute(img))
    # a small region: work proportional to it
    small = Regions(np.array([[100, 80, 140, 120]], np.int32), np.ones(1, np.float32))
    s.detect_and_compute(img, regions=small)
    assert s.last_stats_["det_visited"] < 0.25 * s.last_stats_["det_samples_frame"]
    # no boxes: nothing visited, nothing found
    assert len(s.detect_and_compute(img, regions=Regions.empty())) == 0
    assert s.last_stats_["det_visited"] == 0
    with pytest.raises(InputError, match="regions"):
        s.detect_and_compute(img, regions=np.array([[0, 0, 10, 10]]))


def test_bool_mask_equals_uint8_mask():
    img = _textured(120, 140, seed=6)
    m = np.zeros(img.shape, bool)
    m[20:100, 30:120] = True
    s = SURF(100, backend="cpu")
    a = s.detect_and_compute(img, m)
    b = s.detect_and_compute(img, m.astype(np.uint8) * 255)
    np.testing.assert_array_equal(a.xy, b.xy)


@pytest.mark.parametrize("extended", [False, True])
def test_blank_and_tiny_images_give_empty_features(extended):
    dim = 128 if extended else 64
    for img in (np.zeros((120, 160), np.uint8), np.full((64, 64), 200, np.uint8), _textured(16, 16)):
        f = SURF(100, extended=extended, backend="cpu").detect_and_compute(img)
        assert len(f) == 0 and f.descriptors.shape == (0, dim) and f.kind == "surf"


def test_bad_input_raises_clear_errors():
    s = SURF(backend="cpu")
    with pytest.raises(InputError, match="None"):
        s.detect_and_compute(None)
    with pytest.raises(InputError, match="uint8"):
        s.detect_and_compute(np.random.default_rng(0).random((64, 64)))
    with pytest.raises(InputError, match="uint8"):
        s.detect_and_compute(np.full((64, 64), 300.0, np.float32))
    with pytest.raises(InputError, match="shape"):
        s.detect_and_compute(np.zeros((64, 64, 2), np.uint8))
    with pytest.raises(InputError, match="shape"):
        s.detect_and_compute(np.zeros(64 * 64, np.uint8))
    with pytest.raises(InputError, match="too small"):
        s.detect_and_compute(np.zeros((8, 64), np.uint8))
    with pytest.raises(InputError, match="empty"):
        s.detect_and_compute(np.zeros((0, 64), np.uint8))
    with pytest.raises(InputError, match="mask"):
        s.detect_and_compute(np.zeros((64, 64), np.uint8), np.zeros((32, 32), np.uint8))
    for bad in (dict(hessian_threshold=-1), dict(n_octaves=0), dict(n_octave_layers=0), dict(max_features=-3)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SURF(backend="cpu", **bad).detect_and_compute(np.zeros((64, 64), np.uint8))
    with pytest.raises(ValueError, match="backend"):
        SURF(backend="tpu").detect_and_compute(np.zeros((64, 64), np.uint8))


def test_gpu_backend_without_device_is_a_clear_error():
    from objrec.backend import gpu_available

    if gpu_available():
        pytest.skip("a GPU is present")
    with pytest.raises(BackendError, match="SURF"):
        SURF(backend="gpu").detect_and_compute(np.zeros((64, 64), np.uint8))


def test_noncontiguous_and_bgr_inputs():
    img = _textured(130, 150, seed=7)
    s = SURF(150, backend="cpu")
    ref = s.detect_and_compute(img)
    wide = np.zeros((130, 300), np.uint8)
    wide[:, ::2] = img
    view = wide[:, ::2]
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(s.detect_and_compute(view).xy, ref.xy)
    bgr = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    np.testing.assert_array_equal(s.detect_and_compute(bgr).xy, ref.xy)


def test_compute_at_given_keypoints_reproduces_detect_and_compute():
    img = _textured(150, 170, seed=8)
    s = SURF(150, backend="cpu")
    f = s.detect_and_compute(img)
    g = s.compute(img, f)
    np.testing.assert_allclose(g.angle, f.angle, atol=1e-4)
    np.testing.assert_allclose(g.descriptors, f.descriptors, atol=1e-6)


# --------------------------------------------------------------------------- against OpenCV's SURF


@pytest.mark.parametrize(
    "name, params",
    [("box", {}), ("box_upright", {"upright": True}), ("box_extended", {"extended": True})],
)
def test_box_matches_opencv(shared_data, name, params):
    img = _gray(shared_data / "opencv_samples" / "box.png")
    ref = np.load(shared_data / "reference" / "opencv_surf" / f"{name}.npz")
    ours = SURF(400, 4, 3, backend="cpu", **params).detect_and_compute(img)
    reproduced, cosine = _reference_agreement(ours, ref)
    print(f"{name}: ours {len(ours)}, OpenCV {len(ref['xy'])}, reproduced {reproduced:.4f}, median cos {cosine:.4f}")
    assert reproduced >= 0.90
    assert cosine >= 0.90
    if params.get("upright"):
        assert np.all(ours.angle == 270.0)


@pytest.mark.parametrize("seq", ["graf", "boat", "bikes", "leuven"])
def test_oxford_img1_matches_opencv(shared_data, seq):
    img = _gray(shared_data / "oxford_affine" / seq / "img1.png")
    ref = np.load(shared_data / "reference" / "opencv_surf" / f"{seq}_img1.npz")
    ours = SURF(400, 4, 3, backend="cpu").detect_and_compute(img)
    reproduced, cosine = _reference_agreement(ours, ref)
    print(f"{seq}: ours {len(ours)}, OpenCV {len(ref['xy'])}, reproduced {reproduced:.4f}, median cos {cosine:.4f}")
    assert reproduced >= 0.90
    assert cosine >= 0.90
    assert abs(len(ours) - len(ref["xy"])) <= 0.1 * len(ref["xy"])


# --------------------------------------------------------------------------- invariance (OpenCV's tests)

ROTATION_ANGLES = list(range(0, 360, 15))


@pytest.fixture(scope="module")
def rotation_case(shared_data):
    # Oxford leuven img1 at half size (450x300, close to tsukuba's 384x288). Every real image tried gives angle
    # inliers of 0.76-0.80 at odd multiples of 45 degrees (box_in_scene 0.763, graf 0.734-0.77, boat 0.751):
    # SURF's box filters are least isotropic there, and OpenCV's SURF shares this (we reproduce its angles).
    full = _gray(shared_data / "oxford_affine" / "leuven" / "img1.png")
    img = cv2.resize(full, (full.shape[1] // 2, full.shape[0] // 2), interpolation=cv2.INTER_AREA)
    border = 16
    mask0 = np.zeros(img.shape, np.uint8)
    mask0[border:-border, border:-border] = 255
    surf = SURF(backend="cpu")  # OpenCV's SURF::create() defaults: 100, 4, 3
    f0 = surf.detect_and_compute(img, mask0)
    return img, mask0, surf, f0


def test_detector_rotation_invariance(rotation_case):
    img, mask0, surf, f0 = rotation_case
    assert len(f0) >= 15
    worst_match, worst_angle = 1.0, 1.0
    for angle in ROTATION_ANGLES:
        img1, mask1, H = _rotate_image(img, mask0, angle)
        f1 = surf.detect_and_compute(img1, mask1)
        best, ratio = _match_keypoints(_apply_h(H, f0.xy), f0.size, f1.xy.astype(np.float64), f1.size)
        good = ratio >= 0.5
        match_ratio = good.sum() / len(f0)
        d = np.abs((f0.angle[good] + angle) % 360.0 - f1.angle[best[good]])
        d = np.minimum(d, 360.0 - d)
        angle_inliers = float(np.mean(d < 15.0)) if good.any() else 0.0
        print(f"angle {angle}: keypoints {len(f1)}, match ratio {match_ratio:.3f}, angle inliers {angle_inliers:.3f}")
        worst_match, worst_angle = min(worst_match, match_ratio), min(worst_angle, angle_inliers)
        assert match_ratio >= 0.40, angle
        assert angle_inliers >= 0.76, angle
    print(f"worst over {len(ROTATION_ANGLES)} angles: match ratio {worst_match:.3f}, angle inliers {worst_angle:.3f}")


def test_descriptor_rotation_invariance(rotation_case):
    img, mask0, surf, f0 = rotation_case
    worst = 1.0
    for angle in ROTATION_ANGLES:
        img1, _, H = _rotate_image(img, mask0, angle)
        xy1 = _apply_h(H, f0.xy).astype(np.float32)
        # OpenCV's compute() re-estimates the orientation at the given points, as ours does.
        _, d1, ok = surf._describe_host(img1, xy1, f0.size, "cpu")
        ok = ok.astype(bool)
        idx1 = np.flatnonzero(ok)
        nn = idx1[_nearest_descriptor(f0.descriptors, d1[ok])]
        r = _circle_intersect_ratio(
            xy1.astype(np.float64), 0.5 * f0.size, xy1[nn].astype(np.float64), 0.5 * f0.size[nn]
        )
        inliers = float(np.sum(r >= 0.5)) / len(f0)
        print(f"angle {angle}: descriptor inliers {inliers:.3f}")
        worst = min(worst, inliers)
        assert inliers >= 0.83, angle
    print(f"worst descriptor inliers over {len(ROTATION_ANGLES)} angles: {worst:.3f}")


@pytest.fixture(scope="module")
def bikes_case(shared_data):
    img = _gray(shared_data / "oxford_affine" / "bikes" / "img1.png")
    surf = SURF(backend="cpu")
    return img, surf, surf.detect_and_compute(img)


@pytest.mark.parametrize("scale", [1.5, 2.0, 2.5])
def test_detector_scale_invariance(bikes_case, scale):
    img, surf, f0 = bikes_case
    img1 = cv2.resize(img, None, fx=1 / scale, fy=1 / scale, interpolation=cv2.INTER_LINEAR_EXACT)
    f1 = surf.detect_and_compute(img1)
    assert len(f1) >= 15 and len(f1) <= len(f0)
    best, ratio = _match_keypoints(f1.xy.astype(np.float64) * scale, f1.size * scale, f0.xy.astype(np.float64), f0.size)
    good = ratio >= 0.5
    match_ratio = good.sum() / len(f1)
    s0, s1 = f0.size[best[good]], f1.size[good] * scale
    size_inliers = float(np.mean(np.minimum(s0, s1) > 0.8 * np.maximum(s0, s1)))
    print(f"scale {scale}: match ratio {match_ratio:.3f}, size inliers {size_inliers:.3f}")
    assert match_ratio >= 0.64
    assert size_inliers >= 0.84


@pytest.mark.parametrize("scale", [1.5, 2.0, 2.5])
def test_descriptor_scale_invariance(bikes_case, scale):
    img, surf, f0 = bikes_case
    img1 = cv2.resize(img, None, fx=1 / scale, fy=1 / scale, interpolation=cv2.INTER_LINEAR_EXACT)
    _, d1, ok = surf._describe_host(img1, f0.xy / scale, f0.size / scale, "cpu")
    ok = ok.astype(bool)
    idx1 = np.flatnonzero(ok)
    nn = idx1[_nearest_descriptor(f0.descriptors, d1[ok])]
    xy0 = f0.xy.astype(np.float64)
    r = _circle_intersect_ratio(xy0, 0.5 * f0.size, xy0[nn], 0.5 * f0.size[nn])
    inliers = float(np.sum(r >= 0.5)) / len(f0)
    print(f"scale {scale}: descriptor inliers {inliers:.3f}")
    assert inliers >= 0.70


# --------------------------------------------------------------------------- CUDA build internals


@pytest.mark.cudasim
def test_cuda_hessian_planes_match_cpu_under_simulator():
    """The CUDA build's Hessian planes equal the CPU build's (float64 in the simulator, float32 stored);
    ``max_features=0`` stops before description, which the simulator would run a Python thread block for."""
    from ._images import box_crop_64

    img = box_crop_64(n_blobs=14, min_sigma=1.5)
    planes = {}
    for backend in ("cpu", "cudasim"):
        s = SURF(100, n_octaves=1, max_features=0, backend=backend)
        assert len(s.detect_and_compute(img)) == 0
        planes[backend] = next(iter(s._plans_.values()))["det"]
        assert s.last_stats_["candidates"] > 0
    np.testing.assert_allclose(planes["cudasim"], planes["cpu"], rtol=1e-5, atol=1e-3)


def test_buffers_are_kept_per_frame_size():
    img = _textured(96, 112, seed=9)
    s = SURF(100, backend="cpu")
    s.detect_and_compute(img)
    plan = next(iter(s._plans_.values()))
    det, flags = plan["det"], plan["flags"]
    s.detect_and_compute(img[:80])
    s.detect_and_compute(img)
    assert len(s._plans_) == 2
    assert any(p["det"] is det and p["flags"] is flags for p in s._plans_.values())


# --------------------------------------------------------------------------- coarse first-octave sampling


def test_coarse_sampling_hessian_matches_direct_box_sums():
    """``sample_step=2``: octave o is sampled every ``2 << o`` pixels, each sample the direct box sums."""
    img = _textured(60, 68, seed=4)
    plan, det, _, _ = _run_det(img, n_octaves=2, n_layers=2, sample_step=2)
    assert plan["oinfo"][:, 3].tolist() == [2, 4]
    assert plan["det_samples"] < 0.3 * surf_plan(60, 68, 2, 2)["det_samples"]
    ref = _det_reference(img, plan)
    assert not np.isnan(det).any() and np.count_nonzero(ref) > 200
    np.testing.assert_allclose(det, ref, rtol=1e-4, atol=1e-2 * np.abs(ref).max() * 1e-4)


@pytest.mark.parametrize("seq, j", [("graf", 2), ("boat", 3)])
def test_coarse_sampling_keeps_most_correct_matches(shared_data, seq, j):
    """Models at OpenCV's step, scenes at step 2 (as the recognizer runs): ratio-test matches that the
    ground-truth homography confirms (3 px) stay at most of those of step-1 scenes, as precise."""
    a = _gray(shared_data / "oxford_affine" / seq / "img1.png")
    b = _gray(shared_data / "oxford_affine" / seq / f"img{j}.png")
    H = np.loadtxt(shared_data / "oxford_affine" / seq / f"H1to{j}p")
    model = SURF(400, backend="cpu").detect_and_compute(a)
    correct, precision = [], []
    for step in (1, 2):
        scene = SURF(400, backend="cpu", sample_step=step).detect_and_compute(b)
        d, i = cKDTree(scene.descriptors).query(model.descriptors, k=2)
        keep = d[:, 0] < 0.75 * d[:, 1]
        ok = np.hypot(*(_apply_h(H, model.xy[keep]) - scene.xy[i[keep, 0]]).T) < 3.0
        correct.append(int(ok.sum()))
        precision.append(float(ok.mean()))
    print(f"{seq} 1->{j}: correct {correct}, precision {precision}")
    assert correct[0] > 100
    assert correct[1] >= 0.6 * correct[0]
    assert precision[1] >= 0.9 * precision[0]


def test_sample_step_is_checked():
    with pytest.raises(ValueError, match="sample_step"):
        SURF(backend="cpu", sample_step=3).detect_and_compute(np.zeros((64, 64), np.uint8))
