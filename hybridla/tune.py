"""`hybridla tune`: measure the rates the panel-placement cost model uses, on this machine."""
from __future__ import annotations

import time

import numpy as np

from .panel.lu import factor_panel
from .scheduler.plan import device_settings, panel_flops


def _best_of(repeats, fn):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def measure_rates(backend, n: int, nb: int) -> dict:
    """Rates for a panel of n x nb and a trailing update of n x n x nb, float64. Transfers are
    measured from pinned host memory, as the engine copies (CPU panels use pinned buffers, large
    host matrices are pinned as they upload), and from pageable memory for the small ones. The
    block sizes stay the tuning table's: `nb` here only sizes the measurement (perf/sweep.py
    measures block sizes)."""
    rng = np.random.default_rng(0)
    panel = np.asfortranarray(rng.standard_normal((n, nb)))
    cpu = _best_of(3, lambda: factor_panel(panel.copy(order="F")))
    entry = {"cpu_panel_gflops": round(panel_flops(n, nb) / cpu / 1e9, 1)}
    if not backend.has_device:
        return entry
    a = np.asfortranarray(rng.standard_normal((n, n)))
    A = backend.host_matrix(a, np.empty_like(a, order="F"), nb, settings=device_settings())
    try:
        h2d, d2h = backend.lane("copy:h2d"), backend.lane("copy:d2h")
        gpu = backend.lane("gpu:update")

        def timed(lane, fn):
            def run():
                with lane:
                    fn(lane)
                backend.synchronize()
            return _best_of(3, run)

        up_pageable = timed(h2d, lambda lane: A.upload_block(lane, 0, n, 0, n))
        A.plan_pin_pieces(1)
        A.pin_piece(0)
        up = timed(h2d, lambda lane: A.upload_block(lane, 0, n, 0, n))
        down = timed(d2h, lambda lane: A.download_rows(lane, 0, n))
        gpu_panel = timed(gpu, lambda lane: backend.getrf_panel(lane, A, 0, 0, 0, nb))
        gemm = timed(gpu, lambda lane: backend.gemm(lane, -1, A.block(nb, n, 0, nb),
                                                     A.block(0, nb, nb, n), 1, A.block(nb, n, nb, n)))
    finally:
        A.close()
    nbytes = n * n * 8
    entry.update(gpu_panel_gflops=round(panel_flops(n, nb) / gpu_panel / 1e9, 1),
                 gpu_gemm_gflops=round(2 * (n - nb) ** 2 * nb / gemm / 1e9, 1),
                 h2d_gbps=round(nbytes / up / 1e9, 1),
                 h2d_pageable_gbps=round(nbytes / up_pageable / 1e9, 1), d2h_gbps=round(nbytes / down / 1e9, 1))
    return entry
