"""gecon, pocon: the reciprocal condition number of A from its LU or Cholesky factors.

    rcond = 1 / (||A|| ||A^-1||)

||A|| (`anorm`) is the caller's, taken before factoring; ||A^-1||_1 is estimated from the factors
by Hager's method with Higham's refinements (LAPACK xLACN2), which needs only products
A^-1 x and A^-H x: each is two O(n^2) triangular solves with the factors. On the host backend
LAPACK's own gecon / pocon run on the factor array; on a device backend the estimator drives
the solves on a workspace column of the factors' store, the vector crossing the link each time.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.linalg import get_lapack_funcs

ITMAX = 5  # LAPACK xLACN2's iteration limit


def norm1(a) -> float:
    """||a||_1, the largest column sum of |a_ij| of a host array (LAPACK lange "1"; 0 if empty)."""
    a = np.asarray(a)
    if a.size == 0:
        return 0.0
    if a.flags.c_contiguous and not a.flags.f_contiguous:  # ||a||_1 = ||a^T||_inf, no copy
        return float(get_lapack_funcs(("lange",), (a,))[0]("I", a.T))
    return float(get_lapack_funcs(("lange",), (a,))[0]("1", a))


def gecon(backend, LU, anorm, norm="1", *, estimate=None) -> float:
    """Reciprocal condition number estimate of A from getrf's factors (P A = L U).

    Parameters
    ----------
    LU : tile store with the factors and pivots (as getrs takes it).
    anorm : float, ||A||_1 (norm "1" or "O") or ||A||_inf (norm "I") of A before factoring.
    estimate : None: LAPACK gecon on the host backend (LU.a), the estimator on a device
        backend; True: the estimator on any backend.

    Returns
    -------
    rcond : 1 / (anorm ||A^-1||), ||A^-1|| estimated in the same norm; 1.0 for n = 0, 0.0 if
        anorm is 0 or infinite or A is singular to working precision, NaN if anorm is NaN
        (LAPACK 3.12). ||A^-1||_inf = ||A^-H||_1, so norm "I" swaps the two products.
    """
    if norm not in ("1", "O", "I"):
        raise ValueError(f"norm must be '1', 'O' or 'I'; got {norm!r}")
    # ||A^-1|| = ||U^-1 L^-1 P|| = ||U^-1 L^-1||: P only permutes columns (LAPACK's gecon
    # leaves the interchanges out too), so each product is two triangular solves
    adjoint = _adjoint(LU.dtype)
    inverse = [("L", "N", "U"), ("U", "N", "N")]                # (L U)^-1 x
    inverse_adjoint = [("U", adjoint, "N"), ("L", adjoint, "U")]  # (L U)^-H x
    if norm == "I":  # ||A^-1||_inf = ||A^-H||_1
        inverse, inverse_adjoint = inverse_adjoint, inverse
    return _rcond(backend, LU, anorm, estimate, {"N": inverse, "C": inverse_adjoint},
                  lambda: get_lapack_funcs(("gecon",), dtype=LU.dtype)[0](LU.a, anorm, norm=norm),
                  "gecon")


def pocon(backend, C, anorm, uplo="L", *, estimate=None) -> float:
    """Reciprocal condition number estimate of a Hermitian positive definite A from potrf's
    factor (A = L L^H for uplo "L", U^H U for "U"); anorm = ||A||_1 = ||A||_inf, `estimate`
    and the result as gecon's (C.a on the host path).

    A^-H = A^-1, so both of the estimator's products are the same two triangular solves.
    """
    if uplo not in ("L", "U"):
        raise ValueError(f"uplo must be 'L' or 'U'; got {uplo!r}")
    adjoint = _adjoint(C.dtype)
    # A = L L^H: A^-1 x = L^-H (L^-1 x);  A = U^H U: A^-1 x = U^-1 (U^-H x)
    inverse = [(uplo, "N", "N"), (uplo, adjoint, "N")] if uplo == "L" else \
        [(uplo, adjoint, "N"), (uplo, "N", "N")]
    return _rcond(backend, C, anorm, estimate, {"N": inverse, "C": inverse},
                  lambda: get_lapack_funcs(("pocon",), dtype=C.dtype)[0](C.a, anorm, uplo=uplo),
                  "pocon")


def _rcond(backend, F, anorm, estimate, solves, lapack, name) -> float:
    """What gecon and pocon share: LAPACK's quick returns, then LAPACK's own routine on the host
    (`lapack()` -> (rcond, info)), or the estimator through `solves` (see _products)."""
    quick = _quick_return(F.n, anorm)
    if quick is not None:
        return quick
    if not _estimates(backend, estimate):
        rcond, info = lapack()
        return _checked(rcond, info, name)
    return _reciprocal(anorm, _estimate(_products(backend, F, solves), F.n, F.dtype))


def _estimate(solve, n, dtype) -> float:
    """||A^-1||_1 estimate, a lower bound, by Hager-Higham (LAPACK xLACN2, Higham 1988).

    solve(x, "N") -> A^-1 x and solve(x, "C") -> A^-H x for a host vector x of n entries.
    With y = A^-1 x for ||x||_1 = 1, xi = sign(y) and z = A^-H xi, the largest |z_j| picks the
    next x = e_j (a column of A^-1), until the signs repeat (real only), ||y||_1 stops growing,
    z's largest entry is the current column's, or ITMAX; then the alternative vector
    b_i = (-1)^i (1 + i/(n-1)) guards against the cases that fool the iteration:
    est = max(||A^-1 e_j||_1, 2 ||A^-1 b||_1 / (3n)). Signs are +-1, x/|x| for complex.
    A product that overflows (A singular to working precision) gives inf.
    """
    dtype = np.dtype(dtype)
    is_complex = np.issubdtype(dtype, np.complexfloating)
    tiny = np.finfo(dtype).tiny

    def product(x, trans):
        y = np.asarray(solve(np.asarray(x, dtype=dtype), trans), dtype=dtype).reshape(n)
        if not np.isfinite(y).all():
            raise _Overflow
        return y

    def sign(y):
        if not is_complex:
            return np.where(y >= 0, 1, -1).astype(dtype)
        size = np.abs(y)
        return np.where(size > tiny, y / np.where(size > tiny, size, 1), 1).astype(dtype)

    def unit(j):
        e = np.zeros(n, dtype=dtype)
        e[j] = 1
        return e

    try:
        y = product(np.full(n, 1 / n), "N")
        if n == 1:
            return float(abs(y[0]))
        est, xi = np.abs(y).sum(), sign(y)
        j = int(np.argmax(np.abs(product(xi, "C"))))
        for iteration in range(2, ITMAX + 1):
            y = product(unit(j), "N")
            est_old, est = est, np.abs(y).sum()
            if not is_complex and np.array_equal(sign(y), xi):
                break  # repeated sign vector: converged
            if est <= est_old or iteration == ITMAX:
                break  # cycling, or the last iteration (its z would not be used)
            xi = sign(y)
            z = product(xi, "C")
            j_last, j = j, int(np.argmax(np.abs(z)))
            if (z[j_last] if not is_complex else abs(z[j_last])) == abs(z[j]):
                break  # the current column is z's largest entry: a local maximum
        i = np.arange(n)
        b = np.where(i % 2 == 0, 1, -1) * (1 + i / (n - 1))
        alternative = 2 * (np.abs(product(b, "N")).sum() / (3 * n))
        return float(max(est, alternative))
    except _Overflow:
        return math.inf


class _Overflow(ArithmeticError):
    """A product A^-1 x that is not finite."""


def _adjoint(dtype) -> str:
    return "C" if np.issubdtype(dtype, np.complexfloating) else "T"


def _products(backend, F, solves):
    """solve(x, trans), the host vector x times the inverse the factors in F give: x goes up
    into a workspace column of F's store, the triangular solves `solves[trans]` ((uplo, op,
    diag) each, T the factor's n x n block) run there in place, and the result comes back down.
    No store of its own: an estimate costs its solves and copies, nothing more."""
    n = F.n
    T, x_block = F.block(0, n, 0, n), F.workspace("condition estimate", n, 1)
    lane = backend.lane("gpu:update")  # the solves' lane: the copies wait for it

    def solve(x, trans):
        backend.from_host(lane, np.asfortranarray(x.reshape(n, 1)), x_block)
        with lane:
            for uplo, op, diag in solves[trans]:
                backend.trsv(lane, uplo, op, diag, T, x_block)
        return backend.to_host(lane, x_block).reshape(n)
    return solve


def _estimates(backend, estimate) -> bool:
    return backend.has_device if estimate is None else bool(estimate)


def _quick_return(n, anorm):
    """LAPACK 3.12 gecon's answers that need no estimate, or None."""
    if anorm < 0:
        raise ValueError(f"anorm must be >= 0 (a norm); got {anorm}")
    if n == 0:
        return 1.0
    if math.isnan(anorm):
        return math.nan
    if anorm == 0 or math.isinf(anorm):
        return 0.0
    return None


def _reciprocal(anorm, ainvnm) -> float:
    """(1 / ||A^-1||) / ||A||, as LAPACK forms it; 0 when the estimate is 0 or not finite."""
    if ainvnm == 0 or not math.isfinite(ainvnm):
        return 0.0
    return float((1.0 / float(ainvnm)) / float(anorm))


def _checked(rcond, info, name) -> float:
    if info < 0:
        raise ValueError(f"{name}: argument {-info} is invalid")
    return float(rcond)
