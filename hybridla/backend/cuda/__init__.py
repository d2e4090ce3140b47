"""The cuda backend: PyCUDA for context, memory, streams, events and our kernels; cuBLAS and
cuSOLVER through nvmath-python's low-level bindings, called with raw pointers on our streams.

Ordering on the device is by CUDA events: a task enqueues on its lane's stream after making the
stream wait for the events of the tasks it depends on, and records an event when its work is
enqueued. The host never drains the GPU except at the named points (a CPU panel waiting for its
download, the end of a factorization).

The operations live family by family in module-level functions, the same files as the host
backend's: runtime, memory, store, transfers, interop, blas, lu, qr, chol, mixed. `CudaBackend`
only binds them, under the names the algorithms call, and holds the process's device state
(context, kernels, lanes, memory pool, staging slots), which the families reach as
`lane.backend` or through the store (`A.backend`). Functions over the backend itself are bound
as methods (the backend is their first argument); those over a lane or blocks as
staticmethods. The backend reads no configuration: the run's settings arrive as arguments
(backend/ops.DeviceSettings).
"""
from __future__ import annotations

import threading

import pycuda.driver as drv

from ..ops import BackendDefaults
from . import (batched, blas, chol, interop, ldl, lu, memory, mixed, pivoted_qr, qr, runtime,
               store, transfers)
from .interop import device_array_layout
from .memory import DeviceArray
from .runtime import SM_SPLITS, CudaLane, KernelBuildError
from .store import DeviceBlock, DeviceMatrix
from .transfers import HOST_TRANSFERS

__all__ = ["CudaBackend", "CudaLane", "DeviceArray", "DeviceBlock", "DeviceMatrix",
           "HOST_TRANSFERS", "KernelBuildError", "SM_SPLITS", "device_array_layout"]


class CudaBackend(BackendDefaults):
    """The cuda backend's operations (backend/ops.DeviceBackend), bound from its family files,
    and the process's device state."""

    name = "cuda"
    has_device = True
    # families the user layer's device paths reach as modules: stacks of matrices (batched.py)
    # and the structured solves (ldl.py: sytrf, the triangular and diagonal forms)
    batched = batched
    ldl = ldl

    def __init__(self, ordinal: int = 0):
        # The device's primary context, shared with cuBLAS/cuSOLVER, CuPy and PyTorch, retained
        # and never left current: every thread pushes it around its GPU work and pops it in a
        # `finally` (`active`, the lanes). pycuda.autoprimaryctx would push it for good in the
        # importing thread, which aborts the process when that thread ends first.
        drv.init()
        self.ordinal = ordinal  # the device's (backend.get_backend makes one backend a device;
        #                         a user's array on another is refused by admit)
        self.device = drv.Device(self.ordinal)
        self.context = self.device.retain_primary_context()
        self._calls = threading.RLock()
        self._call_depth = 0
        self.device_name = self.device.name()
        self.multiprocessors = self.device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        # compiled once per process (PyCUDA caches the cubin on disk too), in the background:
        # a first call's host work (checks, staging copies, the upload) goes on meanwhile, and
        # a kernel's first launch waits for its own module (runtime.Kernels)
        self.kernels, self.fused_panel_shared, self.tslu_shared, self.leaf_cluster = \
            runtime.compile_kernels(self.device, self.context, self.ordinal)
        self._lanes = {}
        self._lanes_lock = threading.Lock()
        # device.sm_split "green": per number of panel SMs, the two green contexts and their
        # lanes; `_split` is the current run's (None: the lanes above)
        self._green = {}
        self._split = None
        self._allocated = 0
        self._sizes = {}  # pointer -> bytes of the allocations the tile stores hold
        self._alloc_lock = threading.Lock()
        # pycuda's DeviceMemoryPools by block size, "small" and "large", made on first use
        # (memory_pool; memory.py says why two)
        self._pools = {}
        self.staging_lock = threading.Lock()
        self._staging = None  # memory.PinnedBuffers, made by the first call that stages
        self._copy_pool, self._copy_pool_size = None, 0
        # the lanes of a first call, their cuBLAS and cuSOLVER handles made in the background
        # too (last: the thread reads the state above)
        runtime.make_lanes_in_background(self)

    # -- the context, lanes, runs and synchronization (runtime.py) -----------------------------
    active = runtime.active
    call = runtime.call
    lane = runtime.lane
    update_tasks = staticmethod(runtime.update_tasks)
    begin_run = runtime.begin_run
    end_run = runtime.end_run
    synchronize = runtime.synchronize
    host_wait = staticmethod(runtime.host_wait)
    replay = staticmethod(runtime.replay)

    # -- memory (memory.py) --------------------------------------------------------------------
    alloc = memory.alloc
    free = memory.free
    allocated_bytes = memory.allocated_bytes
    cached_bytes = memory.cached_bytes
    free_cached = memory.free_cached
    trim_cached = memory.trim_cached
    free_memory = memory.free_memory
    required_bytes = staticmethod(memory.required_bytes)

    # -- tile stores (store.py) and the user's device arrays (interop.py) ----------------------
    matrix = store.matrix
    host_matrix = store.host_matrix
    window = store.window
    device_matrix = interop.device_matrix
    wrap = interop.wrap
    empty = interop.empty
    has_nonfinite = interop.has_nonfinite
    stack_columns = interop.stack_columns
    copy_columns = interop.copy_columns
    arrivable = staticmethod(interop.arrivable)
    arrive_columns = interop.arrive_columns
    pointer_device = staticmethod(interop.pointer_device)
    consumer_stream = interop.consumer_stream
    stream_synchronize = interop.stream_synchronize

    # -- pinned staging slots, host copies, host <-> blocks (transfers.py) ---------------------
    staging_slots = memory.staging_slots  # made in the background (memory.PinnedBuffers)
    host_copy = transfers.host_copy
    to_host = transfers.to_host
    from_host = transfers.from_host

    # -- BLAS, LAPACK auxiliaries, copies and block views (blas.py) ----------------------------
    gemm = staticmethod(blas.gemm)
    trsm = staticmethod(blas.trsm)
    trsv = staticmethod(blas.trsv)
    trmm = staticmethod(blas.trmm)
    herk = staticmethod(blas.herk)
    invert_triangular_blocks = staticmethod(blas.invert_triangular_blocks)
    laset = staticmethod(blas.laset)
    lacpy = staticmethod(blas.lacpy)
    scale_copy = staticmethod(blas.scale_copy)
    geam_transpose = staticmethod(blas.geam_transpose)
    copy_device = blas.copy_device
    copy_device_on = staticmethod(blas.copy_device_on)
    sub_block = staticmethod(blas.sub_block)
    strided_columns = staticmethod(blas.strided_columns)

    # -- LU (lu.py) ----------------------------------------------------------------------------
    getrf_panel = staticmethod(lu.getrf_panel)
    getrf_leaf = staticmethod(lu.getrf_leaf)
    tslu_panel = staticmethod(lu.tslu_panel)
    fused_panel_shape = lu.fused_panel_shape
    panel_info = staticmethod(lu.panel_info)
    prepare_interchanges = staticmethod(lu.prepare_interchanges)
    laswp = staticmethod(lu.laswp)

    # -- Householder reflectors (qr.py) --------------------------------------------------------
    explicit_reflectors = staticmethod(qr.explicit_reflectors)
    triangular_factor = staticmethod(qr.triangular_factor)
    householder_panel = staticmethod(qr.householder_panel)
    larfg = staticmethod(qr.larfg)
    lahr2_reflector = staticmethod(qr.lahr2_reflector)
    apply = staticmethod(qr.apply)
    apply_to_host = qr.apply_to_host

    # -- QR with column pivoting's panel (pivoted_qr.py) --------------------------------------
    column_norms = staticmethod(pivoted_qr.column_norms)
    laqps_pivot = staticmethod(pivoted_qr.laqps_pivot)
    laqps_f_column = staticmethod(pivoted_qr.laqps_f_column)
    laqps_downdate = staticmethod(pivoted_qr.laqps_downdate)

    # -- Cholesky (chol.py) --------------------------------------------------------------------
    potrf_panel = staticmethod(chol.potrf_panel)
    herk_diagonal_blocks = staticmethod(chol.herk_diagonal_blocks)
    gemm_spaced_blocks = staticmethod(chol.gemm_spaced_blocks)
    zero_triangle = chol.zero_triangle

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
