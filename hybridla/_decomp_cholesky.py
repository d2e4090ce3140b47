"""Cholesky: cho_factor, cholesky and cho_solve (scipy.linalg._decomp_cholesky)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from . import backend as _backends
from ._common import (
    _check_triangular_solve_shapes,
    _common_dtype,
    _flag,
    _device_solve,
    _factor,
    _host_matrix,
    _host_rhs,
    is_device_array,
)
from .lapack import pocon, potrf, potrs


# -- Cholesky ------------------------------------------------------------------------------------
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
               lookahead=None, panel=None, trace=None, progress=False):
    """Cholesky factorization of a Hermitian positive definite matrix, as scipy.linalg.cho_factor.

    Returns (c, lower): the factor in the `lower` (or upper) triangle of c; only that triangle of
    a is read, and the other triangle of c keeps what a held there (scipy documents it as
    arbitrary). Not positive definite -> LinAlgError naming the failing leading minor, as scipy.
    Engine options as lu_factor's (configuration keys under "cho.")."""
    lower, overwrite_a = _flag("lower", lower), _flag("overwrite_a", overwrite_a)
    c, _, _ = _potrf(a, lower, overwrite_a, check_finite, backend,
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress))
    return c, lower


def cholesky(a, lower=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
             lookahead=None, panel=None, trace=None):
    """The Cholesky factor U (A = U^H U) or, with lower=True, L (A = L L^H), as
    scipy.linalg.cholesky: the other triangle is zero (also when overwrite_a puts the factor in
    a itself)."""
    lower, overwrite_a = _flag("lower", lower), _flag("overwrite_a", overwrite_a)
    c, _, _ = _potrf(a, lower, overwrite_a, check_finite, backend,
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))
    if is_device_array(c):
        _backends.get_backend("cuda").zero_triangle(c, upper=lower)
    else:
        _zero_triangle(c, upper=lower)
    return c


def _zero_triangle(c, upper, width=512):
    """The strictly upper (or lower) triangle of the square host array c := 0, in place, a block
    of columns at a time (np.triu / np.tril of the whole would make an n x n copy)."""
    n = c.shape[0]
    for c0 in range(0, n, width):
        c1 = min(c0 + width, n)
        if upper:
            c[:c0, c0:c1] = 0
            c[c0:c1, c0:c1] = np.tril(c[c0:c1, c0:c1])
        else:
            c[c1:, c0:c1] = 0
            c[c0:c1, c0:c1] = np.triu(c[c0:c1, c0:c1])


def _potrf(a, lower, overwrite_a, check_finite, backend, options, condition=False, then=None):
    """Validate, plan and run potrf; returns (c, rcond, then_result): rcond the 1-norm reciprocal
    condition estimate from the factor where it is (pocon) when `condition`, else None;
    `then(backend, C)` as _getrf's. Not positive definite raises LinAlgError naming the minor."""
    uplo = "L" if lower else "U"

    def driver(A, plan):
        if condition:
            A.track_one_norm()
        info, trace = potrf(A, plan, uplo)
        rcond = result = None
        if condition and info == 0:
            anorm = A.one_norm()  # NaN: the factor overflowed; None: ||A||_1 overflows
            rcond = (np.nan if not np.isfinite(A.diagonal()).all()
                     else pocon(plan.backend, A, anorm, uplo) if np.isfinite(anorm) else None)
        if then is not None and info == 0 and (rcond is None or rcond > 0):
            result = then(plan.backend, A)
        return info, (rcond, result), trace
    c, info, extra = _factor(a, overwrite_a, check_finite, backend, options, "cho", driver,
                             square=True, keep_other_triangle=True)
    if info > 0:
        raise LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    rcond, result = (1.0 if condition else None, None) if extra is None else extra
    return c, rcond, result


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True, *, backend=None):
    """Solve A x = b with the factor from cho_factor, as scipy.linalg.cho_solve. x has the dtype
    where c and b meet (scipy's)."""
    c, lower = c_and_lower
    _backends.check_name(backend)
    lower, overwrite_b = _flag("lower", lower), _flag("overwrite_b", overwrite_b)
    uplo = "L" if lower else "U"
    if is_device_array(c) != is_device_array(b):
        raise ValueError("c and b must both be host arrays or both device arrays")
    if is_device_array(c):
        return _device_solve("c", c, b, overwrite_b, check_finite, backend,
                             lambda ops, C, B: potrs(ops, C, B, uplo))
    c, dtype = _host_matrix("c", c, check_finite)
    b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
    n = _check_triangular_solve_shapes("c", c.shape, b_array.shape)
    dtype = _common_dtype(dtype, b_dtype)
    ops = _backends.get_backend("host")
    x = _host_rhs(b_array, n, dtype, overwrite_b)
    potrs(ops, ops.wrap(np.asarray(c, dtype=dtype, order="F")), ops.wrap(x), uplo)
    return x.reshape(b_array.shape)
