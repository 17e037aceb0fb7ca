"""DatabaseMatcher: matches of a frame against every enrolled object at once, grouped by object."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from objrec.data import sample_background, sample_objects
from objrec.features import SIFT
from objrec.matching.database import DatabaseMatcher
from objrec.matching.verifier import CandidateVerifier, aspect_limits
from objrec.matching.verify import VerifyParams
from objrec.modeldb import ModelObject
from objrec.scenes import compose_scene, place_homography
from objrec.types import Detection, Features, Rejection


def _project(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    hom = np.c_[pts, np.ones(len(pts))] @ H.T
    return hom[:, :2] / hom[:, 2:3]


@pytest.fixture(scope="module")
def setup():
    """Three enrolled objects (SIFT, 500 features each); a 640x480 scene holding two of them."""
    objs = sample_objects()
    sift = SIFT(n_features=500, backend="cpu")
    models = []
    for name, img in objs.items():
        h, w = img.shape[:2]
        models.append(ModelObject(name, w, h, {"sift": sift.detect_and_compute(img)}))
    homs = {
        "pagoda": place_homography((310, 305), (180, 170), 0.7, 15.0, (0.05, 0.0)),
        "cover": place_homography((300, 400), (470, 280), 0.75, -20.0, (0.0, 0.08)),
    }
    scene = compose_scene(
        sample_background((640, 480), seed=3),
        {k: objs[k] for k in homs},
        rng=5,
        homographies=homs,
    )
    feats = sift.detect_and_compute(scene.image)
    return models, scene, feats


def test_candidates_grouped_per_object_equal_a_reference(setup):
    models, scene, feats = setup
    matcher = DatabaseMatcher(models, "sift", ratio=0.75)
    assert len(matcher) == sum(len(m.features["sift"]) for m in models)
    cands = matcher.candidates(feats)

    # Reference: one float64 distance matrix against all rows, Lowe's ratio, then group by owner.
    train = np.concatenate([m.features["sift"].descriptors for m in models]).astype(np.float64)
    owner = np.concatenate([np.full(len(m.features["sift"]), i) for i, m in enumerate(models)])
    row_xy = np.concatenate([m.features["sift"].xy for m in models])
    d = cdist(feats.descriptors.astype(np.float64), train)
    order = np.argsort(d, axis=1)[:, :2]
    d1, d2 = np.take_along_axis(d, order, axis=1).T
    keep = d1 < 0.75 * d2
    border = np.abs(d1 / d2 - 0.75) < 1e-4
    want: dict[int, set] = {}
    for q in np.nonzero(keep)[0]:
        t = order[q, 0]
        want.setdefault(int(owner[t]), set()).add((tuple(row_xy[t]), tuple(feats.xy[q])))

    got = {c.object_index: {(tuple(a), tuple(b)) for a, b in zip(c.model_xy, c.scene_xy, strict=True)} for c in cands}
    assert set(got) >= {0, 2}  # pagoda and cover
    for oi in set(got) | set(want):
        diff = got.get(oi, set()) ^ want.get(oi, set())
        # Only matches at the ratio threshold may differ (float32 GEMM vs float64).
        allowed = {tuple(feats.xy[q]) for q in np.nonzero(border)[0]}
        assert all(b in allowed for _, b in diff), diff
    # Ordered by number of matches; ratios reported are below the threshold.
    sizes = [len(c.model_xy) for c in cands]
    assert sizes == sorted(sizes, reverse=True)
    for c in cands:
        assert len(c.model_xy) == len(c.scene_xy) == len(c.ratio)
        assert np.all(c.ratio < 0.75)
        # Each model point is one of that object's own keypoints.
        own = {tuple(p) for p in models[c.object_index].features["sift"].xy}
        assert all(tuple(p) in own for p in c.model_xy)


def test_candidates_of_present_objects_follow_their_true_homography(setup):
    models, scene, feats = setup
    cands = {c.object_index: c for c in DatabaseMatcher(models, "sift").candidates(feats)}
    for oi, name in ((0, "pagoda"), (2, "cover")):
        c = cands[oi]
        H = scene.truth(name).homography
        err = np.linalg.norm(_project(H, c.model_xy.astype(np.float64)) - c.scene_xy, axis=1)
        assert len(c.model_xy) >= 30
        assert np.mean(err < 3.0) > 0.8, (name, np.mean(err < 3.0))


def test_candidates_verify_to_both_present_objects_and_not_the_absent_one(setup):
    """The matcher's candidates, verified as the recognizer verifies them (:class:`CandidateVerifier`)."""
    models, scene, feats = setup
    matcher = DatabaseMatcher(models, "sift")
    verifier = CandidateVerifier(VerifyParams(), aspect_limits(models))
    results = [verifier.verify(c, scene.image.shape[:2]) for c in matcher.candidates(feats)]
    detections = [v for v in results if isinstance(v, Detection)]
    assert sorted(d.name for d in detections) == ["cover", "pagoda"]
    for d in detections:
        truth = scene.truth(d.name)
        assert np.abs(d.corners - truth.corners).max() < 3.0
        assert 0.0 < d.score <= 1.0
    for r in results:
        if isinstance(r, Rejection):
            assert r.name == "dahlia" and r.reason and r.matches >= 1


def test_sift_features_never_matched_against_a_surf_database(setup):
    models, scene, feats = setup
    rng = np.random.default_rng(0)
    n = 30
    desc = rng.random((n, 64)).astype(np.float32)
    desc /= np.linalg.norm(desc, axis=1, keepdims=True)
    surf = Features(
        rng.uniform(0, 100, (n, 2)),
        np.full(n, 10.0),
        np.zeros(n),
        np.ones(n),
        np.zeros(n),
        rng.choice([-1, 1], n),
        desc,
        kind="surf",
    )
    surf_db = DatabaseMatcher([ModelObject("s", 100, 100, {"surf": surf})], "surf")
    with pytest.raises(ValueError, match="sift"):
        surf_db.candidates(feats)
    with pytest.raises(ValueError, match="surf"):
        DatabaseMatcher(models, "sift").candidates(surf)


def test_surf_database_uses_laplacian_signs():
    # Scene descriptors copy model rows; those with a flipped Laplacian sign must never be matched.
    rng = np.random.default_rng(1)
    n = 60
    desc = rng.random((n, 64)).astype(np.float32)
    desc /= np.linalg.norm(desc, axis=1, keepdims=True)
    lap = rng.choice(np.int8([-1, 1]), n)
    xy = rng.uniform(0, 200, (n, 2))
    model = Features(xy, np.full(n, 10.0), np.zeros(n), np.ones(n), np.zeros(n), lap, desc, kind="surf")
    flip = np.arange(n) % 2 == 0
    scene_lap = np.where(flip, -lap, lap)
    scene_desc = desc + rng.normal(0, 1e-3, desc.shape).astype(np.float32)
    scene = Features(xy + 7, np.full(n, 10.0), np.zeros(n), np.ones(n), np.zeros(n), scene_lap, scene_desc, "surf")
    cands = DatabaseMatcher([ModelObject("a", 200, 200, {"surf": model})], "surf").candidates(scene)
    assert len(cands) == 1
    c = cands[0]
    # Matched pairs are exactly the unflipped ones, each to its own source row.
    np.testing.assert_allclose(c.scene_xy - c.model_xy, 7.0, atol=1e-4)
    assert len(c.model_xy) == int((~flip).sum())
    model_rows = {tuple(p) for p in model.xy[~flip]}
    assert {tuple(p) for p in c.model_xy} == model_rows


def test_empty_inputs_give_no_candidates(setup):
    models, _, feats = setup
    matcher = DatabaseMatcher(models, "sift")
    assert matcher.candidates(Features.empty(128, "sift")) == []
    # An empty database, and objects without any features of the kind.
    assert DatabaseMatcher([], "sift").candidates(feats) == []
    blank = ModelObject("blank", 50, 50, {"sift": Features.empty(128, "sift")})
    empty_db = DatabaseMatcher([blank], "sift")
    assert len(empty_db) == 0 and empty_db.candidates(feats) == []
