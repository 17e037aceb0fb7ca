"""Running tasks: building them, the resumable record file, the single-process loop and Dask scale-out, and the
whole run.

Only the driver process writes ``records.jsonl``: workers return records, the driver appends each one as it
arrives (one JSON object per line, flushed), so an interrupted run loses at most the line being written. On
the next run :class:`RecordStore` drops a partial or corrupt line, keeps every complete record, and only the
tasks without one run.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from objrec.cluster import check_workers
from objrec.evaluation.config import EvalConfig
from objrec.evaluation.kinds import kind_named, task_runner

__all__ = ["RecordStore", "build_tasks", "run_task", "execute", "run_evaluation"]

log = logging.getLogger("objrec")


def build_tasks(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The task list of a run and the status of each requested detector (``{name: {available, note}}``).

    The kind's plug-in reads every image once and checks every ground-truth file first, so a damaged dataset
    fails before any work starts, with an error naming the file.
    """
    return kind_named(cfg.kind).build(cfg)


def run_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one task and return its record ``{"id", "type", "detector", "label", "meta", "result", "elapsed_s"}``.

    Pure: the same spec gives the same ``result`` (timings aside) in any process.
    """
    t0 = time.perf_counter()
    result = task_runner(spec)(spec)
    return {
        "id": spec["id"],
        "type": spec["type"],
        "detector": spec["detector"],
        "label": spec["label"],
        "meta": spec["meta"],
        "result": result,
        "elapsed_s": round(time.perf_counter() - t0, 4),
    }


class RecordStore:
    """``records.jsonl``: one record per finished task, keyed by its task id.

    Parameters
    ----------
    path : path
        The JSONL file (created on the first append).

    Notes
    -----
    A line that is not a JSON object with an ``"id"`` (the tail of an interrupted write, a damaged line) is
    dropped when the file is opened, and the file is rewritten atomically without it, so later appends start
    on a clean line. The number of dropped lines is in :attr:`dropped`.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.records: dict[str, dict[str, Any]] = {}
        self.dropped = 0
        self._load()

    def _load(self) -> None:
        if not self.path.exists():
            return
        if self.path.is_dir():
            raise ValueError(f"{self.path}: is a directory, expected the records file")
        raw = self.path.read_bytes()
        good: list[bytes] = []
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                self.dropped += 1
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("id"), str) or "result" not in rec:
                self.dropped += 1
                continue
            self.records[rec["id"]] = rec
            good.append(line)
        if self.dropped or (raw and not raw.endswith(b"\n")):
            from objrec.fileio import atomic_write_bytes

            atomic_write_bytes(self.path, b"".join(g + b"\n" for g in good))
            if self.dropped:
                log.warning("%s: dropped %d partial or damaged line(s); those tasks run again", self.path, self.dropped)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self.records

    def __len__(self) -> int:
        return len(self.records)

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True, allow_nan=False) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
        self.records[record["id"]] = record


def _progress(total: int, enabled: bool, desc: str) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="task", disable=not enabled, file=sys.stderr, dynamic_ncols=True)


def execute(
    tasks: list[dict[str, Any]],
    on_record: Callable[[dict[str, Any]], None],
    workers: int | None = None,
    scheduler: str | None = None,
    progress: bool = True,
    fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Run ``tasks`` (each ``fn(spec) -> record``), calling ``on_record`` in the driver as records arrive.

    ``fn`` defaults to :func:`run_task`. Single-process by default; ``workers``
    starts a local ``dask.distributed`` cluster (one single-threaded process per worker), ``scheduler``
    connects to a running one. A task's exception is re-raised here after the remaining tasks are cancelled.
    Returns ``{"mode", "workers", "wall_s"}``.
    ``progress``: show a progress bar on stderr.
    """
    t0 = time.perf_counter()
    fn = fn or run_task
    check_workers(workers, scheduler)
    bar = _progress(len(tasks), progress, "objrec eval")
    info: dict[str, Any] = {"mode": "single-process", "workers": 1}
    try:
        if workers is None and scheduler is None:
            for spec in tasks:
                on_record(fn(spec))
                bar.update(1)
        else:
            info = _execute_dask(tasks, on_record, workers, scheduler, bar, fn)
    finally:
        bar.close()
    info["wall_s"] = round(time.perf_counter() - t0, 3)
    return info


def _execute_dask(
    tasks: list[dict[str, Any]],
    on_record: Callable[[dict[str, Any]], None],
    workers: int | None,
    scheduler: str | None,
    bar: Any,
    fn: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    from objrec.cluster import dask_client

    with dask_client(workers, scheduler) as (client, mode):
        from dask.distributed import as_completed

        n_workers = len(client.nthreads())
        futures = [client.submit(fn, spec, key=f"objrec-eval-{spec['id']}", pure=False) for spec in tasks]
        try:
            for fut in as_completed(futures):
                on_record(fut.result())
                bar.update(1)
        except BaseException:
            client.cancel(futures)
            raise
    return {"mode": mode, "workers": n_workers}


def run_evaluation(cfg: EvalConfig) -> dict[str, Any]:
    """Build the tasks, run those without a record, write ``report.json``/``report.md``/``report.html``.

    Returns the report (the content of ``report.json``).
    """
    from objrec.evaluation.report import build_report, write_reports

    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} exists and is not a directory")
    tasks, status = build_tasks(cfg)
    out.mkdir(parents=True, exist_ok=True)
    store = RecordStore(out / "records.jsonl")
    pending = [t for t in tasks if t["id"] not in store]
    t0 = time.perf_counter()
    info = (
        execute(pending, store.append, cfg.workers, cfg.scheduler, cfg.progress)
        if pending
        else {"mode": "nothing to run", "workers": 0, "wall_s": 0.0}
    )
    run = {
        **info,
        "tasks": len(tasks),
        "ran": len(pending),
        "resumed": len(tasks) - len(pending),
        "dropped_lines": store.dropped,
        "total_s": round(time.perf_counter() - t0, 3),
    }
    records = [store.records[t["id"]] for t in tasks]
    report = build_report(cfg, status, tasks, records, run)
    write_reports(report, out, plots=cfg.plots)
    return report
