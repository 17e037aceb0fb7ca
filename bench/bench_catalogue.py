"""Catalogue scale: bulk enrolment, opening, storage size, SURF float16 storage and retrieval vs brute force.

Sections (each optional):

* ``scale``: a synthetic database of ``--scale-objects`` objects (random SIFT rows, committed in batches as
  ``enroll_many`` does): batch commit time at the start and the end, open time, first read, one removal.
* ``enrol``: ``ModelDB.enroll_many`` over the SMVS references and DVD covers (default detectors), images
  per second, disk bytes per object by file kind, and the median time to open the database and to read
  one object.
* ``surf16``: SURF descriptors of the references stored as float16 vs float32: the share of Lowe ratio-test
  matches of real phone queries that stay identical, and how many matches each side has.
* ``retrieval``: the retrieval index (:mod:`objrec.matching.retrieval`) against exact brute-force voting on
  the same SIFT features: recall of the right cover among the top 1 and top 5 candidates for real phone
  photos (SMVS), with the DVD covers (and optionally UKBench thumbnails) as distractors, and the median
  time per query.
* ``ukbench``: the Nister-Stewenius score (the mean number of a query's 4 images among its top 4 results; 4.0
  is perfect) of the retrieval index against exact brute-force voting on the same features (OpenCV SIFT, at
  most ``--ukbench-features`` per image), over the first ``--ukbench-images`` images of ``ukbench/`` (the real
  UKBench, read and grouped by :func:`objrec.evaluation.kinds.ukbench.ukbench_groups`), every image queried
  against all of them, itself included, scored by :func:`objrec.metrics.retrieval.ns_score`. Both absolute
  scores are printed. ``objrec eval ukbench:DIR`` gives the same score on the descriptors objrec enrols.
* ``crossover``: per frame, exact matching of SURF features against every object
  (:class:`~objrec.matching.database.DatabaseMatcher`) against retrieval plus matching against the
  shortlist (:class:`~objrec.matching.shortlist.ShortlistMatcher`), for growing prefixes of the catalogue:
  where retrieval starts to pay (``RETRIEVAL_MIN_DESCRIPTORS``) and how each grows.

Run from the repository root, e.g.::

    OMP_NUM_THREADS=1 python bench/bench_catalogue.py --sections retrieval --queries 60 --query-features 500
"""

from __future__ import annotations

import argparse
import atexit
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from objrec.modeldb import ModelDB, extract_model_features  # noqa: E402


def data_root(arg: str | None) -> Path:
    for c in [Path(arg)] if arg else [ROOT.parent / "shared" / "data", ROOT / ".." / "shared" / "data"]:
        if (c / "smvs_dvd").is_dir():
            return c
    sys.exit("shared data (smvs_dvd, dvd_covers) not found; pass --data")


def catalogue(data: Path, n_distractors: int, n_ukbench: int) -> list[tuple[str, Path]]:
    refs = sorted((data / "smvs_dvd" / "reference").glob("*.jpg"))
    items = [(f"smvs_{p.stem}", p) for p in refs]
    items += [(f"dvd_{p.stem}", p) for p in sorted((data / "dvd_covers").glob("*.jpg"))[:n_distractors]]
    items += [(f"uk_{p.stem}", p) for p in sorted((data / "ukbench_small").glob("*.jpg"))[:n_ukbench]]
    return items


def queries(data: Path, n: int, side: int = 640) -> list[tuple[str, np.ndarray]]:
    """Phone photos (label = the SMVS reference number), downscaled to ``side`` px on the long side."""
    out = []
    paths = sorted((data / "smvs_dvd" / "queries").glob("*.jpg"))
    step = max(1, len(paths) // n)
    for p in paths[::step][:n]:
        img = cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)
        s = side / max(img.shape)
        out.append((f"smvs_{p.stem.split('_')[-1]}", cv2.resize(img, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)))
    return out


def disk_usage(path: Path) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for f in path.rglob("*"):
        if f.is_file():
            key = f.name if f.parent.parent.name == "shards" else f.name
            key = key.split(".", 1)[1] if key.count(".") > 1 else key
            sizes[key] = sizes.get(key, 0) + f.stat().st_size
    return sizes


def section_enrol(items, args) -> None:
    work = tempfile.mkdtemp(prefix="bench-catalogue-")
    atexit.register(shutil.rmtree, work, True)
    tmp = Path(work) / "db"
    db = ModelDB.create(tmp)
    extract_model_features(cv2.imread(str(items[0][1])), db.detectors)  # warm-up: SURF's JIT compilation
    t0 = time.perf_counter()
    report = db.enroll_many(items, workers=args.workers, progress=False)
    dt = time.perf_counter() - t0
    print(
        f"enrol: {len(report.enrolled)} objects, {len(report.failed)} failed, workers={args.workers}: "
        f"{dt:.1f} s, {len(report.enrolled) / dt:.2f} images/s (detectors {list(db.detectors)})"
    )
    sizes = disk_usage(tmp)
    total = sum(sizes.values())
    print(
        f"disk: {total / 1e6:.1f} MB, {total / len(db) / 1e3:.0f} kB per object; by file: "
        + ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]))
    )
    opens, gets = [], []
    for _ in range(5):
        t = time.perf_counter()
        d = ModelDB.open(tmp)
        opens.append(time.perf_counter() - t)
        t = time.perf_counter()
        d.get(d.names[len(d) // 2])
        gets.append(time.perf_counter() - t)
    print(
        f"open: median {statistics.median(opens) * 1e3:.1f} ms; first get (verifies its shard files) "
        f"median {statistics.median(gets) * 1e3:.1f} ms"
    )
    shutil.rmtree(tmp.parent, ignore_errors=True)


def section_scale(args) -> None:
    """Commits and opening at catalogue size without extraction: synthetic objects (random uint8 SIFT rows,
    a tiny PNG) go through the same batch commit as ``enroll_many``."""
    from objrec.modeldb.preparation import PreparedObject, content_sha256, keypoint_rows, thumb_sha256, thumbnail
    from objrec.types import Features

    rng = np.random.default_rng(0)
    img = rng.integers(0, 255, (32, 32), dtype=np.uint8)
    png = cv2.imencode(".png", img)[1].reshape(-1)
    thumb = thumbnail(img)
    work = tempfile.mkdtemp(prefix="bench-catalogue-")
    atexit.register(shutil.rmtree, work, True)
    tmp = Path(work) / "db"
    db = ModelDB.create(tmp, detectors={"sift": {"n_features": 0}})
    n, m, batch = args.scale_objects, args.scale_features, 128
    commit_s = []
    for start in range(0, n, batch):
        objs = []
        for i in range(start, min(n, start + batch)):
            d = rng.integers(0, 256, (m, 128), dtype=np.uint8)
            f = Features(rng.random((m, 2)) * 500, np.ones(m), np.zeros(m), np.ones(m), np.zeros(m), np.zeros(m), d)
            kps, descs = {"sift": keypoint_rows(f, 500, 500)}, {"sift": d}
            entry = {"name": f"o{i:05d}", "width": 500, "height": 500, "source": None, "image_bytes": int(png.size)}
            entry.update(sha256=content_sha256(png, kps, descs), n_features={"sift": m})
            entry["thumb_sha256"] = thumb_sha256(thumb)
            objs.append(PreparedObject(entry, png, kps, descs, thumb))
        t = time.perf_counter()
        db.commit_batch(objs, replace=False)
        commit_s.append(time.perf_counter() - t)
    k = max(1, len(commit_s) // 10)
    first, last = statistics.median(commit_s[:k]) * 1e3, statistics.median(commit_s[-k:]) * 1e3
    print(
        f"scale: {n} objects x {m} SIFT rows in {len(commit_s)} commits of {batch}: commit median of the first "
        f"{k} {first:.0f} ms, of the last {k} {last:.0f} ms"
    )
    opens = []
    for _ in range(5):
        t = time.perf_counter()
        d = ModelDB.open(tmp)
        opens.append(time.perf_counter() - t)
    t = time.perf_counter()
    d.get(d.names[n // 2])
    first_get = time.perf_counter() - t
    t = time.perf_counter()
    d.remove(d.names[n // 3])
    removal = time.perf_counter() - t
    size = sum(f.stat().st_size for f in tmp.rglob("*") if f.is_file())
    print(
        f"scale: open median {statistics.median(opens) * 1e3:.0f} ms (max {max(opens) * 1e3:.0f}), first get "
        f"{first_get * 1e3:.0f} ms, remove {removal * 1e3:.0f} ms, {size / 1e6:.0f} MB on disk"
    )
    shutil.rmtree(tmp.parent, ignore_errors=True)


def ratio_matches(q: np.ndarray, t: np.ndarray, ratio: float = 0.75) -> set[tuple[int, int]]:
    from objrec.knn import knn2

    i, d = knn2(q, t)
    ok = np.sqrt(np.maximum(d[:, 0], 0)) < ratio * np.sqrt(np.maximum(d[:, 1], 0))
    return {(int(a), int(b)) for a, b in zip(np.nonzero(ok)[0], i[ok, 0], strict=True)}


def section_surf16(items, qs, args) -> None:
    from objrec.features.surf import SURF

    det = SURF(hessian_threshold=400.0, backend="cpu")
    refs = {n: det.detect_and_compute(cv2.imread(str(p), cv2.IMREAD_GRAYSCALE)) for n, p in items}
    same = total32 = total16 = 0
    for label, img in qs:
        f = det.detect_and_compute(img)
        t32 = refs[label].descriptors
        t16 = t32.astype(np.float16).astype(np.float32)
        m32, m16 = ratio_matches(f.descriptors, t32), ratio_matches(f.descriptors, t16)
        same += len(m32 & m16)
        total32 += len(m32)
        total16 += len(m16)
    print(
        f"surf16: {len(qs)} queries against their own reference: ratio-test matches float32 {total32}, "
        f"float16 {total16}, identical {same} ({same / max(1, total32):.2%} of float32's)"
    )


def model_sift(items, cache: str | None) -> list[np.ndarray]:
    """SIFT descriptors of the model images as objrec enrols them, cached in ``cache`` (.npz) if given."""
    names = [n for n, _ in items]
    if cache and Path(cache).exists():
        with np.load(cache, allow_pickle=False) as z:
            if list(z["names"]) == names:
                return [z[f"d{i}"] for i in range(len(names))]
    dets = {"sift": {"n_features": 0}}
    feats = [extract_model_features(cv2.imread(str(p)), dets)["sift"].descriptors for _, p in items]
    if cache:
        np.savez(cache, names=np.array(names), **{f"d{i}": f for i, f in enumerate(feats)})
    return feats


def section_retrieval(items, qs, args) -> None:
    from objrec.knn import BruteForceIndex
    from objrec.matching.retrieval import RetrievalIndex, RetrievalParams, vote

    t = time.perf_counter()
    feats = model_sift(items, args.cache)
    names = [n for n, _ in items]
    desc = np.concatenate(feats)
    owner = np.concatenate([np.full(len(f), i) for i, f in enumerate(feats)])
    print(
        f"retrieval: {len(items)} objects, {len(desc)} SIFT descriptors (extracted in "
        f"{time.perf_counter() - t:.0f} s); {len(qs)} queries of at most {args.query_features} SIFT features"
    )
    qdet = cv2.SIFT_create(nfeatures=args.query_features)
    qdesc = [qdet.detectAndCompute(img, None)[1] for _, img in qs]
    labels = [names.index(lab) for lab, _ in qs]
    k = args.k
    if not args.skip_exact:
        flat = BruteForceIndex(desc.astype(np.float32))
        t = time.perf_counter()
        exact_labels = [owner[flat.knn(q, k)[0]] for q in qdesc]
        t_exact = (time.perf_counter() - t) / len(qs)
        report("exact brute force (BruteForceIndex)", [vote(lab, 5)[0] for lab in exact_labels], labels, t_exact)
    params = RetrievalParams(k=k, exact_below=0)
    t = time.perf_counter()
    index = RetrievalIndex.build(desc, owner, "sift", params)
    t_build = time.perf_counter() - t
    for n_probe in args.n_probe:
        index.index_.nprobe = n_probe
        times, ranked = [], []
        for q in qdesc:
            t = time.perf_counter()
            ranked.append(index.candidates(q, top=5)[0])
            times.append(time.perf_counter() - t)
        what = f"IVF-SQ8 n_lists={index.index_.nlist} n_probe={n_probe} (built in {t_build:.1f} s)"
        report(what, ranked, labels, statistics.median(times))


def section_ukbench(data: Path, args) -> None:
    from objrec.evaluation.kinds.ukbench import ukbench_groups
    from objrec.imageio import read_image, to_gray
    from objrec.knn import BruteForceIndex
    from objrec.matching.retrieval import RetrievalIndex, RetrievalParams, vote
    from objrec.metrics.retrieval import ns_score

    paths = [p for g in ukbench_groups(data / "ukbench", args.ukbench_images // 4) for p in g]
    sift = cv2.SIFT_create(nfeatures=args.ukbench_features)
    feats = [sift.detectAndCompute(to_gray(read_image(p)), None)[1] for p in paths]
    feats = [f if f is not None else np.zeros((0, 128), np.float32) for f in feats]
    desc = np.concatenate(feats).astype(np.float32)
    owner = np.concatenate([np.full(len(f), i) for i, f in enumerate(feats)])
    groups = np.arange(len(paths)) // 4
    print(f"ukbench: {len(paths)} images, {len(desc)} OpenCV SIFT descriptors (at most {args.ukbench_features} each)")
    k = args.k
    flat = BruteForceIndex(desc)
    t = time.perf_counter()
    exact = [vote(owner[flat.knn(f, k)[0]], 4)[0] if len(f) else np.zeros(0, int) for f in feats]
    t_exact = (time.perf_counter() - t) / len(paths)
    index = RetrievalIndex.build(desc, owner, "sift", RetrievalParams(k=k, exact_below=0))
    t = time.perf_counter()
    ranked = [index.candidates(f, top=4)[0] if len(f) else np.zeros(0, int) for f in feats]
    t_index = (time.perf_counter() - t) / len(paths)
    s_exact, s_index = ns_score(exact, groups), ns_score(ranked, groups)
    print(f"  exact brute-force voting: NS score {s_exact:.3f} ({t_exact * 1e3:.1f} ms per query)")
    print(f"  retrieval index (IVF, n_lists={index.index_.nlist}): NS score {s_index:.3f} ({t_index * 1e3:.1f} ms)")
    print(f"  index - exact: {s_index - s_exact:+.3f}")


def section_crossover(items, qs, args) -> None:
    from objrec.features import make_detector
    from objrec.matching.database import DatabaseMatcher
    from objrec.matching.retrieval import RetrievalIndex
    from objrec.matching.shortlist import RETRIEVAL_PROBES, RETRIEVAL_QUERIES, SHORTLIST_SIZE
    from objrec.modeldb import DEFAULT_DETECTORS, ModelObject
    from objrec.modeldb.preparation import decode_descriptors, encode_descriptors

    surf = make_detector("surf", backend="cpu", **DEFAULT_DETECTORS["surf"])
    models = []
    for name, p in items:
        f = surf.detect_and_compute(cv2.imread(str(p), cv2.IMREAD_GRAYSCALE))
        stored = decode_descriptors("surf", encode_descriptors("surf", f.descriptors))  # as the database stores them
        f = f.replace(descriptors=stored.astype(np.float32))
        models.append(ModelObject(name, 500, 500, {"surf": f}))
    scene = [surf.detect_and_compute(img) for _, img in qs]
    print(f"crossover: SURF, {len(qs)} queries, median features {int(np.median([len(f) for f in scene]))}")
    for n in args.crossover_sizes:
        sub = models[:n]
        matcher = DatabaseMatcher(sub, "surf")
        desc = np.concatenate([m.features["surf"].descriptors for m in sub])
        owner = np.concatenate([np.full(len(m.features["surf"]), i) for i, m in enumerate(sub)])
        index = RetrievalIndex.build(desc, owner, "surf")
        exact, retr = [], []
        for f in scene:
            t = time.perf_counter()
            matcher.candidates(f)
            exact.append(time.perf_counter() - t)
            t = time.perf_counter()
            voters = f.descriptors[np.argsort(-f.response, kind="stable")[:RETRIEVAL_QUERIES]]
            ids, _ = index.candidates(voters, top=SHORTLIST_SIZE, n_probe=RETRIEVAL_PROBES)
            matcher.candidates(f, among=ids)
            retr.append(time.perf_counter() - t)
        print(
            f"  {n} objects, {len(desc)} descriptors ({'exact' if index.exact else 'IVF'} index): exact matching "
            f"median {statistics.median(exact) * 1e3:.1f} ms, retrieval + shortlist matching "
            f"{statistics.median(retr) * 1e3:.1f} ms"
        )


def report(what: str, ranked, labels, seconds: float) -> None:
    top1 = np.mean([len(r) and r[0] == lab for r, lab in zip(ranked, labels, strict=True)])
    top5 = np.mean([lab in r[:5] for r, lab in zip(ranked, labels, strict=True)])
    print(f"  {what}: top-1 {top1:.3f}, top-5 {top5:.3f}, {seconds * 1e3:.1f} ms per query")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", help="shared data folder (default ../shared/data)")
    p.add_argument("--sections", default="enrol,surf16,retrieval")
    p.add_argument("--distractors", type=int, default=234, help="DVD covers added as distractors")
    p.add_argument("--ukbench", type=int, default=0, help="UKBench thumbnails added as distractors")
    p.add_argument("--queries", type=int, default=60)
    p.add_argument(
        "--ukbench-images", type=int, default=400, help="ukbench section: first images of ukbench/ (a multiple of 4)"
    )
    p.add_argument("--ukbench-features", type=int, default=200, help="ukbench section: SIFT features per image")
    p.add_argument("--query-features", type=int, default=500)
    p.add_argument("--k", type=int, default=5, help="neighbours per query descriptor")
    p.add_argument("--n-probe", type=int, nargs="+", default=[4, 16])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--skip-exact", action="store_true", help="retrieval: no exact reference (it is slow)")
    p.add_argument("--scale-objects", type=int, default=10_000, help="objects of the synthetic 'scale' database")
    p.add_argument("--scale-features", type=int, default=200, help="SIFT rows per synthetic object")
    p.add_argument("--crossover-sizes", type=int, nargs="+", default=[10, 20, 40, 70, 100, 200, 334])
    p.add_argument("--cache", help="an .npz file caching the model SIFT descriptors between runs")
    args = p.parse_args()
    print("command:", " ".join(sys.argv), "| OpenCV threads", cv2.getNumThreads())
    data = data_root(args.data)
    items = catalogue(data, args.distractors, args.ukbench)
    sections = args.sections.split(",")
    qs = queries(data, args.queries) if {"surf16", "retrieval", "crossover"} & set(sections) else []
    if "scale" in sections:
        section_scale(args)
    if "enrol" in sections:
        section_enrol(items, args)
    if "surf16" in sections:
        section_surf16(items[:100], qs, args)
    if "retrieval" in sections:
        section_retrieval(items, qs, args)
    if "ukbench" in sections:
        section_ukbench(data, args)
    if "crossover" in sections:
        section_crossover(items, qs, args)


if __name__ == "__main__":
    main()
