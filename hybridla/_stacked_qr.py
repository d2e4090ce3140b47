"""Stacks of matrices (..., M, N) for the Householder family: qr, lstsq and hessenberg (the
LU, Cholesky and solve ones, and what all of them share, are in _stacked.py, which says how
stacks are taken)."""
from __future__ import annotations

import math

import numpy as np
from scipy.linalg import get_lapack_funcs
from scipy.linalg.lapack import _compute_lwork

from . import _stacked
from ._common import (
    _check_mode_and_lwork,
    _common_dtype,
    _flag,
    _host_backend,
    is_device_array,
)
from ._stacked import (
    _device,
    _device_module,
    _finite,
    _host_array,
    _members,
    batch_shape,
    check_square,
    rhs_core,
)
from .scheduler.plan import make_plan


# -- QR ------------------------------------------------------------------------------------------
def qr_shapes(m, n, mode, pivoting):
    """The core shapes of qr's results, in its order (Q, R[, P]); "raw": ((factors, tau), R)."""
    k = min(m, n)
    economic = mode in ("economic", "raw")
    r = (k, n) if economic else (m, n)
    shapes = {"full": ((m, m), r), "economic": ((m, k), r), "r": (r,),
              "raw": (((m, n), (k,)), r)}[mode]
    return shapes + ((n,),) if pivoting else shapes


def qr(a, overwrite_a, lwork, mode, pivoting, check_finite, backend, options):
    """qr of a stack: each result stacked ((..., M, M) Q and so on). mode="r" returns R itself
    (scipy's stacks do; a 2-D matrix gives the tuple (R,)); mode="raw" returns ((factors, tau),
    R) stacked (scipy's stacks raise there)."""
    _flag("overwrite_a", overwrite_a)
    _check_mode_and_lwork(mode, lwork)
    if is_device_array(a):
        return _device_module().qr(a, mode, pivoting, check_finite, backend, options)
    array, dtype = _host_array("a", a, 2)
    ops = _host_backend(backend)
    batch, (m, n) = array.shape[:-2], array.shape[-2:]
    make_plan(ops, m, n, dtype, routine="qr", **options)
    _finite(check_finite, ("a", array))
    if math.prod(batch) == 0:
        return _unwrap_r(mode, pivoting, _empty_results(batch, qr_shapes(m, n, mode, pivoting),
                                                        dtype, pivoting))
    from ._decomp_qr import _householder
    from ._decomp_qr_pivoted import _pivoted_qr
    from .lapack._householder import QR
    stacked = _Stacker(batch)
    for _, index in _members(batch):
        member = array[index]
        if pivoting:
            result = _pivoted_qr(member, mode, False, lwork, False, backend, options)
        elif max(m, n) <= _stacked.HOST_LAPACK_UP_TO and m and n:
            result = _lapack_qr(np.asarray(member, dtype=dtype), mode)
        else:
            result = _householder(member, QR, mode, False, lwork, False, backend, options)
        stacked.put(index, result)
    return _unwrap_r(mode, pivoting, stacked.out)


def _unwrap_r(mode, pivoting, results):
    """A stack's mode="r" result is R itself, as scipy's; with pivoting (R, P), as scipy's."""
    return results[0] if mode == "r" and not pivoting else results


def _lapack_qr(a, mode):
    """scipy.linalg.qr's results for one member through LAPACK geqrf and orgqr / ungqr."""
    m, n = a.shape
    k = min(m, n)
    geqrf, orgqr = get_lapack_funcs(("geqrf", "orgqr"), (a,))
    factors, tau, _, info = geqrf(np.array(a, order="F"), lwork=max(n, 1) * 64, overwrite_a=True)
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal geqrf")
    economic = mode in ("economic", "raw")
    r = np.triu(factors[:k] if economic else factors)
    if mode == "r":
        return (r,)
    if mode == "raw":
        return (factors, tau), r
    if m < n:
        q = factors[:, :m]
    elif economic:
        q = factors
    else:
        q = np.empty((m, m), a.dtype, order="F")
        q[:, :n] = factors
    q, _, info = orgqr(q, tau, lwork=max(q.shape[1], 1) * 64, overwrite_a=True)
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal orgqr / ungqr")
    return q, r


class _Stacker:
    """Members' results (nested tuples of arrays, scalars or None) into stacked arrays of the
    batch shape, allocated at the first member from its results' shapes and dtypes."""

    def __init__(self, batch):
        self.batch, self.out = tuple(batch), None

    def _alloc(self, result):
        if isinstance(result, tuple):
            return tuple(self._alloc(r) for r in result)
        if result is None:
            return None
        result = np.asarray(result)
        return np.empty(self.batch + result.shape, result.dtype)

    def _assign(self, out, index, result):
        if isinstance(result, tuple):
            for o, r in zip(out, result):
                self._assign(o, index, r)
        elif result is not None:
            out[index] = result

    def put(self, index, result):
        if self.out is None:
            self.out = self._alloc(result)
        self._assign(self.out, index, result)


def _empty_results(batch, shapes, dtype, pivoting=False):
    """Empty stacks of the core shapes (nested as qr_shapes gives them); a pivoting qr's last
    one (P) is int32."""
    def make(shape, kind):
        if isinstance(shape[0], tuple):
            return tuple(make(s, kind) for s in shape)
        return np.empty(tuple(batch) + shape, kind)
    out = [make(s, dtype) for s in shapes]
    if pivoting:
        out[-1] = np.empty(tuple(batch) + shapes[-1], np.int32)
    return tuple(out)


# -- least squares -------------------------------------------------------------------------------
def lstsq(a, b, cond, check_finite, lapack_driver, backend, options):
    """lstsq of a stack: (x (..., N) or (..., N, K), residues, rank (...) int, None); residues
    stacked where every member has them (rank N < M), else an empty (..., 0) array."""
    if _device(a, b):
        return _device_module().lstsq(a, b, cond, check_finite, lapack_driver, backend,
                                      options)
    a_array, a_dtype = _host_array("a", a, 2)
    b_array, b_dtype = _host_array("b", b, 1)
    m, n = a_array.shape[-2:]
    core = rhs_core("b", b_array.shape, m, "a", a_array.shape)
    batch = batch_shape(("a", a_array.shape[:-2]), ("b", b_array.shape[:b_array.ndim - len(core)]))
    dtype = _common_dtype(a_dtype, b_dtype)
    make_plan(_host_backend(backend), m, n, dtype, routine="qr", **options)
    _finite(check_finite, ("a", a_array), ("b", b_array))
    x = np.empty(batch + (n,) + core[1:], dtype)
    ranks = np.empty(batch, np.int64)
    residues = []
    a_b, b_b = np.broadcast_to(a_array, batch + (m, n)), np.broadcast_to(b_array, batch + core)
    from ._lstsq import lstsq as lstsq_2d
    for _, index in _members(batch):
        if lapack_driver is None and 0 < max(m, n) <= _stacked.HOST_LAPACK_UP_TO and m and n:
            result = _lapack_lstsq(a_b[index], b_b[index], cond, dtype)
        else:
            result = lstsq_2d(a_b[index], b_b[index], cond, False, False, False, lapack_driver,
                              backend=backend, **options)
        x[index], ranks[index] = result[0], result[2]
        residues.append(result[1])
    return x, stacked_residues(batch, residues, dtype), ranks, None


def stacked_residues(batch, residues, dtype):
    """The members' residues stacked when they all have the same shape (and some), else an
    empty (..., 0) array of x's dtype (a member without them: rank < N, or M <= N)."""
    shapes = {np.shape(r) for r in residues}
    if len(shapes) == 1 and residues and np.size(residues[0]) > 0:
        return np.stack([np.asarray(r) for r in residues]).reshape(
            tuple(batch) + shapes.pop())
    return np.empty(tuple(batch) + (0,), dtype)


def _lapack_lstsq(a, b, cond, dtype):
    """The 2-D lstsq's answer for one small member (M, N > 0, lapack_driver None) through LAPACK
    gels (QR for M >= N, LQ for M < N, scaled into the safe range as gels does), the same rank
    test on the triangle's diagonal (|T(i, i)| <= tol max_j |T(j, j)|, tol = cond or
    max(M, N) eps), and gelsy where it fails."""
    from ._lstsq import _gelsy
    m, n = a.shape
    nrhs = 1 if b.ndim == 1 else b.shape[1]
    tol = max(m, n) * np.finfo(dtype).eps if cond is None else float(cond)
    gels, gels_lwork = get_lapack_funcs(("gels", "gels_lwork"), dtype=dtype)
    rhs = np.zeros((max(m, n), nrhs), dtype, order="F")
    rhs[:m] = b.reshape(m, nrhs)
    factors, solution, info = gels(np.array(a, dtype=dtype, order="F"), rhs,
                                   lwork=_compute_lwork(gels_lwork, m, n, nrhs),
                                   overwrite_a=True, overwrite_b=True)
    if info < 0:  # cannot happen with the arguments given here
        raise ValueError(f"illegal value in argument {-info} of the internal gels")
    diagonal = np.abs(np.diagonal(factors))
    if info > 0 or (diagonal <= tol * diagonal.max()).any():
        return _gelsy(np.asarray(a), np.asarray(a), np.asarray(b), dtype, tol, False)
    x = solution[:n]
    if m > n:
        residues = (np.abs(solution[n:m]) ** 2).sum(axis=0)
        residues = residues[0] if b.ndim == 1 else residues
    else:
        residues = np.empty(0, dtype=dtype)
    return (x.reshape(n) if b.ndim == 1 else x), residues, min(m, n), None


# -- Hessenberg ----------------------------------------------------------------------------------
def hessenberg_dtypes(n, input_dtype, dtype):
    """(H's dtype, Q's dtype) as the 2-D hessenberg gives them: order 1 or 2 a copy of a in
    its own dtype with Q the float64 identity (scipy's shortcut), else the LAPACK dtype."""
    if 0 < n <= 2:
        return np.dtype(input_dtype), np.dtype(np.float64)
    return dtype, dtype


def hessenberg(a, calc_q, check_finite, backend, nb, trace, stats):
    """hessenberg of a stack: H (..., N, N), and Q with calc_q."""
    if is_device_array(a):
        return _device_module().hessenberg(a, calc_q, check_finite, backend, nb, trace, stats)
    array, dtype = _host_array("a", a, 2)
    n = check_square("a", array.shape)
    ops = _host_backend(backend)
    batch = array.shape[:-2]
    make_plan(ops, n, n, dtype, routine="hrd", nb=nb, lookahead=0, panel="cpu", trace=trace)
    make_plan(ops, n, n, dtype, routine="qr", nb=nb, lookahead=0, panel="cpu")
    _finite(check_finite, ("a", array))
    if math.prod(batch) == 0:
        h_dtype, q_dtype = hessenberg_dtypes(n, array.dtype, dtype)
        h = np.empty(batch + (n, n), h_dtype)
        return (h, np.empty(batch + (n, n), q_dtype)) if calc_q else h
    from scipy.linalg import hessenberg as scipy_hessenberg

    from ._decomp_hessenberg import hessenberg as hessenberg_2d
    stacked = _Stacker(batch)
    for _, index in _members(batch):
        if n <= _stacked.HOST_LAPACK_UP_TO and stats is None:
            result = scipy_hessenberg(array[index], calc_q=calc_q, check_finite=False)
        else:
            result = hessenberg_2d(array[index], calc_q, False, False, backend=backend, nb=nb,
                                   trace=trace, stats=stats)
        stacked.put(index, result)
    return stacked.out
