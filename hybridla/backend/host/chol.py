"""The Cholesky family on the host: the diagonal blocks of the trailing update and the products
of a worker's spaced block columns (the cuda backend batches them; here one BLAS call per
block)."""
from __future__ import annotations

from .blas import gemm, herk


def herk_diagonal_blocks(lane, uplo, trans, alpha, A, C, nb, scratch=None, row_step=None):
    """The `uplo` triangles of C's diagonal blocks of nb += alpha op(A) op(A)^H for the
    matching rows ("N") or columns ("C") of A (the cuda backend's batched form; here one
    herk per block). With `row_step` (lower, "N" only): block i at rows i row_step of C and
    A, columns i nb of C, all of order nb."""
    if row_step is not None and row_step != nb:
        if uplo != "L" or trans != "N" or C.shape[1] % nb:
            raise ValueError("spaced diagonal blocks are lower, of A's rows, all of order nb")
        for i in range(C.shape[1] // nb):
            r = i * row_step
            herk(lane, uplo, trans, alpha, A[r:r + nb], 1, C[r:r + nb, i * nb:(i + 1) * nb])
        return
    for start in range(0, C.shape[0], nb):
        end = min(start + nb, C.shape[0])
        part = A[start:end] if trans == "N" else A[:, start:end]
        herk(lane, uplo, trans, alpha, part, 1, C[start:end, start:end])


def gemm_spaced_blocks(lane, alpha, A, B, beta, C, nb, row_step):
    """C's block columns i of nb (all full) := alpha A B_i^H + beta C_i, B_i the nb rows of B
    from row i row_step (the cuda backend's one batched call; here one gemm per block)."""
    for i in range(C.shape[1] // nb):
        r = i * row_step
        gemm(lane, alpha, A, B[r:r + nb], beta, C[:, i * nb:(i + 1) * nb], trans_b="C")
