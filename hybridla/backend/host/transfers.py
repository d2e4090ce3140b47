"""Host <-> store copies of the host-driven loops on store blocks (gehrd's panel, the condition
estimate, the mixed solvers). A CPU task that calls these leaves no device event behind
(scheduler/engine.py), so each one is complete when it returns: the device tasks after the CPU task
start on the data being there. Here the store is host memory: plain copies."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# below this a copy is not worth a thread pool
PARALLEL_COPY_BYTES = 64 << 20


def to_host(lane, B, out=None) -> np.ndarray:
    """A new F-ordered host array holding the block B, complete on return (on a device
    backend: a copy down and a wait), or `out` (an F-ordered array of B's shape and dtype)
    filled and returned. `lane` is the calling CPU task's lane."""
    if out is None:
        return np.array(B, order="F", copy=True)
    out[...] = B
    return out


def from_host(lane, x, B):
    """The block B := the host array x (B's shape, B's dtype), complete on return (on a
    device backend: a copy up and a wait); x may be reused or freed afterwards."""
    B[...] = x


def copy_by_columns(dst, src):
    """dst[...] = src (casting as needed), a large one cut into blocks of columns copied by a
    thread per core (NumPy releases the GIL while it copies): a C-ordered source makes this a
    transposing copy, which one thread did at 6.3 s for n = 16384 on the H100 machine, 25x the
    factorization (perf/probes/cpu_interface_time.py); a worker's 17 GB of block columns took
    5 s in one thread (hybridla.distributed at n = 65536)."""
    threads = os.cpu_count() or 1
    if src.nbytes < PARALLEL_COPY_BYTES or threads == 1 or dst.shape[1] < 2 * threads:
        np.copyto(dst, src, casting="unsafe")
        return
    step = -(-dst.shape[1] // threads)
    with ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(np.copyto, dst[:, j:j + step], src[:, j:j + step],
                                 casting="unsafe") for j in range(0, dst.shape[1], step)]:
            done.result()


class ColumnBlocks:
    """An m x n host matrix held as F-ordered blocks of whole columns side by side, not copied
    into one array: a distributed worker's part as Dask holds it (scheduler/cluster.place),
    streamed to the device from where it lies. Stacking a worker's 17 GB of block columns into
    a new array cost each worker 2.7-2.8 s before its run at n = 65536 on 2 x H100
    (perf/RESULTS.md, "Issue 34 on the H100, and the 2-GPU LU on 2 x H100").

    `a[r0:r1, c0:c1]` is a view where the columns lie in one block (a staged upload's block
    column does: the blocks are the layout's), else a new F-ordered array. Read only: the
    blocks are Dask's. All blocks have one dtype, as a dask array's chunks do."""

    ndim = 2

    def __init__(self, blocks):
        blocks = [np.asarray(b) for b in blocks]
        if not blocks:
            raise ValueError("ColumnBlocks needs at least one block")
        m, dtype = blocks[0].shape[0], blocks[0].dtype
        for b in blocks:
            if b.ndim != 2 or b.shape[0] != m or b.dtype != dtype:
                raise ValueError(f"ColumnBlocks needs 2-D blocks of {m} rows and dtype {dtype}; "
                                 f"got shape {b.shape}, dtype {b.dtype}")
        self.blocks, self.dtype = blocks, dtype
        self.starts = np.cumsum([0] + [b.shape[1] for b in blocks])
        self.shape = (m, int(self.starts[-1]))
        self.nbytes = sum(b.nbytes for b in blocks)

    def __getitem__(self, key):
        rows, cols = key
        c0, c1, step = cols.indices(self.shape[1])
        if step != 1:
            raise IndexError("ColumnBlocks takes column slices with step 1")
        first = int(np.searchsorted(self.starts, c0, side="right")) - 1
        start = int(self.starts[first])
        if c1 <= self.starts[first + 1]:  # within one block: a view
            return self.blocks[first][rows, c0 - start:c1 - start]
        out = np.empty((len(range(*rows.indices(self.shape[0]))), c1 - c0), self.dtype, order="F")
        for index in range(first, len(self.blocks)):
            b0, b1 = int(self.starts[index]), int(self.starts[index + 1])
            if b0 >= c1:
                break
            lo, hi = max(c0, b0), min(c1, b1)
            out[:, lo - c0:hi - c0] = self.blocks[index][rows, lo - b0:hi - b0]
        return out

    def stacked(self, dtype=None) -> np.ndarray:
        """The blocks side by side in one new F-ordered array (of `dtype`: default theirs)."""
        out = np.empty(self.shape, self.dtype if dtype is None else dtype, order="F")
        for block, c0 in zip(self.blocks, self.starts):
            copy_by_columns(out[:, c0:c0 + block.shape[1]], block)
        return out
