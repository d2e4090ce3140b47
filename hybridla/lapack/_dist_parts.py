"""Where a worker's part of a distributed call comes from (lapack/_dist.on_worker, and the
solves'): a store over the rank's columns of the layout, made of what Dask holds on the worker.
A host part (NumPy blocks) is streamed to the device from where it lies, or stacked first; a
device part (CuPy blocks on the worker's GPU) is copied into one array there, the blocks held
away from their owner moved GPU to GPU by the transport."""
from __future__ import annotations

import numpy as np

from ..backend.device_arrays import column_major
from ..backend.host.transfers import ColumnBlocks
from ..scheduler.transport import connected


def device_part(ops, plan, job, local, rank, transport, phases=None):
    """A device part's store (job["device"]: Dask holds `local`, a list of block columns or
    one array, on this worker's GPU: a dask array of CuPy chunks): (a device store over the
    rank's columns of the layout, that array, of the chunks' kind). The factors go to it
    and stay on the GPU, as the GPU interface's do; no host memory is touched.
    job["holders"], where given, says which rank holds each block column (`local`: this
    rank's, in order); the blocks held by a rank other than their owner are broadcast from
    it, GPU to GPU, in block order on every rank (the transport's collective: NCCL). The
    user's chunks are copied, never written."""
    m, _ = job["shape"]
    dtype = np.dtype(job["dtype"])
    layout = job["layout"]
    if not ops.has_device:
        raise ValueError(f"{job['name']}'s chunks are device arrays: the workers need the "
                         f"cuda backend")
    blocks = local if isinstance(local, list) else [local]
    like = blocks[0] if blocks else job.get("device_meta")  # the kind of array to make
    if not job.get("writes_part", True) and len(blocks) == 1 and \
            np.dtype(blocks[0].dtype) == dtype and column_major(blocks[0]):
        # only read (orgqr_dist's factors, this call's own): worked on where it lies
        A, home, _ = ops.device_matrix(blocks[0], plan.nb, True, settings=plan.device_settings)
        return A, home
    holders = job.get("holders")
    if holders is None or all(h == layout.owner(j) for j, h in enumerate(holders)):
        home = _copied_in_place(ops, job, blocks, m, dtype, like, phases)
        A, home, _ = ops.device_matrix(home, plan.nb, True, settings=plan.device_settings)
        return A, home
    # The blocks this rank holds and owns go straight into its part; those it holds for
    # another rank are stacked into a buffer to send from (one copy of each block).
    mine = [j for j, h in enumerate(holders) if h == rank]
    owned = [(block, j) for block, j in zip(blocks, mine) if layout.owner(j) == rank]
    sent = [(block, j) for block, j in zip(blocks, mine) if layout.owner(j) != rank]
    home = ops.empty((m, layout.width(rank)), dtype, like=like, pooled=True)
    ops.copy_columns([block for block, _ in owned], home,
                     [layout.local_start(rank, j) for _, j in owned])
    outgoing = ops.stack_columns([block for block, _ in sent], m, dtype) if sent else None
    _mark(phases, "copy_s")
    A, home, _ = ops.device_matrix(home, plan.nb, True, settings=plan.device_settings)
    S = None if outgoing is None else \
        ops.device_matrix(outgoing, plan.nb, True, settings=plan.device_settings)[0]
    sent_at = dict(zip((j for _, j in sent), (int(c) for c in np.cumsum(
        [0] + [layout.block_width(j) for _, j in sent]))))
    scratch = None
    transport = connected(transport)  # connecting since the task began (scheduler/cluster)
    lane = ops.lane("comm:bcast")
    try:
        for j, holder in enumerate(holders):
            owner, width = layout.owner(j), int(layout.block_width(j))
            if holder == owner:
                continue  # copied above, on its owner
            start = int(layout.local_start(rank, j))
            target = A.block(0, m, start, start + width) if owner == rank else None
            source = S.block(0, m, sent_at[j], sent_at[j] + width) if holder == rank \
                else None
            if target is None and source is None:  # neither: a rank of three or more
                if scratch is None:
                    scratch = ops.matrix(m, plan.nb, dtype, plan.nb, plan.device_settings)
                target = scratch.block(0, m, 0, width)
            with lane:
                transport.broadcast(lane, [source] if source is not None else [],
                                    [target if target is not None else source], holder)
        ops.synchronize()
    finally:
        if S is not None:
            S.close()
        if scratch is not None:
            scratch.close()
    _mark(phases, "moves_s")
    _check_finite(ops, job, home, phases)  # the whole part, once it is all here
    return A, home


def _copied_in_place(ops, job, blocks, m, dtype, like, phases):
    """The rank's own block columns `blocks` side by side in a new array of their kind,
    checked as they are copied. The array comes from the chunks' own allocator (CuPy's
    pool, or RMM's): the part is the result Dask holds, so the next call on the worker takes
    its memory back from the pool once Dask forgot it. For a worker's 17.2 GB at n = 65536 on
    2 x H100 the driver took 0.016-0.020 s to map a new array, a copy 0.013 s and a check
    0.006 s more (perf/RESULTS.md, issue 32, stops 57-58)."""
    starts = np.cumsum([0] + [int(block.shape[1]) for block in blocks])
    home = ops.empty((m, int(starts[-1])), dtype, like=like, pooled=True)
    _mark(phases, "allocated_s")
    if ops.copy_columns(blocks, home, starts[:-1], check=job["check_finite"]):
        raise ValueError(f"{job['name']} must not contain infs or NaNs (check_finite=True)")
    _mark(phases, "copy_s")
    return home


def arriving_part(ops, plan, job, local):
    """A device part that arrives during the run (on_worker), where it can: (a store over a
    new array of the chunks' kind, that array, [(block, its first local column)]), the
    blocks copied in by the run's first tasks (_dist.record_arrivals) while its first steps
    go on, their finiteness summed as they arrive (where job["arrive"]: the client's
    distributed.arrive_parts); None where device_part makes it first: not asked for, blocks
    held away from their owner, blocks of another dtype or neither column- nor row-major, a
    part the driver only reads, or none. Made first, the copy and the check took 0.026-0.040
    s of a worker's 1.15 s Cholesky at n = 65536 on 2 x H100, with no step running; copied in
    during the run, the LU was no faster and the QR slower (perf/RESULTS.md, issue 32, stop
    57)."""
    m, _ = job["shape"]
    dtype = np.dtype(job["dtype"])
    layout = job["layout"]
    blocks = local if isinstance(local, list) else [local]
    holders = job.get("holders")
    if not (job.get("arrive") and job.get("device") and ops.has_device and
            job.get("writes_part", True) and blocks) \
            or (holders is not None and
                any(h != layout.owner(j) for j, h in enumerate(holders))) \
            or not all(ops.arrivable(block, m, dtype) for block in blocks):
        return None
    starts = np.cumsum([0] + [int(block.shape[1]) for block in blocks])
    if m == 0 or starts[-1] == 0:
        return None
    ops.synchronize()  # the blocks' producers (CuPy, on its streams of this context) are done
    home = ops.empty((m, int(starts[-1])), dtype, like=blocks[0], pooled=True)
    A, home, _ = ops.device_matrix(home, plan.nb, True, settings=plan.device_settings)
    return A, home, [(block, int(c0)) for block, c0 in zip(blocks, starts[:-1])
                     if block.shape[1]]


def _check_finite(ops, job, array, phases):
    if job["check_finite"] and ops.has_nonfinite(array):
        raise ValueError(f"{job['name']} must not contain infs or NaNs (check_finite=True)")
    _mark(phases, "finite_check_s")


def host_part(ops, plan, job, rank, local, finite, phases):
    """The store of a host-resident part (on_worker): (store, the factors' home array, the
    source it streams from, whether the blocks are checked on the device as they arrive)."""
    m, _ = job["shape"]
    dtype = np.dtype(job["dtype"])
    given, source, checking = local, None, False
    if isinstance(local, list):
        blocks = ColumnBlocks(local) if local else None
        settings = plan.device_settings
        if blocks is not None and ops.has_device and blocks.dtype == dtype and \
                settings.host_transfer == "staged" and blocks.nbytes >= settings.pin_min_bytes:
            source = blocks
        else:
            local = blocks.stacked(dtype) if blocks is not None else \
                np.empty((m, 0), dtype, order="F")
    if source is not None:
        checking = job["check_finite"]  # on the device, as the blocks arrive (on_worker)
        home = np.empty(source.shape, dtype, order="F")
    else:
        local = np.asfortranarray(local, dtype=dtype)
        if job["check_finite"] and not finite(local):
            raise ValueError(f"{job['name']} must not contain infs or NaNs (check_finite=True)")
        # The factors' home is the rank's part itself where it is this call's own
        # (job["private"]: scheduler/cluster.place; or a copy made here), so that a large
        # matrix is held once per worker, not twice; a part that is not gets a copy here,
        # unless the driver only reads it (job["writes_part"] False: orgqr_dist's factors).
        own = local is not given or job.get("private", [False] * (rank + 1))[rank]
        writes = job.get("writes_part", True)
        home = local if not writes or (own and local.flags.writeable) else \
            np.array(local, order="F")
        source = home
    phases.mark("check_s")
    A = ops.host_matrix(source, home, plan.nb, settings=plan.device_settings) \
        if ops.has_device else ops.host_matrix(home, home, plan.nb)
    return A, home, source, checking


def _mark(phases, name):
    if phases is not None:
        phases.mark(name)
