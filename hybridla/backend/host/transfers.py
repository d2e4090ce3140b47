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
