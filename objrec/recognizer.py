"""The recognizer: frame in, verified detections out, within a per-frame budget.

Work per frame, in priority order (DESIGN.md, "Realtime"):

1. mandatory: prefilter regions; re-verification of the best object tracked from the last frame in a
   small window around where it was; primary features (SURF if enrolled, else SIFT) on the best region;
   matching; verification of the best candidate;
2. optional units, admitted only while the cost model predicts they fit the remaining budget: the other
   tracked objects, more regions, the other candidates, SIFT escalation where the primary detector was
   unsure.

Without a budget everything runs, so results are the best the pipeline can do.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from objrec._threads import one_blas_thread
from objrec.backend import resolve_backend
from objrec.imageio import check_frame, to_gray
from objrec.matching.database import DatabaseMatcher, Rejection
from objrec.matching.verify import VerifyParams, verify_homography
from objrec.modeldb import ModelDB
from objrec.realtime.scheduler import CostModel, FrameScheduler, PerfClock
from objrec.types import Detection, Failure, Features, FrameResult, Regions

__all__ = ["Recognizer"]

log = logging.getLogger("objrec")

#: Margin (px) added around a region before extracting features from its crop. Prefilter boxes already
#: carry the prefilter's own margin (8 px) and tracking windows are grown by TRACK_GROW; a further margin was
#: measured to cost more than it gains (bench/bench_prefilter.py: extraction time drop 3.49x with 0 px,
#: 2.90x with 12 px, 2.37x with 24 px, recall 100% in each).
CROP_MARGIN = 0
#: A tracked object is searched for in its last outline's bounding box grown by this fraction per side.
TRACK_GROW = 0.25
#: Degrade levels of the mandatory search, lightest first: (prefilter regions searched, fraction of the
#: scene feature cap described, resolution scale). A feedback controller on the mandatory part's share of
#: the budget (frame start to the end of matching; optional work only fills slack, so it says nothing
#: about the load) moves one level up after a frame whose share exceeded DEGRADE_HIGH, and one level down
#: after DEGRADE_CALM frames in a row under DEGRADE_LOW: when the machine is loaded (another process on
#: the cores), mandatory work shrinks instead of every frame being late.
DEGRADE_LEVELS = ((8, 1.0, 1.0), (4, 0.6, 1.0), (2, 0.4, 1.0), (1, 0.3, 0.75), (1, 0.15, 0.75))
DEGRADE_HIGH, DEGRADE_LOW, DEGRADE_CALM = 0.7, 0.5, 10
#: Resolution scales the budget may push mandatory feature extraction down to (cost ~ pixels). Lower
#: levels were measured to lose the objects: SURF(400) stream recall 1.0 at 1, 0.83 at 0.75, 0 at 0.5.
SCALE_LEVELS = (1.0, 0.75)


@dataclass
class _Track:
    name: str
    corners: np.ndarray
    age: int = 0  # frames since last seen


def _clip_box(x0: float, y0: float, x1: float, y1: float, w: int, h: int) -> tuple[int, int, int, int] | None:
    bx0, by0 = max(0, int(np.floor(x0))), max(0, int(np.floor(y0)))
    bx1, by1 = min(w, int(np.ceil(x1))), min(h, int(np.ceil(y1)))
    if bx1 - bx0 < 16 or by1 - by0 < 16:
        return None
    return bx0, by0, bx1, by1


class Recognizer:
    """Recognise enrolled objects in frames, within an optional per-frame latency budget.

    Parameters
    ----------
    db : ModelDB or path
        The model database (opened once; descriptors kept in memory, on the GPU when used).
    budget_ms : float, optional
        Per-frame latency budget. Optional work is admitted only while predicted to fit;
        ``deadline_met`` is ``latency_ms <= budget_ms`` (True without a budget).
    backend : {"auto", "cpu", "gpu"}
    detectors : sequence of str, optional
        Detector kinds to use, a subset of the database's (default: all it has). The first of
        ``("surf", "sift")`` present is the primary detector; SIFT is the escalation where SURF is unsure.
    ratio : float
        Lowe's ratio for matching.
    verify : VerifyParams, optional
        Geometric verification parameters.
    prefilter : RegionPrefilter, "auto" or None
        ``"auto"`` uses the database's trained prefilter when present and current; None runs on the whole
        frame.
    track : bool
        Re-verify last frame's objects first in a window around them.
    clock : object with ``now() -> ms``, optional
        For tests (a fake clock); default ``time.perf_counter``.
    scene_max_features : int, optional
        With a budget, SURF describes at most this many of a frame's strongest keypoints.
    exact_matching : bool
        Exact brute-force 2-NN for every database; by default a SIFT database of 2048+ descriptors is searched
        through a spill tree of two exact leaves (see ``objrec.matching.DatabaseMatcher``).

    Examples
    --------
    >>> from objrec import ModelDB, Recognizer  # doctest: +SKIP
    >>> rec = Recognizer(ModelDB.open("covers.db"), budget_ms=33)  # doctest: +SKIP
    >>> result = rec.process(frame)  # doctest: +SKIP
    >>> [(d.name, d.corners) for d in result.detections]  # doctest: +SKIP
    """

    def __init__(
        self,
        db: ModelDB | str,
        budget_ms: float | None = None,
        backend: str = "auto",
        detectors: list[str] | None = None,
        ratio: float = 0.75,
        mutual: bool = False,
        verify: VerifyParams | None = None,
        prefilter: Any = "auto",
        track: bool = True,
        clock: Any = None,
        max_regions: int = 8,
        scene_max_features: int | None = 1500,
        exact_matching: bool = False,
    ) -> None:
        self.db = db if isinstance(db, ModelDB) else ModelDB.open(db)
        if budget_ms is not None and not budget_ms > 0:
            raise ValueError(f"budget_ms: expected a positive number or None, got {budget_ms}")
        self.budget_ms = budget_ms
        self.backend = resolve_backend(backend, "Recognizer")
        kinds = list(self.db.detectors) if detectors is None else list(detectors)
        for k in kinds:
            if k not in self.db.detectors:
                raise ValueError(f"detectors: {k!r} is not enrolled in {self.db.path} (has {list(self.db.detectors)})")
        if not kinds:
            raise ValueError("detectors: need at least one detector kind")
        self.kinds = sorted(kinds, key=lambda k: ("surf", "sift").index(k) if k in ("surf", "sift") else 9)
        self.primary = self.kinds[0]
        self.verify_params = verify or VerifyParams()
        self.track = track
        self.max_regions = max_regions
        if len(self.db) == 0:
            raise ValueError(f"{self.db.path}: the model database is empty; enroll objects first")
        objects = self.db.objects()
        self._sizes = {o.name: (o.width, o.height) for o in objects}
        from objrec.features import make_detector

        params = {k: dict(self.db.detectors[k]) for k in self.kinds}
        if budget_ms is not None and "surf" in params and scene_max_features:
            # Under a budget, describe only the strongest responses: SURF picks them before description.
            params["surf"].setdefault("max_features", int(scene_max_features))
        self._scene_cap = int(params.get("surf", {}).get("max_features") or 2000)
        self.level = 0  # degrade level (DEGRADE_LEVELS), moved by the mandatory time of the frames before
        self._calm = 0
        self._mandatory_ms: float | None = None
        self._extractors = {k: make_detector(k, backend=backend, **params[k]) for k in self.kinds}
        xp: Any = np
        if self.backend == "gpu":
            import cupy

            xp = cupy
        self._matchers = {
            k: DatabaseMatcher(objects, k, ratio=ratio, mutual=mutual, xp=xp, exact=exact_matching) for k in self.kinds
        }
        self.prefilter = self._load_prefilter(prefilter)
        self.clock = clock or PerfClock()
        self.cost = CostModel()
        self.scheduler = FrameScheduler(budget_ms, self.cost, self.clock, safety_ms=2.0)
        self._tracks: dict[str, _Track] = {}
        self.last_rejections: list[Rejection] = []
        self.frames = 0

    # -- set-up ------------------------------------------------------------------------------------
    def _load_prefilter(self, prefilter: Any) -> Any:
        self.prefilter_status = "off"
        if prefilter is None or prefilter is False:
            return None
        if prefilter != "auto":
            return prefilter
        try:
            from objrec.prefilter import RegionPrefilter
        except ImportError:
            return None
        loader = getattr(RegionPrefilter, "load_for", None)
        if loader is None:
            return None
        pf = loader(self.db)  # a falsy Failure when absent or stale (stale also warns)
        self.prefilter_status = "loaded" if pf else pf.reason
        return pf if pf else None

    def warmup(self, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
        """Compile and allocate for ``frame_shape`` and teach the cost model, before the first frame counts."""
        from objrec.data import synthetic_cover
        from objrec.scenes import compose_scene

        h, w = frame_shape[:2]
        bg = synthetic_cover(99, (w, h))
        names = self.db.names[:2]
        objs = {n: self.db.image(n) for n in names}
        rng = np.random.default_rng(0)
        budget, self.scheduler.budget_ms = self.scheduler.budget_ms, None
        try:
            for _ in range(repeats):
                s = compose_scene(bg, objs, rng, frame_size=(w, h), area_fraction=(0.1, 0.2))
                self.process(s.image)
                self.process(bg)
        finally:
            self.scheduler.budget_ms = budget
            self._tracks.clear()
            self.level, self._calm = 0, 0  # warm-up frames (compilation) say nothing about the load
        gc.collect()

    # -- stages ------------------------------------------------------------------------------------
    def extract(
        self,
        gray: np.ndarray,
        kind: str,
        box: tuple[int, int, int, int] | None = None,
        scale: float = 1.0,
        mask: np.ndarray | None = None,
        regions: list[tuple[int, int, int, int]] | None = None,
    ) -> Features:
        """Features of ``kind`` in frame coordinates.

        ``box`` (x0, y0, x1, y1) extracts from a crop grown by CROP_MARGIN; ``mask`` (frame-sized, nonzero =
        search) restricts a detector that supports it (SURF computes responses only there); ``regions``
        (boxes in frame pixels, SURF only, whole frame) restricts SURF to their union and its detector visits
        only the columns they reach, so the cost follows their area; ``scale < 1`` extracts from a downscaled
        image (the budget's degrade path) and maps positions and sizes back to full-resolution pixels.
        """
        h, w = gray.shape
        x0, y0, x1, y1 = box if box is not None else (0, 0, w, h)
        cx0, cy0 = max(0, x0 - CROP_MARGIN), max(0, y0 - CROP_MARGIN)
        cx1, cy1 = min(w, x1 + CROP_MARGIN), min(h, y1 + CROP_MARGIN)
        whole = (cx0, cy0, cx1, cy1) == (0, 0, w, h)
        crop = gray if whole else np.ascontiguousarray(gray[cy0:cy1, cx0:cx1])
        m = None if mask is None else (mask if whole else np.ascontiguousarray(mask[cy0:cy1, cx0:cx1]))
        ch, cw = crop.shape
        if scale < 1.0:
            size = (max(16, round(cw * scale)), max(16, round(ch * scale)))
            crop = cv2.resize(crop, size, interpolation=cv2.INTER_AREA)
            if m is not None:
                m = cv2.resize(m, size, interpolation=cv2.INTER_NEAREST)
        if regions is not None:
            k = crop.shape[1] / cw
            b = np.array(regions, np.float64).reshape(-1, 4) * k
            b[:, :2], b[:, 2:] = np.floor(b[:, :2]), np.ceil(b[:, 2:])
            r = Regions(b.astype(np.int32), np.ones(len(b), np.float32))
            f = self._extractors[kind].detect_and_compute(crop, m, regions=r)
        else:
            f = self._extractors[kind].detect_and_compute(crop, m)
        if not len(f):
            return f
        if scale < 1.0:
            sx, sy = cw / crop.shape[1], ch / crop.shape[0]
            f = Features(
                f.xy * np.float32([sx, sy]),
                f.size * sx,
                f.angle,
                f.response,
                f.octave,
                f.laplacian,
                f.descriptors,
                f.kind,
            )
        return f.shifted(cx0, cy0) if (cx0 or cy0) else f

    def _degrade_scale(self, stage: str, pixels: float, share_ms: float) -> float:
        """Resolution scale for mandatory extraction so its predicted time fits ``share_ms`` (cost ∝ pixels)."""
        if self.budget_ms is None or self.cost.samples(stage) < self.cost.min_samples:
            return 1.0
        pred = self.cost.predict(stage, pixels)
        if pred <= share_ms:
            return 1.0
        want = np.sqrt(max(share_ms, 0.0) / pred)
        # A few fixed levels, so per-size buffers and tables are reused from frame to frame.
        return float(next((s for s in SCALE_LEVELS if s <= want), SCALE_LEVELS[-1]))

    def _adapt_level(self, mandatory_ms: float) -> None:
        """One degrade level up after a frame whose mandatory part used more than DEGRADE_HIGH of the budget,
        one down after DEGRADE_CALM frames in a row under DEGRADE_LOW."""
        if self.budget_ms is None:
            self.level = 0
            return
        use = mandatory_ms / self.budget_ms
        if use > DEGRADE_HIGH:
            self.level = min(self.level + 1, len(DEGRADE_LEVELS) - 1)
            self._calm = 0
        elif use < DEGRADE_LOW and self.level > 0:
            self._calm += 1
            if self._calm >= DEGRADE_CALM:
                self.level -= 1
                self._calm = 0
        else:
            self._calm = 0

    def _learned(self, stage: str, size: float) -> float:
        """The cost model's prediction for ``stage``, or 0 until it has learned the stage."""
        if self.cost.samples(stage) < self.cost.min_samples:
            return 0.0
        return self.cost.predict(stage, size)

    def _regions(self, frame: np.ndarray) -> Regions:
        h, w = frame.shape[:2]
        if self.prefilter is None:
            return Regions.full(w, h)
        return self.prefilter.propose(frame)

    def _verify_object(self, kind: str, feats: Features, name: str, shape: tuple[int, int]) -> Detection | None:
        """Match ``feats`` against one object and verify (tracking: the object is known)."""
        m = self._matchers[kind]
        for c in m.candidates(feats):
            if m.names[c.object_index] != name:
                continue
            w, h = self._sizes[name]
            v = verify_homography(c.model_xy, c.scene_xy, w, h, shape, self.verify_params)
            return None if isinstance(v, Failure) else v.to_detection(name)
        return None

    # -- the frame ---------------------------------------------------------------------------------
    def process(self, frame: np.ndarray, t0: float | None = None) -> FrameResult:
        """Recognise objects in one frame (gray or BGR uint8).

        ``t0`` is when the frame was handed over (ms on the recognizer's clock; default: now), so latency
        includes time spent queued before this call.
        """
        sched = self.scheduler
        sched.start(t0)
        self._mandatory_ms = None
        gc_was = gc.isenabled()
        gc.disable()  # a collection inside the frame would be unbudgeted latency
        try:
            with one_blas_thread():
                result = self._process(frame, sched)
        finally:
            if gc_was:
                gc.enable()
        result.latency_ms = sched.elapsed()
        result.deadline_met = self.budget_ms is None or result.latency_ms <= self.budget_ms
        self._adapt_level(self._mandatory_ms if self._mandatory_ms is not None else result.latency_ms)
        if sched.remaining() > 5.0:
            gc.collect(0)  # in the slack, the youngest generation only
        self.frames += 1
        return result

    def _process(self, frame: np.ndarray, sched: FrameScheduler) -> FrameResult:
        frame = check_frame(frame)
        gray = to_gray(frame)
        h, w = gray.shape
        timings: dict[str, float] = {}
        found: dict[str, Detection] = {}
        rejections: list[Rejection] = []
        primary = self.primary

        def timed(stage: str, fn):
            t = self.clock.now()
            out = fn()
            timings[stage] = timings.get(stage, 0.0) + self.clock.now() - t
            return out

        tracks = sorted(self._tracks.values(), key=lambda t: t.age) if self.track else []
        if primary == "surf":
            unsure = self._search_masked(frame, gray, sched, tracks, found, rejections, timed)
        else:
            unsure = self._search_crops(frame, gray, sched, tracks, found, rejections, timed)

        # 3. escalation: the secondary detector (SIFT) where the primary was unsure.
        self._escalate(gray, sched, unsure, found, rejections, timed)
        return self._finish(found, rejections, timings, sched)

    def _search_masked(self, frame, gray, sched, tracks, found, rejections, timed) -> list:
        """One SURF pass over the union of the tracking windows and the prefilter's regions.

        SURF computes responses only inside a mask, so its cost follows the searched area; one pass avoids
        paying per-call overhead for every window. Candidates of tracked objects are verified first.
        """
        h, w = gray.shape
        primary = self.primary
        boxes = [b for b in (self._track_box(tr, w, h) for tr in tracks) if b is not None]
        regions = timed("prefilter", lambda: self._regions(frame)) if self.prefilter is not None else Regions.full(w, h)
        n_regions, cap_share, level_scale = DEGRADE_LEVELS[self.level]
        if self.level:
            sched.skipped.append(f"degrade_level:{self.level}")
        boxes += [tuple(int(v) for v in b) for b in regions.boxes[: min(self.max_regions, n_regions)]]
        if not boxes:
            return []
        cover = np.zeros((h, w), np.uint8)
        for x0, y0, x1, y1 in boxes:
            cover[y0:y1, x0:x1] = 1
        area = int(cover.sum())
        search = None if area > 0.9 * h * w else boxes
        if search is None:
            area = h * w
        stage = f"features_{primary}"
        # Mandatory extraction degrades resolution rather than be late, but only when it would not fit with
        # the matching and first verification after it: a lower resolution loses the smaller objects.
        after = self._learned("matching", self._scene_cap) + self._learned("verify", 100)
        scale = min(level_scale, self._degrade_scale(stage, area, sched.remaining() - after))
        if scale < 1.0:
            sched.skipped.append("full_resolution")
        ext = self._extractors[primary]
        if self.budget_ms is not None and hasattr(ext, "max_features"):
            ext.max_features = max(100, int(self._scene_cap * cap_share))
        _, feats = sched.run(
            f"search:{primary}",
            lambda: timed(stage, lambda: self.extract(gray, primary, None, scale, regions=search)),
            size=area * scale * scale,
            mandatory=True,
            stage=stage,
        )
        matcher = self._matchers[primary]
        _, cands = sched.run(
            "matching",
            lambda: timed("matching", lambda: matcher.candidates(feats)),
            size=len(feats),
            mandatory=True,
        )
        self._mandatory_ms = sched.elapsed()
        rank = {tr.name: i for i, tr in enumerate(tracks)}
        cands.sort(key=lambda c: (rank.get(matcher.names[c.object_index], len(rank)), -len(c.model_xy)))
        unsure = []
        for j, c in enumerate(cands):
            name = matcher.names[c.object_index]
            v = self._verify_unit(sched, c, name, (h, w), mandatory=(j == 0), timed=timed)
            if v is None:
                continue
            if isinstance(v, Failure):
                rejections.append(Rejection(name, v.reason, len(c.model_xy), v.detail))
                if v.reason in ("too_few_inliers", "low_inlier_ratio", "too_few_matches"):
                    box = _match_box(c.scene_xy, w, h)
                    if box is not None:
                        unsure.append(box)
            else:
                found[name] = v.to_detection(name)
        return unsure

    def _verify_unit(self, sched, c, name, shape, mandatory, timed):
        """Verify one candidate as a scheduled unit; None when the budget did not admit it."""
        wm, hm = self._sizes[name]
        ran, v = sched.run(
            f"verify:{name}",
            lambda: timed(
                "verification", lambda: verify_homography(c.model_xy, c.scene_xy, wm, hm, shape, self.verify_params)
            ),
            size=len(c.model_xy),
            mandatory=mandatory,
            stage="verify",
        )
        return v if ran else None

    @staticmethod
    def _track_box(tr: _Track, w: int, h: int) -> tuple[int, int, int, int] | None:
        lo, hi = tr.corners.min(axis=0), tr.corners.max(axis=0)
        grow = (hi - lo) * TRACK_GROW
        return _clip_box(*(lo - grow), *(hi + grow), w, h)

    def _search_crops(self, frame, gray, sched, tracks, found, rejections, timed) -> list:
        """Detectors without masks (SIFT): tracking windows, then the prefilter's regions, as crops."""
        h, w = gray.shape
        primary = self.primary
        # 1. tracked objects first, best (most recently confirmed) first; the first one is mandatory.
        for i, tr in enumerate(tracks):
            box = self._track_box(tr, w, h)
            if box is None:
                continue
            area = (box[2] - box[0]) * (box[3] - box[1])

            def unit(box=box, name=tr.name):
                f = timed(f"features_{primary}", lambda: self.extract(gray, primary, box))
                return timed("verification", lambda: self._verify_object(primary, f, name, (h, w)))

            ran, det = sched.run(f"track:{tr.name}", unit, size=area, mandatory=(i == 0), stage="track")
            # An outline reaching past the window was fitted to part of the object only: search anew.
            if ran and det is not None and _inside_any(box, [det.corners], inverse=True):
                found[det.name] = det

        # 2. regions from the prefilter (the whole frame without one).
        regions = timed("prefilter", lambda: self._regions(frame)) if self.prefilter is not None else Regions.full(w, h)
        covered = [d.corners for d in found.values()]
        unsure: list[tuple[int, int, int, int]] = []
        stage = f"features_{primary}"
        boxes = [tuple(int(v) for v in b) for b in regions.boxes[: self.max_regions]]
        boxes = [b for b in boxes if not (covered and _inside_any(b, covered))]
        for i, box in enumerate(boxes):
            area = (box[2] - box[0]) * (box[3] - box[1])
            mandatory = i == 0 and not found

            # Mandatory extraction degrades resolution rather than be late; 60% of what is left goes to it.
            scale = self._degrade_scale(stage, area, 0.6 * sched.remaining()) if mandatory else 1.0
            if scale < 1.0:
                sched.skipped.append(f"full_resolution:{i}")

            def extract_unit(box=box, scale=scale):
                return timed(stage, lambda: self.extract(gray, primary, box, scale))

            ran, feats = sched.run(
                f"region{i}:{primary}", extract_unit, size=area * scale * scale, mandatory=mandatory, stage=stage
            )
            if not ran:
                continue
            cands = timed("matching", lambda feats=feats: self._matchers[primary].candidates(feats))
            cands = [c for c in cands if self._matchers[primary].names[c.object_index] not in found]
            for j, c in enumerate(cands):
                name = self._matchers[primary].names[c.object_index]
                v = self._verify_unit(sched, c, name, (h, w), mandatory=(mandatory and j == 0), timed=timed)
                if v is None:
                    continue
                if isinstance(v, Failure):
                    rejections.append(Rejection(name, v.reason, len(c.model_xy), v.detail))
                    if v.reason in ("too_few_inliers", "low_inlier_ratio", "too_few_matches"):
                        unsure.append(box)
                else:
                    found[name] = v.to_detection(name)

        return unsure

    def _escalate(self, gray, sched, unsure, found, rejections, timed) -> None:
        h, w = gray.shape
        for kind in self.kinds[1:]:
            for k, box in enumerate(dict.fromkeys(unsure)):
                area = (box[2] - box[0]) * (box[3] - box[1])

                def escalate(box=box, kind=kind):
                    f = timed(f"features_{kind}", lambda: self.extract(gray, kind, box))
                    cands = timed("matching", lambda: self._matchers[kind].candidates(f))
                    names = self._matchers[kind].names
                    return [(names[c.object_index], c) for c in cands if names[c.object_index] not in found]

                ran, cands = sched.run(f"escalate{k}:{kind}", escalate, size=area, stage=f"escalate_{kind}")
                for name, c in cands or []:
                    wm, hm = self._sizes[name]
                    v = verify_homography(c.model_xy, c.scene_xy, wm, hm, (h, w), self.verify_params)
                    if isinstance(v, Failure):
                        rejections.append(Rejection(name, v.reason, len(c.model_xy), v.detail))
                    else:
                        found[name] = v.to_detection(name)

    def _finish(self, found, rejections, timings, sched) -> FrameResult:
        # 4. tracks for the next frame: confirmed objects refreshed, lost ones aged out after one frame.
        if self.track:
            for name in list(self._tracks):
                if name not in found:
                    self._tracks[name].age += 1
                    if self._tracks[name].age > 1:
                        del self._tracks[name]
            for name, d in found.items():
                self._tracks[name] = _Track(name, d.corners, 0)
        self.last_rejections = rejections
        dets = sorted(found.values(), key=lambda d: -d.score)
        return FrameResult(dets, 0.0, True, timings, list(sched.skipped))

    def reset(self) -> None:
        """Forget tracked objects (a new, unrelated sequence of frames follows)."""
        self._tracks.clear()


def _match_box(xy: np.ndarray, w: int, h: int, grow: float = 0.5) -> tuple[int, int, int, int] | None:
    """Where an unsure candidate's matches lie (middle 90% of them, grown by ``grow`` per side): the crop
    the escalation detector searches, instead of the whole frame."""
    if len(xy) < 2:
        return None
    lo, hi = np.percentile(xy, 5, axis=0), np.percentile(xy, 95, axis=0)
    g = np.maximum((hi - lo) * grow, 32.0)
    return _clip_box(*(lo - g), *(hi + g), w, h)


def _inside_any(box: tuple[int, int, int, int], quads: list[np.ndarray], inverse: bool = False) -> bool:
    """True when ``box`` lies within the bounding box of one of the outlines ``quads`` (4 px slack);
    with ``inverse``, when one of the outlines lies within ``box``."""
    for q in quads:
        lo, hi = q.min(axis=0), q.max(axis=0)
        if inverse:
            if lo[0] >= box[0] - 4 and lo[1] >= box[1] - 4 and hi[0] <= box[2] + 4 and hi[1] <= box[3] + 4:
                return True
        elif box[0] >= lo[0] - 4 and box[1] >= lo[1] - 4 and box[2] <= hi[0] + 4 and box[3] <= hi[1] + 4:
            return True
    return False
