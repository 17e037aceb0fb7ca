"""The evaluation kinds of ``objrec eval KIND:PATH``, one plug-in module each, registered in :data:`KINDS`.

Each module defines ``KIND``, an :class:`~objrec.evaluation.kinds.base.EvalKind` (build, run, summarise,
render, plot); the runner, the report and the command line find a kind, its section and its task runner here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from objrec.evaluation.kinds import catalogue, coil, hpatches, objects, oxford, pairs, synthetic, ukbench, video
from objrec.evaluation.kinds.base import EvalKind

__all__ = ["EvalKind", "KINDS", "SECTIONS", "kind_named", "task_runner"]

#: Kind name -> plug-in, in the order the command line lists them.
KINDS: dict[str, EvalKind] = {
    k.name: k
    for k in (
        oxford.KIND,
        hpatches.KIND,
        coil.KIND,
        objects.KIND,
        synthetic.KIND,
        pairs.KIND,
        catalogue.KIND,
        ukbench.KIND,
        video.KIND,
    )
}
#: The report sections, in ``report.json`` order (kinds of one family share a section).
SECTIONS: tuple[str, ...] = tuple(dict.fromkeys(k.section for k in KINDS.values()))
_RUNNERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {k.task_type: k.run for k in KINDS.values()}


def kind_named(name: str) -> EvalKind:
    """The plug-in of ``name``; ``ValueError`` listing the kinds for an unknown one."""
    if name not in KINDS:
        raise ValueError(f"dataset: expected KIND:PATH with KIND one of {', '.join(KINDS)}, got {name!r}")
    return KINDS[name]


def task_runner(spec: dict[str, Any]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The function that runs a task of ``spec["type"]``; ``ValueError`` for an unknown type."""
    if spec["type"] not in _RUNNERS:
        raise ValueError(f"task {spec.get('id')}: unknown task type {spec['type']!r}")
    return _RUNNERS[spec["type"]]
