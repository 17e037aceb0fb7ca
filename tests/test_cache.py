"""The compiled-kernel cache: location and privacy, the key, reuse by a later process, ``objrec cache``."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from objrec import kernel_cache
from objrec.cli import main
from objrec.kernel_cache import announce, keys

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh OBJREC_CACHE_DIR for this test (and the process-wide look-ups forgotten before and after)."""
    d = tmp_path / "cache" / "objrec"
    monkeypatch.setenv(kernel_cache.ENV_VAR, str(d))
    _forget()
    yield d
    _forget()
    kernel_cache.announce_compilation(None)  # objrec.cli.main() points it at stderr


def _forget():
    for f in (keys.kernel_dir, keys.usable_kernel_dir):
        f.cache_clear()


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_cache_root_follows_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(kernel_cache.ENV_VAR, str(tmp_path / "here"))
    assert kernel_cache.cache_root() == tmp_path / "here"
    monkeypatch.delenv(kernel_cache.ENV_VAR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert kernel_cache.cache_root() == tmp_path / "xdg" / "objrec"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert kernel_cache.cache_root() == Path.home() / ".cache" / "objrec"


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_kernel_dir_is_created_private(cache_dir):
    d = kernel_cache.kernel_dir()
    assert d.parent == cache_dir and d.name == f"kernels-{kernel_cache.cache_key()}"
    assert _mode(cache_dir) == 0o700 and _mode(d) == 0o700
    meta = json.loads((d / "key.json").read_text())
    assert meta == kernel_cache.key_info()
    path, cacheable = kernel_cache.write_source("x.py", "x = 1\n")
    assert cacheable and path.parent == d / "launchers" and _mode(path.parent) == 0o700


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
def test_open_cache_dir_is_closed_and_foreign_one_refused(cache_dir, monkeypatch):
    cache_dir.mkdir(parents=True, mode=0o755)
    os.chmod(cache_dir, 0o775)
    kernel_cache.kernel_dir()
    assert _mode(cache_dir) == 0o700
    _forget()
    monkeypatch.setattr(os, "getuid", lambda: os.stat(cache_dir).st_uid + 1)
    with pytest.raises(kernel_cache.CacheUnavailable, match="another user"):
        kernel_cache.kernel_dir()
    # unusable: launchers still get a (private, temporary) source file, but no caching
    path, cacheable = kernel_cache.write_source("y.py", "y = 1\n")
    assert not cacheable and not path.is_relative_to(cache_dir)


def test_key_covers_kernel_sources_only(tmp_path, monkeypatch):
    """A copy of the package: editing a kernel module changes the key, editing the CLI does not."""
    pkg = tmp_path / "objrec"
    shutil.copytree(keys.PACKAGE_DIR, pkg, ignore=shutil.ignore_patterns("__pycache__", "data"))
    monkeypatch.setattr(keys, "PACKAGE_DIR", pkg)
    names = {p.relative_to(pkg).as_posix() for p in kernel_cache.kernel_sources()}
    assert {"kernels.py", "features/_surf_kernels.py", "features/_common_kernels.py", "prefilter/tree.py"} <= names
    assert "cli.py" not in names

    def key() -> str:
        for f in (keys.sources_digest, keys.key_info, keys.cache_key):
            f.cache_clear()
        return kernel_cache.cache_key()

    try:
        k0 = key()
        (pkg / "cli.py").write_text((pkg / "cli.py").read_text() + "\n# a comment\n")
        assert key() == k0
        common = pkg / "features" / "_common_kernels.py"
        common.write_text(common.read_text().replace("_ATAN_P1 = 57.283623713809675", "_ATAN_P1 = 57.0"))
        k1 = key()
        assert k1 != k0
    finally:
        monkeypatch.undo()
        key()


def test_every_jit_module_is_hashed():
    """Compiled code freezes what it reads from its module: every module that builds kernels is in the key."""
    hashed = set(kernel_cache.kernel_sources())
    for p in keys.PACKAGE_DIR.rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        if any(s in text for s in ("njit(", "cuda.jit(", "cached_njit", ".grid1d(", ".grid2d(", ".blocks(")):
            assert p in hashed, p


def test_compilation_is_announced_on_one_line(monkeypatch):
    out = io.StringIO()
    monkeypatch.setattr(announce, "_compiling", {"count": 0, "seconds": 0.0, "said": False})
    kernel_cache.announce_compilation(out)
    try:
        announce.compile_started(test_compilation_is_announced_on_one_line)
        announce.compile_finished(1.25)
        announce.compile_started(test_compilation_is_announced_on_one_line)
        announce.compile_finished(0.5)
        kernel_cache.finish_announcement()
        kernel_cache.finish_announcement()  # nothing more: the line is finished
    finally:
        kernel_cache.announce_compilation(None)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert text.startswith("objrec: compiled 2 kernels for this machine in 1.8 s, once: later runs load them")


def test_cache_info_and_clear_commands(cache_dir, capsys):
    stale = cache_dir / "kernels-0123456789abcdef"
    (stale / "numba").mkdir(parents=True)
    (stale / "numba" / "f.nbi").write_bytes(b"x" * 10)
    current = kernel_cache.kernel_dir()
    assert main(["cache", "info", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["root"] == str(cache_dir) and doc["current_key"] == kernel_cache.cache_key()
    assert {e["key"]: e["current"] for e in doc["entries"]} == {
        "0123456789abcdef": False,
        kernel_cache.cache_key(): True,
    }
    assert main(["cache", "info"]) == 0
    assert "stale" in capsys.readouterr().out
    assert main(["cache", "clear", "--stale"]) == 0
    assert not stale.exists() and current.exists()
    assert main(["cache", "clear"]) == 0
    assert "removed 1" in capsys.readouterr().out.splitlines()[-1]
    assert not current.exists() and cache_dir.exists()


def test_import_and_help_stay_light():
    """``import objrec`` and building the CLI parser load no Numba, OpenCV, scikit-learn or CuPy."""
    code = textwrap.dedent(
        """
        import sys
        import objrec, objrec.cli
        objrec.cli.build_parser()
        heavy = [m for m in ("numba", "cv2", "sklearn", "cupy", "scipy") if m in sys.modules]
        assert not heavy, heavy
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "objrec", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "cache" in r.stdout


# A later process loads what the first compiled. SURF on a small image (every SURF launcher) and a module-level
# kernel of the prefilter; prints Numba's per-dispatcher cache statistics.
_RUN = textwrap.dedent(
    """
    import hashlib, json, sys
    import numpy as np
    from objrec import kernel_cache
    kernel_cache.announce_compilation(sys.stderr)
    from objrec.features import _surf_kernels as K
    from objrec.features.surf import SURF
    from objrec.prefilter import tree
    yy, xx = np.mgrid[0:96, 0:96]
    img = (128 + 60 * np.sin(xx / 5.0) * np.cos(yy / 7.0) + 40 * ((xx // 16 + yy // 16) % 2)).astype(np.uint8)
    feats = SURF(100, n_octaves=2).detect_and_compute(img)
    n = len(feats)
    xy = np.asarray(feats.xy).tolist()
    desc = np.asarray(feats.descriptors, np.float64).tolist()
    X = np.zeros((3, 1), np.float32)
    i64 = np.zeros(1, np.int64)
    out = np.empty(3)
    tree._cascade_nb(X, i64, i64 - 1, i64 - 1, i64, np.zeros(1), np.zeros(1, np.uint8), np.ones(1), np.zeros(1), out)
    kernel_cache.finish_announcement()
    registries = "numba.np.linalg" in sys.modules  # installed by a context refresh, which loading skips
    # a kernel compiled after the loads (the compiler refreshes the context then) that allocates arrays
    import numba
    fresh = numba.njit(lambda k: np.arange(k).astype(np.float64).cumsum())(5).tolist()
    fns = dict(K.kernels_for("cpu"), cascade=tree._cascade_nb)
    stats = {k: [sum(f.stats.cache_hits.values()), sum(f.stats.cache_misses.values())] for k, f in fns.items()}
    print(json.dumps({"n": n, "xy": xy, "desc": desc, "registries": registries, "fresh": fresh, "stats": stats,
                      "dir": str(kernel_cache.kernel_dir())}))
    """
)


def _run(env: dict) -> tuple[dict, str]:
    r = subprocess.run([sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, timeout=1800)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr


@pytest.mark.slow
def test_second_process_loads_kernels_from_cache(tmp_path):
    env = dict(os.environ, **{kernel_cache.ENV_VAR: str(tmp_path / "cache")})
    first, err1 = _run(env)
    assert first["n"] > 0
    assert all(miss == 1 and hit == 0 for hit, miss in first["stats"].values()), first["stats"]
    assert err1.count("objrec: compiled ") == 1 and "kernels for this machine in" in err1
    index = sorted(Path(first["dir"]).rglob("*.nbi"))
    assert len(index) >= len(first["stats"])
    before = {p: p.stat().st_mtime_ns for p in index}
    second, err2 = _run(env)
    assert second["n"] == first["n"] and second["dir"] == first["dir"]
    # Cached code gives the compiled code's keypoints and descriptors without installing Numba's registries.
    # The descriptor kernel may contract and reassociate (DESC_FASTMATH), and LLVM's JIT and its object-code
    # emission for the cache may choose different instructions on some CPUs: equal to float32 rounding.
    assert second["xy"] == first["xy"]
    np.testing.assert_allclose(second["desc"], first["desc"], rtol=0, atol=1e-6)
    assert first["registries"] and not second["registries"]
    assert first["fresh"] == second["fresh"] == [0.0, 1.0, 3.0, 6.0, 10.0]
    assert all(hit == 1 and miss == 0 for hit, miss in second["stats"].values()), second["stats"]
    assert "compiled" not in err2
    assert {p: p.stat().st_mtime_ns for p in index} == before  # nothing rewritten: nothing compiled


@pytest.mark.slow
def test_changed_kernel_source_is_compiled_again(tmp_path):
    """A copy of the package whose kernel module changes: the next process compiles instead of loading."""
    pkg_root = tmp_path / "src"
    shutil.copytree(REPO / "objrec", pkg_root / "objrec", ignore=shutil.ignore_patterns("__pycache__"))
    # run outside the repository (python -c puts the working directory first on the path)
    env = dict(os.environ, PYTHONPATH=str(pkg_root), **{kernel_cache.ENV_VAR: str(tmp_path / "cache")})
    code = textwrap.dedent(
        """
        import json, numpy as np
        from objrec.prefilter import tree
        from objrec import kernel_cache
        from objrec.kernel_cache import keys
        assert keys.PACKAGE_DIR.parent.name == "src", keys.PACKAGE_DIR
        X = np.zeros((3, 1), np.float32); i64 = np.zeros(1, np.int64); out = np.empty(3)
        tree._cascade_nb(X, i64, i64 - 1, i64 - 1, i64, np.zeros(1), np.zeros(1, np.uint8), np.ones(1),
                         np.zeros(1), out)
        s = tree._cascade_nb.stats
        print(json.dumps([sum(s.cache_hits.values()), sum(s.cache_misses.values()), kernel_cache.cache_key()]))
        """
    )

    def run() -> list:
        r = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600
        )
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    hits, misses, key0 = run()
    assert (hits, misses) == (0, 1)
    assert run() == [1, 0, key0]
    common = pkg_root / "objrec" / "features" / "_common_kernels.py"
    common.write_text(common.read_text() + "\n# changed\n")
    hits, misses, key1 = run()
    assert (hits, misses) == (0, 1) and key1 != key0
    assert not list((pkg_root / "objrec").rglob("*.nb[ic]"))  # nothing written beside the sources
