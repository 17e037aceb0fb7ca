"""Recognition versus the per-object cap on stored features, on a catalogue database converted once per cap.

A catalogue database built by ``bench/bench_catalogue_sizes.py`` (schema 2, every feature stored) is copied
for each cap of ``--caps`` and converted by :meth:`objrec.ModelDB.upgrade` with that cap (``none``: no cap,
the compact encodings only), then ``objrec eval catalogue:`` (no budget, the same distractors) runs the SMVS
phone photos against it in a process of its own. Found (the cover among the detections) is reported on the
tune split (photos of covers 001-025) and the hold-out split (026-050), with the shards' size per object.

    python bench/bench_feature_cap.py --db /tmp/flat/sizes_new/n334/db-036846bf3377 --out /tmp/caps \\
        --caps none,800,500,300,200,surf:500+sift:300,300@g1@s0 [--distractors DIR ...]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TUNE = range(1, 26)
HOLDOUT = range(26, 51)


def split_found(records: Path) -> dict:
    """Found and wrong detections per split from an eval run's ``records.jsonl``."""
    out = {"tune": [0, 0, 0], "holdout": [0, 0, 0]}
    for line in records.read_text().splitlines():
        r = json.loads(line)
        truth = int(r["meta"]["truth"])
        split = "tune" if truth in TUNE else "holdout" if truth in HOLDOUT else None
        if split is None:
            continue
        out[split][0] += bool(r["result"].get("found"))
        out[split][1] += 1
        out[split][2] += int(r["result"].get("wrong", 0) > 0)
    return {
        k: {"found": v[0], "photos": v[1], "found_fraction": round(v[0] / max(v[1], 1), 4), "with_wrong": v[2]}
        for k, v in out.items()
    }


def shard_bytes(db: Path) -> int:
    return (
        sum(f.stat().st_size for f in (db / "shards").rglob("*") if f.is_file()) + (db / "manifest.json").stat().st_size
    )


def parse_cap(cap: str) -> tuple[int | dict[str, int] | str | None, dict[str, float]]:
    """``none``, ``auto`` (the library's rule), ``N``, ``surf:N+sift:M`` (a cap per kind), each optionally
    followed by ``@gG`` (the cap's grid) and ``@sS`` (its spread share); returns the cap and the constants to set."""
    spec, *options = cap.split("@")
    if spec == "none":
        limit = None
    elif spec == "auto":
        limit = "auto"
    elif ":" in spec:
        limit = {k: int(v) for k, v in (part.split(":") for part in spec.split("+"))}
    else:
        limit = int(spec)
    names = {"g": ("CAP_GRID", int), "s": ("CAP_SPREAD", float)}
    return limit, {names[o[0]][0]: names[o[0]][1](o[1:]) for o in options}


def run_cap(cap: str, args) -> dict:
    import objrec.features.model as model
    from objrec.modeldb import ModelDB

    work = Path(args.out) / f"cap-{cap}"
    db = work / args.db.name
    if not (work / "records.jsonl").exists():
        shutil.rmtree(work, ignore_errors=True)
        db.mkdir(parents=True)
        shutil.copy2(args.db / "manifest.json", db / "manifest.json")
        shutil.copytree(args.db / "shards", db / "shards")
        limit, constants = parse_cap(cap)
        for name, value in constants.items():
            setattr(model, name, value)
        t = time.perf_counter()
        ModelDB.upgrade(db, max_features=limit)
        upgrade_s = time.perf_counter() - t
        cmd = [sys.executable, "-m", "objrec", "eval", f"catalogue:{args.data / 'smvs_dvd'}", "--out", str(work)]
        for d in args.distractors:
            cmd += ["--distractors", str(d)]
        cmd += ["--detectors", "objrec", "--no-progress", "--no-plots"]
        with open(work.with_suffix(".log"), "w") as log:
            subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, check=True)
        (work / "upgrade_s.txt").write_text(f"{upgrade_s:.2f}\n")
    n = len(ModelDB.open(db).records)
    row = {"cap": cap, "shard_kb_per_object": round(shard_bytes(db) / n / 1e3, 1)}
    row["disk_kb_per_object"] = round(sum(f.stat().st_size for f in db.rglob("*") if f.is_file()) / n / 1e3, 1)
    row.update(split_found(work / "records.jsonl"))
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", type=Path, required=True, help="a schema 2 catalogue database (read only)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--caps", default="none,800,500,300,200")
    p.add_argument("--data", type=Path, default=Path(os.environ.get("OBJREC_SHARED_DATA", ROOT.parent / "shared/data")))
    p.add_argument("--distractors", type=Path, nargs="*", help="default: DATA/dvd_covers (the 334 catalogue)")
    args = p.parse_args()
    if args.distractors is None:
        args.distractors = [args.data / "dvd_covers"]
    rows = [run_cap(c.strip(), args) for c in args.caps.split(",") if c.strip()]
    (args.out / "caps.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
