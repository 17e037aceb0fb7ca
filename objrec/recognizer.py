"""The recognizer: frame in, verified detections out, with per-stage timings."""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from objrec.backend import resolve_backend
from objrec.imageio import check_frame, to_gray
from objrec.matching.database import DatabaseMatcher, MatchOutcome
from objrec.matching.verify import VerifyParams
from objrec.modeldb import ModelDB
from objrec.types import Detection, Features, FrameResult

__all__ = ["Recognizer"]


class Recognizer:
    """Recognise enrolled objects in frames.

    Parameters
    ----------
    db : ModelDB or path
        The model database (opened once; its descriptors are kept in memory, on the GPU when used).
    budget_ms : float, optional
        Per-frame latency budget. ``deadline_met`` is ``latency_ms <= budget_ms`` (True without a budget).
    backend : {"auto", "cpu", "gpu"}
    detectors : sequence of str, optional
        Detector kinds to use, a subset of the database's (default: all the database has).
    ratio : float
        Lowe's ratio for matching.
    verify : VerifyParams, optional
        Geometric verification parameters.

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
    ) -> None:
        self.db = db if isinstance(db, ModelDB) else ModelDB.open(db)
        if budget_ms is not None and not budget_ms > 0:
            raise ValueError(f"budget_ms: expected a positive number or None, got {budget_ms}")
        self.budget_ms = budget_ms
        self.backend = resolve_backend(backend, "Recognizer")
        kinds = list(self.db.detectors) if detectors is None else list(detectors)
        for k in kinds:
            if k not in self.db.detectors:
                raise ValueError(
                    f"detectors: {k!r} is not enrolled in {self.db.path} (has {list(self.db.detectors)})"
                )
        if not kinds:
            raise ValueError("detectors: need at least one detector kind")
        self.kinds = kinds
        self.verify_params = verify or VerifyParams()
        objects = self.db.objects()
        from objrec.features import make_detector

        self._extractors = {k: make_detector(k, backend=backend, **self.db.detectors[k]) for k in kinds}
        xp: Any = np
        if self.backend == "gpu":
            import cupy

            xp = cupy
        self._matchers = {k: DatabaseMatcher(objects, k, ratio=ratio, mutual=mutual, xp=xp) for k in kinds}
        self.last_rejections: list = []

    def extract(self, gray: np.ndarray, kind: str, mask: np.ndarray | None = None) -> Features:
        return self._extractors[kind].detect_and_compute(gray, mask)

    def process(self, frame: np.ndarray) -> FrameResult:
        """Recognise objects in one frame (gray or BGR uint8)."""
        t0 = time.perf_counter()
        frame = check_frame(frame)
        gray = to_gray(frame)
        timings: dict[str, float] = {}
        best: dict[str, Detection] = {}
        rejections = []
        for kind in self.kinds:
            t = time.perf_counter()
            feats = self.extract(gray, kind)
            timings[f"features_{kind}"] = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            cands = self._matchers[kind].candidates(feats)
            timings[f"matching_{kind}"] = (time.perf_counter() - t) * 1e3
            t = time.perf_counter()
            outcome: MatchOutcome = self._matchers[kind].verify(cands, gray.shape[:2], self.verify_params)
            timings[f"verification_{kind}"] = (time.perf_counter() - t) * 1e3
            rejections.extend(outcome.rejections)
            for d in outcome.detections:
                if d.name not in best or d.score > best[d.name].score:
                    best[d.name] = d
        self.last_rejections = rejections
        latency = (time.perf_counter() - t0) * 1e3
        met = True if self.budget_ms is None else latency <= self.budget_ms
        dets = sorted(best.values(), key=lambda d: -d.score)
        return FrameResult(dets, latency, met, timings, [])
