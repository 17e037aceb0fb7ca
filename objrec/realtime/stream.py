"""Stream generator: the scene generator's objects moving over video frames, with per-frame ground truth.

Each object makes passes across the frame: it enters from one edge, drifts (translation, in-plane rotation,
mild perspective) and leaves by another, then returns after a pause. Objects overlap when their paths
cross. Backgrounds come from real video frames, each shown for ``hold`` frames.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from objrec.scenes import Distortion, SceneObject, compose_scene, place_homography

__all__ = ["StreamFrame", "SceneStream", "video_backgrounds", "StreamScore"]


@dataclass
class StreamFrame:
    """One frame of a :class:`SceneStream` with its ground truth.

    Attributes
    ----------
    index : int
        The frame's number in the stream.
    image : np.ndarray
        The composited frame, BGR uint8.
    objects : list of SceneObject
        The ground truth of every object at least partly in view.
    """

    index: int
    image: np.ndarray
    objects: list[SceneObject]  # ground truth of every object at least partly in view


@dataclass
class _Pass:
    start: int
    length: int
    p0: np.ndarray
    p1: np.ndarray
    rot0: float
    rot1: float
    scale: float
    tilt: tuple[float, float]


def video_backgrounds(
    path: str, size: tuple[int, int] = (640, 480), step: int = 1, limit: int | None = None
) -> list[np.ndarray]:
    """Frames of the video file at ``path`` resized to ``size`` (width, height), every ``step``-th, at most
    ``limit`` (None: all)."""
    import cv2

    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ValueError(f"{path}: cannot be opened as a video")
    out: list[np.ndarray] = []
    i = 0
    while limit is None or len(out) < limit:
        ok, img = cap.read()
        if not ok:
            break
        if i % step == 0:
            out.append(cv2.resize(img, size, interpolation=cv2.INTER_AREA))
        i += 1
    cap.release()
    if not out:
        raise ValueError(f"{path}: no frames could be read")
    return out


class SceneStream:
    """A reproducible stream of composited frames with ground truth.

    Parameters
    ----------
    objects : mapping name -> image
    backgrounds : sequence of images
        Each is shown for ``hold`` frames, in order, looping.
    n_frames : int
    frame_size : (w, h)
    seed : int
    height_fraction : (lo, hi)
        Object height as a fraction of the frame height.
    max_rotation : float
        In-plane rotation range in degrees (±).
    max_tilt : float
        Perspective (see :func:`objrec.scenes.place_homography`).
    pass_frames : (lo, hi)
        Duration of one pass across the frame.
    pause_frames : (lo, hi)
        Frames between an object's passes (and before its first, up to ``hi``).
    blur_every : int
        Every ``blur_every``-th frame (0: never) gets motion blur or defocus.
    noise_sigma : float
    antialias : bool
        Objects are reduced by area averaging to their size in the frame before they are warped, as a
        camera's pixels integrate them (:func:`objrec.scenes.warp_object`). Off, bilinear sampling of the
        shrunk objects aliases, and the aliasing pattern moves unlike the object from frame to frame: optical
        flow follows it and tracks drift by a fraction of a pixel per frame.
    """

    def __init__(
        self,
        objects: Mapping[str, np.ndarray],
        backgrounds: Sequence[np.ndarray],
        n_frames: int,
        frame_size: tuple[int, int] = (640, 480),
        seed: int = 0,
        hold: int = 3,
        height_fraction: tuple[float, float] = (0.2, 0.5),
        max_rotation: float = 60.0,
        max_tilt: float = 0.1,
        pass_frames: tuple[int, int] = (90, 200),
        pause_frames: tuple[int, int] = (0, 40),
        blur_every: int = 10,
        noise_sigma: float = 3.0,
        antialias: bool = True,
    ) -> None:
        if not backgrounds:
            raise ValueError("backgrounds: need at least one image")
        self.objects = dict(objects)
        self.backgrounds = list(backgrounds)
        self.n_frames = int(n_frames)
        self.frame_size = frame_size
        self.seed = seed
        self.hold = hold
        self.height_fraction = height_fraction
        self.max_rotation = max_rotation
        self.max_tilt = max_tilt
        self.pass_frames = pass_frames
        self.pause_frames = pause_frames
        self.blur_every = blur_every
        self.noise_sigma = noise_sigma
        self.antialias = antialias
        rng = np.random.default_rng(seed)
        self._passes = {name: self._plan(name, rng) for name in self.objects}

    def __len__(self) -> int:
        return self.n_frames

    def _plan(self, name: str, rng: np.random.Generator) -> list[_Pass]:
        w, h = self.frame_size
        oh, ow = self.objects[name].shape[:2]
        passes = []
        t = int(rng.integers(0, max(1, self.pause_frames[1])))
        while t < self.n_frames:
            length = int(rng.integers(*self.pass_frames))
            scale = rng.uniform(*self.height_fraction) * h / oh
            half = 0.5 * np.hypot(ow, oh) * scale
            # Enter from a random edge, leave by the opposite one; the path crosses the middle third, so
            # the object is fully in view for part of the pass and leaves completely at the end.
            side = int(rng.integers(0, 4))
            mid = np.array([rng.uniform(w / 3, 2 * w / 3), rng.uniform(h / 3, 2 * h / 3)])
            out = {
                0: np.array([-half, mid[1]]),
                1: np.array([w + half, mid[1]]),
                2: np.array([mid[0], -half]),
                3: np.array([mid[0], h + half]),
            }
            p0 = out[side] + rng.normal(0, 20, 2)
            p1 = out[side ^ 1] + rng.normal(0, 20, 2)
            passes.append(
                _Pass(
                    t,
                    length,
                    p0,
                    p1,
                    rng.uniform(-self.max_rotation, self.max_rotation),
                    rng.uniform(-self.max_rotation, self.max_rotation),
                    scale,
                    tuple(rng.uniform(-self.max_tilt, self.max_tilt, 2)),
                )
            )
            t += length + int(rng.integers(*self.pause_frames)) if self.pause_frames[1] > 0 else length
        return passes

    def homographies(self, index: int) -> dict[str, np.ndarray]:
        """Model→frame homographies of the objects on their way across the frame at ``index``."""
        out = {}
        for name, passes in self._passes.items():
            for p in passes:
                if p.start <= index < p.start + p.length:
                    a = (index - p.start) / max(1, p.length - 1)
                    center = (1 - a) * p.p0 + a * p.p1
                    rot = (1 - a) * p.rot0 + a * p.rot1
                    oh, ow = self.objects[name].shape[:2]
                    out[name] = place_homography((ow, oh), tuple(center), p.scale, rot, p.tilt)
                    break
        return out

    def frame(self, index: int) -> StreamFrame:
        rng = np.random.default_rng((self.seed, index))
        bg = self.backgrounds[(index // self.hold) % len(self.backgrounds)]
        Hs = self.homographies(index)
        blur = 0.0
        motion = 0
        if self.blur_every and index % self.blur_every == self.blur_every - 1:
            if rng.random() < 0.5:
                blur = float(rng.uniform(0.8, 1.5))
            else:
                motion = int(rng.integers(3, 7))
        scene = compose_scene(
            bg,
            {n: self.objects[n] for n in Hs},
            rng,
            frame_size=self.frame_size,
            homographies=Hs,
            inside=False,
            distortion=Distortion(blur_sigma=blur, motion_blur=motion, noise_sigma=self.noise_sigma),
            antialias=self.antialias,
        )
        visible = [o for o in scene.objects if o.visible_fraction > 0]
        return StreamFrame(index, scene.image, visible)

    def __iter__(self) -> Iterator[StreamFrame]:
        for i in range(self.n_frames):
            yield self.frame(i)


@dataclass
class StreamScore:
    """Recognition quality over a stream: recall of fully visible objects, false detections, and how soon an
    object is found once it is fully in view.

    Each time an object comes fully into view (its visible share reaches ``min_visible``, in the first frame or
    after a frame in which it was not) is an *entry*; ``entries`` holds, per entry, the frames until it was
    first found (0: in the frame it came fully into view) or None when it was not found before it left full view
    again, and the frames it stayed fully in view. The misses of a recall that tracks objects once found
    gather there: an object found late is missed in every frame before.

    Attributes
    ----------
    visible, found, false, frames : int
        Fully visible object instances; those detected with corners within tolerance; detections of objects
        not in view (or far from where they are); frames scored.
    entries : list of (int or None, int)
        Per entry, the frames until found (None: never) and the frames it stayed fully in view.
    _open : dict of str -> int
        The objects fully in view now, each to its entry in ``entries``.
    """

    visible: int = 0  # fully visible object instances
    found: int = 0  # of those, detected with corners within tolerance
    false: int = 0  # detections of objects not in view (or far from where they are)
    frames: int = 0
    entries: list[tuple[int | None, int]] = field(default_factory=list)  # (frames until found or None, frames in view)
    _open: dict[str, int] = field(default_factory=dict, repr=False)  # object name -> its entry in ``entries``

    def add(
        self, detections: Sequence, truth: Sequence[SceneObject], tol_px: float = 10.0, min_visible: float = 0.95
    ) -> None:
        """Score one frame.

        Parameters
        ----------
        detections : sequence of Detection
            The frame's detections.
        truth : sequence of SceneObject
            The frame's ground truth.
        tol_px : float
            A detection is found when each corner is within this many pixels of the truth's; one beyond five
            times this is false.
        min_visible : float
            An object counts as fully visible from this share in view.
        """
        self.frames += 1
        by_name = {o.name: o for o in truth}
        full = {o.name for o in truth if o.visible_fraction >= min_visible}
        self._open = {n: k for n, k in self._open.items() if n in full}  # out of full view: the entry is over
        for o in truth:
            if o.visible_fraction < min_visible:
                continue
            self.visible += 1
            d = next((d for d in detections if d.name == o.name), None)
            ok = d is not None and bool(np.linalg.norm(d.corners - o.corners, axis=1).max() <= tol_px)
            self.found += ok
            k = self._open.setdefault(o.name, len(self.entries))
            if k == len(self.entries):
                self.entries.append((None, 0))
            first, seen = self.entries[k]
            self.entries[k] = (seen if first is None and ok else first, seen + 1)
        for d in detections:
            obj = by_name.get(d.name)
            if obj is None:
                self.false += 1
            elif (
                obj.visible_fraction >= min_visible
                and np.linalg.norm(d.corners - obj.corners, axis=1).max() > 5 * tol_px
            ):
                self.false += 1  # reported far from where the object is

    @property
    def recall(self) -> float:
        return self.found / self.visible if self.visible else float("nan")

    def entry_summary(self) -> dict:
        """The entries: how many, the share found in the frame they came fully into view, the 90th percentile and
        the largest of the frames until found (an entry never found counts the frames it stayed in view), and
        how many were never found."""
        delays = [seen if first is None else first for first, seen in self.entries]
        return {
            "entries": len(self.entries),
            "found_at_once": sum(first == 0 for first, _ in self.entries) / len(self.entries) if self.entries else None,
            "p90_frames": float(np.percentile(delays, 90)) if delays else None,
            "max_frames": max(delays) if delays else None,
            "never_found": sum(first is None for first, _ in self.entries),
        }

    def to_json(self) -> dict:
        return {
            "frames": self.frames,
            "visible": self.visible,
            "found": self.found,
            "recall": self.recall,
            "false_detections": self.false,
            "entries": self.entry_summary(),
        }
