"""Fit the rating's weights on one half of the calibration images and report on the other half.

Used by ``bench/bench_rating.py`` on its cached measures. Each image's rating measures come from
``objrec.rating.rate(image).measures`` (cached too, with the rating's version); its score under a set of weights
from ``objrec.rating.model.score_from_measures(measures, weights)``, so the model's form is kept and only the
numbers of ``WEIGHTS`` move.

Split: within each source, images sorted by the SHA-256 of their path relative to the data folder; even positions
form the tuning half, odd ones the held-out half (a deterministic, stratified half).

Fit: the numbers of ``WEIGHTS`` (nested dicts and lists included), except those of the reasons the data cannot
calibrate (:data:`RULE_SET`: repetition, symmetry, JPEG blocking, the colour-only test, set by rule), move from
their shipped values in steps of their own magnitude by differential evolution (derivative-free and global: the
objective is a rank statistic, flat between rank changes) to minimise, on the tuning half,

    - Spearman(score, synthetic found share)
        + BAND_PENALTY * (max(0, 0.9 + 2 SE - share found among scores >= 75)
                          + max(0, share found among scores < 40 + 2 SE - 0.5)) + PRIOR * |z|^2,

the acceptance's correlation and its two band targets (a band counts from 3 tuning images), each with a margin
of two standard errors of the band's mean (:data:`BAND_MARGIN_SE`) and weighted as a constraint
(:data:`BAND_PENALTY`), with a pull towards the shipped values (``z``: the parameters' steps, :data:`PRIOR`).
Reported on the held-out half only: Spearman overall (with a bootstrap 95% interval), per source of 50 images
or more, against the real-photo found share (with its interval), and the found share per score band (bands of
10 images or more), for the shipped and the fitted weights; and, when the cache holds envelope runs of other
seeds (``"repeats"``), the runs' agreement (Spearman between their found shares), the reliability of their mean
and the score's correlation with each run and with the mean of all runs (:func:`retest_figures`). The fit uses
the first run only.

References
----------
R. Storn and K. Price, "Differential evolution - a simple and efficient heuristic for global optimization over
continuous spaces", Journal of Global Optimization 11(4), 1997. DOI: 10.1023/A:1008202821328
"""

from __future__ import annotations

import hashlib
import json
import pprint
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np

BANDS = (("<40", 0, 40), ("40-75", 40, 75), (">=75", 75, 101))
MIN_BAND = 10
#: Images from which the fit holds a band to its target (see :func:`band_shortfall`).
MIN_FIT_BAND = 3
MIN_SOURCE = 50
#: Parts of weight names the data cannot calibrate (the calibration images have little repetition, symmetry or
#: blocking): kept at the values their rule sets, as is the colour-only test.
RULE_SET = ("repetition", "symmetry", "blocking", "colour_ratio")
#: Parts of weight names fitted on real photos instead (``bench/rating_real.py``): the solid score's and the
#: object rating's.
REAL_SET = ("solid", "view_agreement")
#: Weight of the pull towards the shipped values (per squared step, a step being a factor e for a positive
#: weight): the shipped values come from principles, so a fit leaves them only for a clear gain in rank order.
PRIOR = 0.01
#: Bound of each parameter's step in the fit (a factor ``exp(1.5)``, about 4.5, either way for a positive
#: weight).
STEP_BOUND = 1.5
#: Margin of the band targets in the fit, in standard errors of a band's mean found share on the tuning half: a
#: band fitted to sit exactly on its target lands on either side of it in another sample of the same size, and
#: two standard errors keep an independent sample's band on the target's side most of the time.
BAND_MARGIN_SE = 2.0
#: Weight of a band's shortfall (in found share) against Spearman's correlation in the fit: large, so the
#: bands act as constraints rather than as one more term to trade.
BAND_PENALTY = 10.0
COLORS = {
    "smvs": (200, 80, 20),
    "dvd_covers": (40, 160, 40),
    "ukbench": (30, 30, 220),
    "coil100": (180, 0, 180),
    "oxford": (0, 160, 220),
}


def load_rating():
    """(rate, score_from_measures, WEIGHTS) or None with a message when the rating is not there yet."""
    try:
        from objrec.rating import rate
        from objrec.rating.model import WEIGHTS, score_from_measures
    except ImportError as e:
        print(f"fit skipped: objrec.rating has no rate()/model yet ({e}); measures are cached, rerun with --fit-only")
        return None
    return rate, score_from_measures, WEIGHTS


def split_halves(images: dict[str, str]) -> tuple[list[str], list[str]]:
    """(tuning, held-out) paths: per source, sorted by the path's SHA-256, alternately."""
    tune, held = [], []
    for source in sorted(set(images.values())):
        paths = sorted(
            (p for p, s in images.items() if s == source), key=lambda p: hashlib.sha256(p.encode()).hexdigest()
        )
        tune += paths[0::2]
        held += paths[1::2]
    return tune, held


def flatten(w: Any) -> list[float]:
    """The numbers of a nested weights structure, in a fixed walk order."""
    if isinstance(w, dict):
        return [x for k in sorted(w) for x in flatten(w[k])]
    if isinstance(w, list | tuple):
        return [x for v in w for x in flatten(v)]
    if isinstance(w, int | float) and not isinstance(w, bool):
        return [float(w)]
    return []


def unflatten(template: Any, values: list[float]) -> Any:
    """``template`` with its numbers replaced by ``values`` in the walk order of :func:`flatten`."""
    it = iter(values)

    def put(w: Any) -> Any:
        if isinstance(w, dict):
            done = {k: put(w[k]) for k in sorted(w)}
            return {k: done[k] for k in w}
        if isinstance(w, list | tuple):
            return type(w)(put(v) for v in w)
        if isinstance(w, int | float) and not isinstance(w, bool):
            return float(next(it))
        return w

    return put(template)


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    from scipy.stats import spearmanr

    if len(a) < 3 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    return float(spearmanr(a, b).statistic)


def spearman_ci(a: np.ndarray, b: np.ndarray, level: float = 0.95, resamples: int = 2000) -> list[float] | None:
    """The ``level`` confidence interval of Spearman's correlation of ``a`` and ``b``: a paired bootstrap over the
    images (scipy's BCa, seeded so a report repeats): how far the held-out half's correlation could lie from the
    same rating's on other images of the same kinds; None where Spearman is undefined."""
    from scipy.stats import bootstrap, spearmanr

    if spearman(a, b) is None:
        return None

    def rho(x: np.ndarray, y: np.ndarray) -> float:
        r = spearmanr(x, y).statistic
        return 0.0 if np.isnan(r) else float(r)  # a resample with one value on either side ranks nothing

    res = bootstrap(
        (np.asarray(a, float), np.asarray(b, float)),
        rho,
        paired=True,
        vectorized=False,
        n_resamples=resamples,
        confidence_level=level,
        method="BCa",
        random_state=np.random.default_rng(0),
    )
    return [float(res.confidence_interval.low), float(res.confidence_interval.high)]


def band_shares(scores: np.ndarray, shares: np.ndarray, min_n: int = MIN_BAND) -> dict[str, dict[str, Any]]:
    out = {}
    for name, lo, hi in BANDS:
        sel = (scores >= lo) & (scores < hi)
        n = int(sel.sum())
        out[name] = {"n": n, "found_share": float(shares[sel].mean()) if n >= min_n else None}
    return out


def band_shortfall(
    scores: np.ndarray, shares: np.ndarray, z: float = BAND_MARGIN_SE, high: float = 0.9, low: float = 0.5
) -> float:
    """How far the score bands miss their targets with a margin: the found share of scores >= 75 below
    ``high + z`` standard errors of that band's mean, plus that of scores < 40 above ``low - z`` of its own.
    A band counts from :data:`MIN_FIT_BAND` images, fewer than the report's :data:`MIN_BAND`: a fit must not
    meet a target by leaving a band just short of the size at which another sample's band is judged."""
    out = 0.0
    for sel, target, sign in ((scores >= 75, high, 1.0), (scores < 40, low, -1.0)):
        n = int(sel.sum())
        if n >= MIN_FIT_BAND:
            mean, se = float(shares[sel].mean()), float(shares[sel].std(ddof=1)) / np.sqrt(n)
            out += max(0.0, sign * (target - mean) + z * se)
    return out


def objective(scores: np.ndarray, shares: np.ndarray) -> float:
    rho = spearman(scores, shares)
    return -(rho if rho is not None else -1.0) + BAND_PENALTY * band_shortfall(scores, shares)


def free_keys(weights: Any, fixed: tuple[str, ...] = RULE_SET + REAL_SET) -> list[str]:
    """The top-level keys of ``weights`` the fit may move: all but those whose name contains one of ``fixed``."""
    return [k for k in weights if not any(f in k for f in fixed)]


def fit_weights(score_fn, weights: Any, measures: list[dict], shares: np.ndarray, keys: list[str], maxiter: int = 40):
    """Differential evolution on the numbers of ``weights[k]`` for ``k`` in ``keys``, the rest kept as they are.

    A positive number moves by a factor ``exp(z)`` (it stays positive, and its step is relative to its size);
    any other number moves by ``z`` times ``max(|w|, 0.1)``; each ``z`` within :data:`STEP_BOUND`. The objective
    is a rank statistic with band constraints, flat between the few scores that change a rank: a population
    search (seeded, so a fit repeats) does not stall on its plateaus as a line search from the shipped values
    does.
    """
    from scipy.optimize import differential_evolution

    w0 = np.array(flatten({k: weights[k] for k in keys}))
    positive = w0 > 0

    def with_z(z: np.ndarray) -> Any:
        values = np.where(positive, w0 * np.exp(z), w0 + z * np.maximum(np.abs(w0), 0.1))
        return {**weights, **unflatten({k: weights[k] for k in keys}, list(values))}

    def loss(z: np.ndarray) -> float:
        w = with_z(z)
        return objective(np.array([score_fn(m, w)[0] for m in measures], float), shares) + PRIOR * float(z @ z)

    res = differential_evolution(
        loss, [(-STEP_BOUND, STEP_BOUND)] * len(w0), seed=0, maxiter=maxiter, popsize=12, polish=False, tol=1e-6
    )
    return with_z(np.round(res.x, 3))


def rating_measures(rate, root: Path, paths: list[str], cache: dict[str, Any]) -> None:
    """``rate(image).measures`` of each path into ``cache["measures"]`` (kept while the rating's version holds)."""
    from tqdm import tqdm

    store = cache.setdefault("measures", {})
    version = str(rate(str(root / paths[0])).version) if paths else ""
    for rel in tqdm(paths, desc="rating measures", unit="img", file=sys.stderr, dynamic_ncols=True):
        if store.get(rel, {}).get("version") == version:
            continue
        r = rate(str(root / rel))
        measures = {k: float(v) if isinstance(v, int | float | np.number) else v for k, v in r.measures.items()}
        store[rel] = {"version": version, "measures": measures, "score": float(r.score)}


def evaluate(score_fn, weights: Any, paths: list[str], images: dict[str, str], cache: dict[str, Any]) -> dict:
    """Held-out figures of ``weights`` on ``paths``: Spearman overall, per source, vs real photos; bands."""
    scores = np.array([score_fn(cache["measures"][p]["measures"], weights)[0] for p in paths], float)
    synth = np.array([cache["synthetic"][p]["found_share"] for p in paths], float)
    out: dict[str, Any] = {
        "n": len(paths),
        "spearman_synthetic": spearman(scores, synth),
        "spearman_synthetic_ci95": spearman_ci(scores, synth),
        "per_source": {},
    }
    total = {s: list(images.values()).count(s) for s in set(images.values())}
    for source in sorted(set(images[p] for p in paths)):
        sel = np.array([images[p] == source for p in paths])
        out["per_source"][source] = {
            "n": int(sel.sum()),
            "images_in_source": total[source],
            "spearman_synthetic": spearman(scores[sel], synth[sel]) if total[source] >= MIN_SOURCE else None,
            "mean_score": float(scores[sel].mean()),
            "mean_found_share": float(synth[sel].mean()),
        }
    real = {
        path: v for src in ("smvs", "ukbench") for path, v in cache.get("real", {}).get(src, {}).items() if v["photos"]
    }
    sel = [i for i, p in enumerate(paths) if p in real]
    real_share = np.array([real[paths[i]]["found"] / real[paths[i]]["photos"] for i in sel], float)
    out["spearman_real"] = {
        "n": len(sel),
        "rho": spearman(scores[sel], real_share) if sel else None,
        "ci95": spearman_ci(scores[sel], real_share) if sel else None,
    }
    out["bands"] = band_shares(scores, synth)
    out["retest"] = retest_figures(scores, synth, paths, cache.get("repeats"), images)
    out["scores"] = scores.tolist()
    return out


def retest_figures(
    scores: np.ndarray,
    synth: np.ndarray,
    paths: list[str],
    repeats: dict[str, dict[str, Any]] | None,
    sources: dict[str, str] | None = None,
) -> dict[str, Any] | None:
    """The found share's test-retest figures over the ``paths`` measured by every run (seed 0's ``synth`` and
    each repeated seed's in ``repeats``: seed -> path -> envelope entry); None without a repeat.

    - ``spearman_runs``: the mean Spearman correlation between two runs' shares (a single run's reliability);
    - ``reliability_mean``: that of the mean share over the ``k`` runs, by the Spearman-Brown formula
      ``k r / (1 + (k - 1) r)``;
    - ``spearman_score_runs``: the score's correlation with each run's share (by seed);
    - ``spearman_score_mean``: with the mean share over all runs (with a bootstrap 95% interval), and
      ``bands_mean``: the mean share per score band (:func:`band_shares`);
    - ``per_source`` (with ``sources``, for sources of :data:`MIN_SOURCE` images or more): the same two pairs."""
    if not repeats:
        return None
    seeds = sorted(repeats, key=int)

    def ok(p: str) -> bool:
        return all(p in repeats[s] and repeats[s][p].get("error") is None for s in seeds)

    sel = np.array([i for i, p in enumerate(paths) if ok(p)], int)
    again = [[repeats[seed][paths[i]]["found_share"] for i in sel] for seed in seeds]
    runs = np.array([synth[sel], *again], float).reshape(len(seeds) + 1, len(sel))
    s = np.asarray(scores, float)[sel]

    def figures(m: np.ndarray) -> dict[str, Any]:
        pairs = [spearman(runs[a][m], runs[b][m]) for a in range(len(runs)) for b in range(a + 1, len(runs))]
        r = float(np.mean(pairs)) if pairs and None not in pairs else None
        k = len(runs)
        return {
            "n": int(m.sum()),
            "spearman_runs": r,
            "reliability_mean": k * r / (1 + (k - 1) * r) if r is not None and r > -1 / (k - 1) else None,
            "spearman_score_mean": spearman(s[m], runs[:, m].mean(axis=0)),
        }

    everything = np.ones(len(sel), bool)
    out = {"seeds": [0, *(int(x) for x in seeds)], **figures(everything)}
    out["spearman_score_runs"] = {str(seed): spearman(s, run) for seed, run in zip(out["seeds"], runs, strict=True)}
    out["spearman_score_mean_ci95"] = spearman_ci(s, runs.mean(axis=0)) if len(sel) else None
    out["bands_mean"] = band_shares(s, runs.mean(axis=0))
    if sources is not None:
        src = np.array([sources[paths[i]] for i in sel])
        total = {x: list(sources.values()).count(x) for x in set(sources.values())}
        out["per_source"] = {x: figures(src == x) for x in sorted(set(src)) if total[x] >= MIN_SOURCE}
    return out


def draw_scatter(paths: list[str], images: dict[str, str], scores: list[float], cache: dict, title: str) -> np.ndarray:
    """Score (x, 0-100) against synthetic found share (y), one dot per image coloured by source."""
    W, H, m = 640, 440, 50
    img = np.full((H, W, 3), 255, np.uint8)
    x0, y0, x1, y1 = m, 30, W - 20, H - m
    cv2.rectangle(img, (x0, y0), (x1, y1), (0, 0, 0), 1)
    for t in (0, 40, 75, 100):
        x = int(x0 + (x1 - x0) * t / 100)
        cv2.line(img, (x, y1), (x, y1 + 5), (0, 0, 0), 1)
        cv2.putText(img, str(t), (x - 8, y1 + 20), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
        if t in (40, 75):
            cv2.line(img, (x, y0), (x, y1), (200, 200, 200), 1)
    for v in (0.0, 0.5, 0.9, 1.0):
        y = int(y1 - (y1 - y0) * v)
        cv2.putText(img, f"{v:.1f}", (8, y + 4), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    for p, s in zip(paths, scores, strict=True):
        share = cache["synthetic"][p]["found_share"]
        c = (int(x0 + (x1 - x0) * np.clip(s, 0, 100) / 100), int(y1 - (y1 - y0) * share))
        cv2.circle(img, c, 3, COLORS.get(images[p], (90, 90, 90)), -1, cv2.LINE_AA)
    cv2.putText(img, title, (x0, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (0, 0, 0), 1, cv2.LINE_AA)
    for i, (name, col) in enumerate(COLORS.items()):
        cv2.putText(img, name, (x0 + 5 + 105 * i, H - 8), cv2.FONT_HERSHEY_SIMPLEX, 0.45, col, 1, cv2.LINE_AA)
    cv2.putText(img, "score", (x1 - 40, y1 + 20), cv2.FONT_HERSHEY_SIMPLEX, 0.4, (0, 0, 0), 1, cv2.LINE_AA)
    return img


def _fmt(v: Any) -> str:
    return "-" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)


def _interval(ci: list[float] | None) -> str:
    return "-" if ci is None else f"{ci[0]:.2f}-{ci[1]:.2f}"


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Rating calibration (held-out half, {report['held_out']['n']} images)", ""]
    lines += [
        "| weights | Spearman synthetic (95% CI) | Spearman real (95% CI, n) | <40 found (n) | 40-75 found (n) "
        "| >=75 found (n) |"
    ]
    lines += ["| --- | --- | --- | --- | --- | --- |"]
    for key in ("shipped", "held_out"):
        r = report[key]
        b = r["bands"]
        lines.append(
            f"| {'shipped' if key == 'shipped' else 'fitted'} | {_fmt(r['spearman_synthetic'])} "
            f"({_interval(r.get('spearman_synthetic_ci95'))}) | {_fmt(r['spearman_real']['rho'])} "
            f"({_interval(r['spearman_real'].get('ci95'))}, {r['spearman_real']['n']}) | "
            + " | ".join(f"{_fmt(b[n]['found_share'])} ({b[n]['n']})" for n, _, _ in BANDS)
            + " |"
        )
    for key in ("shipped", "held_out"):
        rt = report[key].get("retest")
        if rt:
            lines += [
                "",
                f"Test-retest ({'shipped' if key == 'shipped' else 'fitted'} weights, envelope seeds "
                f"{', '.join(map(str, rt['seeds']))}, n {rt['n']}): Spearman between two runs' found shares "
                f"{_fmt(rt['spearman_runs'])} (reliability of their mean {_fmt(rt['reliability_mean'])}); score vs "
                + ", ".join(f"seed {k} {_fmt(v)}" for k, v in rt["spearman_score_runs"].items())
                + f"; vs the mean of all runs {_fmt(rt['spearman_score_mean'])} "
                f"({_interval(rt.get('spearman_score_mean_ci95'))}). Mean share over all runs per score band: "
                + ", ".join(f"{n} {_fmt(b['found_share'])} (n {b['n']})" for n, b in rt["bands_mean"].items())
                + ".",
            ]
            for src, r in rt.get("per_source", {}).items():
                lines.append(
                    f"- {src} (n {r['n']}): runs agree {_fmt(r['spearman_runs'])}, reliability of the mean "
                    f"{_fmt(r['reliability_mean'])}, score vs the mean {_fmt(r['spearman_score_mean'])}"
                )
    lines += ["", "| source | held-out n | Spearman synthetic (fitted) | mean score | mean found share |"]
    lines += ["| --- | --- | --- | --- | --- |"]
    for s, r in report["held_out"]["per_source"].items():
        lines.append(
            f"| {s} | {r['n']} | {_fmt(r['spearman_synthetic'])} | {r['mean_score']:.1f} "
            f"| {r['mean_found_share']:.2f} |"
        )
    from rating_real import markdown_real

    lines += markdown_real(report.get("real_photos", {}))
    lines += [
        "",
        "Fitted weights:",
        "",
        "```python",
        "WEIGHTS = " + pprint.pformat(report["weights"], sort_dicts=False),
        "```",
        "",
    ]
    return "\n".join(lines)


def fit_and_report(
    cache: dict[str, Any], images: dict[str, str], out: Path, root: Path, cache_path: Path | None = None
) -> int:
    """Measures, split, fit on the tuning half, report on the held-out half; JSON, markdown and a PNG in ``out``.
    The rating measures join ``cache``, saved to ``cache_path`` (default ``out/measures.json``)."""
    from objrec.fileio import atomic_write_json

    loaded = load_rating()
    if loaded is None:
        return 0
    rate, score_fn, weights = loaded
    done = [p for p in images if p in cache["synthetic"]]
    print(f"{len(done)} of {len(images)} images have a synthetic found share")
    rating_measures(rate, root, done, cache)
    atomic_write_json(cache_path or out / "measures.json", cache)
    tune, held = split_halves({p: images[p] for p in done})
    shares = np.array([cache["synthetic"][p]["found_share"] for p in tune], float)
    keys = free_keys(weights)
    print(f"fitting {keys} on {len(tune)} images; kept by rule: {[k for k in weights if k not in keys]}")
    fitted = fit_weights(score_fn, weights, [cache["measures"][p]["measures"] for p in tune], shares, keys)
    report = {
        "views": cache["views"],
        "tune": {"n": len(tune), **evaluate(score_fn, fitted, tune, images, cache)},
        "shipped": evaluate(score_fn, weights, held, images, cache),
        "held_out": evaluate(score_fn, fitted, held, images, cache),
        "weights": fitted,
        "fitted_keys": keys,
        "held_out_paths": held,
    }
    from rating_real import fit_and_report_real

    report["real_photos"] = fit_and_report_real(cache, root, tune)
    if report["real_photos"]:
        report["weights"] = {**fitted, **report["real_photos"]["solid_weights"]}
    atomic_write_json(cache_path or out / "measures.json", cache)
    atomic_write_json(out / "rating_report.json", report)
    (out / "rating_report.md").write_text(markdown(report))
    title = f"held-out {len(held)} images, fitted weights: Spearman {_fmt(report['held_out']['spearman_synthetic'])}"
    cv2.imwrite(str(out / "rating_scatter.png"), draw_scatter(held, images, report["held_out"]["scores"], cache, title))
    print(markdown(report))
    print(
        json.dumps(
            {k: report["held_out"][k] for k in ("spearman_synthetic", "spearman_real", "bands", "retest")}, indent=1
        )
    )
    print("Paste into objrec/rating/model.py:\nWEIGHTS = " + pprint.pformat(fitted, sort_dicts=False))
    print(f"wrote {out / 'rating_report.json'}, {out / 'rating_report.md'}, {out / 'rating_scatter.png'}")
    return 0
