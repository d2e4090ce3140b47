#!/usr/bin/env python3
"""A float32 LU leaf of at most 1024 rows and 512 columns (the window-pivoted LU's leaves) by our
kernel (cuda/getrf_short_panel.cu) and by cuSOLVER's getrf (device.short_panels false), alone
on the panel lane: CUDA events around the factorization only (the matrix restored before each
by a device copy outside them), best of --repeat. The leaf's interchanges are not applied to
other columns here (the LU's leaves add one laswp for that, the same for both).

    python3 perf/probe_short_panel.py --shapes 1024x32 1024x64 1024x512 512x256 --repeat 10
"""
from __future__ import annotations

import argparse
import warnings

import cupy as cp
import numpy as np

import hybridla
from hybridla.backend import get_backend


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shapes", nargs="+", default=["1024x32", "1024x64", "1024x128", "1024x256",
                                                   "1024x512", "512x512", "512x256"])
    p.add_argument("--repeat", type=int, default=10)
    args = p.parse_args()
    ops = get_backend("cuda")
    shapes = [tuple(int(v) for v in text.split("x")) for text in args.shapes]
    rows_most, cols_most = max(r for r, _ in shapes), max(c for _, c in shapes)
    rng = np.random.default_rng(0)
    source = cp.asarray(np.asfortranarray(rng.standard_normal((rows_most, cols_most)),
                                          np.float32), order="F")
    low = ops.matrix(rows_most, cols_most, np.float32, cols_most)
    lane = ops.lane("gpu:panel")
    warnings.simplefilter("ignore", DeprecationWarning)  # CuPy's ExternalStream
    stream = cp.cuda.ExternalStream(lane.handle)  # the lane's own stream, for its events
    print("| leaf (rows x columns) | ours (ms) | cuSOLVER (ms) | ratio |\n|---|---:|---:|---:|")
    try:
        for rows, cols in shapes:
            times = []
            for ours in (True, False):
                best = float("inf")
                with hybridla.config.set({"device.short_panels": ours}):
                    for _ in range(args.repeat + 1):  # the first: loading, workspaces
                        block = low.block(0, rows, 0, cols)
                        cp.cuda.runtime.memcpy2D(block.ptr, block.ld * 4, source.data.ptr,
                                                 rows_most * 4, rows * 4, cols,
                                                 cp.cuda.runtime.memcpyDeviceToDevice)
                        cp.cuda.Device().synchronize()
                        start, stop = cp.cuda.Event(), cp.cuda.Event()
                        start.record(stream)
                        with lane:
                            ops.getrf_leaf(lane, low, 0, 0, 0, cols, r1=rows)
                        stop.record(stream)
                        stop.synchronize()
                        best = min(best, cp.cuda.get_elapsed_time(start, stop))
                times.append(best)
            print(f"| {rows} x {cols} | {times[0]:.3f} | {times[1]:.3f} | "
                  f"{times[1] / times[0]:.2f}x |", flush=True)
    finally:
        low.close()


if __name__ == "__main__":
    main()
