"""getrf: blocked right-looking LU with partial pivoting and look-ahead, P A = L U.

For each step k (panel columns k0:k1, kb = k1 - k0 <= nb):

    [A11; A21] = P_k [L11; L21] U11        panel: CPU (LAPACK) or GPU (cuSOLVER), per the plan
    [A10; A20] := P_k^T [A10; A20]         interchanges in the finished columns on the left
    for the next `lookahead` block columns, then all the others in one task:
        [A12; A22] := P_k^T [A12; A22];  A12 := L11^-1 A12;  A22 := A22 - A21 A12
    the row block k is final: it goes home (a host-resident matrix)

The skeleton (steps, look-ahead columns on the panel lane, the rest, the transfers of a
host-resident matrix) is _blocked.BlockedSteps'; this file is the math. The algorithm records
tasks, step by step; `scheduler.run` executes them (the first steps while the rest are being
recorded).
"""
from __future__ import annotations

import functools

from ..panel.lu import getrf_panel_cpu, getrf_panel_recursive, getrf_panel_window
from ..scheduler import Region, TaskGraph
from ..scheduler.plan import panel_flops
from ..update import lu as lu_update
from ._blocked import BlockedSteps, first_failure, run_recording


def getrf(A, plan, trace=None):
    """Factor the tile store's matrix A in place. Returns (pivots 0-based global, info, trace),
    with info as LAPACK's: 0, or i > 0 when U(i, i) (1-based) is exactly zero."""
    graph = TaskGraph()
    trace = run_recording(graph, record_getrf(graph, A, plan), A, plan, trace, "getrf")
    pivots, step_info = A.finish()
    return pivots, first_failure(step_info, plan.nb), trace


def record_getrf(graph, A, plan):
    """Record the factorization's tasks into `graph`, yielding after each step."""
    ops, m, n = plan.backend, A.m, A.n
    k_end = min(m, n)
    steps = BlockedSteps(graph, A, plan, k_end,
                         lambda k0, k1: lu_update.update_flops(m, k0, k1, k1, n))
    for step, k0, k1 in steps:
        panel, pivots = Region("A", k0, m, k0, k1), Region("piv", k0, k1)

        # [A11; A21] = P [L11; L21] U11
        where = plan.panel_placement(m - k0, k1 - k0, steps.previous_update_flops)
        record_panel(graph, steps, A, plan, step, k0, k1, where, panel, pivots)

        # [A10; A20] := P^T [A10; A20]
        if k0 > 0:
            graph.add("swap_left", step, "gpu:update",
                      functools.partial(lu_update.swap_left, ops, A=A, k0=k0, k1=k1),
                      reads=[pivots], writes=[Region("A", k0, m, 0, k0)])

        # [A12; A22] := P^T [A12; A22];  A12 := L11^-1 A12;  A22 := A22 - A21 A12
        steps.update_trailing(step, k1, n, lambda c0, c1, lane: record_update(
            graph, ops, A, step, k0, k1, c0, c1, lane))

        # rows k0:k1 are final now (all rows that remain, after the last step)
        steps.send_home(step, k0, k1 if k1 < k_end else m, 0, n)
        yield step


def record_panel(graph, steps, A, plan, step, k0, k1, where, panel, pivots):
    flops = panel_flops(A.m - k0, k1 - k0)
    # a reduced-precision backend (mixed solvers) keeps its panels in float32
    panel_ops = plan.backend.panel_ops
    # where the matrix is (a GPU panel; any panel on the host backend), one wider than
    # plan.panel_leaf is factored by recursive halving
    recursive = plan.panel_leaf and k1 - k0 > plan.panel_leaf and \
        (where == "gpu" or not plan.backend.has_device)
    if plan.panel_pivoting == "window":  # where the matrix is: it is mostly a tall trsm
        factor = functools.partial(getrf_panel_window, plan.backend, panel_ops, A=A, step=step,
                                   k0=k0, k1=k1, blocks=plan.pivot_window,
                                   leaf=plan.panel_leaf)
        lane = "gpu:panel" if plan.backend.has_device else "cpu"
    elif where == "gpu" or recursive:
        factor = functools.partial(getrf_panel_recursive, panel_ops, A=A, step=step, k0=k0,
                                   k1=k1, leaf=plan.panel_leaf,
                                   pivoting=plan.panel_pivoting) if recursive else \
            functools.partial(plan.backend.getrf_panel, A=A, step=step, r0=k0, c0=k0, c1=k1)
        lane = "gpu:panel" if where == "gpu" else "cpu"
    else:
        factor = functools.partial(_cpu_panel, A=A, step=step, r0=k0, c0=k0, c1=k1)
        steps.cpu_panel(step, factor, panel, [pivots], flops)
        return
    graph.add("panel", step, lane,
              functools.partial(_factor_then_prepare, factor=factor, ops=plan.backend, A=A,
                                step=step, k0=k0, k1=k1),
              writes=[panel, pivots], flops=flops)


def _factor_then_prepare(lane, factor, ops, A, step, k0, k1):
    """The panel, then its interchanges made ready for the step's laswps (on a device: as row
    moves, which the laswps of the trailing and left columns apply at once)."""
    factor(lane)
    ops.prepare_interchanges(lane, A, step, k0, k1)


def _cpu_panel(lane, A, step, r0, c0, c1):
    getrf_panel_cpu(A, step, r0, c0, c1)


def record_update(graph, ops, A, step, k0, k1, c0, c1, lane):
    """[A12; A22] := update of block columns c0:c1 by the panel k0:k1 (see update/lu.py)."""
    return graph.add(
        "update", step, lane,
        functools.partial(_update, ops=ops, A=A, k0=k0, k1=k1, c0=c0, c1=c1),
        reads=[Region("A", k0, A.m, k0, k1), Region("piv", k0, k1)],
        writes=[Region("A", k0, A.m, c0, c1)],
        flops=lu_update.update_flops(A.m, k0, k1, c0, c1))


def _update(lane, ops, A, k0, k1, c0, c1):
    # through the module attribute, so that a test can inject a failure into the update
    lu_update.gemm_update(ops, lane, A, k0, k1, c0, c1)
