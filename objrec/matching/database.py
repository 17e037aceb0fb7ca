"""Matching a frame's features against every enrolled object at once, grouped by object."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from objrec.backend import to_numpy
from objrec.knn import BruteForceIndex, Fginn, SpillIndex, ratio_match
from objrec.matching.guided import guided_matches
from objrec.modeldb.records import object_groups
from objrec.types import Candidate, Features

__all__ = ["DatabaseMatcher", "SPILL_MIN_TRAIN", "keypoint_frames"]

#: Databases with at least this many descriptors of a kind without Laplacian signs (SIFT) are searched
#: through a :class:`~objrec.knn.SpillIndex` unless ``exact=True``; smaller ones exactly.
SPILL_MIN_TRAIN = 2048


class DatabaseMatcher:
    """All objects' descriptors of one detector kind in one matrix, with the object of every row.

    Parameters
    ----------
    objects : sequence of ModelObject
    kind : str
        Detector kind ("sift" or "surf"): descriptors of other kinds never match.
    ratio : float
        Lowe's ratio threshold (0.75 as in find_obj.py; Lowe 2004 used 0.8).
    mutual : bool
        Keep only mutual nearest neighbours.
    xp : module
        numpy or cupy; with cupy the database descriptors stay resident on the device.
    exact : bool
        Exact brute-force 2-NN for every database size. By default a database of ``SPILL_MIN_TRAIN``
        descriptors or more without Laplacian signs is searched through a one-level spill tree of two exact
        leaves (:class:`~objrec.knn.SpillIndex`), about half the work; SURF's sign split already
        halves it exactly.
    fginn : bool, optional
        Ratio test against the first geometrically inconsistent neighbour (:class:`~objrec.knn.Fginn`)
        instead of the second one. By default on when an object was enrolled with synthesised views or with
        several photos (their near-duplicate descriptors would fail Lowe's test against each other), off
        otherwise. The objects are the matcher's entries grouped by object name: entries are enrolled views
        (record keys, :func:`~objrec.modeldb.records.view_key`), and a neighbour in another view of the same
        object never stands as the competitor.
    """

    def __init__(
        self,
        objects: list[Any],
        kind: str,
        ratio: float = 0.75,
        mutual: bool = False,
        xp: Any = np,
        exact: bool = False,
        fginn: bool | None = None,
    ):
        self.kind = kind
        self.ratio = ratio
        self.mutual = mutual
        self.names = [o.name for o in objects]
        self.sizes = [(o.width, o.height) for o in objects]
        self.view_tables = [getattr(o, "view_table", None) for o in objects]
        feats = [o.features[kind] for o in objects]
        nonempty = [f for f in feats if len(f)]
        dim = nonempty[0].descriptor_size if nonempty else 128
        self.descriptors = xp.asarray(
            np.concatenate([f.descriptors for f in feats]) if nonempty else np.zeros((0, dim), np.float32)
        )
        self.xy = np.concatenate([f.xy for f in feats]) if nonempty else np.zeros((0, 2), np.float32)
        # (size, angle) of every row's keypoint: each match's local similarity, for verification without a plane.
        self.frames = keypoint_frames(feats)
        self.owner = (
            np.concatenate([np.full(len(f), i, np.int32) for i, f in enumerate(feats)])
            if feats
            else (np.zeros(0, np.int32))
        )
        self._start = np.r_[0, np.cumsum([len(f) for f in feats])].astype(np.int64)
        self.use_laplacian = kind == "surf"
        lap = np.concatenate([f.laplacian for f in feats]) if nonempty else np.zeros(0, np.int8)
        self.laplacian = xp.asarray(lap) if self.use_laplacian else None
        self.xp = xp
        #: The object of each entry (its views share one number; see :func:`object_groups`).
        self.groups = groups = object_groups(self.names)
        multi_view = len(set(groups.tolist())) < len(self.names)
        if fginn is None:
            fginn = multi_view or any(getattr(o, "views", None) for o in objects)
        group = xp.asarray(groups[self.owner].astype(np.int32)) if multi_view else None
        self.fginn = Fginn(xp.asarray(self.xy), xp.asarray(self.owner), group=group) if fginn else None
        # Prepared once, reused every frame.
        if exact or self.use_laplacian or len(self.descriptors) < SPILL_MIN_TRAIN:
            self.index: BruteForceIndex | SpillIndex = BruteForceIndex(self.descriptors, self.laplacian)
        else:
            self.index = SpillIndex(self.descriptors)

    def __len__(self) -> int:
        return int(self.descriptors.shape[0])

    def object_counts(self) -> np.ndarray:
        """Descriptors of each object (int64, in object order)."""
        return np.diff(self._start)

    def candidates(self, scene: Features, among: Any = None) -> list[Candidate]:
        """Ratio-test matches of ``scene`` features, grouped per object.

        Without ``among``, every enrolled descriptor is searched and the candidates come most matches
        first. With ``among`` (object indices, best first, e.g. a retrieval shortlist), only those
        objects' descriptors are searched, both nearest neighbours of the ratio test come from them,
        and the candidates keep the order of ``among``. Features on the device stay there: only the
        matches' scene positions come back to the host.
        """
        if len(scene) == 0 or len(self) == 0:
            return []
        if scene.kind != self.kind:
            raise ValueError(f"cannot match {scene.kind!r} features against a {self.kind!r} database")
        q = self.xp.asarray(scene.descriptors)
        ql = self.xp.asarray(scene.laplacian) if self.use_laplacian else None
        if among is None:
            m = ratio_match(q, self.index, self.ratio, self.mutual, ql, fginn=self.fginn)
            rows = None
        else:
            order = np.asarray(among, np.int64).reshape(-1)
            rows = self.rows_of(order)
            if not len(rows):
                return []
            dev_rows = self.xp.asarray(rows)
            lap = self.laplacian[dev_rows] if self.laplacian is not None else None
            sub = BruteForceIndex(self.descriptors[dev_rows], lap)
            fginn = None
            if self.fginn is not None:  # the same test on the shortlist's rows
                f = self.fginn
                group = None if f.group is None else f.group[dev_rows]
                fginn = dataclasses.replace(f, xy=f.xy[dev_rows], owner=f.owner[dev_rows], group=group)
            m = ratio_match(q, sub, self.ratio, self.mutual, ql, fginn=fginn)
        if len(m) == 0:
            return []
        train = m.train_idx if rows is None else rows[m.train_idx]
        qi = scene.xp.asarray(m.query_idx)
        scene_xy = to_numpy(scene.xy[qi])
        scene_frames = np.c_[to_numpy(scene.size[qi]), to_numpy(scene.angle[qi])].astype(np.float32)
        owner = self.owner[train]
        out = [
            Candidate(
                int(oi),
                self.xy[train[sel]],
                scene_xy[sel],
                m.ratio[sel],
                self.names[oi],
                self.sizes[oi],
                self.frames[train[sel]],
                scene_frames[sel],
            )
            for oi in np.unique(owner)
            for sel in [owner == oi]
        ]
        if among is None:
            out.sort(key=lambda c: -len(c))
        else:
            rank = {int(o): r for r, o in enumerate(order)}
            out.sort(key=lambda c: rank[c.object_index])
        return out

    def rows_of(self, objects: Any) -> np.ndarray:
        """The database rows of the given objects' descriptors, object after object (int64)."""
        objs = np.asarray(objects, np.int64).reshape(-1)
        if not len(objs):
            return np.zeros(0, np.int64)
        lo, hi = self._start[objs], self._start[objs + 1]
        return np.concatenate([np.arange(a, b) for a, b in zip(lo, hi, strict=True)]).astype(np.int64)

    def guided(self, candidate: Candidate, scene: Features, H: np.ndarray, radius: float = 12.0) -> Candidate:
        """The ``candidate``'s object matched again against ``scene`` (the frame's features) within ``radius`` px
        of where ``H`` (model to frame) puts each of its keypoints (:func:`~objrec.matching.guided.guided_matches`).

        Of an object enrolled with synthesised views, only the keypoints of the image itself and of the views
        most like the frame's view of it under ``H`` take part (:func:`~objrec.modeldb.views.view_rows`): the others
        are copies of the same points with descriptors further from the frame's.
        """
        from objrec.modeldb.views import view_rows

        oi = candidate.object_index
        lo = int(self._start[oi])
        w, h = self.sizes[oi]
        rows = lo + view_rows(self.view_tables[oi], self.kind, int(self._start[oi + 1]) - lo, H, (w / 2, h / 2))
        xp_rows = self.xp.asarray(rows)
        sign = self.laplacian[xp_rows] if self.laplacian is not None else None
        mi, si = guided_matches(
            H,
            self.xy[rows],
            self.descriptors[xp_rows],
            scene.xy,
            scene.descriptors,
            radius,
            model_sign=sign,
            scene_sign=scene.laplacian if self.use_laplacian else None,
        )
        qi = scene.xp.asarray(si)
        scene_xy = to_numpy(scene.xy[qi])
        scene_frames = np.c_[to_numpy(scene.size[qi]), to_numpy(scene.angle[qi])].astype(np.float32)
        return Candidate(
            candidate.object_index,
            self.xy[rows][mi],
            scene_xy,
            np.full(len(mi), np.nan, np.float32),
            candidate.name,
            candidate.model_size,
            self.frames[rows][mi],
            scene_frames,
        )


def keypoint_frames(feats: list[Features]) -> np.ndarray:
    """(size, angle) of every keypoint of ``feats``, concatenated: (N, 2) float32."""
    parts = [np.c_[to_numpy(f.size), to_numpy(f.angle)] for f in feats if len(f)]
    return np.concatenate(parts).astype(np.float32) if parts else np.zeros((0, 2), np.float32)
