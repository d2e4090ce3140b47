"""Reduction to upper Hessenberg form: hessenberg and LAPACK's gehrd."""
from __future__ import annotations

import numpy as np

from . import backend as _backends
from . import lapack as _lapack
from ._common import (
    _factor,
    _host_matrix,
    _shape_and_dtype,
    _square_order,
    is_device_array,
)
from .lapack.gehrd import check_lo_hi
from .lapack.orghr import orghr
from .scheduler.plan import make_plan


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
