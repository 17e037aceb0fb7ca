"""Candidate pairs as objrec's recognizer sees them, for studying verification (used by the solid benchmarks).

:class:`PairCapture` runs a :class:`~objrec.Recognizer` (no budget, no tracking) on a frame and records what its
stages produced: the primary detector's features, the retrieval shortlist, every candidate offered to
verification with its verdict, and the detections. For each candidate it also looks up the local similarity frames
(keypoint size and angle) of both ends of every match, which the recognizer's candidates do not carry, so that a
verifier that uses them can be evaluated on exactly the matches objrec produces.

:func:`save_pairs` / :func:`load_pairs` keep the candidates in one ``.npz`` of flat arrays (no pickle).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial import cKDTree

from objrec import ModelDB, Recognizer
from objrec.imageio import to_gray
from objrec.matching.shortlist import ShortlistMatcher
from objrec.matching.verdicts import FrameVerdicts
from objrec.types import Candidate, Detection


@dataclass
class Pair:
    """One candidate: a frame's matches to one object, with both ends' (size, angle) and the flat verdict."""

    frame: str
    name: str
    right: bool
    model_xy: np.ndarray
    scene_xy: np.ndarray
    model_frames: np.ndarray
    scene_frames: np.ndarray
    model_size: tuple[int, int]
    scene_shape: tuple[int, int]
    verdict: str  # "ok" or the flat verifier's reason code
    shortlisted: bool = True


@dataclass
class FrameRecord:
    """What the recognizer did with one frame."""

    frame: str
    target: str | None
    found: list[str] = field(default_factory=list)
    shortlist: list[str] = field(default_factory=list)
    verdicts: list[tuple[str, int, str]] = field(default_factory=list)  # name, matches, "ok" or reason


class PairCapture:
    """Record the primary detector's candidates and verdicts of a recognizer, frame by frame."""

    def __init__(self, db: ModelDB) -> None:
        self.db = db
        self.rec = Recognizer(db, track=False)
        self.rec.warmup()
        m = self.rec.matchers[self.rec.primary]
        self.inner = m.matcher if isinstance(m, ShortlistMatcher) else m
        self.names = list(self.inner.names)
        self._models: dict[str, tuple[cKDTree, np.ndarray]] = {}
        self._last: dict[str, Any] = {}
        original_candidates = m.candidates
        original_verify = self.rec.verifier.verify

        def candidates(scene: Any, shortlist: Any = None) -> list[Candidate]:
            out = original_candidates(scene, shortlist)
            self._last["scene"] = scene
            self._last["candidates"] = out
            self._last["shortlist"] = [] if shortlist is None else [self.names[i] for i in shortlist]
            return out

        def verify(c: Candidate, shape: tuple[int, int], verdicts: Any = None) -> Any:
            v = original_verify(c, shape, verdicts)
            self._last.setdefault("verdicts", []).append(
                (c.name, len(c), "ok" if isinstance(v, Detection) else v.reason)
            )
            return v

        m.candidates = candidates
        self.rec.verifier.verify = verify
        self._verify = original_verify

    def model_frames(self, name: str, xy: np.ndarray) -> np.ndarray:
        """(M, 2) (size, angle) of the model keypoints at ``xy`` of object ``name``."""
        if name not in self._models:
            f = self.db.get_kind(name, self.rec.primary).features[self.rec.primary]
            self._models[name] = (cKDTree(np.asarray(f.xy, np.float64)), np.c_[f.size, f.angle].astype(np.float64))
        tree, frames = self._models[name]
        return frames[tree.query(np.asarray(xy, np.float64))[1]]

    def process(self, frame_id: str, img: np.ndarray, target: str | None) -> tuple[FrameRecord, list[Pair]]:
        """Run the recognizer on ``img``; the frame's record and its primary candidates as pairs. When ``target``
        is enrolled but not shortlisted, its candidate from matching against it alone is added
        (``shortlisted=False``), so the right pair is always measured."""
        self._last = {}
        res = self.rec.process(img)
        rec = FrameRecord(frame_id, target, [d.name for d in res.detections])
        rec.shortlist = self._last.get("shortlist", [])
        rec.verdicts = self._last.get("verdicts", [])
        scene = self._last.get("scene")
        if scene is None or len(scene) == 0:
            return rec, []
        gray = to_gray(img)
        shape = gray.shape[:2]
        stree = cKDTree(np.asarray(scene.xy, np.float64))
        sframes = np.c_[scene.size, scene.angle].astype(np.float64)
        cands = list(self._last.get("candidates", []))
        if target is not None and target in self.names and target not in rec.shortlist:
            cands += [(c, False) for c in self.inner.candidates(scene, among=[self.names.index(target)])]
        pairs = []
        for item in cands:
            c, listed = item if isinstance(item, tuple) else (item, True)
            v = self._verify(c, shape, FrameVerdicts(shape, gray))
            verdict = "ok" if isinstance(v, Detection) else v.reason
            pairs.append(
                Pair(
                    frame_id,
                    c.name,
                    c.name == target,
                    np.asarray(c.model_xy, np.float64),
                    np.asarray(c.scene_xy, np.float64),
                    self.model_frames(c.name, c.model_xy),
                    sframes[stree.query(np.asarray(c.scene_xy, np.float64))[1]],
                    tuple(int(v) for v in c.model_size),
                    tuple(int(v) for v in shape),
                    verdict,
                    listed,
                )
            )
        return rec, pairs


def save_pairs(path: str | Path, pairs: list[Pair], records: list[FrameRecord]) -> None:
    """Pairs as flat arrays with offsets, and the frame records as JSON, in one ``.npz``."""
    counts = np.array([len(p.model_xy) for p in pairs], np.int64)
    meta = [
        {
            "frame": p.frame,
            "name": p.name,
            "right": p.right,
            "model_size": p.model_size,
            "scene_shape": p.scene_shape,
            "verdict": p.verdict,
            "shortlisted": p.shortlisted,
        }
        for p in pairs
    ]

    def cat(attr: str) -> np.ndarray:
        return np.concatenate([getattr(p, attr) for p in pairs]) if pairs else np.zeros((0, 2))

    np.savez(
        path,
        offsets=np.r_[0, np.cumsum(counts)],
        model_xy=cat("model_xy"),
        scene_xy=cat("scene_xy"),
        model_frames=cat("model_frames"),
        scene_frames=cat("scene_frames"),
        meta=np.array(json.dumps(meta)),
        records=np.array(json.dumps([r.__dict__ for r in records])),
    )


def load_pairs(path: str | Path) -> tuple[list[Pair], list[dict]]:
    """The pairs and frame records written by :func:`save_pairs`."""
    z = np.load(path, allow_pickle=False)
    off = z["offsets"]
    meta = json.loads(str(z["meta"]))
    pairs = []
    for i, m in enumerate(meta):
        s = slice(off[i], off[i + 1])
        pairs.append(
            Pair(
                m["frame"],
                m["name"],
                m["right"],
                z["model_xy"][s],
                z["scene_xy"][s],
                z["model_frames"][s],
                z["scene_frames"][s],
                tuple(m["model_size"]),
                tuple(m["scene_shape"]),
                m["verdict"],
                m["shortlisted"],
            )
        )
    return pairs, json.loads(str(z["records"]))
