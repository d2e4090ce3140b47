#!/usr/bin/env python3
"""Where the preconditioner's inversion of its diagonal blocks goes: CudaBackend's recursive
halving (invert_triangular_blocks) on the n / b diagonal blocks of order b of a float32
triangle, for b = 64 (the leaves alone), 128, ..., --block: each order's time less the one
below is what its level of products costs.

    python3 perf/probe_inversion.py --n 32768 --block 2048 --repeat 5

Times: best of --repeat, device synchronized around each call (host clock).
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

from device_clock import best_of  # perf/device_clock.py, beside this file
from hybridla.backend import get_backend


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--block", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    ops, n = get_backend("cuda"), args.n
    lane = ops.lane("gpu:panel")
    square = cp.random.default_rng(0).standard_normal((n, n), dtype=cp.float32) / np.float32(n)
    square[cp.arange(n), cp.arange(n)] = 1
    low = ops.matrix(n, n, np.float32, args.block)
    try:
        block = low.block(0, n, 0, n)
        cp.cuda.runtime.memcpy2D(block.ptr, block.ld * 4, square.data.ptr, n * 4, n * 4, n,
                                 cp.cuda.runtime.memcpyDeviceToDevice)
        del square
        print(f"n {n}, {ops.device_name}\n\n| block order | uplo | ms |\n|---:|---|---:|")
        order = 64
        while order <= args.block:
            W = low.workspace("probe inverses", order, -(-n // order) * (order + 1))
            scratch = low.workspace("probe scratch", order, -(-n // 4))
            for uplo, diag in (("L", "U"), ("U", "N")):
                def call():
                    with lane:
                        ops.invert_triangular_blocks(lane, uplo, diag, block, order, W, scratch)
                print(f"| {order} | {uplo} | {best_of(args.repeat, call) * 1e3:.3f} |",
                      flush=True)
            order *= 2
    finally:
        low.close()


if __name__ == "__main__":
    main()
