"""Feature extraction as enrolment does it: a model image's features per detector, in full-resolution model pixels.

It lives with the detectors (below the model database) so that the rating of a reference image
(:mod:`objrec.rating`) sees exactly what enrolment extracts.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from objrec.imageio import to_gray
from objrec.types import Features

__all__ = [
    "DEFAULT_DETECTORS",
    "MAX_MODEL_SIDE",
    "MODEL_LEVELS",
    "model_detector",
    "detect_features",
    "extract_model_features",
    "MODEL_FEATURES_PER_MEGAPIXEL",
    "MIN_MODEL_FEATURES",
    "AUTO_CAP",
    "model_feature_cap",
    "CAP_GRID",
    "CAP_SPREAD",
    "strongest_spread",
    "cap_features",
]

#: Detectors enrolled by default, with their parameters: SURF is the fast primary level, SIFT the robust
#: escalation (hessian_threshold 400: the strong, repeatable blobs worth matching; OpenCV's default of 100
#: triples the keypoints for little gain in recognition).
DEFAULT_DETECTORS: dict[str, dict[str, Any]] = {"surf": {"hessian_threshold": 400.0}, "sift": {"n_features": 0}}
#: Model images are scaled so their longer side is at most this (features keep full-resolution coordinates).
MAX_MODEL_SIDE = 1280
#: Relative scales at which model features are extracted (see :func:`extract_model_features`). Extra
#: levels (0.5) were measured to hurt: near-duplicate descriptors of one model point at two levels fail
#: Lowe's ratio test against each other (stream recall 1.0 -> 0.87 at full resolution).
MODEL_LEVELS = (1.0,)
#: Features of each kind stored per megapixel of a model image (its own features; synthesised views add
#: theirs), at least :data:`MIN_MODEL_FEATURES`: see :func:`model_feature_cap`. A cover's features beyond its
#: strongest several hundred are mostly weak, small-scale blobs that a phone photo of the object does not
#: repeat, while every stored feature costs disk, index and matching time for each enrolled object. SURF, the
#: primary level that every frame is matched against, keeps more than SIFT, the escalation run only where SURF
#: is unsure: recognition was measured to follow SURF's cap. The values are the smallest of the candidates
#: measured whose recognition of real photos against a catalogue (phone photos of covers; UKBench's objects,
#: whose photos hold background) equalled that of uncapped storage on a tune split of the objects, then
#: checked on a held-out split (``bench/bench_feature_cap.py``, ``objrec eval ukbench:``). The cap grows with
#: the image's area, so that a frame showing part of a large model (a close-up) still finds the model
#: features of that part at the density a whole cover has.
MODEL_FEATURES_PER_MEGAPIXEL: dict[str, int] = {"surf": 3200, "sift": 800}
#: The least :func:`model_feature_cap` gives, whatever the area: a small model image's features are fewer and
#: each one counts more. SURF's floor keeps a small cover found, and placed within the close-up targets,
#: when most of it is outside the frame (``bench/bench_closeup.py``: with 60% outside, a smaller floor placed a
#: cover's corners wrongly). SIFT's keeps enough of a small object for the escalation's guided matching, which
#: places an object from the model features around a few matches (a smaller floor lost such objects).
MIN_MODEL_FEATURES: dict[str, int] = {"surf": 1200, "sift": 500}
#: The ``max_features`` value that means :func:`model_feature_cap` for each kind and image.
AUTO_CAP = "auto"
#: Cells along each side of the grid over which :func:`strongest_spread` spreads the kept features.
CAP_GRID = 8
#: Share of the cap that :func:`strongest_spread` reserves for per-cell quotas; the rest goes by strength.
#: Spreading every slot evenly (a round-robin over the cells) was measured to lose photos that keeping the
#: strongest finds: the strongest blobs are the repeatable ones, so only a part is spent on coverage.
CAP_SPREAD = 0.5
# Our SURF kernels are Numba-parallel inside; Numba's workqueue threading layer must not be entered from two
# threads at once, while its OpenMP and TBB layers may be (Numba's "thread safe" layers), so SURF runs one
# image at a time only until the layer is known to be one of those. OpenCV's SIFT releases the GIL and runs
# in parallel threads.
_SERIAL_KINDS = {"surf"}
_serial_lock = threading.Lock()
_THREAD_SAFE_LAYERS = ("omp", "tbb")


def _serialised(kind: str) -> bool:
    """Whether ``kind``'s extraction must hold :data:`_serial_lock`: a kind of :data:`_SERIAL_KINDS` while
    Numba's threading layer is not yet started or is not thread safe."""
    if kind not in _SERIAL_KINDS:
        return False
    import numba

    try:
        return numba.threading_layer() not in _THREAD_SAFE_LAYERS
    except ValueError:  # not started: the first parallel launch chooses the layer
        return True


def model_detector(kind: str, params: dict[str, Any]) -> Any:
    """The CPU detector of ``kind`` with a database's ``params``, as enrolment uses it.

    Parameters
    ----------
    kind : str
        ``"sift"`` or ``"surf"``.
    params : dict
        The detector's parameters as the database records them.

    Returns
    -------
    SIFT or SURF
        A detector with ``detect_and_compute(gray)`` and ``descriptor_size``.
    """
    from objrec.features import make_detector

    return make_detector(kind, backend="cpu", **params)


def detect_features(kind: str, det: Any, gray: np.ndarray) -> Features:
    """``det.detect_and_compute(gray)``, safe to call from several threads at once.

    Parameters
    ----------
    kind : str
        The detector's kind: SURF runs one image at a time unless Numba's threading layer is thread safe
        (its kernels are parallel inside).
    det : SIFT or SURF
        A detector from :func:`model_detector`.
    gray : (H, W) uint8 ndarray

    Returns
    -------
    Features
    """
    if _serialised(kind):
        with _serial_lock:
            return det.detect_and_compute(gray)
    return det.detect_and_compute(gray)


def extract_model_features(
    image: np.ndarray, detectors: dict[str, dict[str, Any]], levels: tuple[float, ...] = MODEL_LEVELS
) -> dict[str, Features]:
    """Features of a model image for each detector, in full-resolution pixel coordinates.

    Besides the image itself, each extra level of ``levels`` (relative scales, e.g. 0.5) adds the features
    of a downscaled copy: a frame that sees the object small, or a recognizer that degrades resolution to
    keep its budget, then finds model features at the scales it can detect. Safe to call from several
    threads at once.

    Parameters
    ----------
    image : ndarray
        The model image, gray or BGR uint8.
    detectors : dict of kind -> parameters
        The database's detectors.
    levels : tuple of float
        Relative scales to extract at (a level whose image would be under 32 px on its shorter side ends
        the list).

    Returns
    -------
    dict of kind -> Features
    """
    import cv2

    gray0 = to_gray(image)
    h, w = gray0.shape
    base = min(1.0, MAX_MODEL_SIDE / max(h, w))
    out = {}
    for kind, params in detectors.items():
        det = model_detector(kind, params)
        parts = []
        for level in levels:
            scale = base * level
            if min(h, w) * scale < 32:
                break
            gray = (
                gray0
                if scale == 1.0
                else cv2.resize(gray0, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
            )
            parts.append(detect_features(kind, det, gray).scaled(1.0 / scale))
        out[kind] = Features.concatenate(parts) if parts else Features.empty(det.descriptor_size, kind)
    return out


def strongest_spread(
    xy: np.ndarray,
    response: np.ndarray,
    max_features: int,
    width: int,
    height: int,
    grid: int | None = None,
    spread: float | None = None,
) -> np.ndarray:
    """Rows of the ``max_features`` strongest keypoints, with a per-cell quota on a grid so that they spread
    over the image.

    The image is cut into ``grid`` x ``grid`` cells and each cell's ``q = floor(spread * max_features /
    grid**2)`` strongest keypoints are kept first (a cell with fewer keeps all of its own); the remaining
    slots go to the strongest of the rest, wherever they lie. A busy corner therefore cannot take every slot,
    yet most of them still go by strength, like adaptive non-maximal suppression (Brown et al. 2005) at the
    cost of a sort.

    Parameters
    ----------
    xy : (N, 2) ndarray
        Keypoint positions in image pixels.
    response : (N,) ndarray
        Detector responses (larger is stronger).
    max_features : int
        Rows to keep (all when there are no more than this).
    width, height : int
        The image size the positions lie in.
    grid : int, optional
        Cells along each side (default :data:`CAP_GRID`).
    spread : float, optional
        The share of ``max_features`` reserved for the cells' quotas (default :data:`CAP_SPREAD`; 0 keeps
        the strongest wherever they lie).

    Returns
    -------
    (K,) int64 ndarray
        The kept rows in ascending order, ``K = min(N, max_features)``.

    References
    ----------
    M. Brown, R. Szeliski, S. Winder, "Multi-image matching using multi-scale oriented patches", CVPR 2005.
    doi:10.1109/CVPR.2005.235

    Examples
    --------
    >>> import numpy as np
    >>> xy = np.array([[1, 1], [2, 2], [3, 3], [4, 4], [90, 90]], np.float32)
    >>> strongest_spread(xy, np.array([5.0, 4.0, 3.0, 2.0, 1.0]), 4, 100, 100, grid=2, spread=1.0).tolist()
    [0, 1, 2, 4]
    """
    n = len(response)
    grid = CAP_GRID if grid is None else int(grid)
    spread = CAP_SPREAD if spread is None else float(spread)
    if max_features < 0:
        raise ValueError(f"max_features: expected a non-negative integer, got {max_features}")
    if not 0.0 <= spread <= 1.0:
        raise ValueError(f"spread: expected a share in [0, 1], got {spread}")
    if n <= max_features:
        return np.arange(n, dtype=np.int64)
    xy = np.asarray(xy, np.float64).reshape(n, 2)
    cx = np.clip((xy[:, 0] * grid / max(width, 1)).astype(np.int64), 0, grid - 1)
    cy = np.clip((xy[:, 1] * grid / max(height, 1)).astype(np.int64), 0, grid - 1)
    cell = cy * grid + cx
    strength = -np.asarray(response, np.float64)
    by_cell = np.lexsort((np.arange(n), strength, cell))  # cell, then strongest first, then row
    first = np.searchsorted(cell[by_cell], np.arange(grid * grid))
    rank = np.empty(n, np.int64)
    rank[by_cell] = np.arange(n) - first[cell[by_cell]]
    quota = int(spread * max_features) // (grid * grid)
    order = np.lexsort((np.arange(n), strength, rank >= quota))  # the quotas first, then by strength
    return np.sort(order[:max_features]).astype(np.int64)


def model_feature_cap(kind: str, width: int, height: int) -> int | None:
    """The most ``kind`` features stored for a ``width`` x ``height`` model image: its area in megapixels (at
    the resolution features are extracted, :data:`MAX_MODEL_SIDE`) times :data:`MODEL_FEATURES_PER_MEGAPIXEL`,
    at least :data:`MIN_MODEL_FEATURES`; None (no cap) for a kind neither names.

    Parameters
    ----------
    kind : str
    width, height : int

    Returns
    -------
    int or None

    Examples
    --------
    >>> model_feature_cap("surf", 500, 500), model_feature_cap("surf", 1000, 1000), model_feature_cap("sift", 90, 90)
    (1200, 3200, 500)
    """
    if kind not in MODEL_FEATURES_PER_MEGAPIXEL:
        return MIN_MODEL_FEATURES.get(kind)
    scale = min(1.0, MAX_MODEL_SIDE / max(width, height, 1))
    megapixels = width * height * scale * scale / 1e6
    return max(MIN_MODEL_FEATURES.get(kind, 0), round(MODEL_FEATURES_PER_MEGAPIXEL[kind] * megapixels))


def cap_features(f: Features, max_features: int | dict[str, int] | str | None, width: int, height: int) -> Features:
    """``f`` reduced to :func:`strongest_spread`'s rows (``f`` itself when ``max_features`` is None or not
    exceeded), in their original order.

    Parameters
    ----------
    f : Features
        Features in the pixels of a ``width`` x ``height`` image.
    max_features : int, dict of kind -> int, :data:`AUTO_CAP` or None
        The cap, a cap per detector kind (a kind it does not name is not capped), or :data:`AUTO_CAP` for
        :func:`model_feature_cap`.
    width, height : int

    Returns
    -------
    Features
    """
    if max_features == AUTO_CAP:
        max_features = model_feature_cap(f.kind, width, height)
    if isinstance(max_features, dict):
        max_features = max_features.get(f.kind)
    if isinstance(max_features, str):
        raise ValueError(f"max_features: expected an int, a dict, {AUTO_CAP!r} or None, got {max_features!r}")
    if max_features is None or len(f) <= max_features:
        return f
    return f.subset(strongest_spread(f.xy, f.response, max_features, width, height))
