"""LAPACK's Householder factorizations as functions: geqrf, geqlf, gelqf (factors and tau in
LAPACK's storage), and the factorization step that qr, ql, lq and lstsq share."""
from __future__ import annotations

import numpy as np

from . import backend as _backends
from . import lapack as _lapack
from ._common import _factor, _flag, _shape_and_dtype, is_device_array
from .lapack._householder import LQ, QL, QR, copy_triangle
from .lapack.orgqr import form_q
from .scheduler.plan import make_plan

# -- the factorization -----------------------------------------------------------------------------
_FACTORIZATIONS = {"QR": _lapack.geqrf, "QL": _lapack.geqlf, "LQ": _lapack.gelqf}


def _householder_factor(a, form, overwrite_a, check_finite, backend, options):
    """`_factor` with geqrf, geqlf or gelqf as its driver: returns (factors, info, tau); tau
    None for an empty matrix, whose factors are then a new empty array on either interface
    (as scipy's), never the user's own. A host matrix over the memory budget is factored out
    of core (lapack/geqrf_ooc.py; options["ooc"] says when)."""
    def driver(A, plan):
        tau, info, trace = _FACTORIZATIONS[form.storage](A, plan)
        return info, tau.copy(), trace

    def out_of_core(source, result, plan):
        tau, info, trace = _lapack.geqrf_ooc(source, result, plan, form)
        return info, tau, trace
    factors, info, tau = _factor(a, overwrite_a, check_finite, backend, options, "qr", driver,
                                 ooc_driver=out_of_core)
    if tau is None and is_device_array(factors):
        shape, dtype = _shape_and_dtype(factors)
        factors = _backends.get_backend("cuda").empty(shape, dtype, like=factors)
    return factors, info, tau


def _qr_results(factors, tau, form, mode, options):
    """What qr, ql and lq return for `mode` from the factors and tau in LAPACK's storage (tau
    None for an empty matrix), built where the factors are (the host, or the device for a
    device array), with the same ops on tile stores on either: (Q, T) ((T, Q) for LQ), (T,) or
    ((factors, tau), T)."""
    (m, n), dtype = _shape_and_dtype(factors)
    k = min(m, n)
    tau = np.zeros(0, dtype) if tau is None else tau
    order, cols = form.shape(m, n)
    economic = mode in ("economic", "raw")
    ops = _backends.get_backend("cuda" if is_device_array(factors) else "host")
    plan = make_plan(ops, m, n, dtype, routine="qr", nb=options["nb"],
                     lookahead=options["lookahead"], progress=options.get("progress", False))
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


def geqrf(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
          panel=None, trace=None, progress=False, ooc=None):
    """LAPACK geqrf: the QR factorization A = Q R in LAPACK's storage, (factors, tau).

    As scipy.linalg.lapack's dgeqrf returns its first two outputs: what qr(mode="raw") returns
    without building R. scipy.linalg.lapack's orgqr / ungqr form Q from them, ormqr / unmqr
    apply it.

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix to factor, host or device as for lu_factor.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False).
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "qr."
        ("qr.nb", "qr.lookahead", "qr.panel"; ooc: "device.ooc", lapack/geqrf_ooc.py).

    Returns
    -------
    factors : (M, N) ndarray or device array
        R on and above the diagonal, the Householder reflectors below it, where `a` lives, in
        `a`'s LAPACK dtype.
    tau : (K,) ndarray
        The K = min(M, N) scalar factors of the reflectors, a host array on either interface.

    Raises
    ------
    ValueError
        `a` is not 2-D, or holds infs or NaNs (check_finite); overwrite_a is not True or False;
        a bad engine option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    qr : The factors, Q and R as the user wants them.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> from scipy.linalg.lapack import dorgqr
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> factors, tau = hybridla.geqrf(a, backend="host")
    >>> factors.shape, tau.shape
    ((3, 2), (2,))
    >>> q, work, info = dorgqr(factors, tau)
    >>> np.allclose(q @ np.triu(factors[:2]), a)
    True
    """
    return _householder_factors(a, QR, overwrite_a, check_finite, backend, nb, lookahead,
                                panel, trace, progress, ooc)


def geqlf(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
          panel=None, trace=None, progress=False, ooc=None):
    """LAPACK geqlf: the QL factorization A = Q L in LAPACK's storage, (factors, tau).

    What ql(mode="raw") returns without building L (see ql).

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix to factor, host or device as for lu_factor.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False).
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "qr."
        ("qr.nb", "qr.lookahead", "qr.panel"; ooc: "device.ooc", lapack/geqrf_ooc.py).

    Returns
    -------
    factors : (M, N) ndarray or device array
        L on and below the (N - M)-th superdiagonal (lower trapezoidal; for M >= N in the last
        N rows), the Householder reflectors above it; where `a` lives, in `a`'s LAPACK dtype.
    tau : (K,) ndarray
        The K = min(M, N) scalar factors of the reflectors, a host array on either interface.

    Raises
    ------
    ValueError
        `a` is not 2-D, or holds infs or NaNs (check_finite); overwrite_a is not True or False;
        a bad engine option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    ql : The factors, Q and L as the user wants them.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1.], [1., 2.], [1., 3.]])
    >>> factors, tau = hybridla.geqlf(a, backend="host")
    >>> factors.shape, tau.shape
    ((3, 2), (2,))
    >>> q, l = hybridla.ql(a, mode="economic", backend="host")
    >>> np.allclose(np.tril(factors[1:]), l)
    True
    """
    return _householder_factors(a, QL, overwrite_a, check_finite, backend, nb, lookahead,
                                panel, trace, progress, ooc)


def gelqf(a, overwrite_a=False, check_finite=True, *, backend=None, nb=None, lookahead=None,
          panel=None, trace=None, progress=False, ooc=None):
    """LAPACK gelqf: the LQ factorization A = L Q in LAPACK's storage, (factors, tau).

    What lq(mode="raw") returns without building L (see lq).

    Parameters
    ----------
    a : (M, N) array_like or device array
        The matrix to factor, host or device as for lu_factor.
    overwrite_a : bool, optional
        Whether the factors may be written over `a`, as lu_factor's (default False).
    check_finite : bool, optional
        Check that `a` holds no infs or NaNs before any work (default True).
    backend, nb, lookahead, panel, trace, progress, ooc : optional
        Keyword-only engine options, as lu_factor's, with configuration keys under "qr."
        ("qr.nb", "qr.lookahead", "qr.panel"; ooc: "device.ooc", lapack/geqrf_ooc.py).

    Returns
    -------
    factors : (M, N) ndarray or device array
        L on and below the diagonal, the Householder reflectors (rows) above it, where `a`
        lives, in `a`'s LAPACK dtype.
    tau : (K,) ndarray
        The K = min(M, N) scalar factors of the reflectors, a host array on either interface.

    Raises
    ------
    ValueError
        `a` is not 2-D, or holds infs or NaNs (check_finite); overwrite_a is not True or False;
        a bad engine option (named), as lu_factor's.
    TypeError
        `a` does not hold numbers, is a scipy.sparse matrix, or is a device array of an
        unsupported dtype, as lu_factor's.
    RuntimeError
        backend="cuda" where the cuda backend is not available.
    MemoryError
        A matrix over the memory budget that may not go out of core, as lu_factor's.

    See Also
    --------
    lq : The factors, L and Q as the user wants them.

    Examples
    --------
    >>> import numpy as np
    >>> import hybridla
    >>> a = np.array([[1., 1., 1.], [1., 2., 3.]])
    >>> factors, tau = hybridla.gelqf(a, backend="host")
    >>> factors.shape, tau.shape
    ((2, 3), (2,))
    >>> l, q = hybridla.lq(a, mode="economic", backend="host")
    >>> np.allclose(np.tril(factors[:, :2]), l)
    True
    """
    return _householder_factors(a, LQ, overwrite_a, check_finite, backend, nb, lookahead,
                                panel, trace, progress, ooc)


def _householder_factors(a, form, overwrite_a, check_finite, backend, nb, lookahead, panel,
                         trace, progress, ooc):
    overwrite_a = _flag("overwrite_a", overwrite_a)
    factors, _, tau = _householder_factor(a, form, overwrite_a, check_finite, backend,
                                          dict(nb=nb, lookahead=lookahead, panel=panel,
                                               trace=trace, progress=progress, ooc=ooc))
    return factors, (np.zeros(0, _shape_and_dtype(factors)[1]) if tau is None else tau)
