"""Where a mixed solve's working-precision matrix lives (solve_mixed and lstsq_mixed with a
host `a`), decided before any work: where the backend computes, beside its low-precision copy
(uploaded once, or while the copy is factored: lapack/_mixed.ArrivingMatrix), or kept in the
user's host array with the columns that fit beside the copy on the device
(lapack/_mixed.HostResidentMatrix); and, for a matrix kept on the host, its check for infs and
NaNs, which runs while the device factors the copy."""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from . import config as _config
from ._common import _all_finite
from ._logging import get_logger
from ._memory import _check_memory, _memory_budget
from .lapack._mixed import LOW_DTYPE, ArrivingMatrix

_log = get_logger("mixed")


def _a_stays_on_host(ops, m, n, dtype, plan, workspace):
    """Whether a host matrix's working-precision copy stays on the host (lapack/_mixed.
    HostResidentMatrix: the refinement's products run there) rather than going where the
    backend computes beside its low-precision copy; decided before any work by the memory
    budget and plan.ooc as the out-of-core factorizations decide: "auto" when both do not fit
    but the copy (with the factorization's workspaces) does, "always" whatever the size,
    "never" not (MemoryError when both do not fit). MemoryError whatever the mode when even
    the low-precision copy does not fit: the low-precision factorization is in core. The copy
    counts with its factorization's workspaces and the bytes `workspace` the rest of the
    solve keeps beside it (lapack/_mixed.solve_workspace_bytes)."""
    low, nbytes = LOW_DTYPE[np.dtype(dtype)], m * n * np.dtype(dtype).itemsize
    if plan.ooc != "never":
        _check_memory(ops, m, n, low, plan.nb, extra_bytes=workspace, why=(
            "the mixed solvers factor their low-precision copy in core (ooc keeps only the "
            "working-precision matrix on the host): lu_factor and cho_factor factor such a "
            "matrix out of core"))
    on_host = _check_memory(ops, m, n, low, plan.nb, extra_bytes=nbytes + workspace,
                            ooc=plan.ooc, why=(
        f"with the {np.dtype(dtype)} matrix ({nbytes} bytes) beside it: ooc='never' keeps "
        f"it where the low-precision copy is ('auto' keeps it on the host, where the "
        f"refinement's products with it then run)")) is not None
    if on_host:
        budget = _memory_budget(ops)
        _log.info("the %d x %d %s matrix stays on the host (ooc=%r, %s): its %s copy is "
                  "factored where the backend computes, the refinement's products with it "
                  "run on the host", m, n, np.dtype(dtype), plan.ooc,
                  "no memory budget" if budget is None else f"memory budget {budget} bytes",
                  low)
    return on_host


# Threads of the check for infs and NaNs in a host-resident `a` (lapack/_mixed.
# HostResidentMatrix): it runs while the device factors the low-precision copy and the host's
# cores are idle, and reads all of `a` (80 GB at n = 100,000: 0.9 s at the host's 90 GB/s,
# perf/RESULTS.md, issue 31), so with more threads than a check beside a streaming run.
_CHECK_THREADS = max(1, (os.cpu_count() or 2) // 2)


def _finite_after(name, A) -> bool:
    """Whether the host-resident `a` of A (a HostResidentMatrix) is finite: the check that ran
    beside the solve (A.beside, a Future), or, where the solve ended before it started, one
    now."""
    if A.beside is None:
        return _all_finite(A.a)
    return A.beside.result()


def _columns_kept(ops, m, n, dtype, plan, workspace):
    """How many of a host-resident A's last columns (working precision) fit where the backend
    computes beside its low-precision copy and the bytes `workspace` the solve keeps there
    (lapack/_mixed.solve_workspace_bytes: the LU's, the preconditioner's, GMRES's), with a
    hundredth of the budget to spare: kept there (HostResidentMatrix), each refinement
    product reads them there instead of on the host. 0 without a budget (the host backend
    with none set), or with ooc "always" (A on the host, as asked)."""
    budget = _memory_budget(ops)
    if budget is None or plan.ooc == "always" or not m:
        return 0
    itemsize = np.dtype(dtype).itemsize
    spare = budget - budget // 100 - ops.required_bytes(m, n, LOW_DTYPE[np.dtype(dtype)],
                                                          plan.nb) - workspace
    return int(min(n, max(0, spare // (m * itemsize))))


def _host_working_matrix(ops, array, plan):
    """A host matrix as a tile store where the work happens, and its ArrivingMatrix or None:
    itself on the host backend; on a device one uploaded in block columns, once, and kept there
    (refinement reads it every iteration). The transfer mode is config mixed.host_transfer
    (staged by default: for this one-shot upload it beat pinning the user's array in place,
    perf/RESULTS.md), or device.host_transfer where that is null. Staged and large enough to
    stage (device.pin_min_bytes), the matrix goes up during the low-precision factorization,
    after its rounded copy (lapack/_mixed.ArrivingMatrix); otherwise before the solve."""
    if not ops.has_device:
        return ops.wrap(array), None
    transfer = _config.get("mixed.host_transfer") or _config.get("device.host_transfer")
    if transfer == "staged" and array.nbytes >= int(_config.get("device.pin_min_bytes")):
        A = ops.matrix(*array.shape, array.dtype, plan.nb, host_source=array,
                       settings=plan.device_settings)
        return A, ArrivingMatrix(ops, A, plan)
    from .lapack._blocked import upload_all
    A = ops.host_matrix(array, None, plan.nb, settings=dataclasses.replace(
        plan.device_settings, host_transfer=transfer))
    try:
        upload_all(A, plan)
    except BaseException:
        A.close()
        raise
    return A, None
