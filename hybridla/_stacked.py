"""Stacks of matrices, (..., M, N), as scipy.linalg (1.15 and later) takes them: lu_factor,
lu_solve, solve, cholesky, cho_factor, cho_solve, qr, lstsq and hessenberg.

Each of those public functions asks `is_stack` first and hands a stack over here. The whole
stack is validated once, before any member is touched: flags, shapes (every member's core
shape, the batch axes broadcast as scipy's: a right-hand side b is one vector (N,) for every
member, or a stack (..., N, K) whose batch axes broadcast against the matrices'), dtypes, the
engine options, then finiteness. Then:

- host arrays: member by member, the results laid out as scipy's (C order, batch axes first).
  Members of order up to HOST_LAPACK_UP_TO go straight to scipy.linalg.lapack (a 2-D call of
  the engine costs milliseconds of scheduling), larger ones to today's 2-D code.
- device arrays: one batched computation for the whole stack (_stacked_device.py).

qr, lstsq and hessenberg's stacks are in _stacked_qr.py.

Where scipy's own batching falls short, hybridla does the obvious thing and says so in the
docstrings: an empty batch ((0, n, n)) gives empty results (scipy raises "does not support
zero-size batches"); solve names every singular member (scipy 1.17 reports slice 0 whatever
the member); qr(mode="raw") stacks (factors, tau) (scipy fails to). Deliberately as scipy:
qr(mode="r") of a stack returns R itself, not the tuple (R,) of a 2-D matrix.
"""
from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse
from scipy.linalg import LinAlgError, LinAlgWarning, get_lapack_funcs

from . import backend as _backends
from ._common import (
    _TRANS,
    _all_finite,
    _common_dtype,
    _flag,
    _host_backend,
    _lapack_dtype,
    is_device_array,
)
from .scheduler.plan import make_plan

# Members of order up to this go straight to scipy.linalg.lapack on the host: a 2-D call of the
# engine costs milliseconds of task scheduling whatever the size (2-core CI machine: lu_factor
# of 32 x 32 2.4 ms against LAPACK's 0.04 ms; 256 x 256 8.7 ms against 2.7; 512 x 512 32 ms
# against 33).
HOST_LAPACK_UP_TO = 256
_LAPACK_TRANS = {"N": 0, "T": 1, "C": 2}


# -- is it a stack? ------------------------------------------------------------------------------
def _ndim(x):
    if is_device_array(x):
        return len(x.__cuda_array_interface__["shape"])
    if scipy.sparse.issparse(x):
        return 2
    try:
        return np.ndim(x)
    except (TypeError, ValueError):  # a ragged sequence: the 2-D path reports it
        return 0


def is_stack(*arrays_and_core) -> bool:
    """Whether any of the (array, core dimensions) pairs has batch axes in front of its core
    (a matrix: 2, a vector of pivots: 1)."""
    return any(x is not None and _ndim(x) > core for x, core in arrays_and_core)


def _device(*arrays):
    """Whether the arrays are device arrays (all of them) or host arrays (none); a mix raises
    ValueError, as the 2-D functions."""
    kinds = {is_device_array(x) for x in arrays if x is not None}
    if len(kinds) > 1:
        names = "lu and b" if len(arrays) == 3 else "a and b"
        raise ValueError(f"{names} must both be host arrays or both device arrays")
    return kinds == {True}


# -- validation, once for the whole stack --------------------------------------------------------
def _host_array(name, x, core):
    """x as an ndarray with at least `core` axes, and its LAPACK dtype."""
    if scipy.sparse.issparse(x):
        raise TypeError(f"{name} is a scipy.sparse {type(x).__name__}; hybridla factors dense "
                        f"matrices: pass {name}.toarray()")
    array = np.asarray(x)
    if array.ndim < core:
        raise ValueError(f"expected an array of {core} or more dimensions for {name}; got shape "
                         f"{array.shape}")
    return array, _lapack_dtype(name, array.dtype)


def _finite(check_finite, *named):
    """check_finite's test, last: the one check that reads every entry."""
    if check_finite:
        for name, array in named:
            if not _all_finite(array):
                raise ValueError(f"{name} must not contain infs or NaNs (check_finite=True)")


def batch_shape(*named):
    """The broadcast batch shape of the (name, batch shape) pairs, as scipy's."""
    try:
        return tuple(np.broadcast_shapes(*(shape for _, shape in named)))
    except ValueError:
        shown = ", ".join(f"{name} {shape}" for name, shape in named)
        raise ValueError(f"the batch shapes do not broadcast: {shown}") from None


def check_square(name, shape):
    if shape[-1] != shape[-2]:
        raise ValueError(f"expected square matrices for {name}; got shape {shape}")
    return shape[-1]


def rhs_core(name, shape, rows, like, like_shape):
    """The core shape of a right-hand side as scipy reads it: (N,) when b is 1-D, else its last
    two axes (N, K), N == rows."""
    core = shape[-1:] if len(shape) == 1 else shape[-2:]
    if core[0] != rows:
        stack = (f" (as scipy reads it, a {name} of {len(shape)} dimensions is a stack of "
                 f"{core[0]} x {core[1]} right-hand sides)") if len(shape) > 2 else ""
        raise ValueError(f"{name} must have {rows} rows to match {like} (shape {like_shape}); "
                         f"got shape {shape}{stack}")
    return tuple(core)


def lower_flag(lower):
    """cho_solve's `lower`: True or False (0, 1), or, as scipy's batched cho_factor returns it,
    an array of one such value per member (all the same)."""
    if isinstance(lower, (np.ndarray, list, tuple)):
        values = {_flag("lower", v) for v in np.asarray(lower, dtype=object).ravel()}
        if len(values) != 1:
            raise ValueError(f"lower must be the same for every member of the stack; got "
                             f"lower={lower!r}")
        return values.pop()
    return _flag("lower", lower)


def _warn_singular(info):
    warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.", LinAlgWarning,
                  stacklevel=4)


def _device_module():
    from . import _stacked_device  # the cuda backend's side: imported where it runs
    return _stacked_device


def _members(batch):
    return enumerate(np.ndindex(*batch))


# -- LU ------------------------------------------------------------------------------------------
def lu_factor(a, check_finite, backend, options):
    """lu_factor of a stack: (lu (..., M, N), piv (..., K) int32); a singular member warns as
    the 2-D function does ("Diagonal number i is exactly zero. Singular matrix.")."""
    if is_device_array(a):
        return _device_module().lu_factor(a, check_finite, backend, options)
    array, dtype = _host_array("a", a, 2)
    ops = _host_backend(backend)
    batch, (m, n) = array.shape[:-2], array.shape[-2:]
    make_plan(ops, m, n, dtype, routine="lu", **options)
    _finite(check_finite, ("a", array))
    lu, piv = np.empty(batch + (m, n), dtype), np.empty(batch + (min(m, n),), np.int32)
    if lu.size == 0:
        return lu, piv
    (getrf,) = get_lapack_funcs(("getrf",), dtype=dtype)
    for _, index in _members(batch):
        if max(m, n) <= HOST_LAPACK_UP_TO:
            factors, pivots, info = getrf(np.array(array[index], dtype=dtype, order="F"),
                                          overwrite_a=True)
            if info < 0:  # cannot happen with the arguments given here
                raise ValueError(f"illegal value in argument {-info} of the internal getrf")
        else:
            from ._decomp_lu import _getrf
            factors, pivots, info, _, _ = _getrf(array[index], False, False, backend, options)
        lu[index], piv[index] = factors, pivots
        if info > 0:
            _warn_singular(info)
    return lu, piv


def lu_solve(lu, piv, b, trans, check_finite, backend):
    """lu_solve of a stack: x of b's shape broadcast against the factors' batch."""
    if _device(lu, b):
        return _device_module().lu_solve(lu, piv, b, trans, check_finite, backend)
    lu_array, lu_dtype = _host_array("lu", lu, 2)
    piv_array = np.asarray(piv)
    b_array, b_dtype = _host_array("b", b, 1)
    n = check_square("lu", lu_array.shape)
    if piv_array.ndim < 1 or piv_array.shape[-1] != n:
        raise ValueError(f"piv must have shape (..., {n}) to match lu; got shape "
                         f"{piv_array.shape}")
    core = rhs_core("b", b_array.shape, n, "lu", lu_array.shape)
    batch = batch_shape(("lu", lu_array.shape[:-2]), ("piv", piv_array.shape[:-1]),
                        ("b", b_array.shape[:b_array.ndim - len(core)]))
    dtype = _common_dtype(lu_dtype, b_dtype)
    _finite(check_finite, ("lu", lu_array), ("b", b_array))
    x = np.empty(batch + core, dtype)
    if x.size == 0:
        return x
    lu_b = np.broadcast_to(lu_array, batch + (n, n))
    piv_b = np.broadcast_to(piv_array, batch + (n,))
    b_b = np.broadcast_to(b_array, batch + core)
    (getrs,) = get_lapack_funcs(("getrs",), dtype=dtype)
    for _, index in _members(batch):
        if n <= HOST_LAPACK_UP_TO:
            rhs = np.array(b_b[index].reshape(n, -1), dtype=dtype, order="F")
            solution, info = getrs(lu_b[index], piv_b[index], rhs, trans=_LAPACK_TRANS[
                _TRANS[trans]], overwrite_b=True)
            if info < 0:  # cannot happen with the arguments given here
                raise ValueError(f"illegal value in argument {-info} of the internal getrs")
            x[index] = solution.reshape(core)
        else:
            from ._decomp_lu import lu_solve as lu_solve_2d
            x[index] = lu_solve_2d((lu_b[index], piv_b[index]), b_b[index], trans=trans,
                                   check_finite=False)
    return x


# -- Cholesky ------------------------------------------------------------------------------------
def potrf(a, lower, check_finite, backend, options, clean):
    """cho_factor (clean False: the other triangle keeps a's) or cholesky (clean True: zero) of
    a stack. The first member, in C order, that is not positive definite raises LinAlgError
    naming its failing leading minor, as scipy's."""
    if is_device_array(a):
        return _device_module().potrf(a, lower, check_finite, backend, options, clean)
    array, dtype = _host_array("a", a, 2)
    n = check_square("a", array.shape)
    ops = _host_backend(backend)
    batch = array.shape[:-2]
    make_plan(ops, n, n, dtype, routine="cho", **options)
    _finite(check_finite, ("a", array))
    c = np.empty(batch + (n, n), dtype)
    if c.size == 0:
        return c
    (lapack_potrf,) = get_lapack_funcs(("potrf",), dtype=dtype)
    for _, index in _members(batch):
        if n <= HOST_LAPACK_UP_TO:
            factor, info = lapack_potrf(np.array(array[index], dtype=dtype, order="F"),
                                        lower=lower, clean=clean, overwrite_a=True)
            if info > 0:
                raise LinAlgError(f"{info}-th leading minor of the array is not positive "
                                  f"definite")
            if info < 0:  # cannot happen with the arguments given here
                raise ValueError(f"illegal value in argument {-info} of the internal potrf")
        else:
            from ._decomp_cholesky import _potrf
            from .lapack.potrf import zero_other_triangle
            factor, _, _ = _potrf(array[index], lower, False, False, backend, options)
            if clean:
                zero_other_triangle(factor, upper=lower)
        c[index] = factor
    return c


def cho_solve(c, lower, b, check_finite, backend):
    """cho_solve of a stack: x of b's shape broadcast against the factor's batch."""
    if _device(c, b):
        return _device_module().cho_solve(c, lower, b, check_finite, backend)
    c_array, c_dtype = _host_array("c", c, 2)
    b_array, b_dtype = _host_array("b", b, 1)
    n = check_square("c", c_array.shape)
    core = rhs_core("b", b_array.shape, n, "c", c_array.shape)
    batch = batch_shape(("c", c_array.shape[:-2]), ("b", b_array.shape[:b_array.ndim - len(core)]))
    dtype = _common_dtype(c_dtype, b_dtype)
    _finite(check_finite, ("c", c_array), ("b", b_array))
    x = np.empty(batch + core, dtype)
    if x.size == 0:
        return x
    c_b, b_b = np.broadcast_to(c_array, batch + (n, n)), np.broadcast_to(b_array, batch + core)
    (potrs,) = get_lapack_funcs(("potrs",), dtype=dtype)
    for _, index in _members(batch):
        if n <= HOST_LAPACK_UP_TO:
            rhs = np.array(b_b[index].reshape(n, -1), dtype=dtype, order="F")
            solution, info = potrs(c_b[index], rhs, lower=lower, overwrite_b=True)
            if info < 0:  # cannot happen with the arguments given here
                raise ValueError(f"illegal value in argument {-info} of the internal potrs")
            x[index] = solution.reshape(core)
        else:
            from ._decomp_cholesky import cho_solve as cho_solve_2d
            x[index] = cho_solve_2d((c_b[index], lower), b_b[index], check_finite=False)
    return x


# -- solve ---------------------------------------------------------------------------------------
def solve(a, b, lower, check_finite, form, transposed, backend, options):
    """solve of a stack, every member by the form's method. Singular members (an exactly zero
    pivot, a condition estimate of 0, or with "pos" a member that is not positive definite)
    raise one LinAlgError naming them all, in scipy's words: "A singular matrix detected:
    slice(s) [i, ...] are singular." (flat indices into the broadcast batch); ill-conditioned
    ones give one LinAlgWarning naming each with its rcond (device stacks: no condition
    estimate)."""
    if _device(a, b):
        return _device_module().solve(a, b, lower, check_finite, form, transposed, backend,
                                      options)
    a_array, a_dtype = _host_array("a", a, 2)
    b_array, b_dtype = _host_array("b", b, 1)
    _backends.check_name(backend)
    n = check_square("a", a_array.shape)
    core = rhs_core("b", b_array.shape, n, "a", a_array.shape)
    batch = batch_shape(("a", a_array.shape[:-2]), ("b", b_array.shape[:b_array.ndim - len(core)]))
    dtype = _common_dtype(a_dtype, b_dtype)
    if form in ("gen", "pos"):  # the engine's options, as the 2-D solve checks them
        make_plan(_host_backend(backend), n, n, dtype, routine="lu" if form == "gen" else "cho",
                  **options)
    _finite(check_finite, ("a", a_array), ("b", b_array))
    x = np.empty(batch + core, dtype)
    if x.size == 0:
        return x
    a_b, b_b = np.broadcast_to(a_array, batch + (n, n)), np.broadcast_to(b_array, batch + core)
    member = _solver(form, dtype, n, lower, transposed, backend, options)
    singular, ill = [], []
    eps = np.finfo(dtype).eps
    for i, index in _members(batch):
        try:
            solution, rcond, warn_below = member(np.asarray(a_b[index], dtype=dtype), b_b[index])
        except LinAlgError:
            singular.append(i)
            continue
        x[index] = solution
        if rcond is None:
            continue
        if rcond == 0:
            singular.append(i)
        elif np.isnan(rcond):
            raise LinAlgError(f"slice {i}: the factors of a hold infs or NaNs: its "
                              f"factorization overflowed (entries near the largest "
                              f"floating-point number; scale a)" if check_finite else
                              f"slice {i}: the factors of a hold infs or NaNs: a has non-finite "
                              f"entries (check_finite=False), or its factorization overflowed")
        elif not rcond >= eps * warn_below:
            ill.append(f"slice {i} has rcond = {rcond}")
    if singular:
        raise LinAlgError(f"A singular matrix detected: slice(s) {singular} are singular.")
    if ill:
        warnings.warn(f"An ill-conditioned matrix detected: {','.join(ill)}.", LinAlgWarning,
                      stacklevel=3)
    return x


def _solver(form, dtype, n, lower, transposed, backend, options):
    """solve(a_i, b_i) -> (x_i, rcond or None, warning threshold in eps) for one member of
    the form; raises LinAlgError for a singular (not positive definite) member."""
    if form not in ("gen", "pos"):
        from ._basic import _solve_structured  # scipy's LAPACK paths, any order

        def structured(a, b):
            return _solve_structured(form, a, b, lower, transposed, False, False)
        return structured
    small = n <= HOST_LAPACK_UP_TO
    if form == "gen":
        trans = "T" if transposed else "N"
        if small:
            getrf, getrs, gecon, lange = get_lapack_funcs(("getrf", "getrs", "gecon", "lange"),
                                                          dtype=dtype)

            def general(a, b):
                # rcond of the 1-norm for both systems, as the 2-D solve (_basic.py's Notes)
                anorm = lange("1", a)
                lu, piv, info = getrf(np.array(a, order="F"), overwrite_a=True)
                if info > 0:
                    raise LinAlgError("Matrix is singular.")
                solution, _ = getrs(lu, piv, np.array(b.reshape(n, -1), dtype=dtype,
                                                      order="F"),
                                    trans=_LAPACK_TRANS[trans], overwrite_b=True)
                rcond, _ = gecon(lu, anorm, norm="1") if np.isfinite(anorm) else (None, 0)
                return solution.reshape(b.shape), rcond, 0.5
            return general
        from ._basic import _solver as then_solve
        from ._decomp_lu import _getrf
        from ._decomp_lu import lu_solve as lu_solve_2d
        from .lapack import getrs as engine_getrs

        def general_engine(a, b):
            lu, piv, info, rcond, x = _getrf(
                a, False, False, backend, options, condition=True,
                then=then_solve(b, lambda ops, LU, B: engine_getrs(ops, LU, B, trans)))
            if info > 0:
                raise LinAlgError("Matrix is singular.")
            if x is None and rcond is not None and rcond > 0:
                x = lu_solve_2d((lu, piv), b, trans=trans, check_finite=False)
            return x, rcond, 0.5
        return general_engine
    conjugate = transposed and np.dtype(dtype).kind == "c"  # Hermitian: A^T x = b is A conj(x)
    uplo = "L" if lower else "U"                            # = conj(b)
    if small:
        from ._basic import _symmetric_norm
        potrf, potrs, pocon = get_lapack_funcs(("potrf", "potrs", "pocon"), dtype=dtype)

        def positive(a, b):
            anorm = _symmetric_norm(a, lower)
            c, info = potrf(np.array(a, order="F"), lower=lower, clean=False, overwrite_a=True)
            if info > 0:
                raise LinAlgError(f"{info}-th leading minor of the array is not positive "
                                  f"definite")
            rhs = np.array((np.conj(b) if conjugate else b).reshape(n, -1), dtype=dtype,
                           order="F")
            solution, _ = potrs(c, rhs, lower=lower, overwrite_b=True)
            rcond, _ = pocon(c, anorm, uplo=uplo) if np.isfinite(anorm) else (None, 0)
            solution = solution.reshape(b.shape)
            return (solution.conj() if conjugate else solution), rcond, 0.5
        return positive
    from ._basic import _solver as then_solve
    from ._decomp_cholesky import _potrf
    from ._decomp_cholesky import cho_solve as cho_solve_2d
    from .lapack import potrs as engine_potrs

    def positive_engine(a, b):
        rhs = np.conj(b) if conjugate else b
        c, rcond, x = _potrf(a, lower, False, False, backend, options, condition=True,
                             then=then_solve(rhs, lambda ops, C, B: engine_potrs(ops, C, B, uplo)))
        if x is None and rcond is not None and rcond > 0:
            x = cho_solve_2d((c, lower), rhs, check_finite=False)
        return (x.conj() if conjugate and x is not None else x), rcond, 0.5
    return positive_engine
