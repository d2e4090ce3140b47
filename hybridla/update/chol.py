"""The Cholesky off-diagonal solve and trailing update of one step, against backend operations,
for the factor stored in either triangle.

lower, A = L L^H, step k with diagonal block rows/columns k0:k1:
    A21 := A21 L11^-H                        trsm (right, lower, ^H)
    for a block column c0:c1 to the right:  A[c0:c1, c0:c1] -= A[c0:c1, K] A[c0:c1, K]^H  (herk)
                                             A[c1:, c0:c1]  -= A[c1:, K] A[c0:c1, K]^H     (gemm)
upper, A = U^H U: the same with rows and columns exchanged:
    A12 := U11^-H A12;  A[c0:c1, c0:c1] -= A[K, c0:c1]^H A[K, c0:c1];
                        A[c0:c1, c1:]  -= A[K, c0:c1]^H A[K, c1:]
Updating up to the last column (c1 = n) leaves the gemm empty: one herk does the whole
trailing triangle, which is how the bulk of a step's update runs.
"""
from __future__ import annotations


def solve_off_diagonal(ops, lane, A, uplo: str, k0: int, k1: int) -> None:
    """A21 := A21 L11^-H (lower) or A12 := U11^-H A12 (upper)."""
    n = A.n
    if uplo == "L":
        ops.trsm(lane, "R", "L", "C", "N", 1, A.block(k0, k1, k0, k1), A.block(k1, n, k0, k1))
    else:
        ops.trsm(lane, "L", "U", "C", "N", 1, A.block(k0, k1, k0, k1), A.block(k0, k1, k1, n))


def herk_update(ops, lane, A, uplo: str, k0: int, k1: int, c0: int, c1: int) -> None:
    """Update the block column (lower) or row (upper) c0:c1 with the finished panel k0:k1."""
    n = A.n
    if uplo == "L":
        panel_rows = A.block(c0, c1, k0, k1)
        ops.herk(lane, "L", "N", -1, panel_rows, 1, A.block(c0, c1, c0, c1))
        ops.gemm(lane, -1, A.block(c1, n, k0, k1), panel_rows, 1, A.block(c1, n, c0, c1),
                 trans_b="C")
    else:
        panel_cols = A.block(k0, k1, c0, c1)
        ops.herk(lane, "U", "C", -1, panel_cols, 1, A.block(c0, c1, c0, c1))
        ops.gemm(lane, -1, panel_cols, A.block(k0, k1, c1, n), 1, A.block(c0, c1, c1, n),
                 trans_a="C")


def finished_region(uplo: str, n: int, k0: int, k1: int):
    """(r0, r1, c0, c1) of the factor that step k0:k1 finishes: its block column (lower) or row."""
    return (k0, n, k0, k1) if uplo == "L" else (k0, k1, k0, n)


def update_region(uplo: str, n: int, k0: int, c0: int, c1: int):
    """(r0, r1, c0, c1) that `herk_update` of c0:c1 writes (the triangle, as a rectangle)."""
    return (c0, n, c0, c1) if uplo == "L" else (c0, c1, c0, n)


def herk_flops(n: int, k0: int, k1: int, c0: int, c1: int) -> float:
    """Real flops of `herk_update`: the triangle of the diagonal block and the gemm below it."""
    kb, width = k1 - k0, c1 - c0
    return float(width * (width + 1) * kb + 2 * (n - c1) * width * kb)
