"""The Cholesky family on the host: the diagonal blocks of the trailing update (the cuda
backend batches them; here one BLAS herk per block)."""
from __future__ import annotations

from .blas import herk


def herk_diagonal_blocks(lane, uplo, trans, alpha, A, C, nb, scratch=None):
    """The `uplo` triangles of C's diagonal blocks of nb += alpha op(A) op(A)^H for the
    matching rows ("N") or columns ("C") of A (the cuda backend's batched form; here one
    herk per block)."""
    for start in range(0, C.shape[0], nb):
        end = min(start + nb, C.shape[0])
        part = A[start:end] if trans == "N" else A[:, start:end]
        herk(lane, uplo, trans, alpha, part, 1, C[start:end, start:end])
