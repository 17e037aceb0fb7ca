"""SIFT's CUDA build under Numba's simulator, compared with the CPU twin on a 64 x 64 image.

Run separately: ``NUMBA_ENABLE_CUDASIM=1 python -m pytest -m cudasim tests/features/test_sift_cudasim.py``
(the variable must be set before Numba is imported). The simulator runs every thread in Python (about
0.25 ms a thread, plus the work), so the 2-D stages run one row per thread here (``_sift_kernels.target_for``)
and the descriptor stage a thread per 4x4 cell as on a GPU; a frame costs about 10 s. Both builds compute
in float64 and store float32, but the CPU build may fuse multiply-adds: pyramid values agree to a few ulps,
and results are compared with tolerances.
"""

from __future__ import annotations

import numpy as np
import pytest

from objrec.features import SIFT, sift_gpu
from objrec.features import _sift_kernels as K

from ._images import box_crop_64

pytestmark = pytest.mark.cudasim


def _image() -> np.ndarray:
    return box_crop_64(n_blobs=20, min_sigma=1.2)


def _match(cpu, gpu):
    """Pair keypoints by position (the order of equal locations may differ), then compare fields."""
    assert len(cpu) > 10
    assert abs(len(cpu) - len(gpu)) <= max(1, len(cpu) // 50)
    d = np.linalg.norm(cpu.xy[:, None, :] - gpu.xy[None, :, :], axis=2)
    da = np.abs(cpu.angle[:, None] - gpu.angle[None, :])
    d = d + np.minimum(da, 360 - da) / 100
    j = d.argmin(1)
    ok = d[np.arange(len(cpu)), j] < 0.01
    assert ok.mean() >= 0.97
    i = np.flatnonzero(ok)
    j = j[ok]
    np.testing.assert_allclose(gpu.xy[j], cpu.xy[i], atol=2e-3)
    np.testing.assert_allclose(gpu.size[j], cpu.size[i], rtol=1e-4)
    np.testing.assert_allclose(gpu.response[j], cpu.response[i], rtol=1e-3, atol=1e-6)
    np.testing.assert_array_equal(gpu.octave[j] & 0xFFFF, cpu.octave[i] & 0xFFFF)
    a = np.abs(gpu.angle[j] - cpu.angle[i])
    assert np.all(np.minimum(a, 360 - a) < 0.05)
    diff = np.abs(gpu.descriptors[j] - cpu.descriptors[i])
    assert np.median(diff.max(1)) <= 1.0  # uchar rounding
    cos = (gpu.descriptors[j] * cpu.descriptors[i]).sum(1) / (
        np.linalg.norm(gpu.descriptors[j], axis=1) * np.linalg.norm(cpu.descriptors[i], axis=1)
    )
    assert cos.min() > 0.995


def test_cuda_build_matches_cpu_twin_under_simulator():
    img = _image()
    mask = np.zeros_like(img)
    mask[8:56, 4:48] = 1
    s = SIFT()
    cpu_r = sift_gpu.runner("cpu")
    sim_r = sift_gpu.runner("cuda")
    assert sim_r.xp is np  # the simulator takes host arrays
    cpu = cpu_r.features(s, img, mask)
    gpu = sim_r.features(s, img, mask)
    stats = dict(sim_r.last_stats_)
    # pyramids agree to float32 rounding
    pc = next(iter(cpu_r._plans.values()))
    pg = next(iter(sim_r._plans.values()))
    np.testing.assert_allclose(pg.gauss, pc.gauss, atol=1e-3)
    np.testing.assert_allclose(pg.dog, pc.dog, atol=1e-3)
    assert int((pg.flags != pc.flags).sum()) <= 2
    _match(cpu, gpu)
    xi = (gpu.xy + 0.5).astype(int)
    assert np.all(mask[xi[:, 1], xi[:, 0]] > 0)
    # launches: upsampling + 2 for the base, 2 per further level (5 per octave), then extrema, refinement
    # and the two descriptor stages
    assert stats["launches"] == 3 + 2 * 5 * pg.n_oct + 4
    assert stats["keypoints"] == len(gpu)


def test_cuda_descriptor_kernels_on_cpu_keypoints_under_simulator():
    """The descriptor stage on its own (thread per cell, then finish) from the CPU twin's keypoints."""
    img = _image()
    s = SIFT(n_features=12)
    cpu_r = sift_gpu.runner("cpu")
    p = cpu_r.plan(*img.shape, 3, 1.6)
    cpu_r.last_stats_ = {"d2h_bytes": 0}
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
