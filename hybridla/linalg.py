"""User layer: scipy.linalg's names, signatures and conventions, on the hybrid engine.

Where the matrix lives decides the interface: a NumPy array (or anything array-like) is the CPU
interface, with the result in host memory; a device array (PyCUDA GPUArray, CuPy, PyTorch: any
`__cuda_array_interface__`) is the GPU interface, with the result left on the device as the same
kind of array. Engine options (backend, nb, lookahead, panel, trace) are keyword-only; None takes
them from `hybridla.config`.
"""
from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from scipy.linalg import LinAlgError, LinAlgWarning
from scipy.linalg.blas import find_best_blas_type

from . import backend as _backends
from . import config as _config
from . import lapack as _lapack
from .lapack import gelqs, geqrs, getrf, getrs, potrf, potrs
from .lapack._householder import LQ, QL, QR, copy_triangle
from .lapack._mixed import LOW_DTYPE, ArrivingMatrix, MixedInfo, check_options
from .lapack.gehrd import check_lo_hi
from .lapack.orghr import orghr
from .lapack.orgqr import form_q
from .scheduler.plan import make_plan

__all__ = ["lu_factor", "lu_solve", "solve", "cho_factor", "cho_solve", "cholesky", "qr", "ql",
           "lq", "lstsq", "hessenberg", "geqrf", "geqlf", "gelqf", "gehrd", "solve_mixed",
           "lstsq_mixed", "LinAlgError", "LinAlgWarning"]

_TRANS = {0: "N", 1: "T", 2: "C", "N": "N", "T": "T", "C": "C"}


def is_device_array(x) -> bool:
    return hasattr(x, "__cuda_array_interface__")


# -- validation: once, here ------------------------------------------------------------------------
def _lapack_dtype(name, dtype):
    """The LAPACK precision scipy would use for this dtype (ints -> float64, float16 -> float32)."""
    if dtype.kind not in "biufc":
        raise TypeError(f"{name} must hold numbers; got dtype {dtype} for {name}")
    prefix, lapack_dtype, _ = find_best_blas_type(dtype=dtype)
    return np.dtype(lapack_dtype)


# host arrays from this size on are checked for NaN and infinity by a thread per core: one core
# reads memory at a fraction of the machine's bandwidth (the H100 machine's 16 cores, n = 32768:
# 0.093 s against numpy.asarray_chkfinite's 1.239; perf/RESULTS.md)
PARALLEL_CHECK_BYTES = 64 << 20


def _all_finite(array) -> bool:
    """Whether no entry of `array` is NaN or infinite (numpy.asarray_chkfinite's test), in a pass
    that allocates nothing: a sum with a NaN or an infinity among its terms is not finite, so a
    finite sum settles it, and only a sum that overflowed needs the test entry by entry. A large
    contiguous array is summed in pieces by several threads (NumPy's sums release the GIL)."""
    if array.dtype.kind not in "fc":
        return True
    with np.errstate(over="ignore", invalid="ignore"):
        threads = os.cpu_count() or 1
        if array.nbytes >= PARALLEL_CHECK_BYTES and threads > 1 and \
                (array.flags.c_contiguous or array.flags.f_contiguous):
            pieces = np.array_split(array.ravel(order="K"), threads)  # views
            with ThreadPoolExecutor(threads) as pool:
                total = sum(pool.map(np.sum, pieces))
        else:
            total = np.sum(array)
        return bool(np.isfinite(total)) or bool(np.isfinite(array).all())


def _host_matrix(name, x, check_finite, ndims=(2,)):
    array = np.asarray(x)
    if check_finite and not _all_finite(array):
        raise ValueError(f"{name} must not contain infs or NaNs (check_finite=True)")
    if array.ndim not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"expected a {want} array for {name}; got shape {array.shape}")
    return array, _lapack_dtype(name, array.dtype)


def _device_matrix_checks(name, x, backend, check_finite, ndims=(2,)):
    shape = tuple(x.__cuda_array_interface__["shape"])
    if len(shape) not in ndims:
        want = " or ".join(f"{d}-D" for d in ndims)
        raise ValueError(f"expected a {want} array for {name}; got shape {shape}")
    dtype = np.dtype(x.__cuda_array_interface__["typestr"])
    if dtype not in (np.float32, np.float64, np.complex64, np.complex128):
        raise TypeError(f"a device array {name} must be float32, float64, complex64 or "
                        f"complex128; got dtype {dtype}")
    if check_finite and backend.has_nonfinite(x):
        raise ValueError(f"{name} must not contain infs or NaNs (check_finite=True)")
    return shape, dtype


def _device_backend(name, backend):
    if backend not in (None, "auto", "cuda"):
        raise ValueError(f"{name} is a device array, which needs backend='cuda'; got "
                         f"backend={backend!r}")
    return _backends.get_backend("cuda")


def _host_backend(backend):
    return _backends.get_backend(_config.get("backend") if backend is None else backend)


def _check_memory(backend, m, n, dtype, nb, extra_bytes=0):
    """Refuse before any work starts a matrix that does not fit the device-memory budget
    (`extra_bytes`: what else the call keeps on the device, such as the working-precision copy
    of a mixed solve)."""
    if not backend.has_device:
        return
    need = backend.required_bytes(m, n, dtype, nb) + extra_bytes
    budget = _config.get("device.memory_budget")
    budget = int(0.9 * backend.free_memory()) if budget is None else int(budget)
    if need > budget:
        raise MemoryError(
            f"the {m} x {n} {np.dtype(dtype)} matrix needs {need} bytes of device memory "
            f"({m * n * np.dtype(dtype).itemsize} for the matrix itself), over the budget of "
            f"{budget} bytes (config device.memory_budget); out-of-core factorization is not "
            f"available yet")


def _warn_singular(info):
    if info > 0:
        warnings.warn(f"Diagonal number {info} is exactly zero. Singular matrix.",
                      LinAlgWarning, stacklevel=3)


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
    lu, piv, info = _getrf(a, overwrite_a, check_finite, backend,
                           dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace,
                                progress=progress))
    _warn_singular(info)
    return lu, piv


def _getrf(a, overwrite_a, check_finite, backend, options):
    """Validate, plan and run getrf; returns (lu, piv, info) with lu where a lives."""
    def driver(A, plan):
        pivots, info, trace = getrf(A, plan)
        return info, pivots.copy(), trace
    lu, info, pivots = _factor(a, overwrite_a, check_finite, backend, options, "lu", driver)
    return lu, (np.zeros(0, np.int32) if pivots is None else pivots), info


def _factor(a, overwrite_a, check_finite, backend, options, routine, driver, square=False,
            keep_other_triangle=False):
    """The common path of the factorizations: validate once, pick the backend and the plan,
    wrap the matrix in a tile store (device array in place or copied; host array streamed from
    and to where the result goes), run `driver(A, plan) -> (info, extra, trace)`, free the
    store whatever happens. Returns (result, info, extra); an empty matrix gives extra None."""
    device = is_device_array(a)
    if device:
        ops = _device_backend("a", backend)
        (m, n), dtype = _device_matrix_checks("a", a, ops, check_finite)
    else:
        array, dtype = _host_matrix("a", a, check_finite)
        ops = _host_backend(backend)
        m, n = array.shape
    if square and m != n:
        raise ValueError(f"expected a square matrix for a; got shape {(m, n)}")
    plan = make_plan(ops, m, n, dtype, routine=routine, **options)
    if m == 0 or n == 0:
        return (a if device else np.empty_like(array, dtype=dtype)), 0, None
    _check_memory(ops, m, n, dtype, plan.nb)
    write_back = None
    if device:
        A, result, write_back = ops.device_matrix(a, plan.nb, overwrite_a)
    else:
        source, result = _host_source_and_result(
            array, dtype, overwrite_a and array is a,
            copy_needed=keep_other_triangle or not ops.has_device)
        A = ops.host_matrix(source, result, plan.nb)
    try:
        info, extra, run_trace = driver(A, plan)
    finally:
        A.close()
    if write_back is not None:
        write_back()
    if plan.trace_path:
        run_trace.to_chrome(plan.trace_path)
    return result, info, extra


def _host_source_and_result(array, dtype, may_overwrite, copy_needed):
    """Where the factorization reads the matrix from and writes the factors to.

    In place when allowed and the array is F-ordered of the LAPACK dtype. Otherwise the result is
    a new F-ordered array; a device backend streams from the user's array directly (no host copy
    first) when its layout allows, the host backend factors in the new array."""
    usable = array.flags.f_contiguous and array.dtype == dtype and array.flags.writeable
    if may_overwrite and usable:
        return array, array
    result = np.empty(array.shape, dtype=dtype, order="F")
    if usable and not copy_needed:
        return array, result
    result[...] = array
    return result, result


# -- Cholesky ------------------------------------------------------------------------------------
def cho_factor(a, lower=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
               lookahead=None, panel=None, trace=None, progress=False):
    """Cholesky factorization of a Hermitian positive definite matrix, as scipy.linalg.cho_factor.

    Returns (c, lower): the factor in the `lower` (or upper) triangle of c; only that triangle of
    a is read, and the other triangle of c keeps what a held there (scipy documents it as
    arbitrary). Not positive definite -> LinAlgError naming the failing leading minor, as scipy.
    Engine options as lu_factor's (configuration keys under "cho.")."""
    c, _ = _potrf(a, lower, overwrite_a, check_finite, backend,
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress))
    return c, lower


def cholesky(a, lower=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
             lookahead=None, panel=None, trace=None):
    """The Cholesky factor U (A = U^H U) or, with lower=True, L (A = L L^H), as
    scipy.linalg.cholesky: the other triangle is zero."""
    c, _ = _potrf(a, lower, overwrite_a, check_finite, backend,
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))
    if is_device_array(c):
        _backends.get_backend("cuda").zero_triangle(c, upper=bool(lower))
        return c
    return np.tril(c) if lower else np.triu(c)


def _potrf(a, lower, overwrite_a, check_finite, backend, options):
    uplo = "L" if lower else "U"

    def driver(A, plan):
        info, trace = potrf(A, plan, uplo)
        return info, None, trace
    c, info, _ = _factor(a, overwrite_a, check_finite, backend, options, "cho", driver,
                         square=True, keep_other_triangle=True)
    if info > 0:
        raise LinAlgError(f"{info}-th leading minor of the array is not positive definite")
    return c, info


def cho_solve(c_and_lower, b, overwrite_b=False, check_finite=True, *, backend=None):
    """Solve A x = b with the factor from cho_factor, as scipy.linalg.cho_solve."""
    c, lower = c_and_lower
    _backends.check_name(backend)
    uplo = "L" if lower else "U"
    if is_device_array(c) != is_device_array(b):
        raise ValueError("c and b must both be host arrays or both device arrays")
    if is_device_array(c):
        return _device_solve("c", c, b, overwrite_b, check_finite, backend,
                             lambda ops, C, B: potrs(ops, C, B, uplo))
    c, dtype = _host_matrix("c", c, check_finite)
    b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
    n = _check_triangular_solve_shapes("c", c.shape, b_array.shape)
    dtype = np.promote_types(dtype, b_dtype)
    ops = _backends.get_backend("host")
    x = _host_rhs(b_array, n, dtype, overwrite_b)
    potrs(ops, ops.wrap(np.asarray(c, dtype=dtype, order="F")), ops.wrap(x), uplo)
    return x.reshape(b_array.shape)


def _check_triangular_solve_shapes(name, factor_shape, b_shape):
    if factor_shape[0] != factor_shape[1]:
        raise ValueError(f"expected a square matrix for {name}; got shape {factor_shape}")
    n = factor_shape[0]
    if b_shape[0] != n:
        raise ValueError(f"b must have {n} rows to match {name} (shape {factor_shape}); "
                         f"got shape {b_shape}")
    return n


def _host_rhs(b_array, n, dtype, overwrite_b):
    """The right-hand side as the F-ordered n x nrhs array the solve overwrites: b itself when
    allowed and already in that form, else a copy."""
    rhs = b_array.reshape(n, -1) if b_array.ndim == 1 else b_array
    if overwrite_b and rhs.dtype == dtype and rhs.flags.f_contiguous and rhs.flags.writeable:
        return rhs
    return np.array(rhs, dtype=dtype, order="F")


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True, *, backend=None):
    """Solve A x = b (trans 0), A^T x = b (1) or A^H x = b (2) with the factors of lu_factor.

    Host factors and right-hand side are solved on the host (LAPACK-style triangular solves);
    device factors and right-hand side on the device, returning x as the same kind of array as b.
    """
    lu, piv = lu_and_piv
    _backends.check_name(backend)
    if trans not in _TRANS:
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
    dtype = np.promote_types(dtype, b_dtype)
    ops = _backends.get_backend("host")
    factors = ops.wrap(np.asarray(lu, dtype=dtype, order="F"), piv)
    x = _host_rhs(b_array, n, dtype, overwrite_b)
    getrs(ops, factors, ops.wrap(x), _TRANS[trans])
    return x.reshape(b_array.shape)


def _check_solve_shapes(lu_shape, piv_shape, b_shape):
    n = _check_triangular_solve_shapes("lu", lu_shape, b_shape)
    if piv_shape != (n,):
        raise ValueError(f"piv must have shape ({n},) to match lu; got shape {piv_shape}")
    return n


def _device_solve(name, factors, b, overwrite_b, check_finite, backend, solve, pivots=None):
    """Triangular solves with factors that live on the device: validate, wrap the factors (in
    place when column-major: they are only read) and b (copied unless overwrite_b), run
    `solve(ops, F, B)`, free both stores; x comes back as the same kind of array as b."""
    ops = _device_backend(name, backend)
    factor_shape, dtype = _device_matrix_checks(name, factors, ops, check_finite=False)
    b_shape, b_dtype = _device_matrix_checks("b", b, ops, check_finite, ndims=(1, 2))
    if pivots is None:
        _check_triangular_solve_shapes(name, factor_shape, b_shape)
    else:
        _check_solve_shapes(factor_shape, pivots.shape, b_shape)
    if b_dtype != dtype:
        raise TypeError(f"b must have the dtype of {name} ({dtype}) on the device; got {b_dtype}")
    F, _, _ = ops.device_matrix(factors, 1, overwrite=_column_major(factors))
    B, x, write_back = ops.device_matrix(b, 1, overwrite_b)
    try:
        if pivots is not None:
            F.set_pivots(pivots)
        solve(ops, F, B)
        ops.synchronize()
    finally:
        F.close()
        B.close()
    if write_back is not None:
        write_back()
    return x.reshape(b_shape) if len(b_shape) == 1 else x


def _column_major(x):
    from .backend.cuda import device_array_layout
    _, (m, n), dtype, strides = device_array_layout(x)
    return strides[0] == dtype.itemsize


def solve(a, b, lower=False, overwrite_a=False, overwrite_b=False, check_finite=True,
          assume_a=None, transposed=False, *, backend=None, nb=None, lookahead=None, panel=None,
          trace=None):
    """Solve a x = b for a square a, as scipy.linalg.solve: assume_a "gen" (the default) by LU
    (getrf + getrs), "pos" by Cholesky (potrf + potrs) on the `lower` (or upper) triangle.

    A singular a raises LinAlgError("Matrix is singular."); one that is not positive definite
    with "pos", LinAlgError naming the failing minor. transposed=True solves a^T x = b ("gen").
    """
    if assume_a not in (None, "gen", "general", "pos", "positive definite"):
        raise ValueError(f"assume_a={assume_a!r} is not supported yet; use None, 'gen' or 'pos'")
    shape = tuple(a.__cuda_array_interface__["shape"]) if is_device_array(a) else np.shape(a)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"expected a square 2-D matrix for a; got shape {shape}")
    if assume_a in ("pos", "positive definite"):
        # A^T = conj(A) for Hermitian A: transposed=True changes nothing a real user would see
        c, _ = _potrf(a, lower, overwrite_a, check_finite, backend,
                      dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))
        return cho_solve((c, lower), b, overwrite_b=overwrite_b, check_finite=check_finite)
    lu, piv, info = _getrf(a, overwrite_a, check_finite, backend,
                           dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))
    if info > 0:
        raise LinAlgError("Matrix is singular.")
    return lu_solve((lu, piv), b, trans=1 if transposed else 0, overwrite_b=overwrite_b,
                    check_finite=check_finite)


# -- QR, QL, LQ ----------------------------------------------------------------------------------
_MODES = ("full", "r", "economic", "raw")
_FACTORIZATIONS = {"QR": _lapack.geqrf, "QL": _lapack.geqlf, "LQ": _lapack.gelqf}


def _householder_factor(a, form, overwrite_a, check_finite, backend, options):
    """`_factor` with geqrf, geqlf or gelqf as its driver: returns (factors, info, tau)."""
    def driver(A, plan):
        tau, info, trace = _FACTORIZATIONS[form.storage](A, plan)
        return info, tau.copy(), trace
    return _factor(a, overwrite_a, check_finite, backend, options, "qr", driver)


def geqrf(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
          panel=None, trace=None):
    """LAPACK geqrf: (factors, tau), R on and above the diagonal of factors and the Householder
    reflectors below it, as scipy.linalg.lapack's dgeqrf returns its first two outputs; what
    qr(mode="raw") returns without building R. Options as qr's."""
    return _householder_factors(a, QR, overwrite_a, check_finite, backend, nb, lookahead,
                                panel, trace)


def geqlf(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
          panel=None, trace=None):
    """LAPACK geqlf: (factors, tau) of A = Q L in LAPACK's storage (see ql)."""
    return _householder_factors(a, QL, overwrite_a, check_finite, backend, nb, lookahead,
                                panel, trace)


def gelqf(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
          panel=None, trace=None):
    """LAPACK gelqf: (factors, tau) of A = L Q in LAPACK's storage (see lq)."""
    return _householder_factors(a, LQ, overwrite_a, check_finite, backend, nb, lookahead,
                                panel, trace)


def _householder_factors(a, form, overwrite_a, check_finite, backend, nb, lookahead, panel,
                         trace):
    factors, _, tau = _householder_factor(a, form, overwrite_a, check_finite, backend,
                                          dict(nb=nb, lookahead=lookahead, panel=panel,
                                               trace=trace))
    return factors, (np.zeros(0, _shape_and_dtype(factors)[1]) if tau is None else tau)


def qr(a, overwrite_a=False, lwork=None, mode="full", pivoting=False, check_finite=True, *,
       backend=None, nb=None, lookahead=None, panel=None, trace=None):
    """QR decomposition A = Q R (Householder, LAPACK geqrf), as scipy.linalg.qr.

    By `mode`, k = min(m, n): "full": (Q m x m, R m x n); "economic": (Q m x k, R k x n);
    "r": (R,), m x n; "raw": ((factors, tau), R) with R k x n and (factors, tau) LAPACK geqrf's
    output, which scipy.linalg.lapack's orgqr/ungqr and ormqr/unmqr take. The diagonal of R is
    real (LAPACK's convention); Q and R agree with scipy's up to rounding.
    pivoting=True (column pivoting, LAPACK geqp3) is not implemented: NotImplementedError.
    lwork is accepted for scipy compatibility and ignored (the engine sizes its workspaces).
    Engine options as lu_factor's (configuration keys under "qr."). A device array gives
    device arrays (Q formed on the device); tau (raw mode) is a host array either way.
    """
    if pivoting:
        raise NotImplementedError("pivoting=True (QR with column pivoting, LAPACK geqp3) is not "
                                  "implemented in hybridla.qr; use scipy.linalg.qr")
    return _householder(a, QR, mode, overwrite_a, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))


def ql(a, overwrite_a=False, lwork=None, mode="full", check_finite=True, *, backend=None,
       nb=None, lookahead=None, panel=None, trace=None):
    """QL decomposition A = Q L (LAPACK geqlf; scipy has none), with qr's modes, k = min(m, n):
    "full": (Q m x m, L m x n, lower trapezoidal on and below the (n-m)-th superdiagonal);
    "economic": (Q m x k, Q's last k columns, L k x n, L's last k rows); "r": (L,), m x n;
    "raw": ((factors, tau), L) with L k x n, in LAPACK geqlf's storage. On the GPU the panels
    are cuSOLVER geqrf's on the reversed panel; options as qr's."""
    return _householder(a, QL, mode, overwrite_a, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))


def lq(a, overwrite_a=False, lwork=None, mode="full", check_finite=True, *, backend=None,
       nb=None, lookahead=None, panel=None, trace=None):
    """LQ decomposition A = L Q (LAPACK gelqf; scipy has none), with qr's modes, k = min(m, n):
    "full": (L m x n, Q n x n); "economic": (L m x k, Q k x n, Q's first k rows); "r": (L,),
    m x n; "raw": ((factors, tau), L) with L m x k, in LAPACK gelqf's storage. On the GPU the
    panels are cuSOLVER geqrf's on the conjugate-transposed panel; options as qr's."""
    return _householder(a, LQ, mode, overwrite_a, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))


def _householder(a, form, mode, overwrite_a, check_finite, backend, options):
    """Factor with the form's driver (geqrf, geqlf, gelqf) through `_factor`, then build what
    `mode` asks for where the factors are (the host, or the device for a device array), with
    the same ops on tile stores on either. Returns (Q, T) ((T, Q) for LQ), (T,) or
    ((factors, tau), T)."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}; got mode={mode!r}")
    factors, _, tau = _householder_factor(a, form, overwrite_a, check_finite, backend, options)
    (m, n), dtype = _shape_and_dtype(factors)
    k = min(m, n)
    tau = np.zeros(0, dtype) if tau is None else tau
    order, cols = form.shape(m, n)
    economic = mode in ("economic", "raw")
    ops = _backends.get_backend("cuda" if is_device_array(factors) else "host")
    plan = make_plan(ops, m, n, dtype, routine="qr", nb=options["nb"],
                     lookahead=options["lookahead"])
    stores = [ops.wrap(factors, tau=tau)]
    try:
        triangle = ops.empty(form.shape(k, cols) if economic else (m, n), dtype, like=factors)
        stores.append(ops.wrap(triangle))
        copy_triangle(ops, stores[0], form, stores[1])
        if mode in ("r", "raw"):
            ops.synchronize()
            return (triangle,) if mode == "r" else ((factors, tau), triangle)
        q = ops.empty(form.shape(order, k) if economic else (order, order), dtype, like=factors)
        stores.append(ops.wrap(q))
        form_q(stores[0], stores[2], plan, form)
        ops.synchronize()
    finally:
        for store in stores:
            store.close()
    return (triangle, q) if form.transpose else (q, triangle)


def _shape_and_dtype(x):
    if is_device_array(x):
        cai = x.__cuda_array_interface__
        return tuple(cai["shape"]), np.dtype(cai["typestr"])
    return x.shape, x.dtype


# -- Hessenberg ----------------------------------------------------------------------------------
def gehrd(a, lo=0, hi=None, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
          trace=None, stats=None):
    """LAPACK gehrd: (factors, tau) of the reduction to upper Hessenberg form Q^H A Q = H, as
    scipy.linalg.lapack's dgehrd / zgehrd return their first two outputs: H on and above the
    first subdiagonal of factors, reflector j below it (v_j[j+2:] in column j, its unit in row
    j + 1 implied), tau of n - 1 entries (0 outside lo..hi-1).

    lo and hi are 0-based and inclusive, scipy's convention (LAPACK's ILO - 1 and IHI - 1;
    default 0 and n - 1): only rows and columns lo..hi are reduced, a being upper triangular
    outside them already (as gebal leaves it). scipy.linalg.lapack's orghr / unghr with the same
    lo and hi form Q from the result. Bad lo or hi raise ValueError naming them (LAPACK's
    ranges: 0 <= lo <= max(0, n - 1), min(lo, n - 1) <= hi <= n - 1).
    Engine options: backend, nb (panel width; configuration "hrd.nb"), trace (a path for the
    run's Chrome trace), stats (a hybridla.lapack.gehrd.HessenbergStats that receives the
    calls, time and bytes of the matrix-vector phase). A device array is reduced on the device
    and stays there; tau is a host array either way."""
    return _gehrd(a, lo, hi, overwrite_a, check_finite, backend, nb, trace, stats)


def _gehrd(a, lo, hi, overwrite_a, check_finite, backend, nb, trace, stats):
    """Validate lo and hi against a's order (before anything is written), then gehrd through
    `_factor`; returns (factors, tau)."""
    n = _square_order(a)
    if n is not None:  # else `_factor` raises for the shape
        lo, hi = check_lo_hi(n, lo, n - 1 if hi is None else hi)

    def driver(A, plan):
        tau, info, run_trace = _lapack.gehrd(A, plan, lo, hi, stats=stats)
        return info, tau, run_trace
    # no look-ahead and the panels on the CPU: gehrd.py says why
    factors, _, tau = _factor(a, overwrite_a, check_finite, backend,
                              dict(nb=nb, lookahead=0, panel="cpu", trace=trace), "hrd", driver,
                              square=True)
    if tau is None:  # an empty matrix
        tau = np.zeros(0, _shape_and_dtype(factors)[1])
    return factors, tau


def _square_order(a):
    """n for an n x n matrix (host or device), else None."""
    shape = _shape_and_dtype(a)[0] if is_device_array(a) else np.shape(a)
    return shape[0] if len(shape) == 2 and shape[0] == shape[1] else None


def hessenberg(a, calc_q=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
               trace=None, stats=None):
    """Hessenberg form of a square matrix, A = Q H Q^H, as scipy.linalg.hessenberg: H (zero
    below the first subdiagonal), and with calc_q=True (H, Q), Q unitary (LAPACK gehrd, then
    orghr / unghr). The same results as scipy's: scipy's shortcut included, a matrix of order 1
    or 2 comes back as it is (a copy, in its own dtype, with Q = the float64 identity), where
    gehrd would make a complex subdiagonal entry real; empty input gives empty results.

    Engine options as gehrd's (configuration "hrd.nb"); Q is formed by the QR family's orgqr
    with nb, or "qr.nb" when nb is None. A device array gives device arrays (H reduced, Q formed
    and H's lower part cleared on the device)."""
    n = _square_order(a)
    if n is not None and n <= 2 and not is_device_array(a):
        _backends.check_name(backend)
        array, dtype = _host_matrix("a", a, check_finite)
        if n == 0:  # scipy: empty results in the LAPACK dtype
            return (np.empty((0, 0), dtype), np.empty((0, 0), dtype)) if calc_q \
                else np.empty((0, 0), dtype)
        return (array.copy(), np.eye(n)) if calc_q else array.copy()
    # device arrays of order <= 2: no reflector at all (hi = lo), so again H = A and Q = I
    hi = None if n is None or n > 2 else min(n - 1, 0)
    factors, tau = _gehrd(a, 0, hi, overwrite_a, check_finite, backend, nb, trace, stats)
    (n, _), dtype = _shape_and_dtype(factors)
    ops = _backends.get_backend("cuda" if is_device_array(factors) else "host")
    if n == 0:  # an empty device array
        return (factors, ops.empty((0, 0), dtype, like=factors)) if calc_q else factors
    stores = [ops.wrap(factors, tau=tau)]
    try:
        if calc_q:
            q = ops.empty((n, n), dtype, like=factors)
            stores.append(ops.wrap(q))
            plan = make_plan(ops, n, n, dtype, routine="qr", nb=nb, lookahead=0, panel="cpu")
            orghr(stores[0], stores[1], plan, 0, n - 1 if hi is None else hi)
        if n > 2:  # H: zeros below the first subdiagonal, where the reflectors were
            lane = ops.lane("gpu:update")
            with lane:
                ops.laset(lane, "L", 0, 0, stores[0].block(2, n, 0, n - 2))
        ops.synchronize()
    finally:
        for store in stores:
            store.close()
    return (factors, q) if calc_q else factors


# -- least squares -------------------------------------------------------------------------------
def lstsq(a, b, cond=None, overwrite_a=False, overwrite_b=False, check_finite=True,
          lapack_driver=None, *, backend=None, nb=None, lookahead=None, panel=None, trace=None):
    """The least-squares solution of a x = b for m >= n, the minimum-norm solution for m < n,
    for a of full rank (LAPACK gels: QR for m >= n, LQ for m < n), as scipy.linalg.lstsq.

    Returns (x, residues, rank, s) as scipy's: x n x nrhs (or (n,) for 1-D b); residues the
    squared 2-norms of b - a x's columns when m > n (a scalar for 1-D b), else an empty array;
    rank = min(m, n); s = None (no SVD is computed).

    Full rank is required: when the triangular factor has a diagonal entry with
    |T(i, i)| <= tol max_j |T(j, j)|, tol = `cond` if given, else max(m, n) eps, lstsq raises
    LinAlgError naming i (b is not touched). The test sees what QR without pivoting sees: a
    numerically rank-deficient a whose |T(i, i)| all stay large passes it; for rank-deficient
    problems use scipy.linalg.lstsq (SVD). lapack_driver must be None (the driver is gels);
    overwrite_b is accepted and b is never modified; overwrite_a as lu_factor's. Engine options
    as qr's.
    """
    if lapack_driver is not None:
        raise ValueError(f"lapack_driver must be None (hybridla.lstsq solves by QR or LQ, LAPACK "
                         f"gels); got lapack_driver={lapack_driver!r}")
    if cond is not None and not (np.isscalar(cond) and np.real(cond) >= 0):
        raise ValueError(f"cond must be a number >= 0 or None; got cond={cond!r}")
    device = is_device_array(a)
    if device != is_device_array(b):
        raise ValueError("a and b must both be host arrays or both device arrays")
    if device:
        ops = _device_backend("a", backend)
        (m, n), dtype = _device_matrix_checks("a", a, ops, check_finite)
        b_shape, b_dtype = _device_matrix_checks("b", b, ops, check_finite, ndims=(1, 2))
        if b_dtype != dtype:
            raise TypeError(f"b must have the dtype of a ({dtype}) on the device; got {b_dtype}")
        a_work, rhs = a, b
    else:
        array, a_dtype = _host_matrix("a", a, check_finite)
        b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
        (m, n), b_shape = array.shape, b_array.shape
    if b_shape[0] != m:
        raise ValueError(f"b must have {m} rows to match a (shape {(m, n)}); got shape {b_shape}")
    nrhs = 1 if len(b_shape) == 1 else b_shape[1]
    if not device:
        dtype = np.promote_types(a_dtype, b_dtype)
        # a copy in the common precision is ours to overwrite
        a_work = array if array.dtype == dtype else array.astype(dtype, order="F")
        overwrite_a = overwrite_a or a_work is not array
        rhs = np.asfortranarray(b_array.reshape(m, nrhs), dtype=dtype)
    form, solve = (QR, geqrs) if m >= n else (LQ, gelqs)
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace)
    factors, _, tau = _householder_factor(a_work, form, overwrite_a, False, backend, options)
    ops = _backends.get_backend("cuda" if device else "host")
    plan = make_plan(ops, m, n, dtype, routine="qr", nb=nb, lookahead=lookahead)
    rank_tol = max(m, n) * np.finfo(dtype).eps if cond is None else float(np.real(cond))
    # the right-hand side goes into the max(m, n) x nrhs array the solve overwrites; x is its
    # first n rows, copied out when there are more (m > n: the rest holds the residuals)
    work = ops.empty((max(m, n), nrhs), dtype, like=b)
    x = work if max(m, n) == n else ops.empty((n, nrhs), dtype, like=b)
    stores = [ops.wrap(rhs), ops.wrap(work), ops.wrap(x)]
    B, W, X = stores
    try:
        lane = ops.lane("gpu:update")
        with lane:
            ops.lacpy(lane, "A", B.block(0, m, 0, nrhs), W.block(0, m, 0, nrhs))
        if m == 0 or n == 0:  # as scipy: x = 0, and b's norms are the residuals when n == 0
            with lane:
                ops.laset(lane, "A", 0, 0, X.block(0, n, 0, nrhs))
            residues = W.read_block(0, m, 0, nrhs) if n == 0 else None
            info = 0
        else:
            F = ops.wrap(factors, tau=tau)
            stores.append(F)
            info, _ = solve(F, W, plan, rank_tol)
            if info == 0 and x is not work:
                with lane:
                    ops.lacpy(lane, "A", W.block(0, n, 0, nrhs), X.block(0, n, 0, nrhs))
            residues = W.read_block(n, m, 0, nrhs) if m > n and info == 0 else None
        ops.synchronize()
    finally:
        for store in stores:
            store.close()
    if info > 0:
        name = "R" if form is QR else "L"
        raise LinAlgError(
            f"a is rank deficient, or too close to it for a solve by {form.storage}: "
            f"|{name}({info}, {info})| <= {rank_tol:.3g} * max_j |{name}(j, j)| "
            f"(a has shape {(m, n)}); use scipy.linalg.lstsq (SVD) for rank-deficient problems")
    if residues is None:
        residues = np.empty(0, dtype=dtype)
    else:
        residues = (np.abs(residues) ** 2).sum(axis=0)
        residues = residues[0] if len(b_shape) == 1 else residues
    rank = min(m, n) if m and n else 0
    return (x.reshape(n) if len(b_shape) == 1 else x), residues, rank, None


# -- mixed precision -----------------------------------------------------------------------------
def solve_mixed(a, b, assume_a="gen", lower=False, overwrite_a=False, overwrite_b=False,
                check_finite=True, *, lowest=None, refinement=None, tol=None, max_iter=None,
                inner_tol=None, max_inner=None, fallback=True, equilibrate=True, backend=None,
                nb=None, lookahead=None, panel=None, trace=None):
    """Solve a x = b to working precision (a's dtype: float64, complex128, or float32) with the
    O(n^3) factorization in a lower precision and iterative refinement: MAGMA's and cuSOLVER's
    mixed-precision solvers, with GMRES refinement and tensor cores.

    assume_a "gen": LU (lapack/gesv_mixed.py); "pos": Cholesky of the Hermitian positive
    definite a, of which only the `lower` (or upper) triangle is read (lapack/posv_mixed.py).
    On a device, the refinement's product with that triangle adds its terms in an order that
    varies from run to run (cuda/hemv.cu), so a solve at the edge of the stopping test may
    take one refinement step more or less from one call to the next (the test is the same).

    lowest      the factorization's GEMM precision: "half-x3" (error-corrected half: each
                operand split into two halves, three products on the half tensor cores, about
                float32's accuracy; the default for real a), "half" (IEEE fp16 operands, fp32
                sums), "bfloat16", "tf32" (the default for complex a: cuBLAS has no complex
                16-bit tensor-core GEMM), "single" (no tensor cores). Panels and triangular
                solves are float32 (complex64) in every case. "half" pays off for well-
                conditioned Hermitian positive definite a: at n = 32768, condition 1e4, its
                Cholesky (nb=2048) with 10 GMRES iterations beat half-x3's with 2-3; at 1e6 it
                needed 100-131 and was 4x slower (perf/RESULTS.md).
    refinement  "classical-gmres" (default; GMRES-IR), "gmres", "classical", "none"
    tol         the stopping test ||r||_inf <= tol ||x||_inf ||a||_inf per column; default
                sqrt(n) eps (MAGMA's, cuSOLVER's)
    max_iter, inner_tol, max_inner   refinement iterations, GMRES's relative tolerance and
                iterations per correction or cycle (defaults from config "mixed.*")
    fallback    when the code is negative (not converged, overflow on narrowing, the
                low-precision factorization failed), solve in the working precision instead
                (hybridla.solve); the answer is then as solve's. The low precision bounds the
                condition numbers refinement can reach: with half-x3's LU, kappa 1e6 converged
                and 1e8 did not (n = 32768), so there the attempt costs its factorization and
                a GMRES correction on top of the fallback: 1.25 s against cuSOLVER dd_gesv's
                0.74 on an H200 (perf/RESULTS.md)
    equilibrate scale a by powers of two before rounding (rows and columns; symmetric for
                "pos"), so that half precision neither overflows nor underflows on it

    The LU's pivoting is config "mixed.panel_pivoting": "window" (the default) randomizes the
    low-precision copy with random butterflies (hybridla/butterfly.py) and searches each
    column's pivot within mixed.pivot_window block rows from the diagonal, which takes the
    pivot search across the whole height off the factorization's critical path; "partial"
    is LAPACK's. A matrix with a zero row or column (exactly singular) always gets partial
    pivoting, so that its failure carries LAPACK's info.

    Returns (x, info): x as solve's (shape of b, where a lives: the GPU interface returns the
    same kind of device array as b), info a MixedInfo (iterations code, residual history,
    fell_back, time per phase, ...). a and b are never modified (overwrite_a, overwrite_b are
    accepted for scipy's signature). A singular a raises LinAlgError("Matrix is singular."),
    one that is not positive definite with "pos" LinAlgError naming the minor, when the
    working-precision solve decides it (fallback) or the low-precision one fails without
    fallback.
    """
    if assume_a not in ("gen", "general", "pos", "positive definite"):
        raise ValueError(f"assume_a must be 'gen' or 'pos'; got assume_a={assume_a!r}")
    hermitian = assume_a in ("pos", "positive definite")
    solver = _lapack.posv_mixed if hermitian else _lapack.gesv_mixed
    uplo = "L" if lower else "U"
    extra = dict(uplo=uplo) if hermitian else {}

    def full_precision():
        return solve(a, b, lower=lower, check_finite=False, assume_a=assume_a,
                     backend=backend)
    return _mixed("a", a, b, True, solver, extra, full_precision, check_finite, fallback,
                  dict(lowest=lowest, refinement=refinement, tol=tol, max_iter=max_iter,
                       inner_tol=inner_tol, max_inner=max_inner, equilibrate=equilibrate),
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace), backend,
                  "Matrix is singular." if not hermitian else None)


def lstsq_mixed(a, b, check_finite=True, *, lowest=None, refinement=None, tol=None,
                max_iter=None, inner_tol=None, max_inner=None, fallback=True, equilibrate=True,
                backend=None, nb=None, lookahead=None, panel=None, trace=None):
    """The least-squares solution of a x = b (m >= n, full rank) to working precision, the QR
    factorization in a lower precision and refinement of the normal equations preconditioned by
    its R (lapack/gels_mixed.py). Options and result as solve_mixed's (equilibrate scales
    columns only; tol is the normal equations' ||a^H r||_inf <= tol ||x||_inf ||a||_1 ||a||_inf);
    the fallback is hybridla.lstsq. Returns (x, info), x of n rows.
    """
    def full_precision():
        return lstsq(a, b, check_finite=False, backend=backend)[0]
    return _mixed("a", a, b, False, _lapack.gels_mixed, {}, full_precision, check_finite,
                  fallback, dict(lowest=lowest, refinement=refinement, tol=tol,
                                 max_iter=max_iter, inner_tol=inner_tol, max_inner=max_inner,
                                 equilibrate=equilibrate),
                  dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace), backend,
                  "the matrix is rank deficient in the low precision")


def _mixed(name, a, b, square, solver, extra, full_precision, check_finite, fallback,
           refinement_options, engine_options, backend, failure_message):
    """The user-level path of the mixed solvers: validate, put A where the work happens (a
    device array in place; a host array uploaded once on a device backend, as is), run the
    driver, fall back, and return x where a lives."""
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
        array, a_dtype = _host_matrix(name, a, check_finite)
        b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
        ops = _host_backend(backend)
        (m, n), b_shape = array.shape, b_array.shape
        dtype = np.promote_types(a_dtype, b_dtype)
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
    if given["lowest"] == "auto":
        given["lowest"] = "tf32" if np.dtype(dtype).kind == "c" else "half-x3"
    options = check_options(dtype, **given)
    # the LU's own block size where the device's table has one (its panels are cheaper than the
    # Cholesky's and QR's: tuning "mixed_lu_nb_large")
    plan = make_plan(ops, m, n, LOW_DTYPE[np.dtype(dtype)], routine="mixed",
                     table_routine="mixed_lu" if solver is _lapack.gesv_mixed else None,
                     **engine_options)
    nrhs = 1 if len(b_shape) == 1 else b_shape[1]
    if m == 0 or n == 0 or nrhs == 0:
        x = np.zeros((n,) + tuple(b_shape[1:]), dtype=dtype)
        return (_to_device(ops, x, b) if device else x), MixedInfo(
            lowest=options.lowest, refinement=options.refinement)
    _check_memory(ops, m, n, LOW_DTYPE[np.dtype(dtype)], plan.nb,
                  extra_bytes=0 if device else m * n * np.dtype(dtype).itemsize)
    if device:
        B_store = ops.wrap(b)
        try:
            B = B_store.read_block(0, m, 0, nrhs)
        finally:
            B_store.close()
        A, arriving = ops.wrap(a), None  # in place when column-major: only read
    else:
        A, arriving = _host_working_matrix(ops, np.asfortranarray(array, dtype=dtype), plan)
        B = np.asfortranarray(b_array.reshape(m, nrhs), dtype=dtype)
    try:
        X, info = solver(ops, A, B, options, plan, arriving=arriving, **extra)
    finally:
        A.close()
    if info.iterations < 0 and fallback:
        started = time.perf_counter()
        x = full_precision()
        info.fell_back = True
        info.seconds["fallback"] = time.perf_counter() - started
        info.seconds["total"] += info.seconds["fallback"]
        return x, info
    if X is None:
        error = LinAlgError(f"{failure_message or _not_positive_definite(info.info)} (the "
                            f"{options.lowest} factorization failed with info={info.info}, "
                            f"code {info.iterations}; fallback=False)" if info.iterations == -3
                            else f"the matrix overflows {options.lowest} precision after "
                                 f"scaling (code -2; fallback=False)")
        error.info = info
        raise error
    x = X.reshape((n,) if len(b_shape) == 1 else (n, nrhs))
    return (_to_device(ops, x, b) if device else x), info


def _not_positive_definite(info):
    return f"{info}-th leading minor of the array is not positive definite"


def _host_working_matrix(ops, array, plan):
    """A host matrix as a tile store where the work happens, and its ArrivingMatrix or None:
    itself on the host backend; on a device one uploaded in block columns, once, and kept there
    (refinement reads it every iteration). The transfer mode is config mixed.host_transfer
    (staged by default: for this one-shot upload it beat pinning the user's array in place,
    perf/RESULTS.md), or device.host_transfer where that is null. Staged and large enough to
    stage (device.pin_min_bytes), the matrix goes up during the low-precision factorization,
    after its rounded copy (lapack/_mixed.ArrivingMatrix); otherwise before the solve."""
    if not ops.has_device:
        return ops.wrap(array), None
    transfer = _config.get("mixed.host_transfer") or _config.get("device.host_transfer")
    if transfer == "staged" and array.nbytes >= int(_config.get("device.pin_min_bytes")):
        A = ops.matrix(*array.shape, array.dtype, plan.nb, host_source=array)
        return A, ArrivingMatrix(ops, A, plan)
    from .lapack._blocked import record_uploads
    from .scheduler import TaskGraph, run
    with _config.set({"device.host_transfer": transfer}):
        A = ops.host_matrix(array, None, plan.nb)
    try:
        graph = TaskGraph()
        record_uploads(graph, A, plan)
        run(graph, ops, workers=plan.workers)
        ops.synchronize()
    except BaseException:
        A.close()
        raise
    return A, None


def _to_device(ops, x, like):
    """The host array x as a new device array of the kind of `like`."""
    shape = x.shape
    out = ops.empty((shape[0], 1 if x.ndim == 1 else shape[1]), x.dtype, like=like)
    X = ops.wrap(out)
    try:
        lane = ops.lane("gpu:update")
        ops.from_host(lane, x.reshape(shape[0], -1), X.block(0, shape[0], 0, X.n))
    finally:
        X.close()
    return out.reshape(shape) if x.ndim == 1 else out
