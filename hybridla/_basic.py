"""solve: a general or Hermitian positive definite system (scipy.linalg._basic)."""
from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning

from . import backend as _backends
from ._common import (
    _common_dtype,
    _device_backend,
    _device_matrix_checks,
    _flag,
    _host_matrix,
    is_device_array,
)
from ._decomp_cholesky import _potrf, cho_solve
from ._decomp_lu import _getrf, lu_solve
from ._logging import get_logger
from .lapack import getrs, potrs

_log = get_logger()
_ASSUME = {None: "gen", "gen": "gen", "general": "gen", "pos": "pos", "positive definite": "pos"}


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, backend=None, nb=None, lookahead=None, panel=None,
          trace=None):
    """Solve a x = b for a square a, as scipy.linalg.solve: assume_a "gen" (the default) by LU
    (getrf + getrs), "pos" by Cholesky (potrf + potrs) on the `lower` (or upper) triangle.

    Every argument is checked before any work (a bad b never costs a factorization, nor a's
    contents under overwrite_a). a and b meet in their common precision (float32 a with float64
    b: float64, as scipy). After the factorization rcond = 1 / (||a||_1 ||a^-1||_1) is estimated
    from the factors (gecon / pocon, O(n^2)); rcond < eps/2 (LAPACK's lamch("E")) gives scipy's
    LinAlgWarning "Ill-conditioned matrix". scipy takes the inf-norm for transposed=True; here
    the 1-norm serves both (they differ by at most a factor n).

    A singular a raises LinAlgError("Matrix is singular."); one that is not positive definite
    with "pos", LinAlgError naming the failing minor; factors that overflowed (entries of a near
    the largest float) LinAlgError saying so. transposed=True solves a^T x = b (with "pos", for
    a complex Hermitian a, that is conj(a) x = b; scipy refuses complex transposed solves).

    A host a is solved where it is factored: on a device backend b goes up and x comes down
    before the factors' device memory is freed (no host triangular solve on the factors).
    """
    lower, transposed = _flag("lower", lower), _flag("transposed", transposed)
    overwrite_a, overwrite_b = _flag("overwrite_a", overwrite_a), _flag("overwrite_b", overwrite_b)
    if assume_a not in _ASSUME:
        raise ValueError(f"assume_a must be None, 'gen' or 'pos' (hybridla has no other forms "
                         f"yet); got assume_a={assume_a!r}")
    a, b, overwrite_a = _system(a, b, check_finite, backend, overwrite_a)
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace)
    host = not is_device_array(a)
    if _ASSUME[assume_a] == "pos":
        # Hermitian A: A^T = conj(A), so A^T x = b is A conj(x) = conj(b)
        conjugate = transposed and _dtype_of(a).kind == "c"
        if conjugate and not host:
            raise NotImplementedError("solve(assume_a='pos', transposed=True) of a complex device "
                                      "array: solve a x = conj(b) and conjugate x instead")
        rhs = np.conj(b) if conjugate else b
        uplo = "L" if lower else "U"
        c, rcond, x = _potrf(a, lower, overwrite_a, False, backend, options, condition=True,
                             then=_solver(rhs, lambda ops, C, B: potrs(ops, C, B, uplo))
                             if host else None)
        _check_condition(rcond, c, check_finite)
        if x is None:
            x = cho_solve((c, lower), rhs, overwrite_b=overwrite_b or conjugate,
                          check_finite=False)
        return x.conj() if conjugate else x
    trans = "T" if transposed else "N"
    lu, piv, info, rcond, x = _getrf(a, overwrite_a, False, backend, options, condition=True,
                                     then=_solver(b, lambda ops, LU, B: getrs(ops, LU, B, trans))
                                     if host else None)
    if info > 0:
        raise LinAlgError("Matrix is singular.")
    _check_condition(rcond, lu, check_finite)
    if x is None:
        x = lu_solve((lu, piv), b, trans=trans, overwrite_b=overwrite_b, check_finite=False)
    return x


def _solver(b, solve):
    """then(ops, F) for _getrf / _potrf: x for the host right-hand side b, solved where the
    factors F are before their store is freed (on a device: up with b, the triangular solves
    there, x down; the factors never come back to be solved on the host, whose triangular
    solve of one column reads them at a fraction of the device's bandwidth)."""
    def then(ops, F):
        n = F.n
        rhs = np.asfortranarray(b.reshape(n, -1), dtype=F.dtype)
        if rhs.size == 0:
            return None  # the usual path handles empty right-hand sides
        storage = ops.empty(rhs.shape, F.dtype)
        X = ops.wrap(storage)
        try:
            lane = ops.lane("gpu:update")
            block = X.block(0, n, 0, rhs.shape[1])
            ops.from_host(lane, rhs, block)
            solve(ops, F, X)
            return ops.to_host(lane, block).reshape(b.shape)
        finally:
            X.close()
    return then


def _system(a, b, check_finite, backend, overwrite_a):
    """Check a (square) and b (1-D or 2-D, as many rows) before any work, both on the host or
    both on the device. A host a is returned in the precision where a and b meet (a new array
    when that is not a's, which the factorization may then overwrite). Returns (a, b,
    overwrite_a)."""
    if is_device_array(a) != is_device_array(b):
        raise ValueError("a and b must both be host arrays or both device arrays")
    if is_device_array(a):
        ops = _device_backend("a", backend)
        shape, dtype = _device_matrix_checks("a", a, ops, check_finite)
        b_shape, b_dtype = _device_matrix_checks("b", b, ops, check_finite, ndims=(1, 2))
        if b_dtype != dtype:
            raise TypeError(f"b must have the dtype of a ({dtype}) on the device; got {b_dtype}")
    else:
        _backends.check_name(backend)
        a_array, a_dtype = _host_matrix("a", a, check_finite)
        b, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
        shape, b_shape = a_array.shape, b.shape
        dtype = _common_dtype(a_dtype, b_dtype)
        a = a_array
        if a_array.dtype != dtype:
            a, overwrite_a = a_array.astype(dtype, order="F"), True
    if shape[0] != shape[1]:
        raise ValueError(f"expected a square matrix for a; got shape {shape}")
    if b_shape[0] != shape[0]:
        raise ValueError(f"b must have {shape[0]} rows to match a (shape {shape}); got shape "
                         f"{b_shape}")
    return a, b, overwrite_a


def _dtype_of(x):
    return np.dtype(x.__cuda_array_interface__["typestr"]) if is_device_array(x) else x.dtype


def _check_condition(rcond, factors, check_finite):
    """scipy's tests on the condition estimate: 0 is singular, NaN means the factors are not
    finite (a was, when checked: the factorization overflowed), below eps/2 a warning; None (no
    estimate: ||a||_1 overflows) passes."""
    _log.debug("solve: reciprocal condition estimate %s", rcond)
    if rcond is None:
        return
    if rcond == 0:
        raise LinAlgError("Matrix is singular.")
    if np.isnan(rcond):
        raise LinAlgError("the factorization of a overflowed: its factors hold infs or NaNs "
                          "(entries of a near the largest floating-point number; scale a)"
                          if check_finite else
                          "the factors of a hold infs or NaNs: a has non-finite entries "
                          "(check_finite=False), or its factorization overflowed")
    if not rcond >= np.finfo(_dtype_of(factors)).eps / 2:
        warnings.warn(f"Ill-conditioned matrix (rcond={rcond:.6g}): result may not be "
                      f"accurate.", LinAlgWarning, stacklevel=4)
