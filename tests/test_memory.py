"""Process memory figures: they follow real allocations (the kernel's own accounting is the reference)."""

from __future__ import annotations

import mmap
import sys

import numpy as np
import pytest

from objrec.memory import peak_rss_bytes, report, rss_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident size from /proc is Linux only")
def test_touched_allocation_raises_current_and_peak_resident_size():
    # A fresh anonymous mapping, every page written: a heap allocation could reuse pages an allocator kept
    # resident from earlier tests, and then nothing new would be resident.
    before_now, before_peak = rss_bytes(), peak_rss_bytes()
    block = mmap.mmap(-1, 64 << 20)
    np.frombuffer(block, np.uint8)[:] = 1
    during_now, during_peak = rss_bytes(), peak_rss_bytes()
    assert during_now - before_now >= 60 << 20
    # The high-water mark is updated by the kernel as pages are faulted in; allow a few pages of lag.
    assert during_peak >= during_now - (8 << 20) and during_peak >= before_peak
    block.close()
    assert rss_bytes() < during_now - (32 << 20)  # unmapped: back to the system
    assert peak_rss_bytes() >= during_peak  # the high-water mark stays
    r = report()
    assert r["peak_rss_mb"] >= r["rss_mb"] - 8 > 0
