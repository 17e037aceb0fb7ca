"""Stored SURF descriptors: how float16 and int8 storage change matching against float32, on the Oxford sequences.

For each sequence, SURF (the database's default parameters) on ``img1`` gives the model descriptors and on
``img2`` .. ``img6`` the queries. The model side is stored as float16, or as int8 with the fixed scale of
:data:`objrec.modeldb.records.SURF_INT8_SCALE` (a unit vector's components lie in [-1, 1]), and read back;
the queries stay float32, as a frame's are. Lowe's ratio test (0.75, with the Laplacian sign rule, as the
matcher runs it) is run against each, and the report gives per storage:

* the share of float32's ratio-test matches that the stored descriptors give identically (same query, same
  model row), and the matches they add;
* the share of queries whose nearest model row is the same;
* correct matches (model keypoint mapped by the sequence's homography within 3 px of the query's).

    python bench/bench_descriptor_storage.py [--data DIR] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SEQUENCES = ("bark", "bikes", "boat", "graf", "leuven", "trees", "ubc", "wall")


def _gray(path: Path) -> np.ndarray:
    import cv2

    img = cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if img is None:
        sys.exit(f"{path}: cannot read")
    return img


def _stored(kind: str, desc: np.ndarray) -> np.ndarray:
    """``desc`` written and read back the way a shard stores it (``kind``: float16 or int8)."""
    from objrec.modeldb.preparation import decode_descriptors, encode_descriptors

    if kind == "float16":
        return desc.astype(np.float16).astype(np.float32)
    return decode_descriptors("surf", encode_descriptors("surf", desc)).astype(np.float32)


def compare(data: Path) -> dict:
    from objrec.features.model import DEFAULT_DETECTORS, model_detector
    from objrec.knn import knn2, ratio_match

    det = model_detector("surf", DEFAULT_DETECTORS["surf"])
    totals: dict = {}
    for seq in SEQUENCES:
        folder = data / "oxford_affine" / seq
        model = det.detect_and_compute(_gray(folder / "img1.png"))
        for j in range(2, 7):
            frame = det.detect_and_compute(_gray(folder / f"img{j}.png"))
            H = np.loadtxt(folder / f"H1to{j}p")
            proj = np.c_[model.xy, np.ones(len(model))] @ H.T
            proj = proj[:, :2] / proj[:, 2:]
            ref = ratio_match(frame.descriptors, model.descriptors, 0.75, False, frame.laplacian, model.laplacian)
            ref_set = set(zip(ref.query_idx.tolist(), ref.train_idx.tolist(), strict=True))
            nn_ref, _ = knn2(frame.descriptors, model.descriptors, frame.laplacian, model.laplacian)
            for kind in ("float32", "float16", "int8"):
                t = totals.setdefault(kind, {"ref": 0, "same": 0, "added": 0, "nn_same": 0, "queries": 0, "correct": 0})
                train = model.descriptors if kind == "float32" else _stored(kind, model.descriptors)
                m = ratio_match(frame.descriptors, train, 0.75, False, frame.laplacian, model.laplacian)
                got = set(zip(m.query_idx.tolist(), m.train_idx.tolist(), strict=True))
                nn, _ = knn2(frame.descriptors, train, frame.laplacian, model.laplacian)
                err = np.linalg.norm(proj[m.train_idx] - frame.xy[m.query_idx], axis=1)
                t["ref"] += len(ref_set)
                t["same"] += len(ref_set & got)
                t["added"] += len(got - ref_set)
                t["nn_same"] += int((nn[:, 0] == nn_ref[:, 0]).sum())
                t["queries"] += len(frame)
                t["correct"] += int((err < 3.0).sum())
        print(seq, {k: round(v["same"] / max(v["ref"], 1), 4) for k, v in totals.items()}, flush=True)
    for v in totals.values():
        v["same_share"] = round(v["same"] / max(v["ref"], 1), 4)
        v["nn_same_share"] = round(v["nn_same"] / max(v["queries"], 1), 4)
    return totals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.environ.get("OBJREC_SHARED_DATA", str(ROOT.parent / "shared" / "data")))
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    res = compare(Path(args.data))
    print(json.dumps(res, indent=1))
    if args.out:
        args.out.write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
