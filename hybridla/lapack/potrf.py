"""potrf: blocked right-looking Cholesky with look-ahead, A = L L^H (lower) or U^H U (upper).

For each step k (diagonal block k0:k1, kb = k1 - k0 <= nb), lower shown (upper: transposed):

    A11 = L11 L11^H                     diagonal block: CPU (LAPACK) or GPU (cuSOLVER), per plan
    A21 := A21 L11^-H                   on the GPU (critical path lane), a gemm with L11^-1
    [A21 rounded once]                  where the herks below are gemms on rounded operands
                                        (mixed solvers), for all of them
    for the next `lookahead` block columns, then all the others in one task:
        A22 := A22 - A21 A21^H          herk on the diagonal blocks, gemm below them

On a device, once the trailing matrix is of order plan.tail or less (config cho.tail), it is
factored whole by the device's potrf (cuSOLVER) as the last task.

Only the `uplo` triangle is read and written; the other keeps what it held (LAPACK's contract).
A host-resident matrix streams as in getrf: block columns up as they are first needed, and each
step's finished block column (row, for upper) back to the host while the factorization goes on.
info as LAPACK's: 0, or the order of the first leading minor that is not positive definite.

A tall store (lower, m > n) or a wide one (upper, m < n) is a Cholesky panel of order min(m, n):
the same steps factor its leading square, and the solves and updates reach its last row (column),
so that the rows below are L21 := A21 L11^-H (out-of-core's wide columns: lapack/potrf_ooc.py).
"""
from __future__ import annotations

import functools

import numpy as np

from ..panel.chol import potrf_panel_cpu
from ..scheduler import Region, TaskGraph
from ..update import chol as chol_update
from ._blocked import BlockedSteps, first_failure, run_recording


def potrf(A, plan, uplo="L", trace=None):
    """Factor the tile store's square Hermitian matrix A in place. Returns (info, trace)."""
    graph = TaskGraph()
    trace = run_recording(graph, record_potrf(graph, A, plan, uplo), A, plan, trace, "potrf")
    _, step_info = A.finish()
    return first_failure(step_info, plan.nb), trace


def zero_other_triangle(c, upper, ops=None, width=512):
    """The strictly upper (upper=True) or strictly lower triangle of the square array c := 0,
    in place: the triangle that a factor of potrf with uplo "L" (or "U") does not use, which
    potrf leaves as it was. A device array through `ops`, the backend where it lives (its
    zero_triangle: one kernel on the update lane, then a synchronize); a host array (ops None) a
    block of `width` columns at a time (np.triu / np.tril of the whole would make an n x n
    copy)."""
    if ops is not None:
        ops.zero_triangle(c, upper=upper)
        return
    n = c.shape[0]
    for c0 in range(0, n, width):
        c1 = min(c0 + width, n)
        if upper:
            c[:c0, c0:c1] = 0
            c[c0:c1, c0:c1] = np.tril(c[c0:c1, c0:c1])
        else:
            c[c1:, c0:c1] = 0
            c[c0:c1, c0:c1] = np.triu(c[c0:c1, c0:c1])


def record_potrf(graph, A, plan, uplo):
    """Record the factorization's tasks into `graph`, yielding after each step."""
    ops, n = plan.backend, min(A.m, A.n)  # the order
    reach = chol_update.extent(A, uplo)  # where the factor's block columns (rows) end
    steps = BlockedSteps(graph, A, plan, n,
                         lambda k0, k1: chol_update.herk_flops(reach, k0, k1, k1, n))
    for step, k0, k1 in steps:
        if n - k0 <= _tail(plan, A):
            record_tail(graph, A, plan, uplo, step, k0)
            yield step
            return
        diagonal = Region("A", k0, k1, k0, k1)
        panel = Region("A", *chol_update.finished_region(uplo, reach, k0, k1))

        # A11 = L11 L11^H
        where = plan.panel_placement(k1 - k0, k1 - k0, steps.previous_update_flops,
                                     kind="potrf")
        flops = (k1 - k0) ** 3 / 3
        if where == "gpu":
            graph.add("panel", step, "gpu:panel",
                      functools.partial(ops.potrf_panel, A=A, step=step, uplo=uplo, k0=k0, k1=k1),
                      writes=[diagonal], flops=flops)
        else:
            factor = functools.partial(_cpu_panel, A=A, step=step, k0=k0, k1=k1, uplo=uplo)
            steps.cpu_panel(step, factor, diagonal, [], flops)

        # A21 := A21 L11^-H
        graph.add("trsm", step, "gpu:panel",
                  functools.partial(chol_update.solve_off_diagonal, ops, A=A, uplo=uplo, k0=k0,
                                    k1=k1),
                  reads=[diagonal], writes=[panel, Region("diagonal inverse", 0, 1)],
                  flops=float((k1 - k0) ** 2 * (reach - k1)))

        # rounded once for all the step's herks, where they are gemms on rounded operands; the
        # slots in turn, so that this step's rounding need not wait for the last step's herks
        rounded_slot = None
        if ops.herk_is_gemm and k1 < reach:
            rounded_slot = step % ops.herk_panel_slots
            graph.add("round", step, "gpu:panel",
                      functools.partial(chol_update.round_panel, ops, A=A, uplo=uplo, k0=k0,
                                        k1=k1, slot=rounded_slot),
                      reads=[panel], writes=[_rounded_region(rounded_slot)])

        # A22 := A22 - A21 A21^H
        steps.update_trailing(step, k1, n, lambda c0, c1, lane: record_update(
            graph, ops, A, uplo, step, k0, k1, c0, c1, lane, rounded_slot))

        # this step's block column (row) of the factor is final
        steps.send_home(step, *chol_update.finished_region(uplo, reach, k0, k1))
        yield step


def _tail(plan, A):
    """The order up to which the trailing matrix goes to the device's potrf in one call: its
    last steps are bound by the diagonal block, the off-diagonal solve and the look-ahead column
    one after the other, which cuSOLVER's own potrf does without a task hand-off between them.
    Not for a streamed matrix, whose tail would then come home in one piece after the rest, nor
    for a panel (a tall or wide store), whose rows (columns) past the order need a solve."""
    return plan.tail if plan.backend.has_device and not A.streamed and A.m == A.n else 0


def record_tail(graph, A, plan, uplo, step, k0):
    """A[k0:n, k0:n] = L L^H in one device potrf, after every update of it; its info is the
    step's, as a diagonal block's."""
    graph.add("tail", step, "gpu:panel",
              functools.partial(plan.backend.potrf_panel, A=A, step=step, uplo=uplo, k0=k0,
                                k1=A.n),
              writes=[Region("A", k0, A.n, k0, A.n)], flops=(A.n - k0) ** 3 / 3)


def _cpu_panel(lane, A, step, k0, k1, uplo):
    potrf_panel_cpu(A, step, k0, k1, uplo)


def _rounded_region(slot):
    return Region("rounded panel", slot, slot + 1)


def record_update(graph, ops, A, uplo, step, k0, k1, c0, c1, lane, rounded_slot=None):
    """A22 -= A21 A21^H on block columns (rows) c0:c1, from the finished panel k0:k1 (or its
    rounded copy in `rounded_slot`)."""
    n, nb = chol_update.extent(A, uplo), k1 - k0  # a step with a trailing matrix: a full block
    reads = [Region("A", c0, n, k0, k1) if uplo == "L" else Region("A", k0, k1, c0, n)]
    if rounded_slot is not None:
        reads.append(_rounded_region(rounded_slot))
    return graph.add(
        "update", step, lane,
        functools.partial(_update, ops=ops, A=A, uplo=uplo, k0=k0, k1=k1, c0=c0, c1=c1,
                          rounded_slot=rounded_slot),
        # the triangle, block column (row) by block column: the other triangle is not written
        reads=reads,
        writes=[Region("A", *chol_update.update_region(uplo, n, k0, c, min(c + nb, c1)))
                for c in range(c0, c1, nb)],
        flops=chol_update.herk_flops(n, k0, k1, c0, c1))


def _update(lane, ops, A, uplo, k0, k1, c0, c1, rounded_slot):
    chol_update.herk_update(ops, lane, A, uplo, k0, k1, c0, c1, rounded_slot)
