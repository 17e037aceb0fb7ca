"""SIFT's CPU twin (``backend="numba"``): stages against brute-force references, results against OpenCV.

The twin is the CPU build of the same element functions the GPU runs (``objrec.features._sift_kernels``),
so these tests are the oracle for the GPU code as well. Oxford images are centre crops of 400 x 480 pixels
(of 640 x 800) to keep the run short; the cross-matching test uses the full graf 1 -> 2 pair with its
ground-truth homography.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from scipy import ndimage
from scipy.spatial import cKDTree

from objrec.features import SIFT, sift_gpu
from objrec.features import _sift_kernels as K
from objrec.types import Features

SEQUENCES = ("graf", "boat", "bikes", "wall")


def _crop(img: np.ndarray, h: int = 400, w: int = 480) -> np.ndarray:
    y0 = (img.shape[0] - h) // 2
    x0 = (img.shape[1] - w) // 2
    return np.ascontiguousarray(img[y0 : y0 + h, x0 : x0 + w])


def _gray(path) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    assert img is not None, path
    return img


def _textured(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    img = np.full((h, w), 128, np.float32)
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(max(4, h * w // 200)):
        cy, cx, s = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(1.2, 5.0)
        img += rng.choice([-1, 1]) * rng.uniform(40, 90) * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    return np.clip(img, 0, 255).astype(np.uint8)


def _opencv(img: np.ndarray, mask=None) -> Features:
    kps, desc = cv2.SIFT_create().detectAndCompute(img, mask)
    from objrec.features.sift import keypoints_to_features

    return keypoints_to_features(kps, desc, "sift", 128)


def twin_stats(ref: Features, ours: Features) -> dict:
    """For each reference keypoint the nearest of ours within 1 px, 10 % in size and 10 degrees in angle."""
    tree = cKDTree(ours.xy)
    found = np.full(len(ref), -1)
    for i, near in enumerate(tree.query_ball_point(ref.xy, 1.0)):
        best = None
        for j in near:
            if abs(ours.size[j] - ref.size[i]) > 0.1 * ref.size[i]:
                continue
            da = abs(float(ours.angle[j]) - float(ref.angle[i]))
            da = min(da, 360.0 - da)
            if da > 10.0:
                continue
            cost = float(np.hypot(*(ours.xy[j] - ref.xy[i]))) + da / 100.0
            if best is None or cost < best[0]:
                best = (cost, j)
        if best is not None:
            found[i] = best[1]
    hit = found >= 0
    a = ref.descriptors[hit]
    b = ours.descriptors[found[hit]]
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
    return {"fraction": float(hit.mean()), "cos_median": float(np.median(cos)) if cos.size else 0.0, "pairs": found}


@pytest.fixture(scope="module")
def sift_numba() -> SIFT:
    return SIFT(backend="numba")


# --------------------------------------------------------------------------- stages


def _pyramid(img: np.ndarray, n_layers: int = 3, sigma: float = 1.6):
    r = sift_gpu.runner("cpu")
    p = r.plan(*img.shape, n_layers, sigma)
    r.pyramid(img, p)
    return p


def _plane(p, buf: str, o: int, level: int) -> np.ndarray:
    rows, cols = p.dims[o]
    off = int(p.oinfo_host[o, K.GOFF if buf == "gauss" else K.DOFF]) + level * rows * cols
    arr = p.gauss if buf == "gauss" else p.dog
    return arr[off : off + rows * cols].reshape(rows, cols)


def test_gaussian_levels_match_opencv_and_scipy():
    img = _textured(61, 75, seed=3)  # odd sizes: the decimation and borders are the delicate parts
    p = _pyramid(img)
    # octave -1 base: INTER_LINEAR x2, then the blur to sigma = 1.6 from the assumed 2 * 0.5
    dbl = cv2.resize(img.astype(np.float32), (150, 122), interpolation=cv2.INTER_LINEAR)
    sig0 = np.sqrt(1.6**2 - 1.0)
    base = cv2.GaussianBlur(dbl, (0, 0), sig0, sig0)
    np.testing.assert_allclose(_plane(p, "gauss", 0, 0), base, atol=2e-3)
    # incremental levels, separable Gaussian with BORDER_REFLECT_101 (scipy's "mirror") as an independent check
    sigs = sift_gpu._level_sigmas(3, 1.6)
    for lv in range(1, 6):
        prev = _plane(p, "gauss", 0, lv - 1).astype(np.float64)
        taps = sift_gpu._gaussian_taps(sigs[lv]).astype(np.float64)
        ref = ndimage.correlate1d(ndimage.correlate1d(prev, taps, axis=1, mode="mirror"), taps, axis=0, mode="mirror")
        np.testing.assert_allclose(_plane(p, "gauss", 0, lv), ref, atol=2e-3)
        ocv = cv2.GaussianBlur(prev.astype(np.float32), (0, 0), sigs[lv], sigs[lv])
        np.testing.assert_allclose(_plane(p, "gauss", 0, lv), ocv, atol=2e-3)
        np.testing.assert_allclose(_plane(p, "dog", 0, lv - 1), _plane(p, "gauss", 0, lv) - prev, atol=1e-5)
    # next octave's base: level n_layers decimated by resize INTER_NEAREST to (cols // 2, rows // 2)
    for o in range(1, p.n_oct):
        src = _plane(p, "gauss", o - 1, 3)
        rows, cols = p.dims[o]
        want = cv2.resize(src, (cols, rows), interpolation=cv2.INTER_NEAREST)
        np.testing.assert_array_equal(_plane(p, "gauss", o, 0), want)


def test_extrema_flags_match_a_brute_force_loop(sift_numba):
    img = _textured(40, 48, seed=5)
    p = _pyramid(img)
    r = sift_gpu.runner("cpu")
    r.last_stats_ = {"d2h_bytes": 0}
    r.detect(sift_numba, img, None, p)
    thr = np.floor(0.5 * 0.04 / 3 * 255)
    n_checked = n_flagged = 0
    for o in range(p.n_oct):
        rows, cols = p.dims[o]
        dog = np.stack([_plane(p, "dog", o, lv) for lv in range(5)])
        foff = int(p.oinfo_host[o, K.FOFF])
        flags = p.flags[foff : foff + 3 * rows * cols].reshape(3, rows, cols)
        want = np.zeros_like(flags)
        for lv in range(1, 4):
            for y in range(5, rows - 5):
                for x in range(5, cols - 5):
                    v = dog[lv, y, x]
                    if abs(v) <= thr:
                        continue
                    cube = dog[lv - 1 : lv + 2, y - 1 : y + 2, x - 1 : x + 2].ravel()
                    others = np.delete(cube, 13)
                    if (v > 0 and np.all(v >= others)) or (v < 0 and np.all(v <= others)):
                        want[lv - 1, y, x] = 1
        np.testing.assert_array_equal(flags, want)
        n_checked += want.size
        n_flagged += int(want.sum())
    assert n_flagged >= 5, "the test image should give some extrema"


def test_refinement_reproduces_opencv_keypoint_fields(sift_numba):
    img = _textured(96, 112, seed=7)
    ref = _opencv(img)
    ours = sift_numba.detect_and_compute(img)
    st = twin_stats(ref, ours)
    assert st["fraction"] >= 0.95
    hit = st["pairs"] >= 0
    j = st["pairs"][hit]
    # same octave/layer packing, sub-pixel position, size and response
    np.testing.assert_array_equal(ours.octave[j] & 0xFFFF, ref.octave[hit] & 0xFFFF)
    np.testing.assert_allclose(ours.xy[j], ref.xy[hit], atol=2e-3)
    np.testing.assert_allclose(ours.size[j], ref.size[hit], rtol=1e-4)
    np.testing.assert_allclose(ours.response[j], ref.response[hit], rtol=1e-3, atol=1e-6)


# --------------------------------------------------------------------------- against OpenCV


@pytest.mark.parametrize("name", SEQUENCES + ("box_in_scene",))
def test_keypoints_and_descriptors_match_opencv(shared_data, sift_numba, name):
    if name == "box_in_scene":
        img = _gray(shared_data / "opencv_samples" / "box_in_scene.png")
    else:
        img = _crop(_gray(shared_data / "oxford_affine" / name / "img1.png"))
    ref = _opencv(img)
    ours = sift_numba.detect_and_compute(img)
    st = twin_stats(ref, ours)
    print(f"{name}: opencv {len(ref)} ours {len(ours)} twins {st['fraction']:.4f} cos {st['cos_median']:.4f}")
    assert len(ref) > 200
    assert st["fraction"] >= 0.85
    assert st["cos_median"] >= 0.95
    assert 0.9 <= len(ours) / len(ref) <= 1.1


def _correct_matches(q: Features, t: Features, H: np.ndarray, ratio: float = 0.8, tol: float = 3.0) -> int:
    from objrec.knn import ratio_match

    m = ratio_match(q.descriptors, t.descriptors, ratio=ratio)
    p = np.c_[q.xy[m.query_idx], np.ones(len(m))] @ H.T
    p = p[:, :2] / p[:, 2:]
    return int((np.linalg.norm(p - t.xy[m.train_idx], axis=1) < tol).sum())


def test_cross_matching_with_opencv_descriptors(shared_data, sift_numba):
    d = shared_data / "oxford_affine" / "graf"
    img1, img2 = _gray(d / "img1.png"), _gray(d / "img2.png")
    H = np.loadtxt(d / "H1to2p")
    ocv1, ocv2 = _opencv(img1), _opencv(img2)
    ours1, ours2 = sift_numba.detect_and_compute(img1), sift_numba.detect_and_compute(img2)
    base = _correct_matches(ocv1, ocv2, H)
    ours_vs_ocv = _correct_matches(ours1, ocv2, H)
    ocv_vs_ours = _correct_matches(ocv1, ours2, H)
    print(f"graf 1->2 correct matches: opencv/opencv {base}, ours/opencv {ours_vs_ocv}, opencv/ours {ocv_vs_ours}")
    assert base > 100
    assert ours_vs_ocv >= 0.9 * base
    assert ocv_vs_ours >= 0.9 * base


# --------------------------------------------------------------------------- contract


def test_features_contract_mask_and_n_features(shared_data, sift_numba):
    img = _gray(shared_data / "opencv_samples" / "box_in_scene.png")
    full = sift_numba.detect_and_compute(img)
    assert isinstance(full, Features) and full.kind == "sift"
    assert full.descriptors.shape == (len(full), 128) and full.descriptors.dtype == np.float32
    assert np.all(full.descriptors == np.round(full.descriptors)) and full.descriptors.max() <= 255
    assert np.all((full.angle >= 0) & (full.angle < 360))
    assert set(np.unique(full.octave & 255)) <= {255, 0, 1, 2, 3, 4, 5, 6, 7}
    np.testing.assert_array_equal(full.laplacian, 0)

    mask = np.zeros(img.shape, np.uint8)
    mask[100:300, 150:400] = 255
    masked = sift_numba.detect_and_compute(img, mask)
    xi = (masked.xy + 0.5).astype(int)
    assert len(masked) > 50
    assert np.all(mask[xi[:, 1], xi[:, 0]] > 0)
    # same keypoints as the unmasked run inside the mask
    inside = mask[(full.xy[:, 1] + 0.5).astype(int), (full.xy[:, 0] + 0.5).astype(int)] > 0
    assert len(masked) == int(inside.sum())

    best = SIFT(n_features=100, backend="numba").detect_and_compute(img)
    assert 100 <= len(best) <= 110  # ties with the 100th (other orientations of a location) are kept
    assert best.response.min() >= np.sort(full.response)[::-1][99] - 1e-7


def test_blank_and_tiny_images_give_empty_features(sift_numba):
    assert len(sift_numba.detect_and_compute(np.full((64, 80), 77, np.uint8))) == 0
    for shape in ((16, 16), (17, 23)):
        f = sift_numba.detect_and_compute(np.zeros(shape, np.uint8))
        assert len(f) == 0 and f.descriptors.shape == (0, 128)
    f = sift_numba.detect_and_compute(_textured(64, 64), np.zeros((64, 64), np.uint8))
    assert len(f) == 0
