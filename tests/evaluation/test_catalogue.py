"""``objrec eval catalogue:PATH``: both layouts parsed, scores against a hand-made ground truth, a small run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec.data import synthetic_cover
from objrec.datasets import DatasetError, load_catalogue
from objrec.evaluation.cli import register
from objrec.evaluation.kinds.catalogue import catalogue_section, score_query


def _write(path: Path, seed: int, size=(120, 160)) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), synthetic_cover(seed, size))


def test_smvs_layout_labels_and_groups(tmp_path):
    for n in ("001", "002", "003"):
        _write(tmp_path / "reference" / f"{n}.jpg", int(n))
    for q in ("Canon_001", "Palm_003", "Nokia_E63_002"):
        _write(tmp_path / "queries" / f"{q}.jpg", 7)
    cat = load_catalogue(tmp_path)
    assert cat.layout == "smvs"
    assert [n for n, _ in cat.references] == ["001", "002", "003"]
    got = sorted((Path(p).name, lab, g) for p, lab, g in cat.queries)
    assert got == [
        ("Canon_001.jpg", "001", "Canon"),
        ("Nokia_E63_002.jpg", "002", "Nokia_E63"),
        ("Palm_003.jpg", "003", "Palm"),
    ]


def test_generic_layout_folders_and_csv(tmp_path):
    for n in ("alpha", "beta"):
        _write(tmp_path / "references" / f"{n}.png", len(n))
    _write(tmp_path / "queries" / "alpha" / "a1.png", 1)
    _write(tmp_path / "queries" / "beta" / "b1.png", 2)
    _write(tmp_path / "queries" / "none" / "n1.png", 3)
    cat = load_catalogue(tmp_path)
    assert cat.layout == "generic"
    got = sorted((Path(p).name, lab, g) for p, lab, g in cat.queries)
    assert got == [("a1.png", "alpha", "alpha"), ("b1.png", "beta", "beta"), ("n1.png", None, "none")]
    (tmp_path / "queries.csv").write_text("image,label,group\nqueries/alpha/a1.png,beta,x\nqueries/none/n1.png,,\n")
    cat = load_catalogue(tmp_path)  # the CSV wins over the folders
    assert [(Path(p).name, lab, g) for p, lab, g in cat.queries] == [("a1.png", "beta", "x"), ("n1.png", None, "all")]
    (tmp_path / "queries.csv").write_text("image,label\nqueries/alpha/a1.png,gamma\n")
    with pytest.raises(DatasetError, match="gamma"):
        load_catalogue(tmp_path)
    with pytest.raises(DatasetError, match="catalogue folder not found"):
        load_catalogue(tmp_path / "nothing")


def test_scores_against_a_hand_made_truth():
    assert score_query(["a", "b"], "a") == {"found": True, "top1": True, "wrong": 1}
    assert score_query(["b", "a"], "a") == {"found": True, "top1": False, "wrong": 1}
    assert score_query(["b"], "a") == {"found": False, "top1": False, "wrong": 1}
    assert score_query([], "a") == {"found": False, "top1": False, "wrong": 0}
    assert score_query(["b", "c"], None) == {"found": False, "top1": False, "wrong": 2}

    def rec(query, truth, names, latency, met=None):
        result = {**score_query(names, truth), "detections": [{"name": n} for n in names]}
        result.update(latency_ms=latency, deadline_met=met, timings_ms={"features": latency / 2})
        return {"detector": "x", "label": query, "meta": {"group": query[0], "truth": truth}, "result": result}

    records = [
        rec("c1", "a", ["a"], 10.0, True),
        rec("c2", "b", ["a", "b"], 20.0, True),
        rec("p3", "c", ["d"], 30.0, False),
        rec("p4", None, [], 40.0, False),
    ]
    s = catalogue_section(records, ["x"], budget_ms=25.0)["summary"]["x"]
    assert (s["n_queries"], s["n_labelled"], s["found"], s["top1"], s["wrong"]) == (4, 3, 2, 1, 2)
    assert s["found_fraction"] == pytest.approx(2 / 3) and s["top1_fraction"] == pytest.approx(1 / 3)
    assert s["queries_with_wrong"] == 2 and s["deadline_misses"] == 2
    assert s["latency_ms"]["p50"] == pytest.approx(25.0) and s["stage_ms_mean"]["features"] == pytest.approx(12.5)


@pytest.mark.slow
def test_small_generic_run_with_distractors(tmp_path):
    """Three covers, photos of two of them (slightly warped) and one of none, two distractors; the default
    recognizer and the one sampling SURF coarsely."""
    root = tmp_path / "cat"
    for i, n in enumerate(("red", "green", "blue")):
        _write(root / "references" / f"{n}.png", 10 + i, (300, 400))
    for i, n in enumerate(("red", "blue")):
        img = synthetic_cover(10 + 2 * i, (300, 400))
        H = cv2.getPerspectiveTransform(
            np.float32([[0, 0], [300, 0], [300, 400], [0, 400]]),
            np.float32([[40, 30], [330, 50], [320, 420], [30, 400]]),
        )
        (root / "queries" / n).mkdir(parents=True)
        cv2.imwrite(str(root / "queries" / n / "p.png"), cv2.warpPerspective(img, H, (400, 480)))
    _write(root / "queries" / "none" / "n.png", 99, (400, 480))
    for s in (50, 51):
        _write(tmp_path / "more" / f"d{s}.png", s, (300, 400))
    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    args = p.parse_args(
        ["eval", f"catalogue:{root}", "--out", str(tmp_path / "out"), "--distractors", str(tmp_path / "more")]
        + ["--detectors", "objrec,objrec-coarse", "--query-side", "0", "--no-progress"]
    )
    assert args.func(args) == 0
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    for det in ("objrec", "objrec-coarse"):  # the second samples SURF every other pixel
        s = rep["catalogue"]["summary"][det]
        assert (s["n_queries"], s["n_labelled"], s["found"], s["top1"], s["wrong"]) == (3, 2, 2, 2, 0), det
    assert any("5 objects enrolled" in n for n in rep["notes"])
    assert (tmp_path / "out" / "plots" / "catalogue.png").is_file()
