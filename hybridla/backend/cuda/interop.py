"""The GPU interface of the cuda backend: the user's device arrays (PyCUDA GPUArray, CuPy,
PyTorch, Numba: anything with __cuda_array_interface__; a DLPack-only array comes as
backend/device_arrays.DLPackArray) as tile stores, in place or copied column-major, result
arrays of the user's kind, and the device primitives with which backend/device_arrays.admit
checks and orders the user's arrays as they come in (pointer_device, consumer_stream,
stream_synchronize).

Module-level functions; those over the backend (device_matrix, wrap, empty, has_nonfinite) the
facade binds.
"""
from __future__ import annotations

import ctypes

import numpy as np
import pycuda.driver as drv

from .. import _driver
from ..device_arrays import (DLPackArray, array_library, column_major, device_array_layout,
                             factored_in_place)
from ..ops import DeviceSettings
from .memory import DeviceArray


def _like(template, out: DeviceArray):
    """`out` as the same kind of array as the user's input (CuPy, PyTorch, PyCUDA, or a DLPack
    producer's, through its library's from_dlpack), sharing memory."""
    if isinstance(template, DLPackArray):
        return template.like(out)
    module = array_library(template)
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


def device_matrix(backend, obj, nb, overwrite, settings: DeviceSettings | None = None):
    """Wrap a user's 2-D device array (anything with __cuda_array_interface__) as the working
    matrix. Returns (matrix, result, write_back): `result` is the array to give the user;
    `write_back()`, if not None, must run after the factorization (a row-major input
    factored in a column-major copy goes back into the user's array when overwrite).
    `settings`: the run's DeviceSettings for the store (None: the defaults)."""
    ptr, (m, n), dtype, strides = device_array_layout(obj)
    itemsize = dtype.itemsize
    lane = backend.lane("gpu:update")
    # the pending writes to the array land first (a user's array was waited for as it came in,
    # device_arrays.admit; an array of an earlier stage of this call was written on our lanes)
    backend.synchronize()
    in_place = factored_in_place(obj, overwrite)
    overwrite = overwrite and not obj.__cuda_array_interface__["data"][1]  # read-only: a copy
    columns = column_major(obj)
    row_major = strides[1] == itemsize and (m <= 1 or strides[0] >= n * itemsize)
    if in_place:
        ld = max(strides[1] // itemsize, m, 1) if n > 1 else max(m, 1)
        A = backend.matrix(m, n, dtype, nb, device_ptr=ptr, ld=ld, settings=settings)
        A.keeps = obj  # the array's memory lives as long as the store
        return A, obj, None
    if not (columns or row_major):
        raise ValueError(f"a device array must have unit stride along one axis; got shape "
                         f"{(m, n)} with strides {strides} (bytes)")
    out = DeviceArray(backend, (m, n), dtype)
    _copy_column_major(backend, lane, obj, out.ptr, out.ld)
    A = backend.matrix(m, n, dtype, nb, device_ptr=out.ptr, ld=out.ld, settings=settings)
    A.keeps = out  # the copy lives as long as the store (wrap drops the array it returns)
    if not overwrite:
        return A, _like(obj, out), None

    def write_back():  # row-major user array, overwrite_a: the factors go back in its layout
        with lane:
            backend.geam_transpose(lane, out.ptr, out.ld, ptr, max(strides[0] // itemsize, 1),
                                   n, m, dtype)
        backend.synchronize()
    return A, obj, write_back


def _copy_column_major(backend, lane, obj, dst_ptr, dst_ld, on_lane=False):
    """Copy the device array `obj` (m x n, column-major or row-major, of the destination's
    dtype) into the column-major m x n array at `dst_ptr` (leading dimension `dst_ld`): a
    column-major source by a 2-D copy, finished on return (`on_lane`: on the copy lane
    `lane`, the caller inside it, asynchronous); a row-major one transposed by cuBLAS's geam
    on `lane`."""
    ptr, (m, n), dtype, strides = device_array_layout(obj)
    itemsize = dtype.itemsize
    if column_major(obj):
        # one column: its second stride means nothing (CuPy gives an n x 1 array the
        # stride of one element there), and the copy's source pitch must cover the column
        source_ld = max(strides[1] // itemsize, m, 1) if n > 1 else max(m, 1)
        if on_lane:
            backend.copy_device_on(lane, ptr, source_ld, dst_ptr, dst_ld, m, n, itemsize)
        else:
            backend.copy_device(ptr, source_ld, dst_ptr, dst_ld, m, n, itemsize)
    elif on_lane:
        backend.geam_transpose(lane, ptr, max(strides[0] // itemsize, 1), dst_ptr, dst_ld,
                               m, n, dtype)
    else:
        with lane:
            backend.geam_transpose(lane, ptr, max(strides[0] // itemsize, 1), dst_ptr, dst_ld,
                                   m, n, dtype)


def stack_columns(backend, blocks, m, dtype):
    """The device arrays `blocks` (m rows each: the block columns of a dask array's chunks as
    a worker holds them) side by side in one new column-major m x (their columns) array of
    `dtype`, of the first block's kind (CuPy), finished on return (copy_columns)."""
    width = sum(int(block.shape[1]) for block in blocks)
    out = DeviceArray(backend, (m, width), dtype)
    copy_columns(backend, blocks, out,
                 np.cumsum([0] + [int(block.shape[1]) for block in blocks])[:-1])
    return _like(blocks[0], out) if blocks else out


def copy_columns(backend, blocks, out, starts, check=False) -> bool:
    """Copy the device arrays `blocks` (as many rows as `out`) into the column-major device
    array `out`, block i at column starts[i], finished on return: a distributed call's part
    made of Dask's chunks, the user's chunks left as they are. A block of another dtype is
    converted by its own astype first; a block neither column- nor row-major raises
    ValueError. With `check` (check_finite) returns whether an inf or a NaN was copied
    (False unchecked): a column-major block is copied and checked in one pass by our kernel
    (a copy and then a check read it twice: 0.013 s and 0.006 s for a worker's 17.2 GB on an
    H100, perf/RESULTS.md, issue 32, stop 58), the others' columns of `out` are checked after
    their copy."""
    out_ptr, (m, _), dtype, out_strides = device_array_layout(out)
    out_ld = max(out_strides[1] // dtype.itemsize, m, 1)
    # the blocks' producers (CuPy, on its streams of this context) have finished
    backend.synchronize()
    lane = backend.lane("gpu:update")
    copied_checked, checked = [], []  # _flag_nonfinite's launches
    converted = []  # blocks converted here: held until every copy from them has run
    for block, c0 in zip(blocks, starts):
        if np.dtype(block.dtype) != dtype:
            block = block.astype(dtype)
            converted.append(block)
            backend.synchronize()
        ptr, (rows, cols), _, strides = device_array_layout(block)
        if rows != m:
            raise ValueError(f"a block column has {rows} rows; expected {m}")
        if not (column_major(block) or strides[1] == dtype.itemsize):
            raise ValueError(f"a device block must have unit stride along one axis; got "
                             f"shape {(rows, cols)} with strides {strides} (bytes)")
        target = out_ptr + int(c0) * out_ld * dtype.itemsize
        if check and column_major(block):
            if rows and cols:
                source_ld = max(strides[1] // dtype.itemsize, m, 1) if cols > 1 else max(m, 1)
                copied_checked.append((_real_words(dtype, target, rows, cols, out_ld),
                                       _real_words(dtype, ptr, rows, cols, source_ld)))
            continue
        _copy_column_major(backend, lane, block, target, out_ld)
        if check and rows and cols:
            checked.append(_real_words(dtype, target, rows, cols, out_ld))
    backend.synchronize()
    found = bool(check) and _flag_nonfinite(backend, checked, copied_checked)
    converted.clear()  # the copies from them have run (_flag_nonfinite waits for them)
    return found


def arrivable(block, m, dtype) -> bool:
    """Whether the device array `block` can go into a store by `arrive_columns`: m rows of
    `dtype`, column- or row-major (copy_columns converts or refuses the others)."""
    _, (rows, cols), block_dtype, strides = device_array_layout(block)
    return rows == m and block_dtype == np.dtype(dtype) and \
        (column_major(block) or strides[1] == block_dtype.itemsize)


def arrive_columns(backend, lane, A, block, c0):
    """A block column of a distributed device part as it arrives, a task of the run (on a
    copy lane, inside it): the device array `block` (A.m rows of A's dtype, `arrivable`) into
    A's columns c0:c0 + its width on the lane's stream, asynchronous (the caller keeps `block`
    alive until the run ends and has ordered it after its producers), then its columns summed
    where A tracks its 1-norm (track_one_norm(arriving=True): the finiteness check)."""
    width = int(device_array_layout(block)[1][1])
    _copy_column_major(backend, lane, block, A.ptr + c0 * A.ld * A.itemsize, A.ld,
                       on_lane=True)
    A._sum_columns(lane, 0, A.m, c0, c0 + width)


def wrap(backend, obj, pivots=None, tau=None):
    """A device array as a tile store for the stages after a factorization: in place when
    column-major (factors, and the results hybridla allocates), else a column-major copy
    (inputs that are only read, such as a row-major right-hand side)."""
    A, _, _ = backend.device_matrix(obj, 1, overwrite=column_major(obj))
    if pivots is not None:
        A.set_pivots(pivots)
    if tau is not None:
        A.set_tau(tau)
    return A


def empty(backend, shape, dtype, like=None, pooled=False):
    """A new column-major device array for a result, of the same kind as `like` (CuPy,
    PyTorch, PyCUDA). `pooled`, for a CuPy `like`: from CuPy's allocator (its memory pool, or
    RMM's where a dask-cuda worker set one up), not the driver: a distributed call's part,
    which the worker's Dask frees when it forgets the result, so that the next call there
    takes the memory back from the pool (the driver took 0.016-0.020 s to map a worker's
    17.2 GB part at n = 65536 on an H100, perf/RESULTS.md, issue 32, stop 58)."""
    if pooled and like is not None and array_library(like) == "cupy":
        import cupy
        with cupy.cuda.Device(backend.ordinal):
            return cupy.empty(shape, dtype, order="F")
    out = DeviceArray(backend, shape, dtype)
    return _like(like, out) if like is not None else out


def has_nonfinite(backend, obj) -> bool:
    """check_finite for a device array, or a list of them, on the device (one pass over each,
    one wait for all; an empty one is finite)."""
    arrays = obj if isinstance(obj, (list, tuple)) else [obj]
    launches = [_nonfinite_launch(array) for array in arrays]
    return _flag_nonfinite(backend, [launch for launch in launches if launch is not None])


def _flag_nonfinite(backend, checked, copied_checked=()) -> bool:
    """Whether any word of the column-major real views `checked` ((the word's size, pointer,
    rows, columns, leading dimension), as _real_words gives them) is an inf or a NaN, and of
    the sources of `copied_checked` ((target view, source view) pairs), each copied into its
    target in the same pass: one flag, one wait for all."""
    if not checked and not copied_checked:
        return False
    backend.synchronize()
    backend.context.push()
    try:
        flag = drv.mem_alloc(4)
        drv.memset_d32(flag, 0, 1)
        for real_size, ptr, rows, cols, ld in checked:
            backend.kernels.launch(f"nonfinite_{real_size}", _flag_grid(rows, cols), (256,), 0,
                                   ctypes.c_void_p(ptr), ctypes.c_longlong(max(ld, 1)),
                                   ctypes.c_longlong(rows), ctypes.c_longlong(cols),
                                   ctypes.c_void_p(int(flag)))
        for (real_size, target, rows, cols, target_ld), (_, source, _, _, source_ld) in \
                copied_checked:
            backend.kernels.launch(f"copy_nonfinite_{real_size}", _flag_grid(rows, cols),
                                   (256,), 0, ctypes.c_void_p(source),
                                   ctypes.c_longlong(max(source_ld, 1)),
                                   ctypes.c_void_p(target), ctypes.c_longlong(max(target_ld, 1)),
                                   ctypes.c_longlong(rows), ctypes.c_longlong(cols),
                                   ctypes.c_void_p(int(flag)))
        backend.context.synchronize()
        result = np.zeros(1, np.int32)
        drv.memcpy_dtoh(result, flag)
        flag.free()
    finally:
        drv.Context.pop()
    return bool(result[0])


def _flag_grid(rows, cols):
    """The flagging kernels' grid: up to 8 blocks of 256 threads down each column (a thread
    strides down it), a column per block row (up to 65535; the kernel strides across)."""
    return (min(-(-rows // 256), 8), min(cols, 65535))


def _real_words(dtype, ptr, rows, cols, ld):
    """The column-major rows x cols array of `dtype` at `ptr` (leading dimension `ld`) as
    real words: (the word's size, pointer, rows, columns, leading dimension), a complex
    element two words."""
    words = 2 if np.dtype(dtype).kind == "c" else 1
    real_size = np.dtype(dtype).itemsize // words
    return real_size, ptr, rows * words, cols, ld * words


def _nonfinite_launch(obj):
    """The column-major real view (_real_words) has_nonfinite's kernel reads of the device
    array `obj`; None where it is empty."""
    ptr, (m, n), dtype, strides = device_array_layout(obj)
    if m == 0 or n == 0:
        return None
    if strides[0] == dtype.itemsize or n <= 1:
        return _real_words(dtype, ptr, m, n, strides[1] // dtype.itemsize if n > 1 else m)
    # row-major: the transpose is column-major, and finiteness does not care
    return _real_words(dtype, ptr, n, m, strides[0] // dtype.itemsize)


# -- the user's arrays as they come in (backend/device_arrays.admit) -----------------------------
def pointer_device(pointer: int) -> int | None:
    """The device whose memory `pointer` is in (None: the driver does not know it)."""
    return _driver.pointer_device(pointer)


def consumer_stream(backend) -> int:
    """The stream a DLPack producer orders its work before (``__dlpack__(stream=...)``): the
    update lane's; admit then waits for it on the host."""
    return backend.lane("gpu:update").handle


def stream_synchronize(backend, stream: int) -> None:
    """Wait on the host for the work on a user's stream (a raw CUstream; 1: the legacy default
    stream, 2: the per-thread one)."""
    backend.context.push()
    try:
        _driver.stream_synchronize(stream)
    finally:
        drv.Context.pop()
