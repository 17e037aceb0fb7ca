"""The two families of evaluation kinds that share everything but how their tasks are built: recognition of
composed scenes (``scene`` tasks) and feature evaluation on image pairs (``pair`` tasks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from objrec.evaluation.config import EvalConfig
from objrec.evaluation.feature_eval import evaluate_pair
from objrec.evaluation.feature_report import features_section, plot_features, render_features
from objrec.evaluation.kinds.base import EvalKind
from objrec.evaluation.recognition import evaluate_scene
from objrec.evaluation.recognition_report import plot_recognition, recognition_section, render_recognition

__all__ = ["scene_kind", "pair_kind"]

Build = Callable[[EvalConfig], tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]]


def scene_kind(name: str, build: Build) -> EvalKind:
    """A recognition kind: ``build`` makes its ``scene`` tasks; the recognition section reports them.
    ``name``: the kind's name."""
    return EvalKind(
        name=name,
        section="recognition",
        task_type="scene",
        build=build,
        run=evaluate_scene,
        summarise=recognition_section,
        render=render_recognition,
        plot=plot_recognition,
    )


def pair_kind(name: str, build: Build) -> EvalKind:
    """A feature kind: ``build`` makes its ``pair`` tasks; the features section reports them.
    ``name``: the kind's name."""
    return EvalKind(
        name=name,
        section="features",
        task_type="pair",
        build=build,
        run=evaluate_pair,
        summarise=features_section,
        render=render_features,
        plot=plot_features,
    )
