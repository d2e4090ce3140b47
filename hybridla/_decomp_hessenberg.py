"""Reduction to upper Hessenberg form: hessenberg and LAPACK's gehrd."""
from __future__ import annotations

import numpy as np

from . import _stacked, _stacked_qr
from . import backend as _backends
from . import lapack as _lapack
from ._common import (
    _device_backend,
    _device_matrix_checks,
    _factor,
    _flag,
    _host_backend,
    _host_matrix,
    _shape_and_dtype,
    _square_order,
    is_device_array,
)
from ._memory import _check_memory
from .lapack.gehrd import check_lo_hi, zero_below_subdiagonal
from .lapack.orghr import orghr, orghr_home
from .scheduler.plan import make_plan


# -- Hessenberg ----------------------------------------------------------------------------------
def gehrd(a, lo=0, hi=None, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
          trace=None, stats=None, progress=False):
    """LAPACK gehrd: the reduction to upper Hessenberg form Q^H A Q = H, as (factors, tau).

    As scipy.linalg.lapack's dgehrd / zgehrd return their first two outputs. Only rows and
    columns lo..hi are reduced, `a` being upper triangular outside them already (as gebal
    leaves it); scipy.linalg.lapack's orghr / unghr with the same lo and hi form Q from the
    result. Every argument is checked before any work.

    Parameters
    ----------
    a : (N, N) array_like or device array
        The square matrix, host or device as for lu_factor. A device array is reduced on the
        device and stays there.
    lo, hi : int, optional
        0-based and inclusive, scipy's convention (LAPACK's ILO - 1 and IHI - 1); default 0
        and None (N - 1). LAPACK's ranges: 0 <= lo <= max(0, N - 1),
        min(lo, N - 1) <= hi <= N - 1.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False). True or
        False, or 0, 1.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend : {None, "auto", "host", "cuda"}, optional
        Keyword-only engine option, as lu_factor's.
    nb : int, optional
        Keyword-only: the panel width, an integer >= 1 (or "auto", the device's tuning entry).
        None (the default): configuration "hrd.nb" (64). The reduction has no look-ahead and
        factors its panels on the CPU (lapack/gehrd.py says why).
    trace : str or path-like, optional
        Keyword-only: a path for the run's Chrome trace, as lu_factor's.
    stats : hybridla.lapack.gehrd.HessenbergStats, optional
        Keyword-only: receives the calls, time and bytes of the matrix-vector phase (default
        None: none kept).
    progress : bool, optional
        Keyword-only: a progress bar, as lu_factor's (default False).

    Returns
    -------
    factors : (N, N) ndarray or device array
        H on and above the first subdiagonal, reflector j below it (v_j[j+2:] in column j, its
        unit in row j + 1 implied); where `a` lives, in `a`'s LAPACK dtype (a new empty array
        for an empty `a`).
    tau : (N - 1,) ndarray
        The scalar factors of the reflectors, 0 outside lo..hi-1; a host array on either
        interface.

    Raises
    ------
    ValueError
        lo or hi out of its range (named); stats is not None or a HessenbergStats; overwrite_a
        is not True or False; `a` is not square and 2-D, or holds infs or NaNs
        (check_finite); a bad backend or nb, as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        On a device, a matrix over the device-memory budget, as lu_factor's.

    See Also
    --------
    hessenberg : H, and Q if asked, as scipy.linalg.hessenberg.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> from scipy.linalg.lapack import dorghr
    >>> a = np.array([[2., 1., 0., 1.], [1., 3., 1., 0.], [0., 1., 4., 1.], [1., 0., 1., 5.]])
    >>> factors, tau = hybridla.gehrd(a, backend="host")
    >>> factors.shape, tau.shape
    ((4, 4), (3,))
    >>> q, info = dorghr(factors, tau)
    >>> np.allclose(q @ np.triu(factors, -1) @ q.T, a)
    True
    """
    overwrite_a = _flag("overwrite_a", overwrite_a)
    _check_stats(stats)
    return _gehrd(a, lo, hi, overwrite_a, check_finite, backend, nb, trace, stats, progress)


def _check_stats(stats):
    if stats is not None and not callable(getattr(stats, "add", None)):
        raise ValueError(f"stats must be None or a hybridla.lapack.gehrd.HessenbergStats; got "
                         f"stats={stats!r}")


def _gehrd(a, lo, hi, overwrite_a, check_finite, backend, nb, trace, stats, progress=False,
           q_home=None):
    """Validate lo and hi against a's order (before anything is written), then gehrd through
    `_factor` (which checks a and the engine options before it starts); returns (factors,
    tau), a new empty factors array for an empty a (on either interface).

    `q_home`, for a host `a` only: None, or (q, plan) with q an F-ordered n x n host array of
    the LAPACK dtype and plan a "qr" plan on the reduction's backend: gehrd's Q is formed into
    q from the reduction's own store before `_factor` frees it (lapack/orghr.orghr_home; on a
    device backend the reflectors are on the device already), and the run's trace shows it."""
    n = _square_order(a)
    if n is not None:  # else `_factor` raises for the shape
        lo, hi = check_lo_hi(n, lo, n - 1 if hi is None else hi)

    def driver(A, plan):
        tau, info, run_trace = _lapack.gehrd(A, plan, lo, hi, stats=stats)
        if q_home is not None:
            q, q_plan = q_home
            A.set_tau(tau)
            run_trace = orghr_home(A, q, q_plan, lo, hi, run_trace)
        return info, tau, run_trace
    # no look-ahead and the panels on the CPU: gehrd.py says why
    factors, _, tau = _factor(a, overwrite_a, check_finite, backend,
                              dict(nb=nb, lookahead=0, panel="cpu", trace=trace,
                                   progress=progress), "hrd", driver,
                              square=True)
    if tau is None:  # an empty matrix
        shape, dtype = _shape_and_dtype(factors)
        if is_device_array(factors):  # `_factor` hands back the user's own empty array
            factors = _backends.get_backend("cuda").empty(shape, dtype, like=factors)
        tau = np.zeros(0, dtype)
    return factors, tau


def hessenberg(a, calc_q=False, overwrite_a=False, check_finite=True, *, backend=None, nb=None,
               trace=None, stats=None, progress=False):
    """Hessenberg form of a square matrix, A = Q H Q^H, as scipy.linalg.hessenberg.

    LAPACK gehrd, then orghr / unghr for Q. The same results as scipy's: scipy's shortcut
    included, a matrix of order 1 or 2 comes back as it is (a copy, in its own dtype, with
    Q = the float64 identity), where gehrd would make a complex subdiagonal entry real; empty
    input gives empty results. Every argument is checked before any work, whatever the order.

    Q is formed where H was reduced. A NumPy array on a device backend is streamed up, reduced
    on the device, and H comes home as gehrd's factors do; Q is formed beside the reflectors on
    the device and streamed home into a new host array, when the two n x n stores fit the
    device-memory budget together (else Q is formed on the host from the factors, as the host
    backend forms it).

    Parameters
    ----------
    a : (..., N, N) array_like or device array
        The square matrix, host or device as for lu_factor. A device array gives device arrays
        (H reduced, Q formed and H's lower part cleared on the device). A stack, as scipy >=
        1.15 takes it, gives stacks: on the host member by member (members of order up to 256
        by scipy.linalg.hessenberg, without stats; larger ones by the engine), on the device
        the 2-D device hessenberg of each member in turn (nothing batches gehrd).
    calc_q : bool, optional
        Also return Q (default False). True or False, or 0, 1.
    overwrite_a : bool, optional
        Whether H may be written over `a`, as lu_factor's (default False). True or False, or
        0, 1.
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, trace, stats, progress : optional
        Keyword-only engine options, as gehrd's (configuration "hrd.nb"); Q is formed by the
        QR family's orgqr with nb, or "qr.nb" when nb is None. They are checked as for a large
        matrix whatever the order.

    Returns
    -------
    H : (..., N, N) ndarray or device array
        Upper Hessenberg: zero below the first subdiagonal.
    Q : (..., N, N) ndarray or device array
        Unitary, A = Q H Q^H; only with calc_q=True, returned as (H, Q).

    Raises
    ------
    ValueError
        calc_q or overwrite_a is not True or False; stats is not None or a HessenbergStats;
        `a` is not square and 2-D, or holds infs or NaNs (check_finite); a bad backend or nb,
        as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        On a device, a matrix over the device-memory budget, as lu_factor's.

    See Also
    --------
    gehrd : LAPACK's output.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[2., 1., 0., 1.], [1., 3., 1., 0.], [0., 1., 4., 1.], [1., 0., 1., 5.]])
    >>> h, q = hybridla.hessenberg(a, calc_q=True, backend="host")
    >>> np.allclose(q @ h @ q.T, a), np.allclose(np.tril(h, -2), 0)
    (True, True)
    >>> np.allclose(q.T @ q, np.eye(4))
    True
    >>> b = np.array([[1, 2], [3, 4]], dtype=np.int16)
    >>> hybridla.hessenberg(b, backend="host").dtype  # order <= 2: a copy, as it is
    dtype('int16')
    """
    calc_q, overwrite_a = _flag("calc_q", calc_q), _flag("overwrite_a", overwrite_a)
    _check_stats(stats)
    if _stacked.is_stack((a, 2)):  # (..., N, N): _stacked.py, _stacked_qr.py
        return _stacked_qr.hessenberg(a, calc_q, check_finite, backend, nb, trace, stats)
    n, dtype, reduction_plan, q_plan = _check_hessenberg(a, check_finite, backend, nb, trace,
                                                         progress)
    if n <= 2 and not is_device_array(a):
        array = np.asarray(a)
        if n == 0:  # scipy: empty results in the LAPACK dtype
            return (np.empty((0, 0), dtype), np.empty((0, 0), dtype)) if calc_q \
                else np.empty((0, 0), dtype)
        return (array.copy(), np.eye(n)) if calc_q else array.copy()
    # device arrays of order <= 2: no reflector at all (hi = lo), so again H = A and Q = I
    hi = None if n > 2 else min(n - 1, 0)
    # CPU interface: Q formed from the reduction's own store, where the reduction ran (on a
    # device its reflectors are there already; formed on the host, Q took 3.6x the time of the
    # reduction at n = 16384: issue 34), as long as both stores fit the memory budget together
    q = None
    if calc_q and not is_device_array(a) and _fits_beside(reduction_plan, q_plan, n, dtype):
        q = np.empty((n, n), dtype, order="F")
    # a was checked above (check_finite included)
    factors, tau = _gehrd(a, 0, hi, overwrite_a, False, backend, nb, trace, stats, progress,
                          q_home=None if q is None else (q, q_plan))
    (n, _), dtype = _shape_and_dtype(factors)
    ops = _backends.get_backend("cuda" if is_device_array(factors) else "host")
    if n == 0:  # an empty device array (factors: a new one)
        return (factors, ops.empty((0, 0), dtype, like=factors)) if calc_q else factors
    stores = [ops.wrap(factors, tau=tau)]
    try:
        if calc_q and q is None:  # Q where the factors are now: the GPU interface, or a host
            # matrix whose Q did not fit beside its factors (then formed on the host)
            q = ops.empty((n, n), dtype, like=factors)
            stores.append(ops.wrap(q))
            orghr(stores[0], stores[1], _q_plan(ops, n, dtype, nb, progress), 0,
                  n - 1 if hi is None else hi)
        zero_below_subdiagonal(ops, stores[0])  # H: zeros where the reflectors were
    finally:
        for store in stores:
            store.close()
    return (factors, q) if calc_q else factors


def _check_hessenberg(a, check_finite, backend, nb, trace, progress=False):
    """hessenberg's checks, before any work and whatever the order: a (square, numbers, finite
    when asked), the backend, and the plans of the reduction ("hrd") and of forming Q ("qr"),
    as `_factor` and orghr will make them on the backend the reduction runs on. Returns (n, the
    LAPACK dtype, the reduction's plan, Q's plan)."""
    if is_device_array(a):
        ops = _device_backend("a", backend)
        shape, dtype = _device_matrix_checks("a", a, ops, check_finite)
    else:
        ops = _host_backend(backend)
        array, dtype = _host_matrix("a", a, check_finite)
        shape = array.shape
    if shape[0] != shape[1]:
        raise ValueError(f"expected a square matrix for a; got shape {shape}")
    n = shape[0]
    reduction_plan = make_plan(ops, n, n, dtype, routine="hrd", nb=nb, lookahead=0, panel="cpu",
                               trace=trace)
    return n, dtype, reduction_plan, _q_plan(ops, n, dtype, nb, progress)


def _q_plan(ops, n, dtype, nb, progress):
    """The plan orghr forms an n x n Q with on `ops`: orgqr's tasks, nb or configuration
    "qr.nb", no look-ahead (Q is formed after the reduction, nothing to overlap)."""
    return make_plan(ops, n, n, dtype, routine="qr", nb=nb, lookahead=0, panel="cpu",
                     progress=progress)


def _fits_beside(reduction_plan, q_plan, n, dtype) -> bool:
    """Whether Q's n x n store fits the memory budget beside the reduction's (2 n^2 elements
    and their workspaces where the backend computes), as `_check_memory` counts a store: the
    configured device.memory_budget, else 90% of a device's free memory; the host backend
    without a configured budget has no limit."""
    ops = reduction_plan.backend
    try:
        _check_memory(ops, n, n, dtype, reduction_plan.nb,
                      extra_bytes=ops.required_bytes(n, n, dtype, q_plan.nb))
    except MemoryError:
        return False
    return True
