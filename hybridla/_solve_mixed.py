"""Mixed-precision solvers: solve_mixed and lstsq_mixed (factorization in a lower precision,
refined to the working precision)."""
from __future__ import annotations

import functools
import time

import numpy as np
from scipy.linalg import LinAlgError

from . import config as _config
from . import lapack as _lapack
from ._logging import get_logger
from ._basic import solve
from ._common import (
    _common_dtype,
    _device_backend,
    _device_matrix_checks,
    _finite_beside,
    _flag,
    _host_backend,
    _host_matrix,
    _nonfinite_message,
    _require_finite,
    _to_device,
    is_device_array,
)
from ._memory import _check_memory
from ._mixed_place import (_CHECK_THREADS, _a_stays_on_host, _columns_kept, _finite_after,
                           _host_working_matrix)
from ._lstsq import _device_store, lstsq
from .lapack._mixed import (LOW_DTYPE, HostResidentMatrix, MixedInfo,
                            check_options, solve_workspace_bytes)
from .scheduler.plan import make_plan

_log = get_logger("mixed")


# -- mixed precision -----------------------------------------------------------------------------
def solve_mixed(a, b, assume_a="gen", lower=False, overwrite_a=False, overwrite_b=False,
                check_finite=True, *, lowest=None, refinement=None, tol=None, max_iter=None,
                inner_tol=None, max_inner=None, fallback=True, equilibrate=None, backend=None,
                nb=None, lookahead=None, panel=None, trace=None, progress=False, ooc=None):
    """Solve a x = b to working precision with the factorization in a lower precision, refined.

    The working precision is a's dtype (float64, complex128, or float32); the O(n^3)
    factorization runs in a lower precision, then iterative refinement: MAGMA's and cuSOLVER's
    mixed-precision solvers, with GMRES refinement and tensor cores. Every argument is checked
    before any work.

    Parameters
    ----------
    a : (N, N) array_like or device array
        The matrix, host or device as for lu_factor; `a` is never modified.
    b : (N,) or (N, K) array_like or device array
        The right-hand side(s), where `a` is (on a device of `a`'s dtype); never modified.
    assume_a : {"gen", "general", "pos", "positive definite"}, optional
        "gen" (the default): LU (lapack/gesv_mixed.py); "pos": Cholesky of the Hermitian
        positive definite `a`, of which only the `lower` (or upper) triangle is read
        (lapack/posv_mixed.py).
    lower : bool, optional
        With "pos", read the lower triangle (default False: the upper). True or False, or 0, 1.
    overwrite_a, overwrite_b : bool, optional
        Accepted for scipy's signature (True or False, or 0, 1; default False); `a` and `b` are
        never modified.
    check_finite : bool, optional
        Check that `a` and `b` hold no infs or NaNs before any work (default True).
    lowest : {None, "half-x3", "half", "bfloat16", "tf32", "single"}, optional
        Keyword-only: the factorization's GEMM precision. "half-x3": error-corrected half, each
        operand split into two halves, three products on the half tensor cores, about float32's
        accuracy (the default for real `a`); "half": IEEE fp16 operands, fp32 sums;
        "bfloat16"; "tf32" (the default for complex `a`: cuBLAS has no complex 16-bit
        tensor-core GEMM, so "half-x3", "half" and "bfloat16" are for real `a` only); "single":
        no tensor cores. Panels and triangular solves are float32 (complex64) in every case.
        None: configuration "mixed.lowest" ("auto": the defaults above). "half" pays off for
        well-conditioned Hermitian positive definite `a`: at n = 32768, condition 1e4, its
        Cholesky (nb=2048) with 10 GMRES iterations beat half-x3's with 2-3; at 1e6 it needed
        100-131 and was 4x slower (perf/RESULTS.md).
    refinement : {None, "classical-gmres", "gmres", "classical", "none"}, optional
        Keyword-only: "classical-gmres" (GMRES-IR, the default: configuration
        "mixed.refinement"), "gmres", "classical", "none".
    tol : float, optional
        Keyword-only: the stopping test ||r||_inf <= tol ||x||_inf ||a||_inf per column, a
        positive number; None (the default): sqrt(n) eps (MAGMA's, cuSOLVER's).
    max_iter : int, optional
        Keyword-only: refinement iterations (GMRES cycles for "gmres"), >= 1; None:
        configuration "mixed.max_iter" (30).
    inner_tol : float or "auto", optional
        Keyword-only: GMRES's relative tolerance per correction, in (0, 1); "auto": 1e-8
        where the products with `a` run where the backend computes, and only the stopping
        test's estimate where they run on the host (info.a_on_host: each outer iteration's
        residual is then a pass over `a` on the host). None: configuration "mixed.inner_tol"
        ("auto").
    max_inner : int, optional
        Keyword-only: GMRES iterations per correction or cycle, >= 1; None: configuration
        "mixed.max_inner" (50).
    fallback : bool, optional
        Keyword-only (default True): when the code is negative (not converged, overflow on
        narrowing, the low-precision factorization failed), solve in the working precision
        instead (hybridla.solve); the answer is then as solve's. True or False, or 0, 1.
    equilibrate : bool, optional
        Keyword-only: scale `a` by powers of two before rounding (rows and columns; symmetric
        for "pos"), so that half precision neither overflows nor underflows on it. None (the
        default): configuration "mixed.equilibrate" (True). True or False, or 0, 1.
    backend, nb, lookahead, panel, trace, progress : optional
        Keyword-only engine options of the low-precision factorization, as lu_factor's, with
        configuration keys under "mixed." (its panels default to "gpu").
    ooc : {None, "auto", "always", "never"}, optional
        Keyword-only, for a host `a` (the CPU interface): where the working-precision matrix
        stays. "auto": where the backend computes with its low-precision copy when both fit
        the memory budget (device.memory_budget), else on the host (only the copy goes up and
        is factored in core; the refinement's products with `a`, its residuals and GMRES's
        A v, run on the host against `a` by block columns, only vectors crossing the link:
        info.a_on_host); "always": on the host whatever the size; "never": where the backend
        computes, or MemoryError. None (the default): configuration "device.ooc" ("auto").

    Returns
    -------
    x : ndarray or device array
        As solve's: `b`'s shape, where `a` lives (the GPU interface returns the same kind of
        device array as `b`), in the precision where `a` and `b` meet (float32 a with float64
        b: float64, refined to float64's accuracy, as scipy.linalg.solve would compute). An
        empty `a` (0 x 0) gives an empty x (as scipy.linalg.solve).
    info : hybridla.lapack._mixed.MixedInfo
        How it went: iterations (MAGMA's and cuSOLVER's code: k >= 0 converged after k
        refinement iterations, -1 stopped early, -2 overflow, -3 the low-precision
        factorization failed, -max_iter not converged), converged, residuals (the backward
        error's history), inner_iterations, fell_back, reason (why no solution came from the
        low precision), a_on_host (the products with `a` ran on the host: `ooc`), seconds
        (time per phase), ...

    Raises
    ------
    LinAlgError
        A singular `a`: "Matrix is singular."; with "pos", one that is not positive definite
        (the message names the minor); when the working-precision solve decides it (fallback)
        or the low-precision one fails without fallback. Without fallback, also code -2 (`a`
        overflows the low precision, or its ||a||_inf the working precision), the message
        saying why; the error's ``info`` attribute is the MixedInfo. (A refinement that does
        not converge, without fallback, returns its x with a negative info.iterations.)
    ValueError
        assume_a, lowest, refinement, tol, max_iter, inner_tol or max_inner has a bad value
        (named), or lowest is a real-only precision for a complex `a`; lower, overwrite_a,
        overwrite_b, fallback or equilibrate is not True or False; one of `a` and `b` is a
        device array and the other not; `a` is not square and 2-D, `b` not 1-D or 2-D with N
        rows; infs or NaNs (check_finite); a bad engine option (named), as lu_factor's.
    TypeError
        `a` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose dtype
        is not `a`'s (on the device `a` and `b` must have one dtype), or an unsupported device
        dtype.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        The low-precision matrix over the memory budget (device.memory_budget: on a device,
        or on the host backend where one is set), as lu_factor's; with ooc="never", also a
        host matrix whose working-precision copy does not fit beside it.

    See Also
    --------
    solve : The working-precision solve (the fallback).
    lstsq_mixed : The same for least squares.

    Notes
    -----
    On a device, the refinement's product with `a`'s triangle ("pos") adds its terms in an
    order that varies from run to run (cuda/hemv.cu), so a solve at the edge of the stopping
    test may take one refinement step more or less from one call to the next (the test is the
    same).

    The low precision bounds the condition numbers refinement can reach: with half-x3's LU,
    kappa 1e6 converged and 1e8 did not (n = 32768), so there the attempt costs its
    factorization and a GMRES correction on top of the fallback: 1.25 s against cuSOLVER
    dd_gesv's 0.74 on an H200 (perf/RESULTS.md).

    The LU's pivoting is configuration "mixed.panel_pivoting": "window" (the default)
    randomizes the low-precision copy with random butterflies (hybridla/butterfly.py) and
    searches each column's pivot within mixed.pivot_window block rows from the diagonal,
    which takes the pivot search across the whole height off the factorization's critical
    path; "partial" is LAPACK's. A matrix with a zero row or column (exactly singular) always
    gets partial pivoting, so that its failure carries LAPACK's info.

    A matrix whose ||a||_inf overflows the working precision (entries near the largest float)
    cannot have its refinement tested: code -2, the fallback's answer, or LinAlgError saying
    so without fallback.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 2., 0.], [2., 5., 1.], [0., 1., 3.]])
    >>> b = np.array([1., 2., 3.])
    >>> x, info = hybridla.solve_mixed(a, b, backend="host")
    >>> np.allclose(a @ x, b), x.dtype
    (True, dtype('float64'))
    >>> info.converged, info.fell_back, info.lowest
    (True, False, 'half-x3')
    >>> x, info = hybridla.solve_mixed(a, b, assume_a="pos", lowest="single", backend="host")
    >>> np.allclose(a @ x, b), info.converged
    (True, True)
    """
    lower, overwrite_a = _flag("lower", lower), _flag("overwrite_a", overwrite_a)
    overwrite_b, fallback = _flag("overwrite_b", overwrite_b), _flag("fallback", fallback)
    if assume_a not in ("gen", "general", "pos", "positive definite"):
        raise ValueError(f"assume_a must be 'gen' or 'pos'; got assume_a={assume_a!r}")
    hermitian = assume_a in ("pos", "positive definite")
    solver = _lapack.posv_mixed if hermitian else _lapack.gesv_mixed
    uplo = "L" if lower else "U"
    extra = dict(uplo=uplo) if hermitian else {}

    def full_precision():
        return solve(a, b, lower=lower, check_finite=False, assume_a=assume_a,
                     backend=backend, progress=progress)
    return _mixed("a", a, b, True, solver, extra, full_precision, check_finite, fallback,
                  dict(lowest=lowest, refinement=refinement, tol=tol, max_iter=max_iter,
                       inner_tol=inner_tol, max_inner=max_inner, equilibrate=equilibrate),
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress,
                       ooc=ooc),
                  backend,
                  "Matrix is singular." if not hermitian else None)


def lstsq_mixed(a, b, check_finite=True, *, lowest=None, refinement=None, tol=None,
                max_iter=None, inner_tol=None, max_inner=None, fallback=True, equilibrate=None,
                backend=None, nb=None, lookahead=None, panel=None, trace=None, progress=False,
                ooc=None):
    """Least squares (m >= n, full rank) to working precision, with the QR in a lower precision.

    The least-squares solution of a x = b: the QR factorization in a lower precision and
    refinement of the normal equations preconditioned by its R (lapack/gels_mixed.py). Every
    argument is checked before any work.

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix, M >= N, of full rank; host or device as for lu_factor. Never modified.
    b : (M,) or (M, K) array_like or device array
        The right-hand side(s), where `a` is (on a device of `a`'s dtype). Never modified.
    check_finite : bool, optional
        Check that `a` and `b` hold no infs or NaNs before any work (default True).
    lowest, refinement : optional
        Keyword-only, as solve_mixed's.
    tol : float, optional
        Keyword-only: the normal equations' stopping test
        ||a^H r||_inf <= tol ||x||_inf ||a||_1 ||a||_inf, a positive number; None (the
        default): sqrt(n) eps.
    max_iter, inner_tol, max_inner, fallback : optional
        Keyword-only, as solve_mixed's; the fallback is hybridla.lstsq.
    equilibrate : bool, optional
        Keyword-only, as solve_mixed's, but scaling columns only.
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options of the low-precision QR, and where a host `a` stays, as
        solve_mixed's.

    Returns
    -------
    x : (N,) or (N, K) ndarray or device array
        The solution, of N rows, as solve_mixed's otherwise (where `a` lives, in the precision
        where `a` and `b` meet).
    info : hybridla.lapack._mixed.MixedInfo
        As solve_mixed's.

    Raises
    ------
    LinAlgError
        A rank-deficient `a` (or one too ill-conditioned for the low precision: R's diagonal
        test in lapack/gels_mixed.py) does what lstsq does: with fallback, lstsq answers (and
        raises LinAlgError for a rank-deficient `a`); without, LinAlgError (code -3). So does
        an `a` whose ||a||_1 ||a||_inf leaves the working precision's safe range (code -2: the
        normal equations square a's magnitude; lstsq scales `a` as LAPACK's gels does).
        Without fallback, the error's ``info`` attribute is the MixedInfo.
    ValueError
        M < N (use hybridla.lstsq for the minimum-norm solution); a bad option (named), as
        solve_mixed's; one of `a` and `b` is a device array and the other not; `a` is not 2-D,
        `b` not 1-D or 2-D with M rows; infs or NaNs (check_finite).
    TypeError
        `a` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose dtype
        is not `a`'s, or an unsupported device dtype.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        As solve_mixed's.

    See Also
    --------
    lstsq : The working-precision solve (the fallback).
    solve_mixed : The same for square systems.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> b = np.array([1., 2., 2.])
    >>> x, info = hybridla.lstsq_mixed(a, b, backend="host")
    >>> np.allclose(x, [2 / 3, 1 / 2]), x.shape, info.converged
    (True, (2,), True)
    """
    fallback = _flag("fallback", fallback)

    def full_precision():
        return lstsq(a, b, check_finite=False, backend=backend, progress=progress)[0]
    return _mixed("a", a, b, False, _lapack.gels_mixed, {}, full_precision, check_finite,
                  fallback, dict(lowest=lowest, refinement=refinement, tol=tol,
                                 max_iter=max_iter, inner_tol=inner_tol, max_inner=max_inner,
                                 equilibrate=equilibrate),
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress,
                       ooc=ooc),
                  backend,
                  "the matrix is rank deficient in the low precision")


def _mixed(name, a, b, square, solver, extra, full_precision, check_finite, fallback,
           refinement_options, engine_options, backend, failure_message):
    """The user-level path of the mixed solvers: validate, put A where the work happens (a
    device array in place; a host array uploaded once on a device backend, as is, or kept on
    the host when only its low-precision copy fits: _a_stays_on_host), run the driver, fall
    back, and return x where a lives."""
    device = is_device_array(a)
    if device != is_device_array(b):
        raise ValueError("a and b must both be host arrays or both device arrays")
    if device:
        ops = _device_backend(name, backend)
        (m, n), dtype = _device_matrix_checks(name, a, ops, check_finite)
        b_shape, b_dtype = _device_matrix_checks("b", b, ops, check_finite, ndims=(1, 2))
        if b_dtype != dtype:
            raise TypeError(f"b must have the dtype of a ({dtype}) on the device; got {b_dtype}")
    else:
        array, a_dtype = _host_matrix(name, a, check_finite=False)  # a's check: below
        b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
        ops = _host_backend(backend)
        (m, n), b_shape = array.shape, b_array.shape
        dtype = _common_dtype(a_dtype, b_dtype)
    if square and m != n:
        raise ValueError(f"expected a square matrix for {name}; got shape {(m, n)}")
    if not square and m < n:
        raise ValueError(f"lstsq_mixed needs m >= n (a tall or square {name}); got shape "
                         f"{(m, n)}: use hybridla.lstsq for the minimum-norm solution")
    if b_shape[0] != m:
        raise ValueError(f"b must have {m} rows to match {name} (shape {(m, n)}); got shape "
                         f"{b_shape}")
    cfg = _config.config
    given = {key: (cfg.get(f"mixed.{key}") if value is None else value)
             for key, value in refinement_options.items()}
    given["equilibrate"] = _flag("equilibrate", given["equilibrate"])
    if given["lowest"] == "auto":
        given["lowest"] = "tf32" if np.dtype(dtype).kind == "c" else "half-x3"
    options = check_options(dtype, **given)
    # the LU's own block size where the device's table has one (its panels are cheaper than the
    # Cholesky's and QR's: tuning "mixed_lu_nb_large")
    plan = make_plan(ops, m, n, LOW_DTYPE[np.dtype(dtype)], routine="mixed",
                     table_routine="mixed_lu" if solver is _lapack.gesv_mixed else None,
                     **engine_options)
    nrhs = 1 if len(b_shape) == 1 else b_shape[1]
    if m == 0 or n == 0 or nrhs == 0:  # x has no entries (n or nrhs is 0): nothing to solve
        info = MixedInfo(lowest=options.lowest, refinement=options.refinement)
        if device:
            x = ops.empty((n, nrhs), dtype, like=b)
            return (x.reshape(n) if len(b_shape) == 1 else x), info
        return np.zeros((n,) + tuple(b_shape[1:]), dtype=dtype), info
    if device:
        _check_memory(ops, m, n, LOW_DTYPE[np.dtype(dtype)], plan.nb)
        on_host = False
    else:
        # what the solve keeps beside the low-precision copy where the backend computes
        workspace = solve_workspace_bytes(
            m, n, dtype, plan.nb, nrhs, options,
            triangles=2 if solver is _lapack.gesv_mixed else 1, herk_panels="uplo" in extra)
        on_host = _a_stays_on_host(ops, m, n, dtype, plan, workspace)
        if check_finite and not on_host:
            _require_finite(name, array)
    if device:
        B_store, _b_copy = _device_store(ops, b)
        try:
            B = B_store.read_block(0, m, 0, nrhs)
        finally:
            B_store.close()
        # only read: in place when column-major; a row-major a's copy lives in _a_copy
        (A, _a_copy), arriving = _device_store(ops, a), None
    else:
        # kept on the host: the user's array itself, read by block columns (no copy of its
        # size), but for the columns that fit beside the low-precision copy; its check for
        # infs and NaNs runs while the device factors that copy (the host is idle then, and
        # the solve never writes `a`), and is read below before any answer or fallback
        A, arriving = (HostResidentMatrix(
            ops, array, dtype, plan,
            kept=0 if "uplo" in extra else _columns_kept(ops, m, n, dtype, plan, workspace),
            meanwhile=functools.partial(_finite_beside, array, threads=_CHECK_THREADS)
            if check_finite else None), None) if on_host \
            else _host_working_matrix(ops, np.asfortranarray(array, dtype=dtype), plan)
        B = np.asfortranarray(b_array.reshape(m, nrhs), dtype=dtype)
    try:
        X, info = solver(ops, A, B, options, plan, arriving=arriving, **extra)
    except BaseException:
        if on_host and check_finite and not _finite_after(name, A):
            raise ValueError(_nonfinite_message(name)) from None  # the input's fault
        raise
    finally:
        A.close()
    if on_host and check_finite and not _finite_after(name, A):
        raise ValueError(_nonfinite_message(name))
    if info.iterations < 0 and fallback:
        _log.info("the %s solve did not reach the working precision (code %d): solving in "
                  "the working precision instead (fallback)", options.lowest, info.iterations)
        started = time.perf_counter()
        x = full_precision()
        info.fell_back = True
        info.seconds["fallback"] = time.perf_counter() - started
        info.seconds["total"] += info.seconds["fallback"]
        return x, info
    if X is None:
        if info.iterations == -3:
            what = info.reason or failure_message or _not_positive_definite(info.info)
            message = (f"{what} (the {options.lowest} factorization failed with "
                       f"info={info.info}, code -3; fallback=False)")
        else:
            message = f"{info.reason} (code -2; fallback=False)"
        error = LinAlgError(message)
        error.info = info
        raise error
    x = X.reshape((n,) if len(b_shape) == 1 else (n, nrhs))
    return (_to_device(ops, x, b) if device else x), info


def _not_positive_definite(info):
    return f"{info}-th leading minor of the array is not positive definite"
