"""geqrs_ooc: the least-squares solution X = R^-1 (Q^H B)[:n] of a full-rank A X = B, m >= n,
with A = Q R's factors in host memory (geqrf's or geqrf_ooc's storage: the reflectors V below
the diagonal, R on and above it, and tau), B going up once and the factors streaming through
the device a block column at a time. The skeleton (the working store, the copies, the
triangular solve) is _streamed_solve.StreamedSolve's.

For each column block of B (m x nrhs) that the budget holds at once (all of B where it fits):

    for each block column K = k0:k1 of the factors, first to last (rows k0:m):
        V_K := its reflectors, explicit;  T_K := larft(V_K, tau_K)     Q_K = I - V T V^H
        B[k0:m] := Q_K^H B[k0:m]                                        larfb: 2 gemms, trmm
    B[0:n] := R^-1 B[0:n]       R's block columns last to first (rows 0:k1)

so Q^H = Q_{S-1}^H ... Q_0^H is applied first to last (ormqr's order for Q^H from the left)
and B's rows n:m end holding the part of Q^H B that no X reaches (their norms: the residuals).

What it moves (s bytes an element, c column blocks of B, sum over block columns K of width kb):
    B up and back once:                                   2 m nrhs s
    the reflectors' block columns, rows k0:m:             sum_K (m - k0) kb s
    R's block columns, rows 0:k1:                         sum_K k1 kb s
    in all, once per block of B:                          c (m n + sum_K kb^2) s
Each block column of V crosses once (formed into V_K and T_K on the device, used by one larfb,
then never again), each of R once (one trsm on its diagonal block, one gemm above it); the
diagonal blocks hold both R_KK and V_KK, so they come up with each.

No rank test and no scaling here: the caller's (gels.rank_test on R's diagonal, gels's
Scaling), as geqrs leaves them to gels.
"""
from __future__ import annotations

from ..update.qr import larfb_flops
from ._householder import QR, record_block_update, record_reflectors, \
    reserve_reflector_slots
from ._streamed_solve import StreamedSolve

_REFLECTOR_SLOTS = 2  # V_K and T_K, in turn: the next ones formed while these are applied


def geqrs_ooc(factors, tau, b, plan, trace=None):
    """Overwrite the host array `b` (m x nrhs, F-ordered) with [R^-1 (Q^H b)[:n]; (Q^H b)[n:]],
    the QR factors of an m x n A (m >= n) in the host array `factors` (of b's dtype, any layout;
    only read) with their tau, streamed within plan.memory_budget. Returns the run's trace."""
    m, n = factors.shape
    nb = plan.nb
    # V_K's slots (m x nb each) take memory beside the store's: counted as its columns
    with StreamedSolve(factors, b, plan, "geqrs", extra=_REFLECTOR_SLOTS * nb + 1) as solve:
        ops, A, graph = solve.ops, solve.A, solve.graph
        A.set_tau(tau)
        reserve_reflector_slots(A, _REFLECTOR_SLOTS, m, min(nb, n))
        for c0, c1 in solve.blocks():
            for k0 in range(0, n, nb):
                k1, step = min(k0 + nb, n), k0 // nb
                panel = solve.panel(k0, m, k0, k1)
                # Q_K = I - V_K T_K V_K^H from the block column
                reflectors = record_reflectors(
                    graph, ops, A, "A", QR, step, graph.counter("reflectors") % _REFLECTOR_SLOTS,
                    panel, m - k0, k1 - k0, (k0, k1))
                # B[k0:m] := Q_K^H B[k0:m]
                for w0, w1 in solve.chunks(c0, c1):
                    record_block_update(graph, ops, A, reflectors, "L", "C", QR.direction, A,
                                        "A", (k0, m, w0, w1), "gpu:update", step,
                                        larfb_flops(m - k0, k1 - k0, w1 - w0))
            solve.trsm(n, "U", "N", "N", c0, c1)  # B[0:n] := R^-1 B[0:n]
        return solve.run(trace)
