"""Process memory figures: they follow real allocations (the kernel's own accounting is the reference)."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from objrec.memory import peak_rss_bytes, report, rss_bytes


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="resident size from /proc is Linux only")
def test_touched_allocation_raises_current_and_peak_resident_size():
    before_now, before_peak = rss_bytes(), peak_rss_bytes()
    block = np.ones(64 << 20, np.uint8)  # 64 MiB, every page written
    during_now, during_peak = rss_bytes(), peak_rss_bytes()
    assert during_now - before_now >= 60 << 20
    # The high-water mark is updated by the kernel as pages are faulted in; allow a few pages of lag.
    assert during_peak >= during_now - (8 << 20) and during_peak >= before_peak
    del block
    assert rss_bytes() < during_now - (32 << 20)  # freed (large blocks go back to the system)
    assert peak_rss_bytes() >= during_peak  # the high-water mark stays
    r = report()
    assert r["peak_rss_mb"] >= r["rss_mb"] - 8 > 0
