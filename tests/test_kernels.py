"""The kernel factory: one element function, built for numba.njit and numba.cuda.jit."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.kernels import Target


def _build_blur(t: Target):
    """3-tap horizontal blur with clamped borders; a helper called from the element function."""

    def clamp(v, lo, hi):
        return min(max(v, lo), hi)

    clamp_t = t.device(clamp)

    def body(y, x, src, dst):
        w = src.shape[1]
        acc = 0.0
        for dx in range(-1, 2):
            acc += src[y, clamp_t(x + dx, 0, w - 1)]
        dst[y, x] = acc / 3.0

    return t.grid2d(body, nargs=2)


def _reference_blur(src):
    p = np.pad(src, ((0, 0), (1, 1)), mode="edge")
    return (p[:, :-2] + p[:, 1:-1] + p[:, 2:]) / 3.0


def _build_scale(t: Target):
    def body(i, src, dst, k):
        dst[i] = src[i] * k

    return t.grid1d(body, nargs=3)


def test_cpu_target_matches_numpy():
    rng = np.random.default_rng(0)
    src = rng.random((37, 53))
    out = np.zeros_like(src)
    _build_blur(Target("cpu"))(37, 53, src, out)
    np.testing.assert_allclose(out, _reference_blur(src), rtol=1e-12)
    v = rng.random(101)
    o = np.zeros_like(v)
    _build_scale(Target("cpu"))(101, v, o, 2.5)
    np.testing.assert_allclose(o, v * 2.5)


def test_bad_target():
    with pytest.raises(ValueError, match="target"):
        Target("opencl")


@pytest.mark.cudasim
def test_cuda_build_under_simulator_matches_cpu_build():
    rng = np.random.default_rng(1)
    src = rng.random((20, 33))
    out_gpu, out_cpu = np.zeros_like(src), np.zeros_like(src)
    t = Target("cuda")
    _build_blur(t)(20, 33, src, out_gpu)
    _build_blur(Target("cpu"))(20, 33, src, out_cpu)
    np.testing.assert_allclose(out_gpu, out_cpu, rtol=1e-12)
    assert t.launches == 1
    v = rng.random(300)  # more than one block of 128
    o = np.zeros_like(v)
    _build_scale(t)(300, v, o, -1.5)
    np.testing.assert_allclose(o, -1.5 * v)
