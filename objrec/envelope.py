"""The operating envelope of a reference image: the views of it a camera would see that objrec recognises.

The image is enrolled alone in a temporary database, exactly as ``objrec enroll`` would store it (same reading,
resizing and detectors), and recognised in a fixed grid of rendered views (:data:`GRID`). Each view is the image
composited by the scene composer (:func:`~objrec.scenes.compose_scene`) into a 640x480 frame over the embedded
sample background (:func:`~objrec.data.sample_background`), then distorted photometrically
(:func:`~objrec.scenes.apply_photometric`).

The grid sweeps one axis at a time from a benign base view (the object's longer side 240 px, centred, facing the
camera, a little sensor noise), so that each limit is read off its own axis, plus a few combined views that mix
moderate changes the way a hand-held shot does:

========== ============================================================== ===========================
axis       values                                                          limit read off the axis
========== ============================================================== ===========================
size       object's longer side 60-400 px                                  smallest size found
tilt       out-of-plane rotation about the vertical axis, 10-70 degrees    steepest tilt found
tilt_x     out-of-plane rotation about the horizontal axis, 20-60 degrees  steepest tilt_x found
rotation   in-plane rotation, 45-270 degrees                               (share found)
blur       Gaussian blur sigma 0.5-3 px                                    strongest blur found
noise      additive Gaussian noise sigma 5-30 grey levels                  strongest noise found
gamma      gamma 0.4-3.0                                                   (share found)
jpeg       JPEG quality 50 down to 6                                       lowest quality found
combined   eight mixed views                                               (share found)
========== ============================================================== ===========================

A limit is the farthest value reached from the base along the axis while every view on the way is found (a
single lucky view past a miss does not extend it); it is None when the base view itself is missed.

Tilts are rendered with a pinhole camera of focal length :data:`FOCAL_PX` (about 62 degrees of horizontal field
of view on the 640 px frame, a phone's main camera): the object's plane is rotated about its centre, seen from the
distance at which its fronto-parallel view has the base size, so the near side grows and the far side shrinks as
in a real photo (Hartley and Zisserman 2004, section 8.1.1: a plane's image under ``K [r1 r2 t]``).

A view is *found* when the recognizer (no budget, no prefilter, no tracking) reports the object with a mean corner
error of at most :func:`corner_tolerance` against the ground truth: 5 px, or 5% of the object's size in the frame
when that is larger (an outline 5% off is visibly misplaced, and 5 px is the coarsest level of the evaluation's
homography accuracy).

Which views an image is found in depends a little on the clutter behind it and on the sensor noise, both drawn
from a seed: near its limits a view can go either way. ``runs`` renders every view again over new clutter and
noise (seeds ``seed``, ``seed + 1``, ...): the found share is then the share of all rendered views found, and a
view counts as found (for the limits and the plot) when it was found in more than half of its runs.
:data:`ENVELOPE_RUNS` runs, as ``objrec rate --envelope`` measures by default, give a share that a repeated
measurement agrees with far better than one run's.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.data import sample_background
from objrec.modeldb import ModelDB
from objrec.recognizer import Recognizer
from objrec.scenes import CAMERA_FOCAL_PX, Distortion, camera_view, compose_scene

__all__ = [
    "FRAME_SIZE",
    "FOCAL_PX",
    "BASE_SIZE_PX",
    "EnvelopeView",
    "GRID",
    "CALIBRATION_VIEWS",
    "view_homography",
    "corner_tolerance",
    "ViewResult",
    "Envelope",
    "measure_envelope",
    "ENVELOPE_RUNS",
]

#: The rendered frame (w, h): a VGA camera frame.
FRAME_SIZE = (640, 480)
#: Focal length of the rendering camera in pixels: about 62 degrees of horizontal field of view at 640 px.
FOCAL_PX = CAMERA_FOCAL_PX
#: The object's longer side in the base view, in frame pixels.
BASE_SIZE_PX = 240.0
#: Sensor noise of the base view (grey levels): a clean frame of a real camera is never noise-free.
BASE_NOISE = 2.0
#: Floor and relative part of the corner tolerance (see :func:`corner_tolerance`).
TOLERANCE_PX = 5.0
TOLERANCE_REL = 0.05
#: Runs (each over its own clutter and noise) that ``objrec rate --envelope`` measures by default.
ENVELOPE_RUNS = 4


@dataclass(frozen=True)
class EnvelopeView:
    """One view of the grid: where the object lies in the frame and how the frame is degraded.

    Attributes
    ----------
    axis : str
        The sweep it belongs to (``"base"``, ``"size"``, ``"tilt"``, ... ``"combined"``).
    value : float
        Its value on that axis (for ``"base"`` and ``"combined"``: 0 and the view's number).
    size_px : float
        The object's longer side in frame pixels before tilting.
    rotation_deg : float
        In-plane rotation, counter-clockwise as seen in the image.
    tilt_deg : float
        Out-of-plane rotation of the object's plane.
    tilt_axis : {"y", "x"}
        About the vertical (``"y"``, a side view) or horizontal (``"x"``, a view from above) axis.
    distortion : Distortion
        Photometric changes of the whole frame.
    """

    axis: str
    value: float
    size_px: float = BASE_SIZE_PX
    rotation_deg: float = 0.0
    tilt_deg: float = 0.0
    tilt_axis: str = "y"
    distortion: Distortion = field(default_factory=lambda: Distortion(noise_sigma=BASE_NOISE))

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "value": self.value,
            "size_px": self.size_px,
            "rotation_deg": self.rotation_deg,
            "tilt_deg": self.tilt_deg,
            "tilt_axis": self.tilt_axis,
            "distortion": dict(self.distortion.__dict__),
        }


def _noisy(**kw: Any) -> Distortion:
    return Distortion(**{"noise_sigma": BASE_NOISE, **kw})


def _build_grid() -> tuple[EnvelopeView, ...]:
    base = EnvelopeView("base", 0.0)
    views = [base]
    views += [replace(base, axis="size", value=s, size_px=s) for s in (60, 70, 80, 90, 100, 115, 130, 150, 175, 200)]
    views += [replace(base, axis="size", value=s, size_px=s) for s in (280, 330, 360, 400)]
    views += [replace(base, axis="tilt", value=t, tilt_deg=t) for t in (10, 20, 30, 40, 50, 60, 65, 70)]
    views += [replace(base, axis="tilt_x", value=t, tilt_deg=t, tilt_axis="x") for t in (20, 40, 60)]
    views += [replace(base, axis="rotation", value=r, rotation_deg=r) for r in (45, 90, 135, 180, 270)]
    views += [replace(base, axis="blur", value=b, distortion=_noisy(blur_sigma=b)) for b in (0.5, 1, 1.5, 2, 2.5, 3)]
    views += [replace(base, axis="noise", value=n, distortion=Distortion(noise_sigma=n)) for n in (5, 10, 15, 20, 30)]
    views += [replace(base, axis="gamma", value=g, distortion=_noisy(gamma=g)) for g in (0.4, 0.6, 1.6, 2.2, 3.0)]
    views += [replace(base, axis="jpeg", value=q, distortion=_noisy(jpeg_quality=q)) for q in (50, 30, 20, 12, 6)]
    mixed = [  # (size, rotation, tilt, tilt axis, distortion): moderate changes together, as in a hand-held shot
        (150, 15, 30, "y", Distortion(blur_sigma=1.0, noise_sigma=6, jpeg_quality=70)),
        (100, -30, 20, "y", Distortion(blur_sigma=0.8, noise_sigma=8, jpeg_quality=60)),
        (300, 10, 50, "y", Distortion(gamma=1.4, blur_sigma=1.5, noise_sigma=5, jpeg_quality=75)),
        (200, 90, 40, "x", Distortion(blur_sigma=2.0, noise_sigma=10)),
        (80, 45, 0, "y", Distortion(noise_sigma=6, jpeg_quality=50)),
        (240, 0, 60, "y", Distortion(gamma=0.6, blur_sigma=1.0, noise_sigma=8)),
        (120, -60, 40, "y", Distortion(blur_sigma=1.5, noise_sigma=12, jpeg_quality=40)),
        (350, 180, 20, "x", Distortion(gamma=2.0, blur_sigma=2.5, noise_sigma=6, jpeg_quality=50)),
    ]
    views += [EnvelopeView("combined", float(i), s, r, t, a, d) for i, (s, r, t, a, d) in enumerate(mixed, start=1)]
    return tuple(views)


#: The fixed grid of views, in this order on every call.
GRID: tuple[EnvelopeView, ...] = _build_grid()

#: A fixed subset of :data:`GRID` (indices) for measuring many images in one run: about one view in four, taken
#: from every axis in proportion to its number of views and spread over its range, so that the subset's found
#: share estimates the whole grid's.
CALIBRATION_VIEWS: tuple[int, ...] = tuple(
    i
    for i, v in enumerate(GRID)
    if v.axis == "base"
    or (v.axis == "size" and v.value in (60, 100, 175, 330))
    or (v.axis == "tilt" and v.value in (30, 60))
    or (v.axis == "tilt_x" and v.value == 40)
    or (v.axis == "rotation" and v.value == 135)
    or (v.axis == "blur" and v.value in (1, 2.5))
    or (v.axis == "noise" and v.value == 20)
    or (v.axis == "gamma" and v.value == 2.2)
    or (v.axis == "jpeg" and v.value == 12)
    or (v.axis == "combined" and v.value in (3, 7))
)

#: Ordered axes: the direction in which a view gets harder (+1: larger values, -1: smaller ones).
_ORDERED = {"size": -1, "tilt": +1, "tilt_x": +1, "blur": +1, "noise": +1, "jpeg": -1}
#: The base view's value on each ordered axis (the start of the walk outwards).
_BASE_VALUE = {"size": BASE_SIZE_PX, "tilt": 0.0, "tilt_x": 0.0, "blur": 0.0, "noise": BASE_NOISE, "jpeg": 100.0}


def view_homography(
    model_size: tuple[int, int], view: EnvelopeView, frame_size: tuple[int, int] = FRAME_SIZE
) -> np.ndarray:
    """The model→frame homography of ``view``: the object centred, scaled to ``view.size_px``, tilted by a
    pinhole camera of focal length :data:`FOCAL_PX`, rotated (:func:`~objrec.scenes.camera_view`).

    Parameters
    ----------
    model_size : (w, h)
        The model image's size in pixels.
    view : EnvelopeView
    frame_size : (w, h)

    Returns
    -------
    (3, 3) float64 ndarray
        Maps model pixels to frame pixels, ``H[2, 2] = 1``.
    """
    return camera_view(model_size, view.size_px, frame_size, FOCAL_PX, view.rotation_deg, view.tilt_deg, view.tilt_axis)


def corner_tolerance(corners: np.ndarray) -> float:
    """The largest mean corner error (px) of a found view: 5 px, or 5% of the object's size in the frame (the
    longer side of its outline's bounding box) when that is larger."""
    extent = float(np.ptp(np.asarray(corners, np.float64), axis=0).max())
    return max(TOLERANCE_PX, TOLERANCE_REL * extent)


@dataclass(frozen=True)
class ViewResult:
    """How one view of the grid was recognised.

    Attributes
    ----------
    index : int
        The view's index in :data:`GRID`.
    view : EnvelopeView
    found : bool
        Reported with a mean corner error within ``tolerance`` (in more than half of the runs).
    reported : bool
        Reported at all (possibly misplaced; in any run).
    corner_error : float or None
        Mean distance (px) of the reported corners from the true ones (the median over the runs that reported
        it); None when not reported.
    tolerance : float
        :func:`corner_tolerance` of the view.
    inliers : int
        The verification's inliers (median over the runs).
    latency_ms : float
        The recognizer's time on the frame (mean over the runs).
    found_runs, runs : int
        In how many of the view's runs it was found (default: 1 when ``found``, else 0), of how many.
    """

    index: int
    view: EnvelopeView
    found: bool
    reported: bool
    corner_error: float | None
    tolerance: float
    inliers: int
    latency_ms: float
    found_runs: int | None = None
    runs: int = 1

    def __post_init__(self) -> None:
        if self.found_runs is None:
            object.__setattr__(self, "found_runs", int(self.found))

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            **self.view.to_dict(),
            "found": self.found,
            "reported": self.reported,
            "corner_error": self.corner_error,
            "tolerance": self.tolerance,
            "inliers": self.inliers,
            "latency_ms": self.latency_ms,
            "found_runs": self.found_runs,
            "runs": self.runs,
        }


@dataclass
class Envelope:
    """The operating envelope of one reference image over the views of :data:`GRID` that were measured.

    Attributes
    ----------
    image_size : (w, h)
        The image as enrolment stores it.
    views : list of ViewResult
        One per measured view, in grid order (every view not found when the image cannot be enrolled).
    seconds : float
        Wall time of the measurement, enrolment included.
    error : str or None
        Why the image could not be enrolled (no features); None when it was.
    """

    image_size: tuple[int, int]
    views: list[ViewResult]
    seconds: float = 0.0
    error: str | None = None

    @property
    def runs(self) -> int:
        """Runs per view (each over its own clutter and noise)."""
        return max((r.runs for r in self.views), default=1)

    @property
    def found_share(self) -> float:
        """Share of the rendered views (every run of every measured view) that were found."""
        return _share(self.views)

    def axis_share(self, axis: str) -> float | None:
        """Share found among the rendered views of ``axis``; None when none was measured."""
        views = [r for r in self.views if r.view.axis == axis]
        return _share(views) if views else None

    def limit(self, axis: str) -> float | None:
        """The farthest value of an ordered axis (size, tilt, tilt_x, blur, noise, jpeg) reached from the base
        view with every measured view on the way found; None when the base view was measured and missed."""
        if axis not in _ORDERED:
            raise ValueError(f"axis: expected one of {sorted(_ORDERED)}, got {axis!r}")
        base = [r for r in self.views if r.view.axis == "base"]
        if (base and not base[0].found) or self.error is not None:
            return None
        d = _ORDERED[axis]
        start = _BASE_VALUE[axis]
        walk = sorted(
            (r for r in self.views if r.view.axis == axis and d * (r.view.value - start) > 0),
            key=lambda r: d * r.view.value,
        )
        reached = start
        for r in walk:
            if not r.found:
                break
            reached = r.view.value
        return float(reached)

    @property
    def smallest_size_px(self) -> float | None:
        """Smallest longer side (frame pixels) at which the object is still found, from the size axis."""
        return self.limit("size")

    @property
    def smallest_width_px(self) -> float | None:
        """:attr:`smallest_size_px` as the object's width in frame pixels."""
        s = self.smallest_size_px
        w, h = self.image_size
        return None if s is None else float(s * w / max(w, h))

    @property
    def steepest_tilt_deg(self) -> float | None:
        """Steepest side view (degrees about the vertical axis) still found."""
        return self.limit("tilt")

    @property
    def strongest_blur_sigma(self) -> float | None:
        """Strongest Gaussian blur (sigma, px) still found."""
        return self.limit("blur")

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form: the summary figures, every axis's share and limit, and the per-view table."""
        axes = list(dict.fromkeys(r.view.axis for r in self.views))
        return {
            "image_size": list(self.image_size),
            "error": self.error,
            "seconds": self.seconds,
            "n_views": len(self.views),
            "runs": self.runs,
            "found_share": self.found_share,
            "smallest_size_px": self.smallest_size_px,
            "smallest_width_px": self.smallest_width_px,
            "steepest_tilt_deg": self.steepest_tilt_deg,
            "strongest_blur_sigma": self.strongest_blur_sigma,
            "limits": {a: self.limit(a) for a in _ORDERED},
            "axis_share": {a: self.axis_share(a) for a in axes},
            "corner_tolerance": {"px": TOLERANCE_PX, "relative": TOLERANCE_REL},
            "views": [r.to_dict() for r in self.views],
        }

    def plot(self, path: str | os.PathLike) -> Path:
        """Write a small PNG: one row per axis, a cell per view (green found, orange reported but misplaced, red
        missed) labelled with its value, and the summary figures on top. Returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not cv2.imwrite(str(path), _draw(self)):
            raise OSError(f"{path}: could not write the envelope plot")
        return path


def _share(views: Sequence[ViewResult]) -> float:
    """Found runs over all runs of ``views`` (0 for none)."""
    runs = sum(r.runs for r in views)
    return sum(r.found_runs or 0 for r in views) / runs if runs else 0.0  # (never None after __post_init__)


def _draw(env: Envelope) -> np.ndarray:
    """The envelope as a BGR picture (see :meth:`Envelope.plot`)."""
    axes = list(dict.fromkeys(r.view.axis for r in env.views))
    cell, label_w, top = 34, 78, 44
    n = max((sum(r.view.axis == a for r in env.views) for a in axes), default=1)
    img = np.full((top + cell * max(len(axes), 1) + 8, label_w + cell * n + 8, 3), 255, np.uint8)
    font = cv2.FONT_HERSHEY_SIMPLEX

    def text(s: str, xy: tuple[int, int], scale: float = 0.4, color: tuple[int, int, int] = (0, 0, 0)) -> None:
        cv2.putText(img, s, xy, font, scale, color, 1, cv2.LINE_AA)

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:g}"

    runs = f" x {env.runs} runs" if env.runs > 1 else ""
    head = f"found {env.found_share:.0%} of {len(env.views)} views{runs}" + (f"  ({env.error})" if env.error else "")
    text(head, (6, 16))
    text(
        f"min size {fmt(env.smallest_size_px)} px  max tilt {fmt(env.steepest_tilt_deg)} deg  "
        f"max blur {fmt(env.strongest_blur_sigma)}",
        (6, 34),
    )
    for row, axis in enumerate(axes):
        y = top + row * cell
        text(axis, (6, y + cell // 2 + 4))
        for col, r in enumerate(r for r in env.views if r.view.axis == axis):
            x = label_w + col * cell
            color = (80, 180, 60) if r.found else (0, 150, 255) if r.reported else (60, 60, 220)
            cv2.rectangle(img, (x + 1, y + 1), (x + cell - 2, y + cell - 2), color, -1)
            text(fmt(r.view.value), (x + 3, y + cell // 2 + 4), 0.33, (255, 255, 255))
            if r.runs > 1:  # found in how many of its runs
                text(f"{r.found_runs}/{r.runs}", (x + 3, y + cell - 5), 0.28, (255, 255, 255))
    return img


def _recognise_view(rec: Recognizer, name: str, scene_image: np.ndarray, truth: np.ndarray) -> tuple:
    """(reported, mean corner error or None, inliers, latency ms) of ``name`` in one rendered view."""
    result = rec.process(scene_image)
    dets = [d for d in result.detections if d.name == name or d.name.split("#")[0] == name]
    if not dets:
        return False, None, 0, float(result.latency_ms)
    errs = [float(np.linalg.norm(d.corners - truth, axis=1).mean()) for d in dets]
    k = int(np.argmin(errs))
    return True, errs[k], int(dets[k].inliers), float(result.latency_ms)


def _read(image: str | os.PathLike | np.ndarray) -> np.ndarray:
    """The image's pixels as enrolment reads them (a file through :func:`~objrec.imageio.read_image`)."""
    from objrec.imageio import check_frame, read_image, to_bgr

    img = check_frame(image, "image") if isinstance(image, np.ndarray) else read_image(image)
    return to_bgr(img) if img.ndim == 3 else img


def measure_envelope(
    image: str | os.PathLike | np.ndarray,
    *,
    detectors: dict[str, dict[str, Any]] | None = None,
    seed: int = 0,
    progress: bool = False,
    views: Sequence[int] | None = None,
    runs: int = 1,
) -> Envelope:
    """Enrol ``image`` alone and recognise it in the fixed grid of rendered views (:data:`GRID`).

    Parameters
    ----------
    image : path or ndarray
        An image file or a gray/BGR uint8 array, read and enrolled as ``objrec enroll`` would.
    detectors : dict of kind -> parameters, optional
        The database's detectors (default: :data:`~objrec.modeldb.DEFAULT_DETECTORS`), as a database to be
        used has them.
    seed : int
        Seeds the background's clutter and each view's noise: the same seed gives the same frames.
    progress : bool
        Show a progress bar over the views (on stderr).
    views : sequence of int, optional
        Indices into :data:`GRID` to measure (e.g. :data:`CALIBRATION_VIEWS`); default all.
    runs : int
        Render and recognise every view this many times, run ``k`` over the clutter and noise of seed
        ``seed + k`` (so run ``k`` is what a single run with that seed measures); see the module's notes.

    Returns
    -------
    Envelope
        With ``error`` set and every view missed when the image has no features to enrol.

    Raises
    ------
    InputError
        When the file cannot be read or is not an 8-bit image.

    Examples
    --------
    >>> from objrec.data import sample_objects  # doctest: +SKIP
    >>> env = measure_envelope(sample_objects()["cover"])  # doctest: +SKIP
    >>> env.found_share, env.smallest_width_px, env.steepest_tilt_deg  # doctest: +SKIP
    """
    from tqdm import tqdm

    from objrec.imageio import InputError

    t0 = time.perf_counter()
    img = _read(image)
    h, w = img.shape[:2]
    indices = _view_indices(views)
    if isinstance(runs, bool) or not isinstance(runs, int | np.integer) or runs < 1:
        raise ValueError(f"runs: expected a whole number >= 1, got {runs!r}")
    runs = int(runs)
    name = "target"
    with tempfile.TemporaryDirectory(prefix="objrec-envelope-") as tmp:
        db = ModelDB.create(Path(tmp) / "db", detectors=detectors)
        try:
            db.enroll(name, img)
        except InputError as e:  # a readable image without features: nothing can be recognised
            missed = [ViewResult(i, GRID[i], False, False, None, 0.0, 0, 0.0, 0, runs) for i in indices]
            return Envelope((w, h), missed, time.perf_counter() - t0, str(e))
        rec = Recognizer(db, budget_ms=None, backend="cpu", prefilter=None, track=False)
        seeds = [seed + k for k in range(runs)]
        backgrounds = [sample_background(FRAME_SIZE, seed=s) for s in seeds]
        shown = tqdm(indices, desc="envelope", unit="view", disable=not progress, dynamic_ncols=True)
        results = [_measure_view(rec, name, img, i, seeds, backgrounds) for i in shown]
    return Envelope((w, h), results, time.perf_counter() - t0)


def _view_indices(views: Sequence[int] | None) -> list[int]:
    """The indices into :data:`GRID` to measure: ``views`` sorted without repeats (default all); ValueError
    naming those out of range."""
    indices = list(range(len(GRID))) if views is None else sorted(set(int(i) for i in views))
    bad = [i for i in indices if not 0 <= i < len(GRID)]
    if bad:
        raise ValueError(f"views: indices into GRID (0..{len(GRID) - 1}) expected, got {bad}")
    return indices


def _measure_view(
    rec: Recognizer, name: str, img: np.ndarray, index: int, seeds: list[int], backgrounds: list[np.ndarray]
) -> ViewResult:
    """View ``index`` of :data:`GRID` of the enrolled ``img`` (``name``), rendered over each of the
    ``backgrounds`` with the clutter and noise of its seed (``seeds``) and recognised by ``rec``, one run each:
    found when more than half of the runs report it within the corner tolerance."""
    v = GRID[index]
    h, w = img.shape[:2]
    H = view_homography((w, h), v)
    tries = []  # (found, reported, corner error, inliers, ms) per run
    for s, background in zip(seeds, backgrounds, strict=True):
        rng = np.random.default_rng([s, index])
        scene = compose_scene(background, {name: img}, rng, homographies={name: H}, distortion=v.distortion)
        truth = scene.objects[0].corners
        reported, err, inliers, ms = _recognise_view(rec, name, scene.image, truth)
        tol = corner_tolerance(truth)
        tries.append((bool(reported and err is not None and err <= tol), bool(reported), err, inliers, ms))
    errors = [t[2] for t in tries if t[2] is not None]
    hits = sum(t[0] for t in tries)
    runs = len(seeds)
    return ViewResult(
        index,
        v,
        2 * hits > runs,
        any(t[1] for t in tries),
        float(np.median(errors)) if errors else None,
        tol,
        int(np.median([t[3] for t in tries])),
        float(np.mean([t[4] for t in tries])),
        hits,
        runs,
    )
