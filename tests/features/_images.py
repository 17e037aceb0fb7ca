"""A 64x64 textured test image for the CUDA-simulator tests (small enough for the simulator)."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np


def box_crop_64(n_blobs: int, min_sigma: float) -> np.ndarray:
    """A crop of OpenCV's box.png when the shared data is there, else ``n_blobs`` synthetic Gaussian blobs
    (sigma at least ``min_sigma``) on grey, from a fixed seed."""
    for parent in Path(__file__).resolve().parents:
        p = parent / "shared" / "data" / "opencv_samples" / "box.png"
        if p.exists():
            img = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
            return np.ascontiguousarray(img[60:124, 100:164])
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:64, 0:64]
    img = np.full((64, 64), 128.0)
    for _ in range(n_blobs):
        cy, cx, s = rng.uniform(8, 56), rng.uniform(8, 56), rng.uniform(min_sigma, 4)
        img += rng.choice([-1, 1]) * 90 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * s * s))
    return np.clip(img, 0, 255).astype(np.uint8)
