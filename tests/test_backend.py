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


def test_cudasim_backend_needs_the_simulator(monkeypatch):
    monkeypatch.delenv("NUMBA_ENABLE_CUDASIM", raising=False)
    with pytest.raises(B.BackendError, match="SURF: backend='cudasim' needs NUMBA_ENABLE_CUDASIM=1"):
        B.resolve_backend("cudasim", "SURF", extra=("cudasim",))
    with pytest.raises(ValueError, match="backend: expected one of"):
        B.resolve_backend("cudasim", "Recognizer")  # only the extractors list it


# --------------------------------------------------------------------------- transfer counting


class _FakeDeviceArray:
    """Stands in for a device array: a host array behind ``copy_to_host`` (Numba's device-array method)."""

    def __init__(self, host: np.ndarray) -> None:
        self._host = np.array(host)
        self.shape, self.nbytes = self._host.shape, self._host.nbytes

    def copy_to_host(self) -> np.ndarray:
        return self._host.copy()


class _FakeModule:
    """An array module in CuPy's place: ``asarray`` of host data makes a fake device array."""

    __name__ = "fakecupy"
    ndarray = _FakeDeviceArray

    @staticmethod
    def asarray(a):
        return a if isinstance(a, _FakeDeviceArray) else _FakeDeviceArray(np.asarray(a))


def test_transfer_counter_counts_nothing_on_numpy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    with B.TransferCounter() as tc:
        assert B.to_numpy(a) is a
        assert B.to_device(a, np) is a
        assert B.to_scalar(a[1:2, 2:3]) == 6.0
        assert isinstance(B.to_numpy([1, 2]), np.ndarray)
    assert (tc.uploads, tc.downloads, tc.upload_bytes, tc.download_bytes) == (0, 0, 0, 0)
    assert not B.is_device_array(a)


def test_transfer_counter_bookkeeping_with_a_fake_device():
    fake = _FakeModule()
    frame = np.zeros((48, 64), np.uint8)
    with B.TransferCounter() as outer:
        d = B.to_device(frame, fake)
        assert B.to_device(d, fake) is d  # already there: no copy
        with B.TransferCounter() as inner:
            back = B.to_numpy(d)
            flag = B.to_scalar(fake.asarray(np.array([True])))
    np.testing.assert_array_equal(back, frame)
    assert flag is True and B.is_device_array(d)
    assert (outer.uploads, outer.upload_bytes) == (1, frame.nbytes)
    assert (outer.downloads, outer.download_bytes) == (2, frame.nbytes + 1)
    assert (inner.uploads, inner.downloads, inner.download_bytes) == (0, 2, frame.nbytes + 1)
    assert [t.direction for t in outer.transfers] == ["h2d", "d2h", "d2h"]
    assert outer.transfers[0] == B.Transfer("h2d", frame.nbytes, (48, 64))
    with B.TransferCounter() as after:
        B.to_numpy(d)
    assert after.downloads == 1 and outer.downloads == 2  # a closed counter stops counting


def test_transfer_counter_threads():
    import threading

    fake = _FakeModule()
    d = fake.asarray(np.zeros(8, np.float64))
    with B.TransferCounter() as mine, B.TransferCounter(all_threads=True) as every:
        t = threading.Thread(target=B.to_numpy, args=(d,))
        t.start()
        t.join()
        B.to_numpy(d)
    assert mine.downloads == 1  # its own thread only
    assert every.downloads == 2
