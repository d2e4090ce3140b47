"""geqrf: blocked right-looking Householder QR with look-ahead, A = Q R.

For each step k (panel columns k0:k1, kb = k1 - k0 <= nb):

    [A11; A21] = Q1 [R11; 0]        panel: CPU (LAPACK) or GPU (cuSOLVER), per the plan; Q1 is
                                    H(k0) ... H(k1-1), reflectors below the diagonal, tau[k0:k1]
    V1 := [A11; A21]'s reflectors, explicitly;  T1 := larft(V1, tau):  Q1 = I - V1 T1 V1^H
    for the next `lookahead` block columns, then all the others in one task:
        [A12; A22] := Q1^H [A12; A22]             W = V1^H C;  W := T1^H W;  C -= V1 W

V1 and T1 go to one of lookahead + 2 workspace slots, so the next panels' V and T can be formed
while this step's updates still read theirs. The look-ahead columns go on the high-priority lane
with the panels, so panel k+1 starts as soon as its own column is updated.

The same algorithm is geqlf (QL = QR of J A J) and gelqf (LQ = QR of A^H): written here in the
coordinates of that QR problem, `form.rect` puts each rectangle on the matrix (_householder.py).

CPU interface on a device backend (a host-resident matrix): block columns are uploaded in order,
each before the first task that touches it; after step k, the panel column block (R11 and the
reflectors below it) and the row block R12 are final (later steps touch only rows below k1), and
go back to the host while the factorization goes on: every element exactly once.
info is 0: a Householder factorization cannot fail.
"""
from __future__ import annotations

import functools

from ..panel.qr import householder_panel_cpu
from ..scheduler import Region, TaskGraph
from ..scheduler.plan import PANEL_FLOPS
from ..update.qr import larfb_flops
from ._blocked import BlockedSteps, first_failure, run_recording
from ._householder import QR, record_block_update, record_reflectors, reserve_reflector_slots


def geqrf(A, plan, trace=None):
    """Factor the tile store's matrix A = Q R in place, in LAPACK's storage (R on and above the
    diagonal, the reflectors below it). Returns (tau, info, trace)."""
    return householder_factorization(A, plan, QR, "geqrf", trace)


def householder_factorization(A, plan, form, name, trace=None):
    """Record and run the blocked factorization of `form` (QR, QL, LQ) on A; returns (tau,
    info, trace)."""
    graph = TaskGraph()
    trace = run_recording(graph, record_geqrf(graph, A, plan, form), A, plan, trace, name)
    tau, step_info = A.finish_tau()
    return tau, first_failure(step_info, plan.nb), trace


def record_geqrf(graph, A, plan, form=QR):
    """Record the factorization's tasks into `graph`, yielding after each step."""
    ops, nb = plan.backend, plan.nb
    m, n = form.shape(A.m, A.n)  # the QR problem's
    k_end = min(m, n)
    rect = functools.partial(form.rect, A.m, A.n)
    side, trans = form.trailing_update()
    slots = plan.lookahead + 2
    reserve_reflector_slots(A, slots, m, min(nb, k_end))

    # the matrix goes up in the order of the canonical block columns: QR's left to right, QL's
    # (J A J) right to left, LQ's (A^H) A's block rows top to bottom, so that every form's
    # first panel starts once its own block is up
    steps = BlockedSteps(graph, A, plan, k_end,
                         lambda k0, k1: larfb_flops(m - k0, k1 - k0, n - k1),
                         blocks=[rect(0, m, c0, min(c0 + nb, n)) for c0 in range(0, n, nb)])
    for step, k0, k1 in steps:
        taus = form.taus(k_end, k0, k1)

        # [A11; A21] = Q1 [R11; 0]
        where = plan.panel_placement(m - k0, k1 - k0, steps.previous_update_flops,
                                     kind="geqrf")
        record_panel(graph, steps, A, plan, form, step, rect(k0, m, k0, k1), taus, where)

        # Q1 = I - V1 T1 V1^H
        reflectors = record_reflectors(graph, ops, A, "A", form, step, step % slots,
                                       rect(k0, m, k0, k1), m - k0, k1 - k0, taus)

        # [A12; A22] := Q1^H [A12; A22]
        steps.update_trailing(step, k1, n, lambda c0, c1, lane: record_block_update(
            graph, ops, A, reflectors, side, trans, form.direction, A, "A", rect(k0, m, c0, c1),
            lane, step, larfb_flops(m - k0, k1 - k0, c1 - c0)))

        # the panel column block and the row block right of it are final
        steps.send_home(step, *rect(k0, m, k0, k1))
        if k1 < n:
            steps.send_home(step, *rect(k0, k1, k1, n))
        yield step


def record_panel(graph, steps, A, plan, form, step, panel, taus, where):
    """The panel `panel` (r0, r1, c0, c1 on the matrix) factored on the GPU (cuSOLVER geqrf, on
    a reversed or conjugate-transposed copy for QL and LQ) or the CPU; its scalars go to
    tau[taus]."""
    r0, r1, c0, c1 = panel
    writes = [Region("A", *panel), Region("tau", *taus)]
    rows, cols = form.shape(r1 - r0, c1 - c0)
    flops = PANEL_FLOPS["geqrf"](rows, cols)
    if where == "gpu":
        graph.add("panel", step, "gpu:panel",
                  functools.partial(plan.backend.householder_panel, A=A, step=step,
                                    storage=form.storage, rows=(r0, r1), cols=(c0, c1), taus=taus),
                  writes=writes + [Region("panel as QR", 0, 1)], flops=flops)
        return
    factor = functools.partial(_cpu_panel, A=A, step=step, storage=form.storage,
                               rows=(r0, r1), cols=(c0, c1), taus=taus)
    steps.cpu_panel(step, factor, writes[0], writes[1:], flops)


def _cpu_panel(lane, A, step, storage, rows, cols, taus):
    householder_panel_cpu(A, step, storage, rows, cols, taus)
