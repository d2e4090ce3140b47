"""Device memory of the cuda backend: allocations for the tile stores (from a pool, when the run's
DeviceSettings.memory_pool says so), what they and the pool hold, and `DeviceArray`, a result
array hybridla hands to the user.

Module-level functions over the backend (the facade, `CudaBackend`, binds them), which keeps the
counters and the pool for the process.
"""
from __future__ import annotations

import numpy as np
import pycuda.driver as drv

from ..._logging import get_logger

_log = get_logger("cuda")


def alloc(backend, nbytes, memory_pool=True):
    """Device memory for a tile store, from the pool when `memory_pool` is on (the store's
    DeviceSettings.memory_pool): a cuMemAlloc while a run is under way can stall it, and
    cuMemFree synchronizes the device; with the pool both are paid on the first call only (as
    CuPy's pool does). An allocation that fails is tried once more after the pool's cached
    blocks are freed."""
    nbytes = max(int(nbytes), 1)
    with backend.active(), backend._alloc_lock:
        pooled = bool(memory_pool)
        if pooled and backend._pool is None:
            backend._pool = drv.DeviceMemoryPool()
        allocate = backend._pool.allocate if pooled else drv.mem_alloc
        try:
            allocation = allocate(nbytes)
        except drv.MemoryError:
            if backend._pool is None:
                raise
            _log.warning("device allocation of %d bytes failed: freeing the pool's %d "
                         "cached bytes and trying again", nbytes,
                         backend._pool.managed_bytes - backend._pool.active_bytes)
            backend._pool.free_held()
            allocation = allocate(nbytes)
        backend._allocated += nbytes
        backend._sizes[int(allocation)] = nbytes
    return allocation


def free(backend, allocation):
    with backend._alloc_lock:
        backend._allocated -= backend._sizes.pop(int(allocation))
        allocation.free()  # a pooled block goes back to the pool


def allocated_bytes(backend) -> int:
    """Device memory hybridla's tile stores hold right now (0 between calls: nothing
    leaks); the pool's cached blocks are `cached_bytes`."""
    return backend._allocated


def cached_bytes(backend) -> int:
    """Device memory the pool keeps for the next call (see `free_cached`)."""
    with backend._alloc_lock:
        return 0 if backend._pool is None else \
            backend._pool.managed_bytes - backend._pool.active_bytes


def free_cached(backend):
    """Give the pool's cached device memory back to the driver."""
    backend.trim_cached(0)


def trim_cached(backend, keep_bytes):
    """Give the pool's cached blocks back to the driver when they add up to more than
    `keep_bytes` (None: keep them all). The pool frees all of its held blocks or none."""
    if keep_bytes is None or backend.cached_bytes() <= int(keep_bytes):
        return
    with backend.active(), backend._alloc_lock:
        _log.debug("device memory pool: %d cached bytes back to the driver (keep %s)",
                   backend._pool.managed_bytes - backend._pool.active_bytes, keep_bytes)
        backend._pool.free_held()


def free_memory(backend) -> int:
    """Device memory a call can have: what the driver has free, and the pool's cache."""
    backend.context.push()
    try:
        return drv.mem_get_info()[0] + backend.cached_bytes()
    finally:
        drv.Context.pop()


def required_bytes(m, n, dtype, nb) -> int:
    """Device memory a factorization of an m x n matrix will take, at most."""
    itemsize = np.dtype(dtype).itemsize
    # the matrix, pivots or tau, the panel workspace and two lanes' scratch blocks
    return ((-(-m // 32) * 32) * n + 2 * min(m, n) + 3 * nb * max(m, n)) * itemsize


class DeviceArray:
    """A column-major device array that hybridla allocated for a result and hands to the user:
    it owns its memory (freed with the object) and offers __cuda_array_interface__, so that
    CuPy and PyTorch wrap it without a copy."""

    def __init__(self, backend, shape, dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)
        m, n = self.shape
        self.ld = max(m, 1)
        self._backend = backend
        with backend.active():
            self._allocation = drv.mem_alloc(max(self.ld * n * self.dtype.itemsize, 1))
        self.ptr = int(self._allocation)

    def __del__(self):
        # freed with the context current, in whatever thread the last reference goes (see
        # DeviceMatrix.close)
        allocation = getattr(self, "_allocation", None)
        if allocation is not None:
            try:
                with self._backend.active():
                    allocation.free()
            except Exception:  # noqa: BLE001 - interpreter shutdown: the driver frees it all
                pass

    @property
    def __cuda_array_interface__(self):
        itemsize = self.dtype.itemsize
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": (itemsize, self.ld * itemsize), "version": 3}
