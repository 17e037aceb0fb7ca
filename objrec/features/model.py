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
# Our SURF kernels are Numba-parallel inside (they use every core) and the workqueue threading layer must
# not be entered from two threads at once; OpenCV's SIFT releases the GIL and runs in parallel threads.
_SERIAL_KINDS = {"surf"}
_serial_lock = threading.Lock()


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
        The detector's kind: SURF runs one image at a time (its kernels are parallel inside).
    det : SIFT or SURF
        A detector from :func:`model_detector`.
    gray : (H, W) uint8 ndarray

    Returns
    -------
    Features
    """
    if kind in _SERIAL_KINDS:
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
