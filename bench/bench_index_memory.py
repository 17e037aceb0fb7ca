"""Peak anonymous memory of building a database's retrieval index: the whole descriptor table versus chunks.

Each build runs in a child process while this one samples the child's ``RssAnon`` (``/proc/PID/status``:
anonymous pages only; pages of the memory-mapped database files do not count) every few milliseconds:

* ``table``: every descriptor copied out of the shards (``ModelDB.descriptor_table``), then
  ``RetrievalIndex.build`` over the whole array;
* ``segmented``: ``objrec.modeldb.index_update.build_index`` (what ``objrec db reindex`` runs): a codec trained
  on a sample, the descriptors added in chunks read from the shards, written as segments merged log-structured
  and read back memory-mapped; built in a work copy of the database (``--work``: its shards hard-linked, never
  written);
* ``enrol``: ``ModelDB.enroll_many`` of 128 real UKBench photos (one commit) into the work copy whose index is
  current, the commit updating the index;
* ``recognise``: the saved index opened (``DatabaseRetrieval.open``) and 200 frames of 300 voters searched.

``table`` builds in memory and saves nothing. The child reports its ``RssAnon`` once its imports are done (the
baseline) and the step's wall time; the report gives peak and peak less baseline per kind and path.

The database (``--db``) is made when absent from the real images of ``OBJREC_SHARED_DATA``: the 100 SMVS
references, the 234 ``dvd_covers`` and the 1692 ``ukbench_small`` photos (``ModelDB.enroll_many``).

    taskset -c 1 python bench/bench_index_memory.py --db /tmp/idx2k --work /tmp/idxwork \
        [--kinds sift,surf] [--paths table,segmented,enrol,recognise] [--out report.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from procmem import rss_anon_kb


def make_database(path: Path) -> None:
    """Enrol the SMVS references, ``dvd_covers`` and ``ukbench_small`` photos into a new database at ``path``."""
    from objrec.modeldb import ModelDB

    data = Path(os.environ.get("OBJREC_SHARED_DATA", "/work/shared/data"))
    files = sorted((data / "smvs_dvd" / "reference").glob("*.jpg"))
    files += sorted((data / "dvd_covers").glob("*.jpg")) + sorted((data / "ukbench_small").glob("*.jpg"))
    items = [(f"{f.parent.name}-{f.stem}", str(f)) for f in files]
    db = ModelDB.create(path, exist_ok=True)
    report = db.enroll_many(items, workers=1)
    print(f"enrolled {len(report.enrolled)} skipped {len(report.skipped)} failed {len(report.failed)}", flush=True)


def child(db_path: str, kind: str, path: str) -> None:
    """Run one step and print a JSON line: baseline RssAnon, time, codes held."""
    import numpy as np

    from objrec.matching.retrieval import DatabaseRetrieval, RetrievalIndex
    from objrec.modeldb import ModelDB
    from objrec.modeldb.index_update import build_index

    db = ModelDB.open(db_path)
    np.zeros(1)
    base = rss_anon_kb()
    t0 = time.perf_counter()
    if path == "table":
        desc, owner = db.descriptor_table(kind)
        n = len(RetrievalIndex.build(desc, owner, kind))
    elif path == "segmented":
        with db.lock():
            n = len(build_index(db, kind))
    elif path == "enrol":
        data = Path(os.environ.get("OBJREC_SHARED_DATA", "/work/shared/data")) / "ukbench"
        files = sorted(data.glob("*.jpg"))[:128]
        db.enroll_many([(f"ukbench-{f.stem}", str(f)) for f in files], workers=1, batch_size=128, progress=False)
        n = len(DatabaseRetrieval.open(db, kind))
    else:
        index = DatabaseRetrieval.open(db, kind)
        rng = np.random.default_rng(0)
        for _ in range(200):
            index.candidates(db.sample_descriptors(kind, 300, seed=int(rng.integers(1 << 30))), n_probe=2)
        n = len(index)
    seconds = time.perf_counter() - t0
    print(json.dumps({"base_kb": base, "seconds": seconds, "ntotal": n}), flush=True)


def measure(db_path: Path, kind: str, path: str) -> dict:
    """Run one build in a child process, sampling its RssAnon; the child's report plus the peak."""
    cmd = [sys.executable, __file__, "--child", path, "--kinds", kind, "--db", str(db_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, rss_anon_kb(proc.pid))
        time.sleep(0.005)
    out = proc.stdout.read().strip().splitlines()
    if proc.returncode != 0 or not out:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit status {proc.returncode}")
    doc = json.loads(out[-1])
    doc.update(kind=kind, path=path, peak_kb=peak, build_kb=peak - doc["base_kb"])
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, type=Path, help="model database (made when absent)")
    ap.add_argument("--kinds", default="sift,surf", help="descriptor kinds, comma-separated")
    ap.add_argument("--paths", default="segmented,enrol,recognise", help="steps, comma-separated")
    ap.add_argument("--work", type=Path, help="work copy of --db for the steps that write (made when absent)")
    ap.add_argument("--out", type=Path, help="also write the rows as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(str(args.db), args.kinds, args.child)
        return
    if not (args.db / "manifest.json").exists():
        make_database(args.db)
    from objrec.modeldb import ModelDB

    if args.work is not None and not (args.work / "manifest.json").exists():
        import shutil

        args.work.mkdir(parents=True)
        shutil.copytree(args.db / "shards", args.work / "shards", copy_function=os.link)
        shutil.copy2(args.db / "manifest.json", args.work / "manifest.json")
    db = ModelDB.open(args.db)
    n_desc = {k: sum(i.n_features.get(k, 0) for i in db.infos()) for k in db.detectors}
    print(f"{args.db}: {len(db)} objects, descriptors {n_desc}")
    paths = args.paths.split(",")
    kinds = args.kinds.split(",")
    # Every kind's index is built before the enrolment, whose one commit updates them all (reported once).
    steps = [(p, k) for p in paths for k in (kinds[:1] if p == "enrol" else kinds)]
    rows = [measure(args.work if p != "table" else args.db, k, p) for p, k in steps]
    print("| kind | path | descriptors | peak RssAnon MB | build RssAnon MB (peak - baseline) | build s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        mb = r["peak_kb"] / 1024, r["build_kb"] / 1024
        print(f"| {r['kind']} | {r['path']} | {r['ntotal']} | {mb[0]:.0f} | {mb[1]:.0f} | {r['seconds']:.1f} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
