"""The device-memory budget of a call, and the decision it makes before any work: in core, out
of core, or a MemoryError that says what would have fitted."""
from __future__ import annotations

import sys

import numpy as np

from . import config as _config
from ._logging import get_logger

_log = get_logger()


def _memory_budget(backend):
    """The bytes a call's tile stores may take where the backend computes: configuration
    device.memory_budget where set, else 90% of a device's free memory. The host backend
    computes in host memory and has no limit (None) unless one is configured: then its tile
    store keeps to it as a device's does, which is how CI runs the out-of-core drivers."""
    budget = _config.get("device.memory_budget")
    if budget is not None:
        return int(budget)
    return int(0.9 * backend.free_memory()) if backend.has_device else None


def _check_memory(backend, m, n, dtype, nb, extra_bytes=0, ooc=None, why=None,
                  in_place=False):
    """In core or out of core, decided before any work starts. `extra_bytes`: what else the
    call keeps where the backend computes, such as the working-precision copy of a mixed
    solve; `ooc`: the call's out-of-core mode (plan.ooc: "auto", "always", "never"), None for
    a call that has no out-of-core driver; `in_place`: the matrix is already in device memory
    and factored there (a device array with overwrite_a): it takes no more. Returns None to
    factor in core, or the budget in bytes the out-of-core driver keeps to (sys.maxsize: no
    limit). A matrix over the budget that may not go out of core raises MemoryError, its
    message ending with `why` (what the caller's options would have done instead) where
    given."""
    need = backend.required_bytes(m, n, dtype, nb) + extra_bytes - \
        (m * n * np.dtype(dtype).itemsize if in_place else 0)
    budget = _memory_budget(backend)
    _log.debug("memory: %d bytes needed, budget %s, out of core %s", need, budget, ooc)
    over = budget is not None and need > budget
    if ooc == "always" or (ooc == "auto" and over):
        return sys.maxsize if budget is None else budget
    if over:
        if why is None:
            why = ("out-of-core factorization is off (ooc='never'; 'auto' factors such a "
                   "matrix out of core)" if ooc == "never" else
                   "this routine has no out-of-core version (lu_factor, cho_factor, cholesky, "
                   "qr, ql, lq, geqrf, geqlf and gelqf have one: their ooc option)")
        raise MemoryError(
            f"the {m} x {n} {np.dtype(dtype)} matrix needs {need} bytes of "
            f"{'device ' if backend.has_device else ''}memory "
            f"({m * n * np.dtype(dtype).itemsize} for the matrix itself), over the budget of "
            f"{budget} bytes (config device.memory_budget); {why}")
    return None


# what a device array over the memory budget could do instead
_DEVICE_WHY = ("the matrix is in device memory, where it is factored (out-of-core "
               "factorization takes host arrays)")
_DEVICE_COPY_WHY = (_DEVICE_WHY + "; here it is factored in a copy: overwrite_a=True on a "
                    "writable column-major (Fortran-ordered) array factors it in place")
