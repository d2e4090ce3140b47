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
    """Solve a x = b for a square a, as scipy.linalg.solve: by LU, or by Cholesky with "pos".

    assume_a "gen" (the default) factors by LU (getrf + getrs), "pos" by Cholesky (potrf +
    potrs) on the `lower` (or upper) triangle. Every argument is checked before any work (a
    bad b never costs a factorization, nor a's contents under overwrite_a).

    Parameters
    ----------
    a : (N, N) array_like or device array
        The matrix, host or device as for lu_factor; with assume_a="pos" Hermitian positive
        definite, only its `lower` (or upper) triangle read.
    b : (N,) or (N, K) array_like or device array
        The right-hand side(s), where `a` is (on a device of `a`'s dtype). A host `a` and `b`
        meet in their common precision (float32 a with float64 b: float64, as scipy).
    lower : bool, optional
        With "pos", use the lower triangle of `a` (default False: the upper). True or False, or
        0, 1.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False).
    overwrite_b : bool, optional
        Whether x may be written over `b` (default False): a device `b` as lu_solve's; a host
        `b` is left as it is (x comes in a new array from the solve where the factors are: see
        Notes).
    check_finite : bool, optional
        Check that `a` and `b` hold no infs or NaNs before any work (default True).
    assume_a : {None, "gen", "general", "pos", "positive definite"}, optional
        The kind of matrix: None (the default) or "gen": general (LU); "pos": Hermitian
        positive definite (Cholesky). hybridla has no other forms yet.
    transposed : bool, optional
        Solve a^T x = b instead (default False); with "pos", for a complex Hermitian `a`, that
        is conj(a) x = b (scipy refuses complex transposed solves). True or False, or 0, 1.
    backend, nb, lookahead, panel, trace : optional
        Keyword-only engine options, as lu_factor's (configuration keys "lu.*", or "cho.*"
        with "pos").

    Returns
    -------
    ndarray or device array
        The solution x, of `b`'s shape, where `a` lives (a device x as the same kind of array as
        `b`), in the precision where `a` and `b` meet.

    Raises
    ------
    LinAlgError
        A singular `a`: "Matrix is singular." (an exactly zero pivot, or a condition estimate
        of 0); with "pos", an `a` that is not positive definite (the message names the failing
        minor); factors that overflowed (entries of `a` near the largest float), saying so.
    ValueError
        assume_a is not one of its values; lower, overwrite_a, overwrite_b or transposed is not
        True or False; one of `a` and `b` is a device array and the other not; `a` is not
        square and 2-D, `b` not 1-D or 2-D with N rows; infs or NaNs (check_finite); a bad
        engine option (named), as lu_factor's.
    TypeError
        `a` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose dtype
        is not `a`'s, or an unsupported device dtype.
    NotImplementedError
        assume_a="pos" with transposed=True for a complex device array (solve a x = conj(b) and
        conjugate x instead).
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        On a device, a matrix over the device-memory budget, as lu_factor's.

    Warns
    -----
    LinAlgWarning
        "Ill-conditioned matrix (rcond=...): result may not be accurate." when the condition
        estimate rcond < eps/2 (LAPACK's lamch("E")), as scipy.

    See Also
    --------
    lu_factor, lu_solve, cho_factor, cho_solve : The two steps apart.
    solve_mixed : The factorization in a lower precision, refined to the working one.

    Notes
    -----
    After the factorization rcond = 1 / (||a||_1 ||a^-1||_1) is estimated from the factors
    (gecon / pocon, O(n^2)). scipy takes the inf-norm for transposed=True; here the 1-norm
    serves both (they differ by at most a factor n). A Hermitian a with transposed=True is
    solved as a conj(x) = conj(b).

    A host a is solved where it is factored: on a device backend b goes up and x comes down
    before the factors' device memory is freed (no host triangular solve on the factors).

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 2., 0.], [2., 5., 1.], [0., 1., 3.]])
    >>> b = np.array([1., 2., 3.])
    >>> x = hybridla.solve(a, b, backend="host")
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.solve(a, b, assume_a="pos", backend="host")  # Cholesky
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.solve(a.astype(np.float32), b, transposed=True, backend="host")
    >>> np.allclose(a.T @ x, b), x.dtype
    (True, dtype('float64'))
    >>> hybridla.solve(np.array([[1., 2.], [2., 4.]]), np.ones(2), backend="host")
    Traceback (most recent call last):
        ...
    numpy.linalg.LinAlgError: Matrix is singular.
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
