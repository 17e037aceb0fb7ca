"""The prefilter: a decision tree on cheap cell features rejects most of the frame before SIFT/SURF.

``RegionPrefilter`` is the entry point (``fit``/``train``, ``propose``, ``save``/``load``/``load_for``);
cell features live in :mod:`objrec.prefilter.features`, compiled tree inference in
:mod:`objrec.prefilter.tree`, training-scene generation in :mod:`objrec.prefilter.training` and the
``train-prefilter`` subcommand in :mod:`objrec.prefilter.cli`.
"""

from __future__ import annotations

import importlib
from typing import Any

# Imported on first use: the command line registers ``train-prefilter`` from the ``cli`` submodule without
# loading scikit-learn and Numba.
_LAZY = {
    "FEATURE_NAMES": "features",
    "FeatureParams": "features",
    "cell_features": "features",
    "cell_features_xp": "features",
    "DEFAULT_FILENAME": "model",
    "PrefilterError": "model",
    "RegionPrefilter": "model",
    "StalePrefilterError": "model",
    "StalePrefilterWarning": "model",
    "expand_regions": "model",
    "regions_to_mask": "model",
    "FlatCascade": "tree",
    "FlatTree": "tree",
    "cascade_scores": "tree",
}

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


def __getattr__(name: str) -> Any:
    sub = _LAZY.get(name)
    if sub is None:
        raise AttributeError(f"module 'objrec.prefilter' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"objrec.prefilter.{sub}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
