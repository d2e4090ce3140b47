"""getrs: solve A X = B, A^T X = B or A^H X = B with the LU factors of getrf (P A = L U).

    trans "N":  B := P^T B;  B := L^-1 B;  B := U^-1 B
    trans "T"/"C":  B := U^-op B;  B := L^-op B;  B := P B

Triangular solves are BLAS-3 on one lane; the whole solve is O(n^2 nrhs), so no task graph.
"""
from __future__ import annotations


def getrs(backend, LU, B, trans: str = "N") -> None:
    """Overwrite the tile store B (n x nrhs) with the solution; LU holds the factors and pivots."""
    n, nrhs = LU.n, B.n
    if n == 0 or nrhs == 0:
        return
    L = U = LU.block(0, n, 0, n)
    X = B.block(0, n, 0, nrhs)
    lane = backend.lane("gpu:update")
    with lane:
        if trans == "N":
            backend.laswp(lane, B, 0, nrhs, 0, n, forward=True, pivots_of=LU)
            backend.trsm(lane, "L", "L", "N", "U", 1, L, X)
            backend.trsm(lane, "L", "U", "N", "N", 1, U, X)
        else:
            backend.trsm(lane, "L", "U", trans, "N", 1, U, X)
            backend.trsm(lane, "L", "L", trans, "U", 1, L, X)
            backend.laswp(lane, B, 0, nrhs, 0, n, forward=False, pivots_of=LU)
