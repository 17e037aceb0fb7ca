"""The report of ``bench_catalogue_sizes.py``: ``sizes.json``, ``sizes.md`` (markdown tables) and ``sizes.png``.

Built from the run's state alone (every stage measured so far), so it can be written after every stage and a
partial run still gives a partial report.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["memory_rows", "pass_rows", "stage_rows", "extrapolate", "write_report"]


def _get(d: dict, *keys, default=None):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


def _fmt(v, spec: str = "") -> str:
    return "-" if v is None else format(v, spec)


#: Columns of the per-size table: heading and the cells' (stage, field, format), joined by " / ".
MEMORY_COLUMNS = (
    ("enrol obj/s", (("enrol", "per_s", ".2f"),)),
    ("enrol CPU s/obj", (("enrol", "cpu_s_per_object", ".3f"),)),
    ("enrol MiB", (("enrol", "peak_rss_anon_mb", ".0f"),)),
    ("reindex s", (("reindex", "wall_s", ".1f"),)),
    ("reindex MiB", (("reindex", "peak_rss_anon_mb", ".0f"),)),
    ("recognise MiB (none / budget)", (("nobudget", "peak_rss_anon_mb", ".0f"), ("budget", "peak_rss_anon_mb", ".0f"))),
    ("KB per object", (("disk", "kb_per_object", ".1f"),)),
    ("open+ready s (cold / warm)", (("nobudget", "open_ready_cold_s", ".2f"), ("open", "open_ready_warm_s", ".2f"))),
)


def memory_rows(state: dict) -> list[str]:
    """One markdown row per size: enrolment rate, peak RssAnon per stage, disk per object, open + ready."""
    lines = ["| N | " + " | ".join(h for h, _ in MEMORY_COLUMNS) + " |", "| --- " * (len(MEMORY_COLUMNS) + 1) + "|"]
    for n, r in sorted(state["sizes"].items(), key=lambda kv: int(kv[0])):
        cells = [" / ".join(_fmt(_get(r, st, f), spec) for st, f, spec in cell) for _, cell in MEMORY_COLUMNS]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def pass_rows(state: dict, budget_ms: float) -> list[str]:
    """One markdown row per size, recognizer and pass: found, top-1, wrong, latency, late."""
    lines = [
        "| N | recognizer | cache | found | top-1 | photos with a wrong detection | p50 ms | p99 ms | max ms | late |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    labels = (
        ("nobudget", "objrec, no budget"),
        ("budget", f"objrec, {budget_ms:g} ms"),
        ("nobudget_limit", "objrec, no budget, warming bounded"),
        ("budget_limit", f"objrec, {budget_ms:g} ms, warming bounded"),
        ("anchor", "anchor"),
        ("without", "objrec, no budget, covers 001-050 removed"),
    )
    for n, r in sorted(state["sizes"].items(), key=lambda kv: int(kv[0])):
        for key, label in labels:
            for cache in ("cold", "warm"):
                s = _get(r, key, cache)
                if not s:
                    continue
                lat = s["latency_ms"]
                clock = " (CPU clock)" if _get(r, key, "clock") == "cpu" else ""
                limit = _get(r, key, "warm_limit_bytes")
                if limit is not None:
                    clock += f" to {limit / 2**30:g} GiB of {_get(r, key, 'database_bytes', default=0) / 2**30:.1f} GiB"
                lines.append(
                    f"| {n} | {label}{clock} | {cache} | {s['found']}/{s['photos']} ({100 * s['found_fraction']:.1f}%) "
                    f"| {s['top1']} | {s['photos_with_wrong']} | {lat['p50']:.1f} | {lat['p99']:.1f} "
                    f"| {lat['max']:.1f} | {_fmt(s['late'])} |"
                )
    return lines


#: The stages whose wall time the report lists, in the order they run.
TIMED_STAGES = ("enrol", "reindex", "nobudget", "budget", "nobudget_limit", "budget_limit", "open", "anchor", "without")


def stage_rows(state: dict) -> list[str]:
    """One markdown row per size: the wall time of each stage (its child process, start to end) and their sum."""
    heads = ["generate s"] + [f"{k} s" for k in TIMED_STAGES]
    lines = ["| N | " + " | ".join(heads) + " | total s |", "| --- " * (len(heads) + 2) + "|"]
    for n, r in sorted(state["sizes"].items(), key=lambda kv: int(kv[0])):
        walls = [_get(r, "enrol", "generate_s")] + [_get(r, k, "wall_s") for k in TIMED_STAGES]
        total = sum(w for w in walls if w is not None)
        lines.append(f"| {n} | " + " | ".join(_fmt(w, ".0f") for w in walls) + f" | {total:.0f} |")
    return lines


def extrapolate(state: dict, target: int = 100_000) -> dict | None:
    """Hours to enrol ``target`` objects at the largest measured size's rate: at its wall-clock rate, and from
    its CPU seconds per object on one core given wholly to enrolment (the figure to use when the run shared its
    core with other work); the seconds of that size's other stages, and its index build's seconds per object
    (a whole rebuild at the target size, if the build time grows in proportion)."""
    done = [(int(n), r) for n, r in state["sizes"].items() if _get(r, "enrol", "per_s")]
    if not done:
        return None
    n, r = max(done, key=lambda t: t[0])
    rate, cpu = r["enrol"]["per_s"], r["enrol"].get("cpu_s_per_object")
    passes = sum(_get(r, k, "wall_s", default=0) for k in ("reindex", "nobudget", "budget", "open"))
    return {
        "from_size": n,
        "enrol_per_s": rate,
        "enrol_hours_to_target": round((target - n) / rate / 3600, 2),
        "enrol_hours_from_empty": round(target / rate / 3600, 2),
        "enrol_cpu_hours_one_core": round(target * cpu / 3600, 2) if cpu else None,
        "other_stages_s_at_from_size": round(passes, 1),
        "reindex_s_per_object": round(_get(r, "reindex", "wall_s", default=0) / n, 4),
        "target": target,
    }


def r_last(state: dict, ext: dict) -> dict:
    """The row of the size an extrapolation starts from."""
    return state["sizes"][str(ext["from_size"])]


def write_report(out: Path, state: dict, budget_ms: float) -> None:
    """``sizes.json`` (the state plus the extrapolation), ``sizes.md`` and ``sizes.png`` in ``out``."""
    ext = extrapolate(state)
    (out / "sizes.json").write_text(json.dumps({**state, "extrapolation": ext}, indent=1))
    lines = ["# Catalogue sizes", "", "Commands:", ""] + [f"    {a}" for a in state["argv"]] + [""]
    threads = next((_get(r, "nobudget", "threads") for r in state["sizes"].values() if _get(r, "nobudget")), None)
    if threads:
        lines += [f"Threads of the recognising process: `{json.dumps(threads)}`", ""]
    lines += memory_rows(state) + [""] + pass_rows(state, budget_ms) + [""]
    lines += ["Wall time per stage (generate: writing the generated distractors' images before enrolment):", ""]
    lines += stage_rows(state) + [""]
    if ext:
        lines.append(
            f"At the enrolment rate measured at N={ext['from_size']} ({ext['enrol_per_s']:.2f} objects/s), "
            f"{ext['target']:,} objects take {ext['enrol_hours_from_empty']:.1f} h of enrolment from empty "
            f"({ext['enrol_hours_to_target']:.1f} h from this size); at its CPU time per object "
            f"({_fmt(_get(r_last(state, ext), 'enrol', 'cpu_s_per_object'), '.3f')} s), "
            f"{_fmt(ext['enrol_cpu_hours_one_core'], '.1f')} h on one core of its own."
        )
        mix = _get(r_last(state, ext), "enrol", "sources") or {}
        if mix and mix.get("gen", 0) < sum(mix.values()) / 2:
            lines.append(
                f"That increment was mostly real distractors ({', '.join(f'{k} {v}' for k, v in mix.items())}); "
                "generated objects, most of a 100,000 catalogue, are larger images: measure a size past 5,000 "
                "for a rate that holds for them."
            )
    (out / "sizes.md").write_text("\n".join(lines) + "\n")
    plot(state, out / "sizes.png", budget_ms)


def plot(state: dict, path: Path, budget_ms: float) -> None:
    """Found and p99 latency per size for each recognizer and pass; peak RssAnon per stage per size."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rows = sorted(((int(n), r) for n, r in state["sizes"].items()), key=lambda t: t[0])
    fig, ax = plt.subplots(1, 3, figsize=(16, 4.4))
    series = (
        ("nobudget", "no budget"),
        ("budget", f"{budget_ms:g} ms"),
        ("nobudget_limit", "no budget, bounded warming"),
        ("budget_limit", f"{budget_ms:g} ms, bounded warming"),
        ("anchor", "anchor"),
    )
    for key, label in series:
        for cache, style in (("cold", "o--"), ("warm", "s-")):
            pts = [(n, r[key][cache]) for n, r in rows if _get(r, key, cache)]
            if pts:
                ax[0].plot(
                    [p[0] for p in pts], [100 * p[1]["found_fraction"] for p in pts], style, label=f"{label} {cache}"
                )
                ax[1].plot(
                    [p[0] for p in pts], [p[1]["latency_ms"]["p99"] for p in pts], style, label=f"{label} {cache}"
                )
    for key, label in (("enrol", "enrolment"), ("reindex", "index build"), ("nobudget", "recognition")):
        pts = [(n, r[key]["peak_rss_anon_mb"]) for n, r in rows if _get(r, key, "peak_rss_anon_mb") is not None]
        if pts:
            ax[2].plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=label)
    ax[1].axhline(budget_ms, color="grey", lw=0.8)
    ax[1].set_yscale("log")
    titles = ("found (% of photos)", "p99 latency (ms)", "peak RssAnon (MiB)")
    for a, title in zip(ax, titles, strict=True):
        a.set_xscale("log")
        a.set_xlabel("enrolled objects")
        a.set_title(title)
        if a.get_legend_handles_labels()[0]:  # a report written before any recognition stage has no curves yet
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
