"""The prefilter: a decision tree on cheap cell features rejects most of the frame before SIFT/SURF.

:class:`RegionPrefilter` is the entry point (``fit``/``train``, ``propose``, ``save``/``load``/``load_for``).
The package follows the data flow:

- :mod:`objrec.prefilter.features`: cell features of a frame from integral images (Numba and array code);
- :mod:`objrec.prefilter.tree`: scikit-learn trees as flat arrays, evaluated in one compiled call;
- :mod:`objrec.prefilter.fitting`: a cascade of trees fitted and its thresholds chosen, on plain arrays;
- :mod:`objrec.prefilter.estimator`: :class:`RegionPrefilter`, the scikit-learn-style estimator, and
  :func:`train_prefilter`;
- :mod:`objrec.prefilter.regions`: kept cells to boxes (:func:`expand_regions` grows them for crops);
- :mod:`objrec.prefilter.scenes`: backgrounds and generated training scenes;
- :mod:`objrec.prefilter.training`: fitting for a model database's scenes, region-threshold calibration;
- :mod:`objrec.prefilter.storage`: JSON manifest + ``.npz`` files, checksums, staleness;
- :mod:`objrec.prefilter.resolve`: the prefilter a recognizer uses (the stored one, one given, or none);
- :mod:`objrec.prefilter.online`: :class:`~objrec.prefilter.online.OnlinePrefilter`, which adapts to the live
  scene with refits (:mod:`objrec.prefilter.refit`) in a worker process (:mod:`objrec.prefilter.worker`);
- :mod:`objrec.prefilter.cli`: the ``objrec train-prefilter`` subcommand.

:func:`regions_to_mask` is :func:`objrec.boxes.regions_to_mask`, re-exported for callers of the prefilter.
"""

from __future__ import annotations

from objrec._lazy import lazy_attributes

# Imported on first use: the command line registers ``train-prefilter`` from the ``cli`` submodule without
# loading scikit-learn and Numba.
_LAZY = {
    "regions_to_mask": "objrec.boxes",
    "RegionPrefilter": "objrec.prefilter.estimator",
    "FEATURE_NAMES": "objrec.prefilter.features",
    "FeatureParams": "objrec.prefilter.features",
    "cell_features": "objrec.prefilter.features",
    "cell_features_xp": "objrec.prefilter.features",
    "expand_regions": "objrec.prefilter.regions",
    "DEFAULT_FILENAME": "objrec.prefilter.storage",
    "PrefilterError": "objrec.prefilter.storage",
    "StalePrefilterError": "objrec.prefilter.storage",
    "StalePrefilterWarning": "objrec.prefilter.storage",
    "train_prefilter": "objrec.prefilter.estimator",
    "FlatCascade": "objrec.prefilter.tree",
    "FlatTree": "objrec.prefilter.tree",
    "cascade_scores": "objrec.prefilter.tree",
}

__all__ = [
    "RegionPrefilter",
    "train_prefilter",
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


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
