"""Evaluation metrics: feature repeatability and matching score, matching accuracy, homography accuracy.

Feature metrics follow Mikolajczyk et al. (IJCV 2005) as computed by VLBenchmarks; see
:mod:`objrec.metrics.regions` for the protocol, :mod:`objrec.metrics.descriptors` for the descriptor metrics
and :mod:`objrec.metrics.ellipse` for the region geometry.

References
----------
K. Mikolajczyk et al., "A comparison of affine region detectors", IJCV 65(1/2):43-72, 2005.
doi:10.1007/s11263-005-3848-x

V. Balntas, K. Lenc, A. Vedaldi, K. Mikolajczyk, "HPatches: A benchmark and evaluation of handcrafted and
learned local descriptors", CVPR 2017. doi:10.1109/CVPR.2017.410
"""

from __future__ import annotations

from objrec.metrics.descriptors import (
    MatchingAccuracyResult,
    MatchingScoreResult,
    features_from_opencv_reference,
    greedy_descriptor_matches,
    matching_score,
    mean_matching_accuracy,
    mutual_nearest_neighbours,
)
from objrec.metrics.ellipse import ellipse_overlap, ellipses_from_features, project_points, warp_ellipses
from objrec.metrics.homography import HomographyAccuracyResult, corner_error, homography_accuracy
from objrec.metrics.regions import RepeatabilityResult, geometric_correspondences, greedy_one_to_one, repeatability

__all__ = [
    "RepeatabilityResult",
    "MatchingScoreResult",
    "MatchingAccuracyResult",
    "HomographyAccuracyResult",
    "repeatability",
    "matching_score",
    "mean_matching_accuracy",
    "homography_accuracy",
    "corner_error",
    "geometric_correspondences",
    "greedy_one_to_one",
    "greedy_descriptor_matches",
    "mutual_nearest_neighbours",
    "features_from_opencv_reference",
    "ellipse_overlap",
    "ellipses_from_features",
    "warp_ellipses",
    "project_points",
]
