"""The whole-system scorecard: every capability measured in one run, in a quick fixed form, on real data.

Each entry (``bench/scorecard_entries.py``) runs in its own process; its peak anonymous memory (``RssAnon``
sampled from ``/proc``) joins its figures. The run writes ``scorecard.json`` (every figure with its unit,
direction, spread, split, source and kind) and ``scorecard.md`` into ``--out``. ``--runs N`` repeats every entry N
times and stores each figure's median and range (the spread); ``--compare`` prints each figure beside
``bench/scorecard_baseline.json`` and flags those worse than their spread (exit code 1 when a gated figure is);
``--write-baseline`` writes the run as the new baseline (a commit of its own, saying which figure moved and why).

    python bench/scorecard.py --out /tmp/scorecard [--entries smvs,pairs] [--subset ci] [--runs 5]
        [--compare [FILE]] [--gate] [--write-baseline] [--from SCORECARD.json]

``--cover-machine SCORECARD.json`` widens the baseline's gated spreads to what that scorecard, measured on another
machine, found worse (:func:`scorecard_core.cover_machine`), and keeps that machine's facts beside the baseline's
(a commit of its own, as for ``--write-baseline``).

``--from`` compares a scorecard measured before (``--compare`` writes ``compare.txt`` and ``compare.png``: each
figure's change in units of its spread) without measuring anything.

``--subset ci`` is the entries whose figures do not depend on the machine's speed: what ``scripts/test`` gates.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from machine import describe, machine_facts, speed_notes  # noqa: E402
from procmem import run_sampled  # noqa: E402
from scorecard_core import (  # noqa: E402
    Figure,
    combine_runs,
    compare,
    cover_machine,
    load_figures,
    render_comparison,
    render_markdown,
)
from scorecard_entries import CI_ENTRIES, DEFAULT_ENTRIES, ENTRIES, Context, run_entry  # noqa: E402

BASELINE = HERE / "scorecard_baseline.json"
#: The order in which entries run: those whose results later entries read first.
ORDER = ["smvs", "ukbench", "rating"]


def shared_data(arg: str | None) -> Path | None:
    cands = [Path(arg)] if arg else []
    if os.environ.get("OBJREC_SHARED_DATA"):
        cands.append(Path(os.environ["OBJREC_SHARED_DATA"]))
    cands += [p / "shared" / "data" for p in HERE.parents]
    return next((c for c in cands if (c / "smvs_dvd").is_dir()), None)


def ordered(names: list[str]) -> list[str]:
    unknown = [n for n in names if n not in ENTRIES]
    if unknown:
        raise SystemExit(f"--entries: unknown {unknown}; expected some of {list(ENTRIES)}")
    if "rating" in names:  # it reads what smvs and ukbench found
        names = list(dict.fromkeys([*[n for n in ORDER if n in ENTRIES], *names]))
    first = [n for n in ORDER if n in names]
    return first + [n for n in names if n not in first]


def run_child(name: str, ctx: Context, log: Path) -> dict:
    """One entry in its own process; its figures, wall and CPU seconds, and peak anonymous memory."""
    result = ctx.work / f"{name}.result.json"
    result.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--data",
        str(ctx.data),
        "--work",
        str(ctx.work),
        "--out",
        str(ctx.out),
        "--seed",
        str(ctx.seed),
    ]
    s = run_sampled(cmd, log=log)
    if s.returncode != 0 or not result.exists():
        tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
        raise RuntimeError(f"scorecard entry {name!r} failed (exit {s.returncode}); its log {log}:\n{tail}")
    doc = json.loads(result.read_text())
    doc["peak_mb"] = s.peak_rss_anon_mb
    return doc


def measure(names: list[str], ctx: Context, runs: int, progress: bool = True) -> tuple[dict[str, Figure], dict]:
    """Every entry ``runs`` times: the combined figures (median, range) and each entry's wall seconds."""
    per_run: list[dict[str, Figure]] = []
    walls: dict[str, list[float]] = {}
    failed: list[str] = []
    for k in range(runs):
        figs: dict[str, Figure] = {}
        # Each run starts from an empty work folder: a database a run enrols is part of what it measures.
        run_ctx = dataclasses.replace(ctx, work=ctx.work / f"run{k + 1}")
        run_ctx.work.mkdir(parents=True, exist_ok=True)
        for name in names:
            t0 = time.perf_counter()
            if progress:
                print(f"[{k + 1}/{runs}] {name}: {ENTRIES[name].about} ...", flush=True)
            try:
                doc = run_child(name, run_ctx, ctx.out / "logs" / f"{name}.{k}.log")
            except RuntimeError as e:  # its figures go missing, and a comparison flags them
                print(e, file=sys.stderr, flush=True)
                failed.append(name)
                continue
            walls.setdefault(name, []).append(time.perf_counter() - t0)
            for fname, d in doc["figures"].items():
                figs[fname] = Figure.from_json(d)
            figs[f"{name}.peak_memory"] = Figure(
                doc["peak_mb"],
                "MB",
                "lower",
                "tuning",
                "process",
                "memory",
                floor=5.0,
                note="peak RssAnon of the entry's process",
            )
            if progress:
                print(
                    f"      {len(doc['figures'])} figures in {walls[name][-1]:.0f} s, peak {doc['peak_mb']:.0f} MB",
                    flush=True,
                )
        per_run.append(figs)
    if failed:
        print(f"entries that failed: {sorted(set(failed))}", file=sys.stderr)
    return combine_runs(per_run), walls


def header(names: list[str], runs: int, walls: dict, facts: dict) -> list[str]:
    total = sum(sum(v) for v in walls.values())
    return [
        "# objrec scorecard",
        "",
        f"command: `{shlex.join([sys.executable, *sys.argv])}`",
        f"machine: {platform.machine()}, {describe(facts)}",
        f"runs per entry: {runs}; wall time {total / 60:.1f} min "
        + "("
        + ", ".join(f"{n} {sum(walls[n]):.0f} s" for n in names if n in walls)
        + ")",
        "",
        "Spread: the range over the runs (at least 1 for counts, a floor for shares); split: whether the data "
        "was used to tune (`tuning`) or kept out (`held_out`); gated: CI fails when the figure drops beyond its "
        "spread (figures that do not depend on the machine's speed).",
    ]


def write(out: Path, figures: dict[str, Figure], names: list[str], runs: int, walls: dict, facts: dict) -> None:
    from objrec.fileio import atomic_write_json

    doc = {
        "machine": facts,
        "entries": names,
        "runs": runs,
        "wall_s": {n: v for n, v in walls.items()},
        "figures": {n: f.to_json() for n, f in figures.items()},
    }
    atomic_write_json(out / "scorecard.json", doc)
    (out / "scorecard.md").write_text(render_markdown(figures, header(names, runs, walls, facts)))


def plot_comparison(rows: list, path: Path, baseline: str) -> None:
    """Each figure's change from its baseline in units of its spread (better to the right), one bar per figure
    with a baseline, coloured by its flag; the band of +-1 spread shaded. Skipped without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    shown = [c for c in rows if c.value is not None and c.baseline is not None and c.figure is not None]
    if not shown:
        return
    z = []
    for c in shown:
        delta = c.value - c.baseline if c.figure.better == "higher" else c.baseline - c.value
        z.append(delta / c.spread if c.spread > 0 else 0.0)
    colour = {"worse": "tab:red", "better": "tab:green"}
    fig, ax = plt.subplots(figsize=(9, max(3.0, 0.16 * len(shown) + 1)))
    ys = range(len(shown))
    ax.barh(list(ys), z, color=[colour.get(c.flag, "0.6") for c in shown])
    ax.axvspan(-1, 1, color="0.9", zorder=0)
    ax.set_yticks(list(ys), [c.name + ("" if c.gated else " *") for c in shown], fontsize=6)
    ax.invert_yaxis()
    ax.set(xlabel="change from the baseline in spreads (right: better)", title=f"scorecard against {baseline} "
           "(* not gated)")  # fmt: skip
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="where scorecard.json, scorecard.md, logs and pictures go")
    ap.add_argument("--entries", help=f"comma list of entries (default: all): {', '.join(ENTRIES)}")
    ap.add_argument("--subset", choices=["all", "ci"], default="all", help="ci: the untimed entries CI gates")
    ap.add_argument("--runs", type=int, default=1, help="runs of every entry (the spread is their range)")
    ap.add_argument("--compare", nargs="?", const=str(BASELINE), help="compare with a baseline (default: %(const)s)")
    ap.add_argument("--gate", action="store_true", help="exit 1 when a gated figure is worse than the baseline")
    ap.add_argument("--write-baseline", action="store_true", help=f"write this run's figures to {BASELINE.name}")
    ap.add_argument("--work", type=Path, help="work folder for databases (default: a temporary one)")
    ap.add_argument("--data", help="the shared data folder (default: OBJREC_SHARED_DATA or ../shared/data)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--from", dest="from_json", metavar="SCORECARD.json", help="compare this scorecard, measure nothing"
    )
    ap.add_argument(
        "--cover-machine",
        metavar="SCORECARD.json",
        help="widen the baseline's gated spreads to what this scorecard, run on another machine, found worse",
    )
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs: expected at least 1, got {args.runs}")
    if args.child is None and args.out is None and args.cover_machine is None:
        ap.error("--out is required")
    return args


def compare_with(args: argparse.Namespace, figures: dict[str, Figure], names: list[str], facts: Any) -> int:
    """``--compare``: every figure beside the baseline's, with notes where the machines differ, in ``compare.txt``
    and ``compare.png``; 1 when ``--gate`` and a gated figure is worse, else 0."""
    rc = 0
    if args.compare:
        rows = compare(figures, load_figures(args.compare), names or None)
        before = json.loads(Path(args.compare).read_text(encoding="utf-8")).get("machine")
        notes = speed_notes(facts, before)
        text = "".join(f"note: {n}\n" for n in notes) + render_comparison(rows)
        (args.out / "compare.txt").write_text(text)
        plot_comparison(rows, args.out / "compare.png", Path(args.compare).name)
        print(text)
        print(f"wrote {args.out / 'compare.txt'}, {args.out / 'compare.png'}")
        failed = [c.name for c in rows if c.gated and c.failed]
        if failed and args.gate:
            print(f"gated figures worse than the baseline: {failed}", file=sys.stderr)
            rc = 1
    return rc


def save_baseline(base: dict) -> None:
    """Rewrite ``scorecard_baseline.json`` atomically, in its own layout (keys in order, one space per level), so
    that a commit that moves the baseline shows only what moved."""
    from objrec.fileio import atomic_write_bytes

    atomic_write_bytes(BASELINE, (json.dumps(base, indent=1) + "\n").encode())


def with_figures(base: dict, figures: dict[str, Figure], facts: Any) -> dict:
    """The baseline document ``base`` with ``figures`` (this run's) written in and this run's machine ``facts``.
    A gated figure whose spread was widened to cover another machine (``other_machines``) keeps at least that
    spread: the difference between the machines' floating point is the figure's, not one run's."""
    covered = {n for m in base.get("other_machines", []) for n in m.get("widened", [])}
    out = dict(base.get("figures", {}))
    for name, fig in figures.items():
        d = fig.to_json()
        old = out.get(name)
        if name in covered and old is not None and d.get("gated") and old.get("spread", 0.0) > d["spread"]:
            d["spread"] = old["spread"]
            d["note"] = "; ".join(x for x in (d.get("note"), "spread kept from other_machines") if x)
        out[name] = d
    return {**base, "figures": out, "machine": facts}


def cover_other_machine(path: Path) -> int:
    """``--cover-machine``: the baseline's gated spreads widened to what the scorecard at ``path`` found worse, its
    machine's facts added to the baseline's ``other_machines``; the baseline is rewritten atomically."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    facts = doc.get("machine")
    base = json.loads(BASELINE.read_text(encoding="utf-8"))
    figures = load_figures(BASELINE)
    others = base.setdefault("other_machines", [])
    cpu = facts.get("cpu", "unknown CPU") if isinstance(facts, dict) else "unknown CPU"
    widened = cover_machine(figures, load_figures(path), f"other_machines[{len(others)}], {cpu}")
    for name in widened:  # (the other figures' entries stay as they are, byte for byte)
        base["figures"][name].update(spread=figures[name].spread, note=figures[name].note)
    others.append({"machine": facts, "widened": widened})
    save_baseline(base)
    print(f"widened {len(widened)} gated spreads of {BASELINE.name}: {', '.join(widened) or 'none'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.cover_machine:
        return cover_other_machine(Path(args.cover_machine))
    data = shared_data(args.data)
    if data is None and not args.from_json:
        print(
            "shared data (../shared/data with smvs_dvd/) not found; pass --data or set OBJREC_SHARED_DATA",
            file=sys.stderr,
        )
        return 2
    if args.child:
        assert data is not None
        ctx = Context(data=data, work=args.work, out=args.out, seed=args.seed)
        doc = run_entry(args.child, ctx)
        (args.work / f"{args.child}.result.json").write_text(json.dumps(doc))
        return 0
    names = CI_ENTRIES if args.subset == "ci" else DEFAULT_ENTRIES
    if args.entries:
        names = [n.strip() for n in args.entries.split(",") if n.strip()]
    names = ordered(names)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "logs").mkdir(exist_ok=True)
    print("command:", shlex.join([sys.executable, *sys.argv]), flush=True)
    if args.from_json:  # compare (and plot) a scorecard measured before, measuring nothing
        doc = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        figures, names = load_figures(args.from_json), list(doc.get("entries", []))
        facts = doc.get("machine")
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix="objrec-scorecard-"))
        work.mkdir(parents=True, exist_ok=True)
        assert data is not None
        ctx = Context(data=data, work=work.resolve(), out=args.out.resolve(), seed=args.seed)
        facts = machine_facts(data)
        try:
            figures, walls = measure(names, ctx, args.runs)
        finally:
            if args.work is None:
                shutil.rmtree(work, ignore_errors=True)
        write(args.out, figures, names, args.runs, walls, facts)
        print((args.out / "scorecard.md").read_text())
    rc = compare_with(args, figures, names, facts)
    if args.write_baseline:
        base = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"figures": {}}
        save_baseline(with_figures(base, figures, facts))
        print(f"wrote {BASELINE}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
