"""The cuda backend's stacks of matrices as the batched family (batched.py) holds them: `StackArray`
(a dense stack owning its device memory, or a buffer of the user's library), `Operand` (a user's
stack in any strided layout, as a kernel reads it), `Workspace` (one batched call's device
buffers and uploads) and the copies to the host (`download`) and zero fills around them.

A stack here is `StackArray`: `count` members of m x n, column-major with leading dimension
`ld`, member b at `ptr + b * stride` elements, owning its device memory and offering
__cuda_array_interface__ with the user's batch shape (..., m, n); a stack of vectors (pivots,
tau) is the same with n = 1 and the shape (..., k). A user's stack in any strided layout (row- or
column-major members, broadcast or sliced batch axes) is read through `Operand` (per-member
offsets where the batch axes do not flatten to one stride).

batched.py re-exports every name here that the drivers reach (get_backend("cuda").batched).
"""
from __future__ import annotations

import ctypes
import math
from typing import NamedTuple

import numpy as np
import pycuda.driver as drv

from .. import _driver
from ..device_arrays import DLPackArray

_libcuda = ctypes.CDLL("libcuda.so.1")


# -- stacks -------------------------------------------------------------------------------------
def _native(template, elements, dtype):
    """A flat buffer of `elements` from the allocator of the user's library when `template` is
    a PyTorch tensor or a CuPy array (their caching pools: no cuMemAlloc and cuMemFree per
    call, as their own batched routines have none), else None."""
    module = type(template).__module__.split(".")[0]
    if module == "torch":
        import torch
        kinds = {np.dtype(np.float32): torch.float32, np.dtype(np.float64): torch.float64,
                 np.dtype(np.complex64): torch.complex64,
                 np.dtype(np.complex128): torch.complex128, np.dtype(np.int32): torch.int32}
        return torch.empty(elements, dtype=kinds[np.dtype(dtype)], device=template.device)
    if module == "cupy":
        import cupy
        return cupy.empty(elements, dtype=dtype)
    return None


class StackArray:
    """A dense stack for a result or a workspace: `batch` + (m, n) column-major members one
    after the other (core (k,): a stack of vectors). Its memory comes from the allocator of
    the user's library where `like` is a PyTorch tensor or a CuPy array (`native`, a flat
    array of theirs), else from the driver (owned: freed with the object, with the context
    current). Offers __cuda_array_interface__; as_kind gives the user's kind of array."""

    def __init__(self, backend, batch, core, dtype, like=None):
        self.batch, self.core, self.dtype = tuple(batch), tuple(core), np.dtype(dtype)
        self.count = math.prod(self.batch)
        if len(self.core) == 2:
            self.m, self.n = self.core
        else:
            (self.m,), self.n = self.core, 1
        self.ld = max(self.m, 1)
        self.stride = self.ld * self.n  # elements from one member to the next
        self.itemsize = self.dtype.itemsize
        self._backend, self._allocation = backend, None
        elements = self.count * self.stride
        self.native = None if like is None else _native(like, elements, self.dtype)
        if self.native is not None:
            self.ptr = int(self.native.__cuda_array_interface__["data"][0])
            return
        with backend.active():
            self._allocation = drv.mem_alloc(max(elements * self.itemsize, 1))
        self.ptr = int(self._allocation)

    def __del__(self):
        allocation = getattr(self, "_allocation", None)
        if allocation is not None:
            try:
                with self._backend.active():
                    allocation.free()
            except Exception:  # noqa: BLE001, S110 - interpreter shutdown: the driver frees it
                pass

    @property
    def shape(self):
        return self.batch + self.core

    def strides(self):
        """Byte strides of `shape`: C order over the batch axes, column-major members."""
        core = (self.itemsize, self.ld * self.itemsize) if len(self.core) == 2 \
            else (self.itemsize,)
        batch, step = [], self.stride * self.itemsize
        for size in reversed(self.batch):
            batch.append(step)
            step *= size
        return tuple(reversed(batch)) + core

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False),
                "strides": self.strides(), "version": 3}

    def address(self, r=0, c=0) -> int:
        """The address of element (r, c) of member 0."""
        return self.ptr + (r + c * self.ld) * self.itemsize


def as_kind(template, out: StackArray):
    """`out` as the same kind of array as the user's `template` (CuPy, PyTorch, PyCUDA, a
    DLPack producer's through its library's from_dlpack), sharing memory (the wrapper keeps
    `out`, or its library's buffer, alive)."""
    if isinstance(template, DLPackArray):
        return template.like(out)
    module = type(template).__module__.split(".")[0]
    if out.native is not None:  # a strided view of the library's own buffer
        strides = out.strides()
        if module == "torch":
            import torch
            return torch.as_strided(out.native, out.shape,
                                    tuple(s // out.itemsize for s in strides))
        import cupy
        return cupy.ndarray(out.shape, out.dtype, memptr=out.native.data, strides=strides)
    if module == "cupy":
        import cupy
        return cupy.asarray(out)
    if module == "torch":
        import torch
        return torch.as_tensor(out, device=template.device)
    if module == "pycuda":
        from pycuda import gpuarray
        return gpuarray.GPUArray(out.shape, out.dtype, gpudata=out._allocation,
                                 strides=out.strides(), base=out)
    return out


class Operand(NamedTuple):
    """A stack as a kernel reads it: member b's element (r, c) at ptr + (offset_b + r rs + c cs)
    elements, offset_b = b * stride, or offsets[b] (a device array of int64, 0 when unused)."""
    ptr: int
    rs: int
    cs: int
    stride: int
    offsets: int
    m: int
    n: int
    dtype: np.dtype


def dense_operand(stack: StackArray) -> Operand:
    return Operand(stack.ptr, 1, stack.ld, stack.stride, 0, stack.m, stack.n, stack.dtype)


def layout(obj, core_ndim):
    """(pointer, shape, dtype, byte strides) of a device array from its
    __cuda_array_interface__ (strides None: C-contiguous)."""
    cai = obj.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    if strides is None:
        strides, step = [], dtype.itemsize
        for size in reversed(shape):
            strides.append(step)
            step *= max(size, 1)
        strides = tuple(reversed(strides))
    return int(cai["data"][0]), shape, dtype, tuple(int(s) for s in strides)


def member_offsets(batch, shape, strides, core_ndim, itemsize):
    """The element offsets of the members of an array of `shape` (byte `strides`) broadcast to
    the batch shape `batch`, in C order: (uniform stride or None, offsets array or None).
    Raises ValueError for a stride that is not a whole number of elements."""
    if any(s % itemsize for s in strides):
        raise ValueError(f"a device array's strides must be whole elements; got strides "
                         f"{strides} (bytes) for items of {itemsize} bytes")
    own = shape[:len(shape) - core_ndim]
    own_strides = strides[:len(shape) - core_ndim]
    lead = len(batch) - len(own)
    steps = [0 if axis < lead or own[axis - lead] == 1 else own_strides[axis - lead] // itemsize
             for axis in range(len(batch))]
    # one stride for the whole batch when the axes (those longer than 1) nest in C order:
    # decided from the shape alone (arrays of a large batch's offsets cost milliseconds)
    axes = [(size, step) for size, step in zip(batch, steps) if size != 1]
    if 0 in batch:
        return 0, None
    if len(axes) <= 1:
        return (axes[0][1] if axes else 0), None
    stride, span = axes[-1][1], axes[-1][1] * axes[-1][0]
    for size, step in reversed(axes[:-1]):
        if step != span:
            break
        span *= size
    else:
        return stride, None
    offsets = np.zeros(batch, dtype=np.int64)
    for axis, (size, step) in enumerate(zip(batch, steps)):
        if step:
            view = [1] * len(batch)
            view[axis] = size
            offsets += (np.arange(size, dtype=np.int64) * step).reshape(view)
    return None, offsets.ravel()


class Workspace:
    """The device buffers of one batched call (pointer arrays, infos, offsets, pivots for
    cuBLAS), from the backend's pool, and the host arrays their uploads read: all freed by
    close(), after a wait for `lane`."""

    def __init__(self, backend, lane):
        self.backend, self.lane = backend, lane
        self._allocations, self._keep = [], []

    def alloc(self, nbytes) -> int:
        allocation = self.backend.alloc(max(int(nbytes), 1))
        self._allocations.append(allocation)
        return int(allocation)

    def upload(self, array: np.ndarray) -> int:
        """A device copy of the host array, in the lane's order."""
        array = np.ascontiguousarray(array)
        ptr = self.alloc(array.nbytes)
        self._keep.append(array)  # until close(): the copy reads it
        if array.nbytes:
            _check(_libcuda.cuMemcpyHtoDAsync_v2(ctypes.c_void_p(ptr),
                                                 ctypes.c_void_p(array.ctypes.data),
                                                 ctypes.c_size_t(array.nbytes),
                                                 ctypes.c_void_p(self.lane.handle)),
                   "cuMemcpyHtoDAsync")
        return ptr

    def operand(self, obj, batch, core_ndim) -> Operand:
        """The user's device array `obj` ((..., m, n), or (..., k) with core_ndim 1: a column)
        broadcast to the batch shape `batch`, as a kernel reads it."""
        ptr, shape, dtype, strides = layout(obj, core_ndim)
        itemsize = dtype.itemsize
        if core_ndim == 2:
            m, n = shape[-2:]
            rs, cs = strides[-2] // itemsize, strides[-1] // itemsize
        else:
            m, n = shape[-1], 1
            rs, cs = strides[-1] // itemsize, max(m, 1)
        if m <= 1:
            rs = 1  # one row: its stride means nothing (read down the columns)
        stride, offsets = member_offsets(batch, shape, strides, core_ndim, itemsize)
        return Operand(ptr, rs, cs, stride or 0,
                       0 if offsets is None else self.upload(offsets), m, n, dtype)

    def close(self):
        """Wait for the lane (a named wait: the results are read next, on the user's stream or
        the host, and the pool may hand these buffers out again at once), then free."""
        _driver.stream_synchronize(self.lane.handle)
        for allocation in self._allocations:
            self.backend.free(allocation)
        self._allocations, self._keep = [], []


def _check(status, what):
    if status != 0:
        name = ctypes.c_char_p()
        _libcuda.cuGetErrorName(status, ctypes.byref(name))
        raise _driver.CudaDriverError(f"{what} failed: "
                                      f"{name.value.decode() if name.value else status}")


def download(lane, ptr, out: np.ndarray) -> np.ndarray:
    """out := the device bytes at ptr; complete on return (a host wait for the lane: the
    caller's named point)."""
    if out.nbytes:
        _check(_libcuda.cuMemcpyDtoHAsync_v2(ctypes.c_void_p(out.ctypes.data),
                                             ctypes.c_void_p(ptr), ctypes.c_size_t(out.nbytes),
                                             ctypes.c_void_p(lane.handle)), "cuMemcpyDtoHAsync")
    _driver.stream_synchronize(lane.handle)
    return out


def zero_ints(lane, ptr, count):
    """count int32 at ptr := 0, in the lane's order."""
    if count:
        _driver.memset_d32_async(ptr, 0, count, lane.handle)

