"""The prefilter: a decision tree on cheap cell features rejects most of the frame before SIFT/SURF.

``RegionPrefilter`` is the entry point (``fit``/``train``, ``propose``, ``save``/``load``/``load_for``);
cell features live in :mod:`objrec.prefilter.features`, compiled tree inference in
:mod:`objrec.prefilter.tree`, training-scene generation in :mod:`objrec.prefilter.training` and the
``train-prefilter`` subcommand in :mod:`objrec.prefilter.cli`.
"""

from objrec.prefilter.features import FEATURE_NAMES, FeatureParams, cell_features, cell_features_xp
from objrec.prefilter.model import (
    DEFAULT_FILENAME,
    PrefilterError,
    RegionPrefilter,
    StalePrefilterError,
    StalePrefilterWarning,
    expand_regions,
    regions_to_mask,
)
from objrec.prefilter.tree import FlatCascade, FlatTree, cascade_scores

__all__ = [
    "RegionPrefilter",
    "PrefilterError",
    "StalePrefilterError",
    "StalePrefilterWarning",
    "DEFAULT_FILENAME",
    "regions_to_mask",
    "expand_regions",
    "FEATURE_NAMES",
    "FeatureParams",
    "cell_features",
    "cell_features_xp",
    "FlatTree",
    "FlatCascade",
    "cascade_scores",
]
