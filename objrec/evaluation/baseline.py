"""The find_obj-style baseline: the anchor objrec's benchmarks and ``objrec eval`` measure against.

It follows OpenCV's ``samples/python/find_obj.py``: features of each object and of the frame (OpenCV SIFT with
default parameters unless another detector is named), 2-nearest-neighbour matching with Lowe's ratio test, and
a homography from the ratio-test matches once there are at least 4 of them. There is no degeneracy check, no
region prefilter and no time budget: that is what makes it the anchor.

Two ways to match (``candidates``):

- every object alone (``candidates=None``, find_obj.py): each object's descriptors are matched to the frame's,
  and every object with 4 matches or more is verified;
- one index over every object's descriptors (``candidates=K``, Find-Object's way with a large catalogue): the
  frame's descriptors are matched to it, each ratio-test match votes for the object that owns its neighbour,
  and the ``K`` objects with most votes are verified.

Two ways to verify (``verification``): ``"ransac"``, ``cv2.findHomography`` with RANSAC at ``ransac_px``
pixels, a detection from ``min_inliers`` inliers on; or ``"objrec"``, objrec's own geometric verification
(:func:`~objrec.matching.verify.verify_homography` with its default parameters), so that only the features
and the matching differ from objrec's recognizer.

References
----------
Lowe, "Distinctive image features from scale-invariant keypoints", IJCV 60(2), 2004,
doi:10.1023/B:VISI.0000029664.99615.94 (the ratio test).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import cv2
import numpy as np

from objrec.evaluation.detectors import BINARY_DETECTORS, detector_for, warm_up
from objrec.evaluation.feature_eval import ratio_test_matches
from objrec.geometry import model_corners
from objrec.imageio import to_gray
from objrec.matching.verify import verify_homography
from objrec.types import Detection, Failure, Features

__all__ = ["MATCHERS", "VERIFICATIONS", "BaselineResult", "FindObjBaseline"]

#: ``matcher`` values: OpenCV's brute-force matcher (L2), OpenCV's FLANN kd-trees (4 trees, 32 checks), and
#: objrec's exact 2-NN (:func:`~objrec.evaluation.feature_eval.ratio_test_matches`).
MATCHERS = ("bf", "flann", "knn2")
#: ``verification`` values.
VERIFICATIONS = ("ransac", "objrec")


@dataclass
class BaselineResult:
    """What the baseline found in one frame.

    Attributes
    ----------
    detections : list of Detection
        Most inliers first. With ``verification="ransac"`` the score is the inlier share of the object's
        ratio-test matches and ``visible_fraction`` is not measured (1.0).
    timings_ms : dict
        ``features_<detector>`` (the frame's features) and ``matching+verification``, in milliseconds.
    """

    detections: list[Detection] = field(default_factory=list)
    timings_ms: dict[str, float] = field(default_factory=dict)


class FindObjBaseline:
    """Find enrolled objects in a frame the way OpenCV's find_obj.py sample does (see the module notes).

    Parameters
    ----------
    objects : mapping of str to image
        Object name to model image (gray, BGR or BGRA uint8).
    detector : str
        A detector name of :mod:`objrec.evaluation.detectors` (``opencv-sift``, ``orb``, ``akaze``...).
        Binary descriptors are compared by Hamming distance.
    matcher : {"bf", "flann", "knn2"}
        The 2-NN matcher (:data:`MATCHERS`).
    ratio : float
        Lowe's ratio threshold (find_obj.py: 0.75).
    candidates : int or None
        None: every object is matched alone; K: one index over all objects, the K best-voted verified.
    verification : {"ransac", "objrec"}
        How a homography is estimated and judged (:data:`VERIFICATIONS`).
    ransac_px : float
        RANSAC reprojection threshold in pixels (find_obj.py: 5.0), for ``"ransac"``.
    min_inliers : int
        Smallest inlier count reported as a detection, for ``"ransac"`` (find_obj.py estimates a homography
        from 4 matches on and draws it whatever its support).

    Examples
    --------
    >>> from objrec.data import sample_objects
    >>> objects = sample_objects()
    >>> base = FindObjBaseline(objects)
    >>> name = sorted(objects)[0]
    >>> name in [d.name for d in base.process(objects[name]).detections]
    True
    """

    def __init__(
        self,
        objects: Mapping[str, np.ndarray],
        detector: str = "opencv-sift",
        matcher: str = "bf",
        ratio: float = 0.75,
        candidates: int | None = None,
        verification: str = "ransac",
        ransac_px: float = 5.0,
        min_inliers: int = 4,
    ) -> None:
        if matcher not in MATCHERS:
            raise ValueError(f"matcher: expected one of {MATCHERS}, got {matcher!r}")
        if verification not in VERIFICATIONS:
            raise ValueError(f"verification: expected one of {VERIFICATIONS}, got {verification!r}")
        if not 0.0 < ratio <= 1.0:
            raise ValueError(f"ratio: expected a value in (0, 1], got {ratio}")
        if candidates is not None and candidates < 1:
            raise ValueError(f"candidates: expected None or a positive integer, got {candidates}")
        self.detector, self.matcher, self.ratio = detector, matcher, ratio
        self.candidates, self.verification = candidates, verification
        self.ransac_px, self.min_inliers = ransac_px, min_inliers
        self.binary = detector in BINARY_DETECTORS
        self._pairwise = self._opencv_matcher() if matcher != "knn2" else None
        warm_up(detector, 0)
        self._features = detector_for(detector, 0)
        self.names = list(objects)
        self.models: dict[str, tuple[Features, tuple[int, int]]] = {}
        for name, img in objects.items():
            gray = to_gray(img)
            self.models[name] = (self._features.detect_and_compute(gray), (gray.shape[1], gray.shape[0]))
        self._index = self._catalogue_index() if candidates is not None else None

    def model_size(self, name: str) -> tuple[int, int]:
        """Width and height of the model image of ``name``."""
        return self.models[name][1]

    def _catalogue_index(self) -> tuple[Features | cv2.DescriptorMatcher, np.ndarray, np.ndarray]:
        """One matcher over every object's descriptors, the owning object of each row, and its position."""
        feats = [(i, self.models[n][0]) for i, n in enumerate(self.names) if len(self.models[n][0])]
        owner = np.concatenate([np.full(len(f), i) for i, f in feats])
        xy = np.concatenate([f.xy for _, f in feats])
        if self.matcher == "knn2":
            return Features.concatenate([f for _, f in feats]), owner, xy
        m = self._opencv_matcher()
        m.add([np.concatenate([f.descriptors for _, f in feats])])
        m.train()
        return m, owner, xy

    def _opencv_matcher(self) -> cv2.DescriptorMatcher:
        if self.matcher == "flann":
            return cv2.FlannBasedMatcher({"algorithm": 1, "trees": 4}, {"checks": 32})
        return cv2.BFMatcher(cv2.NORM_L2)

    def _ratio_matches(self, query: Features, train: Features | cv2.DescriptorMatcher) -> np.ndarray:
        """(K, 2) query and train indices of the ratio-test matches from ``query`` to ``train``."""
        if self.matcher == "knn2":
            assert isinstance(train, Features)  # knn2 matches against Features: a model's or the catalogue index
            return ratio_test_matches(query, train, self.ratio, self.binary)
        # Unpacked binary descriptors: the L2 distance is the square root of the Hamming distance.
        r = float(np.sqrt(self.ratio)) if self.binary else self.ratio
        if isinstance(train, Features):
            assert self._pairwise is not None  # made for every matcher but knn2
            raw = self._pairwise.knnMatch(query.descriptors, train.descriptors, k=2)
        else:
            raw = train.knnMatch(query.descriptors, k=2)
        good = [m[0] for m in raw if len(m) == 2 and m[0].distance < r * m[1].distance]
        return np.array([(m.queryIdx, m.trainIdx) for m in good], np.int64).reshape(-1, 2)

    def process(self, frame: np.ndarray) -> BaselineResult:
        """The objects found in ``frame`` (gray, BGR or BGRA uint8), most inliers first."""
        gray = to_gray(frame)
        t0 = time.perf_counter()
        f = self._features.detect_and_compute(gray)
        t1 = time.perf_counter()
        found = self._match_and_verify(f, gray.shape[:2]) if len(f) >= 2 else []
        t2 = time.perf_counter()
        found.sort(key=lambda d: -d.inliers)
        timings = {f"features_{self.detector}": (t1 - t0) * 1e3, "matching+verification": (t2 - t1) * 1e3}
        return BaselineResult(found, timings)

    def _match_and_verify(self, f: Features, shape: tuple[int, int]) -> list[Detection]:
        """Detections from the frame's features ``f`` (frame ``shape`` rows, columns), in object order."""
        out = []
        if self._index is None:
            for name, (mf, _) in self.models.items():
                if len(mf) == 0:
                    continue
                m = self._ratio_matches(mf, f)
                d = self._verify(name, mf.xy[m[:, 0]], f.xy[m[:, 1]], shape)
                if d is not None:
                    out.append(d)
            return out
        index, owner_of, xy = self._index
        m = self._ratio_matches(f, index)
        owner = owner_of[m[:, 1]]
        ids, counts = np.unique(owner, return_counts=True)
        for oi in ids[np.argsort(-counts, kind="stable")][: self.candidates]:
            sel = owner == oi
            d = self._verify(self.names[oi], xy[m[sel, 1]], f.xy[m[sel, 0]], shape)
            if d is not None:
                out.append(d)
        return out

    def _verify(
        self, name: str, model_xy: np.ndarray, frame_xy: np.ndarray, shape: tuple[int, int]
    ) -> Detection | None:
        """The detection of ``name`` from its matched points, None when it is not verified."""
        if len(model_xy) < 4:
            return None
        w, h = self.model_size(name)
        if self.verification == "objrec":
            v = verify_homography(model_xy, frame_xy, w, h, shape)
            return None if isinstance(v, Failure) else v.to_detection(name)
        H, mask = cv2.findHomography(model_xy, frame_xy, cv2.RANSAC, self.ransac_px)
        if H is None or mask is None:
            return None
        inliers = int(mask.sum())
        if inliers < self.min_inliers:
            return None
        H = H / H[2, 2]
        corners = cv2.perspectiveTransform(model_corners(w, h)[None], H)[0]
        return Detection(name, inliers / float(len(model_xy)), inliers, H, corners)
