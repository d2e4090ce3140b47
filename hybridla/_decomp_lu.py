"""LU with partial pivoting: lu_factor and lu_solve (scipy.linalg._decomp_lu)."""
from __future__ import annotations

import numpy as np

from . import backend as _backends
from ._common import (
    _TRANS,
    _common_dtype,
    _flag,
    _check_solve_shapes,
    _device_solve,
    _factor,
    _host_matrix,
    _host_rhs,
    _warn_singular,
    is_device_array,
)
from .lapack import gecon, getrf, getrs


# -- LU ------------------------------------------------------------------------------------------
def lu_factor(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
              panel=None, trace=None, progress=False):
    """LU factorization with partial pivoting, P A = L U, as scipy.linalg.lu_factor.

    Returns (lu, piv): L (unit diagonal, not stored) and U packed in lu, pivots 0-based
    (row i was interchanged with row piv[i]). A zero U(i, i) gives a LinAlgWarning, as scipy's.
    Engine options: backend ("auto", "host", "cuda"), nb (block size or "auto"), lookahead (>= 0),
    panel ("cpu", "gpu", "auto": a cost model places each step's panel), trace (a path for the
    run's Chrome trace JSON), progress (a progress bar).
    """
    overwrite_a = _flag("overwrite_a", overwrite_a)
    lu, piv, info, _, _ = _getrf(a, overwrite_a, check_finite, backend,
                                 dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace,
                                   progress=progress))
    _warn_singular(info)
    return lu, piv


def _getrf(a, overwrite_a, check_finite, backend, options, condition=False, then=None):
    """Validate, plan and run getrf; returns (lu, piv, info, rcond, then_result) with lu where a
    lives. When `condition`, rcond = 1 / (||A||_1 ||A^-1||_1) estimated from the factors where
    they are (gecon; ||A||_1 summed as the matrix arrives, before any step overwrites it), else
    None; rcond is 0 when the factorization found an exactly zero pivot, NaN when U's diagonal
    is not finite (the factorization overflowed, or a held infs or NaNs unchecked), None when
    ||A||_1 itself overflows (no estimate: LAPACK's would be 0, "singular", for a matrix of
    well-conditioned but huge entries).
    `then(backend, A)` runs on the factors' store before it is freed (on a device: while the
    factors are still there) when they are usable (no zero pivot, rcond neither 0 nor NaN)."""
    def driver(A, plan):
        if condition:
            A.track_one_norm()
        pivots, info, trace = getrf(A, plan)
        rcond = result = None
        if condition or then is not None:
            A.set_pivots(pivots)
        if condition:
            anorm = A.one_norm()
            # NaN: U overflowed; None: ||A||_1 overflows, and so would any rcond made with it
            rcond = (0.0 if info else np.nan if not np.isfinite(A.diagonal()).all()
                     else gecon(plan.backend, A, anorm) if np.isfinite(anorm) else None)
        if then is not None and info == 0 and (rcond is None or rcond > 0):
            result = then(plan.backend, A)
        return info, (pivots.copy(), rcond, result), trace
    lu, info, extra = _factor(a, overwrite_a, check_finite, backend, options, "lu", driver)
    pivots, rcond, result = (np.zeros(0, np.int32), 1.0, None) if extra is None else extra
    return lu, pivots, info, rcond, result


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True, *, backend=None):
    """Solve A x = b (trans 0), A^T x = b (1) or A^H x = b (2) with the factors of lu_factor.

    Host factors and right-hand side are solved on the host (LAPACK-style triangular solves);
    device factors and right-hand side on the device, returning x as the same kind of array as b.
    x has the dtype where lu and b meet (float32 factors with a float64 b: float64, as scipy).
    """
    lu, piv = lu_and_piv
    _backends.check_name(backend)
    overwrite_b = _flag("overwrite_b", overwrite_b)
    if isinstance(trans, (bool, np.bool_)) or trans not in _TRANS:
        raise ValueError(f"trans must be 0, 1 or 2 (or 'N', 'T', 'C'); got trans={trans!r}")
    if is_device_array(lu) != is_device_array(b):
        raise ValueError("lu and b must both be host arrays or both device arrays")
    piv = np.asarray(piv)
    if is_device_array(lu):
        return _device_solve("lu", lu, b, overwrite_b, check_finite, backend,
                             lambda ops, LU, B: getrs(ops, LU, B, _TRANS[trans]), pivots=piv)
    lu, dtype = _host_matrix("lu", lu, check_finite)
    b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
    n = _check_solve_shapes(lu.shape, piv.shape, b_array.shape)
    dtype = _common_dtype(dtype, b_dtype)
    ops = _backends.get_backend("host")
    factors = ops.wrap(np.asarray(lu, dtype=dtype, order="F"), piv)
    x = _host_rhs(b_array, n, dtype, overwrite_b)
    getrs(ops, factors, ops.wrap(x), _TRANS[trans])
    return x.reshape(b_array.shape)
