"""The rating against recognition in real photos of objects with depth: measuring it, fitting the solid score's
weights on one half of the objects and reporting the other (used by ``bench/bench_rating.py``).

Real photos (UKBench: 4 photos of each of 120 objects, 640x480, objects with depth), each object enrolled as
solid, as the README advises for objects with depth:

- ``ukbench_each``: each photo in turn the object's only reference (one catalogue of 120 objects per view
  position), the other three recognised: 480 (reference, 3 photos) pairs. The fit uses every pair of its half's
  objects (four times the pairs of first views alone, so a measure is chosen on less noise); the acceptance
  reads the first views (``ukbench{4k}``) of the other half's objects.
- ``ukbench_two``: views 0 and 1 enrolled (``db add-view``), views 2 and 3 recognised: the object rating
  (:func:`objrec.rating.objects.rate_object`) against what the two views find.

A photo is found when the top-scored detection names its object (no budget, no tracking).

Split: the objects of ``rating_fit.split_halves``' tuning half of the reference images (the first views) are
the tuning objects, the others the held-out objects, so the synthetic and real fits share one split.

Fit: ``solid_features_ok``, ``solid_features_power`` and ``solid_image_power`` of
:data:`objrec.rating.model.WEIGHTS` by differential evolution (seeded) on the tuning objects' pairs, maximising
Spearman's correlation of the solid score with the found share under the acceptance's band targets (a score of
75 or more found in at least 80% of photos, under 40 in at most 40%, each with two standard errors of margin,
from 3 pairs) and a small calibration term (the mean squared difference of score / 100 and found share), so a
score reads as a found share. ``view_agreement_scale`` is fitted by a grid on the tuning objects' two-view
figures under the same bands. ``solid_views_power`` stays 0 by rule: the rendered views are views of a flat
print, which say nothing of an object's other sides, and they are most of a rating's cost (a solid rating without
them is complete at enrolment).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

UK_OBJECTS = 120
#: The solid score's weights the fit moves, with their bounds.
SOLID_BOUNDS = {
    "solid_features_ok": (20.0, 5000.0),
    "solid_features_power": (0.0, 1.0),
    "solid_image_power": (0.0, 1.0),
}
AGREEMENT_GRID = (5.0, 10.0, 20.0, 40.0, 80.0)
#: (low, high, target, sign): scores >= 75 found at least 80% of the time, < 40 at most 40%.
BAND_TARGETS = ((75, 101, 0.8, 1.0), (0, 40, 0.4, -1.0))


def uk(k: int, j: int) -> str:
    return f"ukbench/ukbench{4 * k + j:05d}.jpg"


def found_top1(rec: Any, root: Path, photo: str, name: str) -> int:
    """1 when the top-scored detection in ``photo`` names object ``name`` (views ``NAME#k`` included), else 0."""
    from objrec.imageio import read_image

    result = rec.process(read_image(root / photo))
    best = max(result.detections, key=lambda d: d.score, default=None)
    return int(best is not None and best.name.split("#")[0] == name)


def measure_each(root: Path) -> dict[str, list[int]]:
    """``ukbench_each``: per reference photo, found (0/1) for each of its object's other three photos."""
    from tqdm import tqdm

    from objrec import ModelDB, Recognizer

    out: dict[str, list[int]] = {}
    for j in range(4):
        with tempfile.TemporaryDirectory(prefix="objrec-bench-rating-") as tmp:
            db = ModelDB.create(Path(tmp) / "db")
            db.enroll_many([(f"uk{k:03d}", str(root / uk(k, j))) for k in range(UK_OBJECTS)], shape="solid")
            rec = Recognizer(db, budget_ms=None, backend="cpu", prefilter=None, track=False)
            for k in tqdm(range(UK_OBJECTS), desc=f"ukbench, view {j} enrolled", unit="obj", file=sys.stderr):
                out[uk(k, j)] = [found_top1(rec, root, uk(k, q), f"uk{k:03d}") for q in range(4) if q != j]
    return out


def measure_two(root: Path) -> dict[str, Any]:
    """``ukbench_two``: per object (its first view's path), the object rating of views 0 and 1 and whether views
    2 and 3 were found."""
    from tqdm import tqdm

    from objrec import ModelDB, Recognizer

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="objrec-bench-rating-") as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        db.enroll_many([(f"uk{k:03d}", str(root / uk(k, 0))) for k in range(UK_OBJECTS)], shape="solid")
        for k in range(UK_OBJECTS):
            db.add_view(f"uk{k:03d}", str(root / uk(k, 1)))
        rec = Recognizer(db, budget_ms=None, backend="cpu", prefilter=None, track=False)
        for k in tqdm(range(UK_OBJECTS), desc="ukbench, views 0+1 enrolled", unit="obj", file=sys.stderr):
            r = db.rate_object(f"uk{k:03d}")
            found = [found_top1(rec, root, uk(k, q), f"uk{k:03d}") for q in (2, 3)]
            out[uk(k, 0)] = {"found": found, "view_scores": r.view_scores, "agreement": r.agreement}
    return out


def solid_measures(root: Path, paths: list[str], cache: dict[str, Any]) -> None:
    """``rate(image, shape="solid", views=False).measures`` of each path into ``cache["solid_measures"]`` (kept
    while the rating's version holds)."""
    from tqdm import tqdm

    from objrec.rating import RATING_VERSION, rate

    store = cache.setdefault("solid_measures", {})
    for rel in tqdm(paths, desc="solid rating measures", unit="img", file=sys.stderr):
        if store.get(rel, {}).get("version") == RATING_VERSION:
            continue
        r = rate(str(root / rel), shape="solid", views=False)
        store[rel] = {"version": RATING_VERSION, "measures": {k: float(v) for k, v in r.measures.items()}}


def halves(tune_refs: list[str]) -> tuple[list[int], list[int]]:
    """(tuning, held-out) UKBench objects: those whose first view is in the tuning half of the reference
    images, and the others."""
    tune = sorted(int(p[-9:-4]) // 4 for p in tune_refs if p.startswith("ukbench/"))
    return tune, [k for k in range(UK_OBJECTS) if k not in set(tune)]


def band_shortfall(scores: np.ndarray, shares: np.ndarray) -> float:
    """``rating_fit.band_shortfall`` at the real-photo targets (:data:`BAND_TARGETS`)."""
    from rating_fit import band_shortfall as shortfall

    return shortfall(scores, shares, high=BAND_TARGETS[0][2], low=BAND_TARGETS[1][2])


def _solid_scores(measures: list[dict], weights: dict[str, float]) -> np.ndarray:
    from objrec.rating.model import score_from_measures

    return np.array([score_from_measures(m, weights, "solid")[0] for m in measures], float)


def fit_solid(measures: list[dict], shares: np.ndarray, weights: dict[str, float]) -> dict[str, float]:
    """The solid score's weights (:data:`SOLID_BOUNDS`) fitted to ``measures`` (solid rating measures) and their
    found ``shares`` (see the module's notes)."""
    from rating_fit import spearman
    from scipy.optimize import differential_evolution

    keys = list(SOLID_BOUNDS)

    def with_x(x: np.ndarray) -> dict[str, float]:
        return {**weights, **{k: float(v) for k, v in zip(keys, x, strict=True)}}

    def loss(x: np.ndarray) -> float:
        s = _solid_scores(measures, with_x(x))
        rho = spearman(s, shares)
        return (
            -(rho if rho is not None else -1.0)
            + 10.0 * band_shortfall(s, shares)
            + float(np.mean((s / 100.0 - shares) ** 2))
        )

    res = differential_evolution(
        loss, [SOLID_BOUNDS[k] for k in keys], seed=0, maxiter=50, popsize=15, polish=False, tol=1e-6
    )
    return {k: float(np.round(v, 4)) for k, v in with_x(res.x).items()}


def view_to_view(each: dict[str, list[int]], objects: list[int]) -> dict[str, Any]:
    """How well the found share of one photo enrolled ranks that of another photo of the same object enrolled
    instead, over ``objects``: Spearman of the two shares for each of the six pairs of view positions, and their
    mean. A reference for the rating: another photo of the object knows its depth, gloss and lighting, which one
    image shows only in part, and its found share carries the same noise of three queried photos."""
    from itertools import combinations

    from rating_fit import spearman

    rhos = []
    for a, b in combinations(range(4), 2):
        rho = spearman(
            np.array([np.mean(each[uk(k, a)]) for k in objects], float),
            np.array([np.mean(each[uk(k, b)]) for k in objects], float),
        )
        rhos.append(np.nan if rho is None else rho)
    return {"n": len(objects), "pairs": [round(float(r), 3) for r in rhos], "mean": float(np.nanmean(rhos))}


def figures(scores: np.ndarray, shares: np.ndarray) -> dict[str, Any]:
    from rating_fit import band_shares, spearman, spearman_ci

    return {
        "n": len(scores),
        "spearman": spearman(scores, shares),
        "ci95": spearman_ci(scores, shares),
        "mean_found_share": float(np.mean(shares)) if len(shares) else None,
        "bands": band_shares(scores, shares),
    }


def object_scores(
    two: dict[str, Any], objects: list[int], scale: float, view_scores: dict[str, float]
) -> tuple[np.ndarray, np.ndarray]:
    """(object score, found share of views 2 and 3) of ``objects``: their views' scores from ``view_scores`` (by
    path), their agreement from ``two``, with ``view_agreement_scale`` = ``scale``."""
    import math

    s, y = [], []
    for k in objects:
        e = two[uk(k, 0)]
        covered = 1.0 - math.prod(1.0 - view_scores[uk(k, j)] / 100.0 for j in (0, 1))
        s.append(round(100.0 * covered * (1.0 - math.exp(-(e["agreement"] or 0.0) / scale))))
        y.append(float(np.mean(e["found"])))
    return np.array(s, float), np.array(y, float)


def fit_and_report_real(cache: dict[str, Any], root: Path, tune_refs: list[str]) -> dict[str, Any]:
    """Fit the solid score on the tuning objects and report the held-out objects (and the object rating of two
    views); a dict for the report, with the fitted weights."""
    from rating_fit import spearman

    from objrec.rating.model import WEIGHTS

    each = cache["real"].get("ukbench_each")
    if not each:
        return {}
    tune, held = halves(tune_refs)
    solid_measures(root, sorted(each), cache)
    sm = cache["solid_measures"]

    def pairs(objects: list[int], views: tuple[int, ...]) -> tuple[list[dict], np.ndarray]:
        refs = [uk(k, j) for k in objects for j in views]
        return [sm[r]["measures"] for r in refs], np.array([np.mean(each[r]) for r in refs], float)

    m_tune, y_tune = pairs(tune, (0, 1, 2, 3))
    fitted = fit_solid(m_tune, y_tune, dict(WEIGHTS))
    out: dict[str, Any] = {"tuning_objects": len(tune), "held_out_objects": len(held)}
    m_first, y_first = pairs(held, (0,))
    m_all, y_all = pairs(held, (0, 1, 2, 3))
    flat = [cache.get("measures", {}).get(uk(k, 0), {}).get("score") for k in held]
    for name, w in (("shipped", dict(WEIGHTS)), ("fitted", fitted)):
        out[name] = {
            "tune_all_views": figures(_solid_scores(m_tune, w), y_tune),
            "held_first_views": figures(_solid_scores(m_first, w), y_first),
            "held_all_views": figures(_solid_scores(m_all, w), y_all),
            "held_first_views_flat": None if None in flat else figures(np.array(flat, float), y_first),
        }
    out["solid_weights"] = {k: fitted[k] for k in SOLID_BOUNDS}
    m_every, y_every = pairs(list(range(UK_OBJECTS)), (0, 1, 2, 3))
    # every object and view (the tuning half included): the shipped score's correlation on the most pairs
    out["all_objects_all_views"] = figures(_solid_scores(m_every, dict(WEIGHTS)), y_every)
    out["view_to_view"] = {"tuning": view_to_view(each, tune), "held_out": view_to_view(each, held)}
    two = cache["real"].get("ukbench_two")
    if two:
        # the views' solid scores under the shipped weights (the object rating's own scale is what is fitted)
        refs = [uk(k, j) for k in range(UK_OBJECTS) for j in (0, 1)]
        vs = dict(zip(refs, _solid_scores([sm[r]["measures"] for r in refs], dict(WEIGHTS)), strict=True))
        grid = {}
        for scale in AGREEMENT_GRID:
            s, y = object_scores(two, tune, scale, vs)
            rho = spearman(s, y)
            grid[scale] = (rho if rho is not None else -1.0) - 10.0 * band_shortfall(s, y)
        best = max(grid, key=lambda k: grid[k])
        s, y = object_scores(two, held, WEIGHTS["view_agreement_scale"], vs)
        s_fit, _ = object_scores(two, held, best, vs)
        first = np.array([vs[uk(k, 0)] for k in held], float)
        out["objects"] = {
            "view_agreement_scale_fitted": best,
            "held_shipped": figures(s, y),
            "held_fitted": figures(s_fit, y),
            "held_first_view_only": figures(first, y),
        }
    return out


def markdown_real(r: dict[str, Any]) -> list[str]:
    """The report's lines for :func:`fit_and_report_real`'s result."""
    from rating_fit import _fmt, _interval

    if not r:
        return []

    def row(label: str, f: dict[str, Any] | None) -> str:
        if f is None:
            return f"| {label} | - | - | - | - | - |"
        b = f["bands"]
        return (
            f"| {label} | {f['n']} | {_fmt(f['spearman'])} ({_interval(f['ci95'])}) | "
            + " | ".join(f"{_fmt(b[n]['found_share'])} ({b[n]['n']})" for n in ("<40", "40-75", ">=75"))
            + " |"
        )

    lines = [
        "",
        f"## Real photos of objects with depth (UKBench, enrolled as solid; {r['tuning_objects']} tuning objects, "
        f"{r['held_out_objects']} held out)",
        "",
        "| score | pairs | Spearman vs found share (95% CI) | <40 found (n) | 40-75 found (n) | >=75 found (n) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("shipped", "fitted"):
        for key, label in (
            ("tune_all_views", "tuning objects, every view as reference"),
            ("held_all_views", "held-out objects, every view as reference"),
            ("held_first_views", "held-out objects, first views (the acceptance)"),
            ("held_first_views_flat", "held-out first views, scored as flat"),
        ):
            lines.append(row(f"{name}: {label}", r[name].get(key)))
    if r.get("all_objects_all_views"):
        lines.append(row("shipped: every object (tuning included), every view", r["all_objects_all_views"]))
    lines += ["", f"Fitted solid weights: `{r['solid_weights']}`"]
    v = r.get("view_to_view")
    if v:
        lines += [
            "",
            "For reference, how well one photo's found share ranks another photo's of the same object (each "
            "enrolled in turn; Spearman, mean of the six pairs of view positions): tuning objects "
            f"{_fmt(v['tuning']['mean'])} ({v['tuning']['pairs']}), held-out objects {_fmt(v['held_out']['mean'])} "
            f"({v['held_out']['pairs']}).",
        ]
    o = r.get("objects")
    if o:
        lines += [
            "",
            "Objects of two views (views 0 and 1 enrolled, 2 and 3 recognised), held-out objects:",
            "",
            "| score | objects | Spearman vs found share (95% CI) | <40 found (n) | 40-75 found (n) | >=75 found (n) |",
            "| --- | --- | --- | --- | --- | --- |",
            row("object rating (shipped scale)", o["held_shipped"]),
            row(f"object rating (fitted scale {o['view_agreement_scale_fitted']:g})", o["held_fitted"]),
            row("first view's rating alone", o["held_first_view_only"]),
        ]
    return lines
