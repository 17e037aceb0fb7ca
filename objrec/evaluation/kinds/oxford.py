"""``oxford:ROOT``: feature evaluation on the Oxford affine sequences (``<seq>/img1..6`` and ``H1toNp``).

The one feature kind with OpenCV's own SURF(400) output precomputed (``opencv-surf-ref``).
"""

from __future__ import annotations

from typing import Any

from objrec.datasets import load_oxford_affine
from objrec.evaluation.config import EvalConfig
from objrec.evaluation.feature_eval import build_feature_tasks
from objrec.evaluation.kinds.families import pair_kind

__all__ = ["KIND", "DEFAULT_DETECTORS", "build"]

DEFAULT_DETECTORS = ("surf", "sift", "opencv-sift", "orb", "akaze", "opencv-surf-ref")


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``pair`` task per detector and pair ``1 -> N`` of the selected sequences."""
    return build_feature_tasks(cfg, load_oxford_affine, DEFAULT_DETECTORS, surf_reference=True)


KIND = pair_kind("oxford", build)
