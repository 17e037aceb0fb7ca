"""Assembling ``report.json`` from the records and rendering ``report.md``, ``report.html`` and PNG plots.

Each kind's plug-in (:mod:`objrec.evaluation.kinds`) summarises its records into its section, renders its
tables and draws its plots; this module adds what every report has (dataset, configuration, detectors, run,
environment, notes, the file and schema description). Aggregates are computed from the records in task order,
never in completion order, so a run on a Dask cluster gives the same numbers as a single-process run (timings
aside).
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from objrec.evaluation.config import EvalConfig
from objrec.evaluation.document import ReportDoc
from objrec.evaluation.kinds import SECTIONS, kind_named

__all__ = ["SCHEMA", "build_report", "write_reports", "numbers_only"]

SCHEMA = "objrec-eval/1"


def _environment() -> dict[str, Any]:
    import cv2

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "opencv": cv2.__version__,
        "numpy": np.__version__,
        "opencv_threads": cv2.getNumThreads(),
    }


def build_report(
    cfg: EvalConfig,
    status: dict[str, dict[str, Any]],
    tasks: list[dict[str, Any]],
    records: list[dict[str, Any]],
    run: dict[str, Any],
) -> dict[str, Any]:
    """The ``report.json`` document (schema in :mod:`objrec.evaluation`).
    ``cfg``: the evaluation's settings; ``status``: each detector's availability; ``tasks``: the tasks run; ``records``:
    their records; ``run``: how they ran (:func:`~objrec.evaluation.runner.execute`'s result)."""
    from objrec import __version__

    detectors = list(status)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "objrec_version": __version__,
        "dataset": {"kind": cfg.kind, "path": cfg.path},
        "config": cfg.to_json(),
        "detectors": status,
        **dict.fromkeys(SECTIONS),
        "run": {**run, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "environment": _environment(),
        "notes": list(cfg.notes),
    }
    for name, s in status.items():
        if not s["available"]:
            report["notes"].append(f"{name}: not evaluated ({s['note']})")
    kind = kind_named(cfg.kind)
    report[kind.section] = kind.summarise(records, detectors, cfg.budget_ms)
    if run.get("workers", 1) and run.get("workers", 1) > 1:
        report["notes"].append(
            f"timings measured with {run['workers']} workers running side by side on {os.cpu_count()} CPU(s): "
            "they compete for cores and memory bandwidth"
        )
    return report


_TIMING_KEYS = (
    "time_ms",
    "detect_ms",
    "latency_ms",
    "timings_ms",
    "deadline_met",
    "deadline_met_fraction",
    "detect_within_budget",
    "elapsed_s",
    "stage_ms_mean",
    "deadline_misses",
)


def numbers_only(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a report that must not depend on how it was run: dataset, detectors and the kinds'
    sections, without timing fields (for comparing a Dask run with a single-process one)."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in _TIMING_KEYS}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip({k: report.get(k) for k in ("dataset", "detectors", *SECTIONS)})


def _render_header(doc: ReportDoc, report: dict[str, Any], plot_note: str | None) -> None:
    """Add the title, the run line, the detector table and the notes to ``doc``.

    ``doc`` is the document being built; the other arguments are parts of the report.
    """
    ds = report["dataset"]
    doc.h(1, f"objrec eval: {ds['kind']}:{ds['path']}")
    run = report["run"]
    doc.p(
        f"objrec {report['objrec_version']}, {run['tasks']} tasks ({run['ran']} run now, {run['resumed']} from "
        f"earlier records), {run['mode']}, {run['workers']} worker(s), wall time {run['wall_s']:.1f} s. "
        f"OpenCV {report['environment']['opencv']}, {report['environment']['cpu_count']} CPU(s)."
    )
    doc.h(2, "Detectors")
    doc.table(
        ["detector", "evaluated", "note"], [[n, s["available"], s["note"]] for n, s in report["detectors"].items()]
    )
    for n in report["notes"]:
        doc.p("Note: " + n)
    if plot_note:
        doc.p("Note: " + plot_note)


def _render_files(doc: ReportDoc, plots: list[tuple[str, str]]) -> None:
    """Add the plots (if any) and the file and ``report.json`` schema description to ``doc``.

    ``doc`` is the document being built; the other arguments are parts of the report.
    """
    if plots:
        doc.h(2, "Plots")
        for path, caption in plots:
            doc.img(path, caption)
    doc.h(2, "Files and schema")
    import objrec.evaluation as ev

    schema = ev.__doc__.split("report.json schema", 1)[-1].lstrip("\n") if ev.__doc__ else ""
    doc.pre(schema.split("\n", 1)[-1] if schema.startswith("---") else schema)


def _render(report: dict[str, Any], plots: list[tuple[str, str]], plot_note: str | None) -> ReportDoc:
    """The document of ``report.md`` and ``report.html``, one section after the other.

    Parameters
    ----------
    report : dict
        The report (:func:`build_report`).
    plots : list of (str, str)
        Relative PNG path and caption of each plot.
    plot_note : str or None
        A note on the plots, added after the report's own notes.

    Returns
    -------
    ReportDoc
        The rendered document.
    """
    doc = ReportDoc()
    _render_header(doc, report, plot_note)
    kind = kind_named(report["dataset"]["kind"])
    if report.get(kind.section) is not None:
        kind.render(doc, report[kind.section], report["config"].get("budget_ms"))
    _render_files(doc, plots)
    return doc


def write_reports(report: dict[str, Any], out: str | os.PathLike, plots: bool = True) -> list[str]:
    """Write ``report.json``, the PNG plots, ``report.md`` and ``report.html`` into ``out`` (atomically).
    ``report``: the report document (:func:`build_report`); ``plots``: draw the PNG plots."""
    from objrec.fileio import atomic_write_bytes

    out = Path(out)
    made: list[tuple[str, str]] = []
    note = None
    if plots:
        try:
            import matplotlib

            matplotlib.use("Agg", force=True)
            import matplotlib.pyplot as plt
        except ImportError:
            note = "matplotlib is not installed (pip install 'objrec[plot]'): no plots"
        else:
            (out / "plots").mkdir(exist_ok=True)
            made = kind_named(report["dataset"]["kind"]).plot(report, out, plt)
    else:
        note = "plots turned off (--no-plots)"
    report["plots"] = [p for p, _ in made]
    if note:
        report["notes"].append(note)
    atomic_write_bytes(out / "report.json", (json.dumps(report, indent=1, allow_nan=False) + "\n").encode())
    doc = _render(report, made, None)
    atomic_write_bytes(out / "report.md", doc.markdown().encode())
    atomic_write_bytes(out / "report.html", doc.html(f"objrec eval {report['dataset']['kind']}").encode())
    return ["report.json", "report.md", "report.html"] + report["plots"]
