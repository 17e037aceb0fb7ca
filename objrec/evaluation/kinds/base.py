"""The plug-in contract of an evaluation kind (``KIND`` of ``objrec eval KIND:PATH``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from objrec.evaluation.config import EvalConfig
    from objrec.evaluation.document import ReportDoc

__all__ = ["EvalKind"]


@dataclass(frozen=True)
class EvalKind:
    """How one kind of evaluation builds and runs its tasks and writes its part of the report.

    Attributes
    ----------
    name : str
        The ``KIND`` of ``KIND:PATH``.
    section : str
        The key of ``report.json`` that holds this kind's results (kinds that share one share its layout).
    task_type : str
        The ``type`` of its task specs and records.
    build : callable
        ``build(cfg) -> (tasks, status)``: the task specs (with their ids) of an
        :class:`~objrec.evaluation.config.EvalConfig` and ``{detector: {available, note}}``; reads the dataset
        and fails, naming the file, before any task runs.
    run : callable
        ``run(spec) -> result``: one task, a pure function of its spec (timings aside).
    summarise : callable
        ``summarise(records, detectors, budget_ms) -> section``: the report section, from the records in task
        order.
    render : callable
        ``render(doc, section, budget_ms)``: add the section's tables to a
        :class:`~objrec.evaluation.document.ReportDoc`.
    plot : callable
        ``plot(report, out, plt) -> [(relative PNG path, caption)]``: draw the section's figures under
        ``out/plots`` with ``matplotlib.pyplot`` ``plt``.
    """

    name: str
    section: str
    task_type: str
    build: Callable[[EvalConfig], tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]]
    run: Callable[[dict[str, Any]], dict[str, Any]]
    summarise: Callable[[list[dict[str, Any]], list[str], float | None], dict[str, Any]]
    render: Callable[[ReportDoc, dict[str, Any], float | None], None]
    plot: Callable[[dict[str, Any], Path, Any], list[tuple[str, str]]]
