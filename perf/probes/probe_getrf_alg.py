#!/usr/bin/env python3
"""cuSOLVER's float32 LU on the mixed LU's window shapes, by each algorithm it offers: the
legacy cusolverDnSgetrf (what backend/cuda.getrf_panel calls) and cusolverDnXgetrf with
cusolverDnSetAdvOptions(GETRF, ALG_0 | ALG_1), alone and with half GEMMs running on another
stream (as the LU's trailing update runs beside its panels). CUDA events around the getrf
on its own high-priority stream (the matrix restored by a device copy before each, outside
the events), best of --repeat.

    python3 perf/probes/probe_getrf_alg.py --shapes 4096x2048 2048x1024 32768x2048 --repeat 5
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np
from nvmath.bindings import cusolverDn

CUDA_R_32F = 0
ALGORITHMS = ("legacy", "alg0", "alg1")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["4096x2048", "2048x1024", "32768x2048"])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    # CUDA clamps a priority to the device's range: -100 is its greatest, 0 its least
    stream = cp.cuda.Stream(non_blocking=True, priority=-100)
    busy_stream = cp.cuda.Stream(non_blocking=True, priority=0)
    handle = cusolverDn.create()
    cusolverDn.set_stream(handle, stream.ptr)
    params = cusolverDn.create_params()
    info = cp.zeros(1, dtype=cp.int32)
    g = cp.random.default_rng(1).standard_normal((8192, 8192), dtype=cp.float32).astype(cp.float16)
    print("| shape | algorithm | alone (ms) | beside half GEMMs (ms) |\n|---|---|---:|---:|")
    for shape in args.shapes:
        m, n = (int(x) for x in shape.split("x"))
        source = cp.asfortranarray(cp.random.default_rng(0).standard_normal((m, n),
                                                                          dtype=cp.float32))
        a = cp.empty_like(source, order="F")
        legacy_work = cp.empty(cusolverDn.sgetrf_buffer_size(handle, m, n, a.data.ptr, m),
                               dtype=cp.float32)
        piv32 = cp.empty(min(m, n), dtype=cp.int32)
        piv64 = cp.empty(min(m, n), dtype=cp.int64)
        for algorithm in ALGORITHMS:
            if algorithm == "legacy":
                def call():
                    cusolverDn.sgetrf(handle, m, n, a.data.ptr, m, legacy_work.data.ptr,
                                      piv32.data.ptr, info.data.ptr)
            else:
                cusolverDn.set_adv_options(params, cusolverDn.Function.GETRF,
                                           0 if algorithm == "alg0" else 1)
                device_bytes, host_bytes = cusolverDn.xgetrf_buffer_size(
                    handle, params, m, n, CUDA_R_32F, a.data.ptr, m, CUDA_R_32F)
                device_work = cp.empty(max(device_bytes, 1), dtype=cp.uint8)
                host_work = np.empty(max(host_bytes, 1), dtype=np.uint8)

                def call(device_work=device_work, host_work=host_work,
                         device_bytes=device_bytes, host_bytes=host_bytes):
                    cusolverDn.xgetrf(handle, params, m, n, CUDA_R_32F, a.data.ptr, m,
                                      piv64.data.ptr, CUDA_R_32F, device_work.data.ptr,
                                      device_bytes, host_work.ctypes.data, host_bytes,
                                      info.data.ptr)
            timings = []
            for busy in (False, True):
                best = float("inf")
                for _ in range(args.repeat + 1):
                    cp.cuda.Device().synchronize()
                    with stream:
                        a[...] = source
                    if busy:
                        with busy_stream:
                            for _ in range(8):
                                g @ g
                    start, end = cp.cuda.Event(), cp.cuda.Event()
                    start.record(stream)
                    call()
                    end.record(stream)
                    end.synchronize()
                    best = min(best, cp.cuda.get_elapsed_time(start, end))
                    cp.cuda.Device().synchronize()
                timings.append(best)
            print(f"| {m} x {n} | {algorithm} | {timings[0]:.2f} | {timings[1]:.2f} |",
                  flush=True)
    cusolverDn.destroy_params(params)
    cusolverDn.destroy(handle)


if __name__ == "__main__":
    main()
