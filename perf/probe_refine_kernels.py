#!/usr/bin/env python3
"""The mixed solvers' refinement kernels alone, at order n on the GPU:

- the preconditioner M^-1 r = L^-H L^-1 r with a float32 Cholesky-shaped factor, one column:
  two cuBLAS trsm (what lapack/_mixed.TriangularPreconditioner did before 2026-11-23) against
  its blocked solves with the inverses of the diagonal blocks of nb (what it does now, replayed
  from a CUDA graph; and the same kernels launched one by one; their inversion,
  `invert_triangular_blocks`, timed on its own);
- the product with a float64 symmetric matrix stored in one triangle (CudaBackend.apply_to_host
  with uplo: cuda/hemv.cu) against the product with the whole square (gemv).

    python3 perf/probe_refine_kernels.py --n 32768 --nb 1536 [--repeat 5]

Times: host wall clock around each call, which returns with its work complete (the vector's
copies up and down included), median of --repeat after one untimed call. Each pair's results
are compared (largest difference relative to the largest entry).
"""
from __future__ import annotations

import argparse
import statistics
import time

import cupy as cp
import numpy as np

import hybridla.backend
from hybridla.lapack._mixed import TriangularPreconditioner


def timed(fn, repeat):
    fn()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def copy_into(block, array):
    """block := the square CuPy array's buffer read in column order (device to device, the
    block's leading dimension): the array itself when F-ordered, its transpose when C-ordered,
    which for the random and symmetric matrices here serves as well."""
    item = array.dtype.itemsize
    cp.cuda.runtime.memcpy2D(block.ptr, block.ld * item, array.data.ptr, array.shape[0] * item,
                             array.shape[0] * item, array.shape[1],
                             cp.cuda.runtime.memcpyDeviceToDevice)


def relative_difference(x, y):
    return float(np.abs(x - y).max() / np.abs(y).max())


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=32768)
    p.add_argument("--nb", type=int, default=1536)
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    n, nb = args.n, args.nb
    ops = hybridla.backend.get_backend("cuda")
    lane = ops.lane("gpu:panel")
    rng = cp.random.default_rng(0)
    r = np.random.default_rng(1).standard_normal((n, 1))

    # a well-conditioned lower triangle (the other one is never read)
    g = rng.standard_normal((n, n), dtype=cp.float32) / np.float32(n ** 0.5)
    g[cp.arange(n), cp.arange(n)] = 2
    low = ops.matrix(n, n, np.float32, nb)
    copy_into(low.block(0, n, 0, n), g)
    del g
    cp.get_default_memory_pool().free_all_blocks()
    try:
        ones = np.ones(n)
        solves = [("L", "N", "N"), ("L", "C", "N")]
        started = time.perf_counter()
        preconditioner = TriangularPreconditioner(ops, low, n, 1, solves, ones, ones)
        ops.synchronize()
        first = time.perf_counter() - started  # with the inversion and the first allocations
        invert = timed(lambda: preconditioner._invert_diagonal_blocks("L", "N"), args.repeat)
        blocked = timed(lambda: preconditioner(r), args.repeat)
        work = low.workspace("preconditioner", n, 1)

        def two_trsm():
            ops.from_host(lane, r.astype(np.float32), work)
            with lane:
                for uplo, trans, diag in solves:
                    ops.trsm(lane, "L", uplo, trans, diag, 1, low.block(0, n, 0, n), work)
            return ops.to_host(lane, work)

        def launched_one_by_one():  # the blocked solves without their CUDA graph
            ops.from_host(lane, r.astype(np.float32), work)
            with lane:
                for uplo, trans, diag in solves:
                    preconditioner._blocked_solve(lane, uplo, trans,
                                                  preconditioner.inverses[uplo, diag], work)
            return ops.to_host(lane, work)

        one_by_one = timed(launched_one_by_one, args.repeat)
        cublas = timed(two_trsm, args.repeat)
        difference = relative_difference(preconditioner(r), two_trsm().astype(np.float64))
    finally:
        low.close()
    print(f"n {n}, float32 factor, one column:")
    print(f"  two cuBLAS trsm (L, L^H), vector up and down: {cublas * 1e3:.3f} ms")
    print(f"  blocked solves with inverses of {nb}:          {blocked * 1e3:.3f} ms "
          f"(relative difference {difference:.1e}; a CUDA graph replayed)")
    print(f"  the same, their kernels launched one by one:   {one_by_one * 1e3:.3f} ms")
    print(f"  inverting the diagonal blocks:               {invert * 1e3:.3f} ms "
          f"(setting the preconditioner up the first time: {first * 1e3:.1f} ms)")

    s = rng.standard_normal((n, n), dtype=cp.float64)
    s = s + s.T  # symmetric, in full: gemv reads it all, hemv its lower triangle
    A = ops.matrix(n, n, np.float64, nb)
    copy_into(A.block(0, n, 0, n), s)
    del s
    cp.get_default_memory_pool().free_all_blocks()
    try:
        work = A.workspace("refine", 2 * n, 1)
        whole = A.block(0, n, 0, n)
        hemv = timed(lambda: ops.apply_to_host(lane, whole, r, "N", "L", work), args.repeat)
        gemv = timed(lambda: ops.apply_to_host(lane, whole, r, "N", None, work), args.repeat)
        difference = relative_difference(ops.apply_to_host(lane, whole, r, "N", "L", work),
                                         ops.apply_to_host(lane, whole, r, "N", None, work))
    finally:
        A.close()
    print(f"n {n}, float64 symmetric matrix, one column:")
    print(f"  the whole square (gemv):       {gemv * 1e3:.3f} ms")
    print(f"  the lower triangle (hemv.cu):  {hemv * 1e3:.3f} ms (relative difference "
          f"{difference:.1e})")


if __name__ == "__main__":
    main()
