"""Cholesky: cho_factor, cholesky and cho_solve (scipy.linalg._decomp_cholesky)."""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from . import _solve_place, _stacked
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
from .lapack import pocon, potrf, potrf_ooc, potrs
from .lapack.potrf import zero_other_triangle
from .lapack.potrs_ooc import potrs_ooc


# -- Cholesky ------------------------------------------------------------------------------------
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
               lookahead=None, panel=None, trace=None, progress=False, ooc=None):
    """Cholesky factorization of a Hermitian positive definite matrix, as scipy.linalg.cho_factor.

    Parameters
    ----------
    a : (..., M, M) array_like or device array
        The Hermitian positive definite matrix, host or device as for lu_factor. Only its
        `lower` (or upper) triangle is read. A stack as lu_factor's (a new array; on the device
        cuSOLVER potrfBatched); the first member, in C order, that is not positive definite
        raises the LinAlgError below.
    lower : bool, optional
        Factor A = L L^H from the lower triangle (True) or A = U^H U from the upper one
        (False, the default). True or False, or 0, 1.
    overwrite_a : bool, optional
        Whether the factor may be written over `a`, as lu_factor's (default False).
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "cho."
        ("cho.nb", "cho.lookahead", "cho.panel"; on a device also "cho.tail", the trailing
        matrix factored in one cuSOLVER potrf call).
    progress : bool, optional
        Keyword-only: a progress bar over the run's finished tasks, as lu_factor's (default
        False).
    ooc : {None, "auto", "always", "never"}, optional
        Keyword-only: a host matrix over the memory budget factored out of core, as
        lu_factor's (lapack/potrf_ooc.py; configuration "device.ooc").

    Returns
    -------
    c : (..., M, M) ndarray or device array
        The factor in the `lower` (or upper) triangle of c, where `a` lives, in `a`'s LAPACK
        dtype; the other triangle of c keeps what `a` held there (scipy documents it as
        arbitrary).
    lower : bool
        The `lower` argument, for cho_solve.

    Raises
    ------
    LinAlgError
        `a` is not positive definite: "k-th leading minor of the array is not positive
        definite", naming the failing leading minor, as scipy.
    ValueError
        `a` is not square and 2-D, or holds infs or NaNs (check_finite); lower or overwrite_a
        is not True or False; a bad engine option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    cho_solve : Solve with the factor.
    cholesky : The factor alone, with the other triangle zero.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 2., 0.], [2., 5., 1.], [0., 1., 3.]])
    >>> c, lower = hybridla.cho_factor(a, backend="host")
    >>> lower
    False
    >>> u = np.triu(c)
    >>> np.allclose(u.conj().T @ u, a)
    True
    >>> np.allclose(np.tril(c, -1), np.tril(a, -1))  # the other triangle: a's
    True
    """
    lower, overwrite_a = _flag("lower", lower), _flag("overwrite_a", overwrite_a)
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress,
                   ooc=ooc)
    if _stacked.is_stack((a, 2)):  # (..., M, M): _stacked.py
        return _stacked.potrf(a, lower, check_finite, backend, options, clean=False), lower
    c, _, _ = _potrf(a, lower, overwrite_a, check_finite, backend, options)
    return c, lower


def cholesky(a, lower=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
             lookahead=None, panel=None, trace=None, progress=False, ooc=None):
    """The Cholesky factor of a Hermitian positive definite matrix, as scipy.linalg.cholesky.

    Parameters
    ----------
    a : (..., M, M) array_like or device array
        The Hermitian positive definite matrix, host or device as for lu_factor. Only its
        `lower` (or upper) triangle is read. A stack as cho_factor's.
    lower : bool, optional
        Return L (A = L L^H) with True, U (A = U^H U) with False (the default). True or False,
        or 0, 1.
    overwrite_a : bool, optional
        Whether the factor may be written over `a`, as lu_factor's (default False).
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's (configuration keys under "cho.", as
        cho_factor's).

    Returns
    -------
    (..., M, M) ndarray or device array
        U, or with lower=True L, where `a` lives, in `a`'s LAPACK dtype; the other triangle is
        zero (also when overwrite_a puts the factor in `a` itself).

    Raises
    ------
    LinAlgError
        `a` is not positive definite (the message names the failing leading minor).
    ValueError
        `a` is not square and 2-D, or holds infs or NaNs (check_finite); lower or overwrite_a
        is not True or False; a bad engine option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    cho_factor : The factor for cho_solve.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 2., 0.], [2., 5., 1.], [0., 1., 3.]])
    >>> l = hybridla.cholesky(a, lower=True, backend="host")
    >>> np.allclose(l @ l.conj().T, a), np.allclose(np.triu(l, 1), 0)
    (True, True)
    >>> print(np.round(np.diag(l), 4))
    [2.     2.     1.6583]
    >>> hybridla.cholesky(np.array([[1., 2.], [2., 1.]]), backend="host")
    Traceback (most recent call last):
        ...
    numpy.linalg.LinAlgError: 2-th leading minor of the array is not positive definite
    """
    lower, overwrite_a = _flag("lower", lower), _flag("overwrite_a", overwrite_a)
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress,
                   ooc=ooc)
    if _stacked.is_stack((a, 2)):  # (..., M, M): _stacked.py
        return _stacked.potrf(a, lower, check_finite, backend, options, clean=True)
    c, _, _ = _potrf(a, lower, overwrite_a, check_finite, backend, options)
    zero_other_triangle(c, upper=lower,
                        ops=_backends.get_backend("cuda") if is_device_array(c) else None)
    return c



def _potrf(a, lower, overwrite_a, check_finite, backend, options, condition=False, then=None):
    """Validate, plan and run potrf; returns (c, rcond, then_result): rcond the 1-norm reciprocal
    condition estimate from the factor where it is (pocon) when `condition`, else None;
    `then(backend, C)` as _getrf's. Not positive definite raises LinAlgError naming the minor.
    Without either, a host matrix over the memory budget is factored out of core
    (lapack/potrf_ooc.py)."""
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
    def out_of_core(source, result, plan):
        info, trace = potrf_ooc(source, result, plan, uplo)
        return info, (None, None), trace

    c, info, extra = _factor(a, overwrite_a, check_finite, backend, options, "cho", driver,
                             square=True, keep_other_triangle=True,
                             ooc_driver=None if condition or then is not None else out_of_core)
    if info > 0:
        raise LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    rcond, result = (1.0 if condition else None, None) if extra is None else extra
    return c, rcond, result


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True, *, backend=None, trace=None):
    """Solve A x = b with the factor from cho_factor, as scipy.linalg.cho_solve.

    Parameters
    ----------
    c_and_lower : tuple of (c, lower)
        The result of cho_factor: the (..., N, N) factor `c` (only its `lower` or upper
        triangle is read) and `lower` (True or False, or 0, 1; for a stack also scipy's batched
        cho_factor's array of them, all equal).
    b : (N,) or (..., N, K) array_like or device array
        The right-hand side(s); a host factor needs a host `b`, a device factor a device `b` of
        its dtype. Stacks broadcast as lu_solve's (on the device: two cuBLAS trsmBatched).
    overwrite_b : bool, optional
        Whether x may be written over `b`, as lu_solve's (default False).
    check_finite : bool, optional
        Check that `c` and `b` (on a device: `b`) hold no infs or NaNs (default True).
    backend : {None, "auto", "host", "cuda"}, optional
        Keyword-only, as lu_solve's: host arrays are solved on the host or streamed through
        the device, as configuration "solve.place" says (streamed: b up once, the factor's
        triangle across the link once per triangular solve; lapack/potrs_ooc.py).
    trace : str or path-like, optional
        Keyword-only, as lu_solve's: the solve's Chrome trace, its metadata's "solve_place"
        saying which way it ran.

    Returns
    -------
    ndarray or device array
        The solution x, of `b`'s shape, where the factor lives (a device x as the same kind of
        array as `b`); on the host in the dtype where c and b meet (scipy's).

    Raises
    ------
    ValueError
        lower or overwrite_b is not True or False; backend is unknown, or not None, "auto" or
        "cuda" for device arrays; one of `c` and `b` is a device array and the other not; `c`
        is not square and 2-D, `b` not 1-D or 2-D with N rows; infs or NaNs (check_finite).
        Configuration "solve.place" is not "auto", "host" or "device".
    TypeError
        `c` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose dtype
        is not `c`'s.
    MemoryError
        A streamed solve whose working store does not fit "device.memory_budget", as
        lu_solve's.

    See Also
    --------
    cho_factor : The factor.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 2., 0.], [2., 5., 1.], [0., 1., 3.]])
    >>> b = np.array([1., 2., 3.])
    >>> x = hybridla.cho_solve(hybridla.cho_factor(a, backend="host"), b, backend="host")
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.cho_solve(hybridla.cho_factor(a, lower=True, backend="host"), b,
    ...                        backend="host")
    >>> np.allclose(a @ x, b)
    True
    """
    c, lower = c_and_lower
    _backends.check_name(backend)
    if _stacked.is_stack((c, 2), (b, 2)):  # stacks: _stacked.py (lower: one flag, or scipy's
        _flag("overwrite_b", overwrite_b)  # batched cho_factor's array of them)
        return _stacked.cho_solve(c, _stacked.lower_flag(lower), b, check_finite, backend)
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
    where = _solve_place.choose(backend, "potrs", n, n, 1 if b_array.ndim == 1 else
                                b_array.shape[1], dtype, trace)
    x = _host_rhs(b_array, n, dtype, overwrite_b)
    if where.place == "device":  # the factor streamed through the device (any layout)
        where.run_device(potrs_ooc, np.asarray(c, dtype=dtype), x, uplo=uplo)
    else:
        ops = _backends.get_backend("host")
        where.run_host(lambda: potrs(ops, ops.wrap(np.asarray(c, dtype=dtype, order="F")),
                                     ops.wrap(x), uplo))
    return x.reshape(b_array.shape)
