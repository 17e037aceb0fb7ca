"""The prefilter: a decision tree on cheap cell features rejects most of the frame before SIFT/SURF.

:class:`RegionPrefilter` is the entry point (``fit``/``train``, ``propose``, ``save``/``load``/``load_for``).
The package follows the data flow:

- :mod:`objrec.prefilter.features`: cell features of a frame from integral images (Numba and array code);
- :mod:`objrec.prefilter.tree`: scikit-learn trees as flat arrays, evaluated in one compiled call;
- :mod:`objrec.prefilter.estimator`: :class:`RegionPrefilter`, the scikit-learn-style estimator;
- :mod:`objrec.prefilter.regions`: kept cells to boxes (:func:`expand_regions` grows them for crops);
- :mod:`objrec.prefilter.scenes`: backgrounds and generated training scenes;
- :mod:`objrec.prefilter.training`: :func:`train_prefilter` for a model database, region-threshold calibration;
- :mod:`objrec.prefilter.storage`: JSON manifest + ``.npz`` files, checksums, staleness;
- :mod:`objrec.prefilter.cli`: the ``objrec train-prefilter`` subcommand.

:func:`regions_to_mask` is :func:`objrec.boxes.regions_to_mask`, re-exported for callers of the prefilter.
"""

from objrec.boxes import regions_to_mask
from objrec.prefilter.estimator import RegionPrefilter
from objrec.prefilter.features import FEATURE_NAMES, FeatureParams, cell_features, cell_features_xp
from objrec.prefilter.regions import expand_regions
from objrec.prefilter.storage import DEFAULT_FILENAME, PrefilterError, StalePrefilterError, StalePrefilterWarning
from objrec.prefilter.training import train_prefilter
from objrec.prefilter.tree import FlatCascade, FlatTree, cascade_scores

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
