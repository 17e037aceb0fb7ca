"""Choosing the database index's codes, lists, probes and per-object cap: shortlist recall on real phone photos.

For each configuration the index of one detector kind is built (``objrec.modeldb.index_update.build_index``)
into a work copy of the database (``--work``: the shards hard-linked, never written; the source database is
only read), and the SMVS phone photos (``smvs_dvd/queries``, 640 px on the long side) are shortlisted by the
recognizer's :class:`~objrec.matching.shortlist.ShortlistMatcher` (top 3 objects, its voters and probes).
Reported per configuration and ``n_probe``: shortlist recall (the photo's cover ``reference-NNN`` among the 3)
on the tune split (covers 001-025) and the hold-out split (026-050), median time of a shortlist per frame,
codes scanned per frame (``n_probe / n_lists`` of the codes per voter, times the voters), bytes per code and
index bytes per object on disk.

    taskset -c 1 python bench/bench_index_params.py --db /tmp/idx2k --work /tmp/r28work --kind surf \\
        --configs sq:0:0,pq:16:0,pq:16:300 --probes 1,2,4
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

import cv2
import numpy as np


def work_copy(src: Path, dst: Path) -> Path:
    """``dst`` with ``src``'s manifest and shards (hard links: shards are immutable), without its index."""
    if not (dst / "manifest.json").exists():
        dst.mkdir(parents=True, exist_ok=True)
        shutil.copytree(src / "shards", dst / "shards", copy_function=os.link)
        shutil.copy2(src / "manifest.json", dst / "manifest.json")
    return dst


class _Voters:
    """What :meth:`ShortlistMatcher.shortlist` reads of a frame's features: descriptors and responses."""

    def __init__(self, descriptors: np.ndarray, response: np.ndarray) -> None:
        self.descriptors, self.response, self.xp = descriptors, response, np

    def __len__(self) -> int:
        return len(self.descriptors)


def query_features(db, kind: str, data: Path, cache: Path) -> list[tuple[int, object]]:
    """(cover number, Features) of every SMVS query photo at 640 px, extracted once and cached."""
    from objrec.features import SIFT, SURF

    photos = sorted((data / "smvs_dvd" / "queries").glob("*.jpg"))
    if cache.exists():
        z = np.load(cache)
        return [(int(p.stem.split("_")[1]), _Voters(z[f"d{i}"], z[f"r{i}"])) for i, p in enumerate(photos)]
    det = (SURF if kind == "surf" else SIFT)(**db.detectors[kind])
    arrays, out = {}, []
    for i, p in enumerate(photos):
        img = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
        s = 640 / max(img.shape)
        img = cv2.resize(img, (round(img.shape[1] * s), round(img.shape[0] * s)), interpolation=cv2.INTER_AREA)
        f = det.detect_and_compute(img)
        arrays[f"d{i}"], arrays[f"r{i}"] = f.descriptors, f.response
        out.append((int(p.stem.split("_")[1]), _Voters(f.descriptors, f.response)))
    np.savez(cache, **arrays)
    return out


def evaluate(db, kind: str, queries, probes: list[int]) -> list[dict]:
    from objrec.matching.retrieval import DatabaseRetrieval
    from objrec.matching.shortlist import RETRIEVAL_QUERIES, ShortlistMatcher
    from objrec.matching.stored import StoredMatcher

    index = DatabaseRetrieval.open(db, kind)
    n_lists = int(index.core.codec.nlist)
    rows = []
    for probe in probes:
        sm = ShortlistMatcher(StoredMatcher(db, kind), index, n_probe=probe)
        hits = {"tune": [], "holdout": []}
        times = []
        for cover, f in queries:
            t0 = time.perf_counter()
            short = sm.shortlist(f)
            times.append(time.perf_counter() - t0)
            names = {sm.matcher.names[i].split("#")[0] for i in short}
            hits["tune" if cover <= 25 else "holdout"].append(f"reference-{cover:03d}" in names)
        voters = np.mean([min(len(f), RETRIEVAL_QUERIES) for _, f in queries])
        rows.append(
            {
                "n_probe": probe,
                "n_lists": n_lists,
                "codes": len(index),
                "recall_tune": float(np.mean(hits["tune"])),
                "recall_holdout": float(np.mean(hits["holdout"])),
                "ms_p50": 1000 * float(np.median(times)),
                "scanned_per_frame": float(probe / n_lists * len(index) * voters),
                "bytes_per_code": int(index.core.codec.code_size) + 8,
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, type=Path)
    ap.add_argument("--work", required=True, type=Path)
    ap.add_argument("--kind", default="surf")
    ap.add_argument(
        "--configs",
        default="sq:0:0,pq:16:0,pq:16:300",
        help="codes:pq_bytes:max_per_object[:lists_per_sqrt[:hnsw_lists]]",
    )
    ap.add_argument("--probes", default="1,2,4,8")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from objrec.modeldb import ModelDB
    from objrec.modeldb.index import RetrievalParams, index_folder
    from objrec.modeldb.index_update import build_index

    data = Path(os.environ.get("OBJREC_SHARED_DATA", "/work/shared/data"))
    db = ModelDB.open(work_copy(args.db, args.work))
    queries = query_features(db, args.kind, data, args.work / f"queries_{args.kind}.npz")
    print(" ".join(sys.argv), f"\n{len(db)} objects, {len(queries)} photos", flush=True)
    all_rows = []
    for cfg in args.configs.split(","):
        parts = cfg.split(":")
        codes, pq, cap = parts[0], int(parts[1]) or 16, int(parts[2]) or None
        lps = float(parts[3]) if len(parts) > 3 else RetrievalParams.lists_per_sqrt
        hnsw = int(parts[4]) if len(parts) > 4 else RetrievalParams.hnsw_lists
        params = RetrievalParams(codes=codes, pq_bytes=pq, max_per_object=cap, lists_per_sqrt=lps, hnsw_lists=hnsw)
        t0 = time.perf_counter()
        with db.lock():
            build_index(db, args.kind, params)
        build_s = time.perf_counter() - t0
        disk = sum(f.stat().st_size for f in index_folder(db.path, args.kind).iterdir())
        for r in evaluate(db, args.kind, queries, [int(p) for p in args.probes.split(",")]):
            r.update(config=cfg, build_s=build_s, disk_per_object=disk / len(db))
            all_rows.append(r)
            print(json.dumps(r), flush=True)
    if args.out:
        args.out.write_text(json.dumps(all_rows, indent=1))


if __name__ == "__main__":
    main()
