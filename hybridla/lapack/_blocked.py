"""Recording pieces that every blocked right-looking factorization shares: streaming a
host-resident matrix up (pinned in pieces) and its finished blocks down, the CPU panel's round
trip through a pinned buffer on a device backend, the trailing update cut into tasks, and
LAPACK's info from the panels' infos."""
from __future__ import annotations

import functools

from ..backend.pinning import pieces_touched
from ..scheduler import Region, run
from ..scheduler.plan import progress_bar


def run_recording(graph, steps, A, plan, trace, name):
    """Run the graph that `steps` records into `graph`, one step per item; returns the trace.
    A matrix already on the device starts on its first plan.head_steps steps while the rest are
    recorded (recording and ordering the whole graph first left the GPU idle for milliseconds).
    A streamed one is recorded whole first: the head of its graph is the upload chain, which the
    rest must not wait for; so is one with a progress bar, whose total is the graph's size."""
    head_steps = 0 if A.streamed or plan.progress else plan.head_steps
    if plan.progress:
        for _ in steps:  # the bar's total is the graph's size
            pass
    with progress_bar(plan, len(graph), name) as progress:
        return run(graph, plan.backend, workers=plan.workers, trace=trace, progress=progress,
                   recording=steps, head_steps=head_steps)


def first_failure(step_info, nb) -> int:
    """LAPACK's info from the panels' infos: the first failing step's, made global (1-based)."""
    for step, info in enumerate(step_info):
        if info > 0:
            return step * nb + int(info)
    return 0


def record_uploads(graph, A, plan, blocks=None):
    """The host matrix goes up block by block, in the order the algorithm first needs them:
    `blocks`, rectangles (r0, r1, c0, c1); the block columns left to right by default (QL takes
    them right to left, LQ takes block rows). Staged, a CPU task copies each block into a pinned
    slot and the DMA follows it; the copies form one chain (each runs on several threads of its
    own), so the Dask workers stay free to enqueue GPU work. Pinned in place, the pieces (column
    ranges) are pinned one after the other on a CPU worker, each upload waiting only for the
    pieces it lies in. Returns how many blocks the trailing update takes at once while the
    matrix arrives: plan.upload_group when staged (the blocks arrive one by one), a piece's
    when pinned (they arrive as their piece is pinned)."""
    m, n, nb = A.m, A.n, plan.nb
    if blocks is None:
        blocks = [(0, m, c0, min(c0 + nb, n)) for c0 in range(0, n, nb)]
    if A.staged:
        for index, (r0, r1, c0, c1) in enumerate(blocks):
            slot = index % A.up_slots
            buffer = Region("stage-up", slot, slot + 1)
            nbytes = (r1 - r0) * (c1 - c0) * A.dtype.itemsize
            rectangle = dict(slot=slot, r0=r0, r1=r1, c0=c0, c1=c1)
            graph.add("stage", -1, "cpu", functools.partial(A.stage_block, **rectangle),
                      reads=[Region("stage-chain", 0, 1)],
                      writes=[buffer, Region("stage-chain", 0, 1)], bytes=nbytes)
            graph.add("upload", -1, "copy:h2d", functools.partial(A.upload_staged, **rectangle),
                      reads=[Region("copy:h2d", 0, 1), buffer],
                      writes=[Region("A", r0, r1, c0, c1), Region("copy:h2d", 0, 1)],
                      bytes=nbytes)
        return plan.upload_group
    piece_starts = A.plan_pin_pieces(plan.pin_pieces) if A.pin else [0]
    for piece in range(len(piece_starts) if A.pin else 0):
        graph.add("pin", -1, "cpu", lambda lane, piece=piece: A.pin_piece(piece),
                  reads=[Region("pin-chain", 0, 1)],
                  writes=[Region("pinned", piece, piece + 1), Region("pin-chain", 0, 1)])
    for r0, r1, c0, c1 in blocks:
        first = pieces_touched(c0 // nb, piece_starts)[0]
        last = pieces_touched((c1 - 1) // nb, piece_starts)[1]
        graph.add("upload", -1, "copy:h2d",
                  functools.partial(A.upload_block, r0=r0, r1=r1, c0=c0, c1=c1),
                  reads=[Region("copy:h2d", 0, 1), Region("pinned", first, last + 1)],
                  writes=[Region("A", r0, r1, c0, c1), Region("copy:h2d", 0, 1)],
                  bytes=(r1 - r0) * (c1 - c0) * A.dtype.itemsize)
    return max(1, len(blocks) // len(piece_starts))


def steps_hidden_by_upload(A, plan, step_update_flops) -> int:
    """How many steps' trailing updates to cut into upload-sized column groups, so that the GPU
    updates the block columns that have arrived while the rest are still on their way: the
    steps whose updates (`step_update_flops(k0, k1)`) fit in the time the upload takes, by the
    cost model."""
    upload = plan.cost.upload_seconds(A.m * A.n * A.dtype.itemsize, A.transfer)
    elapsed, steps = 0.0, 0
    for k0 in range(0, min(A.m, A.n), plan.nb):
        if elapsed >= upload:
            break
        k1 = min(k0 + plan.nb, min(A.m, A.n))
        elapsed += plan.cost.gpu_update(step_update_flops(k0, k1))
        steps += 1
    return steps


def record_cpu_panel(graph, A, plan, step, k0, k1, factor, panel, results, flops):
    """A panel factored on the CPU by `factor(lane)`: in place on the host backend; on a device
    backend it travels down to a pinned buffer and back up, on its own copy streams, so that it
    never queues behind the bulk transfers. What travels is the rectangle of the region `panel`:
    rows k0:m of the step's columns k0:k1 for LU and Cholesky, another rectangle for the QL and
    LQ panels (which end above the last row: their `r1` is passed on). `results` are the other
    regions it writes (pivots, tau: the tile store sends them up with the panel)."""
    if not plan.backend.has_device:
        graph.add("panel", step, "cpu", factor, writes=[panel, *results], flops=flops)
        return
    buffer = Region(f"pinned-panel-{step % 2}", 0, 1)
    rectangle = dict(step=step, r0=panel.r0, c0=panel.c0, c1=panel.c1)
    if panel.r1 != A.m:
        rectangle["r1"] = panel.r1
    nbytes = (panel.r1 - panel.r0) * (panel.c1 - panel.c0) * A.dtype.itemsize
    graph.add("panel_d2h", step, "copy:panel-d2h", functools.partial(A.panel_to_host, **rectangle),
              reads=[panel], writes=[buffer], bytes=nbytes)
    graph.add("panel", step, "cpu", factor, reads=[buffer], writes=[buffer, *results],
              flops=flops)
    graph.add("panel_h2d", step, "copy:panel-h2d",
              functools.partial(A.panel_to_device, **rectangle),
              reads=[buffer], writes=[panel, *results], bytes=nbytes)


def record_download(graph, A, plan, step, r0, r1, c0, c1):
    """A block that is final now goes back to the host matrix while the factorization goes on.
    Staged, it goes in pieces that fit a slot: DMA into the slot, then a CPU task copies it out
    (one chain of those, on several threads each: run side by side they took every Dask worker
    and held up the GPU work, measured)."""
    chain = Region("copy:d2h", 0, 1)
    if not A.staged:
        graph.add("download", step, "copy:d2h",
                  functools.partial(A.download_block, r0=r0, r1=r1, c0=c0, c1=c1),
                  reads=[Region("A", r0, r1, c0, c1), chain, Region("pinned", 0, plan.pin_pieces)],
                  writes=[chain], bytes=(r1 - r0) * (c1 - c0) * A.dtype.itemsize)
        return
    width = max(1, A.slot_elements // max(r1 - r0, 1))
    for j0 in range(c0, c1, width):
        j1 = min(j0 + width, c1)
        slot = graph.counter("stage-down") % A.down_slots
        buffer, nbytes = Region("stage-down", slot, slot + 1), (r1 - r0) * (j1 - j0) * A.dtype.itemsize
        graph.add("download", step, "copy:d2h",
                  functools.partial(A.download_staged, slot=slot, r0=r0, r1=r1, c0=j0, c1=j1),
                  reads=[Region("A", r0, r1, j0, j1), chain], writes=[chain, buffer], bytes=nbytes)
        graph.add("unstage", step, "cpu",
                  functools.partial(A.unstage_block, slot=slot, r0=r0, r1=r1, c0=j0, c1=j1),
                  reads=[buffer, Region("unstage-chain", 0, 1)],
                  writes=[buffer, Region("unstage-chain", 0, 1)], bytes=nbytes)


def trailing_chunks(rest, n, nb, ops, plan, upload_group, uploading):
    """The trailing columns past the look-ahead as (c0, c1) ranges, one update task each: as
    many as the backend runs at once (`update_tasks`: one GEMM fills a GPU; the host backend
    wants one per worker), or groups of `upload_group` block columns while the matrix is still
    arriving from the host, so that the update follows the uploads instead of waiting for the
    last one."""
    if not rest:
        return []
    group = upload_group if uploading else -(-len(rest) // ops.update_tasks(plan.workers))
    return [(rest[i], min(rest[min(i + group, len(rest)) - 1] + nb, n))
            for i in range(0, len(rest), group)]
