"""getrf_ooc: LU with partial pivoting, P A = L U, of a host matrix larger than the memory
budget: left-looking over wide block columns (MAGMA's magma_dgetrf_m), each factored in-core by
getrf's engine. The skeleton (the working store, the copies, the windows) is _ooc.WideColumns'.

For each wide column J = columns j0:j1 (W wide, as the budget allows), in one of two buffers:

    A[:, J] comes up                           pass 1
    for each finished wide column P = p0:p1 on its left, in order:
        A[p0:, J] := P_P A[p0:, J]             its row interchanges (laswp, where A is)
        for each block column K = k0:k1 of P (nb wide), its L streamed up (pass 2), except the
        previous wide column's, which is still in the other buffer:
            A[K, J] := L_KK^-1 A[K, J]                    trsm, L_KK unit lower
            A[k1:, J] := A[k1:, J] - L[k1:, K] A[K, J]    gemm
    U[0:j0, J] is final: it goes home                      pass 3, while J is factored
    P_J A[j0:, J] = L_J U_J                    getrf's engine on the buffer's rows j0:m
    L_J, U_JJ go home                                      pass 3, while the next J is updated
then on the host, for each wide column P but the last:
    L[:, P] := P_Q L[:, P] for the wide columns Q after it         pass 4 (host memory only)
(LAPACK's getrf applies each step's interchanges to the columns on its left: here they wait
until the last later wide column has read P's columns, as MAGMA's getrf_m does.)

The passes over the host matrix, and what they move (s bytes an element, c = n / W wide
columns, m >= n):
    1  every element up once: m n s
    2  for wide column J, the L of the block columns left of the previous wide column:
       sum_J ((m p0 - p0^2 / 2) s), p0 the previous wide column's first column: about
       (m n^2 / (2 W) - n^3 / (6 W)) s; for a square matrix n^3 s / (3 W), DESIGN.md's
       8 n^3 / (3 W) bytes in float64 (against 2 n^3 / 3 flops: W / (4 s / 8) flops a byte)
    3  every element down once: m n s
    4  on the host: each wide column's block columns, their rows past it permuted once
Each is a graph task on a copy lane (staged through pinned slots on a device) that overlaps the
compute: the next wide column comes up and the last goes home while one is factored; block
columns stream through two slots, one arriving while the other is used.

Same pivots as getrf's in-core (the same panels, the same order), info as LAPACK's: the first
exactly zero U(i, i), global.
"""
from __future__ import annotations

import functools

import numpy as np

from ..backend.host import nogil
from ..scheduler import Region
from ..update import lu as lu_update
from ._ooc import WideColumns
from .getrf import record_getrf


def getrf_ooc(source, result, plan, trace=None):
    """Factor the host matrix `source` into `result` (F-ordered, the same array with
    overwrite_a) out of core, within plan.memory_budget. Returns (pivots 0-based global,
    info, trace) as getrf's."""
    m, n = result.shape
    pivots = np.zeros(min(m, n), dtype=np.int32)
    with WideColumns(source, result, plan, "getrf") as wide:
        for J in wide:
            record_wide_column(wide, J, pivots)
        record_interchanges_home(wide, pivots)
        trace = wide.run(trace)
        info = wide.first_failure(lambda store: store.finish()[1])
    return pivots, info, trace


def record_wide_column(wide, J, pivots):
    """Record the update, factorization and copies of wide column J (see the module's
    docstring); its pivots go to `pivots` (global) once factored."""
    ops, A, m = wide.ops, wide.A, wide.M
    wide.bring_up(J, 0, m)
    for P in wide.finished(J):
        # A[p0:, J] := P_P A[p0:, J]
        rows = wide.buffer(J, P.c0, m)
        wide.task("laswp", J, "gpu:update",
                  functools.partial(_interchange, ops, A=wide.window(*rows), P=P),
                  reads=[P.own("piv", 0, P.factored)], writes=[Region("A", *rows)])
        for K in wide.panels(J, P, rows=lambda k0, k1: (k0, m)):
            # A[K, J] := L_KK^-1 A[K, J];  A[k1:, J] := A[k1:, J] - L[k1:, K] A[K, J]
            rows = wide.buffer(J, K.k0, m)
            wide.task("left_update", J, "gpu:update",
                      functools.partial(_eliminate, ops, A=A, L=K.rect, J=rows),
                      reads=[K.region], writes=[Region("A", *rows)],
                      flops=lu_update.update_flops(m, K.k0, K.k1, 0, J.width))
    # U[0:j0, J] is final
    wide.send_home(J, 0, min(J.c0, m))
    if J.c0 < wide.k_end:
        # P_J A[j0:, J] = L_J U_J
        wide.factor(J, record_getrf)
        wide.task("pivots", J, "cpu", functools.partial(_pivots_home, J=J, pivots=pivots),
                  reads=[J.own("piv", 0, J.factored)],
                  writes=[Region("ipiv", J.c0, J.c0 + J.factored)])
    wide.send_home(J, J.c0, m)


def _interchange(ops, lane, A, P):
    """The interchanges of wide column P (pivots local to its rows p0:) on the window A of
    another wide column's rows p0:."""
    ops.laswp(lane, A, 0, A.n, 0, P.factored, pivots_of=P.store)


def _eliminate(ops, lane, A, L, J):
    """The wide column's rows k0:m (the rectangle J of the working store) updated by the block
    column K = k0:k1 whose rows k0:m are the rectangle L: [L_KK; L(k1:), K] in place."""
    (l0, l1, c0, c1), (j0, j1, b0, b1) = L, J
    kb = c1 - c0
    lu_update.eliminate(ops, lane, A.block(l0, l0 + kb, c0, c1), A.block(l0 + kb, l1, c0, c1),
                        A.block(j0, j0 + kb, b0, b1), A.block(j0 + kb, j1, b0, b1))


def _pivots_home(lane, J, pivots):
    """The wide column's pivots, local to its window's rows, as global rows (a host copy: on a
    device the window's finish() waits for them, the one point that needs them)."""
    local, _ = J.store.finish()
    pivots[J.c0:J.c0 + J.factored] = local[:J.factored] + J.c0


def record_interchanges_home(wide, pivots):
    """L[:, P] := P_Q L[:, P] on the host for each wide column P, Q the interchanges of the
    wide columns after it, in two parts: those of all but the last wide column with pivots
    (one task at a time, while the last is factored: a CPU worker each), then the last one's
    (at the end, side by side)."""
    factored = [J for J in wide.columns if J.store is not None]
    if len(factored) < 2:
        return
    last, k_end = factored[-1].c0, wide.k_end
    for P in factored[:-1]:
        p1 = P.c0 + P.factored
        for k0, k1, chain in ((p1, last, "interchanges"), (last, k_end, None)):
            if k1 <= k0:
                continue
            for c0 in range(P.c0, p1, wide.nb):
                c1 = min(c0 + wide.nb, p1)
                wide.task("laswp_home", P, "cpu",
                          functools.partial(_laswp_home, H=wide.result, c0=c0, c1=c1,
                                            pivots=pivots, k0=k0, k1=k1),
                          reads=[Region("ipiv", k0, k1)],
                          writes=[Region("H", k0, wide.M, c0, c1)], chain=chain)


def _laswp_home(lane, H, c0, c1, pivots, k0, k1):
    """Pivots k0..k1-1 (global rows) applied to columns c0:c1 of the host matrix H, in order:
    LAPACK laswp on whole columns of the F-ordered array, in place (the host matrix is host
    memory whatever the backend), without the GIL (backend/host/nogil.py: scipy's laswp held
    it, and each of these tasks stopped the device lanes' enqueues and the staging copies)."""
    nogil.laswp(H[:, c0:c1], pivots, k0, k1)
