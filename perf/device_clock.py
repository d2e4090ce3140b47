"""The probes' clock: the host's perf_counter around a call with the device synchronized before
and after, best of `repeat` (perf/probe_butterfly.py, perf/probe_window_panel.py)."""
from __future__ import annotations

import time

import cupy as cp


def best_of(repeat, call) -> float:
    """Seconds of the fastest of `repeat` synchronized calls of `call()`."""
    seconds = float("inf")
    for _ in range(repeat):
        cp.cuda.Device().synchronize()
        started = time.perf_counter()
        call()
        cp.cuda.Device().synchronize()
        seconds = min(seconds, time.perf_counter() - started)
    return seconds
