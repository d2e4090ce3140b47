"""getrf: blocked right-looking LU with partial pivoting and look-ahead, P A = L U.

For each step k (panel columns k0:k1, kb = k1 - k0 <= nb):

    [A11; A21] = P_k [L11; L21] U11        panel: CPU (LAPACK) or GPU (cuSOLVER), per the plan
    [A10; A20] := P_k^T [A10; A20]         interchanges in the finished columns on the left
    for the next `lookahead` block columns, then all the others in one task:
        [A12; A22] := P_k^T [A12; A22];  A12 := L11^-1 A12;  A22 := A22 - A21 A12

The look-ahead columns go on the high-priority lane with the panels, so panel k+1 can start as
soon as its own column is updated, while the GPU is still busy with the rest of step k.

CPU interface on a device backend (a host-resident matrix): block columns are uploaded in order,
each just before the first task that touches it, and the row block k, final once step k is done
(later steps touch only rows below it), goes back to the host while the factorization goes on.
The algorithm records tasks; `scheduler.run` executes them.
"""
from __future__ import annotations

import functools

from ..backend.pinning import pieces_touched
from ..panel.lu import getrf_panel_cpu
from ..scheduler import Region, TaskGraph, run
from ..scheduler.plan import panel_flops, progress_bar
from ..update import lu as lu_update


def getrf(A, plan, trace=None):
    """Factor the tile store's matrix A in place. Returns (pivots 0-based global, info, trace),
    with info as LAPACK's: 0, or i > 0 when U(i, i) (1-based) is exactly zero."""
    graph = record_getrf(A, plan)
    with progress_bar(plan, len(graph), "getrf") as progress:
        trace = run(graph, plan.backend, workers=plan.workers, trace=trace, progress=progress)
    pivots, step_info = A.finish()
    return pivots, first_zero_pivot(step_info, plan.nb), trace


def first_zero_pivot(step_info, nb) -> int:
    """LAPACK's info from the panels' infos: the first zero pivot, 1-based and global."""
    for step, info in enumerate(step_info):
        if info > 0:
            return step * nb + int(info)
    return 0


def record_getrf(A, plan) -> TaskGraph:
    ops, m, n, nb = plan.backend, A.m, A.n, plan.nb
    k_end = min(m, n)
    streamed = A.streamed
    graph = TaskGraph()
    bytes_per_element = A.dtype.itemsize

    def region(r0, r1, c0, c1):
        return Region("A", r0, r1, c0, c1)

    upload_group = record_uploads(graph, A, plan) if streamed else None
    split_steps = steps_hidden_by_upload(A, plan) if streamed else 0

    previous_update_flops = 0.0
    for step, k0 in enumerate(range(0, k_end, nb)):
        k1 = min(k0 + nb, k_end)
        panel, pivots = region(k0, m, k0, k1), Region("piv", k0, k1)

        # [A11; A21] = P [L11; L21] U11
        where = plan.panel_placement(m - k0, k1 - k0, previous_update_flops)
        record_panel(graph, A, plan, step, k0, k1, where, panel, pivots)

        # [A10; A20] := P^T [A10; A20]
        if k0 > 0:
            graph.add("swap_left", step, "gpu:update",
                      functools.partial(lu_update.swap_left, ops, A=A, k0=k0, k1=k1),
                      reads=[pivots], writes=[region(k0, m, 0, k0)])

        # the look-ahead block columns, one task each, then the rest of the trailing matrix
        right = list(range(k1, n, nb))
        lookahead_columns, rest = right[:plan.lookahead], right[plan.lookahead:]
        for c0 in lookahead_columns:
            record_update(graph, ops, A, step, k0, k1, c0, min(c0 + nb, n), "gpu:panel")
        previous_update_flops = 0.0
        group = upload_group if step < split_steps else \
            -(-len(rest) // ops.update_tasks(plan.workers)) if rest else None
        for c0, c1 in rest_chunks(rest, n, nb, group):
            task = record_update(graph, ops, A, step, k0, k1, c0, c1, "gpu:update")
            previous_update_flops += task.flops

        # rows k0:k1 are final now (all rows that remain, after the last step): send them home
        if streamed:
            r1 = k1 if k1 < k_end else m
            graph.add("download", step, "copy:d2h", functools.partial(A.download_rows, r0=k0, r1=r1),
                      reads=[region(k0, r1, 0, n), Region("copy:d2h", 0, 1),
                             Region("pinned", 0, plan.pin_pieces)],
                      writes=[Region("copy:d2h", 0, 1)], bytes=(r1 - k0) * n * bytes_per_element)
    return graph


def record_uploads(graph, A, plan):
    """The host matrix goes up block column by block column, in order; with pinning, the pieces
    are pinned one after the other on a CPU worker, each upload waiting only for its own.
    Returns how many block columns a pinned piece holds (the upload granularity)."""
    m, n, nb = A.m, A.n, plan.nb
    piece_starts = A.plan_pin_pieces(plan.pin_pieces) if A.pin else [0]
    for piece in range(len(piece_starts) if A.pin else 0):
        graph.add("pin", -1, "cpu", lambda lane, piece=piece: A.pin_piece(piece),
                  reads=[Region("pin-chain", 0, 1)],
                  writes=[Region("pinned", piece, piece + 1), Region("pin-chain", 0, 1)])
    for block, c0 in enumerate(range(0, n, nb)):
        c1 = min(c0 + nb, n)
        first, last = pieces_touched(block, piece_starts)
        graph.add("upload", -1, "copy:h2d", functools.partial(A.upload_columns, c0=c0, c1=c1),
                  reads=[Region("copy:h2d", 0, 1), Region("pinned", first, last + 1)],
                  writes=[Region("A", 0, m, c0, c1), Region("copy:h2d", 0, 1)],
                  bytes=m * (c1 - c0) * A.dtype.itemsize)
    return max(1, -(-n // nb) // len(piece_starts))


def steps_hidden_by_upload(A, plan) -> int:
    """How many steps' trailing updates to cut into upload-sized column groups, so that the GPU
    updates the block columns that have arrived while the rest are still on their way: the
    steps whose updates fit in the time the upload takes, by the cost model."""
    upload = plan.cost.upload_seconds(A.m * A.n * A.dtype.itemsize, pinned=A.pin)
    elapsed, steps = 0.0, 0
    for k0 in range(0, min(A.m, A.n), plan.nb):
        if elapsed >= upload:
            break
        k1 = min(k0 + plan.nb, min(A.m, A.n))
        elapsed += plan.cost.gpu_update(lu_update.update_flops(A.m, k0, k1, k1, A.n))
        steps += 1
    return steps


def record_panel(graph, A, plan, step, k0, k1, where, panel, pivots):
    flops = panel_flops(A.m - k0, k1 - k0)
    if where == "gpu":
        graph.add("panel", step, "gpu:panel",
                  functools.partial(plan.backend.getrf_panel, A=A, step=step, r0=k0, c0=k0, c1=k1),
                  writes=[panel, pivots], flops=flops)
        return
    factor = functools.partial(_cpu_panel, A=A, step=step, r0=k0, c0=k0, c1=k1)
    if not getattr(plan.backend, "has_device", False):
        graph.add("panel", step, "cpu", factor, writes=[panel, pivots], flops=flops)
        return
    # on a device backend the CPU panel travels: down to a pinned buffer, LAPACK, and back up
    buffer = Region(f"pinned-panel-{step % 2}", 0, 1)
    nbytes = (A.m - k0) * (k1 - k0) * A.dtype.itemsize
    # the panel's own copy streams: a panel must not queue behind the bulk transfers
    graph.add("panel_d2h", step, "copy:panel-d2h",
              functools.partial(A.panel_to_host, step=step, r0=k0, c0=k0, c1=k1),
              reads=[panel], writes=[buffer], bytes=nbytes)
    graph.add("panel", step, "cpu", factor, reads=[buffer], writes=[buffer, pivots], flops=flops)
    graph.add("panel_h2d", step, "copy:panel-h2d",
              functools.partial(A.panel_to_device, step=step, r0=k0, c0=k0, c1=k1),
              reads=[buffer], writes=[panel, pivots], bytes=nbytes)


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


def rest_chunks(rest, n, nb, group):
    """The trailing columns past the look-ahead as (c0, c1) ranges: one range normally; ranges
    of `group` block columns while the matrix is still arriving from the host, so that the update
    follows the uploads instead of waiting for the last one."""
    if not rest:
        return []
    if group is None:
        return [(rest[0], n)]
    return [(rest[i], min(rest[min(i + group, len(rest)) - 1] + nb, n))
            for i in range(0, len(rest), group)]
