"""Corner smoothing: lag on real footage against jitter on a still corner, for the filter settings tried.

The raw corners of the ``real_video`` clips (``objrec eval video:`` with ``objrec-plain``: tracking, no budget,
so the same on any machine) are replayed through :class:`objrec.realtime.smoothing.OneEuroFilter` with each
setting, at the clips' own timestamps. Lag shows as the median alignment error of the smoothed corners against
the ground truth, beside the raw corners' own; jitter as the share of a still corner's white noise (1 px at
30 fps, 300 frames) the filter lets through. ``visp_postcard`` is the tuning clip, the others are held out.
Writes ``smoothing.json``, ``smoothing.md`` and ``smoothing.png`` (lag against jitter) into ``--out``.

    python bench/smoothing_study.py --out /tmp/smoothing [--records DIR/records.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

import numpy as np

from objrec.metrics.alignment import alignment_error
from objrec.realtime.smoothing import OneEuroFilter, SmoothParams

TUNING_CLIP = "visp_postcard"
#: The settings tried: (label, parameters). The first is the classic One-Euro filter.
SETTINGS = [
    ("classic 1 Hz, beta 0.05", SmoothParams(1.0, 0.05, 1.0, predict=False, deadband=0.0)),
    ("classic 1 Hz, beta 0.2", SmoothParams(1.0, 0.2, 1.0, predict=False, deadband=0.0)),
    ("classic 1 Hz, beta 0.5", SmoothParams(1.0, 0.5, 1.0, predict=False, deadband=0.0)),
    ("classic 1 Hz, beta 1", SmoothParams(1.0, 1.0, 1.0, predict=False, deadband=0.0)),
    ("classic 3 Hz, beta 0.3", SmoothParams(3.0, 0.3, 1.0, predict=False, deadband=0.0)),
    ("predict, beta 0.05, no dead band", SmoothParams(1.0, 0.05, 1.0, predict=True, deadband=0.0)),
    ("predict, beta 0.2, no dead band", SmoothParams(1.0, 0.2, 1.0, predict=True, deadband=0.0)),
    ("predict, beta 0.2, dead band 10", SmoothParams(1.0, 0.2, 1.0, predict=True, deadband=10.0)),
    ("predict, beta 0.5, dead band 10", SmoothParams(1.0, 0.5, 1.0, predict=True, deadband=10.0)),
    ("predict, beta 1, dead band 10", SmoothParams(1.0, 1.0, 1.0, predict=True, deadband=10.0)),
    ("predict, beta 1, dead band 15", SmoothParams(1.0, 1.0, 1.0, predict=True, deadband=15.0)),
    ("predict, beta 1, dead band 20", SmoothParams(1.0, 1.0, 1.0, predict=True, deadband=20.0)),
    ("predict, beta 0.5, dead band 20", SmoothParams(1.0, 0.5, 1.0, predict=True, deadband=20.0)),
    ("predict, beta 2, dead band 20", SmoothParams(1.0, 2.0, 1.0, predict=True, deadband=20.0)),
]


def raw_records(data: Path, out: Path, records: Path | None) -> list[dict]:
    """The ``video_clip`` records of ``objrec-plain`` on ``real_video`` (run here unless given)."""
    if records is None:
        from objrec.evaluation.config import EvalConfig
        from objrec.evaluation.runner import run_evaluation

        cfg = EvalConfig(kind="video", path=str(data / "real_video"), out=str(out / "eval"),
                         detectors=["objrec-plain"], plots=False)  # fmt: skip
        run_evaluation(cfg)
        records = out / "eval" / "records.jsonl"
    return [json.loads(line) for line in records.read_text().splitlines() if line.strip()]


def clip_lag(record: dict, params: SmoothParams | None) -> float:
    """Median alignment error of one clip's raw corners replayed through the filter (raw with None)."""
    f = OneEuroFilter(params) if params is not None else None
    errs = []
    for fr, gt in zip(record["result"]["frames"], record["result"]["gt"], strict=False):
        raw = fr["raw_corners"]
        if raw is None:
            if f is not None:
                f.reset()
            c = None
        else:
            c = f(np.asarray(raw, np.float64), fr["t_ms"]) if f is not None else np.asarray(raw)
        if gt is not None:
            errs.append(alignment_error(c, np.asarray(gt)))
    e = np.asarray(errs)
    return float(np.median(e[np.isfinite(e)]))


def noise_share(params: SmoothParams, sigma: float = 1.0, fps: float = 30.0, n: int = 300) -> float:
    """Mean distance of a still corner's filtered positions from their mean, over the raw ones' (white noise of
    ``sigma`` px per coordinate, the first second left out)."""
    rng = np.random.default_rng(0)
    raw = rng.uniform(0, 600, (4, 2)) + rng.normal(0.0, sigma, (n, 4, 2))
    f = OneEuroFilter(params)
    out = np.array([f(x, k * 1000.0 / fps) for k, x in enumerate(raw)])

    def spread(a: np.ndarray) -> float:
        return float(np.linalg.norm(a - a.mean(axis=0), axis=-1).mean())

    skip = int(fps)
    return spread(out[skip:]) / spread(raw[skip:])


def plot(rows: list[dict], clips: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    default = SmoothParams()
    fig, ax = plt.subplots(figsize=(8, 5))
    for j, clip in enumerate(clips):
        xs = [r["noise_share"] for r in rows]
        ys = [r["lag"][clip] for r in rows]
        ax.scatter(xs, ys, color=f"C{j}", label=f"{clip}{' (tuning)' if clip == TUNING_CLIP else ''}")
        ax.axhline(rows[0]["raw"][clip], color=f"C{j}", ls=":", lw=1)
        for r in rows:
            if r["params"] == default.__dict__:
                ax.scatter([r["noise_share"]], [r["lag"][clip]], s=160, facecolors="none", edgecolors="k")
    for r in rows:
        ax.annotate(r["label"], (r["noise_share"], r["lag"][TUNING_CLIP]), fontsize=6, alpha=0.7)
    ax.set(
        xlabel="share of a still corner's noise let through (1 px at 30 fps)",
        ylabel="median alignment error of the smoothed corners (px)",
        title="corner smoothing: lag on real footage against jitter (dotted: raw corners; circled: default)",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parents[1]
    ap.add_argument(
        "--data", type=Path, default=Path(os.environ.get("OBJREC_SHARED_DATA", here.parent / "shared" / "data"))
    )
    ap.add_argument("--records", type=Path, help="records.jsonl of an objrec-plain video run (default: run one)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    print("command:", shlex.join([sys.executable, *sys.argv]))
    args.out.mkdir(parents=True, exist_ok=True)
    records = raw_records(args.data, args.out, args.records)
    clips = sorted((r["meta"]["clip"] for r in records), key=lambda c: (c != TUNING_CLIP, c))
    by_clip = {r["meta"]["clip"]: r for r in records}
    rows = []
    for label, p in SETTINGS:
        rows.append({
            "label": label,
            "params": p.__dict__,
            "noise_share": round(noise_share(p), 4),
            "lag": {c: round(clip_lag(by_clip[c], p), 4) for c in clips},
            "raw": {c: round(clip_lag(by_clip[c], None), 4) for c in clips},
        })  # fmt: skip
    (args.out / "smoothing.json").write_text(json.dumps(rows, indent=1))
    head = "| setting | noise let through | " + " | ".join(f"{c} median e_AL (raw)" for c in clips) + " |"
    lines = [head, "|" + " --- |" * (2 + len(clips))]
    for r in rows:
        cells = " | ".join(f"{r['lag'][c]:.3f} ({r['raw'][c]:.3f})" for c in clips)
        lines.append(f"| {r['label']} | {r['noise_share']:.3f} | {cells} |")
    (args.out / "smoothing.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, clips, args.out / "smoothing.png")
    print(f"wrote {args.out / 'smoothing.json'}, smoothing.md, smoothing.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
