"""getrs_ooc: solve A X = B, A^T X = B or A^H X = B with LU factors in host memory (P A = L U,
getrf's or getrf_ooc's), B going up once and the factors streaming through the device a block
column at a time. The skeleton (the working store, the copies, the triangular solves) is
_streamed_solve.StreamedSolve's.

For each column block of B that the budget holds at once (all of B where it fits):

    trans "N":       B := P B                 LAPACK laswp on the host copy, before it goes up
                     B := L^-1 B              L's block columns first to last (rows k0:n)
                     B := U^-1 B              U's block columns last to first (rows 0:k1)
    trans "T"/"C":   B := U^-op B             U's block columns first to last
                     B := L^-op B             L's block columns last to first
                     B := P^T B               on the host, once it is home

What it moves (s bytes an element, c column blocks of B, sum over block columns K of width kb):
    B up and X down once:                      2 n nrhs s
    L's and U's block columns, once per block of B:  c (n^2 + sum_K kb^2) s
L and U are each read once per solve: every block column of L is used by one trsm on its
diagonal block and one gemm on the rows below it, then never again; U's likewise, the other
way (for trans the order of the two sweeps reverses, and each block column's gemm takes the
finished rows of X instead of updating the rows still to solve, so it is still used once). The
diagonal blocks hold both L_KK and U_KK: they come up with each, sum_K kb^2 elements twice.

No info: like LAPACK's getrs, an exactly zero U(i, i) is not checked (X gets infs or NaNs).
"""
from __future__ import annotations

import functools

import numpy as np

from ..backend.host import nogil
from ._streamed_solve import StreamedSolve


def getrs_ooc(lu, pivots, b, plan, trans="N", trace=None):
    """Overwrite the host array `b` (n x nrhs, F-ordered) with op(A)^-1 b, A's LU factors in the
    host array `lu` (n x n, of b's dtype, any layout; only read) with their 0-based pivots,
    streamed within plan.memory_budget. Returns the run's trace."""
    n = lu.shape[0]
    with StreamedSolve(lu, b, plan, "getrs") as solve:
        pivots = np.asarray(pivots, dtype=np.int32)
        # B := P B before it goes up (trans "N"), B := P^T B once home (trans "T", "C")
        swap = functools.partial(_interchange, pivots=pivots, forward=trans == "N")
        for c0, c1 in solve.blocks(before=swap if trans == "N" else None,
                                   after=None if trans == "N" else swap, name="laswp"):
            if trans == "N":
                solve.trsm(n, "L", "N", "U", c0, c1)  # B := L^-1 B
                solve.trsm(n, "U", "N", "N", c0, c1)  # B := U^-1 B
            else:
                solve.trsm(n, "U", trans, "N", c0, c1)  # B := U^-op B
                solve.trsm(n, "L", trans, "U", c0, c1)  # B := L^-op B
        return solve.run(trace)


def _interchange(lane, columns, pivots, forward):
    """B's host columns := P B (forward) or P^T B: LAPACK laswp, in place (an F-ordered
    array's columns are contiguous), without the GIL (backend/host/nogil.py)."""
    if columns.size == 0 or pivots.size == 0:
        return
    nogil.laswp(columns, pivots, 0, pivots.size, forward)
