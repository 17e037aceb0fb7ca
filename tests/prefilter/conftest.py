"""Fixtures shared by the prefilter tests: a small model database and a prefilter trained for it."""

from __future__ import annotations

import pytest

from objrec import ModelDB
from objrec.data import sample_objects
from objrec.prefilter import RegionPrefilter


@pytest.fixture(scope="session")
def db(tmp_path_factory) -> ModelDB:
    """The three demo objects; SIFT only, as training reads the images and the id, not the features."""
    d = ModelDB.create(tmp_path_factory.mktemp("pf") / "db", detectors={"sift": {"n_features": 300}})
    for name, img in sample_objects().items():
        d.enroll(name, img)
    return d


@pytest.fixture(scope="session")
def trained(db) -> RegionPrefilter:
    """Trained once per session; tests must not modify it (use ``sklearn.base.clone`` or a file copy)."""
    return RegionPrefilter(random_state=0).train(db, None, n_scenes=80, seed=1)
