"""getrf_ooc: LU with partial pivoting, P A = L U, of a host matrix larger than the memory
budget: left-looking over wide block columns (MAGMA's magma_dgetrf_m), each factored in-core by
getrf's engine. The skeleton (the working store, the copies, the windows) is _ooc.WideColumns'.

For each wide column J = columns j0:j1 (W wide, as the budget allows), in one of two buffers:

    A[:, J] comes up                           pass 1
    for each finished wide column P = p0:p1 on its left, in order (those whose interchanges
    the host L already carries first, see below):
        A[p0:, J] := P_P A[p0:, J]             its row interchanges (laswp, where A is)
        for each block column K = k0:k1 of P (nb wide), its L streamed up (pass 2), except the
        previous wide column's, which is still in the other buffer:
            A[K, J] := L_KK^-1 A[K, J]                    trsm, L_KK unit lower
            A[k1:, J] := A[k1:, J] - L[k1:, K] A[K, J]    gemm
            L[q0:, K] := P_Q L[q0:, K] in its slot, and home, Q the wide column before J
                                                   pass 4
        U[p0:p1, J] is final: it goes home                 pass 3, while J is updated
    P_J A[j0:, J] = L_J U_J                    getrf's engine on the buffer's rows j0:m
    L_J, U_JJ go home                                      pass 3, while the next J is updated
then for the wide columns before the last with pivots, Last = l0:l1:
    L[l0:, :l0] := P_Last L[l0:, :l0]                              pass 4
        on the device where those rows fit the other buffer (they come up while Last is
        factored and go home), else on the host
(LAPACK's getrf applies each step's interchanges to the columns on its left. Here wide column
Q's reach the L of the wide columns before it one wide column late: while the next one
streams them, each block column in its slot after it has read it, and the slot's rows q0:m go
home. A row interchange of rows >= q0 commutes with an update by P's L, whose U rows p0:p1
lie above q0: P_Q (A - L U) = P_Q A - (P_Q L) U.
So J may read an L that already carries Q's interchanges, once J's own rows carry them before
that update: J applies first the interchanges of every wide column the host L carries, then
updates. Applied on the host at the end, as MAGMA's getrf_m does, they took the host's memory
while the last wide column's left update streamed the most, and the GPU waited on the staging
chain; applied on the host one wide column late, they slowed every left update's staging
(host laswp runs on all the cores): perf/RESULTS.md, issue 31.)

The passes over the host matrix, and what they move (s bytes an element, c = n / W wide
columns, m >= n):
    1  every element up once: m n s
    2  for wide column J, the L of the block columns left of the previous wide column:
       sum_J ((m p0 - p0^2 / 2) s), p0 the previous wide column's first column: about
       (m n^2 / (2 W) - n^3 / (6 W)) s; for a square matrix n^3 s / (3 W), DESIGN.md's
       8 n^3 / (3 W) bytes in float64 (against 2 n^3 / 3 flops: W / (4 s / 8) flops a byte)
    3  every element down once: m n s
    4  wide column Q's interchanges on the L left of it: for all but the last, on the device,
       in the slots of the next wide column's stream, and rows q0:m of each streamed block
       column home: sum_Q ((m - q0) q0 s), about as many bytes as pass 2; the last wide
       column's on rows l0:m left of it: (m - l0) l0 s bytes up and as many home, or on the
       host (host memory only)
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
        if any(_late_interchanges(wide, J, P) for J in wide for P in wide.finished(J)):
            wide.reserve_panel_slots()
        for J in wide:
            record_wide_column(wide, J, pivots)
        pieces = _last_rows_pieces(wide)
        if pieces:
            record_last_interchanges_on_device(wide, pieces)
        else:
            record_interchanges_home(wide, pivots)
        trace = wide.run(trace)
        info = wide.first_failure(lambda store: store.finish()[1])
    return pivots, info, trace


def record_wide_column(wide, J, pivots):
    """Record the update, factorization and copies of wide column J (see the module's
    docstring); its pivots go to `pivots` (global) once factored."""
    A, m = wide.A, wide.M
    wide.bring_up(J, 0, m)
    finished = wide.finished(J)
    carried = _carried_interchanges(wide, J)  # in order, a part of `finished`
    # A[p0:, J] := P_P A[p0:, J] for the interchanges the host L already carries, first
    for P in carried:
        _record_interchange(wide, J, P)
    for P in finished:
        if P not in carried:
            _record_interchange(wide, J, P)
        late = _late_interchanges(wide, J, P)
        for K in wide.panels(J, P, rows=lambda k0, k1: (k0, m)):
            # A[K, J] := L_KK^-1 A[K, J];  A[k1:, J] := A[k1:, J] - L[k1:, K] A[K, J]
            rows = wide.buffer(J, K.k0, m)
            wide.task("left_update", J, "gpu:update",
                      functools.partial(_eliminate, wide.ops, A=A, L=K.rect, J=rows),
                      reads=[K.region], writes=[Region("A", *rows)],
                      flops=lu_update.update_flops(m, K.k0, K.k1, 0, J.width))
            if late is not None:
                # L[q0:, K] := P_Q L[q0:, K] in its slot, now that J has read it, and home
                rows = (late.c0, m, K.rect[2], K.rect[3])
                wide.task("laswp", J, "gpu:update",
                          functools.partial(_interchange, wide.ops, A=wide.window(*rows),
                                            P=late, nb=wide.nb),
                          reads=[late.own("piv", 0, late.factored)],
                          writes=[Region("A", *rows)])
                wide.send_panel_home(K, late.c0, m)
        # U[p0:p1, J] is final: no later update or interchange touches rows above p1
        wide.send_home(J, P.c0, P.c0 + P.factored)
    if J.c0 < wide.k_end:
        # P_J A[j0:, J] = L_J U_J
        wide.factor(J, record_getrf)
        wide.task("pivots", J, "cpu", functools.partial(_pivots_home, J=J, pivots=pivots),
                  reads=[J.own("piv", 0, J.factored)],
                  writes=[Region("ipiv", J.c0, J.c0 + J.factored)])
    wide.send_home(J, J.c0, m)


def _last_with_pivots(wide):
    """The last wide column that is factored (its interchanges reach the host at the end)."""
    return [P for P in wide.columns if P.c0 < wide.k_end][-1]


def _carried_interchanges(wide, J):
    """The wide columns whose interchanges the host L of the wide columns before them carries
    when J streams it: those two or more before J (each one's reach the host while the next
    streams), but the last with pivots (its own go at the end)."""
    last = _last_with_pivots(wide)
    return [Q for Q in wide.finished(J) if Q.index <= J.index - 2 and Q is not last]


def _late_interchanges(wide, J, P):
    """The wide column Q whose interchanges go to P's host L as J reads it block column by
    block column: the one just before J, where it is factored, is not the last with pivots,
    and comes after P (else None)."""
    if J.index == 0:
        return None
    Q = wide.columns[J.index - 1]
    if Q.c0 >= wide.k_end or Q is _last_with_pivots(wide) or P.index >= Q.index:
        return None
    return Q


def _record_interchange(wide, J, P):
    """A[p0:, J] := P_P A[p0:, J] on the device."""
    rows = wide.buffer(J, P.c0, wide.M)
    wide.task("laswp", J, "gpu:update",
              functools.partial(_interchange, wide.ops, A=wide.window(*rows), P=P,
                                nb=wide.nb),
              reads=[P.own("piv", 0, P.factored)], writes=[Region("A", *rows)])


def _interchange(ops, lane, A, P, nb):
    """The interchanges of wide column P (pivots local to its rows p0:) on the window A of
    another wide column's rows p0:, step by step: each step's are the row moves its
    factorization prepared (ops.prepare_interchanges), applied at once; the whole wide
    column's in one call are replayed pivot after pivot, a thread a column (10-20 ms a call
    on an H100 for 13824 pivots, perf/RESULTS.md, issue 31)."""
    for k0 in range(0, P.factored, nb):
        ops.laswp(lane, A, 0, A.n, k0, min(k0 + nb, P.factored), pivots_of=P.store)


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
    """L[:, P] := P_Last L[:, P] on the host for each wide column P before the last with
    pivots, at the end, where its rows do not fit the other buffer (the earlier wide
    columns' interchanges reached the L in the streaming slots: record_wide_column)."""
    last = _last_with_pivots(wide)
    # at most workers - 1 at once: a CPU worker stays free for the last way home's copies out
    # of the pinned slots (they waited behind all of these)
    chains = max(1, wide.plan.workers - 1)
    blocks = [(c0, min(c0 + wide.nb, P.c0 + P.factored)) for P in wide.columns[:last.index]
              if P.c0 < wide.k_end for c0 in range(P.c0, P.c0 + P.factored, wide.nb)]
    for i, (c0, c1) in enumerate(blocks):
        _record_laswp_home(wide, last, pivots, c0, c1, last.c0, last.c0 + last.factored,
                           chain=f"interchanges {i % chains}")


def _record_laswp_home(wide, step_column, pivots, c0, c1, k0, k1, chain=None):
    """A host task: pivots k0..k1-1 applied to columns c0:c1 of the host matrix, rows k0:."""
    wide.task("laswp_home", step_column, "cpu",
              functools.partial(_laswp_home, H=wide.result, c0=c0, c1=c1, pivots=pivots, k0=k0,
                                k1=k1),
              reads=[Region("ipiv", k0, k1)], writes=[Region("H", k0, wide.M, c0, c1)],
              chain=chain)


def _last_rows_pieces(wide):
    """Where rows l0:m of the columns left of the last wide column L (l0 its first column) fit
    in the other buffer once L's left update has read it, as pieces (c0, c1, r0): columns
    c0:c1, W wide at most, at the buffer's rows r0:r0 + m - l0, one under the other; None where
    they do not fit, L is not the last wide column (a wide column after it would come up into
    that buffer), there is one buffer, or wide columns are pinned in place."""
    L = _last_with_pivots(wide)
    if wide.buffers != 2 or L.index == 0 or L is not wide.columns[-1] or wide.pinned:
        return None
    height = wide.M - L.c0
    pieces = [(c0, min(c0 + wide.width, L.c0), i * height)
              for i, c0 in enumerate(range(0, L.c0, wide.width))]
    return pieces if len(pieces) * height <= wide.M else None


def record_last_interchanges_on_device(wide, pieces):
    """L[l0:, :l0] := P_L L[l0:, :l0], the last wide column L's interchanges on the L left of
    it, on the device: rows l0:m of those columns come up into the other buffer while L is
    factored, take the interchanges there, and go home (on the host they were the run's last
    0.4 s at n = 65536, after the GPU's last task: perf/RESULTS.md, issue 31). The pieces in
    the buffer's rows above the previous wide column's first go up as soon as the stream is
    done; the others once the previous wide column's last update has read its rows."""
    L, m, nb = _last_with_pivots(wide), wide.M, wide.nb
    b0 = wide.columns[L.index - 1].b0
    step = L.c0 // nb
    height = m - L.c0
    width = max(1, wide.A.slot_elements // height)  # as many columns as a slot holds
    for c0, c1, r0 in pieces:
        r1 = r0 + height
        for k0 in range(c0, c1, width):
            k1 = min(k0 + width, c1)
            wide.transfers.upload(step, wide.result[L.c0:m, k0:k1], r0, r1, b0 + k0 - c0,
                                  b0 + k1 - c0, reads=[Region("H", L.c0, m, k0, k1)])
        rect = wide.place(r0, r1, b0, b0 + c1 - c0)
        wide.task("laswp", L, "gpu:update",
                  functools.partial(_interchange, wide.ops, A=wide.window(*rect), P=L, nb=nb),
                  reads=[L.own("piv", 0, L.factored)], writes=[Region("A", *rect)])
        wide.send_rect_home(step, rect, (L.c0, m, c0, c1))


def _laswp_home(lane, H, c0, c1, pivots, k0, k1):
    """Pivots k0..k1-1 (global rows) applied to columns c0:c1 of the host matrix H, in order:
    LAPACK laswp on whole columns of the F-ordered array, in place (the host matrix is host
    memory whatever the backend), without the GIL (backend/host/nogil.py: scipy's laswp held
    it, and each of these tasks stopped the device lanes' enqueues and the staging copies)."""
    nogil.laswp(H[:, c0:c1], pivots, k0, k1)
