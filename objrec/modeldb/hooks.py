"""Files kept beside a model database by the layers above it, brought up to date after every commit.

The retrieval index (:mod:`objrec.matching`) is derived from the database's descriptors and saved in
``DB/index/``; enrolment must keep it current, yet :mod:`objrec.modeldb` sits below the matching layer and does
not import it. Such files are named here as ``"module:function"`` and imported only when a commit runs them, the
way a plugin entry point is: each function takes the :class:`~objrec.modeldb.ModelDB` just committed to, is
called outside the write lock (it takes the lock itself to save), and handles its own failures, so a commit that
succeeded is never reported as failed.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["AFTER_COMMIT", "after_commit"]

#: Functions run after each commit that changes the database's content (enrolment, removal, renaming).
AFTER_COMMIT: list[str] = ["objrec.matching.shortlist:update_saved_indexes"]


def after_commit(db: Any) -> None:
    """Run every function of :data:`AFTER_COMMIT` on ``db``, in order."""
    for spec in AFTER_COMMIT:
        module, _, name = spec.partition(":")
        getattr(importlib.import_module(module), name)(db)
