"""``objrec eval ukbench:DIR``: the N-S score against a hand count, the folder's grouping and errors, how an EXIF
orientation tag is read, and a small run on the real UKBench images."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec.datasets import DatasetError
from objrec.evaluation.cli import register
from objrec.evaluation.kinds.ukbench import ukbench_groups
from objrec.evaluation.kinds.ukbench_report import image_group
from objrec.metrics.retrieval import ns_score


def _brute_force_ns(ranked, groups):
    total = 0
    for q, results in enumerate(ranked):
        for r in results[:4]:
            if groups[r] == groups[q]:
                total += 1
    return total / len(ranked)


def test_ns_score_on_a_hand_made_ranking():
    groups = [0, 0, 0, 0, 1, 1, 1, 1]
    ranked = [
        [0, 1, 2, 3],  # 4: all of its object
        [1, 4, 0, 5],  # 2
        [2, 3, 1, 0, 4],  # 4: a fifth result is not counted
        [7, 6, 5, 4],  # 0
        [4, 5],  # 2: a short list counts what it holds
        [5, 6, 7, 4],  # 4
        [6, 0, 1, 2],  # 1
        [],  # 0
    ]
    expected = (4 + 2 + 4 + 0 + 2 + 4 + 1 + 0) / 8
    assert ns_score(ranked, groups) == pytest.approx(expected)
    assert ns_score(ranked, groups) == pytest.approx(_brute_force_ns(ranked, groups))
    assert ns_score([list(range(4 * (q // 4), 4 * (q // 4) + 4)) for q in range(8)], groups) == 4.0
    with pytest.raises(ValueError, match="one ranking per image"):
        ns_score(ranked[:3], groups)


def _fake_folder(folder: Path, numbers) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    img = np.zeros((24, 32, 3), np.uint8)
    for n in numbers:
        cv2.imwrite(str(folder / f"ukbench{n:05d}.jpg"), img)
    (folder / "notes.txt").write_text("not an image of the set")
    return folder


def test_groups_of_a_fake_folder(tmp_path):
    folder = _fake_folder(tmp_path / "uk", range(12))
    groups = ukbench_groups(folder)
    assert [[p.name for p in g] for g in groups] == [
        [f"ukbench{4 * k + v:05d}.jpg" for v in range(4)] for k in range(3)
    ]
    assert [image_group(p.stem) for g in groups for p in g] == [k for k in range(3) for _ in range(4)]
    assert len(ukbench_groups(folder, 2)) == 2
    with pytest.raises(DatasetError, match="--objects 4"):
        ukbench_groups(folder, 4)


def test_folder_errors_name_the_folder_and_file(tmp_path):
    with pytest.raises(DatasetError, match="UKBench folder not found"):
        ukbench_groups(tmp_path / "absent")
    empty = _fake_folder(tmp_path / "empty", [])
    with pytest.raises(DatasetError, match=f"{empty}: no ukbenchNNNNN.jpg"):
        ukbench_groups(empty)
    gap = _fake_folder(tmp_path / "gap", [n for n in range(8) if n != 5])
    with pytest.raises(DatasetError, match=rf"{gap}: 1 UKBench image\(s\) missing .*ukbench00005\.jpg"):
        ukbench_groups(gap)
    odd = _fake_folder(tmp_path / "odd", range(6))
    with pytest.raises(DatasetError, match=f"{odd}: 6 UKBench images, not a multiple of 4"):
        ukbench_groups(odd)


def test_exif_orientation_is_not_applied(tmp_path):
    """objrec's reader keeps a tagged JPEG's stored layout, where cv2.imread's default rotates it."""
    pil = pytest.importorskip("PIL.Image")
    from objrec.imageio import read_image

    exif = pil.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    buf = io.BytesIO()
    pil.fromarray(np.full((32, 64, 3), 128, np.uint8)).save(buf, format="JPEG", exif=exif.tobytes())
    path = tmp_path / "ukbench00000.jpg"
    path.write_bytes(buf.getvalue())
    assert cv2.imread(str(path)).shape[:2] == (64, 32)  # the reference: the tag is there and OpenCV honours it
    assert read_image(path).shape[:2] == (32, 64)


def test_small_run_on_real_ukbench(shared_data, tmp_path):
    folder = shared_data / "ukbench"
    if not (folder / "ukbench00015.jpg").is_file():
        pytest.skip(f"{folder}: the UKBench images are not there")
    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    args = p.parse_args(
        ["eval", f"ukbench:{folder}", "--out", str(tmp_path / "out"), "--objects", "4", "--no-progress"]
        + ["--detectors", "objrec,findobj,retrieval-sift"]
    )
    assert args.func(args) == 0
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    u = rep["ukbench"]
    assert set(u) == {"retrieval", "recognition", "queries"}
    sift = u["retrieval"]["sift"]
    assert sift["n_images"] == 16 and sift["exact"]["ns_score"] > 2.0
    assert 0.0 <= sift["index"]["ns_score"] <= 4.0
    one = u["recognition"]["1-view"]
    assert set(one) == {"objrec", "findobj"}
    for s in one.values():
        assert s["n_queries"] == 12
        assert set(s) >= {"found_fraction", "wrong_top1_fraction", "latency_ms"}
    assert len([q for q in u["queries"] if q["setting"] == "1-view"]) == 24
    assert rep["detectors"]["2-view"]["available"]
    two = u["recognition"]["2-view"]
    assert set(two) == {"objrec", "findobj"} and all(s["n_queries"] == 8 for s in two.values())
    assert (tmp_path / "out" / "plots" / "ukbench.png").is_file()
