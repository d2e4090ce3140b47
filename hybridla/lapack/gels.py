"""gels: the least-squares solution of a full-rank overdetermined A X = B, or the minimum-norm
solution of an underdetermined one (LAPACK gels, trans "N"):

    m >= n:  A = Q R;   X = R^-1 (Q^H B)[:n]                  geqrf, then geqrs
    m <  n:  A = L Q;   X = Q^H [L^-1 B; 0]                   gelqf, then gelqs

(the minimum-norm solution: A X = B with X in the row space of A, orthogonal to its null space).
B is max(m, n) x nrhs: the right-hand side in its first m rows, the solution in its first n; for
m > n, rows n:m end up holding Q^H B's part that no X reaches, whose norms are the residuals.

Before solving, the triangle's diagonal is checked: info = i > 0 when |T(i, i)| (1-based) is
<= rank_tol max_j |T(j, j)|, and B is left untouched; rank_tol 0 is LAPACK's test (an exactly
zero diagonal entry). QR without pivoting can miss a rank deficiency that this test does not see
(a small |R(i, i)| is sufficient, not necessary): a full-rank matrix is the caller's promise.

Scaling (dgels's): with anrm = max |a_ij| (lange "M"), A is first brought into the safe range
[smlnum, bignum], smlnum = safmin / eps, bignum = 1 / smlnum, when it lies outside (entries near
overflow, whose Householder updates would overflow, or so small that they lose their digits);
likewise B. Here the factors are powers of two (dgels takes cto / cfrom; a power of two changes
no digit), and the solution is unscaled after the solve:

    A_s = s_a A,  B_s = s_b B:   X = s_a X_s / s_b,  and the residuals B - A X = (B_s - A_s X_s) / s_b
"""
from __future__ import annotations

import numpy as np

from ._scaling import max_abs, range_scale, scale
from .gelqf import gelqf
from .geqrf import geqrf
from .ormqr import ormlq, ormqr


def gels(A, B, plan, rank_tol=0.0, trace=None):
    """Factor A in place and overwrite B with the solution unless the triangle fails the rank
    test (B then holds what it held). Both stores hold their matrices where the work happens (A
    not streamed from the host). A and B are scaled into the safe range first when they lie
    outside it (the module's docstring), and X (rows n:m too, the residuals) unscaled; A keeps
    the factors of s_a A. Returns (tau, info, trace)."""
    if A.streamed:
        raise ValueError("gels needs A where the work happens (not streamed from the host)")
    ops = plan.backend
    m, n, nrhs = A.m, A.n, B.n
    rows = max(m, n)
    if B.m < rows:
        raise ValueError(f"B must have max(m, n) = {rows} rows for the {m} x {n} A; got {B.m}")
    scale_a = range_scale(max_abs(ops, A, A.block(0, m, 0, n)), A.dtype)
    scale_b = range_scale(max_abs(ops, B, B.block(0, m, 0, nrhs)), A.dtype)
    scale(ops, A.block(0, m, 0, n), scale_a)
    scale(ops, B.block(0, m, 0, nrhs), scale_b)
    factor, solve = (geqrf, geqrs) if m >= n else (gelqf, gelqs)
    tau, _, trace = factor(A, plan, trace)
    info, trace = solve(A, B, plan, rank_tol, trace)
    if info:  # B as it was
        scale(ops, B.block(0, m, 0, nrhs), 1 / scale_b)
    else:
        unscale_solution(ops, B, m, n, nrhs, scale_a, scale_b)
    ops.synchronize()
    return tau, info, trace


def geqrs(F, B, plan, rank_tol=0.0, trace=None):
    """X := R^-1 (Q^H B)[:n] in B's first n rows, with F from geqrf (m >= n). Returns (info,
    trace)."""
    n, nrhs = F.n, B.n
    info = rank_test(F, rank_tol)
    if info:
        return info, trace
    trace = ormqr(F, B, plan, "L", "C", trace)   # B := Q^H B
    ops = plan.backend
    lane = ops.lane("gpu:update")
    with lane:
        ops.trsm(lane, "L", "U", "N", "N", 1, F.block(0, n, 0, n), B.block(0, n, 0, nrhs))
    return 0, trace


def gelqs(F, B, plan, rank_tol=0.0, trace=None):
    """X := Q^H [L^-1 B[:m]; 0] in B (n rows), with F from gelqf (m < n). Returns (info, trace)."""
    m, n, nrhs = F.m, F.n, B.n
    info = rank_test(F, rank_tol)
    if info:
        return info, trace
    ops = plan.backend
    lane = ops.lane("gpu:update")
    with lane:
        ops.trsm(lane, "L", "L", "N", "N", 1, F.block(0, m, 0, m), B.block(0, m, 0, nrhs))
        ops.laset(lane, "A", 0, 0, B.block(m, n, 0, nrhs))
    return 0, ormlq(F, B, plan, "L", "C", trace)  # B := Q^H B


def rank_test(F, rank_tol) -> int:
    """1 + the first i with |T(i, i)| <= rank_tol max_j |T(j, j)|, or 0. Reads the diagonal to
    the host: on a device backend, a host wait for the factorization's last writes."""
    diagonal = np.abs(F.diagonal())
    if diagonal.size == 0:
        return 0
    small = np.flatnonzero(diagonal <= rank_tol * diagonal.max())
    return int(small[0]) + 1 if small.size else 0


def unscale_solution(ops, B, m, n, nrhs, scale_a, scale_b):
    """X := s_a X_s / s_b in B's first n rows, and for m > n the residual rows n:m := rows / s_b
    (dgels's two lascl calls, one factor at a time: s_a / s_b could leave the range where X
    does not)."""
    scale(ops, B.block(0, n, 0, nrhs), scale_a)
    scale(ops, B.block(0, max(m, n), 0, nrhs), 1 / scale_b)


# -- lstsq's steps around factors it already has (hybridla._lstsq: the factorization through
# _decomp_qr, B copied so that the user's b is never written) ----------------------------------
def gels_load_rhs(ops, B, W, m, nrhs, dtype) -> float:
    """W[0:m, 0:nrhs] := B[0:m, 0:nrhs] (lacpy on the update lane), then W's copy brought into
    the safe range for `dtype` as dgels brings B (the module's Scaling). B is only read. Returns
    s_b, the power of two W's rows were scaled by (1: none)."""
    lane = ops.lane("gpu:update")
    with lane:
        ops.lacpy(lane, "A", B.block(0, m, 0, nrhs), W.block(0, m, 0, nrhs))
    scale_b = range_scale(max_abs(ops, W, W.block(0, m, 0, nrhs)), dtype)
    scale(ops, W.block(0, m, 0, nrhs), scale_b)
    return scale_b


def gels_factored(ops, F, W, X, plan, rank_tol, scale_a, scale_b):
    """gels's solve with the factors F (geqrf's of s_a A for m >= n, gelqf's for m < n, with
    their tau) and W, max(m, n) x nrhs, holding s_b B in its first m rows (gels_load_rhs):
    geqrs or gelqs, and for info == 0 X unscaled in W's first n rows (and for m > n the residual
    part, unscaled, in rows n:m), then copied into X's first n rows unless X is None (W is the
    result). info > 0 (the rank test failed): W as it was. Returns (info, residues): residues a
    host copy of W[n:m, 0:nrhs] for m > n when info == 0, else None. Ends with a synchronize:
    everything enqueued is complete on return."""
    m, n, nrhs = F.m, F.n, W.n
    solve = geqrs if m >= n else gelqs
    info, _ = solve(F, W, plan, rank_tol)
    residues = None
    if info == 0:
        unscale_solution(ops, W, m, n, nrhs, scale_a, scale_b)
        if X is not None:
            lane = ops.lane("gpu:update")
            with lane:
                ops.lacpy(lane, "A", W.block(0, n, 0, nrhs), X.block(0, n, 0, nrhs))
        residues = W.read_block(n, m, 0, nrhs) if m > n else None
    ops.synchronize()
    return info, residues


def gels_zero_solution(ops, X):
    """X := 0, the whole store (dgels's laset of the solution for an empty A: m or n zero), on
    the update lane, then a synchronize: complete on return."""
    lane = ops.lane("gpu:update")
    with lane:
        ops.laset(lane, "A", 0, 0, X.block(0, X.m, 0, X.n))
    ops.synchronize()


def lascl_copy(ops, factor, S, T):
    """T := factor S, the whole of both stores (of one shape; dgels's lascl of A, into a copy
    so that S, the user's matrix, is only read), on the update lane, then a synchronize:
    complete on return."""
    lane = ops.lane("gpu:update")
    with lane:
        ops.scale_copy(lane, factor, S.block(0, S.m, 0, S.n), T.block(0, S.m, 0, S.n))
    ops.synchronize()
