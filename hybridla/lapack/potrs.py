"""potrs: solve A X = B with the Cholesky factor of potrf.

    lower (A = L L^H):  B := L^-1 B;  B := L^-H B
    upper (A = U^H U):  B := U^-H B;  B := U^-1 B
"""
from __future__ import annotations


def potrs(backend, C, B, uplo: str = "L") -> None:
    """Overwrite the tile store B (n x nrhs) with the solution; C holds the factor."""
    n, nrhs = C.n, B.n
    if n == 0 or nrhs == 0:
        return
    factor, X = C.block(0, n, 0, n), B.block(0, n, 0, nrhs)
    first, second = ("N", "C") if uplo == "L" else ("C", "N")
    lane = backend.lane("gpu:update")
    with lane:
        backend.trsm(lane, "L", uplo, first, "N", 1, factor, X)
        backend.trsm(lane, "L", uplo, second, "N", 1, factor, X)
