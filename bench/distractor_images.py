"""Generated distractor objects for catalogue benchmarks: covers, tiles of several photos, warped crops.

Three kinds, in a fixed rotation over the object index (:data:`KIND_CYCLE`):

* ``cover``: a generated cover on a canvas of random size and aspect: a linear gradient at a random angle, a
  radial gradient or two colour fields as the background; a random layout of panels, filled and outlined
  shapes and lines; 2-6 lines of text, each in one of OpenCV's Hershey fonts (italic or not) at its own scale,
  thickness, colour and alignment, some set vertically on a spine; print grain;
* ``tiles``: 2-9 crops of *different* photos laid out on a grid or a random guillotine split of the canvas,
  each crop resized to its cell, with thin gutters half of the time (a poster, a catalogue page, a box side);
* ``warp``: a crop (45-90% of each side) of one photo, warped by a random perspective, rotated by a multiple of
  90 degrees half of the time, with a random gain, gamma and hue shift.

Each object is drawn from its own generator seeded by ``(seed, index)``, so any object can be made again alone
and a partly written folder is completed by a rerun. The source photos are read by path, so no source needs to
fit in memory.
"""

from __future__ import annotations

import os
from pathlib import Path

import cv2
import numpy as np

__all__ = ["FONTS", "KIND_CYCLE", "generated_cover", "tiled_crops", "crop_and_warp", "distractor", "write_distractors"]

#: OpenCV's Hershey fonts; each may also be drawn italic (``cv2.FONT_ITALIC``).
FONTS = (
    cv2.FONT_HERSHEY_SIMPLEX,
    cv2.FONT_HERSHEY_PLAIN,
    cv2.FONT_HERSHEY_DUPLEX,
    cv2.FONT_HERSHEY_COMPLEX,
    cv2.FONT_HERSHEY_TRIPLEX,
    cv2.FONT_HERSHEY_COMPLEX_SMALL,
    cv2.FONT_HERSHEY_SCRIPT_SIMPLEX,
    cv2.FONT_HERSHEY_SCRIPT_COMPLEX,
)
#: The kind of object ``i`` is ``KIND_CYCLE[i % len(KIND_CYCLE)]``.
KIND_CYCLE = ("cover", "tiles", "cover", "tiles", "warp")
_LETTERS = np.array(list("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789&-:!?'"))


def _colour(rng: np.random.Generator) -> tuple[int, int, int]:
    return tuple(int(v) for v in rng.integers(0, 256, 3))


def _background(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    c0, c1 = rng.integers(0, 256, 3).astype(np.float32), rng.integers(0, 256, 3).astype(np.float32)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    kind = int(rng.integers(3))
    if kind == 0:  # linear gradient at a random angle
        a = rng.uniform(0, np.pi)
        t = xs * np.cos(a) + ys * np.sin(a)
    elif kind == 1:  # radial gradient about a random centre
        t = np.hypot(xs - rng.uniform(0, w), ys - rng.uniform(0, h))
    else:  # two fields split by a random line
        t = ((xs - rng.uniform(0, w)) * rng.normal() + (ys - rng.uniform(0, h)) * rng.normal() > 0).astype(np.float32)
    t = (t - t.min()) / max(float(np.ptp(t)), 1e-6)
    return np.ascontiguousarray(((1 - t[..., None]) * c0 + t[..., None] * c1).astype(np.uint8))


def _shapes(img: np.ndarray, rng: np.random.Generator, count: int) -> None:
    h, w = img.shape[:2]
    for _ in range(count):
        colour, kind = _colour(rng), int(rng.integers(6))
        p = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        q = (int(rng.integers(0, w)), int(rng.integers(0, h)))
        fill = int(rng.choice([-1, 1, 2, 4]))
        if kind == 0:
            cv2.circle(img, p, int(rng.integers(3, max(4, w // 5))), colour, fill, cv2.LINE_AA)
        elif kind == 1:
            cv2.rectangle(img, p, q, colour, fill, cv2.LINE_AA)
        elif kind == 2:
            cv2.line(img, p, q, colour, int(rng.integers(1, 6)), cv2.LINE_AA)
        elif kind == 3:
            axes = (int(rng.integers(4, max(5, w // 4))), int(rng.integers(4, max(5, h // 4))))
            cv2.ellipse(img, p, axes, float(rng.uniform(0, 180)), 0, 360, colour, fill, cv2.LINE_AA)
        elif kind == 4:
            pts = rng.integers(0, [w, h], (int(rng.integers(3, 7)), 2)).astype(np.int32)
            cv2.fillPoly(img, [pts], colour, cv2.LINE_AA)
        else:  # a panel: a flat block, as covers set text on
            x0, y0 = min(p[0], q[0]), min(p[1], q[1])
            img[y0 : y0 + int(rng.integers(8, max(9, h // 4))), x0 : max(q[0], p[0])] = colour


def _word(rng: np.random.Generator) -> str:
    return "".join(rng.choice(_LETTERS, int(rng.integers(2, 10))))


def _text_line(img: np.ndarray, rng: np.random.Generator, y: int) -> None:
    h, w = img.shape[:2]
    font = int(rng.choice(FONTS)) | (cv2.FONT_ITALIC if rng.random() < 0.25 else 0)
    text = " ".join(_word(rng) for _ in range(int(rng.integers(1, 4))))
    scale, thick = float(rng.uniform(0.5, 2.6)), int(rng.integers(1, 5))
    (tw, th), _ = cv2.getTextSize(text, font, scale, thick)
    if tw > w * 0.95:  # shrink to fit the width
        scale *= w * 0.95 / tw
        (tw, th), _ = cv2.getTextSize(text, font, scale, thick)
    x = int(rng.choice([0.03 * w, (w - tw) / 2, w - tw - 0.03 * w]))
    cv2.putText(img, text, (max(0, x), y), font, scale, _colour(rng), thick, cv2.LINE_AA)


def generated_cover(rng: np.random.Generator) -> np.ndarray:
    """A generated cover (BGR uint8), 220-560 px wide, aspect 0.7-1.6 (height / width): background, shapes and
    panels, text lines in varied fonts, sizes and alignments, sometimes a vertical spine title, grain."""
    w = int(rng.integers(220, 561))
    h = int(w * rng.uniform(0.7, 1.6))
    img = _background(rng, w, h)
    _shapes(img, rng, int(rng.integers(8, 40)))
    lines = int(rng.integers(2, 7))
    for y in np.sort(rng.uniform(0.1, 0.97, lines)) * h:
        _text_line(img, rng, int(y))
    if rng.random() < 0.3:  # a title set vertically along one side
        side = np.zeros((max(24, w // 6), h, 3), np.uint8) + np.uint8(rng.integers(0, 256))
        _text_line(side, rng, side.shape[0] - 6)
        side = np.ascontiguousarray(np.rot90(side, 1 if rng.random() < 0.5 else 3))
        x0 = 0 if rng.random() < 0.5 else w - side.shape[1]
        img[:, x0 : x0 + side.shape[1]] = side[:h]
    grain = rng.normal(0, rng.uniform(1, 6), img.shape)
    return np.clip(img + grain, 0, 255).astype(np.uint8)


def _cells(rng: np.random.Generator, w: int, h: int) -> list[tuple[int, int, int, int]]:
    """Boxes (x0, y0, x1, y1) covering a w x h canvas: a regular grid or a random guillotine split."""
    if rng.random() < 0.5:
        rows, cols = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        if rows * cols == 1:
            cols = 2
        xs, ys = np.linspace(0, w, cols + 1).astype(int), np.linspace(0, h, rows + 1).astype(int)
        return [(xs[c], ys[r], xs[c + 1], ys[r + 1]) for r in range(rows) for c in range(cols)]
    boxes = [(0, 0, w, h)]
    for _ in range(int(rng.integers(1, 6))):
        i = int(np.argmax([(b[2] - b[0]) * (b[3] - b[1]) for b in boxes]))
        x0, y0, x1, y1 = boxes.pop(i)
        if x1 - x0 >= y1 - y0:
            cut = int(x0 + (x1 - x0) * rng.uniform(0.3, 0.7))
            boxes += [(x0, y0, cut, y1), (cut, y0, x1, y1)]
        else:
            cut = int(y0 + (y1 - y0) * rng.uniform(0.3, 0.7))
            boxes += [(x0, y0, x1, cut), (x0, cut, x1, y1)]
    return boxes


def _crop(src: np.ndarray, rng: np.random.Generator, aspect: float) -> np.ndarray:
    """A random crop of ``src`` with width / height ``aspect``, 40-100% of the largest such crop."""
    h, w = src.shape[:2]
    cw, ch = (w, int(w / aspect)) if w / h < aspect else (int(h * aspect), h)
    s = rng.uniform(0.4, 1.0)
    cw, ch = max(8, int(cw * s)), max(8, int(ch * s))
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    return src[y0 : y0 + ch, x0 : x0 + cw]


def tiled_crops(rng: np.random.Generator, sources: list[Path]) -> np.ndarray:
    """Crops of different photos from ``sources`` tiled into one object (BGR uint8), 300-600 px wide.

    Each cell of the layout (:func:`_cells`) gets a crop of its own photo, none repeated within the object."""
    w = int(rng.integers(300, 601))
    h = int(w * rng.uniform(0.6, 1.5))
    img = np.full((h, w, 3), _colour(rng), np.uint8)
    boxes = _cells(rng, w, h)
    picks = rng.choice(len(sources), size=min(len(boxes), len(sources)), replace=False)
    gutter = int(rng.integers(2, 8)) if rng.random() < 0.5 else 0
    for (x0, y0, x1, y1), k in zip(boxes, picks, strict=False):
        src = cv2.imread(str(sources[int(k)]), cv2.IMREAD_COLOR)
        bw, bh = x1 - x0 - gutter, y1 - y0 - gutter
        if src is None or bw < 4 or bh < 4:
            continue
        tile = _crop(src, rng, bw / bh)
        img[y0 : y0 + bh, x0 : x0 + bw] = cv2.resize(tile, (bw, bh), interpolation=cv2.INTER_AREA)
    return img


def crop_and_warp(src: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A crop of ``src`` under a random perspective, quarter-turn, gain, gamma and hue shift, 300-560 px."""
    h, w = src.shape[:2]
    cw, ch = int(w * rng.uniform(0.45, 0.9)), int(h * rng.uniform(0.45, 0.9))
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    img = src[y0 : y0 + ch, x0 : x0 + cw]
    side = int(rng.integers(300, 561))
    s = side / max(cw, ch)
    ow, oh = max(32, int(cw * s)), max(32, int(ch * s))
    quad = np.float32([[0, 0], [cw, 0], [cw, ch], [0, ch]])
    dst = np.float32([[0, 0], [ow, 0], [ow, oh], [0, oh]] + rng.uniform(-0.12, 0.12, (4, 2)) * [ow, oh])
    dst -= dst.min(0)
    size = (int(np.ceil(dst[:, 0].max())), int(np.ceil(dst[:, 1].max())))
    H = cv2.getPerspectiveTransform(quad, dst)
    img = cv2.warpPerspective(img, H, size, flags=cv2.INTER_AREA, borderMode=cv2.BORDER_REFLECT)
    if rng.random() < 0.5:
        img = np.ascontiguousarray(np.rot90(img, int(rng.integers(1, 4))))
    gain, gamma = rng.uniform(0.75, 1.25), rng.uniform(0.8, 1.25)
    lut = np.clip(255.0 * np.clip(gain * np.arange(256) / 255.0, 0, 1) ** gamma, 0, 255).astype(np.uint8)
    hsv = cv2.cvtColor(cv2.LUT(img, lut), cv2.COLOR_BGR2HSV)
    hsv[..., 0] = ((hsv[..., 0].astype(np.int32) + int(rng.integers(0, 180))) % 180).astype(np.uint8)
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)


def distractor(index: int, seed: int, sources: list[Path]) -> np.ndarray:
    """Generated object ``index`` of the series ``seed`` (its kind from :data:`KIND_CYCLE`), BGR uint8."""
    rng = np.random.default_rng([seed, index])
    kind = KIND_CYCLE[index % len(KIND_CYCLE)]
    if kind == "cover" or not sources:
        return generated_cover(rng)
    if kind == "tiles" and len(sources) >= 2:
        return tiled_crops(rng, sources)
    src = cv2.imread(str(sources[int(rng.integers(len(sources)))]), cv2.IMREAD_COLOR)
    return generated_cover(rng) if src is None else crop_and_warp(src, rng)


def _write_some(out: Path, indices: list[int], seed: int, sources: list[Path], quality: int) -> None:
    """Write the generated objects ``indices`` into ``out`` (one worker's share of :func:`write_distractors`)."""
    for i in indices:
        path = out / f"gen{i:06d}.jpg"
        tmp = path.with_name(f".{path.stem}.part.jpg")
        if not cv2.imwrite(str(tmp), distractor(i, seed, sources), [cv2.IMWRITE_JPEG_QUALITY, quality]):
            raise OSError(f"{tmp}: could not be written")
        os.replace(tmp, path)


def write_distractors(
    out: Path, n: int, sources: list[Path], seed: int = 0, quality: int = 90, workers: int | None = None
) -> list[Path]:
    """The paths of generated objects ``0 .. n-1`` in ``out`` (``gen<index>.jpg``, JPEG), writing those missing.

    Parameters
    ----------
    out : Path
        The cache folder (made when absent).
    n : int
        How many objects, from index 0.
    sources : list of Path
        Photos that tiles and warps are cut from.
    seed : int
        The series: object ``i`` of series ``seed`` is always the same image.
    quality : int
        JPEG quality.
    workers : int or None
        Processes writing the missing objects (default: one per core this process may run on); 1 writes them
        here.

    Returns
    -------
    list of Path
        ``n`` paths, in index order.

    Notes
    -----
    Each object is a function of its index and ``seed`` alone, so the files are the same whichever worker writes
    them. Each file is written under a temporary name and renamed, so an interrupted run leaves no partial image
    and a rerun writes only what is missing."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"gen{i:06d}.jpg" for i in range(n)]
    missing = [i for i, path in enumerate(paths) if not path.exists()]
    if workers is None:  # one per core, where the batch is worth the processes' start
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        workers = min(cores, len(missing) // 200)
    if workers <= 1 or len(missing) < 2:
        _write_some(out, missing, seed, sources, quality)
        return paths
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    step = max(1, min(500, len(missing) // workers))
    parts = [missing[k : k + step] for k in range(0, len(missing), step)]
    ctx = multiprocessing.get_context("spawn")  # no fork of a process whose libraries hold threads
    # One OpenCV thread per worker: the workers are the parallelism.
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=cv2.setNumThreads, initargs=(1,)) as pool:
        for f in [pool.submit(_write_some, out, part, seed, list(sources), quality) for part in parts]:
            f.result()
    return paths
