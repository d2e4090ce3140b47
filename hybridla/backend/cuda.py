"""The cuda backend: PyCUDA for context, memory, streams, events and our kernels; cuBLAS and
cuSOLVER through nvmath-python's low-level bindings, called with raw pointers on our streams.

Ordering on the device is by CUDA events: a task enqueues on its lane's stream after making the
stream wait for the events of the tasks it depends on, and records an event when its work is
enqueued. The host never drains the GPU except at the named points (a CPU panel waiting for its
download, the end of a factorization).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas, cusolverDn
from pycuda.compiler import compile as compile_cuda

from .._logging import get_logger
from ..config import get as _config_get
from ..panel import lu as panel_lu
from . import _driver
from .host import HostLane
from .pinning import plan_pieces, split_at_cuts
from .reduced import Equilibration

_log = get_logger("cuda")
_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
# herk for complex, syrk for real (where ^H is ^T); alpha and beta are real in both
_HERK = {np.dtype(np.float32): ("ssyrk", np.float32), np.dtype(np.float64): ("dsyrk", np.float64),
         np.dtype(np.complex64): ("cherk", np.float32),
         np.dtype(np.complex128): ("zherk", np.float64)}
_GEMM = {dtype: getattr(cublas, prefix + "gemm") for dtype, prefix in _PREFIX.items()}
_GEMM_STRIDED = {dtype: getattr(cublas, prefix + "gemm_strided_batched")
                 for dtype, prefix in _PREFIX.items()}
_GEMV = {dtype: getattr(cublas, prefix + "gemv") for dtype, prefix in _PREFIX.items()}
_SIDE = {"L": 0, "R": 1}
_UPLO = {"L": 0, "U": 1}
_OP = {"N": 0, "T": 1, "C": 2}
_DIAG = {"N": 0, "U": 1}
_LASWP_THREADS = 128
# laswp.cu's moves: MOVES_THREADS x MOVES_PER_THREAD moves per column at most (2 per pivot)
_MOVES_THREADS, _MOVES_MAX_WIDTH, _MOVES_MAX_BLOCKS = 256, 2048, 4096
_LASET_PART = {"A": 0, "U": 1, "L": 2}  # lapack_aux.cu's uplo codes
_AUX_BLOCK = (32, 8)
# herk_diagonal_blocks halves a diagonal block down to this order: its gemms of 256 x 256 from
# a panel of 1024 still fill the device as one batch of the trailing matrix's blocks
_DIAGONAL_LEAF = 256
# cudaDataType and cublasComputeType_t values (library_types.h, cublas_api.h) for cublasGemmEx
_CUDA_R_32F, _CUDA_R_16F, _CUDA_C_32F, _CUDA_R_16BF = 0, 2, 4, 14
_COMPUTE_32F, _COMPUTE_32F_FAST_TF32 = 68, 77
_GEMM_DEFAULT = -1
_OPERAND_TYPE = {"half": (_CUDA_R_16F, "round_half"), "bfloat16": (_CUDA_R_16BF, "round_bf16"),
                 "half-x3": (_CUDA_R_16F, "split_half")}


class _Split(NamedTuple):
    """An error-corrected GEMM's operands a = hi + scale lo (backend/reduced.py): convert.cu's
    kernel that splits them, their element size and type, the GEMMs' compute type."""
    kernel: str
    itemsize: int
    operand_type: int
    compute_type: int
    scale: float


_SPLITS = {"half-x3": _Split("split_half", 2, _CUDA_R_16F, _COMPUTE_32F, 2.0 ** -11),
           "tf32-x3": _Split("split_tf32", 4, _CUDA_R_32F, _COMPUTE_32F_FAST_TF32, 1.0)}
_FUSED_PANEL_THREADS = 256     # getrf_panel.cu: one thread per row of a block's share, mostly
_FUSED_PANEL_MIN_ROWS = 256    # a short panel takes fewer blocks: fewer to hear from per column
_FUSED_PANEL_MAX_WIDTH = 256   # the widest panel it takes
_FUSED_PANEL_COOPERATIVE = True  # cuLaunchCooperativeKernel: the blocks' residency guaranteed
_TSLU_FINISH_THREADS = 256  # tslu.cu's finish: a row of L21, or a column of the moves, each
# getrf_leaf_cluster.cu's shape: one cluster of 16 blocks of 512 threads, 4 rows per thread
_LEAF_CLUSTER = {"blocks": 16, "threads": 512, "max_rows": 16 * 512 * 4, "max_width": 16,
                 "dtypes": (np.dtype(np.float32),)}
# invert_triangular_blocks halves blocks down to this order (invert_leaves' threads per block)
_INVERSE_LEAF = 64
_STATS_THREADS, _STATS_STRIP = 256, 64
# convert.cu's row_stats/col_stats/narrow_hermitian and hemv.cu's launch shape (STATS_THREADS,
# STRIP) and part codes
_TRIANGLE_CODE = {"U": 1, "L": 2}  # a kernel's `part` argument: the stored triangle


def _kernel_source(name: str) -> str:
    """CUDA C from cuda/ (a source checkout) or from the installed hybridla.kernels package."""
    checkout = Path(__file__).resolve().parents[2] / "cuda" / name
    if checkout.exists():
        return checkout.read_text()
    return resources.files("hybridla.kernels").joinpath(name).read_text()


class CudaLane:
    """A CUDA stream and, for compute lanes, its own cuBLAS and cuSOLVER handles (handles are not
    thread-safe, so a lock serializes the worker threads that enqueue on the same lane).

    Compute lanes ("gpu:*") get priority streams, made through the driver (PyCUDA's streams have
    no priority): "gpu:panel", the critical path, the most urgent, so that its kernels' blocks are
    scheduled ahead of the trailing update's; in a green context (`green`) where the SMs are
    split (device.sm_split). Copy lanes ("copy:*") are PyCUDA streams, which its 2-D copies
    need; `handle` is the raw stream either way."""

    def __init__(self, name: str, backend: CudaBackend, green: _driver.GreenContext | None = None):
        self.name, self.backend = name, backend
        if name.startswith("gpu:"):
            least, greatest = _driver.stream_priority_range()
            priority = greatest if name == "gpu:panel" else least
            self.stream = None
            self.handle = green.stream_create(priority) if green is not None \
                else _driver.stream_create(priority)
            # the largest thread-block cluster of SM-filling blocks its kernels can count on
            self.cluster_blocks = green.coscheduled if green is not None else \
                _LEAF_CLUSTER["blocks"] if backend.leaf_cluster else 1
            self.blas = cublas.create()
            cublas.set_stream(self.blas, self.handle)
            self.solver = cusolverDn.create()
            cusolverDn.set_stream(self.solver, self.handle)
        else:
            self.stream = drv.Stream(flags=1)  # non-blocking: no sync with the legacy stream
            self.handle = self.stream.handle
        self._lock = threading.Lock()

    def __enter__(self):
        self._lock.acquire()
        self.backend.context.push()  # PyCUDA's context stack is per thread
        return self

    def __exit__(self, *exc):
        drv.Context.pop()
        self._lock.release()
        return False

    def wait_for(self, events):
        for event in events:
            if event is not None:
                event.make_wait(self.handle)

    def record(self):
        return _driver.Event().record(self.handle)


class DeviceBlock:
    """A rectangle of a column-major device matrix: a pointer, its shape and leading dimension."""

    __slots__ = ("ptr", "rows", "cols", "ld", "dtype")

    def __init__(self, ptr, rows, cols, ld, dtype):
        self.ptr, self.rows, self.cols, self.ld, self.dtype = ptr, rows, cols, ld, dtype

    @property
    def size(self):
        return self.rows * self.cols

    @property
    def shape(self):
        return (self.rows, self.cols)

    def sub(self, r0, r1, c0, c1):
        """The rectangle rows r0:r1 x columns c0:c1 of this block."""
        return DeviceBlock(self.ptr + (r0 + c0 * self.ld) * self.dtype.itemsize, r1 - r0, c1 - c0,
                           self.ld, self.dtype)


class _FusedPanelSlots:
    """The exchange area of the fused LU panel kernel (cuda/getrf_panel.cu), one per tile store:
    per block and parity of the column its candidate row, magnitude, row index and tag, and block
    0's row j. Sized for the most blocks and the widest panel the kernel takes."""

    def __init__(self, store, max_blocks):
        real_size = 8  # the magnitudes, at most a double
        self.max_blocks, item = max_blocks, store.itemsize
        rows = 2 * max_blocks * _FUSED_PANEL_MAX_WIDTH * item
        row_j = 2 * _FUSED_PANEL_MAX_WIDTH * item
        magnitudes, indices = 2 * max_blocks * real_size, 2 * max_blocks * 4
        base = int(store._alloc(rows + row_j + magnitudes + 2 * indices))
        self.rows, self.row_j = base, base + rows
        self.magnitudes = self.row_j + row_j
        self.indices = self.magnitudes + magnitudes
        self.tags = self.indices + indices

    def arguments(self, stream):
        """The kernel's slot arguments for a launch on `stream`, its tags zeroed first on the
        same stream (a memset on another stream could land while the kernel runs and erase a
        tag that blocks are waiting for)."""
        _driver.memset_d32_async(self.tags, 0, 2 * self.max_blocks, stream)
        return (ctypes.c_void_p(self.rows), ctypes.c_void_p(self.row_j),
                ctypes.c_void_p(self.magnitudes), ctypes.c_void_p(self.indices),
                ctypes.c_void_p(self.tags), ctypes.c_uint(1))


def _panel_buffer(compute, key):
    """The store's workspace name of round_panel's buffer for `key`."""
    return f"{compute} panel {key}"


class _RoundedPanel:
    """A HERK's panel rounded once (CudaBackend.round_panel): `ptr` its first (hi) copy, `ld`
    its leading dimension, `block` the bytes from one copy to the next, `along_rows` whether
    its long side (the one HERK strips cut) is rows (op "N") or columns (op "C")."""

    def __init__(self, compute, source, ptr, ld, block, along_rows, itemsize):
        self.compute, self.source, self.ptr, self.ld = compute, source, ptr, ld
        self.block, self.along_rows, self.itemsize = block, along_rows, itemsize
        self.k = source.cols if along_rows else source.rows

    def pointer(self, i0):
        """The address of the part that starts at i0 along the long side."""
        return self.ptr + (i0 if self.along_rows else i0 * self.ld) * self.itemsize

    def source_part(self, i0, i1):
        """The part i0:i1 of the float32 panel itself."""
        A = self.source
        return A.sub(i0, i1, 0, A.cols) if self.along_rows else A.sub(0, A.rows, i0, i1)


class DeviceMatrix:
    """The tile store of one factorization: the device copy of the matrix (ours, or the user's
    device array in place), the pivots on both sides, per-step info, the cuSOLVER workspace and
    the pinned buffers for CPU panels. It is the only owner of device memory; `close` frees it all.

    For a host-resident matrix it also moves data: blocks up before they are first needed (block
    columns, or block rows for LQ), finished blocks down while the factorization goes on
    (`upload_block`, `download_block`; staged through pinned slots: `stage_block`,
    `upload_staged`, `download_staged`, `unstage_block`).
    """

    def __init__(self, backend, m, n, dtype, nb, *, device_ptr=None, ld=None, host_source=None,
                 host_result=None):
        self.backend, self.m, self.n, self.dtype, self.nb = backend, m, n, np.dtype(dtype), nb
        self.itemsize = self.dtype.itemsize
        self._allocations = []
        # CPU interface: the F-ordered host arrays the matrix comes from and the factors go to
        # (the same array when factoring in place); None for a device-resident matrix
        self.host_source, self.host_result = host_source, host_result
        self.streamed = host_result is not None
        if device_ptr is None:
            self.ld = max(1, -(-m // 32) * 32)  # 32-element columns keep cuBLAS loads aligned
            device_ptr = self._alloc(self.ld * max(n, 1) * self.itemsize)
        else:
            self.ld = ld
        self.ptr = int(device_ptr)
        k = min(m, n)
        self.nsteps = -(-k // nb) if k else 0
        self.pivots = np.zeros(k, dtype=np.int32)
        self.pivots_dev = self._alloc(max(k, 1) * 4)
        # each step's interchanges as row moves (prepare_interchanges): step s's count and up
        # to 2 w pairs from int s + 4 k0; `moves` maps (k0, k1) to its address once prepared
        self.moves_ints = max(self.nsteps + 4 * k, 1)
        self.moves_dev = self._alloc(self.moves_ints * 4)
        self.moves = {}
        self.info_dev = self._alloc(max(self.nsteps, 1) * 4)
        # the Householder scalars of QR, QL and LQ (host copy complete after `finish_tau`)
        self.tau = np.zeros(k, dtype=self.dtype)
        self.tau_dev = self._alloc(max(k, 1) * self.itemsize)
        self._pinned_tau = None
        self._tau_from_host = {}  # step -> (t0, t1): a CPU panel's tau, to go up with its panel
        drv.memset_d32(self.info_dev, 0, max(self.nsteps, 1))
        self.info_host = np.zeros(max(self.nsteps, 1), dtype=np.int32)
        self.info_on_host = np.zeros(max(self.nsteps, 1), dtype=bool)
        # cuSOLVER's workspace for the largest (first) panel, allocated now: cuMemAlloc during
        # the run could synchronize the device
        lane = backend.lane("gpu:panel")
        self._workspace_elems = getattr(cusolverDn, _PREFIX[self.dtype] + "getrf_buffer_size")(
            lane.solver, m, min(nb, max(k, 1)), self.ptr, self.ld) if k else 0
        self.solver_workspace = self._alloc(max(self._workspace_elems, 1) * self.itemsize)
        self.panel_slots = _FusedPanelSlots(self, backend.multiprocessors) if k else None
        self._pinned_panels = {}
        self._extra_workspaces = {}
        self._pinned_pivots = None  # allocated with the first CPU panel (pinning costs time)
        self._registered = []  # host page ranges pinned by this store, unpinned by `close`
        self.pin = False  # pin the host matrix as it uploads (CPU interface)
        self.pin_ranges, self.pin_cuts = [], []
        self.staged = False  # or copy it through the backend's pinned slots (`use_staging`)
        self._slots = None
        self._column_sums = None  # `track_one_norm`: ones (m), column maxima (n), sums (n)

    # -- memory --------------------------------------------------------------------------------
    def _alloc(self, nbytes):
        allocation = self.backend.alloc(nbytes)
        self._allocations.append(allocation)
        return allocation

    def close(self):
        """Free every device allocation and pinned buffer of this factorization (also after a
        failure), here, with the context current: PyCUDA frees an allocation that the garbage
        collector reaches in a thread without its context current never ("could not be cleaned
        up"), and a user's thread has none outside our calls."""
        with self.backend.active():
            for allocation in self._allocations:
                self.backend.free(allocation)
            for pointer in self._registered:
                _driver.host_unregister(pointer)
            for buffer in (*self._pinned_panels.values(), self._pinned_tau,
                           self._pinned_pivots):
                free = getattr(getattr(buffer, "base", None), "free", None)
                if free is not None:  # pagelocked_empty's array: its base is the allocation
                    free()
        self._allocations.clear()
        self._registered.clear()
        self._pinned_panels.clear()
        self._pinned_tau = self._pinned_pivots = None
        self.end_staging()

    # -- the input's 1-norm (the condition estimate's ||A||_1) ---------------------------------
    def track_one_norm(self):
        """Sum |a_ij| down each column of the input as it is (before any step overwrites it):
        now for a matrix already on the device, as each block arrives for a streamed one (one
        more read of the block on its copy stream, which the factorization's first use of it
        waits for anyway). `one_norm` then gives max_j sum_i |a_ij| (LAPACK lange's "1")."""
        sums = self._alloc((self.m + 2 * self.n) * 8)
        self._column_sums = int(sums)
        lane = self.backend.lane("gpu:update")
        with lane:
            ones = DeviceBlock(self._column_sums, self.m, 1, max(self.m, 1), np.dtype(np.float64))
            self.backend.laset(lane, "A", 1, 1, ones)
            _driver.memset_d32_async(self._column_sums + self.m * 8, 0, 4 * self.n, lane.handle)
            if not self.streamed:
                self._sum_columns(lane, 0, self.m, 0, self.n)
            else:  # the arrivals are summed on the copy stream: it must see the zeros first
                _driver.stream_synchronize(lane.handle)

    def _sum_columns(self, lane, r0, r1, c0, c1):
        if self._column_sums is None or r1 <= r0 or c1 <= c0:
            return
        ones, maxima, sums = (self._column_sums, self._column_sums + self.m * 8,
                              self._column_sums + (self.m + self.n) * 8)
        rows, cols = r1 - r0, c1 - c0
        self.backend.kernels.launch(
            f"col_stats_{_PREFIX[self.dtype]}",
            (-(-rows // _STATS_THREADS), -(-cols // _STATS_STRIP)), (_STATS_THREADS,),
            lane.handle, ctypes.c_void_p(self.ptr + (r0 + c0 * self.ld) * self.itemsize),
            ctypes.c_longlong(self.ld), ctypes.c_int(rows), ctypes.c_int(cols),
            ctypes.c_void_p(ones + r0 * 8), ctypes.c_void_p(maxima + c0 * 8),
            ctypes.c_void_p(sums + c0 * 8))

    def one_norm(self) -> float:
        """||A||_1 of the input, after `track_one_norm` (waits for the sums: a named host wait,
        the caller is about to use the number)."""
        out = np.empty(self.n)
        if self.n:
            lane = self.backend.lane("gpu:update")
            with lane:
                cublas.get_vector_async(self.n, 8, self._column_sums + (self.m + self.n) * 8, 1,
                                        out.ctypes.data, 1, lane.handle)
                _driver.stream_synchronize(lane.handle)
        return float(out.max()) if self.n else 0.0

    # -- pinning the host matrix in pieces (see pinning.py) -----------------------------------
    def plan_pin_pieces(self, pieces: int):
        """Cut the host source into `pieces` pinned ranges; returns each one's first block column."""
        first_blocks, self.pin_ranges, self.pin_cuts = plan_pieces(
            self.host_source.ctypes.data, self.host_source.nbytes, self.m, self.n, self.nb,
            self.itemsize, pieces)
        return first_blocks

    def pin_piece(self, piece: int):
        """Pin one piece (runs in a Dask worker: the context is pushed here). A piece the driver
        will not pin is copied pageable; the cuts keep every copy on one side of it."""
        lo, hi = self.pin_ranges[piece]
        self.backend.context.push()
        try:
            _driver.host_register(lo, hi - lo)
            self._registered.append(lo)
        except _driver.CudaDriverError as exc:
            warnings.warn(f"could not pin part of the host matrix ({exc}); its copies will be "
                          f"slower", RuntimeWarning, stacklevel=2)
        finally:
            drv.Context.pop()

    # -- staging through pinned slots (see CudaBackend.staging_slots) --------------------------
    def use_staging(self, up_slots: int, down_slots: int):
        """Copy this host matrix through the backend's pinned slots: host threads copy between
        the user's pageable array and a slot, DMA between the slot and the device. A slot holds
        nb x max(m, n) elements; one factorization at a time uses the slots (the lock is held
        until `close`)."""
        self.slot_elements = self.nb * max(self.m, self.n)
        self.backend.staging_lock.acquire()
        slots = self.backend.staging_slots(up_slots + down_slots,
                                           self.slot_elements * self.itemsize)
        self._slots = {"up": slots[:up_slots], "down": slots[up_slots:]}
        self.up_slots, self.down_slots = up_slots, down_slots
        self.staged = True

    def end_staging(self):
        """Give the pinned slots back (another matrix may stage now); `close` does it too."""
        if self._slots is not None:
            self._slots = None
            self.staged = False
            self.backend.staging_lock.release()

    def upload_in_background(self):
        """Upload the whole host source, staged through two pinned slots, from a host thread of
        its own on a copy stream of its own, while the caller goes on: the working matrix of a
        mixed solve, which only the refinement reads, travels while the low-precision
        factorization runs. (Pinning the user's array in place instead stalled the GPU work
        queued meanwhile: the factorization took 0.65-0.82 s instead of 0.43, perf/RESULTS.md.)
        Returns a function that waits for the upload to finish (re-raising its error) and gives
        the slots back."""
        self.use_staging(2, 0)
        lane = self.backend.lane("copy:h2d-background")
        failures = []

        def upload():
            self.backend.context.push()
            try:
                in_flight = [None, None]
                for block, c0 in enumerate(range(0, self.n, self.nb)):
                    c1, slot = min(c0 + self.nb, self.n), block % 2
                    if in_flight[slot] is not None:  # the slot's last DMA must be done
                        in_flight[slot].synchronize()
                    self.stage_block(lane, slot, 0, self.m, c0, c1)
                    self.upload_staged(lane, slot, 0, self.m, c0, c1)
                    in_flight[slot] = lane.record()
                _driver.stream_synchronize(lane.handle)
            except BaseException as exc:  # re-raised by the waiter, in the caller's thread
                failures.append(exc)
            finally:
                drv.Context.pop()

        thread = threading.Thread(target=upload, name="hybridla-upload", daemon=True)
        thread.start()

        def wait():
            thread.join()
            self.end_staging()
            if failures:
                raise failures[0]
        return wait

    @property
    def transfer(self) -> str:
        """How the host matrix travels: "staged", "register" or "pageable"."""
        return "staged" if self.staged else "register" if self.pin else "pageable"

    def _slot(self, direction, slot, rows, cols):
        raw = self._slots[direction][slot][: rows * cols * self.itemsize]
        return raw.view(self.dtype).reshape((rows, cols), order="F")

    def stage_block(self, lane, slot, r0, r1, c0, c1):
        """Host side of an upload: rows r0:r1 x columns c0:c1 of the user's array into an up
        slot (a block column or a block row: at most nb x max(m, n) elements)."""
        self.backend.host_copy(self._slot("up", slot, r1 - r0, c1 - c0),
                               self.host_source[r0:r1, c0:c1])

    def upload_staged(self, lane, slot, r0, r1, c0, c1):
        self._copy2d(lane, r0, r1, c0, c1, to_device=True,
                     host_array=self._slot("up", slot, r1 - r0, c1 - c0))
        self._sum_columns(lane, r0, r1, c0, c1)

    def download_staged(self, lane, slot, r0, r1, c0, c1):
        self._copy2d(lane, r0, r1, c0, c1, to_device=False,
                     host_array=self._slot("down", slot, r1 - r0, c1 - c0))

    def unstage_block(self, lane, slot, r0, r1, c0, c1):
        """Host side of a download: a down slot into the user's array at its place."""
        self.backend.host_copy(self.host_result[r0:r1, c0:c1],
                               self._slot("down", slot, r1 - r0, c1 - c0))

    # -- blocks --------------------------------------------------------------------------------
    def block(self, r0, r1, c0, c1):
        return DeviceBlock(self.ptr + (r0 + c0 * self.ld) * self.itemsize,
                           r1 - r0, c1 - c0, self.ld, self.dtype)

    # -- host <-> device -----------------------------------------------------------------------
    def _copy2d(self, lane, r0, r1, c0, c1, to_device, host_array=None):
        """Rows r0:r1 x columns c0:c1 between the device matrix and a host array: the user's
        (same coordinates; cut where its pinned pieces meet) or a panel buffer (whose element
        (0, 0) is the block's first)."""
        if host_array is None and self.pin_cuts:
            for piece in split_at_cuts(r0, r1, c0, c1, self.m, self.pin_cuts):
                self._copy2d_piece(lane, *piece, to_device)
        else:
            self._copy2d_piece(lane, r0, r1, c0, c1, to_device, host_array)

    def _copy2d_piece(self, lane, r0, r1, c0, c1, to_device, host_array=None):
        copy = drv.Memcpy2D()
        device_ptr = self.ptr + (r0 + c0 * self.ld) * self.itemsize
        if host_array is None:
            host = self.host_source if to_device else self.host_result
            host_ld, host_offset = self.m, r0 + c0 * self.m
        else:
            host, host_ld, host_offset = host_array, host_array.shape[0], 0
        host_buffer = host.reshape(-1, order="F")[host_offset:]
        if to_device:
            copy.set_src_host(host_buffer)
            copy.src_pitch = host_ld * self.itemsize
            copy.set_dst_device(device_ptr)
            copy.dst_pitch = self.ld * self.itemsize
        else:
            copy.set_src_device(device_ptr)
            copy.src_pitch = self.ld * self.itemsize
            copy.set_dst_host(host_buffer)
            copy.dst_pitch = host_ld * self.itemsize
        copy.width_in_bytes = (r1 - r0) * self.itemsize
        copy.height = c1 - c0
        copy(lane.stream)

    def upload_block(self, lane, r0, r1, c0, c1):
        """Rows r0:r1 x columns c0:c1 of the host matrix to the same place on the device."""
        if r1 > r0 and c1 > c0:
            self._copy2d(lane, r0, r1, c0, c1, to_device=True)
            self._sum_columns(lane, r0, r1, c0, c1)

    def download_rows(self, lane, r0, r1):
        """Rows r0:r1 of the device matrix, all columns, to the host matrix: they are final."""
        self.download_block(lane, r0, r1, 0, self.n)

    def download_block(self, lane, r0, r1, c0, c1):
        """A finished block of the device matrix to the same place in the host matrix."""
        if r1 > r0 and c1 > c0:
            self._copy2d(lane, r0, r1, c0, c1, to_device=False)

    def tournament_tree(self, lane, chunk, fan):
        """tslu.cu's tree for panels of up to this store's rows, its leaves `chunk` rows and its
        nodes `fan` children: (candidates, counts, arrivals, moves) pointers, each node's slot
        at the same index in the first three. The arrival counters are zeroed on `lane` when
        first made."""
        nodes, level = 0, -(-self.m // chunk)
        while True:
            nodes += level
            if level == 1:
                break
            level = -(-level // fan)
        width = panel_lu.TOURNAMENT_WIDTH
        name = f"tournament {chunk} {fan}"
        fresh = name not in self._extra_workspaces
        base = self.extra_workspace(name, (nodes * (width + 2) + 4 * width + 1) * 4)
        counts, arrivals = base + nodes * width * 4, base + nodes * (width + 1) * 4
        if fresh:
            _driver.memset_d32_async(arrivals, 0, nodes, lane.handle)
        return base, counts, arrivals, arrivals + nodes * 4

    def extra_workspace(self, name, nbytes):
        """A device workspace kept for this store's lifetime (first use allocates it)."""
        current = self._extra_workspaces.get(name)
        if current is None or current[1] < nbytes:
            current = (self._alloc(max(nbytes, 1)), nbytes)
            self._extra_workspaces[name] = current
        return int(current[0])

    def _buffer(self, name, elements):
        """A device buffer of at least `elements`, kept under `name` for the store's lifetime."""
        return self.extra_workspace(name, elements * self.itemsize)

    def workspace(self, name, rows, cols, dtype=None):
        """A rows x cols block of the workspace `name`, which lives as long as the store: the
        first use allocates it, later uses share it (algorithms order the reuse through a graph
        Region of the same name; ask for the largest size first, while recording). Its
        elements are the store's dtype, or `dtype`."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        return DeviceBlock(self.extra_workspace("workspace " + name,
                                                rows * cols * dtype.itemsize),
                           rows, cols, max(rows, 1), dtype)

    def scratch(self, lane, rows, cols):
        """A temporary rows x cols block for one operation of a task on `lane`: one buffer per
        lane, which the lane's stream orders. Sized once for the largest use (nb x max(m, n)),
        so that no allocation happens while a run is under way after the first."""
        need = max(rows * cols, self.nb * max(self.m, self.n))
        return DeviceBlock(self._buffer("scratch " + lane.name, need), rows, cols, max(rows, 1),
                           self.dtype)

    def pinned_panel(self, step, rows, cols):
        """A pinned F-ordered buffer for the CPU panel of `step`; two alternate, so the download
        of the next panel never waits for the upload of this one to free its buffer."""
        slot = step % 2
        buffer = self._pinned_panels.get(slot)
        if buffer is None or buffer.size < rows * cols:
            buffer = drv.pagelocked_empty(max(rows * cols, 1), self.dtype)
            self._pinned_panels[slot] = buffer
        return buffer[: rows * cols].reshape((rows, cols), order="F")

    def panel_to_host(self, lane, step, r0, c0, c1, r1=None):
        """Rows r0:r1 (r1 None: to the last) of columns c0:c1 into the step's pinned buffer."""
        r1 = self.m if r1 is None else r1
        buffer = self.pinned_panel(step, r1 - r0, c1 - c0)
        self._copy2d(lane, r0, r1, c0, c1, to_device=False, host_array=buffer)

    def panel_to_device(self, lane, step, r0, c0, c1, r1=None):
        """The factored panel back, with what its factorization produced for entries c0:c1
        (pivots or tau), which the device needs for the updates."""
        r1 = self.m if r1 is None else r1
        buffer = self.pinned_panel(step, r1 - r0, c1 - c0)
        self._copy2d(lane, r0, r1, c0, c1, to_device=True, host_array=buffer)
        if step in self._tau_from_host:
            t0, t1 = self._tau_from_host.pop(step)
            if self._pinned_tau is None:
                self._pinned_tau = drv.pagelocked_empty(max(self.tau.size, 1), self.dtype)
            self._pinned_tau[t0:t1] = self.tau[t0:t1]
            drv.memcpy_htod_async(int(self.tau_dev) + t0 * self.itemsize,
                                  self._pinned_tau[t0:t1], lane.stream)
            return
        if self._pinned_pivots is None:
            self._pinned_pivots = drv.pagelocked_empty(max(self.pivots.size, 1), np.int32)
        self._pinned_pivots[c0:c1] = self.pivots[c0:c1]
        drv.memcpy_htod_async(int(self.pivots_dev) + c0 * 4, self._pinned_pivots[c0:c1],
                              lane.stream)

    # -- results -------------------------------------------------------------------------------
    def set_pivots(self, pivots):
        """Pivots of existing factors (0-based global), for getrs."""
        self.pivots[:] = pivots
        self.backend.context.push()
        try:
            drv.memcpy_htod(self.pivots_dev, self.pivots)
        finally:
            drv.Context.pop()

    def host_panel(self, step, r0, c0, c1, r1=None):
        """Where a CPU panel is factored: the pinned buffer `panel_to_host` downloaded it to."""
        return self.pinned_panel(step, (self.m if r1 is None else r1) - r0, c1 - c0)

    def set_panel_result(self, step, c0, c1, pivots, info, tau=None):
        """A CPU panel's results: pivots of entries c0:c1 or Householder scalars of reflectors
        c0:c1 (`tau`), uploaded with the panel by `panel_to_device`, and its info."""
        if tau is not None:
            self.tau[c0:c1] = tau
            self._tau_from_host[step] = (c0, c1)
        if pivots is not None:
            self.pivots[c0:c1] = pivots
            self.moves.pop((c0, c1), None)  # none prepared from these pivots: laswp replays them
        self.info_host[step] = info
        self.info_on_host[step] = True

    def finish_tau(self):
        """The Householder scalars and per-step info on the host (`finish`, for QR, QL, LQ)."""
        self.backend.context.push()
        try:
            if self.tau.size:
                drv.memcpy_dtoh(self.tau, self.tau_dev)  # CPU panels' tau went up too
        finally:
            drv.Context.pop()
        return self.tau.copy(), self.finish()[1]

    def set_tau(self, tau):
        """The Householder scalars of existing factors (to apply or form their Q)."""
        tau = np.ascontiguousarray(tau, dtype=self.dtype)
        self.tau = tau.copy()
        if tau.size:
            self.backend.context.push()
            try:
                self.tau_dev = self._alloc(tau.size * self.itemsize)
                drv.memcpy_htod(self.tau_dev, tau)
            finally:
                drv.Context.pop()

    def tau_block(self, t0, t1):
        """The scalars of reflectors t0:t1 on the device, as `triangular_factor` takes them."""
        return DeviceBlock(int(self.tau_dev) + t0 * self.itemsize, t1 - t0, 1, max(t1 - t0, 1),
                           self.dtype)

    def read_block(self, r0, r1, c0, c1):
        """A copy of a block in host memory (a host wait: for small results after a run)."""
        out = np.empty((r1 - r0, c1 - c0), dtype=self.dtype, order="F")
        if out.size:
            self._sync_copy(self.block(r0, r1, c0, c1), out, self.ld)
        return out

    def diagonal(self):
        """The main diagonal (min(m, n) entries), in host memory: one strided copy."""
        k = min(self.m, self.n)
        out = np.empty((1, k), dtype=self.dtype, order="F")
        if k:
            self._sync_copy(self.block(0, 1, 0, k), out, self.ld + 1)
        return out[0]

    def _sync_copy(self, block, out, pitch_elements):
        copy = drv.Memcpy2D()
        copy.set_src_device(block.ptr)
        copy.src_pitch = pitch_elements * self.itemsize
        copy.set_dst_host(out.reshape(-1, order="F"))
        copy.dst_pitch = out.shape[0] * self.itemsize
        copy.width_in_bytes = out.shape[0] * self.itemsize
        copy.height = out.shape[1]
        self.backend.context.push()
        try:
            self.backend.synchronize()
            copy(aligned=False)
        finally:
            drv.Context.pop()

    def finish(self):
        """Pivots and per-step info on the host. A host wait, at the one point where the caller
        needs them: every task has been enqueued by then."""
        self.backend.context.push()
        try:
            if self.pivots.size:
                drv.memcpy_dtoh(self.pivots, self.pivots_dev)  # CPU panels' pivots went up too
            infos = np.empty(max(self.nsteps, 1), np.int32)
            drv.memcpy_dtoh(infos, self.info_dev)
        finally:
            drv.Context.pop()
        on_device = ~self.info_on_host
        self.info_host[on_device] = infos[on_device]
        return self.pivots, self.info_host


def device_array_layout(obj):
    """(pointer, (rows, cols), dtype, strides in bytes) of a 1-D or 2-D device array, from its
    __cuda_array_interface__ (PyCUDA GPUArray, CuPy, PyTorch, Numba all offer it). A 1-D array
    is a column."""
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides = tuple(int(np.prod(shape[i + 1:])) * dtype.itemsize for i in range(len(shape)))
    if len(shape) == 1:
        shape, strides = (shape[0], 1), (strides[0], shape[0] * dtype.itemsize)
    return int(cai["data"][0]), shape, dtype, tuple(strides)


def _is_column_major(obj) -> bool:
    _, (m, n), dtype, strides = device_array_layout(obj)
    return strides[0] == dtype.itemsize and (n <= 1 or strides[1] >= m * dtype.itemsize)


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


def _like(template, out: DeviceArray):
    """`out` as the same kind of array as the user's input (CuPy, PyTorch, PyCUDA), sharing memory."""
    module = type(template).__module__.split(".")[0]
    if module == "cupy":
        import cupy
        return cupy.asarray(out)
    if module == "torch":
        import torch
        return torch.as_tensor(out, device=template.device)
    if module == "pycuda":
        import pycuda.gpuarray as gpuarray
        # base: the DeviceArray, which frees the memory when collected, lives as long as this
        return gpuarray.GPUArray(out.shape, out.dtype, gpudata=out._allocation, order="F",
                                 strides=(out.dtype.itemsize, out.ld * out.dtype.itemsize),
                                 base=out)
    return out


# How a host-resident matrix travels (device.host_transfer): through pinned slots that host
# threads fill and empty, by pinning the user's array in place, or by the driver's pageable copies.
HOST_TRANSFERS = ("staged", "register", "pageable")
SM_SPLITS = ("cublas", "green")  # device.sm_split: how device.panel_sms is kept


class CudaBackend:
    name = "cuda"
    has_device = True

    def __init__(self):
        # The device's primary context, shared with cuBLAS/cuSOLVER, CuPy and PyTorch, retained
        # and never left current: every thread pushes it around its GPU work and pops it in a
        # `finally` (`active`, the lanes). pycuda.autoprimaryctx would push it for good in the
        # importing thread, which aborts the process when that thread ends first.
        drv.init()
        self.device = drv.Device(0)
        self.context = self.device.retain_primary_context()
        self._calls = threading.RLock()
        self._call_depth = 0
        self.device_name = self.device.name()
        self.multiprocessors = self.device.get_attribute(drv.device_attribute.MULTIPROCESSOR_COUNT)
        # compiled once per process (PyCUDA caches the cubin on disk too)
        self.context.push()
        try:
            source = "\n".join(_kernel_source(name) for name in ("laswp.cu", "lapack_aux.cu",
                                                                   "convert.cu", "hemv.cu",
                                                                   "getrf_panel.cu", "tslu.cu",
                                                                   "getrf_leaf_cluster.cu",
                                                                   "butterfly.cu"))
            self.kernels = _driver.Module(compile_cuda(source, no_extern_c=True,
                                                       options=["-O3"]))
            optin = getattr(drv.device_attribute, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", None)
            # the dynamic shared memory a fused LU panel may take (the kernel's static share,
            # under 1 KiB, comes out of the same per-block limit)
            most = self.device.get_attribute(optin) if optin else 48 * 1024
            self.fused_panel_shared = most - 1024
            # tslu.cu's static shares (the finish's copy of U11, 32 x 32 elements; the slots)
            # stay under 20 KiB
            self.tslu_shared = most - 20 * 1024
            # a cluster of 16 blocks is above the portable 8: allowed per kernel, where the
            # device has it (an H100 or H200 does; elsewhere the leaves go to getrf_panel)
            self.leaf_cluster = self.device.compute_capability() >= (9, 0)
            try:
                if self.leaf_cluster:
                    self.kernels.allow_nonportable_cluster("getrf_leaf_cluster_s")
            except _driver.CudaDriverError:
                self.leaf_cluster = False
            for prefix in _PREFIX.values():
                self.kernels.allow_shared(f"getrf_panel_fused_{prefix}", self.fused_panel_shared)
                self.kernels.allow_shared(f"tslu_{prefix}", self.tslu_shared)
                self.kernels.allow_shared(f"tslu_finish_{prefix}", self.tslu_shared)
        finally:
            drv.Context.pop()
        self._lanes = {}
        self._lanes_lock = threading.Lock()
        # device.sm_split "green": per number of panel SMs, the two green contexts and their
        # lanes; `_split` is the current run's (None: the lanes above)
        self._green = {}
        self._split = None
        self._allocated = 0
        self._sizes = {}  # pointer -> bytes of the allocations the tile stores hold
        self._alloc_lock = threading.Lock()
        self._pool = None  # pycuda's DeviceMemoryPool, made on first use (device.memory_pool)
        self._scalars = {dt: (np.array(1, dt), np.array(-1, dt), np.array(0, dt)) for dt in _PREFIX}
        self._scalar_ring = threading.local()
        # dtype -> {1: pointer, -1: pointer, 0: pointer}: the common scalars without a lookup cost
        self._standard_scalars = {dt: dict(zip((1, -1, 0), (s.ctypes.data for s in scalars)))
                                  for dt, scalars in self._scalars.items()}
        self.staging_lock = threading.Lock()
        self._staging = []
        self._copy_pool, self._copy_pool_size = None, 0

    @contextlib.contextmanager
    def active(self):
        """The primary context current in this thread for the block, popped whatever happens."""
        self.context.push()
        try:
            yield self
        finally:
            drv.Context.pop()

    @contextlib.contextmanager
    def call(self):
        """One user-level call on this device, from any thread: calls run one at a time (they
        share the lanes, their handles and the staging slots; one GPU gains little from two
        factorizations at once), the context is current in the calling thread throughout, and
        when the outermost call ends the memory pool keeps at most `device.pool_max_bytes`."""
        with self._calls:
            self._call_depth += 1
            try:
                with self.active():
                    yield self
            finally:
                self._call_depth -= 1
                if self._call_depth == 0:
                    self.trim_cached(_config_get("device.pool_max_bytes"))

    # -- pinned staging slots and threaded host copies ---------------------------------------------
    def staging_slots(self, count: int, nbytes: int):
        """`count` pinned host buffers of `nbytes` or more, allocated once and kept for the process
        (like a pinned memory pool: cuMemHostAlloc costs about as much as pinning, so it is paid
        once, not on every call). The caller holds `staging_lock`."""
        if len(self._staging) < count or self._staging[0].nbytes < nbytes:
            # grown to the largest count and size asked so far: a mixed solve stages its float32
            # copy and then its float64 matrix, which must not reallocate on every call
            count = max(count, len(self._staging))
            nbytes = max(nbytes, self._staging[0].nbytes if self._staging else 0)
            self.context.push()
            try:
                self._staging = []  # the old buffers go before the larger ones are made
                self._staging = [drv.pagelocked_empty(nbytes, np.uint8) for _ in range(count)]
            finally:
                drv.Context.pop()
        return self._staging[:count]

    def host_copy(self, dst: np.ndarray, src: np.ndarray):
        """dst[...] = src, cut by columns over `device.copy_threads` threads: one thread's memcpy
        reaches a fraction of the host's memory bandwidth (NumPy releases the GIL while copying)."""
        threads = max(1, int(_config_get("device.copy_threads") or os.cpu_count() or 1))
        cols = dst.shape[1]
        if threads == 1 or cols < 2:
            np.copyto(dst, src)
            return
        if self._copy_pool is None or self._copy_pool_size != threads:  # made, or the setting moved
            if self._copy_pool is not None:
                self._copy_pool.shutdown(wait=False)
            self._copy_pool = ThreadPoolExecutor(threads, thread_name_prefix="hybridla-copy")
            self._copy_pool_size = threads
        step = -(-cols // threads)
        futures = [self._copy_pool.submit(np.copyto, dst[:, j:j + step], src[:, j:j + step])
                   for j in range(0, cols, step)]
        for future in futures:
            future.result()

    # -- lanes and synchronization -------------------------------------------------------------
    def lane(self, name: str):
        """The lane of that name: "gpu:*" and "copy:*" lanes are CUDA streams; "cpu*" lanes are
        host worker threads (they wait for device events on the host)."""
        with self._lanes_lock:
            split = self._split if name.startswith("gpu:") else None
            lanes = self._lanes if split is None else split["lanes"]
            if name not in lanes:
                self.context.push()
                try:
                    if name.startswith("cpu"):
                        lanes[name] = HostLane(name)
                    else:
                        green = None if split is None else \
                            split["panel" if name == "gpu:panel" else "rest"]
                        lanes[name] = CudaLane(name, self, green)
                finally:
                    drv.Context.pop()
            return lanes[name]

    @staticmethod
    def update_tasks(workers: int) -> int:
        return 1  # one GEMM fills the GPU; more tasks only add launches and scheduling

    def begin_run(self, workers: int):
        """Settings read at the start of each run: `device.panel_sms` multiprocessors kept for
        the critical path (the "gpu:panel" lane: panels, look-ahead columns), on top of its
        stream's priority, by `device.sm_split`: "cublas", the bulk update's cuBLAS calls
        asked to leave them (cublasSetSmCountTarget: a hint for their grids; other kernels
        still fill them); "green", the run's compute lanes in two green contexts, the panel
        lane's on those SMs and the others' on the rest (a wall: perf/probe_green_panel.cu)."""
        reserved = int(_config_get("device.panel_sms") or 0)
        how = _config_get("device.sm_split")
        if how not in SM_SPLITS:
            raise ValueError(f"device.sm_split must be one of {SM_SPLITS}; got {how!r}")
        lane = self.lane("gpu:update")
        cublas.set_sm_count_target(lane.blas, max(self.multiprocessors - reserved, 0)
                                   if reserved and how == "cublas" else 0)
        if reserved and how == "green":
            self._enter_split(reserved)

    def end_run(self):
        self._leave_split()

    def _enter_split(self, reserved: int):
        """The run's compute lanes from now on: those of the green contexts of `reserved` SMs
        and the rest, each first waiting for the work already queued on its namesake."""
        if reserved not in self._green:
            self.context.push()
            try:
                panel, rest = _driver.split_sms(reserved)
            finally:
                drv.Context.pop()
            self._green[reserved] = {"panel": panel, "rest": rest, "lanes": {}}
        before = {name: lane for name, lane in self._lanes.items() if name.startswith("gpu:")}
        self._split = self._green[reserved]
        self.context.push()
        try:
            for name, lane in before.items():
                self.lane(name).wait_for([lane.record()])
        finally:
            drv.Context.pop()

    def _leave_split(self):
        """Back to the ordinary lanes, each waiting for the work its green namesake queued."""
        split, self._split = self._split, None
        if split is None:
            return
        self.context.push()
        try:
            for name, lane in split["lanes"].items():
                if name.startswith("gpu:"):
                    self.lane(name).wait_for([lane.record()])
        finally:
            drv.Context.pop()

    def synchronize(self):
        self.context.push()
        try:
            self.context.synchronize()
        finally:
            drv.Context.pop()

    @staticmethod
    def host_wait(events):
        """A CPU task needs device data: wait on the host for the events of its inputs."""
        for event in events:
            if event is not None:
                event.synchronize()

    # -- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes):
        """Device memory for a tile store, from the pool when `device.memory_pool` is on: a
        cuMemAlloc while a run is under way can stall it, and cuMemFree synchronizes the
        device; with the pool both are paid on the first call only (as CuPy's pool does). An
        allocation that fails is tried once more after the pool's cached blocks are freed."""
        nbytes = max(int(nbytes), 1)
        with self.active(), self._alloc_lock:
            pooled = bool(_config_get("device.memory_pool"))
            if pooled and self._pool is None:
                self._pool = drv.DeviceMemoryPool()
            allocate = self._pool.allocate if pooled else drv.mem_alloc
            try:
                allocation = allocate(nbytes)
            except drv.MemoryError:
                if self._pool is None:
                    raise
                _log.warning("device allocation of %d bytes failed: freeing the pool's %d "
                             "cached bytes and trying again", nbytes,
                             self._pool.managed_bytes - self._pool.active_bytes)
                self._pool.free_held()
                allocation = allocate(nbytes)
            self._allocated += nbytes
            self._sizes[int(allocation)] = nbytes
        return allocation

    def free(self, allocation):
        with self._alloc_lock:
            self._allocated -= self._sizes.pop(int(allocation))
            allocation.free()  # a pooled block goes back to the pool

    def allocated_bytes(self) -> int:
        """Device memory hybridla's tile stores hold right now (0 between calls: nothing
        leaks); the pool's cached blocks are `cached_bytes`."""
        return self._allocated

    def cached_bytes(self) -> int:
        """Device memory the pool keeps for the next call (see `free_cached`)."""
        with self._alloc_lock:
            return 0 if self._pool is None else self._pool.managed_bytes - self._pool.active_bytes

    def free_cached(self):
        """Give the pool's cached device memory back to the driver."""
        self.trim_cached(0)

    def trim_cached(self, keep_bytes):
        """Give the pool's cached blocks back to the driver when they add up to more than
        `keep_bytes` (None: keep them all). The pool frees all of its held blocks or none."""
        if keep_bytes is None or self.cached_bytes() <= int(keep_bytes):
            return
        with self.active(), self._alloc_lock:
            _log.debug("device memory pool: %d cached bytes back to the driver (keep %s)",
                       self._pool.managed_bytes - self._pool.active_bytes, keep_bytes)
            self._pool.free_held()

    def free_memory(self) -> int:
        """Device memory a call can have: what the driver has free, and the pool's cache."""
        self.context.push()
        try:
            return drv.mem_get_info()[0] + self.cached_bytes()
        finally:
            drv.Context.pop()

    def matrix(self, m, n, dtype, nb, **kw) -> DeviceMatrix:
        self.context.push()
        try:
            return DeviceMatrix(self, m, n, dtype, nb, **kw)
        finally:
            drv.Context.pop()

    def host_matrix(self, source: np.ndarray, result: np.ndarray, nb: int,
                    dtype=None) -> DeviceMatrix:
        """The device working matrix for a host-resident input (CPU interface): streamed up from
        `source`, the factors streamed down into `result` (F-ordered, possibly the same array).
        A narrower `dtype` than the source's (a mixed solver's low-precision copy, `result`
        None) is rounded on the host: by the threads that stage it, or at once when small."""
        dtype = np.dtype(dtype or source.dtype)
        transfer = _config_get("device.host_transfer")
        if transfer not in HOST_TRANSFERS:
            raise ValueError(f"device.host_transfer must be one of {HOST_TRANSFERS}; got "
                             f"{transfer!r}")
        # Only matrices of pages of their own are pinned: a small array lives in the heap,
        # sharing pages with other objects, and pinning those pages made copies fail ("invalid
        # argument") in the tests on the H200. Below the threshold the pageable copies take
        # milliseconds anyway, so small matrices are not staged either.
        large = source.nbytes >= int(_config_get("device.pin_min_bytes"))
        if dtype != source.dtype:  # only staging rounds as it copies
            transfer = "staged"
            if not large:
                source = np.asfortranarray(source, dtype=dtype)
        A = self.matrix(*source.shape, dtype, nb, host_source=source, host_result=result)
        try:
            if large and transfer == "staged":
                A.use_staging(up_slots=4, down_slots=4)
        except BaseException:
            A.close()
            raise
        A.pin = large and transfer == "register"
        return A

    def required_bytes(self, m, n, dtype, nb) -> int:
        """Device memory a factorization of an m x n matrix will take, at most."""
        itemsize = np.dtype(dtype).itemsize
        # the matrix, pivots or tau, the panel workspace and two lanes' scratch blocks
        return ((-(-m // 32) * 32) * n + 2 * min(m, n) + 3 * nb * max(m, n)) * itemsize

    # -- the GPU interface: user device arrays ----------------------------------------------------
    def device_matrix(self, obj, nb, overwrite):
        """Wrap a user's 2-D device array (anything with __cuda_array_interface__) as the working
        matrix. Returns (matrix, result, write_back): `result` is the array to give the user;
        `write_back()`, if not None, must run after the factorization (a row-major input
        factored in a column-major copy goes back into the user's array when overwrite)."""
        ptr, (m, n), dtype, strides = device_array_layout(obj)
        itemsize = dtype.itemsize
        lane = self.lane("gpu:update")
        self.synchronize()  # the producer's pending writes to the array must land first
        column_major = strides[0] == itemsize and (n <= 1 or strides[1] >= m * itemsize)
        row_major = strides[1] == itemsize and (m <= 1 or strides[0] >= n * itemsize)
        if column_major and overwrite:
            ld = max(strides[1] // itemsize, m, 1) if n > 1 else max(m, 1)
            A = self.matrix(m, n, dtype, nb, device_ptr=ptr, ld=ld)
            A.keeps = obj  # the array's memory lives as long as the store
            return A, obj, None
        if not (column_major or row_major):
            raise ValueError(f"a device array must have unit stride along one axis; got shape "
                             f"{(m, n)} with strides {strides} (bytes)")
        out = DeviceArray(self, (m, n), dtype)
        if column_major:
            # one column: its second stride means nothing (CuPy gives an n x 1 array the
            # stride of one element there), and the copy's source pitch must cover the column
            source_ld = max(strides[1] // itemsize, m, 1) if n > 1 else max(m, 1)
            self.copy_device(ptr, source_ld, out.ptr, out.ld, m, n, itemsize)
        else:
            with lane:
                self.geam_transpose(lane, ptr, max(strides[0] // itemsize, 1), out.ptr, out.ld,
                                    m, n, dtype)
        A = self.matrix(m, n, dtype, nb, device_ptr=out.ptr, ld=out.ld)
        A.keeps = out  # the copy lives as long as the store (wrap drops the array it returns)
        if not overwrite:
            return A, _like(obj, out), None

        def write_back():  # row-major user array, overwrite_a: the factors go back in its layout
            with lane:
                self.geam_transpose(lane, out.ptr, out.ld, ptr, max(strides[0] // itemsize, 1),
                                    n, m, dtype)
            self.synchronize()
        return A, obj, write_back

    def wrap(self, obj, pivots=None, tau=None) -> DeviceMatrix:
        """A device array as a tile store for the stages after a factorization: in place when
        column-major (factors, and the results hybridla allocates), else a column-major copy
        (inputs that are only read, such as a row-major right-hand side)."""
        A, _, _ = self.device_matrix(obj, 1, overwrite=_is_column_major(obj))
        if pivots is not None:
            A.set_pivots(pivots)
        if tau is not None:
            A.set_tau(tau)
        return A

    def empty(self, shape, dtype, like=None):
        """A new column-major device array for a result, of the same kind as `like` (CuPy,
        PyTorch, PyCUDA)."""
        out = DeviceArray(self, shape, dtype)
        return _like(like, out) if like is not None else out

    def zero_triangle(self, obj, upper: bool):
        """Set the strictly upper (or lower) triangle of a square device array to zero."""
        ptr, (n, _), dtype, strides = device_array_layout(obj)
        column_major = strides[0] == dtype.itemsize
        ld = (strides[1] if column_major else strides[0]) // dtype.itemsize
        # a row-major array is the transpose in column-major terms: the other triangle
        lane = self.lane("gpu:update")
        with lane:
            self.kernels.launch(f"zero_triangle_{dtype.itemsize}", (-(-n // 256), n), (256,),
                                lane.handle, ctypes.c_void_p(ptr), ctypes.c_longlong(max(ld, 1)),
                                ctypes.c_int(n), ctypes.c_int(int(upper == column_major)))
        self.synchronize()

    def has_nonfinite(self, obj) -> bool:
        """check_finite for a device array, on the device (one pass)."""
        ptr, (m, n), dtype, strides = device_array_layout(obj)
        words = 2 if dtype.kind == "c" else 1
        real_size = dtype.itemsize // words
        if strides[0] == dtype.itemsize or n <= 1:
            rows, cols, ld = m * words, n, (strides[1] // real_size if n > 1 else m * words)
        else:  # row-major: the transpose is column-major, and finiteness does not care
            rows, cols, ld = n * words, m, strides[0] // real_size
        self.synchronize()
        self.context.push()
        try:
            flag = drv.mem_alloc(4)
            drv.memset_d32(flag, 0, 1)
            self.kernels.launch(f"nonfinite_{real_size}", (min(-(-rows // 256), 8),
                                min(cols, 65535)), (256,), 0, ctypes.c_void_p(ptr),
                                ctypes.c_longlong(max(ld, 1)), ctypes.c_longlong(rows),
                                ctypes.c_longlong(cols), ctypes.c_void_p(int(flag)))
            self.context.synchronize()
            result = np.zeros(1, np.int32)
            drv.memcpy_dtoh(result, flag)
            flag.free()
        finally:
            drv.Context.pop()
        return bool(result[0])

    # -- operations on blocks ------------------------------------------------------------------
    def getrf_panel(self, lane, A: DeviceMatrix, step, r0, c0, c1, r1=None):
        """The LU of the panel A[r0:r1, c0:c1] (r1 None: to the last row), its pivots global
        0-based rows on the device, its info in the step's slot: our one-launch kernel where the
        panel fits in the SMs' shared memory (the leaves of recursive panels), else cuSOLVER
        getrf."""
        panel = A.block(r0, A.m if r1 is None else r1, c0, c1)
        piv_ptr = int(A.pivots_dev) + c0 * 4
        info_ptr = int(A.info_dev) + step * 4
        shape = self.fused_panel_shape(panel.rows, panel.cols, A.itemsize)
        if shape is not None:
            blocks, rows_per_block, shared = shape
            self.kernels.launch(
                f"getrf_panel_fused_{_PREFIX[A.dtype]}", (blocks,), (_FUSED_PANEL_THREADS,),
                lane.handle, ctypes.c_void_p(panel.ptr), ctypes.c_longlong(panel.ld),
                ctypes.c_int(panel.rows), ctypes.c_int(panel.cols), ctypes.c_int(rows_per_block),
                ctypes.c_void_p(piv_ptr), ctypes.c_int(r0), ctypes.c_void_p(info_ptr),
                *A.panel_slots.arguments(lane.handle), shared=shared,
                cooperative=_FUSED_PANEL_COOPERATIVE)
            return
        work = int(A.solver_workspace)
        getrf = getattr(cusolverDn, _PREFIX[A.dtype] + "getrf")
        getrf(lane.solver, panel.rows, panel.cols, panel.ptr, panel.ld, work, piv_ptr, info_ptr)
        count = c1 - c0
        self.kernels.launch("pivots_to_global", (-(-count // 256),), (256,), lane.handle,
                            ctypes.c_void_p(piv_ptr), ctypes.c_int(count), ctypes.c_int(r0))

    def getrf_leaf(self, lane, A: DeviceMatrix, step, r0, c0, c1, k0=None, k1=None, r1=None):
        """The leaf A[r0:r1, c0:c1] of the panel A[r0:r1, k0:k1] (k0, k1 default c0, c1; r1 None:
        to the last row) by partial pivoting, its interchanges applied to the panel's other
        columns too; pivots global 0-based rows, the info left to panel_info. One launch on a
        thread-block cluster (cuda/getrf_leaf_cluster.cu) for a float leaf of up to 16 columns
        and 32768 rows, where the lane can launch its cluster of 16 (not in a green context of
        fewer SMs than a GPU processing cluster); else getrf_panel and laswp."""
        k0, k1, r1 = c0 if k0 is None else k0, c1 if k1 is None else k1, A.m if r1 is None else r1
        rows, width = r1 - r0, c1 - c0
        if not (lane.cluster_blocks >= _LEAF_CLUSTER["blocks"]
                and A.dtype in _LEAF_CLUSTER["dtypes"]
                and width <= min(rows, _LEAF_CLUSTER["max_width"])
                and rows <= _LEAF_CLUSTER["max_rows"]):
            self.getrf_panel(lane, A, step, r0, c0, c1, r1=r1)
            self._interchange_other_columns(lane, A, step, c0, c1, k0, k1)
            return
        self.kernels.launch(
            "getrf_leaf_cluster_s", (_LEAF_CLUSTER["blocks"],), (_LEAF_CLUSTER["threads"],),
            lane.handle, ctypes.c_void_p(A.block(r0, r1, c0, c1).ptr), ctypes.c_longlong(A.ld),
            ctypes.c_int(rows), ctypes.c_int(width), ctypes.c_int(c0 - k0), ctypes.c_int(k1 - c1),
            ctypes.c_void_p(int(A.pivots_dev) + c0 * 4), ctypes.c_int(r0))

    def _interchange_other_columns(self, lane, A, step, c0, c1, k0, k1):
        """A leaf's interchanges (pivots c0..c1-1) in the panel's columns k0:c0 and c1:k1, as
        the row moves they amount to (replayed column by column, each thread would make the
        leaf's c1 - c0 dependent swaps). The moves go to the step's slot, a part of it that
        prepare_interchanges overwrites once the panel is done (same lane, in order)."""
        self.prepare_interchanges(lane, A, step, c0, c1)
        try:
            self.laswp(lane, A, k0, c0, c0, c1)
            self.laswp(lane, A, c1, k1, c0, c1)
        finally:
            A.moves.pop((c0, c1), None)

    def tslu_panel(self, lane, A: DeviceMatrix, step, r0, c0, c1, k0=None, k1=None):
        """The leaf A[r0:, c0:c1] of the panel A[r0:, k0:k1] (k0, k1 default c0, c1) by
        tournament pivoting, its interchanges applied to the panel's other columns too: two
        launches (cuda/tslu.cu). Pivots global 0-based rows; the info is left to panel_info. A
        leaf wider than panel/lu.TOURNAMENT_WIDTH or with fewer rows than columns goes to
        getrf_panel and laswp."""
        k0, k1 = c0 if k0 is None else k0, c1 if k1 is None else k1
        rows, width = A.m - r0, c1 - c0
        chunk, fan = panel_lu.tournament_tree()
        shared = (chunk + width) * width * A.itemsize  # a node's rows; the root's first rows
        finish_shared = _TSLU_FINISH_THREADS * width * A.itemsize  # a row of L21 per thread
        if width > panel_lu.TOURNAMENT_WIDTH or rows < width or \
                max(shared, finish_shared) > self.tslu_shared:
            self.getrf_panel(lane, A, step, r0, c0, c1)
            self._interchange_other_columns(lane, A, step, c0, c1, k0, k1)
            return
        candidates, counts, arrivals, moves = A.tournament_tree(lane, chunk, fan)
        prefix, top = _PREFIX[A.dtype], A.block(r0, A.m, k0, k1)
        self.kernels.launch(
            f"tslu_{prefix}", (-(-rows // chunk),), (chunk,), lane.handle,
            ctypes.c_void_p(A.block(r0, A.m, c0, c1).ptr), ctypes.c_longlong(A.ld),
            ctypes.c_int(rows), ctypes.c_int(width), ctypes.c_int(fan),
            ctypes.c_void_p(candidates), ctypes.c_void_p(counts), ctypes.c_void_p(arrivals),
            ctypes.c_void_p(int(A.pivots_dev) + c0 * 4), ctypes.c_int(r0), ctypes.c_void_p(moves),
            shared=shared)
        row_blocks = -(-(rows - width) // _TSLU_FINISH_THREADS)
        column_blocks = -(-(k1 - k0 - width) // _TSLU_FINISH_THREADS)
        if row_blocks + column_blocks:
            self.kernels.launch(
                f"tslu_finish_{prefix}", (row_blocks + column_blocks,), (_TSLU_FINISH_THREADS,),
                lane.handle, ctypes.c_void_p(top.ptr), ctypes.c_longlong(A.ld), ctypes.c_int(rows),
                ctypes.c_int(width), ctypes.c_int(k1 - k0), ctypes.c_int(c0 - k0),
                ctypes.c_int(row_blocks), ctypes.c_void_p(moves), shared=finish_shared)

    def fused_panel_shape(self, rows, cols, itemsize):
        """(blocks, rows per block, shared bytes) of the fused panel kernel for a rows x cols
        panel, or None where it does not take it: wider than its tags allow, fewer rows than
        columns, or a share of rows too large for one SM's shared memory. Block 0 must hold the
        first `cols` rows (the rows that become U)."""
        if cols > _FUSED_PANEL_MAX_WIDTH or rows < cols or cols == 0:
            return None
        blocks = min(self.multiprocessors, -(-rows // _FUSED_PANEL_MIN_ROWS))
        per_block = max(-(-rows // blocks), cols)
        shared = (per_block + 2) * cols * itemsize
        if shared > self.fused_panel_shared:
            return None
        return -(-rows // per_block), per_block, shared

    def panel_info(self, lane, A: DeviceMatrix, step, k0, k1):
        """The step's info := the first exactly zero U(i, i) of the panel's diagonal block
        (1-based within it), else 0: LAPACK getrf's info, for a panel factored in pieces."""
        self.kernels.launch(f"first_zero_diagonal_{_PREFIX[A.dtype]}", (1,), (256,), lane.handle,
                            ctypes.c_void_p(A.block(k0, k1, k0, k1).ptr), ctypes.c_longlong(A.ld),
                            ctypes.c_int(k1 - k0), ctypes.c_void_p(int(A.info_dev) + step * 4))

    def prepare_interchanges(self, lane, A: DeviceMatrix, step, k0, k1):
        """Turn the step's pivots k0..k1-1 (global rows, on the device) into the row moves they
        amount to (cuda/laswp.cu's pivots_to_moves), for the step's laswps to apply at once."""
        width, first = k1 - k0, step + 4 * k0
        if not 0 < width <= _MOVES_MAX_WIDTH or first + 1 + 4 * width > A.moves_ints:
            A.moves.pop((k0, k1), None)
            return
        hash_size = 1 << (2 * width - 1).bit_length()
        moves = int(A.moves_dev) + first * 4
        self.kernels.launch("pivots_to_moves", (1,), (256,), lane.handle,
                            ctypes.c_void_p(int(A.pivots_dev)), ctypes.c_int(k0), ctypes.c_int(k1),
                            ctypes.c_int(hash_size), ctypes.c_void_p(moves),
                            shared=(width + 2 * hash_size) * 4)
        A.moves[(k0, k1)] = moves

    def laswp(self, lane, A: DeviceMatrix, c0, c1, k0, k1, forward=True, pivots_of=None):
        """Apply the interchanges of pivots k0..k1-1 (global rows) to columns c0:c1: as the
        step's row moves where prepare_interchanges made them, else replayed column by column."""
        ncols = c1 - c0
        if ncols <= 0 or k1 <= k0:
            return
        moves = A.moves.get((k0, k1)) if forward and pivots_of is None else None
        if moves is not None:
            self.kernels.launch(f"apply_moves_{A.itemsize}", (min(ncols, _MOVES_MAX_BLOCKS),),
                                (_MOVES_THREADS,), lane.handle,
                                ctypes.c_void_p(A.ptr + c0 * A.ld * A.itemsize),
                                ctypes.c_longlong(A.ld), ctypes.c_int(ncols),
                                ctypes.c_void_p(moves))
            return
        pivots = int((pivots_of or A).pivots_dev)
        self.kernels.launch(f"laswp_{A.itemsize}", (-(-ncols // _LASWP_THREADS),),
                            (_LASWP_THREADS,), lane.handle,
                            ctypes.c_void_p(A.ptr + c0 * A.ld * A.itemsize), ctypes.c_longlong(A.ld),
                            ctypes.c_int(ncols), ctypes.c_void_p(pivots), ctypes.c_int(k0),
                            ctypes.c_int(k1), ctypes.c_int(1 if forward else 0))

    def potrf_panel(self, lane, A: DeviceMatrix, step, uplo, k0, k1):
        """cuSOLVER potrf on the diagonal block A[k0:k1, k0:k1]; its info (the order of the first
        non-positive leading minor, within the block) goes to the step's info slot."""
        block = A.block(k0, k1, k0, k1)
        prefix = _PREFIX[A.dtype]
        need = getattr(cusolverDn, prefix + "potrf_buffer_size")(lane.solver, _UPLO[uplo],
                                                                  block.rows, block.ptr, block.ld)
        work = A.extra_workspace("potrf", need * A.itemsize)
        getattr(cusolverDn, prefix + "potrf")(lane.solver, _UPLO[uplo], block.rows, block.ptr,
                                             block.ld, work, need, int(A.info_dev) + step * 4)

    def _aux_grid(self, rows, cols):
        return (-(-rows // _AUX_BLOCK[0]), -(-cols // _AUX_BLOCK[1]))

    def laset(self, lane, uplo, alpha, beta, B: DeviceBlock):
        """LAPACK laset: the strictly upper ("U"), strictly lower ("L") or whole ("A") off-
        diagonal part of B := alpha, its diagonal := beta."""
        if B.size == 0:
            return
        alpha, beta = complex(alpha), complex(beta)
        self.kernels.launch(f"laset_{_PREFIX[B.dtype]}", self._aux_grid(B.rows, B.cols),
                            _AUX_BLOCK, lane.handle, ctypes.c_void_p(B.ptr),
                            ctypes.c_longlong(B.ld), ctypes.c_int(B.rows), ctypes.c_int(B.cols),
                            ctypes.c_int(_LASET_PART[uplo]), ctypes.c_double(alpha.real),
                            ctypes.c_double(alpha.imag), ctypes.c_double(beta.real),
                            ctypes.c_double(beta.imag))

    def lacpy(self, lane, uplo, src: DeviceBlock, dst: DeviceBlock):
        """LAPACK lacpy: the upper ("U", with the diagonal), lower ("L") or whole ("A") part of
        src into dst (same shape); the rest of dst is left as it is."""
        if dst.size == 0:
            return
        self.kernels.launch(f"lacpy_{_PREFIX[dst.dtype]}", self._aux_grid(dst.rows, dst.cols),
                            _AUX_BLOCK, lane.handle, ctypes.c_void_p(src.ptr),
                            ctypes.c_longlong(src.ld), ctypes.c_void_p(dst.ptr),
                            ctypes.c_longlong(dst.ld), ctypes.c_int(dst.rows),
                            ctypes.c_int(dst.cols), ctypes.c_int(_LASET_PART[uplo]))

    def trmm(self, lane, side, uplo, trans, diag, alpha, T: DeviceBlock, B: DeviceBlock):
        """B := alpha op(T) B (side "L") or alpha B op(T) (side "R"), in place (cuBLAS's trmm is
        out of place; C = B gives BLAS's in-place form, as its documentation says)."""
        if B.size == 0:
            return
        trmm = getattr(cublas, _PREFIX[B.dtype] + "trmm")
        trmm(lane.blas, _SIDE[side], _UPLO[uplo], _OP[trans], _DIAG[diag], B.rows, B.cols,
             self._scalar(B.dtype, alpha), T.ptr, T.ld, B.ptr, B.ld, B.ptr, B.ld)

    def explicit_reflectors(self, lane, src: DeviceBlock, dst: DeviceBlock, storage):
        """dst := the block reflector's V in explicit column form from a factored panel, as the
        host backend's (its docstring has the storages): a copy, then the unit diagonal and the
        zeros written over the triangle that holds R (or L)."""
        rows, kb = dst.rows, dst.cols
        if storage == "LQ":  # the row panel's conjugate transpose is QR's storage
            self._conj_transpose(lane, src, dst)
            storage = "QR"
        else:
            self.lacpy(lane, "A", src, dst)
        if storage == "QR":
            self.laset(lane, "U", 0, 1, dst)
        elif storage == "QL":
            self.laset(lane, "L", 0, 1, dst.sub(rows - kb, rows, 0, kb))
        else:
            raise ValueError(f"storage must be 'QR', 'QL' or 'LQ'; got storage={storage!r}")

    def triangular_factor(self, lane, V: DeviceBlock, tau: DeviceBlock, T: DeviceBlock,
                          direction, work: DeviceBlock = None):
        """LAPACK larft for explicit V and tau (see lapack_aux.cu): T = U^-1 with
        U = diag(1/tau) + the strictly upper (forward) or lower (backward) part of V^H V: one
        gemm for the Gram matrix, a kernel, a kb x kb trsm on the identity (in `work`, kb x kb
        scratch), a copy and a kernel, instead of LAPACK's kb dependent matrix-vector steps."""
        kb = T.rows
        if kb == 0:
            return
        uplo = "U" if direction == "forward" else "L"
        prefix = _PREFIX[T.dtype]
        self.gemm(lane, 1, V, V, 0, T, trans_a="C")
        self.kernels.launch(f"larft_prepare_{prefix}", self._aux_grid(kb, kb), _AUX_BLOCK,
                            lane.handle, ctypes.c_void_p(T.ptr), ctypes.c_longlong(T.ld),
                            ctypes.c_void_p(tau.ptr), ctypes.c_int(kb),
                            ctypes.c_int(int(direction == "forward")))
        self.laset(lane, "A", 0, 1, work)
        self.trsm(lane, "L", uplo, "N", "N", 1, T, work)
        self.lacpy(lane, "A", work, T)
        self.kernels.launch(f"larft_finish_{prefix}", (-(-kb // 256),), (256,), lane.handle,
                            ctypes.c_void_p(T.ptr), ctypes.c_longlong(T.ld),
                            ctypes.c_void_p(tau.ptr), ctypes.c_int(kb))

    def householder_panel(self, lane, A: DeviceMatrix, step, storage, rows, cols, taus):
        """The panel rows r0:r1 x columns c0:c1 of A factored on the GPU as `storage` says, its
        scalars into tau[t0:t1] on the device. cuSOLVER has geqrf only; QL's panel is the QR
        panel of the reversed block, LQ's that of the conjugate transpose (panel/qr.py proves
        both): those go to a workspace copy in QR's orientation and back, one pass each way."""
        (r0, r1), (c0, c1), (t0, t1) = rows, cols, taus
        panel = A.block(r0, r1, c0, c1)
        tau_ptr = int(A.tau_dev) + t0 * A.itemsize
        if storage == "QR":
            self._geqrf(lane, A, step, panel, tau_ptr)
            return
        qr_rows, qr_cols = (panel.cols, panel.rows) if storage == "LQ" else panel.shape
        problem = A.workspace("panel as QR", qr_rows, qr_cols)
        if storage == "LQ":
            self._conj_transpose(lane, panel, problem)
            self._geqrf(lane, A, step, problem, tau_ptr)
            self._conj_transpose(lane, problem, panel)
            return
        self._flip(lane, panel, problem)
        reversed_tau = A.workspace("panel tau", t1 - t0, 1)
        self._geqrf(lane, A, step, problem, reversed_tau.ptr)
        self._flip(lane, problem, panel)
        self._flip(lane, reversed_tau, A.tau_block(t0, t1))

    def _geqrf(self, lane, A, step, block: DeviceBlock, tau_ptr):
        prefix = _PREFIX[A.dtype]
        need = getattr(cusolverDn, prefix + "geqrf_buffer_size")(lane.solver, block.rows,
                                                                  block.cols, block.ptr, block.ld)
        work = A.extra_workspace("geqrf", need * A.itemsize)
        getattr(cusolverDn, prefix + "geqrf")(lane.solver, block.rows, block.cols, block.ptr,
                                             block.ld, tau_ptr, work, need,
                                             int(A.info_dev) + step * 4)

    def _conj_transpose(self, lane, src: DeviceBlock, dst: DeviceBlock):
        """dst (rows x cols) := src^H (cols x rows)."""
        geam = getattr(cublas, _PREFIX[dst.dtype] + "geam")
        one, _, zero = (s.ctypes.data for s in self._scalars[dst.dtype])
        geam(lane.blas, _OP["C"], _OP["N"], dst.rows, dst.cols, one, src.ptr, src.ld, zero,
             dst.ptr, dst.ld, dst.ptr, dst.ld)

    def _flip(self, lane, src: DeviceBlock, dst: DeviceBlock):
        """dst := src with rows and columns reversed (same shape)."""
        self.kernels.launch(f"flip_{_PREFIX[dst.dtype]}", self._aux_grid(dst.rows, dst.cols),
                            _AUX_BLOCK, lane.handle, ctypes.c_void_p(src.ptr),
                            ctypes.c_longlong(src.ld), ctypes.c_void_p(dst.ptr),
                            ctypes.c_longlong(dst.ld), ctypes.c_int(dst.rows),
                            ctypes.c_int(dst.cols))

    @staticmethod
    def sub_block(B: DeviceBlock, r0, r1, c0, c1) -> DeviceBlock:
        """Rows r0:r1 x columns c0:c1 of the block B: pointer arithmetic, no device work."""
        return B.sub(r0, r1, c0, c1)

    # -- host-driven loops on store blocks (gehrd's panel): each call is complete on return, as
    # a CPU task that calls them leaves no device event behind for later tasks to wait on
    def to_host(self, lane, B: DeviceBlock, out=None) -> np.ndarray:
        """A new F-ordered host array holding the block B, or `out` (F-ordered, B's shape and
        dtype) filled and returned: one 2-D copy down on the critical-path stream, after the
        work queued on `lane` so far, and a wait."""
        if out is None:
            out = np.empty(B.shape, dtype=B.dtype, order="F")
        elif out.shape != B.shape or out.dtype != B.dtype or not out.flags.f_contiguous:
            raise ValueError(f"to_host: out must be an F-ordered {B.shape} {B.dtype} array")
        if out.size:
            gpu = self.lane("gpu:panel")
            with gpu:
                self._after(gpu, lane)
                cublas.get_matrix_async(B.rows, B.cols, B.dtype.itemsize, B.ptr, B.ld,
                                        out.ctypes.data, B.rows, gpu.handle)
                _driver.stream_synchronize(gpu.handle)
        return out

    @staticmethod
    def _after(gpu, lane):
        """The copies' stream `gpu` waits for what `lane` (another lane's stream) has queued: a
        copy down of a block that a task on the update lane wrote read it half-written (the
        trsm tests on the H100, 2026-11-25, for blocks of 256 x 300 and more)."""
        if lane is not None and lane is not gpu:
            gpu.wait_for([lane.record()])

    def from_host(self, lane, x: np.ndarray, B: DeviceBlock):
        """The block B := the host array x (B's shape): one 2-D copy up, after the work queued
        on `lane` so far, and a wait, so that x may be reused as soon as this returns."""
        if x.shape != B.shape:
            raise ValueError(f"from_host: a {x.shape} array for a {B.shape} block")
        x = np.asfortranarray(x, dtype=B.dtype)
        if x.size:
            gpu = self.lane("gpu:panel")
            with gpu:
                self._after(gpu, lane)
                cublas.set_matrix_async(B.rows, B.cols, B.dtype.itemsize, x.ctypes.data,
                                        B.rows, B.ptr, B.ld, gpu.handle)
                _driver.stream_synchronize(gpu.handle)

    def replay(self, lane, recordings: dict, key, record, launch=True):
        """Run record(): work enqueued on `lane` (entered) only, with no host wait and no
        allocation. The first call for `key` captures it into a CUDA graph, kept in
        `recordings` (the caller's: the graphs live as long as it keeps them); every call
        launches that graph, one launch for all of record()'s (launch=False: only capture it,
        which runs nothing, so the host may do it while the device works on). The refinement's
        blocked triangular solves are ~130 small kernels per application; launched one by one
        from Python they took 2.42 ms at n = 32768, replayed 2.16 ms (H100,
        perf/probe_refine_kernels.py)."""
        graph = recordings.get(key)
        if graph is None:
            graph = recordings[key] = _driver.Graph(lane.handle, record)
        if launch:
            graph.launch(lane.handle)

    def larfg(self, lane, x: DeviceBlock, tau: DeviceBlock):
        """LAPACK larfg on the column block x (alpha = x[0], the rest below), in place where it
        lives (lapack_aux.cu, one block of threads: no host wait); tau := the scalar, a 1 x 1
        block. One read and one write of the column."""
        self.kernels.launch(f"larfg_{_PREFIX[x.dtype]}", (1,), (256,), lane.handle,
                            ctypes.c_void_p(x.ptr), ctypes.c_int(x.rows),
                            ctypes.c_void_p(tau.ptr))

    def t_column(self, lane, t: DeviceBlock, tau: DeviceBlock):
        """larft's column i of T (t = T[0:i+1, i], holding T[:i, :i] V^H v above the diagonal):
        t[0:i] *= -tau, t[i] = tau (tau a 1 x 1 block)."""
        self.kernels.launch(f"t_column_{_PREFIX[t.dtype]}", (1,), (256,), lane.handle,
                            ctypes.c_void_p(t.ptr), ctypes.c_int(t.rows - 1),
                            ctypes.c_void_p(tau.ptr))

    def apply_to_host(self, lane, A: DeviceBlock, X: np.ndarray, trans="N", uplo=None,
                      work: DeviceBlock = None) -> np.ndarray:
        """op(A) X for a host array X (op "N" or "C"; with `uplo` "L" or "U", A is Hermitian
        and only that triangle is read), as a new host array: X up, `apply`, the product down
        and a wait, on the critical-path stream whatever lane calls (a host loop needs the
        product next). `work` holds X and the product on the device: at least (rows + cols) x k
        elements of A's dtype. One pass over A."""
        X = np.asfortranarray(X, dtype=A.dtype)
        rows, cols = (A.rows, A.cols) if trans == "N" else (A.cols, A.rows)
        k = X.shape[1]
        Y = np.empty((rows, k), dtype=A.dtype, order="F")
        if Y.size == 0:
            return Y
        if cols == 0:
            Y[...] = 0
            return Y
        x_ptr, y_ptr = work.ptr, work.ptr + cols * k * A.dtype.itemsize
        on_device = DeviceBlock(x_ptr, cols, k, cols, A.dtype)
        product = DeviceBlock(y_ptr, rows, k, rows, A.dtype)
        gpu = self.lane("gpu:panel")
        with gpu:
            cublas.set_matrix_async(cols, k, A.dtype.itemsize, X.ctypes.data, cols, x_ptr, cols,
                                    gpu.handle)
            self.apply(gpu, A, on_device, product, trans, uplo)
            cublas.get_matrix_async(rows, k, A.dtype.itemsize, y_ptr, rows, Y.ctypes.data, rows,
                                    gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        return Y

    def apply(self, lane, A: DeviceBlock, X: DeviceBlock, Y: DeviceBlock, trans="N", uplo=None):
        """Y := op(A) X on the device, no wait (op "N" or "C"; with `uplo` "L" or "U", A is
        Hermitian and only that triangle is read: hemm, symm when real). One pass over A."""
        rows, cols = (A.rows, A.cols) if trans == "N" else (A.cols, A.rows)
        k = X.cols
        if rows == 0 or k == 0:
            return
        if cols == 0:
            self.laset(lane, "A", 0, 0, Y)
            return
        one, _, zero = (s.ctypes.data for s in self._scalars[A.dtype])
        prefix = _PREFIX[A.dtype]
        if uplo is not None and k == 1:  # one pass over the triangle (hemm's is slower)
            # hemv.cu, where cuBLAS's symv reads the triangle at half the copy bandwidth
            self.laset(lane, "A", 0, 0, Y)
            self.kernels.launch(f"hemv_{prefix}", (-(-rows // _STATS_THREADS),
                                                   -(-rows // _STATS_STRIP)),
                                (_STATS_THREADS,), lane.handle, ctypes.c_void_p(A.ptr),
                                ctypes.c_longlong(A.ld), ctypes.c_int(rows),
                                ctypes.c_int(_TRIANGLE_CODE[uplo]), ctypes.c_void_p(X.ptr),
                                ctypes.c_void_p(Y.ptr))
        elif uplo is not None:
            hemm = getattr(cublas, prefix + ("hemm" if A.dtype.kind == "c" else "symm"))
            hemm(lane.blas, _SIDE["L"], _UPLO[uplo], rows, k, one, A.ptr, A.ld, X.ptr, X.ld,
                 zero, Y.ptr, Y.ld)
        elif k == 1:
            getattr(cublas, prefix + "gemv")(lane.blas, _OP[trans], A.rows, A.cols, one, A.ptr,
                                             A.ld, X.ptr, 1, zero, Y.ptr, 1)
        else:
            getattr(cublas, prefix + "gemm")(lane.blas, _OP[trans], _OP["N"], rows, k, cols, one,
                                             A.ptr, A.ld, X.ptr, X.ld, zero, Y.ptr, Y.ld)

    @staticmethod
    def strided_columns(B: DeviceBlock, first, count, step) -> DeviceBlock:
        """Columns first, first + step, ... (count of them) of B, as a block (its leading
        dimension step times B's): no copy."""
        return DeviceBlock(B.ptr + first * B.ld * B.dtype.itemsize, B.rows, count,
                           B.ld * step, B.dtype)

    def scale_copy(self, lane, alpha, src: DeviceBlock, dst: DeviceBlock):
        """dst := alpha src (same shape): one cuBLAS geam, no wait."""
        if dst.size == 0:
            return
        geam = getattr(cublas, _PREFIX[dst.dtype] + "geam")
        geam(lane.blas, _OP["N"], _OP["N"], dst.rows, dst.cols, self._scalar(dst.dtype, alpha),
             src.ptr, src.ld, self._scalars[dst.dtype][2].ctypes.data, dst.ptr, dst.ld, dst.ptr,
             dst.ld)

    def keep_on_device(self, owner: DeviceMatrix, name, array):
        """A host vector copied once to the device for later kernels (`vector_to_low`'s scale
        and permutation): a handle to pass them, here its device address (the store's
        workspace `name`, freed with it). None stays None."""
        if array is None:
            return None
        array = np.ascontiguousarray(array)
        pointer = owner.extra_workspace(f"kept {name}", array.nbytes)
        gpu = self.lane("gpu:panel")
        with gpu:
            cublas.set_vector_async(array.size, array.itemsize, array.ctypes.data, 1, pointer, 1,
                                    gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        return pointer

    def vector_to_low(self, lane, src: DeviceBlock, dst: DeviceBlock, scale, permutation=None):
        """dst_ij := (s_{p_i} src_{p_i j}) rounded to dst's precision, s and p (the LU's row
        permutation) kept on the device (`keep_on_device`; None: none). No wait."""
        if dst.size == 0:
            return
        self.kernels.launch(f"vector_to_low_{_PREFIX[src.dtype]}",
                            (-(-dst.rows // 256), dst.cols), (256,), lane.handle,
                            ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                            ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                            ctypes.c_void_p(permutation or 0), ctypes.c_void_p(scale or 0),
                            ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld))

    def vector_from_low(self, lane, src: DeviceBlock, dst: DeviceBlock, scale):
        """dst_ij := s_i src_ij in dst's precision, s kept on the device (None: ones). No
        wait."""
        if dst.size == 0:
            return
        self.kernels.launch(f"vector_from_low_{_PREFIX[dst.dtype]}",
                            (-(-dst.rows // 256), dst.cols), (256,), lane.handle,
                            ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                            ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                            ctypes.c_void_p(scale or 0), ctypes.c_void_p(dst.ptr),
                            ctypes.c_longlong(dst.ld))

    def butterfly_rows(self, lane, src: DeviceBlock, dst: DeviceBlock, groups, transpose,
                       before=None, after=None):
        """dst := diag(after) op(W) diag(before) src (cuda/butterfly.cu): W the random butterfly
        whose groups (hybridla/butterfly.py) are kept on the device, op(W) = W^T when
        `transpose`; the scales kept on the device, None: none. dst may be src. No wait."""
        if dst.size == 0:
            return
        groups_count = dst.rows // 4 + dst.rows % 4
        self.kernels.launch(f"butterfly_rows_{_PREFIX[dst.dtype]}",
                            (-(-groups_count // 256), dst.cols), (256,), lane.handle,
                            ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                            ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                            ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                            ctypes.c_void_p(groups), ctypes.c_int(1 if transpose else 0),
                            ctypes.c_void_p(before or 0), ctypes.c_void_p(after or 0))

    # -- mixed precision (lapack/_mixed.py, backend/reduced.py, cuda/convert.cu) ----------------
    # These run before or after a factorization's task graph, on the update stream, and wait:
    # their results (scales, flags) decide what the host does next.
    def equilibration(self, lane, owner: DeviceMatrix, A: DeviceBlock, rows, cols,
                      meanwhile=None):
        """backend/reduced.Equilibration of the block A: row_stats, the row scales (ones unless
        `rows`), col_stats of diag(r) A, the column scales (ones unless `cols`), all enqueued
        at once with the scales made on the device (convert.cu's power_of_two_scales), then
        one copy down and one wait. `meanwhile`: host work run while the device makes the two
        passes (the solver's uploads), its result returned with the Equilibration. Three waits
        for the host between the passes cost the LU's convert phase about 1 ms (H100, n =
        32768)."""
        m, n = A.rows, A.cols
        # row max, row sum, column max, column sum (zeroed: atomics merge into them), r, c
        sizes = (m, m, n, n, m, n)
        offsets = np.concatenate([[0], np.cumsum(sizes)]) * 8
        buffer = owner.extra_workspace("equilibration", max(int(offsets[-1]), 8))
        row_max, row_sum, col_max, col_sum, r, c = (buffer + int(o) for o in offsets[:-1])
        gpu = self.lane("gpu:update")
        with gpu:
            _driver.memset_d32_async(buffer, 0, 2 * int(offsets[4] // 8), gpu.handle)
            if A.size:
                grid = (-(-m // _STATS_THREADS), -(-n // _STATS_STRIP))
                matrix = (ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.ld), ctypes.c_int(m),
                          ctypes.c_int(n))
                prefix = _PREFIX[A.dtype]
                self.kernels.launch(f"row_stats_{prefix}", grid, (_STATS_THREADS,), gpu.handle,
                                    *matrix, ctypes.c_void_p(row_max), ctypes.c_void_p(row_sum))
            self._power_of_two_scales(gpu, row_max, m, rows, r)
            if A.size:
                self.kernels.launch(f"col_stats_{prefix}", grid, (_STATS_THREADS,), gpu.handle,
                                    *matrix, ctypes.c_void_p(r), ctypes.c_void_p(col_max),
                                    ctypes.c_void_p(col_sum))
            self._power_of_two_scales(gpu, col_max, n, cols, c)
        kept = meanwhile() if meanwhile is not None else None
        out = np.empty(int(offsets[-1]) // 8)
        with gpu:
            if out.size:
                cublas.get_vector_async(out.size, 8, buffer, 1, out.ctypes.data, 1, gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        parts = np.split(out, offsets[1:-1] // 8)
        return Equilibration(*(parts[i] for i in (4, 5, 0, 1, 2, 3))), kept

    def _power_of_two_scales(self, gpu, largest, count, enabled, scale):
        if count:
            self.kernels.launch("power_of_two_scales", (-(-count // 256),), (256,), gpu.handle,
                                ctypes.c_void_p(largest), ctypes.c_int(count),
                                ctypes.c_int(1 if enabled else 0), ctypes.c_void_p(scale))

    def narrow(self, lane, owner: DeviceMatrix, src: DeviceBlock, dst: DeviceBlock, row_scale,
               col_scale, limit, butterfly=None) -> bool:
        """dst := (r_i c_j src_ij) rounded to dst's precision (float or complex float); with a
        `butterfly` (left, right: random butterflies' groups kept on the device), dst := L^T
        (r src c) R rounded (the square mixed LU's randomized copy, cuda/butterfly.cu). Returns
        whether a part of an entry of dst exceeds `limit`. One read of src, one write of dst
        (dst may be src)."""
        if dst.size == 0:
            return False
        scales = np.concatenate([np.asarray(row_scale, np.float64),
                                 np.asarray(col_scale, np.float64), np.zeros(1)])
        buffer = owner.extra_workspace("narrow scales", scales.nbytes)
        flag = buffer + (dst.rows + dst.cols) * 8
        result = np.zeros(1, dtype=np.float64)
        gpu = self.lane("gpu:update")
        with gpu:
            cublas.set_vector_async(scales.size, 8, scales.ctypes.data, 1, buffer, 1, gpu.handle)
            if butterfly is None:
                self.kernels.launch(f"narrow_{_PREFIX[src.dtype]}",
                                    self._aux_grid(dst.rows, dst.cols), _AUX_BLOCK, gpu.handle,
                                    ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                    ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                                    ctypes.c_void_p(buffer),
                                    ctypes.c_void_p(buffer + dst.rows * 8),
                                    ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                                    ctypes.c_double(limit), ctypes.c_void_p(flag))
            else:
                left, right = butterfly
                groups = dst.rows // 4 + dst.rows % 4
                self.kernels.launch(f"narrow_butterfly_{_PREFIX[src.dtype]}",
                                    self._aux_grid(groups, groups), _AUX_BLOCK, gpu.handle,
                                    ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                    ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                                    ctypes.c_int(dst.rows), ctypes.c_void_p(buffer),
                                    ctypes.c_void_p(buffer + dst.rows * 8), ctypes.c_void_p(left),
                                    ctypes.c_void_p(right), ctypes.c_double(limit),
                                    ctypes.c_void_p(flag))
            cublas.get_vector_async(1, 8, flag, 1, result.ctypes.data, 1, gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        return bool(result.view(np.int32)[0])

    def narrow_hermitian(self, lane, owner: DeviceMatrix, src: DeviceBlock, dst: DeviceBlock,
                         scale, uplo, limit):
        """The `uplo` triangle of dst := (d_i d_j src_ij) rounded to dst's precision, d = scale,
        with the sums of |src_ij| over that triangle per row and per column (float64 host
        arrays) from the same read: (overflow as `narrow`'s, row sums, column sums). dst's other
        triangle is not written."""
        n = dst.rows
        sums = np.zeros(2 * n, dtype=np.float64)
        if n == 0:
            return False, sums[:0], sums[:0]
        # the scale, the sums, the flag (read back with the sums)
        buffer = owner.extra_workspace("narrow hermitian", (3 * n + 1) * 8)
        sums_ptr, flag = buffer + n * 8, buffer + 3 * n * 8
        head = np.concatenate([np.asarray(scale, np.float64), sums, np.zeros(1)])
        result = np.empty_like(head)
        gpu = self.lane("gpu:update")
        with gpu:
            cublas.set_vector_async(head.size, 8, head.ctypes.data, 1, buffer, 1, gpu.handle)
            self.kernels.launch(f"narrow_hermitian_{_PREFIX[src.dtype]}",
                                (-(-n // _STATS_THREADS), -(-n // _STATS_STRIP)),
                                (_STATS_THREADS,), gpu.handle, ctypes.c_void_p(src.ptr),
                                ctypes.c_longlong(src.ld), ctypes.c_int(n),
                                ctypes.c_int(_TRIANGLE_CODE[uplo]), ctypes.c_void_p(buffer),
                                ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                                ctypes.c_double(limit), ctypes.c_void_p(flag),
                                ctypes.c_void_p(sums_ptr), ctypes.c_void_p(sums_ptr + n * 8))
            cublas.get_vector_async(2 * n + 1, 8, sums_ptr, 1, result[n:].ctypes.data, 1,
                                    gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        overflow = bool(result[3 * n:].view(np.int32)[0])
        return overflow, result[n:2 * n].copy(), result[2 * n:3 * n].copy()

    def add_to_diagonal(self, lane, owner: DeviceMatrix, B: DeviceBlock, sigma):
        """B's diagonal += sigma: one axpy with stride ld + 1 (a shifted low-precision
        Cholesky)."""
        k = min(B.rows, B.cols)
        if k == 0:
            return
        shift = owner.workspace("diagonal shift", k, 1)
        self.from_host(lane, np.full((k, 1), sigma, dtype=B.dtype), shift)
        gpu = self.lane("gpu:update")
        with gpu:
            one = self._scalars[B.dtype][0].ctypes.data
            getattr(cublas, _PREFIX[B.dtype] + "axpy")(gpu.blas, k, one, shift.ptr, 1, B.ptr,
                                                       B.ld + 1)
            _driver.stream_synchronize(gpu.handle)

    def prepare_reduced(self, owner: DeviceMatrix, compute, panel_keys=(), leaf_order=0):
        """Before a reduced-precision factorization: the overflow flag zeroed, and for half and
        bfloat16 each compute lane's operand buffers, round_panel's buffers of `panel_keys` and,
        with a `leaf_order`, those of the blocked solves' leaf products (tf32-x3, operands of
        that many columns or rows), allocated at their largest (an allocation during the run
        could synchronize the device)."""
        flag = owner.extra_workspace("overflow flag", 4)
        zero = np.zeros(1, np.int32)
        gpu = self.lane("gpu:update")
        with gpu:
            cublas.set_vector_async(1, 4, zero.ctypes.data, 1, flag, 1, gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        if compute in _OPERAND_TYPE:
            elements, copies = owner.nb * max(owner.m, owner.n), 3 if compute == "half-x3" else 1
            for name in ("gpu:update", "gpu:panel"):
                for operand in "ab":
                    owner.extra_workspace(f"{compute} {operand} {name}",
                                          elements * (4 if compute == "half-x3" else 2))
            for key in panel_keys:
                owner.extra_workspace(_panel_buffer(compute, key), elements * 2 * copies)
        if leaf_order:
            leaf_operand = max(owner.m, owner.n) * leaf_order * 2 * _SPLITS["tf32-x3"].itemsize
            for name in ("gpu:update", "gpu:panel"):
                for operand in "ab":
                    owner.extra_workspace(f"tf32-x3 {operand} {name}", leaf_operand)

    def overflowed(self, owner: DeviceMatrix) -> bool:
        """Whether an operand rounding overflowed (a host wait: after the factorization)."""
        flag = np.zeros(1, np.int32)
        gpu = self.lane("gpu:update")
        with gpu:
            self.synchronize()
            cublas.get_vector_async(1, 4, owner.extra_workspace("overflow flag", 4), 1,
                                    flag.ctypes.data, 1, gpu.handle)
            _driver.stream_synchronize(gpu.handle)
        return bool(flag[0])

    def gemm_reduced(self, lane, owner: DeviceMatrix, compute, alpha, A: DeviceBlock,
                     B: DeviceBlock, beta, C: DeviceBlock, trans_a="N", trans_b="N"):
        """`gemm` on the tensor cores (backend/reduced.py): "single" is sgemm/cgemm; "tf32" the
        same operands with TF32 multiplications; "half" and "bfloat16" round A and B into this
        lane's operand buffers first (convert.cu: one read of 4 bytes, one write of 2 per
        element, overflow flagged) and multiply them with float32 sums."""
        if C.size == 0:
            return
        if compute == "single":
            self.gemm(lane, alpha, A, B, beta, C, trans_a, trans_b)
            return
        k = A.cols if trans_a == "N" else A.rows
        scalars = np.array([alpha, beta], dtype=C.dtype)  # compute type 32F: float scalars
        alpha_ptr, beta_ptr = scalars.ctypes.data, scalars.ctypes.data + scalars.itemsize
        if compute == "tf32":
            ctype = _CUDA_C_32F if C.dtype.kind == "c" else _CUDA_R_32F
            cublas.gemm_ex(lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, k, alpha_ptr,
                           A.ptr, ctype, A.ld, B.ptr, ctype, B.ld, beta_ptr, C.ptr, ctype, C.ld,
                           _COMPUTE_32F_FAST_TF32, _GEMM_DEFAULT)
            return
        if compute in _SPLITS:
            self._gemm_error_corrected(lane, owner, compute, alpha, A, B, beta, C, k, trans_a,
                                       trans_b)
            return
        operand_type, kernel = _OPERAND_TYPE[compute]
        flag = owner.extra_workspace("overflow flag", 4)
        rounded = []
        for name, X in (("a", A), ("b", B)):
            buffer = owner.extra_workspace(f"{compute} {name} {lane.name}", max(X.size, 1) * 2)
            self.kernels.launch(kernel, self._aux_grid(X.rows, X.cols), _AUX_BLOCK, lane.handle,
                                ctypes.c_void_p(X.ptr), ctypes.c_longlong(X.ld),
                                ctypes.c_int(X.rows), ctypes.c_int(X.cols),
                                ctypes.c_void_p(buffer), ctypes.c_longlong(max(X.rows, 1)),
                                ctypes.c_void_p(flag))
            rounded.append((buffer, max(X.rows, 1)))
        (a_ptr, lda), (b_ptr, ldb) = rounded
        cublas.gemm_ex(lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, k, alpha_ptr,
                       a_ptr, operand_type, lda, b_ptr, operand_type, ldb, beta_ptr, C.ptr,
                       _CUDA_R_32F, C.ld, _COMPUTE_32F, _GEMM_DEFAULT)

    def _gemm_error_corrected(self, lane, owner, compute, alpha, A, B, beta, C, k, trans_a,
                              trans_b):
        """C := alpha op(A) op(B) + beta C as hi_A hi_B + scale [hi_A lo_A] [lo_B; hi_B] (the
        second one GEMM with 2k columns): `compute`'s split kernel (convert.cu) writes each
        operand's hi and lo parts side by side in op's terms (A's next to each other as columns
        of op(A), B's on top of each other as rows of op(B)), so the correction is a single
        product. Both operands are split before either GEMM: C may be one of them."""
        flag = owner.extra_workspace("overflow flag", 4)
        split = _SPLITS[compute]
        size = split.itemsize
        placed = {}
        for name, X, trans, lo_first in (("a", A, trans_a, False), ("b", B, trans_b, True)):
            buffer = owner.extra_workspace(f"{compute} {name} {lane.name}",
                                           max(X.size, 1) * 2 * size)
            # op(X) side by side (columns) for A, stacked (rows) for B; in stored terms:
            # "N" A -> columns, "N" B -> rows, and transposed the other way round
            along_columns = (trans == "N") == (name == "a")
            if along_columns:  # stored rows x 2 cols, halves at column offsets 0 and cols
                ld, second = max(X.rows, 1), X.rows * X.cols * size
            else:              # stored 2 rows x cols, halves at row offsets 0 and rows
                ld, second = max(2 * X.rows, 1), X.rows * size
            lo_ptr, hi_ptr = (buffer, buffer + second) if lo_first else (buffer + second, buffer)
            self._split_operand(lane, split, X, hi_ptr, lo_ptr, ld, 0, flag)
            placed[name] = (hi_ptr, buffer, ld)
        self._error_corrected_products(lane, alpha, beta, C, k, trans_a, trans_b, placed["a"],
                                       placed["b"], split)

    def _split_operand(self, lane, split, X, hi_ptr, lo_ptr, ld, hi_again_ptr, flag):
        self.kernels.launch(split.kernel, self._aux_grid(X.rows, X.cols), _AUX_BLOCK, lane.handle,
                            ctypes.c_void_p(X.ptr), ctypes.c_longlong(X.ld), ctypes.c_int(X.rows),
                            ctypes.c_int(X.cols), ctypes.c_void_p(hi_ptr), ctypes.c_longlong(ld),
                            ctypes.c_void_p(lo_ptr), ctypes.c_longlong(ld),
                            ctypes.c_void_p(hi_again_ptr), ctypes.c_void_p(flag))

    @staticmethod
    def _error_corrected_products(lane, alpha, beta, C, k, trans_a, trans_b, a, b,
                                  split=_SPLITS["half-x3"]):
        """The two GEMMs of an error-corrected product from operands already split: a and b are
        (hi pointer, concatenation pointer, leading dimension), [hi_A lo_A] and [lo_B; hi_B] in
        op's terms."""
        (a_hi, a_cat, lda), (b_hi, b_cat, ldb) = a, b
        # (alpha, beta) of hi hi, then (alpha scale, 1) of the correction
        scalars = np.array([alpha, beta, alpha * split.scale, 1], dtype=np.float32)
        first = scalars.ctypes.data
        for a_ptr, b_ptr, depth, scalar in ((a_hi, b_hi, k, first), (a_cat, b_cat, 2 * k,
                                                                        first + 8)):
            cublas.gemm_ex(lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, depth, scalar,
                           a_ptr, split.operand_type, lda, b_ptr, split.operand_type, ldb,
                           scalar + 4, C.ptr, _CUDA_R_32F, C.ld, split.compute_type,
                           _GEMM_DEFAULT)

    def round_panel(self, lane, owner: DeviceMatrix, compute, A: DeviceBlock, trans, key=None):
        """The panel of a reduced-precision HERK (backend/reduced.py; op(A) = A for trans "N",
        A^H for "C") rounded once for all the GEMMs that take parts of it, where each GEMM of
        gemm_reduced rounds its own operands: one pass over the panel per HERK instead of one
        per strip and operand. half-x3 keeps [hi lo hi] along k (side by side for "N", stacked
        for "C"): [hi lo] of a part is one GEMM operand, [lo hi] of another part the other.
        The buffer is the store's, one per `key` (default: the lane's name): a rounding waits,
        through the graph or its lane, for the GEMMs of the last one with its key."""
        if compute not in _OPERAND_TYPE:  # single, tf32: the float32 panel as it is
            return _RoundedPanel(compute, A, A.ptr, A.ld, 0, trans == "N", 4)
        operand_type, kernel = _OPERAND_TYPE[compute]
        copies = 3 if compute == "half-x3" else 1
        k, along_rows = (A.cols, True) if trans == "N" else (A.rows, False)
        buffer = owner.extra_workspace(_panel_buffer(compute, key or lane.name),
                                       max(A.size, 1) * 2 * copies)
        ld = max(A.rows, 1) * (1 if along_rows else copies)
        block = (k * ld if along_rows else k) * 2  # bytes from hi to lo, and lo to hi
        flag = owner.extra_workspace("overflow flag", 4)
        if compute == "half-x3":
            self._split_operand(lane, _SPLITS[compute], A, buffer, buffer + block, ld,
                                buffer + 2 * block, flag)
        else:
            self.kernels.launch(kernel, self._aux_grid(A.rows, A.cols), _AUX_BLOCK, lane.handle,
                                ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.ld),
                                ctypes.c_int(A.rows), ctypes.c_int(A.cols),
                                ctypes.c_void_p(buffer), ctypes.c_longlong(ld),
                                ctypes.c_void_p(flag))
        return _RoundedPanel(compute, A, buffer, ld, block, along_rows, 2)

    def gemm_rounded_panel(self, lane, owner, panel, alpha, first, second, beta, C: DeviceBlock,
                           trans_a, trans_b):
        """C := alpha op(part first) op(part second) + beta C, the parts (i0, i1) of a
        round_panel along its long side, on the tensor cores as gemm_reduced."""
        if panel.compute not in _OPERAND_TYPE:
            self.gemm_reduced(lane, owner, panel.compute, alpha, panel.source_part(*first),
                              panel.source_part(*second), beta, C, trans_a, trans_b)
            return
        a, b = panel.pointer(first[0]), panel.pointer(second[0])
        if panel.compute == "half-x3":
            self._error_corrected_products(lane, alpha, beta, C, panel.k, trans_a, trans_b,
                                           (a, a, panel.ld), (b, b + panel.block, panel.ld))
            return
        operand_type, _ = _OPERAND_TYPE[panel.compute]
        scalars = np.array([alpha, beta], dtype=np.float32)
        cublas.gemm_ex(lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, panel.k,
                       scalars.ctypes.data, a, operand_type, panel.ld, b, operand_type, panel.ld,
                       scalars.ctypes.data + 4, C.ptr, _CUDA_R_32F, C.ld, _COMPUTE_32F,
                       _GEMM_DEFAULT)

    def herk(self, lane, uplo, trans, alpha, A: DeviceBlock, beta, C: DeviceBlock):
        """The `uplo` triangle of C := alpha op(A) op(A)^H + beta C, op "N" or "C"."""
        if C.size == 0:
            return
        name, real = _HERK[C.dtype]
        k = A.cols if trans == "N" else A.rows
        op = _OP[trans] if C.dtype.kind == "c" else _OP["N" if trans == "N" else "T"]
        scalars = np.array([alpha, beta], dtype=real)  # real, as herk takes them
        getattr(cublas, name)(lane.blas, _UPLO[uplo], op, C.rows, k, scalars.ctypes.data,
                              A.ptr, A.ld, scalars.ctypes.data + scalars.itemsize, C.ptr, C.ld)

    def herk_diagonal_blocks(self, lane, uplo, trans, alpha, A: DeviceBlock, C: DeviceBlock, nb,
                             scratch: DeviceBlock):
        """The `uplo` triangles of C's diagonal blocks of nb (the last one may be smaller)
        += alpha op(A) op(A)^H for the matching rows ("N") or columns ("C") of A. cuBLAS's herk
        on one small block runs far below gemm's rate and each is a launch of its own, so the
        full blocks are strided-batched gemms: each block's triangle halved (the square between
        its halves, for all blocks in one call) down to blocks of `_DIAGONAL_LEAF`, whose full
        squares, both triangles, go to `scratch` (nb x C.rows or more) in one more call, and
        whose `uplo` triangles one kernel adds to C (the other triangle of C is not touched:
        LAPACK's contract for the user's matrix). Squares of the leaf's order rather than nb's
        cut the flops spent on the other triangle by nb / leaf."""
        full, rest = divmod(C.rows, nb)
        if rest:
            start = full * nb
            part = A.sub(start, A.rows, 0, A.cols) if trans == "N" else \
                A.sub(0, A.rows, start, A.cols)
            self.herk(lane, uplo, trans, alpha, part, 1, C.sub(start, C.rows, start, C.cols))
        if not full:
            return
        dtype, k = C.dtype, A.cols if trans == "N" else A.rows
        item = dtype.itemsize
        # from one row (column) of op(A) to the next, in elements of A
        unit = 1 if trans == "N" else A.ld
        ops = ("N", "C") if trans == "N" else ("C", "N")
        leaf = nb
        while leaf % 2 == 0 and leaf // 2 >= _DIAGONAL_LEAF:
            half, leaf = leaf // 2, leaf // 2
            # in each diagonal block of order 2 half: the square below (lower) or right of
            # (upper) its two triangles of order half
            first, second = (half, 0) if uplo == "L" else (0, half)
            _GEMM_STRIDED[dtype](
                lane.blas, _OP[ops[0]], _OP[ops[1]], half, half, k, self._scalar(dtype, alpha),
                A.ptr + first * unit * item, A.ld, 2 * half * unit,
                A.ptr + second * unit * item, A.ld, 2 * half * unit,
                self._scalar(dtype, 1),
                C.ptr + (first + second * C.ld) * item, C.ld, 2 * half * (C.ld + 1),
                full * nb // (2 * half))
        blocks = full * nb // leaf
        _GEMM_STRIDED[dtype](lane.blas, _OP[ops[0]], _OP[ops[1]], leaf, leaf, k,
                             self._scalar(dtype, alpha), A.ptr, A.ld, leaf * unit, A.ptr, A.ld,
                             leaf * unit, self._scalar(dtype, 0), scratch.ptr, leaf, leaf * leaf,
                             blocks)
        self.kernels.launch(f"add_triangles_{_PREFIX[dtype]}", (*self._aux_grid(leaf, leaf),
                                                                blocks),
                            _AUX_BLOCK, lane.handle, ctypes.c_void_p(scratch.ptr),
                            ctypes.c_longlong(leaf), ctypes.c_longlong(leaf * leaf),
                            ctypes.c_void_p(C.ptr), ctypes.c_longlong(C.ld),
                            ctypes.c_longlong(leaf * (C.ld + 1)), ctypes.c_int(leaf),
                            ctypes.c_int(_LASET_PART[uplo]))

    def invert_triangular_blocks(self, lane, uplo, diag, T: DeviceBlock, b, W: DeviceBlock,
                                 scratch: DeviceBlock):
        """W_c := T_cc^-1 for the diagonal blocks of order b of the square T (the last one
        may be smaller), each W_c at columns c (b + 1) of W (b rows, ld b, `inverse_columns`
        columns), the other triangle zero: the layout of the diagonal blocks of a matrix of
        leading dimension b, so that every level below is one strided-batched call for all
        blocks. Each block is halved down to leaves of at most _INVERSE_LEAF (lapack_aux.cu's
        invert_leaves, one thread block each), then for each pair of halves, lower
        W21 = -W22 (T21 W11) (upper W12 = -(W11 T12) W22): two gemms. cuBLAS trsm on the identity
        took 0.5-0.9 ms per 1024 block in float32 on the H100 (2026-11-23), on the Cholesky's
        critical path once a step. `scratch`: at least b x max(b, n) / 4 elements."""
        n = T.rows
        if W.ld != b:
            raise ValueError(f"invert_triangular_blocks: W's leading dimension {W.ld} is not "
                             f"the block order {b}")
        if n == 0:
            return
        self.laset(lane, "A", 0, 0, W)
        full, rest = divmod(n, b)
        item = T.dtype.itemsize
        if full:
            self._invert_halving(lane, uplo, diag, T.ptr, T.ld, W.ptr, W.ld, b, full, scratch)
        if rest:
            start = full * b
            self._invert_halving(lane, uplo, diag, T.ptr + start * (T.ld + 1) * item, T.ld,
                                 W.ptr + start * (W.ld + 1) * item, W.ld, rest, 1, scratch)

    def _invert_halving(self, lane, uplo, diag, t, ldt, w, ldw, order, count, scratch):
        """The inverses of `count` triangular blocks of `order` on the diagonals of t and w
        (consecutive: block c at c order (ld + 1))."""
        dtype = scratch.dtype
        if order <= _INVERSE_LEAF or order % 2:
            self.kernels.launch(f"invert_leaves_{_PREFIX[dtype]}", (count,),
                                (min(_INVERSE_LEAF, order),), lane.handle, ctypes.c_void_p(t),
                                ctypes.c_longlong(ldt), ctypes.c_longlong(order * (ldt + 1)),
                                ctypes.c_void_p(w), ctypes.c_longlong(ldw),
                                ctypes.c_longlong(order * (ldw + 1)), ctypes.c_int(order),
                                ctypes.c_int(uplo == "L"), ctypes.c_int(diag == "U"))
            return
        half = order // 2
        self._invert_halving(lane, uplo, diag, t, ldt, w, ldw, half, 2 * count, scratch)
        item = dtype.itemsize
        t11, w11 = t, w
        t22, w22 = t + half * (ldt + 1) * item, w + half * (ldw + 1) * item
        stride_t, stride_w = order * (ldt + 1), order * (ldw + 1)
        gemm, one, zero = _GEMM_STRIDED[dtype], self._scalar(dtype, 1), self._scalar(dtype, 0)
        minus = self._scalar(dtype, -1)
        op = _OP["N"]
        if uplo == "L":  # scratch := T21 W11, W21 := -W22 scratch
            t21, w21 = t + half * item, w + half * item
            gemm(lane.blas, op, op, half, half, half, one, t21, ldt, stride_t, w11, ldw, stride_w,
                 zero, scratch.ptr, half, half * half, count)
            gemm(lane.blas, op, op, half, half, half, minus, w22, ldw, stride_w, scratch.ptr,
                 half, half * half, zero, w21, ldw, stride_w, count)
        else:            # scratch := W11 T12, W12 := -scratch W22
            t12, w12 = t + half * ldt * item, w + half * ldw * item
            gemm(lane.blas, op, op, half, half, half, one, w11, ldw, stride_w, t12, ldt, stride_t,
                 zero, scratch.ptr, half, half * half, count)
            gemm(lane.blas, op, op, half, half, half, minus, scratch.ptr, half, half * half, w22,
                 ldw, stride_w, zero, w12, ldw, stride_w, count)

    def trsm(self, lane, side, uplo, trans, diag, alpha, T: DeviceBlock, B: DeviceBlock):
        if B.size == 0:
            return
        trsm = getattr(cublas, _PREFIX[B.dtype] + "trsm")
        trsm(lane.blas, _SIDE[side], _UPLO[uplo], _OP[trans], _DIAG[diag], B.rows, B.cols,
             self._scalar(B.dtype, alpha), T.ptr, T.ld, B.ptr, B.ld)

    def trsv(self, lane, uplo, trans, diag, T: DeviceBlock, x: DeviceBlock):
        """x := op(T)^-1 x for one column x (cuBLAS trsv: the level-2 solve of one right-hand
        side; the condition estimator's products)."""
        if x.size == 0:
            return
        getattr(cublas, _PREFIX[x.dtype] + "trsv")(lane.blas, _UPLO[uplo], _OP[trans],
                                                    _DIAG[diag], x.rows, T.ptr, T.ld, x.ptr, 1)

    def gemm(self, lane, alpha, A: DeviceBlock, B: DeviceBlock, beta, C: DeviceBlock,
             trans_a="N", trans_b="N"):
        if C.rows == 0 or C.cols == 0:
            return
        dtype = C.dtype
        k = A.cols if trans_a == "N" else A.rows
        if C.cols == 1 and trans_b == "N" and k > 0:  # (BLAS gemv leaves y alone when k = 0)
            # a matrix times a vector (gehrd's panel loop, refinement): cuBLAS's gemv reads A
            # at a higher rate than its gemm with one column (64% of the copy bandwidth at
            # n = 8192 on the H100 for gemm)
            _GEMV[dtype](lane.blas, _OP[trans_a], A.rows, A.cols, self._scalar(dtype, alpha),
                         A.ptr, A.ld, B.ptr, 1, self._scalar(dtype, beta), C.ptr, 1)
            return
        _GEMM[dtype](lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, k,
                     self._scalar(dtype, alpha), A.ptr, A.ld, B.ptr, B.ld,
                     self._scalar(dtype, beta), C.ptr, C.ld)

    def geam_transpose(self, lane, src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, dtype):
        """dst (rows x cols, column-major) := transpose of src (cols x rows, column-major)."""
        geam = getattr(cublas, _PREFIX[np.dtype(dtype)] + "geam")
        one, _, zero = (s.ctypes.data for s in self._scalars[np.dtype(dtype)])
        geam(lane.blas, _OP["T"], _OP["N"], rows, cols, one, src_ptr, src_ld, zero, dst_ptr,
             dst_ld, dst_ptr, dst_ld)

    def copy_device(self, src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, itemsize):
        """A device-to-device 2-D copy, finished when this returns (used before a run starts)."""
        copy = drv.Memcpy2D()
        copy.set_src_device(src_ptr)
        copy.src_pitch = src_ld * itemsize
        copy.set_dst_device(dst_ptr)
        copy.dst_pitch = dst_ld * itemsize
        copy.width_in_bytes = rows * itemsize
        copy.height = cols
        self.context.push()
        try:
            copy(aligned=False)  # user arrays may be laid out oddly: slower, never wrong
        finally:
            drv.Context.pop()

    def _scalar(self, dtype, value):
        """A host pointer to the scalar (cuBLAS's default pointer mode, which reads it before the
        call returns): 1, -1 and 0 kept by the backend, any other value in a small ring of this
        thread's (it outlives the call that asked for it by seven more)."""
        standard = self._standard_scalars[dtype].get(value) \
            if isinstance(value, (int, float)) else None
        if standard is not None:
            return standard
        ring = getattr(self._scalar_ring, "arrays", None)
        if ring is None:
            ring = self._scalar_ring.arrays = [None] * 8
            self._scalar_ring.next = 0
        slot = self._scalar_ring.next
        self._scalar_ring.next = (slot + 1) % len(ring)
        ring[slot] = np.array(value, dtype=dtype)
        return ring[slot].ctypes.data
