"""Calibrate the reference-image rating against recognition: synthetic and real found shares per reference image.

Every reference image in the shared data folder is measured:

- ``smvs``: the 100 SMVS DVD references (``smvs_dvd/reference/NNN.jpg``);
- ``dvd_covers``: the 234 other DVD covers;
- ``ukbench``: the first view of each of the 120 real UKBench objects (``ukbench/ukbench{4k}.jpg``);
- ``coil100``: one view per COIL-100 object (``objects/coil100/obj<ID>__0.png``);
- ``oxford``: the first image of each Oxford affine sequence (``oxford_affine/<seq>/img1.png``).

Synthetic found share: the image's operating envelope (:func:`objrec.envelope.measure_envelope`) over the fixed
subset :data:`objrec.envelope.CALIBRATION_VIEWS` of the grid (16 of its 60 views, every axis in proportion to its
views and spread over its range, so the share estimates the whole grid's), which keeps a run over all 478 images
under half an hour on one core; or, with ``--views all``, over the whole grid (``measures_all.json``): a share of
60 views that depends less on the few views near an image's limits, in about three times as long. A whole-grid
run takes the subset's views from ``measures.json`` in the same folder where they are there, and measures the
others only.

Real found share, where real photos exist: the SMVS phone photos of covers 001-050 (4 cameras) against a catalogue
of the 100 SMVS references (flat), and UKBench views 4k+1..4k+3 against a catalogue of the 120 first views enrolled
as solid (objects with depth); each catalogue enrolled once, each photo recognised once (no budget, no tracking); a
photo is found when the top-scored detection names its object. For the solid score's own calibration
(``bench/rating_real.py``) every UKBench view serves as the reference in turn, and objects of two enrolled views
are recognised in their other two.

With ``--retest-seeds N [N ...]`` every envelope is measured again with each seed (new background clutter and
sensor noise, the same views). The Spearman correlation between two runs' found shares is the yardstick's
test-retest reliability, which bounds how closely any rating can follow a single run's share; the mean share over
all runs is a steadier yardstick (its reliability by the Spearman-Brown formula). The report gives both beside
the score's correlation with each run's share and with the mean, overall and per source.

Results are cached per image in ``--out/measures.json`` as they come (``--reuse`` skips what is there), in a
deterministic shuffled order, so an interrupted run still covers every source. Then, when ``objrec.rating`` has
``rate``, the rating's weights are fitted on one half of the images and reported on the other (see
``bench/rating_fit.py``).

    PYTHONPATH=$PWD taskset -c 1 python bench/bench_rating.py --out /tmp/rating [--views all] [--reuse] [--fit-only]
        [--retest-seeds 1 2 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from objrec.envelope import CALIBRATION_VIEWS, GRID, Envelope, ViewResult, measure_envelope  # noqa: E402
from objrec.fileio import atomic_write_json, read_json  # noqa: E402

SOURCES = ("smvs", "dvd_covers", "ukbench", "coil100", "oxford")


def shared_data() -> Path:
    return Path(os.environ.get("OBJREC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def path_hash(rel: str) -> str:
    return hashlib.sha256(rel.encode()).hexdigest()


def reference_images(root: Path) -> dict[str, str]:
    """Every reference image, as path relative to ``root`` -> source."""
    out = {}
    out.update({str(p.relative_to(root)): "smvs" for p in sorted((root / "smvs_dvd" / "reference").glob("*.jpg"))})
    out.update({str(p.relative_to(root)): "dvd_covers" for p in sorted((root / "dvd_covers").glob("*.jpg"))})
    out.update({f"ukbench/ukbench{4 * k:05d}.jpg": "ukbench" for k in range(120) if (root / "ukbench").is_dir()})
    out.update({str(p.relative_to(root)): "coil100" for p in sorted((root / "objects" / "coil100").glob("*__0.png"))})
    out.update({str(p.relative_to(root)): "oxford" for p in sorted((root / "oxford_affine").glob("*/img1.png"))})
    return out


def real_photo_sets(root: Path) -> dict[str, tuple[dict[str, str], dict[str, str]]]:
    """Per source: (catalogue name -> reference path, photo path -> the name of its object), relative to ``root``."""
    smvs_refs = {p.stem: str(p.relative_to(root)) for p in sorted((root / "smvs_dvd" / "reference").glob("*.jpg"))}
    smvs_photos = {
        str(p.relative_to(root)): p.stem.split("_")[-1]
        for p in sorted((root / "smvs_dvd" / "queries").glob("*_*.jpg"))
        if p.stem.split("_")[-1] in smvs_refs
    }
    uk_refs = {f"uk{k:03d}": f"ukbench/ukbench{4 * k:05d}.jpg" for k in range(120)}
    uk_photos = {f"ukbench/ukbench{4 * k + j:05d}.jpg": f"uk{k:03d}" for k in range(120) for j in (1, 2, 3)}
    return {"smvs": (smvs_refs, smvs_photos), "ukbench": (uk_refs, uk_photos)}


#: How each real-photo source's objects are enrolled: UKBench's are objects with depth.
REAL_SHAPES = {"smvs": "flat", "ukbench": "solid"}


def measure_real(root: Path, source: str, refs: dict[str, str], photos: dict[str, str]) -> dict[str, dict[str, int]]:
    """Per reference path: photos of it and how many were found as the top-1 detection (the catalogue enrolled
    with the source's shape, :data:`REAL_SHAPES`)."""
    from rating_real import found_top1
    from tqdm import tqdm

    from objrec import ModelDB, Recognizer

    out = {path: {"photos": 0, "found": 0} for path in refs.values()}
    with tempfile.TemporaryDirectory(prefix="objrec-bench-rating-") as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        db.enroll_many(
            [(name, str(root / path)) for name, path in refs.items()],
            workers=1,
            progress=True,
            shape=REAL_SHAPES.get(source, "flat"),
        )
        rec = Recognizer(db, budget_ms=None, backend="cpu", prefilter=None, track=False)
        for photo, name in tqdm(sorted(photos.items()), desc=f"{source} photos", unit="img", file=sys.stderr):
            rec_out = out[refs[name]]
            rec_out["photos"] += 1
            rec_out["found"] += found_top1(rec, root, photo, name)
    return out


def grid_views(which: str) -> list[int]:
    """The grid indices a run measures: ``"calibration"`` (:data:`CALIBRATION_VIEWS`) or ``"all"``."""
    return [int(i) for i in CALIBRATION_VIEWS] if which == "calibration" else list(range(len(GRID)))


def load_cache(path: Path, reuse: bool, views: list[int]) -> dict[str, Any]:
    fresh = {"views": views, "grid_size": len(GRID), "synthetic": {}, "real": {}}
    if not (reuse and path.exists()):
        return fresh
    cache = read_json(path, "rating measures")
    if cache.get("views") != views or cache.get("grid_size") != len(GRID):
        print(f"{path}: measured on another grid subset; measuring again", file=sys.stderr)
        return fresh
    return cache


def known_views(subset: dict[str, Any] | None, rel: str) -> dict[int, bool]:
    """The views of image ``rel`` already measured in a ``subset`` cache (grid index -> found)."""
    entry = (subset or {}).get("synthetic", {}).get(rel)
    if entry is None or entry.get("error") is not None:
        return {}
    return {int(i): bool(f) for i, f in zip(subset["views"], entry["found"], strict=True)}


def measure_synthetic(
    root: Path,
    images: dict[str, str],
    cache: dict[str, Any],
    out: Path,
    limit: int | None,
    subset: dict[str, Any] | None = None,
    seed: int = 0,
) -> None:
    """Each image's envelope over the cache's views, in a hashed order, saved after every image; the views a
    ``subset`` cache (of the same grid) holds for an image are taken from it, not measured again.

    ``seed`` is the envelope's (:func:`~objrec.envelope.measure_envelope`): 0 for the calibration's found share;
    another seed draws new background clutter and sensor noise for the same views, into
    ``cache["repeats"][str(seed)]``."""
    from tqdm import tqdm

    views = cache["views"]
    store = cache["synthetic"]
    if seed != 0:
        store = cache.setdefault("repeats", {}).setdefault(str(seed), {})
        subset = None  # the subset cache was measured with seed 0
    todo = [p for p in sorted(images, key=path_hash) if p not in store]
    if limit is not None:
        todo = todo[:limit]
    desc = "envelopes" if seed == 0 else f"repeated envelopes (seed {seed})"
    for rel in tqdm(todo, desc=desc, unit="img", file=sys.stderr, dynamic_ncols=True):
        known = known_views(subset, rel)
        env = measure_envelope(root / rel, views=[i for i in views if i not in known], seed=seed)
        if known and env.error is None:
            # The subset's views join the new ones as results that carry only whether they were found: the
            # share and the limits need no more.
            old = [ViewResult(i, GRID[i], f, f, None, 0.0, 0, 0.0) for i, f in known.items()]
            env = Envelope(env.image_size, sorted(env.views + old, key=lambda r: r.index), env.seconds, env.error)
        d = env.to_dict()
        store[rel] = {
            "source": images[rel],
            "found_share": env.found_share,
            "found": [int(r.found) for r in env.views],
            "limits": d["limits"],
            "image_size": d["image_size"],
            "error": env.error,
            "seconds": env.seconds,
        }
        atomic_write_json(out, cache)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for measures.json and the report")
    p.add_argument("--reuse", action="store_true", help="keep the measures already in --out/measures.json")
    p.add_argument("--fit-only", action="store_true", help="measure nothing; fit and report from the cache")
    p.add_argument("--limit", type=int, default=None, help="measure at most this many more envelopes")
    p.add_argument("--no-real", action="store_true", help="skip the real-photo found shares")
    p.add_argument(
        "--retest-seeds",
        "--retest-seed",
        type=int,
        nargs="+",
        default=[],
        metavar="SEED",
        help="measure every envelope again with each of these seeds (new clutter and noise, same views): the found "
        "share's test-retest reliability and the mean share over all runs, reported beside the score's correlations",
    )
    p.add_argument(
        "--views",
        choices=("calibration", "all"),
        default="calibration",
        help="the grid's calibration subset (measures.json) or all of its views (measures_all.json)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print("command:", " ".join([sys.executable, *sys.argv]))
    if 0 in args.retest_seeds:
        print("--retest-seeds: 0 is the calibration's own seed; give others", file=sys.stderr)
        return 2
    root = shared_data()
    if not (root / "smvs_dvd").is_dir():
        print(f"{root}: shared data folder not found (set OBJREC_SHARED_DATA)", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    views = grid_views(args.views)
    cache_path = args.out / ("measures.json" if args.views == "calibration" else "measures_all.json")
    cache = load_cache(cache_path, args.reuse or args.fit_only, views)
    subset = None
    if args.views == "all":  # the calibration subset's cache, when it is of this grid (else empty)
        subset = load_cache(args.out / "measures.json", True, grid_views("calibration"))
        for source, shares in subset["real"].items():  # the same photos, measured the same way
            cache["real"].setdefault(source, shares)
    images = reference_images(root)
    print(f"{len(images)} reference images: " + ", ".join(f"{s} {list(images.values()).count(s)}" for s in SOURCES))
    print(f"synthetic views per image: {len(views)} of the {len(GRID)}-view grid ({args.views})")
    if not args.fit_only:
        t0 = time.perf_counter()
        if not args.no_real:
            for source, (refs, photos) in real_photo_sets(root).items():
                if source not in cache["real"]:
                    cache["real"][source] = measure_real(root, source, refs, photos)
                    atomic_write_json(cache_path, cache)
            if (root / "ukbench").is_dir():
                from rating_real import measure_each, measure_two

                for key, measure in (("ukbench_each", measure_each), ("ukbench_two", measure_two)):
                    if key not in cache["real"]:
                        cache["real"][key] = measure(root)
                        atomic_write_json(cache_path, cache)
        measure_synthetic(root, images, cache, cache_path, args.limit, subset)
        for seed in dict.fromkeys(args.retest_seeds):
            measure_synthetic(root, images, cache, cache_path, args.limit, seed=seed)
        print(f"measured in {time.perf_counter() - t0:.0f} s; cache {cache_path}")
    from rating_fit import fit_and_report

    return fit_and_report(cache, images, args.out, root, cache_path)


if __name__ == "__main__":
    sys.exit(main())
