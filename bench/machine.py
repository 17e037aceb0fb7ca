"""What a timing figure depends on besides the code: the machine's speed and the libraries' versions.

A scorecard's timings (latencies, enrolment rates, a budget's recall) move with the machine as much as with the
code. :func:`machine_facts` measures two anchors in the run itself and names the versions, so that a comparison
of two scorecards says when their machines or libraries differ, and by how much:

- ``sift_ms``: OpenCV SIFT (``detectAndCompute``, two threads) on ``opencv_samples/box_in_scene.png``, the median
  of :data:`ANCHOR_CALLS` calls after one to warm up: compiled, threaded image work like the features';
- ``python_ms``: a fixed loop of interpreter work (:func:`_python_work`), the 10th percentile of
  :data:`JITTER_CALLS` calls: the per-frame bookkeeping of planning, scheduling and tracking;
- ``jitter``: the 90th percentile of those calls over their 10th: how much the same work's time varies from call
  to call on this machine (a shared virtual machine's neighbours, frequency changes). A budget's cost model
  predicts a high quantile of each unit's time, so a machine that jitters more sheds more work.

:func:`speed_notes` compares the facts of two runs.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from importlib import metadata
from pathlib import Path
from typing import Any

#: Calls of each anchor whose median is reported.
ANCHOR_CALLS = 15
#: Calls of the interpreter anchor, whose spread is the jitter.
JITTER_CALLS = 60
#: Anchors that differ by more than this ratio make the runs' timings incomparable (beyond run-to-run noise).
SPEED_TOLERANCE = 1.15
#: The anchors a run's facts hold, in the order they are reported.
ANCHORS = ("sift_ms", "python_ms", "jitter")
#: The distributions whose versions are named.
PACKAGES = ("numpy", "numba", "opencv-contrib-python", "faiss-cpu", "scikit-learn", "scipy")


def _python_work() -> int:
    """A fixed amount of interpreter work: dictionary and list operations of the kind planning does."""
    d: dict[int, float] = {}
    total = 0
    for i in range(5000):
        d[i % 97] = d.get(i % 97, 0.0) + i * 0.5
        total += len([k for k in (i, i + 1, i + 2) if k % 3])
    return total + len(d)


def _times_ms(fn: Any, calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return times


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (the platform's processor string elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def versions() -> dict[str, str]:
    """The installed version of each of :data:`PACKAGES` (absent ones left out)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def machine_facts(data: Path | None) -> dict[str, Any]:
    """Cores, CPU model, Python and library versions, and the two anchors (``sift_ms`` only where ``data`` holds
    ``opencv_samples/box_in_scene.png``). ``data``: the shared data folder, or None."""
    import cv2

    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    facts: dict[str, Any] = {
        "cores": os.cpu_count(),
        "usable_cores": usable,
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "versions": versions(),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    q = statistics.quantiles(_times_ms(_python_work, JITTER_CALLS), n=10)
    facts["python_ms"], facts["jitter"] = round(q[0], 3), round(q[-1] / q[0], 2)
    path = None if data is None else data / "opencv_samples" / "box_in_scene.png"
    image = None if path is None else cv2.imread(str(path), cv2.IMREAD_GRAYSCALE)
    if image is not None:
        threads = cv2.getNumThreads()
        cv2.setNumThreads(2)
        try:
            sift = cv2.SIFT_create()
            sift.detectAndCompute(image, None)
            times = _times_ms(lambda: sift.detectAndCompute(image, None), ANCHOR_CALLS)
            facts["sift_ms"] = round(float(statistics.median(times)), 3)
        finally:
            cv2.setNumThreads(threads)
    return facts


def describe(facts: dict[str, Any] | str | None) -> str:
    """One line for a report: cores, CPU, anchors and versions (a baseline written before the facts were kept
    holds a plain string, returned as it is)."""
    if not isinstance(facts, dict):
        return str(facts or "not recorded")
    anchors = ", ".join(f"{k} {facts[k]:.2f}" for k in ANCHORS if k in facts)
    libs = ", ".join(f"{k} {v}" for k, v in facts.get("versions", {}).items())
    return f"{facts.get('cores')} cores, {facts.get('cpu')}, Python {facts.get('python')}; anchors: {anchors}; {libs}"


def speed_notes(now: dict[str, Any] | str | None, before: dict[str, Any] | str | None) -> list[str]:
    """Lines saying how the machine and libraries of run ``now`` differ from those of ``before``: each anchor's
    ratio (now / before; above 1: this machine is slower) where it moved beyond :data:`SPEED_TOLERANCE`, and
    every library whose version differs. Empty when nothing differs, or when either run kept no facts."""
    if not isinstance(now, dict) or not isinstance(before, dict):
        return ["machine facts not recorded for both runs: timing figures may come from machines of other speeds"]
    notes = []
    for key in ANCHORS:
        a, b = now.get(key), before.get(key)
        if a and b and max(a / b, b / a) > SPEED_TOLERANCE:
            notes.append(
                f"anchor {key}: {a:.2f} now, {b:.2f} before ({a / b:.2f}x): timing figures compare machines that "
                "differ in speed or steadiness"
            )
    va, vb = now.get("versions", {}), before.get("versions", {})
    for name in sorted(set(va) | set(vb)):
        if va.get(name) != vb.get(name):
            notes.append(f"{name}: {va.get(name, 'absent')} now, {vb.get(name, 'absent')} before")
    return notes


def main(argv: list[str] | None = None) -> int:
    """``python bench/machine.py [--data DIR] [--json]``: this machine's facts, as a scorecard records them."""
    import argparse
    import json
    import sys

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--data", type=Path, help="the shared data folder, for the SIFT anchor (default: none)")
    ap.add_argument("--json", action="store_true", help="print the facts as JSON")
    args = ap.parse_args(argv)
    facts = machine_facts(args.data)
    sys.stdout.write(json.dumps(facts, indent=2) + "\n" if args.json else describe(facts) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
