#!/usr/bin/env python3
"""What the host's memory gives the out-of-core mixed solve (issue 31, item 4): the rate of
the refinement's product A x on the host (lapack/_mixed_operators.host_product, one BLAS gemv
per block column), of the same product with block columns split over Python threads, of a
pure read, a copy and a float64 -> float32 rounding into pinned memory by the store's copy
threads, and of one DMA from pinned memory; and what pinning a range in place costs.

Usage (from the repository root, on the GPU machine; --gib of host memory twice over):

    python3 perf/probes/probe_host_bandwidth.py [--rows 100000] [--gib 16] [--threads 16]

Each rate is GB/s of the bytes the operation must touch (a read: the array; a copy: read plus
written), the best of --repeat.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

import numpy as np  # noqa: E402

from hybridla.bench.matrices import random_matrix  # noqa: E402,F401
from hybridla.lapack._mixed_operators import host_product  # noqa: E402


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def threaded_product(pool, a, x, threads, width):
    """A x with the block columns split into `threads` contiguous groups, one per thread,
    each summing its own partial product; the partials added at the end."""
    n = a.shape[1]
    bounds = np.linspace(0, n, threads + 1).astype(int)

    def part(j0, j1):
        return host_product(a[:, j0:j1], x[j0:j1], "N", None, a.dtype, width)
    parts = list(pool.map(lambda t: part(bounds[t], bounds[t + 1]), range(threads)))
    return sum(parts[1:], parts[0])


def threaded_rows_product(pool, a, x, threads):
    """A x with the rows split over threads, one gemv on each row band (strided)."""
    m = a.shape[0]
    bounds = np.linspace(0, m, threads + 1).astype(int)
    y = np.empty((m, x.shape[1]))

    def part(t):
        r0, r1 = bounds[t], bounds[t + 1]
        y[r0:r1] = a[r0:r1] @ x
    list(pool.map(part, range(threads)))
    return y


def threaded_copy(pool, dst, src, threads):
    step = -(-dst.shape[1] // threads)
    list(pool.map(lambda j: np.copyto(dst[:, j:j + step], src[:, j:j + step], casting="unsafe"),
                  range(0, dst.shape[1], step)))


def threaded_read(pool, a, threads):
    step = -(-a.shape[1] // threads)
    return sum(pool.map(lambda j: float(a[:, j:j + step].sum()), range(0, a.shape[1], step)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100000)
    parser.add_argument("--gib", type=float, default=16)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=3)
    opts = parser.parse_args()
    m, T, rep = opts.rows, opts.threads, opts.repeat
    n = int(opts.gib * 2**30 / 8 / m)
    a = np.empty((m, n), order="F")
    rng = np.random.default_rng(0)
    for j0 in range(0, n, 1024):
        a[:, j0:j0 + 1024] = rng.standard_normal((m, min(1024, n - j0)))
    gb = a.nbytes / 1e9
    x = rng.standard_normal((n, 1))
    pool = ThreadPoolExecutor(T)
    print(f"A {m} x {n} float64, {gb:.1f} GB; {T} threads; best of {rep}", flush=True)
    ref = host_product(a, x, "N", None, a.dtype, 512)

    rows = []
    for width in (512, 4096):
        t = best(lambda: host_product(a, x, "N", None, a.dtype, width), rep)
        rows.append((f"host_product, width {width} (one BLAS gemv a block column)", gb / t))
    for threads in (4, T):
        y = threaded_product(pool, a, x, threads, 512)
        assert np.allclose(y, ref)
        t = best(lambda: threaded_product(pool, a, x, threads, 512), rep)
        rows.append((f"block columns over {threads} threads, gemv width 512", gb / t))
    y = threaded_rows_product(pool, a, x, T)
    assert np.allclose(y, ref)
    t = best(lambda: threaded_rows_product(pool, a, x, T), rep)
    rows.append((f"row bands over {T} threads, one gemv each", gb / t))
    t = best(lambda: threaded_read(pool, a, T), rep)
    rows.append((f"read (sum) over {T} threads", gb / t))

    b = np.empty_like(a, order="F")
    t = best(lambda: threaded_copy(pool, b, a, T), rep)
    rows.append((f"copy pageable -> pageable, {T} threads (read + write)", 2 * gb / t))
    del b
    try:
        import pycuda.autoprimaryctx  # noqa: F401
        import pycuda.driver as drv
    except Exception as exc:  # no GPU: the host rows only
        print(f"(no pycuda: {exc})")
        drv = None
    if drv is not None:
        slot_cols = 2048
        pinned = drv.pagelocked_empty((m, slot_cols), np.float64, order="F")
        pinned32 = drv.pagelocked_empty((m, slot_cols), np.float32, order="F")

        def stage(dst):
            for j0 in range(0, n - slot_cols + 1, slot_cols):
                threaded_copy(pool, dst, a[:, j0:j0 + slot_cols], T)
        full = (n // slot_cols) * slot_cols * m * 8 / 1e9
        t = best(lambda: stage(pinned), rep)
        rows.append((f"copy pageable -> pinned float64 slot of {slot_cols} columns, {T} threads "
                     "(read + write)", 2 * full / t))
        t = best(lambda: stage(pinned32), rep)
        rows.append((f"round pageable float64 -> pinned float32 slot, {T} threads "
                     "(read + written)", 1.5 * full / t))
        dev = drv.mem_alloc(pinned.nbytes)
        stream = drv.Stream()

        def dma():
            for _ in range(8):
                drv.memcpy_htod_async(dev, pinned, stream)
            stream.synchronize()
        dma()
        t = best(dma, rep)
        rows.append(("DMA pinned -> device, 8 slots", 8 * pinned.nbytes / 1e9 / t))
        # pinning a range of A in place (whole pages inside it), and unpinning it
        from hybridla.backend import _driver
        page = 4096
        lo = -(-a.ctypes.data // page) * page
        nbytes = (a.nbytes // 4) // page * page
        start = time.perf_counter()
        _driver.host_register(lo, nbytes)
        t_pin = time.perf_counter() - start
        start = time.perf_counter()
        _driver.host_unregister(lo)
        t_unpin = time.perf_counter() - start
        rows.append((f"cuMemHostRegister of {nbytes / 1e9:.1f} GB: {t_pin:.3f} s, unregister "
                     f"{t_unpin:.3f} s; GB/s pinned", nbytes / 1e9 / t_pin))
    print("| operation | GB/s |")
    print("|---|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
    main()
