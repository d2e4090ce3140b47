#!/usr/bin/env python3
"""The mixed Cholesky's tensor-core work alone, at the shapes of its first step (n, nb): how
near the update's GEMMs run to the rate of one large half GEMM, and what the critical-path
solve costs on an idle GPU.

    python3 perf/probe_chol_update.py --n 32768 --nb 1536 [--lowest half-x3] [--repeat 5]

Rows (median of --repeat after one untimed call; host wall clock around each call, which ends
with a device synchronization):
- one cuBLAS half GEMM (float32 sums) w x w x nb, w = n - 2 nb (the trailing matrix beside the
  look-ahead column): the reference rate;
- the reduced HERK of backend/reduced.py on the w x w lower triangle with a w x nb panel (its
  rounding included), the rate counted as w^2 nb flops per product (the triangle), times the
  products its precision takes (3 for half-x3);
- the off-diagonal solve's GEMM, (n - nb) x nb times an nb x nb inverse, in the same precision.
"""
from __future__ import annotations

import argparse
import statistics
import time

import cupy as cp
import numpy as np

import hybridla.backend
from half_gemm import half_gemm  # perf/half_gemm.py, beside this file
from hybridla.backend.reduced import ReducedPrecisionOps

PRODUCTS = {"half": 1, "bfloat16": 1, "tf32": 1, "single": 1, "half-x3": 3}


def timed(ops, fn, repeat):
    fn()
    ops.synchronize()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        ops.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def arguments(doc):
    """--n, --nb, --lowest, --repeat (this probe's and probe_lu_update.py's)."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=1536)
    p.add_argument("--lowest", default="half-x3")
    p.add_argument("--repeat", type=int, default=5)
    return p.parse_args()


def main():
    args = arguments(__doc__)
    n, nb = args.n, args.nb
    w = n - 2 * nb
    ops = hybridla.backend.get_backend("cuda")
    lane = ops.lane("gpu:update")
    low = ops.matrix(n, n, np.float32, nb)
    try:
        reduced = ReducedPrecisionOps(ops, args.lowest, low)
        rng = cp.random.default_rng(0)
        g = rng.standard_normal((n, nb), dtype=cp.float32)
        panel = low.block(2 * nb, n, 0, nb)
        cp.cuda.runtime.memcpy2D(panel.ptr, panel.ld * 4, g.data.ptr, n * 4, w * 4, nb,
                                 cp.cuda.runtime.memcpyDeviceToDevice)
        trailing = low.block(2 * nb, n, 2 * nb, n)
        half_a = cp.asarray(g[:w], dtype=cp.float16, order="F")
        out = cp.zeros((w, w), dtype=cp.float32, order="F")

        def one_gemm():
            half_gemm(lane, "T", w, w, nb, -1, half_a, w, half_a, w, 1, out, w)

        def herk():
            with lane:
                reduced.herk(lane, "L", "N", -1.0, panel, 1.0, trailing)

        below = low.block(nb, n, 0, nb)
        inverse = low.block(0, nb, nb, 2 * nb)
        result = low.block(nb, n, 2 * nb, 3 * nb) if 3 * nb <= n else None

        def solve_gemm():
            with lane:
                reduced.gemm(lane, 1.0, below, inverse, 0.0, result, trans_b="C")

        gemm_s = timed(ops, one_gemm, args.repeat)
        del out
        herk_s = timed(ops, herk, args.repeat)
        solve_s = timed(ops, solve_gemm, args.repeat) if result is not None else float("nan")
    finally:
        low.close()
    products = PRODUCTS.get(args.lowest, 1)
    print(f"n {n}, nb {nb}, trailing w {w}, {args.lowest}:")
    print(f"  one half GEMM w x w x nb:         {gemm_s * 1e3:8.3f} ms  "
          f"{2 * w * w * nb / gemm_s / 1e12:6.1f} TFLOP/s")
    print(f"  reduced HERK, w x w lower, k nb:  {herk_s * 1e3:8.3f} ms  "
          f"{products * w * w * nb / herk_s / 1e12:6.1f} TFLOP/s in {products} product(s) "
          f"(triangle flops)")
    print(f"  solve GEMM (n-nb) x nb x nb:      {solve_s * 1e3:8.3f} ms  "
          f"{products * 2 * (n - nb) * nb * nb / solve_s / 1e12:6.1f} TFLOP/s")


if __name__ == "__main__":
    main()
