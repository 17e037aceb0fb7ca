"""Training scenes for the prefilter: enrolled objects composited into backgrounds, cells labelled by overlap.

Backgrounds come from images, folders and videos (:func:`load_backgrounds`) or need no files
(:func:`default_backgrounds`); :func:`generate_scenes` composes the objects into them with
:func:`objrec.scenes.compose_scene` and keeps, per scene, the working-resolution image, its object
coverage and the object fraction of every cell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.imageio import InputError, check_frame, read_image, to_bgr
from objrec.prefilter.features import cell_grid, work_shape
from objrec.scenes import Distortion, compose_scene

__all__ = [
    "load_backgrounds",
    "default_backgrounds",
    "generated_background",
    "SceneSet",
    "generate_scenes",
    "cell_fractions",
    "VIDEO_EXTENSIONS",
]

VIDEO_EXTENSIONS = (".avi", ".mp4", ".mov", ".mkv", ".m4v", ".webm", ".mpg", ".mpeg")
_IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".pgm", ".ppm", ".webp")


def _read_video(path: Path, step: int, max_frames: int | None) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise InputError(f"{path}: not a readable video")
    frames: list[np.ndarray] = []
    i = 0
    try:
        while max_frames is None or len(frames) < max_frames:
            ok, f = cap.read()
            if not ok:
                break
            if i % step == 0:
                frames.append(to_bgr(check_frame(f, f"{path} frame {i}")))
            i += 1
    finally:
        cap.release()
    if not frames:
        raise InputError(f"{path}: video has no readable frames")
    return frames


def load_backgrounds(
    sources: Iterable[str | os.PathLike | np.ndarray], video_step: int = 10, max_video_frames: int | None = None
) -> list[np.ndarray]:
    """Background images (BGR uint8) from arrays, image files, folders of images and videos.

    Videos contribute every ``video_step``-th frame (consecutive frames are near duplicates).
    Errors name the path that could not be used.
    ``sources``: arrays, image files, folders of images or videos; ``max_video_frames``: at most this many frames from
    each video (None: all).
    """
    if video_step < 1:
        raise ValueError(f"video_step: expected an integer >= 1, got {video_step}")
    out: list[np.ndarray] = []
    for src in sources:
        if isinstance(src, np.ndarray):
            out.append(to_bgr(check_frame(src, "background")))
            continue
        p = Path(src)
        if not p.exists():
            raise InputError(f"{p}: background path does not exist")
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in _IMAGE_EXTENSIONS + VIDEO_EXTENSIONS)
            if not files:
                raise InputError(f"{p}: folder holds no images or videos")
            out.extend(load_backgrounds(files, video_step, max_video_frames))
        elif p.suffix.lower() in VIDEO_EXTENSIONS:
            out.extend(_read_video(p, video_step, max_video_frames))
        else:
            out.append(to_bgr(read_image(p)))
    if not out:
        raise InputError("backgrounds: none given")
    return out


def _palette(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` BGR colours as in everyday scenes: any hue, mostly low saturation, any brightness."""
    hsv = np.stack([rng.uniform(0, 180, n), 255 * rng.beta(1.1, 2.6, n), 255 * rng.uniform(0.12, 0.97, n)], 1)
    return cv2.cvtColor(hsv.astype(np.uint8)[None], cv2.COLOR_HSV2BGR)[0].astype(np.float32)


def _texture_field(rng: np.random.Generator, shape: tuple[int, int], kind: int) -> np.ndarray:
    """A zero-mean luminance texture: grain (grass, gravel, asphalt) or stripes (fences, blinds, brick rows)."""
    h, w = shape
    if kind == 0:
        t = cv2.GaussianBlur(rng.normal(0, 1, (h, w)).astype(np.float32), (0, 0), float(rng.uniform(0.6, 2.5)))
        return t / (t.std() + 1e-6) * float(rng.uniform(4, 28))
    period, ang = rng.uniform(4, 30), rng.uniform(0, np.pi)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    return np.sign(np.sin(2 * np.pi * (x * np.cos(ang) + y * np.sin(ang)) / period)) * float(rng.uniform(6, 35))


def _shape_mask(
    rng: np.random.Generator, r: float, cx: float, cy: float, w: int, h: int
) -> tuple[tuple[int, int, int, int], np.ndarray] | None:
    """A disc, rectangle or pentagon of radius ``r`` at (cx, cy): its box (y0, y1, x0, x1) in the frame and
    mask, drawn only over that box."""
    kind = int(rng.integers(4))
    ar = float(rng.uniform(0.35, 2.8)) if kind in (1, 2) else 1.0
    rx, ry = r * ar, r / ar
    x0, y0, x1, y1 = int(max(cx - rx, 0)), int(max(cy - ry, 0)), int(min(cx + rx + 1, w)), int(min(cy + ry + 1, h))
    if x1 <= x0 or y1 <= y0:
        return None
    m = np.zeros((y1 - y0, x1 - x0), np.uint8)
    px, py = cx - x0, cy - y0
    if kind == 0:
        cv2.circle(m, (int(px), int(py)), int(r), 255, -1)
    elif kind <= 2:
        cv2.rectangle(m, (int(px - rx), int(py - ry)), (int(px + rx), int(py + ry)), 255, -1)
    else:
        t = np.sort(rng.uniform(0, 2 * np.pi, 5))
        cv2.fillPoly(m, [np.stack([px + r * np.cos(t), py + r * np.sin(t)], 1).astype(np.int32)], 255)
    return (y0, y1, x0, x1), m > 0


def generated_background(rng: np.random.Generator, size: tuple[int, int] = (960, 540)) -> np.ndarray:
    """A 'dead leaves' scene: occluding discs, rectangles and polygons of log-uniform size over a vertical
    gradient, flat or filled with grain or stripes, under uneven light, noise and sometimes blur.

    Occlusion of shapes with a wide range of sizes gives the edge, junction and texture statistics of
    everyday scenes (Lee, Mumford and Huang, IJCV 2001) without any file, and the colours cover the space
    that cameras see, so a prefilter learns what is unlike its objects rather than one background.
    ``rng``: draws the scene; ``size``: its (width, height).
    """
    w, h = size
    top, bottom = _palette(rng, 2)
    a = np.linspace(0, 1, h, dtype=np.float32)[:, None, None]
    img = np.broadcast_to(top * (1 - a) + bottom * a, (h, w, 3)).copy()
    n = int(rng.integers(20, 90)) if rng.random() < 0.5 else int(rng.integers(120, 400))  # sparse or busy
    fields = [_texture_field(rng, (h, w), k) for k in (0, 0, 1, 1)]
    radii = np.sort(np.exp(rng.uniform(np.log(5), np.log(w / 4), n)))[::-1]  # large first, small on top
    for r, c in zip(radii, _palette(rng, n), strict=True):
        got = _shape_mask(rng, float(r), rng.uniform(0, w), rng.uniform(0, h), w, h)
        if got is None:
            continue
        (y0, y1, x0, x1), m = got
        k = int(rng.integers(len(fields) + 2))  # a third of the shapes stay flat
        fill = np.broadcast_to(c, m.shape + (3,))
        if k < len(fields):
            fill = fill + fields[k][y0:y1, x0:x1, None] * rng.uniform(0.3, 1.2)
        np.copyto(img[y0:y1, x0:x1], fill, where=m[:, :, None])
    light = cv2.resize(rng.uniform(0.7, 1.2, (3, 4)).astype(np.float32), (w, h), interpolation=cv2.INTER_CUBIC)
    img = img * light[:, :, None] + rng.normal(0, rng.uniform(0.5, 4), (h, w, 1)).astype(np.float32)
    sigma = float(rng.choice([0.0, 0.7, 1.5]))
    return np.clip(cv2.GaussianBlur(img, (0, 0), sigma) if sigma else img, 0, 255).astype(np.uint8)


def default_backgrounds(n: int = 8, n_generated: int | None = None) -> list[np.ndarray]:
    """Backgrounds that need no files: the embedded sample backgrounds, smooth and noisy textures, and
    ``n_generated`` (default ``6 n``) :func:`generated_background` scenes, all from fixed seeds.

    The embedded backgrounds are cut from two photos, so the generated scenes outnumber them: what the
    trees learn as background, and the colour and texture codes the back-projection tables count as
    background, then come mostly from the wide range of the generated scenes rather than from two photos.
    """
    from objrec.data import sample_background

    out = [sample_background((960, 540), seed=s) for s in range(n)]
    rng = np.random.default_rng(12345)
    for _ in range(max(2, n // 2)):
        base = rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)
        img = cv2.resize(base, (960, 540), interpolation=cv2.INTER_CUBIC)
        noise = cv2.GaussianBlur(rng.normal(0, 12, (540, 960)).astype(np.float32), (0, 0), 2.0)
        out.append(np.clip(img.astype(np.float32) + noise[:, :, None], 0, 255).astype(np.uint8))
    gen = np.random.default_rng(99)
    out += [generated_background(gen) for _ in range(6 * n if n_generated is None else n_generated)]
    return out


@dataclass
class SceneSet:
    """Generated training scenes at working resolution.

    ``images``: BGR uint8 work-resolution frames; ``fractions``: per scene, object fraction of every cell
    (row-major, as the features); ``masks``: per scene, work-resolution object coverage (float32 0..1).
    ``n_objects``: per scene, the objects placed.
    """

    images: list[np.ndarray]
    fractions: list[np.ndarray]
    masks: list[np.ndarray]
    n_objects: list[int]


def cell_fractions(mask: np.ndarray, cell_size: int) -> np.ndarray:
    """Mean of ``mask`` over each cell of :func:`cell_grid` (row-major).
    ``cell_size``: a cell's side in pixels."""
    h, w = mask.shape
    g = cell_grid(h, w, cell_size)
    sums = np.add.reduceat(np.add.reduceat(mask.astype(np.float64), g.ys[:-1], axis=0), g.xs[:-1], axis=1)
    area = np.diff(g.ys)[:, None] * np.diff(g.xs)[None, :]
    return (sums / area).ravel()


def _random_distortion(rng: np.random.Generator) -> Distortion:
    return Distortion(
        gain=float(rng.uniform(0.7, 1.3)),
        gamma=float(rng.uniform(0.8, 1.25)),
        blur_sigma=float(rng.choice([0.0, 0.0, rng.uniform(0.3, 1.5)])),
        motion_blur=int(rng.choice([0, 0, 0, int(rng.integers(3, 9))])),
        noise_sigma=float(rng.uniform(0.0, 5.0)),
        jpeg_quality=int(rng.integers(40, 95)) if rng.random() < 0.3 else None,
    )


def generate_scenes(
    objects: dict[str, np.ndarray],
    backgrounds: Sequence[np.ndarray],
    n_scenes: int,
    work_size: int,
    cell_size: int,
    frame_size: tuple[int, int] = (640, 480),
    area_fraction: tuple[float, float] = (0.03, 0.3),
    empty_fraction: float = 0.15,
    max_objects: int = 3,
    seed: int | None = 0,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> SceneSet:
    """Compose ``n_scenes`` frames with :func:`objrec.scenes.compose_scene`: 0..``max_objects`` enrolled
    objects each (a share ``empty_fraction`` with none), random pose, partial visibility at the border,
    occlusion and photometric distortion; reduced to the working resolution.
    ``objects``: the enrolled objects' images by name; ``backgrounds``: BGR uint8 backgrounds; ``work_size``: the
    working resolution's longer side; ``cell_size``: a cell's side in working pixels; ``frame_size``: the composited
    frames' (width, height); ``area_fraction``: the range an object's area over the frame's is drawn from; ``seed``:
    seeds the draws; ``progress``: wraps the scene loop (a tqdm, say; None: none)."""
    if not objects:
        raise ValueError("objects: need at least one enrolled object to train a prefilter")
    if not backgrounds:
        raise ValueError("backgrounds: need at least one background image")
    rng = np.random.default_rng(seed)
    names = list(objects)
    fw, fh = frame_size
    wh, ww = work_shape(fh, fw, work_size)
    out = SceneSet([], [], [], [])
    it: Iterable[int] = range(n_scenes)
    if progress is not None:
        it = progress(it)
    for _ in it:
        bg = backgrounds[int(rng.integers(len(backgrounds)))]
        if rng.random() < empty_fraction:
            chosen: list[str] = []
        else:
            k = int(rng.integers(1, min(max_objects, len(names)) + 1))
            chosen = list(rng.choice(names, k, replace=False))
        scene = compose_scene(
            bg,
            {n: objects[n] for n in chosen},
            rng,
            frame_size=frame_size,
            area_fraction=area_fraction,
            max_rotation=60.0,
            max_tilt=0.2,
            inside=bool(rng.random() < 0.7),
            occlusion=float(rng.choice([0.0, 0.0, rng.uniform(0.05, 0.3)])),
            distortion=_random_distortion(rng),
        )
        img = cv2.resize(scene.image, (ww, wh), interpolation=cv2.INTER_AREA)
        mask = cv2.resize((scene.object_mask > 0).astype(np.float32), (ww, wh), interpolation=cv2.INTER_AREA)
        out.images.append(img)
        out.masks.append(mask)
        out.fractions.append(cell_fractions(mask, cell_size))
        out.n_objects.append(len(chosen))
    return out
