"""Ratings of a database's enrolled views and objects, computed on request and written back: a
:class:`~objrec.modeldb.database.ModelDB`'s rating methods (:class:`DatabaseRatings`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from objrec.modeldb.access import DatabaseReads
from objrec.modeldb.preparation import rating_entry

__all__ = ["DatabaseRatings"]


class DatabaseRatings(DatabaseReads):
    """The ratings of a database's views (:meth:`rate`) and objects (:meth:`rate_object`), from the enrolled
    images and features only; :class:`~objrec.modeldb.database.ModelDB` inherits them."""

    def rate(self, names: Iterable[str] | None = None, progress: bool = False) -> dict[str, Any]:
        """Give enrolled views the full rating (:func:`objrec.rating.rate` with its rendered views, for the
        object's shape) where they have only the rating enrolment stores from their own features (or one of
        another rating version), computed from the enrolled image (its source file while that holds the same
        bytes, else the stored model image) and written in one commit; nothing is re-extracted and the database
        id stays the same.

        Parameters
        ----------
        names : iterable of str, optional
            Objects (all their views) to rate; default every enrolled object. An unknown name is a KeyError
            naming it, before anything is rated.
        progress : bool
            Show a tqdm progress bar on stderr.

        Returns
        -------
        dict of record key -> Rating
            The views rated by this call (those already fully rated are left out).
        """
        import sys

        from tqdm import tqdm

        from objrec._threads import worker_pool
        from objrec.rating import RATING_VERSION, rate

        keys = [k for n in (self.names if names is None else list(names)) for k in self.view_keys(n)]
        todo = [k for k in keys if self.info(k).rating_version != RATING_VERSION]
        detectors = self.detectors

        def one(k: str) -> Any:
            return rate(self._enrolled_image(k), detectors=detectors, shape=self.info(k).shape)

        out = {}
        with tqdm(total=len(todo), unit="view", desc="rate", disable=not progress, file=sys.stderr) as bar:
            for k, r in zip(todo, worker_pool().map(one, todo), strict=True):
                out[k] = r
                bar.update()
        if out:
            with self.store.writing():
                changes = [(k, field, v) for k, r in out.items() for field, v in rating_entry(r).items()]
                self.store.override(changes)
        return out

    def rate_object(self, name: str, progress: bool = False) -> Any:
        """The rating of object ``name`` from all its enrolled views (:func:`objrec.rating.objects.rate_object`):
        its views' full ratings (computed and written back by :meth:`rate` where missing) and how well the
        views' stored features of the rated detector agree. KeyError for an unknown name.
        ``progress`` shows a progress bar on stderr while missing view ratings are computed.

        Returns
        -------
        ObjectRating
        """
        from objrec.rating.objects import rate_object
        from objrec.rating.rater import rated_kind

        keys = self.view_keys(name)
        self.rate([name], progress=progress)
        infos = [self.info(k) for k in keys]
        kind = rated_kind(self.detectors)
        feats = [self.get_kind(k, kind).features[kind] for k in keys] if len(keys) > 1 else [None]
        return rate_object(name, [int(i.rating or 0) for i in infos], feats, infos[0].shape)

    def _enrolled_image(self, key: str) -> np.ndarray:
        """The image record ``key`` was enrolled from: its source file's pixels while the file holds the bytes
        enrolled (the stored model image may be a lossy copy), else the stored model image."""
        from objrec.fileio import sha256_bytes
        from objrec.imageio import decode_image

        src = self.info(key).source or {}
        path = src.get("path")
        if path and os.path.isfile(path):
            data = np.fromfile(path, np.uint8)
            if sha256_bytes(data.data) == src.get("sha256"):
                return decode_image(data, path)
        return self.image(key)
