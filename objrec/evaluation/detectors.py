"""The detectors ``objrec eval`` compares, by name, behind one ``Features`` interface.

Names
-----
``surf``
    objrec's SURF on the CPU (Numba), ``hessian_threshold=400`` as OpenCV's reference files; ``surf-gpu`` on the
    GPU when CuPy sees a device.
``sift``
    objrec's SIFT with ``backend="cpu"`` (OpenCV's implementation behind the objrec contract); ``sift-numba`` and
    ``sift-gpu`` when objrec has those kernels (and a device).
``opencv-sift``
    ``cv2.SIFT.create()`` called directly (the anchor).
``orb``
    ``cv2.ORB.create(nfeatures=max_features or 2000)``; binary descriptors.
``akaze``
    ``cv2.AKAZE_create()`` (or ``cv2.xfeatures2d.AKAZE_create`` in OpenCV 5); binary descriptors; absent on some
    builds, which the report says.
``opencv-surf-ref``
    OpenCV's own SURF(400) output, precomputed in ``reference/opencv_surf/<seq>_img<N>.npz`` (Oxford set only);
    it has no detection time.

Binary descriptors become float32 vectors of their unpacked bits, so the squared L2 distance the metrics use is
exactly the Hamming distance (nearest neighbours and greedy matching are unchanged); the ratio test is applied
to Hamming distances, as OpenCV's ``NORM_HAMMING`` matcher does.
"""

from __future__ import annotations

import functools
import time
import zipfile
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.evaluation._help import DETECTOR_HELP
from objrec.features.sift import keypoints_to_features
from objrec.imageio import to_gray
from objrec.types import Features

__all__ = [
    "DETECTOR_HELP",
    "ALL_DETECTORS",
    "BINARY_DETECTORS",
    "RECOGNIZER_DETECTORS",
    "DetectorStatus",
    "detector_status",
    "parse_detectors",
    "extract",
    "binary_to_float",
    "cap_features",
    "reference_path",
    "detector_for",
    "warm_up",
    "requested_detectors",
    "check_some_task",
]

#: Every name the harness knows, in report order.
ALL_DETECTORS = (
    "surf",
    "surf-gpu",
    "sift",
    "sift-numba",
    "sift-gpu",
    "opencv-sift",
    "orb",
    "akaze",
    "opencv-surf-ref",
)
#: Detectors with binary (Hamming) descriptors.
BINARY_DETECTORS = frozenset({"orb", "akaze"})
#: Detectors that run inside objrec's Recognizer (the others use ratio matching + objrec's verification).
RECOGNIZER_DETECTORS = frozenset({"surf", "surf-gpu", "sift", "sift-numba", "sift-gpu"})
#: SURF threshold used for feature evaluation (the reference files were made with 400).
SURF_HESSIAN_THRESHOLD = 400.0
#: ORB's keypoint budget when no --max-features is given (OpenCV's default of 500 starves the metrics).
ORB_DEFAULT_FEATURES = 2000


@dataclass(frozen=True)
class DetectorStatus:
    """Whether a detector can run here, and why not.
    ``name``: the detector's name; ``available``: whether it can run here; ``note``: why not, or a remark."""

    name: str
    available: bool
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"available": self.available, "note": self.note}


def _akaze_factory():
    if hasattr(cv2, "AKAZE_create"):
        return cv2.AKAZE_create
    xf = getattr(cv2, "xfeatures2d", None)
    if xf is not None and hasattr(xf, "AKAZE_create"):
        return xf.AKAZE_create
    return None


def _objrec_backend(name: str) -> tuple[str, str]:
    kind, _, backend = name.partition("-")
    return kind, backend or "cpu"


@functools.cache
def detector_status(name: str) -> DetectorStatus:
    """Availability of ``name`` in this installation (cached per process)."""
    if name not in ALL_DETECTORS:
        raise ValueError(f"--detectors: unknown detector {name!r} (choose from {', '.join(ALL_DETECTORS)})")
    if name in ("opencv-sift", "orb", "opencv-surf-ref"):
        return DetectorStatus(name, True)
    if name == "akaze":
        if _akaze_factory() is None:
            return DetectorStatus(
                name, False, f"OpenCV {cv2.__version__} has neither cv2.AKAZE_create nor cv2.xfeatures2d.AKAZE_create"
            )
        return DetectorStatus(name, True)
    kind, backend = _objrec_backend(name)
    if backend == "gpu":
        from objrec.backend import gpu_available

        if not gpu_available():
            return DetectorStatus(name, False, "no CUDA device visible to CuPy")
    if kind == "surf":
        try:
            from objrec.features.surf import SURF  # noqa: F401
        except ImportError as exc:
            return DetectorStatus(name, False, f"objrec.features.surf not importable ({exc})")
    if kind == "sift" and backend in ("gpu", "numba"):
        from objrec.features import sift_gpu

        try:
            impl = sift_gpu.implementation(backend)
        except Exception as exc:  # noqa: BLE001 - any failure means "not here"
            impl, why = None, f"{type(exc).__name__}: {exc}"
        else:
            why = "not built in this version of objrec"
        if impl is None:
            return DetectorStatus(name, False, f"objrec SIFT backend {backend!r}: {why}")
    return DetectorStatus(name, True)


def parse_detectors(text: str | None, default: tuple[str, ...]) -> list[str]:
    """Comma-separated names (``all`` = every known name) in the given order, duplicates dropped.
    ``text``: the names (None: ``default``); ``default``: the names used without ``text``."""
    if text is None or not text.strip():
        return list(default)
    out: list[str] = []
    for k in (s.strip() for s in text.split(",")):
        if not k:
            continue
        names = ALL_DETECTORS if k == "all" else (k,)
        for n in names:
            if n not in ALL_DETECTORS:
                raise ValueError(f"--detectors: unknown detector {n!r} (choose from {', '.join(ALL_DETECTORS)})")
            if n not in out:
                out.append(n)
    if not out:
        raise ValueError("--detectors: no detector named")
    return out


def requested_detectors(cfg: Any, default: tuple[str, ...]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """The detectors a run asked for (``default`` when none) and ``{name: {available, note}}`` of each.

    ``cfg`` is the run's :class:`~objrec.evaluation.config.EvalConfig`; its ``max_features`` is checked here.
    """
    names = parse_detectors(",".join(cfg.detectors) if cfg.detectors else None, default)
    status = {n: detector_status(n).to_json() for n in names}
    if cfg.max_features < 0:
        raise ValueError(f"--max-features: expected 0 (all) or a positive integer, got {cfg.max_features}")
    return names, status


def check_some_task(tasks: list[dict[str, Any]], status: dict[str, dict[str, Any]], cfg: Any) -> None:
    """Raise ``ValueError`` naming why each detector cannot run when ``tasks`` is empty.
    ``status``: each detector's availability; ``cfg``: the evaluation's settings."""
    if not tasks:
        why = "; ".join(f"{n}: {s['note']}" for n, s in status.items() if not s["available"])
        raise ValueError(f"no detector can run on {cfg.kind}:{cfg.path} ({why})")


def binary_to_float(desc: np.ndarray) -> np.ndarray:
    """Unpack (N, B) uint8 binary descriptors into (N, 8B) float32 bits: squared L2 == Hamming distance."""
    return np.unpackbits(np.ascontiguousarray(desc, np.uint8), axis=1).astype(np.float32)


def cap_features(f: Features, max_features: int) -> Features:
    """The ``max_features`` strongest features (by response, ties by index); all when 0 or fewer exist.
    ``f``: the features."""
    if max_features <= 0 or len(f) <= max_features:
        return f
    order = np.argsort(-f.response.astype(np.float64), kind="stable")[:max_features]
    return f.subset(np.sort(order))


@functools.cache
def detector_for(name: str, max_features: int) -> Any:
    """A detector object with ``detect_and_compute(gray) -> Features`` (cached per process)."""
    if name == "opencv-sift":
        sift = cv2.SIFT.create()
        return _OpenCVDetector(sift, "opencv-sift", binary=False)
    if name == "orb":
        return _OpenCVDetector(cv2.ORB.create(nfeatures=max_features or ORB_DEFAULT_FEATURES), "orb", binary=True)
    if name == "akaze":
        factory = _akaze_factory()
        if factory is None:
            raise ValueError(detector_status("akaze").note)
        return _OpenCVDetector(factory(), "akaze", binary=True)
    kind, backend = _objrec_backend(name)
    from objrec.features import make_detector

    if kind == "surf":
        return make_detector("surf", hessian_threshold=SURF_HESSIAN_THRESHOLD, backend=backend)
    return make_detector("sift", backend=backend)


class _OpenCVDetector:
    def __init__(self, impl: Any, kind: str, binary: bool) -> None:
        self.impl, self.kind, self.binary = impl, kind, binary

    def detect_and_compute(self, gray: np.ndarray) -> Features:
        kps, desc = self.impl.detectAndCompute(gray, None)
        if self.binary and desc is not None and len(kps):
            desc = binary_to_float(desc)
        dim = 128 if not self.binary else (desc.shape[1] if desc is not None and desc.ndim == 2 else 256)
        return keypoints_to_features(kps, desc, self.kind, dim)


_warm: set[tuple[str, int]] = set()


def warm_up(name: str, max_features: int) -> None:
    """Run once on a small image so JIT compilation and first-call allocation do not count as detection time.
    ``name``: the detector; ``max_features``: its cap, as the evaluation runs it."""
    if (name, max_features) in _warm:
        return
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur((rng.random((160, 160)) * 255).astype(np.uint8), (0, 0), 1.5)
    detector_for(name, max_features).detect_and_compute(img)
    _warm.add((name, max_features))


def reference_path(reference_dir: str | Path, image_path: str | Path) -> Path:
    """``<reference_dir>/<seq>_<stem>.npz`` for an Oxford image ``<root>/<seq>/<stem>.png``.
    ``reference_dir``: the folder of precomputed features; ``image_path``: the Oxford image."""
    p = Path(image_path)
    return Path(reference_dir) / f"{p.parent.name}_{p.stem}.npz"


_cache: OrderedDict[tuple, tuple[Features, float | None]] = OrderedDict()
_CACHE_SIZE = 4


def extract(
    name: str, image_path: str, max_features: int = 0, reference_dir: str | None = None
) -> tuple[Features, tuple[int, int], float | None]:
    """Features of ``name`` on the gray image at ``image_path``, the image shape and the detection time (ms).

    The time is ``None`` for ``opencv-surf-ref`` (precomputed). A small per-process cache keeps the last few
    results, so the reference image of a sequence is detected once per process and its time reused.
    ``max_features``: keep the strongest this many (0: all); ``reference_dir``: the folder of precomputed
    ``opencv-surf-ref`` features.
    """
    from objrec.datasets import DatasetError, load_image

    key = (name, str(image_path), int(max_features), reference_dir)
    gray = to_gray(load_image(Path(image_path), gray=True))
    if key in _cache:
        _cache.move_to_end(key)
        f, ms = _cache[key]
        return f, gray.shape[:2], ms
    if name == "opencv-surf-ref":
        if reference_dir is None:
            raise ValueError("opencv-surf-ref: no reference folder (give --surf-reference DIR)")
        from objrec.metrics import features_from_opencv_reference

        rp = reference_path(reference_dir, image_path)
        try:
            f = features_from_opencv_reference(rp)
        except zipfile.BadZipFile as exc:  # not caught by the loader: a damaged archive is still bad input
            raise DatasetError(f"{rp}: not a readable .npz archive ({exc})") from None
        ms = None
    else:
        warm_up(name, max_features)
        det = detector_for(name, max_features)
        t0 = time.perf_counter()
        f = det.detect_and_compute(gray).to_host()  # the metrics run on the host; the time includes the copy
        ms = (time.perf_counter() - t0) * 1e3
    f = cap_features(f, max_features)
    _cache[key] = (f, ms)
    while len(_cache) > _CACHE_SIZE:
        _cache.popitem(last=False)
    return f, gray.shape[:2], ms
