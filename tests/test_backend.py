"""Backend selection: explicit CPU, clear errors for an unusable GPU, a logged fallback for auto."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from objrec import backend as B


def test_cpu_and_unknown():
    assert B.resolve_backend("cpu") == "cpu"
    assert B.resolve_backend("numba", extra=("numba",)) == "numba"
    with pytest.raises(ValueError, match="backend: expected one of"):
        B.resolve_backend("tpu")


def test_gpu_without_device_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(B, "_gpu_probe", lambda: (False, "CuPy is not importable"))
    with pytest.raises(B.BackendError, match="backend='gpu' requested but no GPU is usable: CuPy is not importable"):
        B.resolve_backend("gpu", "SURF")


def test_auto_falls_back_and_says_so_once(monkeypatch, caplog):
    monkeypatch.setattr(B, "_gpu_probe", lambda: (False, "no device"))
    monkeypatch.setattr(B, "_warned_fallback", set())
    with caplog.at_level(logging.INFO, logger="objrec"):
        assert B.resolve_backend("auto", "Thing") == "cpu"
        assert B.resolve_backend("auto", "Thing") == "cpu"
    assert sum("Thing: backend='auto' runs on the CPU (no device)" in r.message for r in caplog.records) == 1


def test_simulator_is_not_a_gpu(monkeypatch):
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "1")
    B._gpu_probe.cache_clear()
    try:
        assert B.gpu_available() is False
    finally:
        B._gpu_probe.cache_clear()


def test_array_module():
    a = np.zeros(3)
    assert B.get_array_module(a) is np and B.to_numpy(a) is a
