#!/usr/bin/env python3
"""What host <-> device transfers cost for a host-resident matrix, the numbers behind the CPU
interface's streaming: pinning the user's array in place (cuMemHostRegister) against pageable
copies, for whole block columns (1-D) and for row blocks (2-D, the shape of our downloads);
and the host side of staging: the whole matrix copied block column by block column into a pinned
slot by T threads, as is (float64) and rounded to float32 (the mixed solvers' low copy).

    python3 perf/transfers.py [--n 32768] [--nb 512] [--threads 1 4 8 16]
"""
import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pycuda.autoprimaryctx  # noqa: F401
import pycuda.driver as drv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from hybridla.backend import _driver  # noqa: E402
from hybridla.bench import harness  # noqa: E402


def timed(fn, repeat=3):
    """Best of `repeat` calls of fn(), the context synchronized around each."""
    return harness.best_of(repeat, fn, sync=drv.Context.synchronize)


def copy2d(dev, host, m, ld, r0, r1, n, to_device, stream):
    c = drv.Memcpy2D()
    flat = host.reshape(-1, order="F")[r0:]
    if to_device:
        c.set_src_host(flat); c.src_pitch = m * 8; c.set_dst_device(int(dev) + r0 * 8); c.dst_pitch = ld * 8
    else:
        c.set_src_device(int(dev) + r0 * 8); c.src_pitch = ld * 8; c.set_dst_host(flat); c.dst_pitch = m * 8
    c.width_in_bytes = (r1 - r0) * 8
    c.height = n
    c(stream)


def staging_copies(host, nb, threads):
    """Seconds to copy all of `host` into one pinned slot of nb columns, block column by block
    column, on `threads` threads (each a share of the columns), as float64 and as float32."""
    n = host.shape[0]
    slot = drv.pagelocked_empty(n * nb * 8, np.uint8)
    for dtype in (np.float64, np.float32):
        view = slot[: n * nb * np.dtype(dtype).itemsize].view(dtype).reshape((n, nb), order="F")
        for count in threads:
            step = -(-nb // count)
            with ThreadPoolExecutor(count) as pool:
                started = time.perf_counter()
                for c0 in range(0, host.shape[1], nb):
                    block = host[:, c0:c0 + nb]
                    list(pool.map(lambda j: np.copyto(view[:, j:j + step], block[:, j:j + step]),
                                  range(0, block.shape[1], step)))
                seconds = time.perf_counter() - started
            print(f"staging copy to {np.dtype(dtype).name:7s} on {count:2d} threads: "
                  f"{seconds*1e3:8.1f} ms  {host.nbytes/1e9/seconds:6.1f} GB/s of matrix read")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=512)
    p.add_argument("--threads", type=int, nargs="+", default=[1, 4, 8, 16])
    a = p.parse_args()
    n, nb = a.n, a.nb
    host = np.ones((n, n), order="F")  # touched: pages exist, as a user's matrix's do
    staging_copies(host, 1024, a.threads)
    dev = drv.mem_alloc(n * n * 8)
    stream = drv.Stream(flags=1)
    gb = n * n * 8 / 1e9
    print(f"matrix {n} x {n} float64: {gb:.2f} GB")

    def both_directions(label, repeat):
        t = timed(lambda: drv.memcpy_htod_async(dev, host.reshape(-1, order="F"), stream), repeat)
        print(f"{label} H2D whole matrix (1-D):  {t*1e3:8.1f} ms  {gb/t:6.1f} GB/s")
        t = timed(lambda: [copy2d(dev, host, n, n, r, min(r + nb, n), n, False, stream)
                           for r in range(0, n, nb)], repeat)
        print(f"{label} D2H by row blocks of {nb} (2-D): {t*1e3:8.1f} ms  {gb/t:6.1f} GB/s")

    both_directions("pageable  ", 1)
    t0 = time.perf_counter()
    _driver.host_register(host.ctypes.data, host.nbytes)
    reg = time.perf_counter() - t0
    print(f"cuMemHostRegister:                      {reg*1e3:8.1f} ms  ({gb/reg:6.1f} GB/s of matrix)")
    both_directions("registered", 2)
    t0 = time.perf_counter()
    _driver.host_unregister(host.ctypes.data)
    print(f"cuMemHostUnregister:                    {(time.perf_counter()-t0)*1e3:8.1f} ms")
    # Can one copy span two registrations, or a registered and an unregistered range? And does
    # pinning in parallel threads go faster? (What a chunked, overlapped pinning would need.)
    half = (host.nbytes // 2) // 4096 * 4096
    base = host.ctypes.data
    flat = host.reshape(-1, order="F")
    for label, ranges in [("two registrations", [(0, half), (half, host.nbytes)]),
                          ("half registered", [(0, half)])]:
        for lo, hi in ranges:
            _driver.host_register(base + lo, hi - lo)
        for what, fn in [("1-D H2D", lambda: drv.memcpy_htod_async(dev, flat, stream)),
                         ("2-D D2H", lambda: copy2d(dev, host, n, n, 0, nb, n, False, stream))]:
            try:
                t = timed(fn, 1)
                print(f"copy spanning {label}, {what}: ok, {t*1e3:.1f} ms")
            except Exception as exc:
                print(f"copy spanning {label}, {what}: {type(exc).__name__}: {exc}")
        for lo, hi in ranges:
            _driver.host_unregister(base + lo)
    import threading
    quarter = (host.nbytes // 4) // 4096 * 4096
    bounds = [0, quarter, 2 * quarter, 3 * quarter, host.nbytes]
    ctx = pycuda.autoprimaryctx.context

    def pin(i):
        ctx.push()
        _driver.host_register(base + bounds[i], bounds[i + 1] - bounds[i])
        drv.Context.pop()
    t0 = time.perf_counter()
    threads = [threading.Thread(target=pin, args=(i,)) for i in range(4)]
    [th.start() for th in threads]
    [th.join() for th in threads]
    print(f"cuMemHostRegister in 4 threads:         {(time.perf_counter()-t0)*1e3:8.1f} ms")
    for i in range(4):
        _driver.host_unregister(base + bounds[i])
    dev.free()


if __name__ == "__main__":
    main()
