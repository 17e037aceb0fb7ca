"""Embedded sample data: objects and backgrounds that need no download.

Photographs come from scikit-learn's bundled sample images (``china.jpg``, ``flower.jpg``, CC BY 2.0,
installed with scikit-learn); covers are drawn procedurally from a fixed seed, so they are identical on
every machine.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

__all__ = ["sample_objects", "sample_background", "synthetic_cover", "sample_photos", "sample_video"]

_WORDS = [
    "OBJREC",
    "SURF",
    "SIFT",
    "ATLAS",
    "NORTH",
    "QUARTZ",
    "VELVET",
    "DELTA",
    "ORBIT",
    "MOSAIC",
    "LUMEN",
    "ZEPHYR",
]


@functools.cache
def sample_photos() -> dict[str, np.ndarray]:
    """scikit-learn's two sample photographs as BGR uint8 (427x640).

    Decoded by OpenCV from the files scikit-learn installs: its own ``load_sample_image`` needs Pillow, which
    is not a dependency of objrec (a plain ``pip install objrec`` has none). Both decoders give the same
    pixels for these files.
    """
    from importlib import resources

    out = {}
    for n in ("china", "flower"):
        ref = resources.files("sklearn.datasets.images") / f"{n}.jpg"
        try:
            data = ref.read_bytes()
        except OSError as e:
            raise FileNotFoundError(f"{ref}: scikit-learn's sample image is missing ({e})") from e
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"{ref}: scikit-learn's sample image cannot be decoded")
        out[n] = img
    return out


def synthetic_cover(seed: int, size: tuple[int, int] = (300, 400)) -> np.ndarray:
    """A textured 'book cover' (BGR uint8, ``size`` = (w, h)) drawn from ``seed``: gradient, shapes, text."""
    rng = np.random.default_rng(seed)
    w, h = size
    c0, c1 = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    t = np.linspace(0, 1, h)[:, None, None]
    img = ((1 - t) * c0 + t * c1).repeat(w, axis=1).astype(np.uint8)
    img = np.ascontiguousarray(img)
    for _ in range(int(rng.integers(25, 40))):
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        kind = rng.integers(0, 4)
        p = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        if kind == 0:
            cv2.circle(img, p, int(rng.integers(4, w // 6)), color, int(rng.choice([-1, 2, 3])), cv2.LINE_AA)
        elif kind == 1:
            q = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            cv2.rectangle(img, p, q, color, int(rng.choice([-1, 2])), cv2.LINE_AA)
        elif kind == 2:
            q = (int(rng.integers(0, w)), int(rng.integers(0, h)))
            cv2.line(img, p, q, color, int(rng.integers(1, 5)), cv2.LINE_AA)
        else:
            pts = rng.integers(0, [w, h], (int(rng.integers(3, 6)), 2)).astype(np.int32)
            cv2.fillPoly(img, [pts], color, cv2.LINE_AA)
    for i in range(int(rng.integers(3, 6))):
        word = " ".join(rng.choice(_WORDS, int(rng.integers(1, 3))))
        scale = rng.uniform(0.6, 1.3)
        color = tuple(int(v) for v in rng.integers(0, 256, 3))
        y = int((i + 1) * h / 7 + rng.integers(-10, 10))
        cv2.putText(
            img,
            word,
            (int(rng.integers(5, w // 4)), y),
            cv2.FONT_HERSHEY_DUPLEX,
            scale,
            color,
            2,
            cv2.LINE_AA,
        )
    # Fine texture: printed covers have grain; it gives small-scale detectors something to hold on to.
    grain = cv2.GaussianBlur(rng.normal(0, 18, (h, w)).astype(np.float32), (0, 0), 1.0)
    img = np.clip(img.astype(np.float32) + grain[:, :, None], 0, 255).astype(np.uint8)
    return img


@functools.cache
def _objects() -> dict[str, np.ndarray]:
    photos = sample_photos()
    return {
        "pagoda": photos["china"][25:330, 55:365].copy(),
        "dahlia": photos["flower"][80:365, 160:450].copy(),
        "cover": synthetic_cover(7),
    }


def sample_objects() -> dict[str, np.ndarray]:
    """Three enrolled-object images: ``pagoda`` and ``dahlia`` (photo crops) and ``cover`` (synthetic)."""
    return {k: v.copy() for k, v in _objects().items()}


def sample_background(size: tuple[int, int] = (960, 540), seed: int = 0) -> np.ndarray:
    """A background (BGR, ``size`` = (w, h)) from the parts of the photos not used as objects, plus a
    distractor cover that is never enrolled (it tests that look-alike clutter is not reported); ``seed`` draws
    the distractor."""
    photos = sample_photos()
    w, h = size
    left = cv2.resize(photos["china"][:, 360:], (w // 2, h), interpolation=cv2.INTER_AREA)
    right = cv2.resize(photos["flower"][:, :150], (w - w // 2, h), interpolation=cv2.INTER_AREA)
    bg = np.concatenate([left, right], axis=1)
    rng = np.random.default_rng(seed)
    d = synthetic_cover(1000 + seed, (w // 6, h // 3))
    x, y = int(rng.integers(0, w - d.shape[1])), int(rng.integers(0, h - d.shape[0]))
    bg[y : y + d.shape[0], x : x + d.shape[1]] = d
    return np.ascontiguousarray(bg)


def sample_video(n_frames: int, size: tuple[int, int] = (640, 480), seed: int = 0) -> list[np.ndarray]:
    """``n_frames`` background 'video' frames of ``size`` (w, h): a slow pan and zoom over a larger
    :func:`sample_background` (of ``seed``)."""
    w, h = size
    big = sample_background((2 * w, 2 * h), seed=seed)
    out = []
    for i in range(n_frames):
        a = 0.5 - 0.5 * np.cos(2 * np.pi * i / max(n_frames, 2))
        zoom = 1.0 + 0.3 * a
        cw, ch = int(w * zoom), int(h * zoom)
        x0 = int(a * (big.shape[1] - cw))
        y0 = int((1 - a) * (big.shape[0] - ch))
        out.append(cv2.resize(big[y0 : y0 + ch, x0 : x0 + cw], (w, h), interpolation=cv2.INTER_AREA))
    return out
