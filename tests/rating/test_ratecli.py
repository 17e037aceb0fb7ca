"""``objrec rate``: JSON output, pictures that do not collide, the database's detectors, bad input."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from objrec.cli import main
from objrec.data import sample_objects
from objrec.rating import RATING_VERSION, rate


@pytest.fixture(scope="module")
def two_same_names(tmp_path_factory):
    """Two different images, both called cover.png, in two folders."""
    root = tmp_path_factory.mktemp("rate")
    objs = sample_objects()
    paths = []
    for folder, name in (("a", "cover"), ("b", "pagoda")):
        (root / folder).mkdir()
        p = root / folder / "cover.png"
        cv2.imwrite(str(p), objs[name])
        paths.append(p)
    return paths


def test_json_lists_each_image_with_score_and_reasons(two_same_names, capsys):
    assert main(["rate", "--json", *map(str, two_same_names)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["image"] for r in doc["results"]] == [str(p) for p in two_same_names]
    for r, p in zip(doc["results"], two_same_names, strict=True):
        assert r["score"] == rate(p).score and 0 <= r["score"] <= 100
        assert all({"code", "value", "message"} <= set(x) for x in r["reasons"])
        assert r["version"] == RATING_VERSION


def test_out_writes_distinct_pictures_for_same_file_names(two_same_names, tmp_path, capsys):
    out = tmp_path / "pics"
    assert main(["rate", "--out", str(out), *map(str, two_same_names)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sum("/100" in line for line in lines) == 2
    files = sorted(out.glob("*.png"))
    assert len(files) == 2 and not list(out.glob("*.tmp*"))
    a, b = (cv2.imread(str(f)) for f in files)
    assert a is not None and b is not None and min(a.shape[:2]) >= 300
    assert a.shape != b.shape or np.abs(a.astype(int) - b).mean() > 5


def test_bad_files_each_get_an_error_and_the_others_are_rated(two_same_names, tmp_path, capsys):
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    text = tmp_path / "notes.jpg"
    text.write_text("not an image")
    deep = tmp_path / "deep.png"
    cv2.imwrite(str(deep), np.full((64, 64), 40000, np.uint16))
    huge = tmp_path / "huge.png"
    cv2.imwrite(str(huge), np.zeros((8200, 8200), np.uint8))
    files = [empty, two_same_names[0], text, deep, huge, tmp_path / "missing.png"]
    assert main(["rate", "--json", *map(str, files)]) == 2
    cap = capsys.readouterr()
    results = json.loads(cap.out)["results"]
    assert [("error" in r) for r in results] == [True, False, True, True, True, True]
    errors = cap.err.strip().splitlines()
    assert len(errors) == 5
    for f, why in zip(
        (empty, text, deep, huge, files[-1]), ("empty", "not a readable", "uint16", "exceeds", "no such"), strict=True
    ):
        assert any(str(f) in e and why in e for e in errors), (f, errors)


def test_db_detectors_are_used(two_same_names, tmp_path, capsys):
    from objrec.modeldb import ModelDB

    ModelDB.create(tmp_path / "db", detectors={"sift": {"n_features": 0}})
    assert main(["rate", "--json", "--db", str(tmp_path / "db"), str(two_same_names[0])]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["kind"] == "sift"


def test_envelope_prints_its_figures_writes_its_plot_and_json(two_same_names, tmp_path, capsys, monkeypatch):
    """``--envelope`` measures :func:`objrec.envelope.measure_envelope` (here on a few of its views, to keep the
    test short) and reports its figures in the text, the JSON and a plot beside the rating's picture."""
    import objrec.envelope as envelope

    full = envelope.measure_envelope

    def few(img, **kw):
        return full(img, views=[0, 1, len(envelope.GRID) - 1], **kw)

    monkeypatch.setattr(envelope, "measure_envelope", few)
    path = str(two_same_names[0])
    assert main(["rate", "--envelope", "--out", str(tmp_path), path]) == 0
    out = capsys.readouterr().out
    assert "envelope: found in" in out and "of 3 views" in out
    plots = list(tmp_path.glob("*_envelope.png"))
    assert len(plots) == 1 and cv2.imread(str(plots[0])) is not None
    assert main(["rate", "--envelope", "--json", path]) == 0
    env = json.loads(capsys.readouterr().out)["results"][0]["envelope"]
    assert env["n_views"] == 3 and 0.0 <= env["found_share"] <= 1.0
    assert env["runs"] == envelope.ENVELOPE_RUNS  # the default: each view rendered that many times
    runs = sum(v["runs"] for v in env["views"])
    assert (
        runs == 3 * envelope.ENVELOPE_RUNS and env["found_share"] == sum(v["found_runs"] for v in env["views"]) / runs
    )
    assert main(["rate", "--envelope", "--envelope-runs", "1", "--json", path]) == 0
    env = json.loads(capsys.readouterr().out)["results"][0]["envelope"]
    assert env["runs"] == 1 and env["found_share"] == sum(v["found"] for v in env["views"]) / 3
    assert main(["rate", "--envelope", "--envelope-runs", "0", path]) == 2
    assert "--envelope-runs" in capsys.readouterr().err
    assert main(["rate", "--envelope-runs", "2", path]) == 2  # without --envelope it would do nothing
    assert "only with --envelope" in capsys.readouterr().err
