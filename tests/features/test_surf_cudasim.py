"""SURF's CUDA build under Numba's simulator, compared with the CPU build on ~64 px images.

Run separately: ``NUMBA_ENABLE_CUDASIM=1 python -m pytest -m cudasim tests/features/test_surf_cudasim.py``
(the variable must be set before Numba is imported). The simulator runs each thread in Python in float64;
the CPU build stores float32, so values are compared with tolerances. The simulator runs a block of 64 Python
threads per described keypoint (about a second each), hence the small ``max_features``.
"""

from __future__ import annotations

import numpy as np
import pytest

from objrec.features.surf import SURF

from ._images import box_crop_64

pytestmark = pytest.mark.cudasim


def _image() -> np.ndarray:
    return box_crop_64(n_blobs=14, min_sigma=1.5)


def _compare(cpu, gpu, xy_tol=0.1, desc_tol=1e-4):
    assert len(cpu) == len(gpu) > 0
    np.testing.assert_allclose(gpu.xy, cpu.xy, atol=xy_tol)
    np.testing.assert_array_equal(gpu.size, cpu.size)
    np.testing.assert_array_equal(gpu.laplacian, cpu.laplacian)
    np.testing.assert_array_equal(gpu.octave, cpu.octave)
    np.testing.assert_allclose(gpu.response, cpu.response, rtol=1e-5)
    d = np.abs(gpu.angle - cpu.angle)
    assert np.all(np.minimum(d, 360 - d) < 1e-3)
    np.testing.assert_allclose(gpu.descriptors, cpu.descriptors, atol=desc_tol)


def test_cuda_build_matches_cpu_under_simulator():
    img = _image()
    s = SURF(100, n_octaves=2, max_features=4)
    cpu = s._detect_and_compute_target(img, target="cpu")
    det_cpu = next(iter(s._plans_.values()))["det"].copy()
    gpu = s._detect_and_compute_target(img, target="cuda")
    det_gpu = next(iter(s._plans_.values()))["det"]
    np.testing.assert_allclose(det_gpu, det_cpu, rtol=1e-5, atol=1e-3)
    _compare(cpu, gpu)
    assert s.last_stats_["candidates"] >= len(gpu)


def test_cuda_build_with_mask_matches_cpu():
    img = _image()
    mask = np.zeros(img.shape, np.uint8)
    mask[8:56, 4:40] = 1
    s = SURF(100, n_octaves=1, max_features=2)
    _compare(s._detect_and_compute_target(img, mask, target="cpu"), s._detect_and_compute_target(img, mask, "cuda"))


@pytest.mark.parametrize("params", [{"upright": True}, {"extended": True}])
def test_cuda_descriptor_variants_match_cpu(params):
    img = _image()
    s = SURF(100, **params)
    xy = np.array([[31.3, 30.7], [20.0, 41.5]], np.float32)
    size = np.array([15.0, 21.0], np.float32)
    a_cpu, d_cpu, ok_cpu = s._describe_host(img, xy, size, "cpu")
    a_gpu, d_gpu, ok_gpu = s._describe_host(img, xy, size, "cuda")
    np.testing.assert_array_equal(ok_gpu, ok_cpu)
    np.testing.assert_allclose(a_gpu, a_cpu, atol=1e-3)
    np.testing.assert_allclose(d_gpu, d_cpu, atol=1e-4)
    assert d_cpu.shape[1] == (128 if params.get("extended") else 64)


def test_cuda_build_with_regions_matches_cpu_and_counts_launches():
    from objrec.types import Regions

    img = _image()
    boxes = np.array([[4, 6, 40, 50], [30, 20, 60, 60]], np.int32)
    regions = Regions(boxes, np.ones(2, np.float32))
    s = SURF(100, n_octaves=1, max_features=2)
    cpu = s._detect_and_compute_target(img, target="cpu", regions=regions)
    cpu_stats = dict(s.last_stats_)
    plan = next(iter(s._plans_.values()))
    buffers = (id(plan["det"]), id(plan["flags"]))
    gpu = s._detect_and_compute_target(img, target="cuda", regions=regions)
    _compare(cpu, gpu)
    # det, nms, interp, describe: one launch each per frame, whatever the number of keypoints
    assert s.last_stats_["launches"] == 4
    # the simulator counts evaluated Hessians with atomics: the same work as the CPU build
    assert s.last_stats_["det_samples"] == cpu_stats["det_samples"] < cpu_stats["det_samples_frame"]
    # per-resolution buffers are kept across frames of the same size
    plan = next(iter(s._plans_.values()))
    assert (id(plan["det"]), id(plan["flags"])) == buffers
