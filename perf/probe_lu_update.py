#!/usr/bin/env python3
"""The mixed LU's float32 triangular work against its tensor-core products, at the shapes of its
first step (n, nb), on an idle GPU: what the row block's solve A12 := L11^-1 A12 costs as cuBLAS
trsm (what update/lu.py does) and as a product with the inverse of L11 in the update's
precision, the same for the no-pivoting LU's column solve A21 := A21 U11^-1, and the diagonal
block's factorization by cuSOLVER with and without pivots (and potrf, for scale).

    python3 perf/probe_lu_update.py --n 32768 --nb 1536 [--lowest half-x3] [--repeat 5]

Median of --repeat after one untimed call; host wall clock around each call, which ends with a
device synchronization. w = n - 2 nb (the trailing matrix beside the look-ahead column).
"""
from __future__ import annotations

import cupy as cp
import numpy as np

import hybridla.backend
from hybridla.backend import cuda as cuda_backend
from hybridla.backend.reduced import ReducedPrecisionOps

from probe_chol_update import PRODUCTS, arguments, timed  # beside this file


def main():
    args = arguments(__doc__)
    n, nb = args.n, args.nb
    w = n - 2 * nb
    ops = hybridla.backend.get_backend("cuda")
    lane = ops.lane("gpu:update")
    low = ops.matrix(n, n, np.float32, nb)
    rows = []
    try:
        reduced = ReducedPrecisionOps(ops, args.lowest, low)
        rng = cp.random.default_rng(0)
        filled = rng.standard_normal((n, 3 * nb), dtype=cp.float32) / np.float32(np.sqrt(nb))
        filled[:nb, :nb] += cp.eye(nb, dtype=cp.float32) * 4  # a diagonal block that needs no pivot
        cp.cuda.runtime.memcpy2D(low.ptr, low.ld * 4, filled.data.ptr, n * 4, n * 4, 3 * nb,
                                 cp.cuda.runtime.memcpyDeviceToDevice)
        diagonal = low.block(0, nb, 0, nb)
        row_block = low.block(0, nb, 2 * nb, 3 * nb)  # kb x nb, repeated to w columns below
        wide = low.block(0, nb, 2 * nb, n)
        below = low.block(nb, n, 0, nb)
        inverse = low.workspace("inverse", nb, nb)
        scratch = low.scratch(lane, nb, -(-nb // 4))
        product = low.block(nb, n, nb, 2 * nb)
        products = PRODUCTS.get(args.lowest, 1)

        def trsm(side, uplo, diag, block):
            def run():
                with lane:
                    ops.trsm(lane, side, uplo, "N", diag, 1, diagonal, block)
            return run

        def by_inverse(uplo, diag, block, left):
            def run():
                with lane:
                    ops.invert_triangular_blocks(lane, uplo, diag, diagonal, nb, inverse, scratch)
                    operands = (inverse, block) if left else (block, inverse)
                    reduced.gemm(lane, 1, *operands, 0, block)
            return run

        trsm_row_block, inverse_row_block = trsm("L", "L", "U", wide), \
            by_inverse("L", "U", wide, True)
        trsm_column, inverse_column = trsm("R", "U", "N", below), \
            by_inverse("U", "N", below, False)

        def update():
            with lane:
                reduced.gemm(lane, -1, below, row_block, 1, product)

        work = int(low.solver_workspace)
        info = low.extra_workspace("probe info", 4)
        pivots = low.extra_workspace("probe pivots", 4 * nb)
        copy = cp.empty((nb, nb), dtype=cp.float32, order="F")

        def refill():
            cp.cuda.runtime.memcpy2DAsync(copy.data.ptr, nb * 4, filled.data.ptr, n * 4, nb * 4,
                                          nb, cp.cuda.runtime.memcpyDeviceToDevice,
                                          lane.handle)

        def getrf(ipiv):
            def run():
                with lane:
                    refill()
                    cuda_backend.cusolverDn.sgetrf(lane.solver, nb, nb, copy.data.ptr, nb, work,
                                                   ipiv, info)
            return run

        def potrf():
            with lane:
                refill()
                need = cuda_backend.cusolverDn.spotrf_buffer_size(
                    lane.solver, cuda_backend._UPLO["L"], nb, copy.data.ptr, nb)
                cuda_backend.cusolverDn.spotrf(lane.solver, cuda_backend._UPLO["L"], nb,
                                               copy.data.ptr, nb,
                                               low.extra_workspace("potrf", need * 4), need, info)

        def rate(flops, s):
            return f"{flops / s / 1e12:7.1f} TFLOP/s"

        rows.append(("trsm L11^-1 A12, kb x w (float32 cuBLAS)",
                     timed(ops, trsm_row_block, args.repeat), nb * nb * (n - 2 * nb)))
        rows.append((f"inverse + gemm, kb x w ({args.lowest})",
                     timed(ops, inverse_row_block, args.repeat),
                     products * 2 * nb * nb * (n - 2 * nb)))
        rows.append(("trsm A21 U11^-1, (n-kb) x kb (float32)",
                     timed(ops, trsm_column, args.repeat), nb * nb * (n - nb)))
        rows.append((f"inverse + gemm, (n-kb) x kb ({args.lowest})",
                     timed(ops, inverse_column, args.repeat), products * 2 * nb * nb * (n - nb)))
        rows.append((f"update gemm (n-kb) x kb x kb ({args.lowest})",
                     timed(ops, update, args.repeat), products * 2 * nb * nb * (n - nb)))
        rows.append(("cuSOLVER sgetrf kb x kb, pivots", timed(ops, getrf(pivots), args.repeat),
                     2 * nb ** 3 / 3))
        rows.append(("cuSOLVER sgetrf kb x kb, no pivots", timed(ops, getrf(0), args.repeat),
                     2 * nb ** 3 / 3))
        rows.append(("cuSOLVER spotrf kb x kb", timed(ops, potrf, args.repeat), nb ** 3 / 3))
    finally:
        low.close()
    print(f"n {n}, nb {nb}, w {w}, {args.lowest}:")
    for name, seconds, flops in rows:
        print(f"  {name:48s} {seconds * 1e3:8.3f} ms  {rate(flops, seconds)}")


if __name__ == "__main__":
    main()
