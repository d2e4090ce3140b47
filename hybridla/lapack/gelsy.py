"""LAPACK's geqp3 and gelsy on host arrays, through scipy.linalg.lapack: QR with column
pivoting, A P = Q R, and the rank-revealing (minimum-norm) least-squares solve built on it.

Unlike the other drivers of this layer these take NumPy arrays, not tile stores: the host
backend's pivoted QR, and gelsy's rank decision and minimum-norm solve on R after a device
geqp3 (geqp3.py, the blocked algorithm on a tile store). Both take the array in its LAPACK
dtype (float32, float64, complex64, complex128), already checked.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg.lapack import get_lapack_funcs


def geqp3_host(a, overwrite_a=False):
    """LAPACK geqp3 on the host array `a` (M x N, a LAPACK dtype): A P = Q R.

    Returns (factors, jpvt, tau, info): factors in LAPACK's storage (R on and above the
    diagonal, the Householder reflectors below it), written over `a` where overwrite_a allows
    and `a` is F-ordered; jpvt the column permutation, 0-based (int32: column j of A P is
    column jpvt[j] of A; LAPACK's own is 1-based); tau the min(M, N) reflectors' scalars."""
    (func,) = get_lapack_funcs(("geqp3",), (a,))
    n = a.shape[1]
    # the blocked code's optimal workspace, 2 N + (N + 1) NB, with NB = 64 at most (no query:
    # scipy's wrapper would copy `a` for it)
    lwork = 3 * (n + 1) + (n + 1) * 64
    factors, jpvt, tau, _, info = func(a, lwork=lwork, overwrite_a=overwrite_a)
    jpvt = np.asarray(jpvt, dtype=np.int32) - 1
    return factors, jpvt, tau, info


def gelsy(a, b, rcond, overwrite_a=False, fixed=False):
    """LAPACK gelsy on host arrays: the minimum-norm solution of min ||b - a x||_2 for `a`
    (M x N) of any rank, by QR with column pivoting and the incremental condition estimator:
    the effective rank is the order of the largest leading triangle of R whose estimated
    condition number is < 1 / rcond.

    `b` is M x NRHS of a's dtype (not modified). Returns (x, rank, tail, info): x (N x NRHS),
    F-ordered; for M > N, tail = (Q^H b)[N:M] (N x NRHS), whose column norms are the residuals'
    when rank == N (gelsy leaves these rows of its right-hand side scaled as it scaled b: they
    are scaled back here), else None. `fixed`: every column of a stays where it is (LAPACK's
    jpvt != 0: no pivoting), for an `a` that is already the R of a pivoted QR."""
    (func, lwork_func) = get_lapack_funcs(("gelsy", "gelsy_lwork"), (a, b))
    m, n = a.shape
    nrhs = b.shape[1]
    rhs = np.zeros((max(m, n), nrhs), dtype=a.dtype, order="F")
    rhs[:m] = b
    work, info = lwork_func(m, n, nrhs, rcond)
    if info != 0:
        return None, 0, None, info
    lwork = max(int(np.real(work)), 1)
    # all columns free, or all fixed in place
    jpvt = np.ones(n, dtype=np.int32) if fixed else np.zeros(n, dtype=np.int32)
    _, x, _, rank, info = func(a, rhs, jpvt, rcond, lwork, overwrite_a=overwrite_a,
                               overwrite_b=True)
    tail = None
    if m > n:
        # gelsy's own scaling of b into [smlnum, bignum] (dlascl), undone on X's rows only
        finfo = np.finfo(a.dtype)
        smlnum = float(finfo.tiny) / float(finfo.eps)
        bnrm = float(np.abs(b).max()) if b.size else 0.0
        factor = (bnrm / smlnum if 0 < bnrm < smlnum else
                  bnrm * smlnum if bnrm > 1 / smlnum else 1.0)
        tail = x[n:m] * factor if factor != 1.0 else x[n:m].copy()
    return np.asfortranarray(x[:n]), int(rank), tail, info


def gelsy_factored(F, W, plan, rcond):
    """gelsy's solve after a pivoted QR of s_a A already made (geqp3.py): F the factors with
    their tau in the store, W (m x nrhs) holding s_b B (gels_load_rhs). W := Q^H W where the factors are (ormqr), then gelsy's rank decision and
    minimum-norm solve on the host with R (min(m, n) x n, the trapezoid: LAPACK gelsy on it with
    every column fixed, which leaves R as it is and finds the rank by its incremental condition
    estimator, as it would have on A P). Returns (y, rank, tail, info): y (n x nrhs) the
    solution of A P y = B, scaled as the factors and W are (the caller permutes by jpvt and
    unscales), tail (m > n) = (Q^H W)[n:m] (its column norms the residuals' when rank == n),
    else None. Ends with a synchronize."""
    from .ormqr import ormqr
    m, n, nrhs = F.m, F.n, W.n
    k = min(m, n)
    ormqr(F, W, plan, "L", "C")
    plan.backend.synchronize()
    r = np.triu(F.read_block(0, k, 0, n))
    c = W.read_block(0, k, 0, nrhs)
    y, rank, _, info = gelsy(r, c, rcond, overwrite_a=True, fixed=True)
    tail = W.read_block(n, m, 0, nrhs) if m > n else None
    return y, rank, tail, info
