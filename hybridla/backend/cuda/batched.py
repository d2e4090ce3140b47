"""The cuda backend's operations on stacks of matrices: cuBLAS' and cuSOLVER's batched routines
(pointer arrays built on the device) and our kernels (cuda/batched.cu), on a lane's stream with
its cuBLAS and cuSOLVER handles.

A stack here is `StackArray`: `count` members of m x n, column-major with leading dimension
`ld`, member b at `ptr + b * stride` elements, owning its device memory and offering
__cuda_array_interface__ with the user's batch shape (..., m, n); a stack of vectors (pivots,
tau) is the same with n = 1 and the shape (..., k). A user's stack in any strided layout (row- or
column-major members, broadcast or sliced batch axes) is read through `Operand` (per-member
offsets where the batch axes do not flatten to one stride).

Every function takes (backend, lane, ...) and uses only the backend's public methods
(`active`, `alloc`, `free`, `lane`, `synchronize`); work is enqueued on `lane` and not finished
when the call returns, except where a docstring says "complete on return". Pivots are 0-based
rows here as everywhere in hybridla; cuBLAS' getrf/getrs batched routines take LAPACK's 1-based
ones, converted on the device on the way in and out. The backend imports no algorithm and
reads no configuration: the drivers (lapack/batched.py) decide what runs.

The stack types (`StackArray`, `Operand`, `Workspace`) and the copies to the host live in
batched_stacks.py, re-exported here: this module is the family the drivers reach.
"""
from __future__ import annotations

import ctypes
import threading
from typing import NamedTuple

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas, cusolverDn

from .. import _driver
from .batched_stacks import (Operand, StackArray, Workspace, as_kind, dense_operand, download,
                             layout, member_offsets, zero_ints)
from .runtime import _kernel_source, compile_source

__all__ = ["PART", "WARP_LU_LARGEST", "Operand", "StackArray", "Workspace", "as_kind",
           "copy_stack", "dense_operand", "download", "gather_pivots", "gemm", "geqrf",
           "getrf_cublas", "getrf_panel", "getrf_warp", "getrs", "has_nonfinite", "laswp",
           "layout", "member_offsets", "panel_capacity", "pointers", "potrf", "potrf_warp", "trsm",
           "zero_ints"]

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
_SIDE = {"L": 0, "R": 1}          # cublasSideMode_t
_UPLO = {"L": 0, "U": 1}          # cublasFillMode_t
_OP = {"N": 0, "T": 1, "C": 2}    # cublasOperation_t
_DIAG = {"N": 0, "U": 1}          # cublasDiagType_t
# batched.cu's stack_copy parts: which elements of a member a copy writes
PART = {"all": 0, "upper": 1, "lower": 2, "strict_upper": 3, "strict_lower": 4}
_COPY_BLOCK = (32, 8)             # stack_copy: one 32 x 32 tile per block
_PANEL_THREADS = 256              # getrf_panel_batched: threads per member's panel
_LASWP_THREADS = 256              # laswp_batched: threads per block (a chunk of columns)
_LASWP_SHARED = 48 * 1024         # laswp_batched: its dynamic shared memory at most
_LINEAR_THREADS = 256             # fill_pointers, pivots_gather
_WARP_SIZES = (8, 16, 32)         # getrf_warp's instantiations: members up to N x N
_GRID_Y = 65535                   # the largest grid.y: members beyond it loop
_LINEAR_BLOCKS = 4096             # a linear kernel's blocks at most (its threads loop)


# -- our kernels: compiled once per process ------------------------------------------------------
class _Kernels(NamedTuple):
    module: _driver.Module
    panel_bytes: int  # the shared memory a panel kernel may take (the device's opt-in limit)


_compiled: dict = {}
_compile_lock = threading.Lock()


def _kernels(backend) -> _Kernels:
    with _compile_lock:
        kernels = _compiled.get(id(backend))
        if kernels is None:
            with backend.active():
                module = _driver.Module(compile_source(_kernel_source("batched.cu")))
                device = drv.Context.get_device()
                optin = getattr(drv.device_attribute, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", None)
                most = device.get_attribute(optin) if optin is not None else 48 * 1024
                # the kernel's static shares (the warps' candidates) come out of the same limit
                panel_bytes = most - 1024
                for prefix in _PREFIX.values():
                    module.allow_shared(f"getrf_panel_batched_{prefix}", panel_bytes)
            kernels = _compiled[id(backend)] = _Kernels(module, panel_bytes)
        return kernels


def panel_capacity(backend) -> int:
    """Bytes of shared memory one member's LU panel may take (getrf_panel)."""
    return _kernels(backend).panel_bytes


# -- copies and pointer arrays ------------------------------------------------------------------
def copy_stack(backend, lane, src: Operand | None, dst: StackArray, part="all", rest=False,
               first=0, count=None, rows=None, cols=None):
    """Members first, first + 1, ... of dst (`count` of them, default all; rows x cols of
    each, default all) := members 0, 1, ... of src (the same rows x cols), only `part` of each
    (PART); with rest, dst's other elements := 0; src None: `part` := 0. One launch."""
    count = dst.count - first if count is None else count
    rows = dst.m if rows is None else rows
    cols = dst.n if cols is None else cols
    if count == 0 or rows == 0 or cols == 0:
        return
    tiles = -(-rows // 32) * -(-cols // 32)
    if src is None:
        src_args = (ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_longlong(0),
                    ctypes.c_longlong(1), ctypes.c_longlong(1))
    else:
        src_args = (ctypes.c_void_p(src.ptr), ctypes.c_void_p(src.offsets or 0),
                    ctypes.c_longlong(src.stride), ctypes.c_longlong(src.rs),
                    ctypes.c_longlong(src.cs))
    _kernels(backend).module.launch(
        f"stack_copy_{dst.itemsize}", (tiles, min(count, _GRID_Y)), _COPY_BLOCK, lane.handle,
        *src_args, ctypes.c_void_p(dst.ptr + first * dst.stride * dst.itemsize),
        ctypes.c_longlong(dst.ld), ctypes.c_longlong(dst.stride), ctypes.c_int(rows),
        ctypes.c_int(cols), ctypes.c_longlong(count), ctypes.c_int(PART[part]),
        ctypes.c_int(int(rest)))


def _linear_grid(total):
    return (max(1, min(-(-total // _LINEAR_THREADS), _LINEAR_BLOCKS)),)


def pointers(backend, lane, ws: Workspace, op, r, c, count):
    """A device array of the addresses of element (r, c) of `count` members of `op` (an
    Operand with column-major members, op.rs == 1, whose offsets repeat a broadcast member; or
    a StackArray). Returns its address."""
    if isinstance(op, StackArray):
        op = dense_operand(op)
    if op.rs != 1:
        raise ValueError("pointer arrays need column-major members")
    itemsize = op.dtype.itemsize
    out = ws.alloc(8 * count)
    if count:
        base = op.ptr + (r + c * op.cs) * itemsize
        # with offsets: base + offsets[b] * itemsize; else base + b * stride * itemsize
        step = itemsize if op.offsets else op.stride * itemsize
        _kernels(backend).module.launch(
            "fill_pointers", _linear_grid(count), (_LINEAR_THREADS,), lane.handle,
            ctypes.c_void_p(out), ctypes.c_ulonglong(base), ctypes.c_longlong(step),
            ctypes.c_longlong(0), ctypes.c_void_p(op.offsets or 0), ctypes.c_longlong(count))
    return out


def gather_pivots(backend, lane, src: Operand, dst_ptr, k, count, delta):
    """dst (count x k int32, dense) := the pivots `src` (an Operand of int32 columns) + delta."""
    if count == 0 or k == 0:
        return
    _kernels(backend).module.launch(
        "pivots_gather", _linear_grid(count * k), (_LINEAR_THREADS,), lane.handle,
        ctypes.c_void_p(src.ptr), ctypes.c_void_p(src.offsets or 0),
        ctypes.c_longlong(src.stride), ctypes.c_longlong(src.rs), ctypes.c_void_p(dst_ptr),
        ctypes.c_int(k), ctypes.c_longlong(count), ctypes.c_int(delta))


def has_nonfinite(backend, stack: StackArray) -> bool:
    """Whether a dense stack holds an inf or NaN (the backend's check on the stack seen as one
    (m n) x count matrix); complete on return."""
    if stack.count == 0 or stack.m * stack.n == 0:
        return False
    backend.synchronize()  # the stack's copy is on a lane; the check runs on another stream
    return backend.has_nonfinite(_Columns(stack))


class _Columns:
    """A dense stack's members as the columns of one (m n) x count matrix (a view)."""

    def __init__(self, stack: StackArray):
        self.__cuda_array_interface__ = {
            "shape": (stack.m * stack.n, stack.count), "typestr": stack.dtype.str,
            "data": (stack.ptr, False), "strides": (stack.itemsize, stack.stride * stack.itemsize),
            "version": 3}


# -- BLAS and LAPACK on stacks ------------------------------------------------------------------
class _Scalars:
    """Host scalars for cuBLAS' default pointer mode, kept alive for the call."""

    def __init__(self):
        self._keep = []

    def __call__(self, value, dtype):
        x = np.array(value, dtype=dtype)
        self._keep.append(x)
        return x.ctypes.data


def getrf_cublas(backend, lane, ws: Workspace, A: StackArray, piv: StackArray, info_ptr):
    """P_b A_b = L_b U_b for every square member (cuBLAS <t>getrfBatched); piv (count x n
    int32, dense) := the pivots, 0-based; info_ptr (count int32 on the device) := each member's
    info (the first exactly zero U(i, i), 1-based; 0 if none)."""
    n, count = A.n, A.count
    array = pointers(backend, lane, ws, A, 0, 0, count)
    getattr(cublas, _PREFIX[A.dtype] + "getrf_batched")(lane.blas, n, array, A.ld, piv.ptr,
                                                        info_ptr, count)
    # cuBLAS' pivots are LAPACK's (1-based): 0-based in place
    gather_pivots(backend, lane, Operand(piv.ptr, 1, n, n, 0, n, 1, piv.dtype), piv.ptr, n,
                  count, -1)


WARP_LU_LARGEST = _WARP_SIZES[-1]


def getrf_warp(backend, lane, A: StackArray, piv: StackArray, info_ptr,
               source: Operand | None = None):
    """P_b A_b = L_b U_b for members of at most WARP_LU_LARGEST rows and columns
    (batched.cu's getrf_warp: a warp per member, its rows in the lanes' registers), the factors
    into A; piv (count x min(m, n)) := the pivots, 0-based; info_ptr (count int32) := each
    member's first exactly zero pivot (1-based), 0 if none. `source`: the matrices to factor
    (an Operand of A's batch and shape, read in its own layout: no copy into A first), default
    A itself."""
    size = next(s for s in _WARP_SIZES if max(A.m, A.n) <= s)
    src = dense_operand(A) if source is None else source
    warps = 2 if A.itemsize > 8 else 4  # members per block: batched.cu's WarpLuWarps
    blocks = min(-(-A.count // warps), 1 << 20)
    _kernels(backend).module.launch(
        f"getrf_warp_{_PREFIX[A.dtype]}_{size}", (blocks,), (32 * warps,),
        lane.handle, ctypes.c_void_p(src.ptr), ctypes.c_void_p(src.offsets or 0),
        ctypes.c_longlong(src.stride), ctypes.c_longlong(src.rs), ctypes.c_longlong(src.cs),
        ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.stride), ctypes.c_int(A.ld),
        ctypes.c_int(A.m), ctypes.c_int(A.n), ctypes.c_void_p(piv.ptr),
        ctypes.c_longlong(piv.stride), ctypes.c_void_p(info_ptr), ctypes.c_longlong(A.count))


def potrf_warp(backend, lane, A: StackArray, info_ptr, uplo, keep, source: Operand | None = None):
    """A_b = L_b L_b^H (uplo "L") or U_b^H U_b ("U") for members of order up to
    WARP_LU_LARGEST (batched.cu's potrf_warp: a warp per member), the factor into A's `uplo`
    triangle and the other triangle the source's (keep) or zeros; info_ptr (count int32) := the
    order of each member's first leading minor that is not positive definite, 0 if none.
    `source`: the matrices (an Operand of A's batch and shape, read where they are), default A."""
    size = next(s for s in _WARP_SIZES if A.n <= s)
    src = dense_operand(A) if source is None else source
    warps = 2 if A.itemsize > 8 else 4  # members per block: batched.cu's WarpLuWarps
    _kernels(backend).module.launch(
        f"potrf_warp_{_PREFIX[A.dtype]}_{size}", (min(-(-A.count // warps), 1 << 20),),
        (32 * warps,), lane.handle, ctypes.c_void_p(src.ptr), ctypes.c_void_p(src.offsets or 0),
        ctypes.c_longlong(src.stride), ctypes.c_longlong(src.rs), ctypes.c_longlong(src.cs),
        ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.stride), ctypes.c_int(A.ld),
        ctypes.c_int(A.n), ctypes.c_int(int(uplo == "U")), ctypes.c_int(int(keep)),
        ctypes.c_void_p(info_ptr), ctypes.c_longlong(A.count))


def getrf_panel(backend, lane, A: StackArray, piv: StackArray, info_ptr, k, jb):
    """The LU with partial pivoting of every member's panel A_b[k:m, k:k+jb] (batched.cu's
    getrf_panel_batched: the panel in shared memory, one block per member); its pivots to
    piv_b[k:k+jb] (global 0-based rows), the first zero pivot to info[b] if none before."""
    rows = A.m - k
    nbytes = rows * jb * A.itemsize
    kernels = _kernels(backend)
    if nbytes > kernels.panel_bytes:
        raise ValueError(f"a {rows} x {jb} panel ({nbytes} bytes) exceeds the "
                         f"{kernels.panel_bytes} bytes of shared memory a panel may take")
    kernels.module.launch(
        f"getrf_panel_batched_{_PREFIX[A.dtype]}", (min(A.count, 1 << 30),), (_PANEL_THREADS,),
        lane.handle, ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.stride), ctypes.c_int(A.ld),
        ctypes.c_int(rows), ctypes.c_int(jb), ctypes.c_int(k), ctypes.c_void_p(piv.ptr),
        ctypes.c_longlong(piv.stride), ctypes.c_void_p(info_ptr), ctypes.c_longlong(A.count),
        shared=nbytes)


def laswp(backend, lane, A: StackArray, piv: StackArray, k0, k1, c0, c1):
    """Pivots k0..k1-1 of every member applied, in order, to its columns outside c0:c1: the
    rows they move, at most 2 (k1 - k0), copied once per column (batched.cu's laswp_batched)."""
    columns = A.n - (c1 - c0)
    if columns <= 0 or k1 <= k0 or A.count == 0:
        return
    jb, rows = k1 - k0, A.m - k0
    index_bytes = -(-(rows + 2 * jb) * 4 // 16) * 16
    # columns per block: as many as _LASWP_SHARED holds (staged: 2 jb rows of each), 32 at most
    cols = max(1, min(32, columns, (_LASWP_SHARED - index_bytes) // (2 * jb * A.itemsize)))
    _kernels(backend).module.launch(
        f"laswp_batched_{A.itemsize}", (-(-columns // cols), min(A.count, _GRID_Y)),
        (_LASWP_THREADS,), lane.handle, ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.stride),
        ctypes.c_int(A.ld), ctypes.c_int(A.m), ctypes.c_int(A.n), ctypes.c_int(c0),
        ctypes.c_int(c1), ctypes.c_void_p(piv.ptr), ctypes.c_longlong(piv.stride),
        ctypes.c_int(k0), ctypes.c_int(k1), ctypes.c_longlong(A.count), ctypes.c_int(cols),
        shared=index_bytes + 2 * jb * cols * A.itemsize)


def trsm(backend, lane, ws: Workspace, side, uplo, trans, diag, alpha, T, t_at,
         B: StackArray, b_at, rows, cols):
    """B_b[rows x cols at b_at] := alpha op(T_b)^-1 B_b (side "L") or alpha B_b op(T_b)^-1
    ("R"), T_b's triangle at t_at, for every member of B (cuBLAS <t>trsmBatched); T an Operand
    (column-major members, broadcast to B's batch) or a StackArray of B's batch."""
    if B.count == 0 or rows == 0 or cols == 0:
        return
    scalars = _Scalars()
    t_array = pointers(backend, lane, ws, T, *t_at, B.count)
    b_array = pointers(backend, lane, ws, B, *b_at, B.count)
    ldt = T.ld if isinstance(T, StackArray) else T.cs
    getattr(cublas, _PREFIX[B.dtype] + "trsm_batched")(
        lane.blas, _SIDE[side], _UPLO[uplo], _OP[trans], _DIAG[diag], rows, cols,
        scalars(alpha, B.dtype), t_array, ldt, b_array, B.ld, B.count)


def gemm(backend, lane, alpha, A: StackArray, a_at, B: StackArray, b_at, beta, C: StackArray,
         c_at, m, n, k):
    """C_b[m x n at c_at] := alpha A_b[m x k at a_at] B_b[k x n at b_at] + beta C_b, every
    member at once (cuBLAS <t>gemmStridedBatched: the blocks sit at the same place in every
    member, so one stride reaches them all)."""
    if C.count == 0 or m == 0 or n == 0:
        return
    scalars = _Scalars()
    getattr(cublas, _PREFIX[C.dtype] + "gemm_strided_batched")(
        lane.blas, _OP["N"], _OP["N"], m, n, k, scalars(alpha, C.dtype),
        A.address(*a_at), A.ld, A.stride, B.address(*b_at), B.ld, B.stride,
        scalars(beta, C.dtype), C.address(*c_at), C.ld, C.stride, C.count)


def getrs(backend, lane, ws: Workspace, trans, LU: Operand, piv1_ptr, B: StackArray):
    """B_b := op(A_b)^-1 B_b with A_b's LU factors (cuBLAS <t>getrsBatched); LU an Operand
    (column-major members, broadcast to B's batch), piv1_ptr the members' pivots in LAPACK's
    1-based form, dense count x n int32 (one row per member of B)."""
    if B.count == 0 or B.n == 0 or B.m == 0:
        return
    lu_array = pointers(backend, lane, ws, LU, 0, 0, B.count)
    b_array = pointers(backend, lane, ws, B, 0, 0, B.count)
    info = np.zeros(1, np.int32)  # argument checks only (a host pointer)
    getattr(cublas, _PREFIX[B.dtype] + "getrs_batched")(
        lane.blas, _OP[trans], B.m, B.n, lu_array, LU.cs, piv1_ptr, b_array, B.ld,
        info.ctypes.data, B.count)
    if info[0] != 0:
        raise ValueError(f"cuBLAS getrsBatched: illegal value in argument {-int(info[0])}")


def potrf(backend, lane, ws: Workspace, uplo, A: StackArray, info_ptr):
    """A_b = L_b L_b^H ("L") or U_b^H U_b ("U") for every member (cuSOLVER
    <t>potrfBatched), the factor in that triangle (the other one is cuSOLVER's workspace: not
    kept); info_ptr (count int32) := the order of each member's first leading minor that is not
    positive definite, 0 if none."""
    array = pointers(backend, lane, ws, A, 0, 0, A.count)
    # an integer: the device address of the pointer array (nvmath copies a sequence to the
    # host, which cuSOLVER would read as device memory)
    getattr(cusolverDn, _PREFIX[A.dtype] + "potrf_batched")(
        lane.solver, _UPLO[uplo], A.n, array, A.ld, info_ptr, A.count)


def geqrf(backend, lane, ws: Workspace, A: StackArray, tau: StackArray):
    """A_b = Q_b R_b for every member (cuBLAS <t>geqrfBatched), in LAPACK's storage: R on and
    above the diagonal, the reflectors below it, their scalars in tau_b (k = min(m, n))."""
    if A.count == 0 or A.m == 0 or A.n == 0:
        return
    a_array = pointers(backend, lane, ws, A, 0, 0, A.count)
    tau_array = pointers(backend, lane, ws, tau, 0, 0, A.count)
    info = np.zeros(1, np.int32)  # argument checks only (a host pointer)
    getattr(cublas, _PREFIX[A.dtype] + "geqrf_batched")(
        lane.blas, A.m, A.n, a_array, A.ld, tau_array, info.ctypes.data, A.count)
    if info[0] != 0:
        raise ValueError(f"cuBLAS geqrfBatched: illegal value in argument {-int(info[0])}")
