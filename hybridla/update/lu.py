"""The LU trailing update of one step, for a range of block columns, against backend operations.

With the panel [A11; A21] = P [L11; L21] U11 factored (rows k0:, columns k0:k1), each block column
[A12; A22] to its right is brought up to date by

    [A12; A22] := P^T [A12; A22]      row interchanges (laswp)
    A12 := L11^-1 A12                 triangular solve (trsm, unit lower)
    A22 := A22 - A21 A12              the Schur-complement product (gemm): nearly all the flops
"""
from __future__ import annotations


def swap_left(ops, lane, A, k0: int, k1: int) -> None:
    """Apply the step's interchanges to the finished columns 0:k0 on its left (as LAPACK's getrf
    does, so that the returned L is P^T-ordered like scipy's)."""
    ops.laswp(lane, A, 0, k0, k0, k1)


def gemm_update(ops, lane, A, k0: int, k1: int, c0: int, c1: int) -> None:
    """Update columns c0:c1 with the panel of rows/columns k0:k1 (see the module docstring)."""
    ops.laswp(lane, A, c0, c1, k0, k1)
    eliminate(ops, lane, A.block(k0, k1, k0, k1), A.block(k1, A.m, k0, k1),
              A.block(k0, k1, c0, c1), A.block(k1, A.m, c0, c1))


def eliminate(ops, lane, L11, L21, A12, A22) -> None:
    """A12 := L11^-1 A12 (L11 unit lower);  A22 := A22 - L21 A12, on blocks wherever they are
    (out-of-core's left-looking update takes L from a block column streamed up apart from the
    columns it updates: lapack/getrf_ooc.py)."""
    ops.trsm(lane, "L", "L", "N", "U", 1, L11, A12)
    ops.gemm(lane, -1, L21, A12, 1, A22)


def update_flops(m: int, k0: int, k1: int, c0: int, c1: int) -> float:
    """Real flops of `gemm_update` (trsm kb^2 w + gemm 2 (m-k1) kb w); complex costs 4x."""
    kb, width = k1 - k0, c1 - c0
    return float(kb * kb * width + 2 * (m - k1) * kb * width)
