"""Retrieval index: exact brute-force voting as the reference, incremental updates, files, database tie-in."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.knn import BruteForceIndex
from objrec.matching.retrieval import (
    RetrievalIndex,
    RetrievalParams,
    vote,
)
from objrec.metrics.retrieval import ns_score

SIFT_ONLY = {"sift": {"n_features": 0}}


def clustered(n_objects=40, per_object=60, seed=0):
    """SIFT-like integer descriptors around one centre per object: neighbours are well separated."""
    rng = np.random.default_rng(seed)
    centres = rng.integers(20, 236, (n_objects, 128))
    owner = np.repeat(np.arange(n_objects), per_object)
    desc = np.clip(centres[owner] + rng.integers(-12, 13, (len(owner), 128)), 0, 255).astype(np.float32)
    return desc, owner


def reference_votes(query, desc, owner, k, top):
    idx, _ = BruteForceIndex(desc).knn(query, k)
    return vote(owner[idx], top)


def test_vote_counts_each_object_once_per_descriptor():
    labels = np.array([[3, 3, 1], [1, 2, -1], [2, 2, 2], [-1, -1, -1]])
    ids, scores = vote(labels)
    assert ids.tolist() == [1, 2, 3]  # 1 and 2 have two votes (tie: smaller id first), 3 one
    np.testing.assert_allclose(scores, [0.5, 0.5, 0.25])
    assert vote(labels, top=1)[0].tolist() == [1]
    assert vote(np.zeros((0, 5), np.int64))[0].shape == (0,)


@pytest.mark.parametrize("params", [RetrievalParams(), RetrievalParams(exact_below=0, n_lists=16, n_probe=16)])
def test_index_equals_brute_force_voting_when_exact(params):
    """The flat index, and an inverted file probing every cell, vote exactly as brute force does."""
    desc, owner = clustered()
    index = RetrievalIndex.build(desc, owner, "sift", params)
    assert index.exact == (params.exact_below > 0) and len(index) == len(desc)
    rng = np.random.default_rng(1)
    for obj in (0, 17, 39):
        query = desc[owner == obj][:30] + rng.normal(0, 4, (30, 128))
        ids, scores = index.candidates(query, top=5)
        ref_ids, ref_scores = reference_votes(query, desc, owner, params.k, 5)
        assert ids.tolist() == ref_ids.tolist() and ids[0] == obj
        np.testing.assert_allclose(scores, ref_scores)


def test_inverted_file_probing_few_cells_still_ranks_the_object_first():
    desc, owner = clustered(n_objects=60)
    index = RetrievalIndex.build(desc, owner, "sift", RetrievalParams(exact_below=0, n_lists=32, n_probe=2))
    assert not index.exact and index.index_.nprobe == 2
    rng = np.random.default_rng(2)
    hits = [index.candidates(desc[owner == o][:20] + rng.normal(0, 4, (20, 128)), top=1)[0][0] == o for o in range(60)]
    assert np.mean(hits) >= 0.95


def test_add_and_remove_equal_a_rebuild():
    desc, owner = clustered(n_objects=12)
    keep = owner != 4
    index = RetrievalIndex.build(desc[owner < 10], owner[owner < 10], "sift")
    assert index.remove([4]) == int((owner == 4).sum())
    index.add(desc[owner >= 10], owner[owner >= 10])
    fresh = RetrievalIndex.build(desc[keep], owner[keep], "sift")
    query = desc[owner == 11][:25]
    assert index.candidates(query)[0].tolist() == fresh.candidates(query)[0].tolist()
    assert 4 not in index.candidates(desc[owner == 4])[0]


def test_bad_arguments_name_them():
    desc, owner = clustered(n_objects=3)
    with pytest.raises(ValueError, match="owner"):
        RetrievalIndex.build(desc, owner[:-1], "sift")
    index = RetrievalIndex.build(desc, owner, "sift")
    with pytest.raises(ValueError, match=r"query: expected a \(N, 128\) array"):
        index.candidates(np.zeros((3, 64), np.float32))
    ids, scores = index.candidates(np.zeros((0, 128), np.float32))
    assert ids.shape == (0,) and scores.shape == (0,)


# -- real data ----------------------------------------------------------------------------------------
def _sift(img, n_features=0):
    kp, d = cv2.SIFT_create(nfeatures=n_features).detectAndCompute(img, None)
    return np.zeros((0, 128), np.float32) if d is None else d


@pytest.mark.slow
def test_smvs_phone_photos_index_close_to_exact_voting(shared_data):
    """Real phone photos of DVD covers against 50 references + 50 other covers (OpenCV SIFT on both):
    the inverted file of product-quantised codes finds the right cover among its top 5 as often as exact
    brute-force voting, within 0.1."""
    refs = sorted((shared_data / "smvs_dvd" / "reference").glob("*.jpg"))[:50]
    others = sorted((shared_data / "dvd_covers").glob("*.jpg"))[:50]
    feats = [_sift(cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)) for p in refs + others]
    desc = np.concatenate(feats)
    owner = np.concatenate([np.full(len(f), i) for i, f in enumerate(feats)])
    qpaths = sorted((shared_data / "smvs_dvd" / "queries").glob("*.jpg"))[::8][:24]
    params = RetrievalParams(exact_below=0, codes="pq")  # an inverted file even at this size
    index = RetrievalIndex.build(desc, owner, "sift", params)
    assert not index.exact and index.index_.nlist > 4 * params.n_probe
    hit_index, hit_exact = [], []
    for p in qpaths:
        img = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
        img = cv2.resize(img, None, fx=640 / max(img.shape), fy=640 / max(img.shape), interpolation=cv2.INTER_AREA)
        q = _sift(img, 400)
        truth = int(p.stem.split("_")[-1]) - 1
        hit_index.append(truth in index.candidates(q, top=5)[0])
        hit_exact.append(truth in reference_votes(q, desc, owner, params.k, 5)[0])
    recall_index, recall_exact = np.mean(hit_index), np.mean(hit_exact)
    print(f"SMVS top-5 recall, {len(qpaths)} phone photos: index {recall_index:.3f}, exact {recall_exact:.3f}")
    assert recall_exact >= 0.7  # the check means something: exact voting finds most covers
    assert recall_index >= recall_exact - 0.1


def test_ukbench_ns_score_index_close_to_exact(shared_data):
    """UKBench protocol (every image queried against all, itself included), OpenCV SIFT on the real UKBench
    images: the index's Nister-Stewenius score (product-quantised codes) is within 0.1 of exact voting on the
    same descriptors."""
    folder = shared_data / "ukbench"
    paths = sorted(folder.glob("ukbench*.jpg"))[:80]
    if len(paths) < 80:
        pytest.skip(f"{folder}: fewer than 80 ukbench*.jpg images")
    feats = [_sift(cv2.imread(str(p), cv2.IMREAD_GRAYSCALE), n_features=500) for p in paths]
    desc = np.concatenate(feats)
    owner = np.concatenate([np.full(len(f), i) for i, f in enumerate(feats)])
    groups = np.arange(len(paths)) // 4
    params = RetrievalParams(exact_below=0, k=5, codes="pq")
    index = RetrievalIndex.build(desc, owner, "sift", params)
    exact_ns = ns_score([reference_votes(f, desc, owner, params.k, 4)[0] for f in feats], groups)
    assert exact_ns > 2.5  # views of one object find each other: the folder is UKBench
    ns = ns_score([index.candidates(f, top=4)[0] for f in feats], groups)
    print(f"UKBench NS score, first {len(paths)} images: index {ns:.3f}, exact {exact_ns:.3f}")
    assert ns >= exact_ns - 0.1
