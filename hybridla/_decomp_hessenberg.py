"""Reduction to upper Hessenberg form: hessenberg and LAPACK's gehrd."""
from __future__ import annotations

import numpy as np

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
    and stays there; tau is a host array either way. Every argument is checked before any
    work (overwrite_a True or False, or 0, 1)."""
    overwrite_a = _flag("overwrite_a", overwrite_a)
    _check_stats(stats)
    return _gehrd(a, lo, hi, overwrite_a, check_finite, backend, nb, trace, stats)


def _check_stats(stats):
    if stats is not None and not callable(getattr(stats, "add", None)):
        raise ValueError(f"stats must be None or a hybridla.lapack.gehrd.HessenbergStats; got "
                         f"stats={stats!r}")


def _gehrd(a, lo, hi, overwrite_a, check_finite, backend, nb, trace, stats):
    """Validate lo and hi against a's order (before anything is written), then gehrd through
    `_factor` (which checks a and the engine options before it starts); returns (factors,
    tau), a new empty factors array for an empty a (on either interface)."""
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
        shape, dtype = _shape_and_dtype(factors)
        if is_device_array(factors):  # `_factor` hands back the user's own empty array
            factors = _backends.get_backend("cuda").empty(shape, dtype, like=factors)
        tau = np.zeros(0, dtype)
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
    and H's lower part cleared on the device). Every argument is checked before any work,
    whatever the order (calc_q and overwrite_a True or False, or 0, 1; nb and the other engine
    options as for a large matrix)."""
    calc_q, overwrite_a = _flag("calc_q", calc_q), _flag("overwrite_a", overwrite_a)
    _check_stats(stats)
    n, dtype = _check_hessenberg(a, check_finite, backend, nb, trace)
    if n <= 2 and not is_device_array(a):
        array = np.asarray(a)
        if n == 0:  # scipy: empty results in the LAPACK dtype
            return (np.empty((0, 0), dtype), np.empty((0, 0), dtype)) if calc_q \
                else np.empty((0, 0), dtype)
        return (array.copy(), np.eye(n)) if calc_q else array.copy()
    # device arrays of order <= 2: no reflector at all (hi = lo), so again H = A and Q = I
    hi = None if n > 2 else min(n - 1, 0)
    # a was checked above (check_finite included)
    factors, tau = _gehrd(a, 0, hi, overwrite_a, False, backend, nb, trace, stats)
    (n, _), dtype = _shape_and_dtype(factors)
    ops = _backends.get_backend("cuda" if is_device_array(factors) else "host")
    if n == 0:  # an empty device array (factors: a new one)
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


def _check_hessenberg(a, check_finite, backend, nb, trace):
    """hessenberg's checks, before any work and whatever the order: a (square, numbers, finite
    when asked), the backend, and the plans of the reduction ("hrd") and of forming Q ("qr"),
    as `_factor` and orghr will make them. Returns (n, the LAPACK dtype)."""
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
    make_plan(ops, n, n, dtype, routine="hrd", nb=nb, lookahead=0, panel="cpu", trace=trace)
    make_plan(ops, n, n, dtype, routine="qr", nb=nb, lookahead=0, panel="cpu")
    return n, dtype
