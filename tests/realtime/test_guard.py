"""The per-frame guard: no garbage collection and one BLAS thread inside a frame, both restored after."""

from __future__ import annotations

import gc

from threadpoolctl import threadpool_info

from objrec.realtime.guard import collect_in_slack, frame_guard


def _blas_threads():
    """Thread counts of the BLAS libraries with a thread pool of their own (not built on OpenMP)."""
    return [
        i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas" and i.get("threading_layer") != "openmp"
    ]


def test_guard_disables_gc_and_limits_blas_inside_and_restores_both():
    before_gc, before_blas = gc.isenabled(), _blas_threads()
    with frame_guard():
        assert not gc.isenabled()
        assert all(n == 1 for n in _blas_threads())
    assert gc.isenabled() == before_gc and _blas_threads() == before_blas


def test_guard_restores_after_an_exception():
    try:
        with frame_guard():
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert gc.isenabled()


def test_collect_only_with_slack():
    assert collect_in_slack(10.0) and not collect_in_slack(1.0)


def test_blas_loaded_after_the_first_frame_is_limited_too_but_openmp_is_left_alone():
    """A library imported after the first frame (here OpenCV, which brings its own OpenBLAS) is limited as
    well; FAISS's OpenMP searches keep their threads inside a frame, although FAISS's BLAS is built on
    OpenMP and limiting it would put every OpenMP loop of the process on one thread."""
    import subprocess
    import sys

    code = """
from threadpoolctl import threadpool_info
from objrec.realtime.guard import frame_guard
with frame_guard():
    pass
import cv2  # noqa: F401
import faiss
def blas():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info()
            if i["user_api"] == "blas" and i.get("threading_layer") != "openmp"}
omp = faiss.omp_get_max_threads()
with frame_guard():
    inside = blas()
    omp_inside = faiss.omp_get_max_threads()
assert any("cv2" in p or "opencv" in p for p in inside), inside
assert all(n == 1 for n in inside.values()), inside
assert omp_inside == omp, (omp_inside, omp)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
