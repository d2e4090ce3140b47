"""The host backend: every operation with NumPy/SciPy on the CPU, in the scheduler's worker threads.

It is a real mode, not a mock: machines without a GPU get the task-parallel look-ahead algorithms,
and CI tests the algorithms and the scheduler through it. Device ordering is trivial here: a task
runs to completion in its worker thread, so the Dask dependencies alone order the work.

The operations live family by family in module-level functions over (lane, blocks, ...), the
same files as the cuda backend's: runtime, memory, store, transfers, blas, lu, qr, chol, mixed.
`HostBackend` only binds them, under the names the algorithms call.
"""
from __future__ import annotations

from ..ops import BackendDefaults
from . import blas, chol, lu, memory, mixed, pivoted_qr, qr, runtime, store, transfers
from .runtime import HostLane
from .store import HostMatrix

__all__ = ["HostBackend", "HostLane", "HostMatrix"]


class HostBackend(BackendDefaults):
    """The host backend's operations (backend/ops.Backend), bound from its family files."""

    name = "host"
    device_name = "host"

    def __init__(self):
        self.lanes = {}

    # -- lanes and synchronization (runtime.py) ------------------------------------------------
    def lane(self, name: str) -> HostLane:
        return runtime.lane(self.lanes, name)

    host_wait = staticmethod(runtime.host_wait)
    begin_run = staticmethod(runtime.begin_run)
    end_run = staticmethod(runtime.end_run)
    update_tasks = staticmethod(runtime.update_tasks)
    synchronize = staticmethod(runtime.synchronize)
    event_times = staticmethod(runtime.event_times)
    replay = staticmethod(runtime.replay)

    # -- memory (memory.py) --------------------------------------------------------------------
    memory_check = staticmethod(memory.memory_check)
    allocated_bytes = staticmethod(memory.allocated_bytes)
    cached_bytes = staticmethod(memory.cached_bytes)
    free_cached = staticmethod(memory.free_cached)
    required_bytes = staticmethod(memory.required_bytes)

    # -- matrices (store.py) -------------------------------------------------------------------
    matrix = staticmethod(store.matrix)
    host_matrix = staticmethod(store.host_matrix)
    window = staticmethod(store.window)
    wrap = staticmethod(store.wrap)
    empty = staticmethod(store.empty)

    # -- host <-> store, complete on return (transfers.py) -------------------------------------
    to_host = staticmethod(transfers.to_host)
    from_host = staticmethod(transfers.from_host)

    # -- BLAS, LAPACK auxiliaries and block views (blas.py) ------------------------------------
    gemm = staticmethod(blas.gemm)
    trsm = staticmethod(blas.trsm)
    trsv = staticmethod(blas.trsv)
    trmm = staticmethod(blas.trmm)
    herk = staticmethod(blas.herk)
    invert_triangular_blocks = staticmethod(blas.invert_triangular_blocks)
    laset = staticmethod(blas.laset)
    lacpy = staticmethod(blas.lacpy)
    sub_block = staticmethod(blas.sub_block)
    strided_columns = staticmethod(blas.strided_columns)
    scale_copy = staticmethod(blas.scale_copy)
    apply_to_host = staticmethod(blas.apply_to_host)
    apply = staticmethod(blas.apply)

    # -- LU (lu.py) ----------------------------------------------------------------------------
    getrf_panel = staticmethod(lu.getrf_panel)
    getrf_leaf = staticmethod(lu.getrf_leaf)
    tslu_panel = staticmethod(lu.tslu_panel)
    panel_info = staticmethod(lu.panel_info)
    prepare_interchanges = staticmethod(lu.prepare_interchanges)
    laswp = staticmethod(lu.laswp)

    # -- Householder reflectors (qr.py) --------------------------------------------------------
    explicit_reflectors = staticmethod(qr.explicit_reflectors)
    triangular_factor = staticmethod(qr.triangular_factor)
    larfg = staticmethod(qr.larfg)
    lahr2_reflector = staticmethod(qr.lahr2_reflector)

    # -- QR with column pivoting's panel (pivoted_qr.py) --------------------------------------
    column_norms = staticmethod(pivoted_qr.column_norms)
    laqps_pivot = staticmethod(pivoted_qr.laqps_pivot)
    laqps_f_column = staticmethod(pivoted_qr.laqps_f_column)
    laqps_downdate = staticmethod(pivoted_qr.laqps_downdate)

    # -- Cholesky (chol.py) --------------------------------------------------------------------
    herk_diagonal_blocks = staticmethod(chol.herk_diagonal_blocks)
    gemm_spaced_blocks = staticmethod(chol.gemm_spaced_blocks)

    # -- mixed precision (mixed.py; lapack/_mixed.py, backend/reduced.py) ----------------------
    keep_on_device = staticmethod(mixed.keep_on_device)
    vector_to_low = staticmethod(mixed.vector_to_low)
    vector_from_low = staticmethod(mixed.vector_from_low)
    butterfly_rows = staticmethod(mixed.butterfly_rows)
    equilibration = staticmethod(mixed.equilibration)
    narrow = staticmethod(mixed.narrow)
    narrow_hermitian = staticmethod(mixed.narrow_hermitian)
    add_to_diagonal = staticmethod(mixed.add_to_diagonal)
    prepare_reduced = staticmethod(mixed.prepare_reduced)
    overflowed = staticmethod(mixed.overflowed)
    gemm_reduced = staticmethod(mixed.gemm_reduced)
    round_panel = staticmethod(mixed.round_panel)
    gemm_rounded_panel = staticmethod(mixed.gemm_rounded_panel)
