"""Host <-> device on the cuda backend: the threaded host copies into and out of the pinned
staging slots (memory.staging_slots); the transfers of a tile store whose home is a host
array (the CPU interface: staged through the slots, pinned in place in pieces, or pageable;
StreamedTileStore in backend/ops.py), and the pinned buffers of CPU panels; blocks to and from
host arrays, complete on return (to_host, from_host).

Module-level functions: those over the backend (host_copy, to_host, from_host)
the facade binds; those over the store `A` (a DeviceMatrix) DeviceMatrix binds as its methods.
"""
from __future__ import annotations

import os
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas

from .. import _driver
from ..pinning import plan_pieces, split_at_cuts

# How a host-resident matrix travels (device.host_transfer): through pinned slots that host
# threads fill and empty, by pinning the user's array in place, or by the driver's pageable copies.
HOST_TRANSFERS = ("staged", "register", "pageable")


# -- threaded host copies (the backend's; its pinned staging slots are memory.staging_slots) ------
def host_copy(backend, dst: np.ndarray, src: np.ndarray, copy_threads: int = 0):
    """dst[...] = src, cut by columns over `copy_threads` threads (the store's
    DeviceSettings.copy_threads; 0: one per core): one thread's memcpy reaches a fraction of
    the host's memory bandwidth (NumPy releases the GIL while copying)."""
    threads = max(1, int(copy_threads or os.cpu_count() or 1))
    cols = dst.shape[1]
    if threads == 1 or cols < 2:
        np.copyto(dst, src)
        return
    if backend._copy_pool is None or backend._copy_pool_size != threads:  # made, or it moved
        if backend._copy_pool is not None:
            backend._copy_pool.shutdown(wait=False)
        backend._copy_pool = ThreadPoolExecutor(threads, thread_name_prefix="hybridla-copy")
        backend._copy_pool_size = threads
    step = -(-cols // threads)
    futures = [backend._copy_pool.submit(np.copyto, dst[:, j:j + step], src[:, j:j + step])
               for j in range(0, cols, step)]
    for future in futures:
        future.result()


# -- host-driven loops on store blocks (gehrd's panel): each call is complete on return, as
# a CPU task that calls them leaves no device event behind for later tasks to wait on
def to_host(backend, lane, B, out=None) -> np.ndarray:
    """A new F-ordered host array holding the block B, or `out` (F-ordered, B's shape and
    dtype) filled and returned: one 2-D copy down on the critical-path stream, after the
    work queued on `lane` so far, and a wait."""
    if out is None:
        out = np.empty(B.shape, dtype=B.dtype, order="F")
    elif out.shape != B.shape or out.dtype != B.dtype or not out.flags.f_contiguous:
        raise ValueError(f"to_host: out must be an F-ordered {B.shape} {B.dtype} array")
    if out.size:
        gpu = backend.lane("gpu:panel")
        with gpu:
            _after(gpu, lane)
            cublas.get_matrix_async(B.rows, B.cols, B.dtype.itemsize, B.ptr, B.ld,
                                    out.ctypes.data, B.rows, gpu.handle)
            _driver.stream_synchronize(gpu.handle)
    return out


def _after(gpu, lane):
    """The copies' stream `gpu` waits for what `lane` (another lane's stream) has queued: a
    copy down of a block that a task on the update lane wrote read it half-written (the
    trsm tests on the H100, 2026-11-25, for blocks of 256 x 300 and more)."""
    if lane is not None and lane is not gpu:
        gpu.wait_for([lane.record()])


def from_host(backend, lane, x: np.ndarray, B):
    """The block B := the host array x (B's shape): one 2-D copy up, after the work queued
    on `lane` so far, and a wait, so that x may be reused as soon as this returns."""
    if x.shape != B.shape:
        raise ValueError(f"from_host: a {x.shape} array for a {B.shape} block")
    x = np.asfortranarray(x, dtype=B.dtype)
    if x.size:
        gpu = backend.lane("gpu:panel")
        with gpu:
            _after(gpu, lane)
            cublas.set_matrix_async(B.rows, B.cols, B.dtype.itemsize, x.ctypes.data,
                                    B.rows, B.ptr, B.ld, gpu.handle)
            _driver.stream_synchronize(gpu.handle)


# -- pinning the host matrix in pieces (see pinning.py) -----------------------------------------
def plan_pin_pieces(A, pieces: int):
    """Cut the host source into `pieces` pinned ranges; returns each one's first block column."""
    first_blocks, A.pin_ranges, A.pin_cuts = plan_pieces(
        A.host_source.ctypes.data, A.host_source.nbytes, A.m, A.n, A.nb, A.itemsize, pieces)
    return first_blocks


def pin_piece(A, piece: int):
    """Pin one piece (runs in a Dask worker: the context is pushed here). A piece the driver
    will not pin is copied pageable; the cuts keep every copy on one side of it."""
    lo, hi = A.pin_ranges[piece]
    A.backend.context.push()
    try:
        _driver.host_register(lo, hi - lo)
        A._registered.append(lo)
    except _driver.CudaDriverError as exc:
        warnings.warn(f"could not pin part of the host matrix ({exc}); its copies will be "
                      f"slower", RuntimeWarning, stacklevel=2)
    finally:
        drv.Context.pop()


def pin_host(A, lo: int, hi: int) -> bool:
    """Pin the host pages [lo, hi) in place until `close` (out of core's host matrix, in
    pieces: lapack/_ooc.py); False, with a warning, where the driver refuses (its copies then
    go at pageable speed). Runs in a Dask worker: the context is pushed here."""
    A.backend.context.push()
    try:
        _driver.host_register(lo, hi - lo)
        A._registered.append(lo)
        return True
    except _driver.CudaDriverError as exc:
        warnings.warn(f"could not pin part of the host matrix ({exc}); its copies will be "
                      f"slower", RuntimeWarning, stacklevel=2)
        return False
    finally:
        drv.Context.pop()


def _host_view(array: np.ndarray):
    """(address, leading dimension) of a 2-D host view whose columns are contiguous."""
    if array.ndim != 2 or (array.shape[0] > 1 and array.strides[0] != array.itemsize):
        raise ValueError("a direct host copy needs a 2-D view with contiguous columns")
    return array.ctypes.data, max(1, array.strides[1] // array.itemsize)


def upload_array(A, lane, source, r0, r1, c0, c1):
    """Rows r0:r1 x columns c0:c1 := the host view `source`, one 2-D DMA on the lane's
    stream straight from where it lies (asynchronous where it is pinned: `pin_host`)."""
    if r1 > r0 and c1 > c0:
        address, ld = _host_view(source)
        cublas.set_matrix_async(r1 - r0, c1 - c0, A.itemsize, address, ld,
                                A.ptr + (r0 + c0 * A.ld) * A.itemsize, A.ld, lane.handle)
        A._sum_columns(lane, r0, r1, c0, c1)


def download_array(A, lane, r0, r1, c0, c1, target):
    """The host view `target` := rows r0:r1 x columns c0:c1, one 2-D DMA on the lane's
    stream (see upload_array)."""
    if r1 > r0 and c1 > c0:
        address, ld = _host_view(target)
        cublas.get_matrix_async(r1 - r0, c1 - c0, A.itemsize,
                                A.ptr + (r0 + c0 * A.ld) * A.itemsize, A.ld, address, ld,
                                lane.handle)


# -- staging through pinned slots (see staging_slots) -------------------------------------------
# The least a slot holds. A staged copy costs about a millisecond beyond its bytes (the
# staging task, its threads, the DMA's launch): gehrd's 48-column blocks of an 8192 x 8192
# matrix (3 MiB) went up at 2.6 GB/s, 205 ms for the matrix before the first panel could start
# (perf/RESULTS.md, "Hessenberg"); bring_up sends as many block columns at once as a slot holds.
SLOT_MIN_BYTES = 32 << 20


def use_staging(A, up_slots: int, down_slots: int):
    """Copy this host matrix through the backend's pinned slots: host threads copy between
    the user's pageable array and a slot, DMA between the slot and the device. A slot holds
    nb x max(m, n) elements; one factorization at a time uses the slots (the lock is held
    until `close`); at least SLOT_MIN_BYTES, up to the whole matrix, so that a narrow block
    column does not travel alone."""
    A.slot_elements = max(A.nb * max(A.m, A.n), min(SLOT_MIN_BYTES // A.itemsize, A.m * A.n))
    A.backend.staging_lock.acquire()
    slots = A.backend.staging_slots(up_slots + down_slots, A.slot_elements * A.itemsize)
    A._slots = {"up": slots[:up_slots], "down": slots[up_slots:]}
    A.up_slots, A.down_slots = up_slots, down_slots
    A.staged = True


def end_staging(A):
    """Give the pinned slots back (another matrix may stage now); `close` does it too."""
    if A._slots is not None:
        A._slots = None
        A.staged = False
        A.backend.staging_lock.release()


def upload_in_background(A):
    """Upload the whole host source, staged through two pinned slots, from a host thread of
    its own on a copy stream of its own, while the caller goes on: the working matrix of a
    mixed solve, which only the refinement reads, travels while the low-precision
    factorization runs. (Pinning the user's array in place instead stalled the GPU work
    queued meanwhile and made the factorization longer: perf/RESULTS.md, "Earlier today
    (11:11-12:20 UTC)".)
    Returns a function that waits for the upload to finish (re-raising its error) and gives
    the slots back."""
    A.use_staging(2, 0)
    lane = A.backend.lane("copy:h2d-background")
    failures = []

    def upload():
        A.backend.context.push()
        try:
            in_flight = [None, None]
            for block, c0 in enumerate(range(0, A.n, A.nb)):
                c1, slot = min(c0 + A.nb, A.n), block % 2
                if in_flight[slot] is not None:  # the slot's last DMA must be done
                    in_flight[slot].synchronize()
                A.stage_block(lane, slot, 0, A.m, c0, c1)
                A.upload_staged(lane, slot, 0, A.m, c0, c1)
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
        A.end_staging()
        if failures:
            raise failures[0]
    return wait


def transfer(A) -> str:
    """How the host matrix travels: "staged", "register" or "pageable"."""
    return "staged" if A.staged else "register" if A.pin else "pageable"


def _slot(A, direction, slot, rows, cols):
    raw = A._slots[direction][slot][: rows * cols * A.itemsize]
    return raw.view(A.dtype).reshape((rows, cols), order="F")


def stage_block(A, lane, slot, r0, r1, c0, c1):
    """Host side of an upload: rows r0:r1 x columns c0:c1 of the user's array into an up
    slot (a block column or a block row: at most nb x max(m, n) elements)."""
    stage_array(A, lane, slot, A.host_source[r0:r1, c0:c1])


def stage_array(A, lane, slot, source):
    """Host side of an upload from any 2-D host array `source` (a rectangle of out-of-core's
    host matrix: lapack/_ooc.py) into up slot `slot`, by the store's copy threads. A source
    whose rows are contiguous (a C-ordered block, such as a dask array's chunk) goes into the
    slot as it lies, its transpose column-major, and `upload_staged` transposes it on the
    device: copied into column order on the host, each thread's reads were strided, and a
    worker's 17 GB of such blocks took 2.7 s to stage at n = 65536 on 2 x H100 against 0.5 s
    for column-ordered ones (perf/RESULTS.md, issue 32)."""
    rows, cols = source.shape
    transposed = _rows_contiguous(source)
    target = _slot(A, "up", slot, *((cols, rows) if transposed else (rows, cols)))
    A.backend.host_copy(target, source.T if transposed else source, A.settings.copy_threads)
    A._transposed_slots[slot] = transposed


def _rows_contiguous(array) -> bool:
    """Whether a 2-D host array's rows are contiguous and its columns are not (C order)."""
    rows, cols = array.shape
    return cols > 1 and rows > 1 and array.strides[1] == array.itemsize and \
        array.strides[0] != array.itemsize


def upload_staged(A, lane, slot, r0, r1, c0, c1):
    """Device side of an upload: up slot `slot` to rows r0:r1 x columns c0:c1, one DMA (a
    slot staged transposed: one DMA into the lane's transposition buffer, then a cuBLAS
    transpose into place, both on the lane's stream, so that the next upload's DMA into the
    buffer follows the transpose that reads it)."""
    rows, cols = r1 - r0, c1 - c0
    if not A._transposed_slots.get(slot, False):
        _copy2d(A, lane, r0, r1, c0, c1, to_device=True,
                host_array=_slot(A, "up", slot, rows, cols))
    elif rows and cols:
        buffer = _transposition_buffer(A, lane)
        drv.memcpy_htod_async(int(buffer), A._slots["up"][slot][:rows * cols * A.itemsize],
                              lane.stream)
        A.backend.geam_transpose(lane, int(buffer), cols,
                                 A.ptr + (r0 + c0 * A.ld) * A.itemsize, A.ld, rows, cols,
                                 A.dtype)
    A._sum_columns(lane, r0, r1, c0, c1)


def _transposition_buffer(A, lane):
    """The device buffer (a slot's size) that transposed slots go through on `lane`, one per
    lane (its copies are ordered by that lane's stream alone); made on first use."""
    if lane.name not in A._transposition_buffers:
        A._transposition_buffers[lane.name] = A._alloc(A.slot_elements * A.itemsize)
    return A._transposition_buffers[lane.name]


def download_staged(A, lane, slot, r0, r1, c0, c1):
    _copy2d(A, lane, r0, r1, c0, c1, to_device=False,
            host_array=_slot(A, "down", slot, r1 - r0, c1 - c0))


def unstage_block(A, lane, slot, r0, r1, c0, c1):
    """Host side of a download: a down slot into the user's array at its place."""
    unstage_array(A, lane, slot, A.host_result[r0:r1, c0:c1])


def unstage_array(A, lane, slot, target):
    """Host side of a download into any 2-D host array `target` (its shape the slot's)."""
    A.backend.host_copy(target, _slot(A, "down", slot, *target.shape), A.settings.copy_threads)


# -- host <-> device: 2-D copies of the store's rectangles --------------------------------------
def _copy2d(A, lane, r0, r1, c0, c1, to_device, host_array=None):
    """Rows r0:r1 x columns c0:c1 between the device matrix and a host array: the user's
    (same coordinates; cut where its pinned pieces meet) or a panel buffer (whose element
    (0, 0) is the block's first)."""
    if host_array is None and A.pin_cuts:
        for piece in split_at_cuts(r0, r1, c0, c1, A.m, A.pin_cuts):
            _copy2d_piece(A, lane, *piece, to_device)
    else:
        _copy2d_piece(A, lane, r0, r1, c0, c1, to_device, host_array)


def _copy2d_piece(A, lane, r0, r1, c0, c1, to_device, host_array=None):
    copy = drv.Memcpy2D()
    device_ptr = A.ptr + (r0 + c0 * A.ld) * A.itemsize
    if host_array is None:
        host = A.host_source if to_device else A.host_result
        host_ld, host_offset = A.m, r0 + c0 * A.m
    else:
        host, host_ld, host_offset = host_array, host_array.shape[0], 0
    host_buffer = host.reshape(-1, order="F")[host_offset:]
    if to_device:
        copy.set_src_host(host_buffer)
        copy.src_pitch = host_ld * A.itemsize
        copy.set_dst_device(device_ptr)
        copy.dst_pitch = A.ld * A.itemsize
    else:
        copy.set_src_device(device_ptr)
        copy.src_pitch = A.ld * A.itemsize
        copy.set_dst_host(host_buffer)
        copy.dst_pitch = host_ld * A.itemsize
    copy.width_in_bytes = (r1 - r0) * A.itemsize
    copy.height = c1 - c0
    copy(lane.stream)


def upload_block(A, lane, r0, r1, c0, c1):
    """Rows r0:r1 x columns c0:c1 of the host matrix to the same place on the device."""
    if r1 > r0 and c1 > c0:
        _copy2d(A, lane, r0, r1, c0, c1, to_device=True)
        A._sum_columns(lane, r0, r1, c0, c1)


def download_rows(A, lane, r0, r1):
    """Rows r0:r1 of the device matrix, all columns, to the host matrix: they are final."""
    A.download_block(lane, r0, r1, 0, A.n)


def download_block(A, lane, r0, r1, c0, c1):
    """A finished block of the device matrix to the same place in the host matrix."""
    if r1 > r0 and c1 > c0:
        _copy2d(A, lane, r0, r1, c0, c1, to_device=False)


# -- CPU panels: pinned buffers ----------------------------------------------------------------
def pinned_panel(A, step, rows, cols):
    """A pinned F-ordered buffer for the CPU panel of `step`; two alternate, so the download
    of the next panel never waits for the upload of this one to free its buffer."""
    slot = step % 2
    buffer = A._pinned_panels.get(slot)
    if buffer is None or buffer.size < rows * cols:
        buffer = drv.pagelocked_empty(max(rows * cols, 1), A.dtype)
        A._pinned_panels[slot] = buffer
    return buffer[: rows * cols].reshape((rows, cols), order="F")


def panel_to_host(A, lane, step, r0, c0, c1, r1=None):
    """Rows r0:r1 (r1 None: to the last) of columns c0:c1 into the step's pinned buffer."""
    r1 = A.m if r1 is None else r1
    buffer = A.pinned_panel(step, r1 - r0, c1 - c0)
    _copy2d(A, lane, r0, r1, c0, c1, to_device=False, host_array=buffer)


def panel_to_device(A, lane, step, r0, c0, c1, r1=None):
    """The factored panel back, with what its factorization produced for entries c0:c1
    (pivots or tau), which the device needs for the updates."""
    r1 = A.m if r1 is None else r1
    buffer = A.pinned_panel(step, r1 - r0, c1 - c0)
    _copy2d(A, lane, r0, r1, c0, c1, to_device=True, host_array=buffer)
    if step in A._tau_from_host:
        t0, t1 = A._tau_from_host.pop(step)
        if A._pinned_tau is None:
            A._pinned_tau = drv.pagelocked_empty(max(A.tau.size, 1), A.dtype)
        A._pinned_tau[t0:t1] = A.tau[t0:t1]
        drv.memcpy_htod_async(int(A.tau_dev) + t0 * A.itemsize, A._pinned_tau[t0:t1],
                              lane.stream)
        return
    if A._pinned_pivots is None:
        A._pinned_pivots = drv.pagelocked_empty(max(A.pivots.size, 1), np.int32)
    A._pinned_pivots[c0:c1] = A.pivots[c0:c1]
    drv.memcpy_htod_async(int(A.pivots_dev) + c0 * 4, A._pinned_pivots[c0:c1], lane.stream)
