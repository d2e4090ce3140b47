#!/usr/bin/env python3
"""The LU preconditioner's application on the device, against the bandwidth it could have:
TriangularPreconditioner.apply (float64 vector in and out, the unit-lower and upper float32
solves replayed from their CUDA graph) with diagonal blocks of each --block, against cuBLAS
sgemv over the whole float32 square (the same bytes as the two triangles) and dgemv over a
float64 square (the refinement's product with A), and against one coupling gemv of each
block's first step alone.

    python3 perf/probe_precond_apply.py --n 32768 --block 1024 2048 4096 --repeat 5

Times: best of --repeat of --calls back-to-back applications (device synchronized around
them), per application.
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from device_clock import best_of  # perf/device_clock.py, beside this file
from hybridla.backend import get_backend
from hybridla.lapack._mixed import TriangularPreconditioner


def fill(block, array):
    item = array.dtype.itemsize
    cp.cuda.runtime.memcpy2D(block.ptr, block.ld * item, array.data.ptr, array.shape[0] * item,
                             array.shape[0] * item, array.shape[1],
                             cp.cuda.runtime.memcpyDeviceToDevice)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--block", type=int, nargs="+", default=[1024, 2048, 4096])
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    ops, n, calls = get_backend("cuda"), args.n, args.calls
    lane = ops.lane("gpu:panel")
    rng = cp.random.default_rng(0)
    # well-conditioned triangles: unit lower, upper with a dominant diagonal
    square = rng.standard_normal((n, n), dtype=cp.float32) / np.float32(n)
    square[cp.arange(n), cp.arange(n)] = 1
    x = np.random.default_rng(1).standard_normal((n, 1))

    def per_call(call, in_lane=True):
        """ms per call; in_lane: the calls need the lane entered (its lock is not reentrant:
        apply enters it itself)"""
        def many():
            if not in_lane:
                for _ in range(calls):
                    call()
                return
            with lane:
                for _ in range(calls):
                    call()
        return best_of(args.repeat, many) / calls * 1e3

    print(f"n {n}, {ops.device_name}\n\n| what | ms per application | GB/s |\n|---|---:|---:|")
    triangles = n * n * 4  # both triangles of float32
    for block in args.block:
        low = ops.matrix(n, n, np.float32, block)
        try:
            fill(low.block(0, n, 0, n), square)
            ones = np.ones(n)
            pre = TriangularPreconditioner(ops, low, n, 1, [("L", "N", "U"), ("U", "N", "N")],
                                           ones, ones)
            src = low.workspace("probe src", n, 1, dtype=np.float64)
            dst = low.workspace("probe dst", n, 1, dtype=np.float64)
            ops.from_host(lane, x, src)
            ms = per_call(lambda: pre.apply(src, dst), in_lane=False)
            print(f"| preconditioner, blocks of {block} | {ms:.3f} | {triangles / ms / 1e6:.0f} |")
            # the first coupling gemv alone: (n - block) x block
            T = low.block(block, n, 0, block)
            y = low.workspace("probe y", n, 1)
            ms = per_call(lambda: ops.gemm(lane, -1, T, ops.sub_block(y, 0, block, 0, 1), 1,
                                           ops.sub_block(y, block, n, 0, 1)))
            print(f"| its first coupling sgemv, {n - block} x {block} | {ms:.4f} | "
                  f"{(n - block) * block * 4 / ms / 1e6:.0f} |")
        finally:
            low.close()
    for dtype in (np.float32, np.float64):
        whole = ops.matrix(n, n, dtype, 2048)
        try:
            fill(whole.block(0, n, 0, n), square.astype(dtype))
            A = whole.block(0, n, 0, n)
            v = whole.workspace("probe v", n, 2, dtype=dtype)
            ms = per_call(lambda: ops.gemm(lane, 1, A, ops.sub_block(v, 0, n, 0, 1), 0,
                                           ops.sub_block(v, 0, n, 1, 2)))
            print(f"| {np.dtype(dtype).name} gemv, whole square | {ms:.3f} | "
                  f"{n * n * np.dtype(dtype).itemsize / ms / 1e6:.0f} |")
        finally:
            whole.close()


if __name__ == "__main__":
    main()
