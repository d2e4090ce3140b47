"""Device memory of the cuda backend: allocations for the tile stores (from a pool, when the run's
DeviceSettings.memory_pool says so), what they and the pool hold, and `DeviceArray`, a result
array hybridla hands to the user; the pinned host buffers kept for staging (`staging_slots`).

Module-level functions over the backend (the facade, `CudaBackend`, binds them), which keeps the
counters and the pool for the process.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Sequence

import numpy as np
import pycuda.driver as drv

from ..._logging import get_logger
from .. import _driver

_log = get_logger("cuda")


# Allocations of at most this many bytes come from a pool of their own, which a call's end
# trims last. PyCUDA's pool gives back all of its cached blocks or none, and a large call's
# (its matrix, its panels' buffers) passed device.pool_max_bytes every time: the small blocks
# went with them, and every store window of the next call (its pivots, infos, moves: 2,429
# blocks of a distributed LU worker at n = 120000) was a cuMemAlloc again. Recording that
# worker's graph took 0.486-0.495 s after every block was freed, 0.351-0.410 s after a trim
# that keeps the small ones (perf/probes/probe_dist_recording.py --between, one H100,
# perf/RESULTS.md, issue 32, stop 54).
SMALL_BLOCK_BYTES = 16 << 20


def _pool(backend, nbytes):
    """The pool an allocation of `nbytes` comes from (made on first use): "small" or "large"."""
    kind = "small" if nbytes <= SMALL_BLOCK_BYTES else "large"
    if kind not in backend._pools:
        backend._pools[kind] = drv.DeviceMemoryPool()
    return backend._pools[kind]


def _cached(pool) -> int:
    return pool.managed_bytes - pool.active_bytes


def alloc(backend, nbytes, memory_pool=True):
    """Device memory for a tile store, from a pool when `memory_pool` is on (the store's
    DeviceSettings.memory_pool): a cuMemAlloc while a run is under way can stall it, and
    cuMemFree synchronizes the device; with the pool both are paid on the first call only (as
    CuPy's pool does). An allocation that fails is tried once more after the pools' cached
    blocks are freed: ours, and CuPy's where this process uses CuPy (a Dask worker's freed CuPy
    chunks stay in CuPy's pool: on a GPU worker at n = 65536 a QR's workspace was refused,
    most likely beside the cached chunks of earlier inputs of other sizes, perf/RESULTS.md,
    issue 32, stop 56; CuPy frees its own cache the same way when its allocation fails)."""
    nbytes = max(int(nbytes), 1)
    with backend.active(), backend._alloc_lock:
        allocate = _pool(backend, nbytes).allocate if memory_pool else drv.mem_alloc
        try:
            allocation = allocate(nbytes)
        except drv.MemoryError:
            cupy_pool = _cupy_pool()
            if not backend._pools and cupy_pool is None:
                raise
            _log.warning("device allocation of %d bytes failed: freeing the pools' %d "
                         "cached bytes (CuPy's: %d) and trying again", nbytes,
                         sum(_cached(pool) for pool in backend._pools.values()),
                         0 if cupy_pool is None else cupy_pool.free_bytes())
            for pool in backend._pools.values():
                pool.free_held()
            if cupy_pool is not None:
                cupy_pool.free_all_blocks()
            allocation = allocate(nbytes)
        backend._allocated += nbytes
        backend._sizes[int(allocation)] = nbytes
    return allocation


def _cupy_pool():
    """CuPy's default device memory pool, where CuPy is imported (never imported here: a
    process that does not use CuPy has nothing cached in it)."""
    cupy = sys.modules.get("cupy")
    try:
        return None if cupy is None else cupy.get_default_memory_pool()
    except Exception:  # a CuPy without a usable device: nothing it could hold
        return None


def free(backend, allocation):
    """Give an allocation back (to its pool, if pooled), from any thread: its context is made
    current here (a pooled block given back without it raised LogicError, and the process
    aborted on exit when the block was collected: tests/test_trust.py, on an H100)."""
    with backend.active(), backend._alloc_lock:
        backend._allocated -= backend._sizes.pop(int(allocation))
        allocation.free()  # a pooled block goes back to the pool


def allocated_bytes(backend) -> int:
    """Device memory hybridla's tile stores hold right now (0 between calls: nothing
    leaks); the pool's cached blocks are `cached_bytes`."""
    return backend._allocated


def cached_bytes(backend) -> int:
    """Device memory the pools keep for the next call (see `free_cached`)."""
    with backend._alloc_lock:
        return sum(_cached(pool) for pool in backend._pools.values())


def free_cached(backend):
    """Give the pool's cached device memory back to the driver."""
    backend.trim_cached(0)


def trim_cached(backend, keep_bytes):
    """Give cached blocks back to the driver while the pools' cache adds up to more than
    `keep_bytes` (None: keep them all): the large blocks' pool first, then the small ones'
    (each pool frees all of its held blocks or none)."""
    if keep_bytes is None or backend.cached_bytes() <= int(keep_bytes):
        return
    with backend.active(), backend._alloc_lock:
        for kind in ("large", "small"):
            pool = backend._pools.get(kind)
            if pool is None or sum(_cached(p) for p in backend._pools.values()) <= keep_bytes:
                continue
            _log.debug("device memory pool (%s blocks): %d cached bytes back to the driver "
                       "(keep %s)", kind, _cached(pool), keep_bytes)
            pool.free_held()


def free_memory(backend) -> int:
    """Device memory a call can have: what the driver has free, and the pools' caches (ours,
    and CuPy's: `alloc` frees both when the driver has too little)."""
    cupy_pool = _cupy_pool()
    backend.context.push()
    try:
        return drv.mem_get_info()[0] + backend.cached_bytes() + \
            (0 if cupy_pool is None else cupy_pool.free_bytes())
    finally:
        drv.Context.pop()


class PinnedBuffers:
    """`count` pinned host buffers (NumPy uint8 arrays) of `nbytes` each, allocated one after
    the other, in order, by a host thread of their own from construction on (cuMemHostAlloc
    costs about as much as pinning: 0.1 to 0.2 s per GiB), so that the first can be filled
    while the others are made. `buffer(i)` waits for buffer i only; an allocation that
    failed is raised there, in the caller's thread, for it and every buffer after it."""

    def __init__(self, context, count: int, nbytes: int):
        self.count, self.nbytes = count, nbytes
        self._buffers: list = []
        self._failure: BaseException | None = None
        self._made = threading.Condition()
        self._thread = threading.Thread(target=self._allocate, args=(context,),
                                        name="hybridla-pinned")
        self._thread.start()

    def _allocate(self, context):
        context.push()
        try:
            for _ in range(self.count):
                buffer = drv.pagelocked_empty(self.nbytes, np.uint8)
                with self._made:
                    self._buffers.append(buffer)
                    self._made.notify_all()
        except BaseException as exc:  # noqa: BLE001 - raised by `buffer`, in the caller's thread
            with self._made:
                self._failure = exc
                self._made.notify_all()
        finally:
            drv.Context.pop()

    def buffer(self, index: int) -> np.ndarray:
        with self._made:
            self._made.wait_for(lambda: len(self._buffers) > index or self._failure is not None)
            if len(self._buffers) > index:
                return self._buffers[index]
            raise self._failure  # type: ignore[misc]

    @property
    def failed(self) -> bool:
        return self._failure is not None

    def join(self):
        """Wait until the thread has made every buffer (or failed)."""
        self._thread.join()

    def free(self, context):
        """Give every buffer back to the driver now, in `context` (dropped from a thread where
        no context is current, such as a Dask worker's task, PyCUDA cannot free pinned memory:
        it warns and the memory stays pinned for the life of the process)."""
        self.join()
        context.push()
        try:
            for buffer in self._buffers:
                buffer.base.free()
        finally:
            drv.Context.pop()
        self._buffers.clear()


class Slots(Sequence):
    """Some of a `PinnedBuffers`' buffers as a sequence (slicing gives another): indexing
    waits for that buffer only."""

    def __init__(self, buffers: PinnedBuffers, indices: range):
        self._pinned, self._indices = buffers, indices

    def __len__(self):
        return len(self._indices)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return Slots(self._pinned, self._indices[index])
        return self._pinned.buffer(self._indices[index])


def staging_slots(backend, count: int, nbytes: int) -> Slots:
    """`count` pinned host buffers of `nbytes` or more, allocated once and kept for the process
    (like a pinned memory pool: cuMemHostAlloc costs about as much as pinning, so it is paid
    once, not on every call), in the background (`PinnedBuffers`: a slot's first use waits for
    it alone, so a first call's upload starts after one slot is made, not all). The caller
    holds `staging_lock`."""
    pinned = backend._staging
    if pinned is None or pinned.failed or pinned.count < count or pinned.nbytes < nbytes:
        # grown to the largest count and size asked so far: a mixed solve stages its float32
        # copy and then its float64 matrix, which must not reallocate on every call
        made, size = count, nbytes
        if pinned is not None and not pinned.failed:
            made, size = max(count, pinned.count), max(nbytes, pinned.nbytes)
        if pinned is not None:  # the old buffers go before the larger ones are made
            pinned.free(backend.context)
            backend._staging = pinned = None
        backend._staging = PinnedBuffers(backend.context, made, size)
    return Slots(backend._staging, range(count))


def required_bytes(m, n, dtype, nb) -> int:
    """Device memory a factorization of an m x n matrix will take, at most."""
    itemsize = np.dtype(dtype).itemsize
    # the matrix, pivots or tau, the panel workspace and two lanes' scratch blocks
    return ((-(-m // 32) * 32) * n + 2 * min(m, n) + 3 * nb * max(m, n)) * itemsize


class _Allocation(int):
    """Device memory of a DeviceArray, its pointer as an int (what PyCUDA's GPUArray takes for
    gpudata), allocated and freed in the current context without holding the GIL
    (_driver.mem_alloc: a worker's other threads run meanwhile)."""

    def __new__(cls, nbytes):
        return super().__new__(cls, _driver.mem_alloc(nbytes))

    def free(self):
        _driver.mem_free(int(self))


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
            self._allocation = _Allocation(max(self.ld * n * self.dtype.itemsize, 1))
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
