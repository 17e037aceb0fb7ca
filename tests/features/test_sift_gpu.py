"""Internals of SIFT's CUDA build that the device harness (``test_extractors.py``) cannot reach: the
descriptor kernels on their own under the simulator, and matching on descriptors left on a device.
"""

from __future__ import annotations

import numpy as np
import pytest

from objrec.features import SIFT, sift_gpu
from objrec.features import _sift_kernels as K

from ._images import box_crop_64


@pytest.mark.cudasim
def test_cuda_descriptor_kernels_on_cpu_keypoints_under_simulator():
    """The descriptor stage alone (a thread per 4x4 cell, then a thread per keypoint to normalise) on the
    CPU twin's keypoints and pyramid: within uchar rounding of the twin's descriptors."""
    img = box_crop_64(n_blobs=20, min_sigma=1.2)
    s = SIFT(n_features=12)
    cpu_r = sift_gpu.runner("cpu")
    p = cpu_r.plan(*img.shape, 3, 1.6)
    cpu_r.pyramid(img, p)
    kp = cpu_r.detect(s, img, None, p)
    want = cpu_r.describe(kp, p)
    kern = K.kernels_for("cuda")
    n = int(kp["xy"].shape[0])
    raw = np.zeros((n, K.DESC_DIM), np.float32)
    got = np.zeros((n, K.DESC_DIM), np.float32)
    kern["desc"](n * 16, kp["ol"], kp["pf"], kp["size"], kp["angle"], p.gauss, p.oinfo, raw.ravel(), got.ravel(), 1)
    kern["finish"](n, raw.ravel(), got.ravel())
    assert np.abs(got - want).max() <= 1.0


@pytest.mark.gpu
def test_bruteforce_matching_on_device_descriptors(gpu_device, shared_data):
    """Descriptors left on the device match like their host copies; only the matches come back."""
    import cupy as cp
    import cv2

    from objrec.knn import BruteForceIndex, knn2, ratio_match

    s = SIFT(backend="gpu")
    img1, img2 = (
        cv2.imread(str(shared_data / "opencv_samples" / name), cv2.IMREAD_GRAYSCALE)
        for name in ("box.png", "box_in_scene.png")
    )
    d1 = s.detect_and_compute(cp.asarray(img1)).descriptors
    d2 = s.detect_and_compute(cp.asarray(img2)).descriptors
    assert isinstance(d1, cp.ndarray) and isinstance(d2, cp.ndarray)
    index = BruteForceIndex(d2)
    assert index.xp is cp
    idx_g, dist_g = index.knn2(d1)
    idx_c, dist_c = knn2(d1.get(), d2.get())
    agree = (idx_g.get()[:, 0] == idx_c[:, 0]).mean()
    assert agree >= 0.99  # float32 GEMM order differs; ties aside the neighbours are the same
    np.testing.assert_allclose(dist_g.get(), dist_c, rtol=1e-3, atol=1.0)
    m_gpu = ratio_match(d1, index, ratio=0.75)
    m_cpu = ratio_match(d1.get(), d2.get(), ratio=0.75)
    assert isinstance(m_gpu.query_idx, np.ndarray)
    assert abs(len(m_gpu) - len(m_cpu)) <= 0.02 * len(m_cpu) + 1
