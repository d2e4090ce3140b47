"""Least squares by QR (m >= n) or LQ (m < n), LAPACK gels: lstsq."""
from __future__ import annotations

import numpy as np
from scipy.linalg import LinAlgError

from . import backend as _backends
from ._common import (
    _device_backend,
    _device_matrix_checks,
    _host_matrix,
    is_device_array,
)
from ._decomp_qr import _householder_factor
from .lapack import gelqs, geqrs
from .lapack._householder import LQ, QR
from .scheduler.plan import make_plan


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
