"""``hpatches:ROOT``: feature evaluation on the HPatches full sequences (``v_*``/``i_*`` with ``H_1_N``)."""

from __future__ import annotations

from typing import Any

from objrec.datasets import load_hpatches
from objrec.evaluation.config import EvalConfig
from objrec.evaluation.feature_eval import build_feature_tasks
from objrec.evaluation.kinds.families import pair_kind

__all__ = ["KIND", "DEFAULT_DETECTORS", "build"]

DEFAULT_DETECTORS = ("surf", "sift", "opencv-sift", "orb", "akaze")


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``pair`` task per detector and pair ``1 -> N`` of the selected sequences."""
    return build_feature_tasks(cfg, load_hpatches, DEFAULT_DETECTORS, surf_reference=False)


KIND = pair_kind("hpatches", build)
