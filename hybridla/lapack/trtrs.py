"""trtrs, trcon, lantr: a triangular system, its condition estimate and its norm, on any
backend's stores (solve's "upper triangular" / "lower triangular" forms on device arrays; no
factorization).

    trtrs:  info = the first i with T(i, i) = 0 (nothing solved then), else B := op(T)^-1 B,
            one BLAS-3 triangular solve (cuBLAS trsm on a device)
    trcon:  rcond = 1 / (||T|| est ||T^-1||) in the 1-norm or the inf-norm (||T^-1||_inf =
            ||T^-H||_1: the estimator's two products swap), gecon.py's Hager-Higham estimator
            driving trsv on a workspace column
    lantr:  ||T||_1 or ||T||_inf of the `uplo` triangle (the other one is not read): the
            triangle, or its transpose for "I", copied into a zeroed store of its own and the
            columns summed there (n^2 elements for the call's duration)
"""
from __future__ import annotations

import numpy as np

from .gecon import _adjoint, _estimate, _products, _quick_return, _reciprocal
from .sytrf import LANE, ldl_ops


def trtrs(backend, T, B, uplo="U", trans="N") -> int:
    """Overwrite the store B (n x nrhs) with op(T)^-1 B (trans "N", "T" or "C"), T the `uplo`
    triangle of the store T. Returns info as LAPACK's: i > 0 (1-based) when T(i, i) is exactly
    zero, B then left as it was (the diagonal comes to the host: n entries, a host wait)."""
    n, nrhs = T.n, B.n
    if n == 0:
        return 0
    zeros = np.flatnonzero(T.diagonal() == 0)
    if zeros.size:
        return int(zeros[0]) + 1
    if nrhs:
        lane = backend.lane(LANE)
        with lane:
            backend.trsm(lane, "L", uplo, trans, "N", 1, T.block(0, n, 0, n),
                         B.block(0, n, 0, nrhs))
    return 0


def trcon(backend, T, anorm, uplo="U", norm="1") -> float:
    """Reciprocal condition number estimate of the `uplo` triangle of T in `norm` ("1"/"O" or
    "I"), anorm = lantr's; LAPACK 3.12 gecon's quick returns; 0 when a product overflows."""
    if norm not in ("1", "O", "I"):
        raise ValueError(f"norm must be '1', 'O' or 'I'; got {norm!r}")
    quick = _quick_return(T.n, anorm)
    if quick is not None:
        return quick
    adjoint = _adjoint(T.dtype)
    solves = {"N": [(uplo, "N", "N")], "C": [(uplo, adjoint, "N")]}
    if norm == "I":  # ||T^-1||_inf = ||T^-H||_1
        solves = {"N": solves["C"], "C": solves["N"]}
    return _reciprocal(anorm, _estimate(_products(backend, T, solves), T.n, T.dtype))


def lantr(backend, T, uplo="U", norm="1") -> float:
    """||T||_1 (norm "1" or "O") or ||T||_inf ("I") of the `uplo` triangle of the store T (a
    host wait for the sum)."""
    if norm not in ("1", "O", "I"):
        raise ValueError(f"norm must be '1', 'O' or 'I'; got {norm!r}")
    n = T.n
    if n == 0:
        return 0.0
    M = backend.matrix(n, n, T.dtype, 1)
    try:
        lane, whole = backend.lane(LANE), M.block(0, n, 0, n)
        with lane:
            if norm == "I":  # row sums of T = column sums of T^T, whose triangle is the other
                ldl_ops(backend).transpose(backend, lane, T.block(0, n, 0, n), whole)
                _zero_strict_triangle(backend, lane, uplo, whole, n)
            else:
                backend.laset(lane, "A", 0, 0, whole)
                backend.lacpy(lane, uplo, T.block(0, n, 0, n), whole)
        M.track_one_norm()
        return M.one_norm()
    finally:
        M.close()


def _zero_strict_triangle(backend, lane, uplo, A, n):
    """The strictly upper ("U") or strictly lower ("L") triangle of the n x n block A := 0:
    laset of the block one column right (one row down), diagonal included, is exactly that."""
    if n < 2:
        return
    part = backend.sub_block(A, 0, n - 1, 1, n) if uplo == "U" else \
        backend.sub_block(A, 1, n, 0, n - 1)
    backend.laset(lane, uplo, 0, 0, part)
