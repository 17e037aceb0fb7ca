"""The feature stage of the frame pipeline: a search plan in, features in frame pixels out.

Detectors that restrict their own work to boxes (SURF evaluates responses only inside them) get the whole
frame and the plan's regions in one pass; the others (SIFT, whose pyramid covers whatever image it is
given) get one crop per box. On the GPU the frame is uploaded once per frame and crops are device slices;
keypoints and descriptors stay on the device (CuPy-backed :class:`~objrec.types.Features`).
"""

from __future__ import annotations

import inspect
from typing import Any

import cv2
import numpy as np

from objrec.backend import get_array_module, is_device_array, resolve_backend, to_device
from objrec.boxes import union_area
from objrec.types import Features, Regions, SearchPlan

__all__ = ["FeatureStage", "FrameImage", "detector_kinds", "KIND_ORDER"]

#: The order in which detector kinds serve: the first enrolled is primary, the next the escalation.
KIND_ORDER = ("surf", "sift")

#: Crops are never resized below this many pixels per side.
MIN_SIDE = 16
#: A search of regions covering a small part of the frame runs on the crop holding them, grown by this many
#: pixels (the detector's filters reach across a region's edge), when that crop is under this share of the frame.
CROP_MARGIN = 48
CROP_SHARE = 0.6
#: Crops are grown to corners on a grid of this many pixels, and resized crops get sides that are multiples of
#: half of it: a detector keeps its tables and buffers per image size (a few sizes), and crops of a moving
#: object's box would otherwise have a new size in almost every frame.
CROP_QUANTUM = 32


def snap_box(x0: int, y0: int, x1: int, y1: int, w: int, h: int, q: int = CROP_QUANTUM) -> tuple[int, int, int, int]:
    """The box grown to corners on a grid of ``q`` pixels (the far sides clipped to the ``w`` x ``h`` frame).

    Sides that are multiples of ``q`` repeat from frame to frame; a corner on the grid keeps the detector's
    coarser octaves, which sample every few pixels from the image's corner, on the samples of the whole frame.
    """
    x0, y0 = int(x0) // q * q, int(y0) // q * q
    x1, y1 = min(int(w), -(-int(x1) // q) * q), min(int(h), -(-int(y1) // q) * q)
    return x0, y0, x1, y1


def _scaled_side(n: int, scale: float) -> int:
    """A side of ``n`` pixels resized by ``scale``: a multiple of ``CROP_QUANTUM // 2`` (at least ``MIN_SIDE``)."""
    q = CROP_QUANTUM // 2
    return max(MIN_SIDE, int(round(n * scale / q)) * q)


def _resize(img: Any, size: tuple[int, int]) -> Any:
    """Area-average resize to ``size`` (width, height) of a NumPy or CuPy image."""
    if not is_device_array(img):
        return cv2.resize(img, size, interpolation=cv2.INTER_AREA)
    from cupyx.scipy import ndimage

    zoom = (size[1] / img.shape[0], size[0] / img.shape[1])
    out = ndimage.zoom(img.astype(np.float32), zoom, order=1, grid_mode=True, mode="nearest")
    return (out + 0.5).clip(0, 255).astype(np.uint8)


class FrameImage:
    """A frame's gray image as the feature stage reads it: on the host, and on the device once a GPU
    detector first asks for it (uploaded once per frame).

    Parameters
    ----------
    gray : (H, W) uint8 ndarray
    backend : {"cpu", "gpu"}
        Where the detectors that read it run.
    """

    def __init__(self, gray: np.ndarray, backend: str = "cpu") -> None:
        self.host = gray
        self.backend = backend
        self._device: Any = None

    def array(self) -> Any:
        """The image where the detectors run: the host array, or its device copy on the GPU."""
        if self.backend != "gpu":
            return self.host
        if self._device is None:
            import cupy

            self._device = to_device(self.host, cupy)
        return self._device


class FeatureStage:
    """Extract features of each enrolled detector kind from a frame, following a search plan.

    The stage holds the detectors and their configuration, nothing of a frame: the frame's image comes with
    each call. A detector with a sampling step (SURF) has one instance per step, each built with that step,
    so a plan's step never changes a detector another plan uses.

    Parameters
    ----------
    params : dict
        Detector kind to its parameters (as stored in the model database).
    backend : {"auto", "cpu", "gpu"}
        Where the detectors run.
    """

    def __init__(self, params: dict[str, dict[str, Any]], backend: str = "auto") -> None:
        from objrec.features import make_detector

        self.backend = resolve_backend(backend, "FeatureStage")
        self._make = lambda kind, **extra: make_detector(kind, backend=backend, **{**params[kind], **extra})
        self.detectors = {k: self._make(k) for k in params}
        self._stepped: dict[tuple[str, int], Any] = {}
        sig = {k: inspect.signature(d.detect_and_compute).parameters for k, d in self.detectors.items()}
        self._boxes_native = {k: "regions" in s for k, s in sig.items()}
        self._capped = {k: "max_features" in s for k, s in sig.items()}

    def frame_image(self, gray: np.ndarray) -> FrameImage:
        """The frame's image record for this stage's backend."""
        return FrameImage(gray, self.backend)

    def detector(self, kind: str, sample_step: int = 1) -> Any:
        """The detector of ``kind`` at ``sample_step`` (detectors without a step ignore it)."""
        det = self.detectors[kind]
        if getattr(det, "sample_step", sample_step) == sample_step:
            return det
        key = (kind, sample_step)
        if key not in self._stepped:
            self._stepped[key] = self._make(kind, sample_step=sample_step)
        return self._stepped[key]

    def extract(self, image: FrameImage, kind: str, plan: SearchPlan) -> Features:
        """Features of ``kind`` in frame pixels where ``plan`` says to search in ``image`` (at the plan's
        sampling step for SURF, whatever the step the models were enrolled at)."""
        det = self.detector(kind, plan.sample_step)
        kw = {"max_features": plan.max_features} if plan.max_features and self._capped[kind] else {}
        if plan.empty:
            return Features.empty(det.descriptor_size, kind)
        img = image.array()
        if plan.crop is not None:
            return self._extract_in_crop(det, self._boxes_native[kind], img, plan, kw)
        if plan.regions is not None and self._boxes_native[kind]:
            return self._extract_within(det, img, plan.regions, plan.scale, kw)
        if plan.regions is None:
            return self._extract_frame(det, img, None, plan.scale, kw)
        parts = [self._extract_crop(det, img, box, plan.scale, kw) for box in plan.regions.boxes.tolist()]
        parts = [p for p in parts if len(p)]
        return Features.concatenate(parts) if parts else Features.empty(det.descriptor_size, kind)

    def extract_box(self, image: FrameImage, kind: str, box: tuple[int, int, int, int], scale: float = 1.0) -> Features:
        """Features of ``kind`` in one box of ``image``, from its crop (resized by about ``scale``) at the models'
        own sampling: a small search whose cost follows the box, not the frame. The box is grown to the grid of
        :func:`snap_box` and the resized crop's sides snapped too, so a moving object's box keeps few sizes."""
        h, w = image.host.shape[:2]
        crop = list(snap_box(*box, w, h))
        return self._extract_crop(self.detector(kind, 1), image.array(), crop, scale, {}, snap=True)

    @staticmethod
    def _extract_frame(det: Any, img: Any, regions: Regions | None, scale: float, kw: dict) -> Features:
        """One pass over the whole frame, restricted to ``regions`` by the detector itself."""
        h, w = img.shape[:2]
        if scale < 1.0:
            img = _resize(img, (max(MIN_SIDE, round(w * scale)), max(MIN_SIDE, round(h * scale))))
        if regions is not None:
            k = img.shape[1] / w
            b = regions.boxes.astype(np.float64) * k
            b[:, :2], b[:, 2:] = np.floor(b[:, :2]), np.ceil(b[:, 2:])
            kw = {**kw, "regions": Regions(b.astype(np.int32), regions.scores)}
        f = det.detect_and_compute(img, None, **kw)
        return f.scaled(w / img.shape[1], h / img.shape[0]) if len(f) else f

    @classmethod
    def _extract_within(cls, det: Any, img: Any, regions: Regions, scale: float, kw: dict) -> Features:
        """``regions`` searched by a detector restricted to regions, over the crop that holds them with a margin
        of :data:`CROP_MARGIN` (when it is smaller than :data:`CROP_SHARE` of the frame): the detector's
        per-pass work (resizing, its integral image) then follows the regions' extent, not the frame's."""
        h, w = img.shape[:2]
        b = regions.boxes
        x0, y0 = max(0, int(b[:, 0].min()) - CROP_MARGIN), max(0, int(b[:, 1].min()) - CROP_MARGIN)
        x1, y1 = min(w, int(b[:, 2].max()) + CROP_MARGIN), min(h, int(b[:, 3].max()) + CROP_MARGIN)
        if x1 <= x0 or y1 <= y0 or (x1 - x0) * (y1 - y0) > CROP_SHARE * w * h:
            return cls._extract_frame(det, img, regions, scale, kw)
        x0, y0, x1, y1 = snap_box(x0, y0, x1, y1, w, h)
        xp = get_array_module(img)
        crop = xp.ascontiguousarray(img[y0:y1, x0:x1])
        inside = Regions(b - np.array([x0, y0, x0, y0], b.dtype), regions.scores)
        f = cls._extract_frame(det, crop, inside, scale, kw)
        return f.shifted(x0, y0) if len(f) else f

    @classmethod
    def _extract_in_crop(cls, det: Any, native: bool, img: Any, plan: SearchPlan, kw: dict) -> Features:
        """``plan.regions`` searched in ``plan.crop`` alone: the whole crop where they cover it, else the regions
        (by the detector itself where it restricts its own work, one crop each otherwise)."""
        assert plan.crop is not None  # extract() comes here only for a plan with a crop
        x0, y0, x1, y1 = plan.crop
        xp = get_array_module(img)
        crop = xp.ascontiguousarray(img[y0:y1, x0:x1])
        regions = plan.regions
        if regions is not None:
            inside = Regions(regions.boxes - np.array([x0, y0, x0, y0], regions.boxes.dtype), regions.scores)
            whole = union_area(inside, crop.shape[:2]) >= crop.shape[0] * crop.shape[1]
            regions = None if whole else inside
        if regions is not None and not native:
            parts = [cls._extract_crop(det, crop, box, plan.scale, kw) for box in regions.boxes.tolist()]
            parts = [p for p in parts if len(p)]
            f = Features.concatenate(parts) if parts else Features.empty(det.descriptor_size, det.kind)
        else:
            f = cls._extract_frame(det, crop, regions, plan.scale, kw)
        return f.shifted(x0, y0) if len(f) else f

    @staticmethod
    def _extract_crop(det: Any, img: Any, box: list[int], scale: float, kw: dict, snap: bool = False) -> Features:
        """Features of one box, extracted from its crop (resized by ``scale``; with ``snap`` to sides that are
        multiples of half ``CROP_QUANTUM``) and shifted into the frame."""
        x0, y0, x1, y1 = box
        xp = get_array_module(img)
        crop = xp.ascontiguousarray(img[y0:y1, x0:x1])
        ch, cw = crop.shape[:2]
        if scale < 1.0 and snap:
            crop = _resize(crop, (_scaled_side(cw, scale), _scaled_side(ch, scale)))
        elif scale < 1.0:
            crop = _resize(crop, (max(MIN_SIDE, round(cw * scale)), max(MIN_SIDE, round(ch * scale))))
        f = det.detect_and_compute(crop, None, **kw)
        if not len(f):
            return f
        return f.scaled(cw / crop.shape[1], ch / crop.shape[0]).shifted(x0, y0)


def detector_kinds(db: Any, detectors: list[str] | None) -> list[str]:
    """The detector kinds of ``db`` to use (all enrolled ones by default), primary first (``KIND_ORDER``).
    ``detectors``: the kinds asked for (None: all)."""
    kinds = list(db.detectors) if detectors is None else list(detectors)
    for k in kinds:
        if k not in db.detectors:
            raise ValueError(f"detectors: {k!r} is not enrolled in {db.path} (has {list(db.detectors)})")
    if not kinds:
        raise ValueError("detectors: need at least one detector kind")
    return sorted(kinds, key=lambda k: KIND_ORDER.index(k) if k in KIND_ORDER else len(KIND_ORDER))
