"""The scorecard's figures: their form, how repeated runs combine, how a run compares with its baseline, and the
tables it is written as.

A figure is one number a capability is judged by, with what it takes to read it::

    {"value": 193, "unit": "photos", "of": 200, "better": "higher", "spread": 1, "split": "held_out",
     "source": "smvs_dvd", "kind": "accuracy", "gated": true}

- ``spread`` is the run-to-run range (largest minus smallest of repeated runs), never below the figure's
  ``floor`` (1 for counts: a count moves by whole units; a small fraction for shares and correlations computed
  on another machine's floating point). A comparison flags a figure only beyond its spread.
- ``split`` says whether the data behind the figure was used to choose thresholds and defaults (``tuning``) or
  kept out of that choice (``held_out``); ``source`` names the data set.
- ``kind`` is ``accuracy``, ``timing``, ``memory`` or ``disk``. ``gated`` is true only for figures that do not
  depend on the machine's speed (no budget, or a simulated clock): those are the ones CI fails on. A budgeted
  recall is an accuracy figure and still not gated, since a slower machine sheds more work.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Figure",
    "KINDS",
    "SPLITS",
    "count",
    "share",
    "combine_runs",
    "Comparison",
    "compare",
    "load_figures",
    "render_markdown",
    "render_comparison",
]

KINDS = ("accuracy", "timing", "memory", "disk")
SPLITS = ("tuning", "held_out")
#: The smallest spread of a share (0..1) or a correlation: what a handful of items or another machine's
#: floating point moves it by, below which a change is not a change.
SHARE_FLOOR = 0.005


@dataclass
class Figure:
    """One figure of the scorecard (see the module docstring for the fields)."""

    value: float | None
    unit: str
    better: str
    split: str
    source: str
    kind: str
    gated: bool = False
    spread: float = 0.0
    floor: float = 0.0
    of: int | None = None
    note: str = ""
    runs: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"better: expected 'higher' or 'lower', got {self.better!r}")
        if self.split not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS}, got {self.split!r}")
        if self.kind not in KINDS:
            raise ValueError(f"kind: expected one of {KINDS}, got {self.kind!r}")
        if self.value is not None:
            self.value = float(self.value)
            if not math.isfinite(self.value):
                self.value = None
        self.spread = max(float(self.spread), float(self.floor))

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        if not d["note"]:
            d.pop("note")
        if d["of"] is None:
            d.pop("of")
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Figure:
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def count(value: int, of: int, split: str, source: str, better: str = "higher", **kw: Any) -> Figure:
    """A count of items (photos found, pairs solved, false detections): its spread is at least one item."""
    kw.setdefault("floor", 1)
    return Figure(value, kw.pop("unit", "count"), better, split, source, kw.pop("kind", "accuracy"), of=of, **kw)


def share(value: float | None, split: str, source: str, better: str = "higher", **kw: Any) -> Figure:
    """A share in 0..1 (or a correlation): its spread is at least :data:`SHARE_FLOOR`."""
    kw.setdefault("floor", SHARE_FLOOR)
    return Figure(value, kw.pop("unit", "share"), better, split, source, kw.pop("kind", "accuracy"), **kw)


def combine_runs(runs: list[dict[str, Figure]]) -> dict[str, Figure]:
    """One figure per name from repeated runs of the same entries: the median value, the range as the spread
    (at least the floor), every run's value kept in ``runs``. A figure missing from a run, or undefined in it,
    is left out of that run's values."""
    out: dict[str, Figure] = {}
    names = list(dict.fromkeys(n for r in runs for n in r))
    for name in names:
        figs = [r[name] for r in runs if name in r]
        vals = [f.value for f in figs if f.value is not None]
        first = figs[0]
        fig = Figure.from_json({**first.to_json(), "runs": vals, "spread": 0.0})
        if vals:
            fig.value = float(statistics.median(vals))
            fig.spread = max(max(vals) - min(vals), fig.floor, max(f.spread for f in figs))
        else:
            fig.value = None
        out[name] = fig
    return out


def cover_machine(baseline: dict[str, Figure], other: dict[str, Figure], machine: str) -> list[str]:
    """Widen the spread of each gated ``baseline`` figure that ``other`` (the same entries run on another machine,
    ``machine`` in words) measured worse beyond it, to exactly that difference, in place; the baseline's value
    stays. Returns the names widened, each noted with the other machine's value.

    The same code and libraries give other figures on a machine whose floating point differs (another
    instruction set's vector paths in NumPy, OpenCV, FAISS and the compiled kernels): a keypoint at a threshold's
    edge, a tree's split, one photo's verdict. Per machine the figures repeat exactly, so the range of runs on
    one machine cannot hold that difference; a gate over runs on either machine needs it in the spread. Figures
    the other machine measured better keep their spread: widening them would only loosen the gate.
    """
    widened = []
    for name, base in baseline.items():
        fig = other.get(name)
        if not base.gated or fig is None or fig.value is None or base.value is None:
            continue
        deficit = fig.value - base.value if base.better == "lower" else base.value - fig.value
        if deficit > base.spread:
            base.spread = deficit
            note = f"spread covers {_fmt(fig.value, base.unit)} on {machine}"
            base.note = f"{base.note}; {note}" if base.note else note
            widened.append(name)
    return widened


@dataclass
class Comparison:
    """A figure beside its baseline: ``flag`` is ``worse`` or ``better`` (beyond the spread), ``same``,
    ``new`` (no baseline), ``missing`` (in the baseline, not measured now although its entry ran) or
    ``undefined`` (measured as undefined where the baseline has a value)."""

    name: str
    value: float | None
    baseline: float | None
    spread: float
    flag: str
    gated: bool
    figure: Figure | None

    @property
    def failed(self) -> bool:
        """Worse than its baseline beyond its spread, missing, or undefined now: what fails a gated check."""
        return self.flag in ("worse", "missing", "undefined")


def compare(
    current: dict[str, Figure], baseline: dict[str, Figure], entries: Iterable[str] | None = None
) -> list[Comparison]:
    """Each figure of ``current`` beside the same name in ``baseline``.

    The spread a change must exceed is the larger of the baseline's and the current run's (each at least its
    floor). Baseline figures of the ``entries`` that ran (names ``entry.figure``), or of every entry when
    ``entries`` is None, that the current run lacks are reported as ``missing``.
    """
    out = []
    for name, fig in current.items():
        base = baseline.get(name)
        if base is None:
            out.append(Comparison(name, fig.value, None, fig.spread, "new", fig.gated, fig))
            continue
        spread = max(fig.spread, base.spread, fig.floor, base.floor)
        if fig.value is None:
            flag = "same" if base.value is None else "undefined"
        elif base.value is None:
            flag = "new"
        else:
            delta = fig.value - base.value if fig.better == "higher" else base.value - fig.value
            eps = 1e-9 * max(1.0, abs(base.value))
            flag = "worse" if delta < -spread - eps else "better" if delta > spread + eps else "same"
        out.append(Comparison(name, fig.value, base.value, spread, flag, fig.gated and base.gated, fig))
    ran = set(entries) if entries is not None else None
    for name, base in baseline.items():
        if name not in current and (ran is None or name.split(".", 1)[0] in ran):
            out.append(Comparison(name, None, base.value, base.spread, "missing", base.gated, None))
    return out


def load_figures(path: str | Path) -> dict[str, Figure]:
    """The figures of a ``scorecard.json`` or ``scorecard_baseline.json`` (``{"figures": {name: figure}}``)."""
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(doc, dict) or not isinstance(doc.get("figures"), dict):
        raise ValueError(f"{path}: not a scorecard (expected a JSON object with a 'figures' object)")
    return {name: Figure.from_json(d) for name, d in doc["figures"].items()}


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "–"
    if unit == "share":
        return f"{v:.1%}"
    if abs(v) >= 100 or float(v).is_integer():
        return f"{v:.0f}"
    return f"{v:.3g}"


def _value(f: Figure) -> str:
    v = _fmt(f.value, f.unit)
    return f"{v} / {f.of}" if f.of is not None and f.value is not None else v


def render_markdown(figures: dict[str, Figure], header: list[str]) -> str:
    """The scorecard as a markdown table, one row per figure, grouped by entry."""
    lines = [*header, "", "| figure | value | unit | spread | split | source | kind | gated |", "|" + " --- |" * 8]
    for name, f in figures.items():
        spread = _fmt(f.spread, f.unit)
        unit = "%" if f.unit == "share" else f.unit
        gated = "yes" if f.gated else ""
        lines.append(f"| `{name}` | {_value(f)} | {unit} | ±{spread} | {f.split} | {f.source} | {f.kind} | {gated} |")
    return "\n".join(lines) + "\n"


def render_comparison(rows: list[Comparison]) -> str:
    """Every figure beside its baseline, a flag on the ones beyond their spread (plain text, for the terminal
    and for ``compare.md``)."""
    mark = {"worse": "WORSE", "better": "better", "missing": "MISSING", "undefined": "UNDEFINED", "new": "new"}
    lines = [f"{'figure':58s} {'now':>12s} {'baseline':>12s} {'spread':>9s}  flag"]
    for c in rows:
        unit = c.figure.unit if c.figure is not None else ""
        flag = mark.get(c.flag, "")
        if flag and c.flag != "new" and not c.gated:
            flag += " (not gated)"
        lines.append(
            f"{c.name:58s} {_fmt(c.value, unit):>12s} {_fmt(c.baseline, unit):>12s} {_fmt(c.spread, unit):>9s}  {flag}"
        )
    worse = [c.name for c in rows if c.flag == "worse"]
    lines.append(f"{len(rows)} figures; worse than the baseline beyond the spread: {len(worse)}")
    return "\n".join(lines) + "\n"
