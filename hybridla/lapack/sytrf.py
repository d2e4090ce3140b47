"""sytrf, sytrs, sycon, lansy: a symmetric indefinite matrix by Bunch-Kaufman pivoting, on a
device backend (the host's forms are scipy's own LAPACK calls, _basic.py).

    sytrf:  P A P^T = L D L^T (uplo "L") or U D U^T ("U"), D block diagonal (1 x 1 and 2 x 2
            blocks), in place on the `uplo` triangle: cuSOLVER <t>sytrf, LAPACK's layout
            and pivots (1-based, negative for a 2 x 2 block), info as LAPACK's
    sytrs:  X := A^-1 B with those factors: cuSOLVER Xsytrs (the 64-bit API, so the pivots
            are widened to int64 once, on the host: n entries)
    sycon:  rcond = 1 / (||A||_1 est ||A^-1||_1), gecon.py's Hager-Higham estimator driving
            sytrs; A^T = A, so its adjoint product is A^-H x = conj(A^-1 conj(x))
    lansy:  ||A||_1 of the symmetric (Hermitian) matrix one triangle holds: the other triangle
            filled in first (`symmetrize`), then the store's column sums

cuSOLVER factors complex *symmetric* matrices (c/zsytrf: A = A^T), not Hermitian ones: it has
no hetrf. `symmetrize(..., hermitian=True)` completes a Hermitian matrix from one triangle for
an LU instead (_structured.lacpy_hermitian; see _solve_device.py).
"""
from __future__ import annotations

import numpy as np

from .gecon import _estimate, _quick_return, _reciprocal

LANE = "gpu:update"


def ldl_ops(backend):
    """The backend's structured-solve family (`backend.ldl`: the cuda backend's cuda/ldl.py);
    a backend without one takes host arrays only (scipy's paths)."""
    if backend.ldl is None:
        raise NotImplementedError(f"the {backend.name!r} backend has no device LDL^T "
                                  f"operations (host arrays take scipy's paths)")
    return backend.ldl


def sytrf(backend, A, uplo="L"):
    """Factor the store A's `uplo` triangle in place. Returns (ipiv, info): LAPACK's pivots
    (int32, 1-based, a negative pair for each 2 x 2 block) on the host, and info (0, or i > 0
    when D(i, i) is exactly zero). The pivots also stay in A, widened for sytrs."""
    n = A.n
    if n == 0:
        return np.zeros(0, np.int32), 0
    ops, lane = ldl_ops(backend), backend.lane(LANE)
    T = A.block(0, n, 0, n)
    ipiv, info = A.workspace("sytrf ipiv", n, 1, np.int32), A.workspace("sytrf info", 1, 1,
                                                                          np.int32)
    with lane:
        lwork = ops.sytrf_lwork(backend, lane, T)
    work = A.workspace("sytrf work", max(lwork, 1), 1)
    with lane:
        ops.sytrf(backend, lane, uplo, T, ipiv, work, info)
    # host wait: info decides whether there is a solve at all, and the pivots must widen
    status = int(backend.to_host(lane, info)[0, 0])
    pivots = np.array(backend.to_host(lane, ipiv)[:, 0], dtype=np.int32)
    if status < 0:
        raise ValueError(f"sytrf: argument {-status} is invalid")
    backend.from_host(lane, pivots.astype(np.int64).reshape(n, 1), _wide_pivots(A))
    return pivots, status


def _wide_pivots(F):
    return F.workspace("sytrs ipiv", F.n, 1, np.int64)


def sytrs(backend, F, B, uplo="L") -> None:
    """Overwrite the store B (n x nrhs) with A^-1 B; F holds sytrf's factors (and pivots)."""
    n, nrhs = F.n, B.n
    if n == 0 or nrhs == 0:
        return
    _solve_block(backend, F, B.block(0, n, 0, nrhs), uplo)


def _solve_block(backend, F, X, uplo):
    ops, lane = ldl_ops(backend), backend.lane(LANE)
    info = F.workspace("sytrs info", 1, 1, np.int32)
    with lane:
        ops.sytrs(backend, lane, uplo, F.block(0, F.n, 0, F.n), _wide_pivots(F), X, F, info)
    status = int(backend.to_host(lane, info)[0, 0])  # host wait (4 bytes, after the solve)
    if status != 0:
        raise ValueError(f"Xsytrs: argument {-status} is invalid")


def sycon(backend, F, anorm, uplo="L") -> float:
    """Reciprocal condition number estimate of A from sytrf's factors in F; anorm = ||A||_1
    (= ||A||_inf). LAPACK 3.12 gecon's quick returns (n = 0: 1, anorm 0 or inf: 0, NaN: NaN);
    0 when a product overflows (A singular to working precision)."""
    quick = _quick_return(F.n, anorm)
    if quick is not None:
        return quick
    n = F.n
    x_block = F.workspace("condition estimate", n, 1)
    lane = backend.lane(LANE)

    def solve(x):  # A^-1 x: x up into a workspace column, Xsytrs there, back down
        backend.from_host(lane, np.asfortranarray(x.reshape(n, 1)), x_block)
        _solve_block(backend, F, x_block, uplo)
        return backend.to_host(lane, x_block).reshape(n)
    return _reciprocal(anorm, _estimate(symmetric_products(solve, F.dtype), n, F.dtype))


def symmetric_products(solve, dtype):
    """The estimator's solve(x, trans) from solve(x) = A^-1 x for a symmetric A (A^T = A):
    A^-H x = conj(A^-1 conj(x)), which is A^-1 x when A is real. (LAPACK's csycon / zsycon
    apply A^-1 for both; this is the adjoint the estimator's theory asks for.)"""
    complex_ = np.dtype(dtype).kind == "c"

    def both(x, trans):
        if trans == "N" or not complex_:
            return solve(x)
        return np.conj(solve(np.conj(x)))
    return both


def symmetrize(backend, A, uplo="L", hermitian=False) -> None:
    """The store A's triangle opposite `uplo` := the `uplo` triangle's transpose (conjugate
    transpose when `hermitian`), whose diagonal is then made real, as hetrf reads it): the whole
    symmetric or Hermitian matrix the triangle stands for, in place. sytrf never reads the
    other triangle, so a factorization may follow."""
    n = A.n
    if n == 0:
        return
    ops, lane = ldl_ops(backend), backend.lane(LANE)
    k = min(n, ops.MIRROR_BLOCK)
    scratch = A.workspace("symmetrize", k, k)
    with lane:
        ops.mirror_triangle(backend, lane, uplo, A.block(0, n, 0, n), scratch, hermitian)
        if hermitian and np.dtype(A.dtype).kind == "c":
            ops.real_diagonal(backend, lane, A.block(0, n, 0, n))


def lansy(backend, A, uplo="L", hermitian=False) -> float:
    """||A||_1 (= ||A||_inf) of the symmetric (Hermitian) matrix whose `uplo` triangle the store
    A holds, LAPACK lansy's "1": the triangle mirrored into the other (`symmetrize`, in place)
    and the columns summed by the store (its one-norm tracking; a host wait)."""
    symmetrize(backend, A, uplo, hermitian)
    A.track_one_norm()
    return A.one_norm()
