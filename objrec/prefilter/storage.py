"""Prefilter files: a JSON manifest and an ``.npz`` of arrays, never a pickle.

A prefilter is stored as ``<stem>.json`` (format name, schema version, library version, the estimator's
parameters, feature names and parameters, thresholds, the ``database_id`` it was trained for, the
training report, and the name and sha256 of the array file) and ``<stem>.npz`` (the cascade's flat node
arrays and the back-projection tables). Both are written atomically (temporary file, then rename), the
arrays first, so a reader never finds a manifest whose arrays are missing. Loading checks the checksum
before reading the arrays and reads them with ``allow_pickle=False``: a file cannot run code. Every
error names the file at fault.

A database's prefilter lives next to its manifest (``DB/prefilter.json`` + ``DB/prefilter.npz``); it is
stale once the database's content, and with it its ``database_id``, changes.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from objrec import __version__
from objrec.fileio import (
    FileFormatError,
    atomic_write_bytes,
    atomic_write_json,
    check_manifest_header,
    load_npz_verified,
    npz_bytes,
    read_json,
    sha256_bytes,
)
from objrec.prefilter.features import FEATURE_NAMES, N_COLOR_CODES, N_TEXTURE_CODES, FeatureParams
from objrec.prefilter.fitting import check_params
from objrec.prefilter.tree import FlatCascade
from objrec.types import Failure

if TYPE_CHECKING:  # the estimator is built on these files: it imports this module, not the reverse
    from objrec.prefilter.estimator import RegionPrefilter

__all__ = [
    "PrefilterError",
    "StalePrefilterError",
    "StalePrefilterWarning",
    "SCHEMA_VERSION",
    "FORMAT",
    "DEFAULT_FILENAME",
    "prefilter_files",
    "save_prefilter",
    "save_for",
    "load_prefilter",
    "default_path",
    "load_for",
    "StoredPrefilter",
    "prefilter_state",
    "stored_from_state",
    "PrefilterFiles",
]

SCHEMA_VERSION = 1
FORMAT = "objrec-prefilter"
#: Where ``train-prefilter`` stores a database's prefilter by default (``DB/prefilter.json`` + ``.npz``).
DEFAULT_FILENAME = "prefilter.json"


class PrefilterError(FileFormatError):
    """A prefilter file is missing, damaged, tampered with or of an unknown format; names the file."""


class StalePrefilterError(PrefilterError):
    """The prefilter was trained for another database (another ``database_id``)."""


class StalePrefilterWarning(UserWarning):
    """The database changed since its prefilter was trained; it is not used until retrained."""


def prefilter_files(path: str | os.PathLike) -> tuple[Path, Path]:
    """``(manifest .json, arrays .npz)`` for ``path`` given as either file or as their common stem."""
    p = Path(path)
    stem = p.with_suffix("") if p.suffix.lower() in (".json", ".npz") else p
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")


def _jsonable(obj: Any) -> Any:
    """``obj`` with NumPy scalars as Python numbers and non-finite floats as null (strict JSON)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _manifest(pf: RegionPrefilter) -> dict[str, Any]:
    params = pf.get_params()
    if isinstance(params["max_depth"], tuple):
        params["max_depth"] = list(params["max_depth"])
    fp = pf.feature_params_
    return {
        "format": FORMAT,
        "schema_version": SCHEMA_VERSION,
        "library_version": __version__,
        "database_id": pf.database_id_,
        "object_names": list(pf.object_names_),
        "params": params,
        "feature_names": list(FEATURE_NAMES),
        "feature_params": {
            "edge_threshold": fp.edge_threshold,
            "corner_threshold": fp.corner_threshold,
            "lbp_threshold": fp.lbp_threshold,
            "contrast_levels": list(fp.contrast_levels),
        },
        "n_features_in": pf.n_features_in_,
        "threshold": pf.threshold_,
        "stage_thresholds": [float(v) for v in pf.stage_thresholds_],
        "arrays": None,  # the array file's name and sha256, once written
        "training": _jsonable(pf.training_report_),
    }


def save_prefilter(pf: RegionPrefilter, path: str | os.PathLike) -> tuple[Path, Path]:
    """Write a fitted prefilter as ``<stem>.npz`` (arrays) and ``<stem>.json`` (manifest), atomically.

    Parameters
    ----------
    pf : RegionPrefilter
        Fitted (``NotFittedError`` otherwise, and nothing is written).
    path : path-like
        Either file, or their common stem.

    Returns
    -------
    (manifest path, arrays path)
    """
    manifest, arrays = prefilter_state(pf)
    jpath, npath = prefilter_files(path)
    data = npz_bytes(arrays)
    manifest["arrays"] = {"file": npath.name, "sha256": sha256_bytes(data)}
    atomic_write_bytes(npath, data)
    atomic_write_json(jpath, manifest)
    return jpath, npath


def _read_manifest(jpath: Path) -> tuple[dict[str, Any], Path]:
    """The manifest, checked for format, schema and feature names, and the path of its array file."""
    try:
        m = read_json(jpath, "prefilter manifest")
    except FileFormatError as exc:
        raise PrefilterError(str(exc)) from None
    check_manifest_header(jpath, m, FORMAT, SCHEMA_VERSION, "prefilter", PrefilterError)
    if list(m.get("feature_names", [])) != list(FEATURE_NAMES):
        raise PrefilterError(f"{jpath}: trained on other cell features ({m.get('feature_names')}); retrain it")
    try:
        # Only the file name counts: a manifest cannot point outside its own folder.
        return m, jpath.parent / Path(m["arrays"]["file"]).name
    except (KeyError, TypeError) as exc:
        raise PrefilterError(f"{jpath}: manifest lacks or mangles a field ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class StoredPrefilter:
    """A prefilter as a file holds it: the estimator's parameters and its fitted state, checked.

    :meth:`RegionPrefilter.from_stored <objrec.prefilter.estimator.RegionPrefilter.from_stored>` makes the
    estimator of it.

    Attributes
    ----------
    params : dict
        The estimator's parameters (``get_params()``; ``max_depth`` a tuple where it was a list).
    cascade : FlatCascade
    threshold : float
    n_features : int
    color_lut, texture_lut : ndarray
    feature_params : FeatureParams
    database_id : str or None
    object_names : list of str
    training_report : dict
    """

    params: dict[str, Any]
    cascade: FlatCascade
    threshold: float
    n_features: int
    color_lut: np.ndarray
    texture_lut: np.ndarray
    feature_params: FeatureParams
    database_id: str | None
    object_names: list[str]
    training_report: dict[str, Any]


def prefilter_state(pf: RegionPrefilter) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A fitted prefilter as plain data: the manifest (without its array file) and the arrays, what a file
    holds and what :func:`stored_from_state` reads back (e.g. sent to another process)."""
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(pf, "cascade_")
    arrays = pf.cascade_.to_arrays()
    arrays["color_lut"] = np.asarray(pf.color_lut_, np.float32)
    arrays["texture_lut"] = np.asarray(pf.texture_lut_, np.float32)
    return _manifest(pf), arrays


def stored_from_state(
    m: dict[str, Any], arrays: dict[str, np.ndarray], jpath: Path | str = "<memory>", npath: Path | str = "<memory>"
) -> StoredPrefilter:
    """The checked :class:`StoredPrefilter` of a manifest and its arrays; errors name ``jpath``/``npath``.
    ``m``: the manifest; ``arrays``: its arrays by name."""
    try:
        params = dict(m["params"])
        if isinstance(params.get("max_depth"), list):
            params["max_depth"] = tuple(params["max_depth"])
        check_params(params)
        n_features = int(m["n_features_in"])
        threshold = float(m["threshold"])
        fpm = m["feature_params"]
        low, mid, high = (float(v) for v in fpm["contrast_levels"])
        fparams = FeatureParams(
            float(fpm["edge_threshold"]),
            float(fpm["corner_threshold"]),
            float(fpm["lbp_threshold"]),
            (low, mid, high),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PrefilterError(f"{jpath}: manifest lacks or mangles a field ({type(exc).__name__}: {exc})") from None
    try:
        cascade = FlatCascade.from_arrays(arrays)
        cascade.validate(n_features)
        cl, tl = arrays["color_lut"], arrays["texture_lut"]
        if cl.shape != (N_COLOR_CODES,) or tl.shape != (N_TEXTURE_CODES,):
            raise ValueError(f"lookup tables of shape {cl.shape}, {tl.shape}")
    except (KeyError, ValueError, TypeError) as exc:
        raise PrefilterError(f"{npath}: arrays missing or malformed ({exc})") from None
    return StoredPrefilter(
        params,
        cascade,
        threshold,
        n_features,
        cl,
        tl,
        fparams,
        m.get("database_id"),
        list(m.get("object_names", [])),
        dict(m.get("training", {})),
    )


def load_prefilter(path: str | os.PathLike, database_id: str | Iterable[str] | None = None) -> StoredPrefilter:
    """Read a prefilter written by :func:`save_prefilter`, checked; never unpickles.

    Parameters
    ----------
    path : path-like
        Either file, or their common stem.
    database_id : str or iterable of str, optional
        When given, the ``database_id`` the prefilter must have been trained for (or any of several: a
        database's current id and its ``compatible_ids``).

    Raises
    ------
    PrefilterError
        Naming the file, when it is missing, not a prefilter, from a newer schema, damaged or modified.
    StalePrefilterError
        When ``database_id`` is given and the prefilter was trained for another database.
    """
    jpath, _ = prefilter_files(path)
    m, npath = _read_manifest(jpath)
    try:
        arrays = load_npz_verified(npath, m["arrays"].get("sha256"))
    except FileFormatError as exc:
        raise PrefilterError(str(exc)) from None
    pf = stored_from_state(m, arrays, jpath, npath)
    valid = [database_id] if isinstance(database_id, str) else list(database_id or [])
    if database_id is not None and pf.database_id not in valid:
        raise StalePrefilterError(
            f"{jpath}: trained for database {pf.database_id}, not {valid[0] if valid else None} "
            "(the database changed since; retrain with objrec train-prefilter)"
        )
    return pf


def save_for(pf: RegionPrefilter, db: Any, path: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """Save ``pf`` beside ``db`` (default :func:`default_path`) holding the database's write lock, so two
    processes saving at once cannot pair one's manifest with the other's arrays.
    ``path``: the prefilter's manifest path."""
    with db.lock():
        return save_prefilter(pf, path if path is not None else default_path(db))


def default_path(db: Any) -> Path:
    """Where a database's prefilter lives: ``DB/prefilter.json`` (+ ``DB/prefilter.npz``)."""
    return Path(db.path) / DEFAULT_FILENAME


def load_for(db: Any, path: str | os.PathLike | None = None, on_stale: str = "warn") -> StoredPrefilter | Failure:
    """The stored prefilter trained for ``db``, or a falsy :class:`~objrec.types.Failure` saying why not.

    - no file: ``Failure("absent", ...)`` (run without a prefilter, silently);
    - trained for another database id (the database changed): with ``on_stale="warn"`` a
      :class:`StalePrefilterWarning` and ``Failure("stale", ...)``; with ``"raise"`` a
      :class:`StalePrefilterError`;
    - damaged, tampered or foreign file: :class:`PrefilterError` naming the file.

    Parameters
    ----------
    db : ModelDB
    path : path-like, optional
        Default: :func:`default_path`.
    on_stale : {"warn", "raise"}
    """
    if on_stale not in ("warn", "raise"):
        raise ValueError(f"on_stale: expected 'warn' or 'raise', got {on_stale!r}")
    jpath, _ = prefilter_files(path if path is not None else default_path(db))
    if not jpath.exists():
        return Failure(
            "absent",
            f"{jpath}: no prefilter for this database (train one with objrec train-prefilter --db {db.path})",
        )
    try:
        return load_prefilter(jpath, database_id=[db.database_id, *getattr(db, "compatible_ids", [])])
    except StalePrefilterError as exc:
        if on_stale == "raise":
            raise
        # stacklevel 3: the caller of RegionPrefilter.load_for, the usual way in.
        warnings.warn(f"{exc}; running without the prefilter", StalePrefilterWarning, stacklevel=3)
        return Failure("stale", str(exc))


class PrefilterFiles:
    """The file methods of :class:`~objrec.prefilter.estimator.RegionPrefilter` (a mixin): thin wrappers over
    this module's functions, for an estimator class with ``get_params`` and ``set_fitted``."""

    def save(self, path: str | os.PathLike) -> tuple[Path, Path]:
        """Write ``<stem>.json`` and ``<stem>.npz`` (:func:`save_prefilter`)."""
        return save_prefilter(cast("RegionPrefilter", self), path)

    @classmethod
    def from_stored(cls, stored: StoredPrefilter) -> Any:
        """The fitted prefilter a file held (:func:`load_prefilter`)."""
        estimator = cast("type[RegionPrefilter]", cls)
        known = estimator().get_params()
        state = {f.name: getattr(stored, f.name) for f in fields(stored) if f.name != "params"}
        return estimator(**{k: v for k, v in stored.params.items() if k in known}).set_fitted(**state)

    @classmethod
    def load(cls, path: str | os.PathLike, database_id: str | None = None) -> Any:
        """Read a prefilter written by :meth:`save` (:func:`load_prefilter`).
        ``path``: the manifest path; ``database_id``: the database content it must have been trained for (None: any)."""
        return cls.from_stored(load_prefilter(path, database_id))

    @classmethod
    def default_path(cls, db: Any) -> Path:
        """Where a database's prefilter lives (:func:`default_path`)."""
        return default_path(db)

    @classmethod
    def load_for(cls, db: Any, path: str | os.PathLike | None = None, on_stale: str = "warn") -> Any:
        """The prefilter trained for ``db``, or a falsy :class:`~objrec.types.Failure` saying why not
        (:func:`load_for`).

        Use as ``pf = RegionPrefilter.load_for(db); if pf: regions = pf.propose(frame)``.
        ``path``: the manifest path (default :func:`default_path`); ``on_stale``: what a prefilter of another database
        id does, as for :func:`load_for`.
        """
        stored = load_for(db, path, on_stale)
        return stored if isinstance(stored, Failure) else cls.from_stored(stored)
