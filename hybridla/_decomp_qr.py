"""QR, QL and LQ: qr, ql, lq and LAPACK's geqrf, geqlf, gelqf (scipy.linalg._decomp_qr)."""
from __future__ import annotations

import operator

import numpy as np

from . import backend as _backends
from . import lapack as _lapack
from ._common import _factor, _flag, _shape_and_dtype, is_device_array
from .lapack._householder import LQ, QL, QR, copy_triangle
from .lapack.orgqr import form_q
from .scheduler.plan import make_plan

# -- QR, QL, LQ ----------------------------------------------------------------------------------
_MODES = ("full", "r", "economic", "raw")
_FACTORIZATIONS = {"QR": _lapack.geqrf, "QL": _lapack.geqlf, "LQ": _lapack.gelqf}


def _householder_factor(a, form, overwrite_a, check_finite, backend, options):
    """`_factor` with geqrf, geqlf or gelqf as its driver: returns (factors, info, tau); tau
    None for an empty matrix, whose factors are then a new empty array on either interface
    (as scipy's), never the user's own."""
    def driver(A, plan):
        tau, info, trace = _FACTORIZATIONS[form.storage](A, plan)
        return info, tau.copy(), trace
    factors, info, tau = _factor(a, overwrite_a, check_finite, backend, options, "qr", driver)
    if tau is None and is_device_array(factors):
        shape, dtype = _shape_and_dtype(factors)
        factors = _backends.get_backend("cuda").empty(shape, dtype, like=factors)
    return factors, info, tau


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
    overwrite_a = _flag("overwrite_a", overwrite_a)
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
    lwork (None or an integer) is accepted for scipy compatibility and ignored (the engine
    sizes its workspaces). Every argument is checked before any work; overwrite_a and pivoting
    must be True or False (or 0, 1), as scipy's LAPACK flags.
    Engine options as lu_factor's (configuration keys under "qr."). A device array gives
    device arrays (Q formed on the device); tau (raw mode) is a host array either way.
    """
    if _flag("pivoting", pivoting):
        raise NotImplementedError("pivoting=True (QR with column pivoting, LAPACK geqp3) is not "
                                  "implemented in hybridla.qr; use scipy.linalg.qr")
    return _householder(a, QR, mode, overwrite_a, lwork, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))


def ql(a, overwrite_a=False, lwork=None, mode="full", check_finite=True, *, backend=None,
       nb=None, lookahead=None, panel=None, trace=None):
    """QL decomposition A = Q L (LAPACK geqlf; scipy has none), with qr's modes, k = min(m, n):
    "full": (Q m x m, L m x n, lower trapezoidal on and below the (n-m)-th superdiagonal);
    "economic": (Q m x k, Q's last k columns, L k x n, L's last k rows); "r": (L,), m x n;
    "raw": ((factors, tau), L) with L k x n, in LAPACK geqlf's storage. On the GPU the panels
    are cuSOLVER geqrf's on the reversed panel; options as qr's."""
    return _householder(a, QL, mode, overwrite_a, lwork, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))


def lq(a, overwrite_a=False, lwork=None, mode="full", check_finite=True, *, backend=None,
       nb=None, lookahead=None, panel=None, trace=None):
    """LQ decomposition A = L Q (LAPACK gelqf; scipy has none), with qr's modes, k = min(m, n):
    "full": (L m x n, Q n x n); "economic": (L m x k, Q k x n, Q's first k rows); "r": (L,),
    m x n; "raw": ((factors, tau), L) with L m x k, in LAPACK gelqf's storage. On the GPU the
    panels are cuSOLVER geqrf's on the conjugate-transposed panel; options as qr's."""
    return _householder(a, LQ, mode, overwrite_a, lwork, check_finite, backend,
                        dict(nb=nb, lookahead=lookahead, panel=panel, trace=trace))


def _householder(a, form, mode, overwrite_a, lwork, check_finite, backend, options):
    """Factor with the form's driver (geqrf, geqlf, gelqf) through `_factor`, then build what
    `mode` asks for where the factors are (the host, or the device for a device array), with
    the same ops on tile stores on either. Returns (Q, T) ((T, Q) for LQ), (T,) or
    ((factors, tau), T). The arguments are checked first (the rest, a and the engine options,
    by `_factor` before it factors)."""
    overwrite_a = _flag("overwrite_a", overwrite_a)
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}; got mode={mode!r}")
    if lwork is not None:
        try:
            operator.index(lwork)
        except TypeError:
            raise ValueError(f"lwork must be an integer or None; got lwork={lwork!r}") from None
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
