"""solve's structured forms on device arrays: the GPU interface of assume_a "sym", "her",
"upper triangular", "lower triangular", "diagonal", "tridiagonal" and "banded" (_basic.solve
validates a and b and calls `solve_form`; host arrays take _basic._solve_structured).

    sym          the triangle mirrored into the other and ||A||_1 summed (lansy), Bunch-Kaufman
                 LDL^T by cuSOLVER <t>sytrf, the solve by cuSOLVER Xsytrs, sycon's estimate
    her          complex: cuSOLVER has no hetrf (its c/zsytrf factor complex *symmetric*
                 matrices), so the Hermitian matrix is completed from its triangle (diagonal
                 made real, as hetrf reads it) and solved as "gen" is: LU with partial
                 pivoting, getrs, gecon (twice hetrf's flops, at getrf's rate; as stable in
                 practice), with solve's engine options; real: "sym", as scipy
    upper, lower triangular   trtrs (cuBLAS trsm, no factorization), lantr + trcon
    diagonal     larscl2 (cuBLAS dgmm by the reciprocals), rcond = min|d| / max|d|
    tridiagonal  no GPU library routine fits (cuSOLVER has no gtsv; cuSPARSE's gtsv2 reports
                 no singularity, has no transposed solve and leaves no factors for gtcon):
                 the three diagonals come down (O(n)), scipy's gttrf/gttrs/gtcon run on the
                 host, x goes up
    banded       the same way, on the whole matrix (O(n^2) bytes: its bandwidth is found on
                 the host, as scipy's), gbsv and gbcon there

A 1 x 1 system of any form is "diagonal" (scipy's scalar path). `ops` is the backend of the
arrays (the cuda backend; the tests pass a host backend that stands in for one).
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from . import _common
from ._common import _check_memory, _shape_and_dtype
from ._decomp_lu import _getrf, lu_solve
from .lapack import _structured
from .lapack.larscl2 import larscl2
from .lapack.sytrf import lansy, sycon, sytrf, sytrs
from .lapack.trtrs import lantr, trcon, trtrs


def solve_form(ops, form, a, b, lower, transposed, overwrite_a, overwrite_b, backend, options):
    """x for the validated device arrays a (n x n) and b (n or n x nrhs, a's dtype) under
    `form` (one of _basic._ASSUME's values other than "gen" and "pos"). Returns (x, rcond,
    warn_below) as _basic._solve_structured: rcond None where there is no estimate (an empty
    system, ||A||_1 overflowing), and x None where rcond is 0 or NaN (nothing solved: the
    caller raises). An exactly singular matrix raises LinAlgError("Matrix is singular.")."""
    (n, _), dtype = _shape_and_dtype(a)
    b_shape, _ = _shape_and_dtype(b)
    warn_below = 0.5 if form == "banded" else 1.0  # scipy's thresholds, as _basic._HOST_FORMS
    if n == 0 or (len(b_shape) == 2 and b_shape[1] == 0):
        out = ops.empty((n, 1 if len(b_shape) == 1 else b_shape[1]), dtype, like=b)
        return (out.reshape(b_shape) if len(b_shape) == 1 else out), None, warn_below
    if form == "her" and dtype.kind != "c":
        form = "sym"  # as scipy: no real Hermitian routines
    if n == 1:
        form = "diagonal"
    uplo = "L" if lower else "U"
    if form == "her":
        x, rcond = _hermitian(ops, a, b, uplo, transposed, overwrite_a, overwrite_b, backend,
                              options)
    elif form == "sym":
        x, rcond = _symmetric(ops, a, b, uplo, overwrite_a, overwrite_b)
    elif form in ("upper", "lower"):
        x, rcond = _triangular(ops, a, b, form[0].upper(), transposed, overwrite_b)
    elif form == "diagonal":
        x, rcond = _diagonal(ops, a, b, overwrite_b)
    else:
        x, rcond = _on_host(ops, form, a, b, lower, transposed, overwrite_b)
    return x, rcond, warn_below


def _solve_into(ops, b, overwrite_b, solve):
    """(x, solve(B)): b's store B (b itself under overwrite_b where its layout allows, else a
    column-major copy of b's kind) overwritten by solve(B) -> info, freed whatever happens."""
    shape, _ = _shape_and_dtype(b)
    x, info = _structured.solve_into(ops, b, overwrite_b, solve)
    return (x.reshape(shape) if len(shape) == 1 else x), info


def _usable(rcond):
    return rcond is None or rcond > 0  # 0: singular; NaN: the factors overflowed


def _symmetric(ops, a, b, uplo, overwrite_a, overwrite_b):
    """LDL^T: a's triangle in a working store (a itself under overwrite_a, column-major)."""
    (n, _), dtype = _shape_and_dtype(a)
    _check_memory(ops, n, n, dtype, 1)
    A, _, _ = ops.device_matrix(a, 1, overwrite_a)  # a row-major a is factored in a copy
    try:
        anorm = lansy(ops, A, uplo)  # before sytrf overwrites the triangle
        _, info = sytrf(ops, A, uplo)
        if info > 0:
            raise LinAlgError("Matrix is singular.")
        # NaN: D overflowed; None: ||A||_1 overflows, and so would any rcond made with it
        rcond = (np.nan if not np.isfinite(A.diagonal()).all()
                 else sycon(ops, A, anorm, uplo) if np.isfinite(anorm) else None)
        if not _usable(rcond):
            return None, rcond
        x, _ = _solve_into(ops, b, overwrite_b, lambda B: sytrs(ops, A, B, uplo))
    finally:
        A.close()
    return x, rcond


def _column_major(x):
    return x.flags.f_contiguous if isinstance(x, np.ndarray) else _common._column_major(x)


def _hermitian(ops, a, b, uplo, transposed, overwrite_a, overwrite_b, backend, options):
    """The Hermitian matrix completed from a's triangle (in a under overwrite_a, column-major;
    else in a new array), then solve's "gen" path: A^T x = b is conj(A) x = b."""
    (n, _), dtype = _shape_and_dtype(a)
    in_place = overwrite_a and _column_major(a)
    if not in_place:
        _check_memory(ops, n, n, dtype, 1)
    w = a if in_place else ops.empty((n, n), dtype)
    _structured.lacpy_hermitian(ops, a, w, n, uplo, copy=not in_place)
    lu, piv, info, rcond, _ = _getrf(w, True, False, backend, options, condition=True)
    if info > 0:
        raise LinAlgError("Matrix is singular.")
    if not _usable(rcond):
        return None, rcond
    x = lu_solve((lu, piv), b, trans="T" if transposed else "N", overwrite_b=overwrite_b,
                 check_finite=False, backend=backend)
    return x, rcond


def _triangular(ops, a, b, uplo, transposed, overwrite_b):
    """trtrs on a's `uplo` triangle, read where it is (a column-major copy of a row-major a);
    then lantr + trcon in the norm scipy's trcon takes ("I" for a transposed solve)."""
    (n, _), dtype = _shape_and_dtype(a)
    _check_memory(ops, n, n, dtype, 1)  # lantr's zero-padded copy of the triangle
    T = ops.wrap(a)
    try:
        x, info = _solve_into(ops, b, overwrite_b,
                              lambda B: trtrs(ops, T, B, uplo, "T" if transposed else "N"))
        if info > 0:
            raise LinAlgError("Matrix is singular.")
        norm = "I" if transposed else "1"
        rcond = trcon(ops, T, lantr(ops, T, uplo, norm), uplo, norm)
    finally:
        T.close()
    return x, rcond


def _diagonal(ops, a, b, overwrite_b):
    """b / diag(a): the diagonal comes down (n entries) for the zero test and rcond."""
    A = ops.wrap(a)
    try:
        d = np.array(A.diagonal())
    finally:
        A.close()
    if (d == 0).any():
        raise LinAlgError("Matrix is singular.")
    x, _ = _solve_into(ops, b, overwrite_b, lambda B: larscl2(ops, d, B))
    size = np.abs(d)
    return x, float(size.min() / size.max())


def _on_host(ops, form, a, b, lower, transposed, overwrite_b):
    """"tridiagonal" and "banded": scipy's host path (_basic's) on what comes down of a (three
    diagonals, or all of it) and on b; x goes up into b's store."""
    from ._basic import _banded, _gtsv  # here: _basic imports this module
    (n, _), _ = _shape_and_dtype(a)
    if form == "tridiagonal":
        dl, d, du = _structured.gtdiag_to_host(ops, a, n)
    else:
        dense = _structured.lacpy_to_host(ops, a, n)
    rcond = []

    def host_solve(rhs):
        x, r = (_gtsv(dl, d, du, rhs, transposed, True) if form == "tridiagonal"
                else _banded(dense, rhs, lower, transposed, True, True))
        rcond.append(r)
        return x
    x, _ = _solve_into(ops, b, overwrite_b,
                       lambda B: _structured.solve_on_host(ops, B, n, host_solve))
    return x, rcond[0]
