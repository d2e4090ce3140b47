"""Memory on the host: no device memory to allocate or cache. The working matrix is the user's
array, or a NumPy array of the store's own (`store.matrix`: a mixed solve's low-precision copy,
out-of-core's working area), whose bytes are counted while the store lives, so that a run can
be checked to leave nothing behind, as on a device."""
from __future__ import annotations

import threading

import numpy as np

_lock = threading.Lock()
_held = [0]  # bytes of the live working stores of their own (store.matrix)


def memory_check(nbytes: int, what: str):
    pass


def hold(nbytes: int) -> None:
    """A working store of its own took `nbytes` (released by `release` when it closes)."""
    with _lock:
        _held[0] += int(nbytes)


def release(nbytes: int) -> None:
    with _lock:
        _held[0] -= int(nbytes)


def allocated_bytes() -> int:
    """Bytes of the working stores of their own that are still open (0 between calls)."""
    return _held[0]


def cached_bytes() -> int:
    return 0


def free_cached():
    pass


def required_bytes(m, n, dtype, nb) -> int:
    """Memory a factorization of an m x n matrix takes where the host backend computes, at
    most (the matrix, pivots or tau, and the workspaces of nb x max(m, n) its panels and
    updates may ask for), as the cuda backend counts it: what device.memory_budget, when one
    is configured, is held against (the host backend has no limit otherwise)."""
    itemsize = np.dtype(dtype).itemsize
    return (m * n + 2 * min(m, n) + 3 * nb * max(m, n)) * itemsize
