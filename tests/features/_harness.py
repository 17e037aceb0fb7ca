"""One test body for every device: run an extractor through its public entry point on a device and compare
with the CPU build of the same kernels (CuPy's ``numpy_cupy_allclose`` habit).

Devices, and how each case is selected:

``cpu``
    The Numba CPU build (``SURF(backend="cpu")``, ``SIFT(backend="numba")``); runs in the main test run.
    Compared with a second CPU run, so the comparison checks determinism and the body checks the contract.
``cudasim``
    The CUDA build in Numba's simulator (``backend="cudasim"``), marked ``cudasim``: runs only in the
    separate ``NUMBA_ENABLE_CUDASIM=1`` run. The simulator runs each CUDA thread in Python, so its inputs are
    64 px and its keypoint counts small.
``gpu``
    The CUDA build on a device (``backend="gpu"``), marked ``gpu`` and skipped unless CuPy sees a device.
    Inputs are 640 x 480 frames.

The reference is always the CPU build: SURF's ``"cpu"``, SIFT's ``"numba"`` twin (OpenCV's SIFT is a
different implementation, compared with the twin in ``test_sift_numba.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

from objrec.backend import gpu_available
from objrec.features import make_detector
from objrec.types import Features

from ._images import box_crop_64

KINDS = ("surf", "sift")
DEVICES = ("cpu", "cudasim", "gpu")

BACKEND = {
    "surf": {"cpu": "cpu", "cudasim": "cudasim", "gpu": "gpu"},
    "sift": {"cpu": "numba", "cudasim": "cudasim", "gpu": "gpu"},
}
REFERENCE = {"surf": "cpu", "sift": "numba"}


def device_marks(device: str) -> list:
    """The marks that select a device's cases: ``cudasim`` for the simulator run, ``gpu`` plus a skip with
    the reason where CuPy sees no device."""
    if device == "cudasim":
        return [pytest.mark.cudasim]
    if device == "gpu":
        return [pytest.mark.gpu, pytest.mark.skipif(not gpu_available(), reason="no CUDA device visible to CuPy")]
    return []


def devices(*names: str) -> list:
    """``pytest.param`` per device, for ``@pytest.mark.parametrize("device", devices(...))``."""
    return [pytest.param(d, marks=device_marks(d), id=d) for d in names or DEVICES]


def make(kind: str, device: str, **params):
    """The extractor of ``kind`` for ``device``, built through :func:`objrec.features.make_detector`."""
    return make_detector(kind, backend=BACKEND[kind][device], **params)


def reference(kind: str, **params):
    """The CPU build of ``kind`` with the same parameters."""
    return make_detector(kind, backend=REFERENCE[kind], **params)


def _frame_640x480() -> np.ndarray:
    """A 640 x 480 crop of Oxford graf 1 when the shared data is there, else a synthetic textured frame."""
    import cv2

    for parent in Path(__file__).resolve().parents:
        p = parent / "shared" / "data" / "oxford_affine" / "graf" / "img1.png"
        if p.exists():
            img = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
            y0, x0 = (img.shape[0] - 480) // 2, (img.shape[1] - 640) // 2
            return np.ascontiguousarray(img[y0 : y0 + 480, x0 : x0 + 640])
    rng = np.random.default_rng(1)
    noise = cv2.GaussianBlur(rng.normal(128, 60, (480, 640)).astype(np.float32), (0, 0), 2.0)
    return np.clip(noise, 0, 255).astype(np.uint8)


def image(device: str) -> np.ndarray:
    """The test frame of a device: 64 px on ``cpu`` and ``cudasim``, 640 x 480 on ``gpu``."""
    return _frame_640x480() if device == "gpu" else box_crop_64(n_blobs=20, min_sigma=1.2)


def box_mask(shape: tuple[int, int]) -> np.ndarray:
    """A 0/1 mask over a box of about 3/4 x 2/3 of the frame, off centre."""
    h, w = shape
    m = np.zeros(shape, np.uint8)
    m[h // 8 : h * 7 // 8, w // 16 : w * 3 // 4] = 1
    return m


def upload(device: str, a: np.ndarray | None):
    """``a`` where ``device`` computes: a CuPy array on ``gpu`` (the caller's one upload), else ``a``."""
    if a is None or device != "gpu":
        return a
    import cupy

    return cupy.asarray(a)


def assert_on_device(f: Features, device: str) -> None:
    """The result's arrays live where they were computed: CuPy on ``gpu``, NumPy on the host builds."""
    assert isinstance(f, Features)
    assert f.xp.__name__ == ("cupy" if device == "gpu" else "numpy")


@dataclass(frozen=True)
class Tol:
    """How close a device's features must be to the reference's.

    Keypoints are paired by position (``pair_px``) and angle (``pair_deg``); ``count`` bounds the
    difference in numbers (absolute plus relative), ``paired`` the fraction of reference keypoints paired.
    Fields of the pairs then agree within the rest; ``desc_median`` bounds the median over pairs of the
    largest descriptor difference (SIFT's uchar rounding), ``desc_atol`` every element (SURF).
    """

    pair_px: float = 0.0
    pair_deg: float = 0.0
    count: tuple[int, float] = (0, 0.0)
    paired: float = 1.0
    xy: float = 0.0
    size_rtol: float = 0.0
    response_rtol: float = 0.0
    angle: float = 0.0
    octave_mask: int = -1
    laplacian: bool = True
    desc_atol: float | None = 0.0
    desc_median: float | None = None
    desc_cos: float | None = None


_EXACT = Tol(pair_px=1e-6, pair_deg=1e-6)
#: The simulator computes in float64 where the CPU build stores float32; the GPU also fuses multiply-adds.
TOLERANCES = {
    ("surf", "cpu"): _EXACT,
    ("surf", "cudasim"): Tol(0.1, 1e-3, xy=0.1, response_rtol=1e-5, angle=1e-3, desc_atol=1e-4),
    ("surf", "gpu"): Tol(
        0.1, 0.1, count=(1, 0.01), paired=0.99, xy=0.1, size_rtol=0.1, response_rtol=1e-3, angle=0.1, desc_atol=1e-3
    ),
    ("sift", "cpu"): _EXACT,
    ("sift", "cudasim"): Tol(
        0.01, 0.05, count=(1, 0.02), paired=0.97, xy=2e-3, size_rtol=1e-4, response_rtol=1e-3, angle=0.05,
        octave_mask=0xFFFF, laplacian=False, desc_atol=None, desc_median=1.0, desc_cos=0.995,
    ),
    ("sift", "gpu"): Tol(
        0.01, 0.1, count=(1, 0.01), paired=0.97, xy=0.01, size_rtol=1e-4, response_rtol=1e-3, angle=0.1,
        octave_mask=0xFFFF, laplacian=False, desc_atol=None, desc_median=1.0,
    ),
}  # fmt: skip


def _angle_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    d = np.abs(a - b) % 360.0
    return np.minimum(d, 360.0 - d)


def pair(ref: Features, got: Features, tol: Tol) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(i, j)``: reference keypoint ``i`` and device keypoint ``j`` at the same place and angle.

    Locations with several orientations give several keypoints at one position, and their order may differ
    between builds, so the closest few by position are tried and the angle decides.
    """
    if len(ref) == 0 or len(got) == 0:
        return np.zeros(0, int), np.zeros(0, int)
    k = min(4, len(got))
    dist, idx = cKDTree(got.xy).query(ref.xy, k=k)
    dist, idx = dist.reshape(len(ref), k), idx.reshape(len(ref), k)
    dang = _angle_diff(ref.angle[:, None], got.angle[idx])
    best = np.argmin(dist + dang / 100.0, axis=1)
    rows = np.arange(len(ref))
    ok = (dist[rows, best] <= tol.pair_px) & (dang[rows, best] <= tol.pair_deg)
    return np.flatnonzero(ok), idx[rows, best][ok]


def assert_close(kind: str, device: str, ref: Features, got: Features) -> None:
    """``got`` (host arrays) matches ``ref`` within the tolerances of ``kind`` on ``device``."""
    tol = TOLERANCES[kind, device]
    assert got.kind == ref.kind == kind
    assert got.descriptor_size == ref.descriptor_size
    assert len(ref) > 0, "the test frame must give keypoints"
    absolute, relative = tol.count
    assert abs(len(got) - len(ref)) <= absolute + relative * len(ref), (len(got), len(ref))
    i, j = pair(ref, got, tol)
    assert len(i) >= tol.paired * len(ref), f"{len(i)} of {len(ref)} reference keypoints paired"
    np.testing.assert_allclose(got.xy[j], ref.xy[i], atol=tol.xy, rtol=0)
    np.testing.assert_allclose(got.size[j], ref.size[i], rtol=tol.size_rtol, atol=0)
    np.testing.assert_allclose(got.response[j], ref.response[i], rtol=tol.response_rtol, atol=1e-6)
    assert np.all(_angle_diff(got.angle[j], ref.angle[i]) <= tol.angle)
    np.testing.assert_array_equal(got.octave[j] & tol.octave_mask, ref.octave[i] & tol.octave_mask)
    if tol.laplacian:
        np.testing.assert_array_equal(got.laplacian[j], ref.laplacian[i])
    a, b = got.descriptors[j], ref.descriptors[i]
    if tol.desc_atol is not None:
        np.testing.assert_allclose(a, b, atol=tol.desc_atol, rtol=0)
    if tol.desc_median is not None:
        assert np.median(np.abs(a - b).max(axis=1)) <= tol.desc_median
    if tol.desc_cos is not None:
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
        assert cos.min() > tol.desc_cos


def run_and_compare(kind: str, device: str, img: np.ndarray, mask: np.ndarray | None = None, regions=None, **params):
    """Run ``kind`` on ``device`` and its CPU reference on the same input (``regions``: SURF only); compare;
    return the reference's result, the device's (copied to the host), and both extractors (device first)."""
    extra = {} if regions is None else {"regions": regions}
    ext = make(kind, device, **params)
    got = ext.detect_and_compute(upload(device, img), upload(device, mask), **extra)
    assert_on_device(got, device)
    ref_ext = reference(kind, **params)
    ref = ref_ext.detect_and_compute(img, mask, **extra)
    got = got.to_host()
    assert_close(kind, device, ref, got)
    return ref, got, ext, ref_ext
