"""LU with partial pivoting: lu_factor and lu_solve (scipy.linalg._decomp_lu)."""
from __future__ import annotations

import numpy as np

from . import _solve_place, _stacked, _stacked_device
from . import backend as _backends
from ._common import (
    _TRANS,
    _common_dtype,
    _flag,
    _check_solve_shapes,
    _device_backend,
    _device_solve,
    _factor,
    _host_matrix,
    _host_rhs,
    _warn_singular,
    is_device_array,
)
from .lapack import gecon, getrf, getrf_ooc, getrs
from .lapack.getrs_ooc import getrs_ooc


# -- LU ------------------------------------------------------------------------------------------
def lu_factor(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
              panel=None, trace=None, progress=False, ooc=None):
    """LU factorization with partial pivoting, P A = L U, as scipy.linalg.lu_factor.

    Parameters
    ----------
    a : (..., M, N) array_like or device array
        The matrix to factor, real or complex. A NumPy array (or anything array-like) is the CPU
        interface: the factors come back in host memory, in the LAPACK precision scipy would use
        (integers: float64, float16: float32). A device array (any ``__cuda_array_interface__``:
        CuPy, PyTorch, PyCUDA GPUArray, Numba; or DLPack on a CUDA device: JAX, ...) is the GPU
        interface: float32, float64, complex64 or complex128, on any CUDA device, factored
        there after the work that produced it (its stream), the factors left on that device
        as the same kind of array. A stack (..., M, N), as scipy >= 1.15 takes
        it, is validated once and factored member by member on the host, in one batched
        computation on the device (see Notes).
    overwrite_a : bool, optional
        Whether the factors may be written over `a` (default False: `a` is left as it is). A
        host `a` is factored in place, and returned as `lu`, when it is an F-ordered, writeable
        ndarray of its LAPACK dtype (else the factors go to a new array); a device array always
        is (a row-major one is factored in a column-major copy, written back). True or False,
        or 0, 1, as scipy's LAPACK flags.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True); False skips that
        pass over every entry.
    backend : {None, "auto", "host", "cuda"}, optional
        Keyword-only engine option, as every factorization of hybridla takes it (the others
        refer to this description). Where the CPU interface runs: "host" (NumPy and SciPy's
        LAPACK, task-parallel), "cuda" (the matrix streamed to the GPU and back while it is
        factored), "auto" (cuda where it is available, else host). None (the default) takes
        configuration "backend" ("auto"). A device array always runs on cuda: None, "auto" or
        "cuda" only.
    nb : int or "auto", optional
        Keyword-only engine option: the block size (panel width), an integer >= 1; "auto": the
        device's tuning entry decides from the size. None (the default): configuration
        "lu.nb" ("auto").
    lookahead : int, optional
        Keyword-only engine option: panels factored ahead of the trailing update, >= 0 (0:
        none). None (the default): configuration "lu.lookahead" (1).
    panel : {None, "cpu", "gpu", "auto"}, optional
        Keyword-only engine option: where panels are factored; "auto": where the device's
        tuning entry names a place for the routine, there, else a cost model places each
        step's panel. The host backend factors every panel on the CPU. None (the default):
        configuration "lu.panel" ("auto").
    trace : str or path-like, optional
        Keyword-only engine option: a path to write the run's Chrome trace JSON to (open it in
        Perfetto; ``hybridla trace FILE`` renders it). None (the default): configuration
        "trace" (none).
    progress : bool, optional
        Keyword-only: show a progress bar (tqdm, on stderr) over the run's tasks (default
        False), as every long routine of hybridla takes it. A task counts once its work has
        finished: a CPU task when it returns, a GPU task when the CUDA event recorded after
        its work completes, not when it is queued. One bar per run of the engine (a QR with
        Q: geqrf's, then orgqr's), removed when the run ends.
    ooc : {None, "auto", "always", "never"}, optional
        Keyword-only engine option, as every factorization of hybridla that has an
        out-of-core version takes it: what happens to a host matrix (the CPU interface) that
        does not fit the memory budget (configuration "device.memory_budget"; on the host
        backend none unless one is set). "auto": it is factored out of core, left-looking over
        wide block columns as wide as the budget allows, each brought up, updated by the
        finished columns to its left streamed through, factored by the engine and sent home,
        every copy overlapping the work (the same pivots; lapack/getrf_ooc.py); "always": so
        is every host matrix; "never": MemoryError, before any work. A device array is
        factored where it is. None (the default): configuration "device.ooc" ("auto").

    Returns
    -------
    lu : (..., M, N) ndarray or device array
        U on and above the diagonal, L (unit diagonal, not stored) below it, where `a` lives,
        in `a`'s LAPACK dtype.
    piv : (..., K) ndarray or device array of int32
        The pivots, K = min(M, N), 0-based: row i was interchanged with row piv[i]. Where `a`
        lives: a host array on the CPU interface, a device array of `a`'s kind on the GPU
        interface (as cupyx.scipy.linalg.lu_factor's; torch.linalg.lu_factor's are 1-based).

    Raises
    ------
    ValueError
        `a` is not 2-D, or holds infs or NaNs (check_finite); overwrite_a is not True or False;
        backend, nb, lookahead or panel has a bad value (the message names it), or a device
        array comes with backend="host"; a device array has no unit stride along either axis,
        or lives on another GPU than the one the cuda backend runs on.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix (pass ``a.toarray()``), or is a
        device array of another dtype than float32, float64, complex64, complex128.
    RuntimeError
        backend="cuda" where the cuda backend is not available (the message says why).
    MemoryError
        A matrix that does not fit the memory budget (configuration "device.memory_budget")
        and may not go out of core (a device array, or ooc="never"), or whose out-of-core
        working store would not fit it either, before any work.

    Warns
    -----
    LinAlgWarning
        A zero U(i, i) (a singular matrix), as scipy's: "Diagonal number i is exactly zero.
        Singular matrix."; the factors are returned all the same.

    See Also
    --------
    lu_solve : Solve with the factors.
    solve : Factor and solve, with a condition estimate.

    Notes
    -----
    The engine options (backend, nb, lookahead, panel, trace) are keyword-only on every call;
    None takes them from `hybridla.config`, where later sources win: the built-in defaults
    (hybridla/data/defaults.yaml), YAML files in /etc/hybridla and ~/.config/hybridla,
    HYBRIDLA_* environment variables, ``hybridla.config.set``. Each family reads its own
    keys: "lu.*" here, "cho.*" for Cholesky, "qr.*" for QR, QL, LQ and lstsq.

    A stack (..., M, N) is never factored in place (overwrite_a is checked and ignored; the
    results are new arrays, laid out as scipy's on the host: C order) and each singular member
    warns as above. On the host, members of order up to 256 go straight to LAPACK's getrf
    through scipy.linalg.lapack, larger ones to the engine one at a time (its options apply). On
    the device, one batched computation: members up to 32 x 32 by a warp each (our kernel),
    other square ones up to 128 by cuBLAS getrfBatched, the rest by a blocked batched LU (our
    panel kernel, cuBLAS trsmBatched and gemmStridedBatched; nb its panel width, default 32);
    no trace is written. An empty batch gives empty results (scipy raises there).

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 3., 0.], [6., 3., 1.], [0., 2., 5.]])
    >>> lu, piv = hybridla.lu_factor(a, backend="host")
    >>> print(piv)
    [1 2 2]
    >>> perm = np.arange(3)
    >>> for i, j in enumerate(piv):  # the interchanges, in order: P A = a[perm]
    ...     perm[[i, j]] = perm[[j, i]]
    >>> l, u = np.tril(lu, -1) + np.eye(3), np.triu(lu)
    >>> np.allclose(a[perm], l @ u)
    True
    >>> hybridla.lu_factor(a.astype(np.float32), backend="host")[0].dtype
    dtype('float32')
    """
    overwrite_a = _flag("overwrite_a", overwrite_a)
    options = dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace, progress=progress,
                   ooc=ooc)
    if _stacked.is_stack((a, 2)):  # (..., M, N): _stacked.py
        return _stacked.lu_factor(a, check_finite, backend, options)
    lu, piv = lu_factor_2d(a, overwrite_a, check_finite, backend, options)
    if is_device_array(lu):  # the GPU interface's pivots stay on the device too
        piv = _stacked_device.device_pivots(_backends.get_backend("cuda"), lu, piv)
    return lu, piv


def lu_factor_2d(a, overwrite_a, check_finite, backend, options):
    """lu_factor of one matrix: (lu where `a` lives, the pivots on the host); a singular
    matrix warns."""
    lu, piv, info, _, _ = _getrf(a, overwrite_a, check_finite, backend, options)
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
    factors are still there) when they are usable (no zero pivot, rcond neither 0 nor NaN).
    Without either, a host matrix over the memory budget is factored out of core
    (lapack/getrf_ooc.py; options["ooc"] says when)."""
    def out_of_core(source, result, plan):
        pivots, info, trace = getrf_ooc(source, result, plan)
        return info, (pivots, None, None), trace

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
    lu, info, extra = _factor(a, overwrite_a, check_finite, backend, options, "lu", driver,
                              ooc_driver=None if condition or then is not None else out_of_core)
    pivots, rcond, result = (np.zeros(0, np.int32), 1.0, None) if extra is None else extra
    return lu, pivots, info, rcond, result


def lu_solve(lu_and_piv, b, trans=0, overwrite_b=False, check_finite=True, *, backend=None,
             trace=None):
    """Solve A x = b (trans 0), A^T x = b (1) or A^H x = b (2) with the factors of lu_factor.

    Parameters
    ----------
    lu_and_piv : tuple of (lu, piv)
        The result of lu_factor: the (..., N, N) factors `lu` and the 0-based pivots `piv`
        (shape (..., N), int32; with device factors, on the device or the host).
    b : (N,) or (..., N, K) array_like or device array
        The right-hand side(s); host factors need a host `b`, device factors a device `b` of
        their dtype. With stacks, as scipy: a 1-D `b` is one vector for every member, and the
        batch axes of `lu`, `piv` and `b` broadcast (x gets the broadcast batch); a device stack
        is solved by cuBLAS getrsBatched, and `x` is a new array.
    trans : {0, 1, 2, "N", "T", "C"}, optional
        The system: 0 or "N" (the default) A x = b, 1 or "T" A^T x = b, 2 or "C" A^H x = b.
    overwrite_b : bool, optional
        Whether x may be written over `b` (default False): in place, and `x` a view of `b`,
        when a host `b` is F-ordered, writeable and of x's dtype; a device `b` always. True or
        False, or 0, 1.
    check_finite : bool, optional
        Check that `lu` and `b` (on a device: `b`) hold no infs or NaNs (default True).
    backend : {None, "auto", "host", "cuda"}, optional
        Keyword-only. Device arrays need None, "auto" or "cuda". Host factors and right-hand
        side are solved on the host, or streamed through the device of this backend (None:
        configuration "backend"), as configuration "solve.place" says: "host", "device", or
        "auto" (the default): the cost model's choice on a device backend (the factors' bytes
        over the host's memory bandwidth or the link, against the flops at either's rate),
        the host on the host backend. Streamed, b goes up once and L and U cross the link
        once each, a block column at a time, within "device.memory_budget" (b in column
        blocks where it does not fit whole; lapack/getrs_ooc.py).
    trace : str or path-like, optional
        Keyword-only: a path to write the solve's Chrome trace JSON to (the streamed solve's
        every copy and compute task; a host solve as one record); its metadata's
        "solve_place" says which way it ran. None (the default): configuration "trace".

    Returns
    -------
    ndarray or device array
        The solution x, of `b`'s shape: a host array (LAPACK-style triangular solves on the
        host), or for device factors and right-hand side the same kind of device array as
        `b`, solved on the device. On the host x has the dtype where lu and b meet (float32
        factors with a float64 b: float64, as scipy).

    Raises
    ------
    ValueError
        trans is not one of its values; overwrite_b is not True or False; backend is unknown,
        or not None, "auto" or "cuda" for device arrays; one of `lu` and `b` is a device array
        and the other not; `lu` is not square and 2-D, `b` not 1-D or 2-D with N rows, `piv`
        not of shape (N,); infs or NaNs (check_finite).
        Configuration "solve.place" is not "auto", "host" or "device".
    TypeError
        `lu` or `b` does not hold numbers or is a scipy.sparse matrix; a device `b` whose
        dtype is not `lu`'s.
    MemoryError
        A streamed solve whose working store (one column of b and two block columns of the
        factors) does not fit "device.memory_budget", before any work.

    See Also
    --------
    lu_factor : The factors.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[4., 3., 0.], [6., 3., 1.], [0., 2., 5.]])
    >>> b = np.array([1., 2., 3.])
    >>> lu_and_piv = hybridla.lu_factor(a, backend="host")
    >>> x = hybridla.lu_solve(lu_and_piv, b, backend="host")
    >>> np.allclose(a @ x, b)
    True
    >>> x = hybridla.lu_solve(lu_and_piv, b, trans=1, backend="host")  # a^T x = b
    >>> np.allclose(a.T @ x, b)
    True
    >>> hybridla.lu_solve(lu_and_piv, np.eye(3, dtype=np.float32), backend="host").dtype
    dtype('float64')
    """
    lu, piv = lu_and_piv
    _backends.check_name(backend)
    overwrite_b = _flag("overwrite_b", overwrite_b)
    if isinstance(trans, (bool, np.bool_)) or trans not in _TRANS:
        raise ValueError(f"trans must be 0, 1 or 2 (or 'N', 'T', 'C'); got trans={trans!r}")
    if is_device_array(lu) != is_device_array(b):
        raise ValueError("lu and b must both be host arrays or both device arrays")
    if _stacked.is_stack((lu, 2), (piv, 1), (b, 2)):  # stacks: _stacked.py
        return _stacked.lu_solve(lu, piv, b, trans, check_finite, backend)
    if is_device_array(lu):
        piv = _stacked_device.host_pivots(_device_backend("lu", backend), piv) \
            if is_device_array(piv) else np.asarray(piv)
        return _device_solve("lu", lu, b, overwrite_b, check_finite, backend,
                             lambda ops, LU, B: getrs(ops, LU, B, _TRANS[trans]), pivots=piv)
    if is_device_array(piv):
        raise ValueError("piv is a device array: lu and b must then be device arrays too")
    piv = np.asarray(piv)
    lu, dtype = _host_matrix("lu", lu, check_finite)
    b_array, b_dtype = _host_matrix("b", b, check_finite, ndims=(1, 2))
    n = _check_solve_shapes(lu.shape, piv.shape, b_array.shape)
    dtype = _common_dtype(dtype, b_dtype)
    where = _solve_place.choose(backend, "getrs", n, n, 1 if b_array.ndim == 1 else
                                b_array.shape[1], dtype, trace)
    x = _host_rhs(b_array, n, dtype, overwrite_b)
    if where.place == "device":  # the factors streamed through the device (any layout)
        where.run_device(getrs_ooc, np.asarray(lu, dtype=dtype), piv, x, trans=_TRANS[trans])
    else:
        ops = _backends.get_backend("host")
        factors = ops.wrap(np.asarray(lu, dtype=dtype, order="F"), piv)
        where.run_host(lambda: getrs(ops, factors, ops.wrap(x), _TRANS[trans]))
    return x.reshape(b_array.shape)
