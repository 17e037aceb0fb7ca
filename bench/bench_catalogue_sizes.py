"""Catalogue scale versus the number of enrolled objects, with the anchor measured in the same run.

For each size N (``--sizes``) the catalogue is the 100 SMVS DVD references followed by distractors, taken in
this order until there are N objects: the 234 ``dvd_covers``, the 1692 ``ukbench_small`` thumbnails, then the
generated objects of ``--generated DIR`` (written by ``bench/make_distractors.py``; none shows an SMVS
cover). The photos are the 200 of ``smvs_dvd/queries``, 640 px on the long side.
Every measurement runs in its own process (``objrec eval catalogue:``), one after the other:

* ``objrec``, no budget, ``objrec`` with ``--budget-ms``, and with ``--coarse`` ``objrec-coarse`` (SURF
  sampling frames every other pixel) with no budget: found (label among the detections), top-1,
  wrong detections, latency p50/p99, deadline misses, and the peak resident memory of the recognising
  process (``os.wait4``; the database is built beforehand in another process);
* the anchor (``findobj``: OpenCV SIFT, one FLANN kd-tree over every reference) up to ``--anchor-max``
  objects;
* wrong detections at ``--wrong-sizes``: the photos against the same catalogue less covers 001-050
  (``--without-query-objects``);
* opening: ``ModelDB.open`` plus a ready ``Recognizer`` in a fresh process once its imports are done and
  its kernels loaded (page cache warm from the runs before);
* the database's size on disk.

Enrolment (``--enrol-images``, default 200), measured after the sizes (a child's peak RSS starts from its
parent's at the fork, so this process stays small while they run): that many images (SMVS references, then
DVD covers), resized to 500x500, enrolled with ``ModelDB.enroll_many`` (default detectors and workers),
against the anchor's own enrolment in the same process (OpenCV SIFT on each image plus building its FLANN
kd-tree).

Writes ``--out/sizes.json``, ``sizes.md`` and ``sizes.png`` (found, latency and memory versus N). Databases
are kept in ``--out/n<N>/`` and reused by a rerun.

    python bench/bench_catalogue_sizes.py --out /tmp/sizes --sizes 100,334,1000 [--generated DIR --sizes ...,10000]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCES = ("dvd_covers", "ukbench_small")


def data_root(arg: str | None) -> Path:
    env = os.environ.get("OBJREC_SHARED_DATA")
    for c in [Path(arg)] if arg else [Path(env)] if env else [ROOT.parent / "shared" / "data"]:
        if (c / "smvs_dvd" / "queries").is_dir():
            return c
    sys.exit("shared data (smvs_dvd/) not found; pass --data")


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))


def distractor_dirs(data: Path, generated: Path | None, n: int, work: Path) -> list[Path]:
    """Folders holding the first ``n`` distractors: whole source folders, or a folder of links to the first
    images of one, named as its source so that the objects keep their names and paths."""
    sources = [data / s for s in SOURCES] + ([generated] if generated else [])
    out = []
    for src in sources:
        if n <= 0:
            break
        imgs = _images(src)
        if n >= len(imgs):
            out.append(src)
        else:
            part = work / "subsets" / f"{n}" / src.name
            if not part.is_dir():
                part.mkdir(parents=True)
                for p in imgs[:n]:
                    (part / p.name).symlink_to(p.resolve())
            out.append(part)
        n -= len(imgs)
    if n > 0:
        sys.exit(f"not enough distractors for this size ({n} short): pass --generated DIR (bench/make_distractors.py)")
    return out


def run_measured(cmd: list[str], log: Path) -> tuple[int, float, float]:
    """Run ``cmd`` with its output in ``log``; returns (exit status, wall seconds, peak RSS in MiB)."""
    t0 = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    rss = usage.ru_maxrss / (1 << 20 if sys.platform == "darwin" else 1 << 10)
    return p.returncode, time.perf_counter() - t0, rss


def eval_cmd(data: Path, dirs: list[Path], out: Path, args, extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "objrec", "eval", f"catalogue:{data / 'smvs_dvd'}", "--out", str(out)]
    for d in dirs:
        cmd += ["--distractors", str(d)]
    return cmd + ["--no-progress", "--no-plots"] + extra


def summary(out: Path, detector: str) -> dict:
    rep = json.loads((out / "report.json").read_text())
    return rep["catalogue"]["summary"][detector]


def build(data: Path, dirs: list[Path], out: Path, without: bool) -> Path:
    """Build (or reuse) the database an ``objrec eval catalogue:`` run with these arguments uses."""
    from objrec.datasets import load_catalogue
    from objrec.evaluation.kinds.catalogue import build_database, catalogue_objects

    cfg = SimpleNamespace(distractors=[str(d) for d in dirs], without_query_objects=without)
    objects = catalogue_objects(cfg, load_catalogue(data / "smvs_dvd"))
    out.mkdir(parents=True, exist_ok=True)
    return Path(build_database(out, objects, progress=True).path)


OPEN_SNIPPET = """
import json, sys, tempfile, time
import faiss
from objrec import ModelDB, Recognizer
from objrec.data import synthetic_cover
tmp = tempfile.TemporaryDirectory()
small = ModelDB.create(tmp.name + "/db")
small.enroll("warm", synthetic_cover(0, (200, 300)))
Recognizer(small, budget_ms=33, prefilter=None, track=False)  # imports and kernel loading outside the timing
t = time.perf_counter()
rec = Recognizer(ModelDB.open(sys.argv[1]), budget_ms=33, prefilter=None, track=False)
print(json.dumps({"open_ready_s": time.perf_counter() - t}))
"""


def open_ready(db: Path) -> dict:
    res = subprocess.run([sys.executable, "-c", OPEN_SNIPPET, str(db)], capture_output=True, text=True, cwd=ROOT)
    if res.returncode:
        return {"error": res.stderr.strip().splitlines()[-1:]}
    return json.loads(res.stdout.strip().splitlines()[-1])


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def _linked(out: Path, db: Path) -> Path:
    """A fresh output folder for one ``objrec eval`` run holding a link to the database built beforehand
    (the run looks for ``db-<digest>`` in its own folder), so the run recognises only."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    (out / db.name).symlink_to(db.resolve(), target_is_directory=True)
    return out


def build_in_child(out: Path, data: Path, dirs: list[Path], without: bool) -> Path:
    """:func:`build` in a process of its own (so enrolment counts in no measured process); the database."""
    cmd = [sys.executable, __file__, "--build", str(out), "--data", str(data)] + ["--without"] * without
    subprocess.run(cmd + [a for d in dirs for a in ("--dirs", str(d))], check=True)
    return next(out.glob("db-*"))


def measure_size(n: int, data: Path, args) -> dict:
    work = Path(args.out) / f"n{n}"
    dirs = distractor_dirs(data, args.generated, n - 100, Path(args.out))
    row: dict = {"n": n}
    db = build_in_child(work, data, dirs, without=False)
    row["disk_mb"] = round(disk_mb(db), 1)
    runs = [
        ("objrec", "objrec", []),
        (f"objrec-{args.budget_ms:g}ms", "objrec", ["--budget-ms", f"{args.budget_ms:g}"]),
    ]
    if args.coarse:
        runs.append(("objrec-coarse", "objrec-coarse", []))
    if n <= args.anchor_max:
        runs.append(("findobj", "findobj", []))
    for label, det, extra in runs:
        out = _linked(work / label, db)
        rc, wall, rss = run_measured(
            eval_cmd(data, dirs, out, args, ["--detectors", det] + extra), out.with_suffix(".log")
        )
        if rc:
            row[label] = {"error": f"exit {rc}, see {out.with_suffix('.log')}"}
            continue
        s = summary(out, det)
        s["peak_rss_mb"] = round(rss, 1)
        s["wall_s"] = round(wall, 1)
        row[label] = s
        print(
            f"N={n} {label}: found {s['found_fraction']:.3f} top-1 {s['top1_fraction']:.3f} wrong {s['wrong']} "
            f"p50 {s['latency_ms']['p50']:.1f} p99 {s['latency_ms']['p99']:.1f} ms "
            f"misses {s.get('deadline_misses', '-')} peak RSS {rss:.0f} MiB",
            flush=True,
        )
    if n in args.wrong_sizes:
        out = work / "without"
        run_dir = _linked(out / "run", build_in_child(out, data, dirs, without=True))
        cmd = eval_cmd(data, dirs, run_dir, args, ["--detectors", "objrec", "--without-query-objects"])
        rc, _, _ = run_measured(cmd, out.with_suffix(".log"))
        if not rc:
            s = summary(run_dir, "objrec")
            row["without"] = {"queries_with_wrong": s["queries_with_wrong"], "n_queries": s["n_queries"]}
            print(f"N={n} without covers 001-050: {s['queries_with_wrong']}/{s['n_queries']} photos with a detection")
    row["open"] = open_ready(db)
    print(f"N={n} open+ready {row['open']}, disk {row['disk_mb']} MB", flush=True)
    return row


def measure_enrolment(data: Path, k: int) -> dict:
    """Images per second: objrec's enrol_many against the anchor's SIFT plus FLANN kd-tree build."""
    import cv2

    from objrec import ModelDB

    paths = (_images(data / "smvs_dvd" / "reference") + _images(data / "dvd_covers"))[:k]
    imgs = [cv2.resize(cv2.imread(str(p)), (500, 500), interpolation=cv2.INTER_AREA) for p in paths]
    work = Path(tempfile.mkdtemp(prefix="bench-sizes-"))
    try:
        db = ModelDB.create(work / "db")
        db.enroll_many([("warm", imgs[0])], progress=False)  # JIT compilation outside the timing
        db.remove("warm")
        t = time.perf_counter()
        rep = db.enroll_many([(f"o{i}", im) for i, im in enumerate(imgs)], progress=False)
        objrec_s = time.perf_counter() - t
        assert not rep.failed, rep.failed
        sift = cv2.SIFT_create()
        t = time.perf_counter()
        descs = [sift.detectAndCompute(cv2.cvtColor(im, cv2.COLOR_BGR2GRAY), None)[1] for im in imgs]
        flann = cv2.FlannBasedMatcher({"algorithm": 1, "trees": 4}, {"checks": 64})
        flann.add(descs)
        flann.train()
        anchor_s = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = {"images": len(imgs), "objrec_per_s": len(imgs) / objrec_s, "anchor_per_s": len(imgs) / anchor_s}
    out["ratio"] = out["objrec_per_s"] / out["anchor_per_s"]
    print(
        f"enrolment of {len(imgs)} 500x500 images: objrec {out['objrec_per_s']:.1f}/s, anchor "
        f"{out['anchor_per_s']:.1f}/s, ratio {out['ratio']:.2f}",
        flush=True,
    )
    return out


def write_outputs(rows: list[dict], enrol: dict | None, args) -> None:
    out = Path(args.out)
    (out / "sizes.json").write_text(json.dumps({"sizes": rows, "enrolment": enrol, "argv": sys.argv}, indent=1))
    b = f"objrec-{args.budget_ms:g}ms"
    lines = [
        "| N | detector | found | top-1 | p50 ms | p99 ms | misses | peak RSS MiB | open+ready s | disk MB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        for label in ("objrec", b, "objrec-coarse", "findobj"):
            s = r.get(label)
            if not s or "error" in s:
                continue
            lat = s["latency_ms"]
            lines.append(
                f"| {r['n']} | {label} | {s['found_fraction']:.3f} | {s['top1_fraction']:.3f} | {lat['p50']:.1f} | "
                f"{lat['p99']:.1f} | {s.get('deadline_misses', '-')} | {s['peak_rss_mb']:.0f} | "
                f"{r['open'].get('open_ready_s', float('nan')):.2f} | {r['disk_mb']:.0f} |"
            )
    (out / "sizes.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, out / "sizes.png", b)


def plot(rows: list[dict], path: Path, budget_label: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for label, style in (("objrec", "o-"), (budget_label, "s-"), ("objrec-coarse", "d-"), ("findobj", "^--")):
        pts = [(r["n"], r[label]) for r in rows if label in r and "error" not in r[label]]
        if not pts:
            continue
        n = [p[0] for p in pts]
        ax[0].plot(n, [p[1]["found_fraction"] for p in pts], style, label=label)
        ax[1].plot(n, [p[1]["latency_ms"]["p50"] for p in pts], style, label=f"{label} p50")
        ax[1].plot(n, [p[1]["latency_ms"]["p99"] for p in pts], style, alpha=0.4, label=f"{label} p99")
        ax[2].plot(n, [p[1]["peak_rss_mb"] for p in pts], style, label=label)
    for a, title in zip(
        ax, ("found (label among detections)", "latency (ms)", "peak resident memory (MiB)"), strict=True
    ):
        a.set_xscale("log")
        a.set_xlabel("enrolled objects")
        a.set_title(title)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    print(f"plot: {path}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="bench-sizes")
    p.add_argument("--data")
    p.add_argument("--sizes", default="100,334,1000")
    p.add_argument("--generated", type=Path, help="generated distractors (bench/make_distractors.py) for N > 2026")
    p.add_argument("--budget-ms", type=float, default=33.0)
    p.add_argument("--anchor-max", type=int, default=1000)
    p.add_argument("--wrong-sizes", default="334", help="sizes at which wrong detections are measured")
    p.add_argument("--coarse", action="store_true", help="also objrec-coarse (SURF sample step 2), no budget")
    p.add_argument("--enrol-images", type=int, default=200)
    p.add_argument("--build", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--dirs", action="append", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--without", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    data = data_root(args.data)
    if args.build:  # a child process: build the database only
        build(data, args.dirs or [], args.build, args.without)
        return
    args.wrong_sizes = {int(x) for x in args.wrong_sizes.split(",") if x}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        rows.append(measure_size(n, data, args))
        write_outputs(rows, None, args)
    if args.enrol_images:
        write_outputs(rows, measure_enrolment(data, args.enrol_images), args)


if __name__ == "__main__":
    main()
