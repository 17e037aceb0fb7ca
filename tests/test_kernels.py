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


cuda = None  # numba.cuda, bound by the CUDA build: a module global, which the simulator swaps in kernels


def _build_block_sum(t: Target):
    """Per-item sums of rows: a block of threads per item on CUDA, chunks of items with scratch on the CPU."""
    if t.is_cuda:
        global cuda
        from numba import cuda, float64

        def body(k, src, out):
            tid = cuda.threadIdx.x
            sh = cuda.shared.array(4, float64)
            acc = 0.0
            for j in range(tid, src.shape[1], 4):
                acc += src[k, j]
            sh[tid] = acc
            cuda.syncthreads()
            if tid == 0:
                out[k] = sh[0] + sh[1] + sh[2] + sh[3]

        return t.blocks(body, nargs=2, threads=4)

    def body(k, c, src, scratch, out):
        scratch[c] = 0.0
        for j in range(src.shape[1]):
            scratch[c] += src[k, j]
        out[k] = scratch[c]

    return t.blocks(body, nargs=3, threads=4)


def test_cpu_blocks_give_each_chunk_its_slot():
    rng = np.random.default_rng(2)
    src = rng.random((23, 9))
    out = np.zeros(23)
    chunk = 5
    scratch = np.zeros(-(-23 // chunk))
    _build_block_sum(Target("cpu"))(23, chunk, src, scratch, out)
    np.testing.assert_allclose(out, src.sum(axis=1))


def test_row_chunk_is_the_targets_choice():
    assert Target("cpu").row_chunk(37) == 37
    assert Target("cuda").row_chunk(37) == 1
    assert Target("cuda", row_threads=True).row_chunk(37) == 37


def test_fingerprint_follows_helpers_and_constants():
    """Launchers are cached under a fingerprint of everything their element function reaches."""
    from objrec.kernels import fingerprint

    def make(scale, helper_src):
        ns: dict = {}
        exec(helper_src, ns)  # noqa: S102 - two fixed helper texts
        helper = Target("cpu").device(ns["helper"])

        def body(i, a):
            a[i] = helper(a[i]) * scale

        return body

    plus = "def helper(v):\n    return v + 1\n"
    minus = "def helper(v):\n    return v - 1\n"
    f0 = fingerprint(make(2.0, plus))
    assert f0 is not None and f0 == fingerprint(make(2.0, plus))
    assert fingerprint(make(3.0, plus)) != f0  # a captured constant
    assert fingerprint(make(2.0, minus)) != f0  # a helper's code

    opaque = object()

    def body(i, a):
        a[i] = opaque is None

    assert fingerprint(body) is None


def test_package_launchers_are_generated_files():
    """SURF's launchers (describe included) come from generated sources, cached by Numba's CPU cache."""
    from objrec.features import _surf_kernels as K

    kern = K.build(Target("cpu"))
    for name in ("det", "nms", "interp", "describe"):
        f = kern[name]
        assert f.py_func.__module__.startswith("_objrec_launcher_"), name
        assert f.py_func.__code__.co_filename.endswith(".py")


@pytest.mark.cudasim
def test_cuda_blocks_under_simulator():
    rng = np.random.default_rng(3)
    src = rng.random((5, 11))
    out = np.zeros(5)
    t = Target("cuda")
    _build_block_sum(t)(5, src, out)
    np.testing.assert_allclose(out, src.sum(axis=1))
    assert t.launches == 1
