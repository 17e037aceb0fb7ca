"""SIFT (Lowe 2004) behind the objrec ``Features`` contract; ``backend="cpu"`` is OpenCV's implementation."""

from __future__ import annotations

from typing import Any

import cv2
import numpy as np

from objrec.backend import resolve_backend
from objrec.features import sift_gpu
from objrec.features._frames import check_image, place
from objrec.types import Features

__all__ = ["SIFT", "keypoints_to_features"]


def keypoints_to_features(kps: list, desc: np.ndarray | None, kind: str, dim: int) -> Features:
    """Convert OpenCV keypoints and descriptors into :class:`~objrec.types.Features`.
    ``kps``: OpenCV ``KeyPoint``s; ``desc``: their (N, dim) descriptors (None: none found); ``kind``: the detector kind;
    ``dim``: the descriptor length."""
    if not kps or desc is None:
        return Features.empty(dim, kind)
    return Features(
        xy=np.array([k.pt for k in kps], np.float32),
        size=np.array([k.size for k in kps], np.float32),
        angle=np.array([k.angle for k in kps], np.float32),
        response=np.array([k.response for k in kps], np.float32),
        octave=np.array([k.octave for k in kps], np.int32),
        laplacian=np.zeros(len(kps), np.int8),
        descriptors=np.asarray(desc, np.float32).reshape(len(kps), -1),
        kind=kind,
    )


class SIFT:
    """Scale-invariant feature transform.

    Parameters
    ----------
    n_features : int
        Keep the best ``n_features`` keypoints (0: all).
    n_octave_layers : int
        Layers per octave (Lowe's ``s``).
    contrast_threshold, edge_threshold, sigma : float
        As in OpenCV's ``SIFT_create``.
    backend : {"cpu", "auto", "gpu", "numba", "cudasim"}
        ``"cpu"`` is OpenCV's SIFT; ``"gpu"`` our CUDA build on CuPy arrays (results stay on the device);
        ``"numba"`` the CPU build of the same kernels; ``"cudasim"`` the CUDA build in Numba's simulator on
        host arrays (only with ``NUMBA_ENABLE_CUDASIM=1``, set before Numba is imported). ``"auto"`` is
        ``"gpu"`` when CuPy sees a device, else ``"cpu"``.

    Attributes
    ----------
    last_stats_ : dict
        After a call on one of our builds: ``candidates``, ``keypoints``, ``launches`` (CUDA build),
        ``h2d_bytes`` / ``d2h_bytes`` copied between host and device, ``wall_ms``.

    References
    ----------
    D. G. Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004.
    doi:10.1023/B:VISI.0000029664.99615.94

    Examples
    --------
    >>> import numpy as np
    >>> from objrec.features import SIFT
    >>> rng = np.random.default_rng(0)
    >>> img = (rng.random((96, 96)) * 255).astype(np.uint8)
    >>> f = SIFT().detect_and_compute(img)
    >>> f.descriptors.shape[1]
    128
    """

    descriptor_size = 128
    kind = "sift"

    def __init__(
        self,
        n_features: int = 0,
        n_octave_layers: int = 3,
        contrast_threshold: float = 0.04,
        edge_threshold: float = 10.0,
        sigma: float = 1.6,
        backend: str = "auto",
    ) -> None:
        self.n_features = n_features
        self.n_octave_layers = n_octave_layers
        self.contrast_threshold = contrast_threshold
        self.edge_threshold = edge_threshold
        self.sigma = sigma
        self.backend = backend
        self._impl: cv2.SIFT | None = None

    def _opencv(self) -> cv2.SIFT:
        if self._impl is None:
            self._impl = cv2.SIFT.create(
                nfeatures=int(self.n_features),
                nOctaveLayers=int(self.n_octave_layers),
                contrastThreshold=float(self.contrast_threshold),
                edgeThreshold=float(self.edge_threshold),
                sigma=float(self.sigma),
            )
        return self._impl

    def detect_and_compute(self, gray: Any, mask: Any = None) -> Features:
        """Detect keypoints and compute descriptors on a gray (or BGR) uint8 image.

        Parameters
        ----------
        gray : (H, W) or (H, W, 3|4) uint8 array
            NumPy or CuPy. With ``backend="gpu"`` a NumPy image is uploaded once and a CuPy image (or a
            slice of one) is used where it is; the host backends copy a CuPy image to the host.
        mask : (H, W) uint8 or bool array, optional
            Nonzero where keypoints are kept.

        Returns
        -------
        Features
            ``kind="sift"``; CuPy arrays on the device with ``backend="gpu"``, NumPy arrays otherwise.
        """
        img, m = check_image(gray, mask)
        resolved = resolve_backend(self.backend, "SIFT", extra=("numba", "cudasim"))
        if resolved != "cpu":
            return sift_gpu.implementation(resolved)(self, img, m)
        img, m = place(img, m, np)
        kps, desc = self._opencv().detectAndCompute(img, m)
        return keypoints_to_features(kps, desc, self.kind, self.descriptor_size)
