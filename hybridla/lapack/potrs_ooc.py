"""potrs_ooc: solve A X = B with a Cholesky factor in host memory (potrf's or potrf_ooc's),
B going up once and the factor streaming through the device a block column at a time. The
skeleton (the working store, the copies, the triangular solves) is
_streamed_solve.StreamedSolve's.

For each column block of B that the budget holds at once (all of B where it fits):

    lower (A = L L^H):   B := L^-1 B      L's block columns first to last (rows k0:n)
                         B := L^-H B      the same block columns last to first
    upper (A = U^H U):   B := U^-H B      U's block columns first to last (rows 0:k1)
                         B := U^-1 B      the same block columns last to first

What it moves (s bytes an element, c column blocks of B, sum over block columns K of width kb):
    B up and X down once:                            2 n nrhs s
    the triangle, once per triangular solve:         c (n^2 + sum_K kb^2) s
Each triangular solve reads the triangle once: every block column is used by one trsm on its
diagonal block and one gemm on the rest of its rows (the second solve's gemm takes the finished
rows of X), then never again in that solve. Two solves, so the triangle crosses twice: the same
bytes as getrs_ooc's L and U. Only the `uplo` triangle is read (the other one's elements ride
along in the diagonal blocks, unused).
"""
from __future__ import annotations

from ._streamed_solve import StreamedSolve


def potrs_ooc(c, b, plan, uplo="L", trace=None):
    """Overwrite the host array `b` (n x nrhs, F-ordered) with A^-1 b, A's Cholesky factor in
    the `uplo` triangle of the host array `c` (n x n, of b's dtype, any layout; only read),
    streamed within plan.memory_budget. Returns the run's trace."""
    n = c.shape[0]
    first, second = ("N", "C") if uplo == "L" else ("C", "N")
    with StreamedSolve(c, b, plan, "potrs") as solve:
        for c0, c1 in solve.blocks():
            solve.trsm(n, uplo, first, "N", c0, c1)   # B := L^-1 B  (upper: U^-H B)
            solve.trsm(n, uplo, second, "N", c0, c1)  # B := L^-H B  (upper: U^-1 B)
        return solve.run(trace)
