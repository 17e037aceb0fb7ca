"""Start-up of the ``objrec`` command-line process: Numba without SciPy's linear algebra, and OpenCV and FFmpeg
without their own log lines (:func:`quiet_video_backends`).

When Numba's CPU target is first used it imports ``numba.np.arraymath``, which checks whether SciPy's
BLAS is present (``import scipy.linalg.cython_blas``, which imports all of :mod:`scipy.linalg`) so that
``np.dot`` and ``np.linalg`` can be compiled. objrec's kernels call neither, and nothing else in a command
needs ``scipy.linalg`` before its kernels run, so the command-line process hides that one module while
``numba.np.arraymath`` is imported: the check fails quietly (Numba then only refuses to compile BLAS calls,
which objrec makes none of), and the module is importable again at once for anything that wants it later
(scikit-learn, for one). The library itself never does this: in a user's process Numba is imported as it
is.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

_HIDDEN = "scipy.linalg.cython_blas"


class _Loader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        hide = _HIDDEN not in sys.modules and "scipy.linalg" not in sys.modules
        if hide:
            # None makes the import raise ImportError (typeshed types sys.modules' values as modules only)
            sys.modules[_HIDDEN] = None  # type: ignore[assignment]
        try:
            self._loader.exec_module(module)
        finally:
            if hide and sys.modules.get(_HIDDEN, 0) is None:
                del sys.modules[_HIDDEN]


_TARGET = "numba.np.arraymath"


class _NumbaFinder(importlib.abc.MetaPathFinder):
    """Finds ``numba.np.arraymath`` as usual and wraps its loader; removes itself after the first use."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def numba_without_scipy_linalg() -> None:
    """Arrange for this process's Numba to skip SciPy's BLAS check (see above)."""
    if _TARGET not in sys.modules and not any(isinstance(f, _NumbaFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _NumbaFinder())


def quiet_video_backends() -> None:
    """Silence OpenCV's and FFmpeg's own log lines in the command-line process and the processes it starts.

    A damaged video file otherwise prints FFmpeg's ``[mov,mp4,...] moov atom not found`` and OpenCV's
    ``[ WARN:0@...]`` / ``[ERROR:0@...]`` lines from its capture backends before objrec's one-line error naming
    the file; what they report reaches the user as that error or as an exception. Neither library offers its log
    to Python's ``logging``, so both are set to silent: OpenCV reads ``OPENCV_LOG_LEVEL`` and
    ``OPENCV_FFMPEG_LOGLEVEL`` when it first logs or starts its FFmpeg backend, so this runs before any image or
    video is opened, and an OpenCV already imported is also told directly. A value the user set is kept. The
    library itself leaves the environment alone."""
    import os
    import sys

    os.environ.setdefault("OPENCV_FFMPEG_LOGLEVEL", "-8")
    os.environ.setdefault("OPENCV_LOG_LEVEL", "SILENT")
    cv2 = sys.modules.get("cv2")
    if cv2 is not None and os.environ["OPENCV_LOG_LEVEL"] == "SILENT":
        cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_SILENT)
