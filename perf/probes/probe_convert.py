#!/usr/bin/env python3
"""The mixed solvers' convert kernels (cuda/convert.cu) and the refinement's products with A
(hemv.cu, cuBLAS gemv), each alone on an n x n float64 matrix on the device.

    python3 perf/probes/probe_convert.py [--n 32768] [--repeat 5]

Rows: the median of --repeat calls after one untimed call, host wall clock around each call
(each ends with a device synchronization: the stats kernels bring their sums to the host).
equilibration is gesv_mixed's two passes for the scales (row_stats, col_stats), narrow its
rounded copy;
narrow_hermitian is posv_mixed's whole convert (one triangle); the two products are the
refinement's for posv_mixed (hemv, lower triangle) and gesv_mixed (gemv), with the vector's
copies.
"""
from __future__ import annotations

import argparse

import cupy as cp
import numpy as np

import hybridla.backend
from hybridla.bench import harness


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    n = args.n
    ops = hybridla.backend.get_backend("cuda")
    a = cp.asfortranarray(cp.random.default_rng(0).standard_normal((n, n)))
    A = ops.wrap(a)
    low = ops.matrix(n, n, np.float32, 1024)
    try:
        lane = ops.lane("gpu:update")
        whole, low_whole = A.block(0, n, 0, n), low.block(0, n, 0, n)
        ones = np.ones(n)
        x = np.random.default_rng(1).standard_normal((n, 1))
        work = A.workspace("refine", 2 * n, 1)
        calls = [
            ("equilibration (row_stats, col_stats)",
             lambda: ops.equilibration(lane, A, whole, True, True)),
            ("narrow", lambda: ops.narrow(lane, low, whole, low_whole, ones, ones, 65504.0)),
            ("narrow_hermitian L",
             lambda: ops.narrow_hermitian(lane, low, whole, low_whole, ones, "L", 65504.0)),
            ("hemv L (A x)", lambda: ops.apply_to_host(lane, whole, x, "N", "L", work)),
            ("gemv (A x)", lambda: ops.apply_to_host(lane, whole, x, "N", None, work)),
        ]
        print(f"| kernel (n = {n}, {ops.device_name}) | ms |")
        print("|---|---:|")
        for name, call in calls:
            seconds = harness.measure(lambda state, last: call(), harness.no_setup, args.repeat,
                                      warmup=1, sync=ops.synchronize).seconds
            print(f"| {name} | {seconds * 1e3:.3f} |", flush=True)
    finally:
        low.close()
        A.close()


if __name__ == "__main__":
    main()
