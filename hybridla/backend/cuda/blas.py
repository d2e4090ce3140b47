"""BLAS and the LAPACK auxiliaries on device blocks: cuBLAS through nvmath-python's low-level
bindings (raw pointers, on the lane's stream and handle) and lapack_aux.cu's kernels; block
views (sub_block, strided_columns).

Module-level functions over (lane, blocks, ...): the caller has entered `lane` (a CudaLane) and
every call is enqueued on its stream, no host wait. Kernels are the lane's backend's
(`lane.backend.kernels`); scalars are host pointers (cuBLAS's default pointer mode).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np
import pycuda.driver as drv
from nvmath.bindings import cublas

from .runtime import _PREFIX
from .store import DeviceBlock

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
_LASET_PART = {"A": 0, "U": 1, "L": 2}  # lapack_aux.cu's uplo codes
_AUX_BLOCK = (32, 8)
# invert_triangular_blocks halves blocks down to this order (invert_leaves' threads per block)
_INVERSE_LEAF = 64
# convert.cu's narrow_hermitian and hemv.cu's part codes (their launch shape: runtime's
# _STATS_THREADS, _STATS_STRIP)
_TRIANGLE_CODE = {"U": 1, "L": 2}  # a kernel's `part` argument: the stored triangle

# 1, -1 and 0 of each dtype, kept for the process (`_scalar`)
_SCALARS = {dt: (np.array(1, dt), np.array(-1, dt), np.array(0, dt)) for dt in _PREFIX}
# dtype -> {1: pointer, -1: pointer, 0: pointer}: the common scalars without a lookup cost
_STANDARD_SCALARS = {dt: dict(zip((1, -1, 0), (s.ctypes.data for s in scalars)))
                     for dt, scalars in _SCALARS.items()}
_SCALAR_RING = threading.local()


def _scalar(dtype, value):
    """A host pointer to the scalar (cuBLAS's default pointer mode, which reads it before the
    call returns): 1, -1 and 0 kept for the process, any other value in a small ring of this
    thread's (it outlives the call that asked for it by seven more)."""
    standard = _STANDARD_SCALARS[dtype].get(value) if isinstance(value, (int, float)) else None
    if standard is not None:
        return standard
    ring = getattr(_SCALAR_RING, "arrays", None)
    if ring is None:
        ring = _SCALAR_RING.arrays = [None] * 8
        _SCALAR_RING.next = 0
    slot = _SCALAR_RING.next
    _SCALAR_RING.next = (slot + 1) % len(ring)
    ring[slot] = np.array(value, dtype=dtype)
    return ring[slot].ctypes.data


def _aux_grid(rows, cols):
    return (-(-rows // _AUX_BLOCK[0]), -(-cols // _AUX_BLOCK[1]))


# -- block views ------------------------------------------------------------------------------
def sub_block(B, r0, r1, c0, c1):
    """Rows r0:r1 x columns c0:c1 of the block B: pointer arithmetic, no device work."""
    return B.sub(r0, r1, c0, c1)


def strided_columns(B, first, count, step):
    """Columns first, first + step, ... (count of them) of B, as a block (its leading
    dimension step times B's): no copy."""
    return DeviceBlock(B.ptr + first * B.ld * B.dtype.itemsize, B.rows, count,
                       B.ld * step, B.dtype)


# -- level 3 and 2 ----------------------------------------------------------------------------
def gemm(lane, alpha, A, B, beta, C, trans_a="N", trans_b="N"):
    if C.rows == 0 or C.cols == 0:
        return
    dtype = C.dtype
    k = A.cols if trans_a == "N" else A.rows
    if C.cols == 1 and trans_b == "N" and k > 0:  # (BLAS gemv leaves y alone when k = 0)
        # a matrix times a vector (gehrd's panel loop, refinement): cuBLAS's gemv reads A
        # at a higher rate than its gemm with one column (perf/RESULTS.md, "Measurements
        # formerly in docstrings")
        _GEMV[dtype](lane.blas, _OP[trans_a], A.rows, A.cols, _scalar(dtype, alpha),
                     A.ptr, A.ld, B.ptr, 1, _scalar(dtype, beta), C.ptr, 1)
        return
    _GEMM[dtype](lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, k,
                 _scalar(dtype, alpha), A.ptr, A.ld, B.ptr, B.ld,
                 _scalar(dtype, beta), C.ptr, C.ld)


def trsm(lane, side, uplo, trans, diag, alpha, T, B):
    if B.size == 0:
        return
    trsm = getattr(cublas, _PREFIX[B.dtype] + "trsm")
    trsm(lane.blas, _SIDE[side], _UPLO[uplo], _OP[trans], _DIAG[diag], B.rows, B.cols,
         _scalar(B.dtype, alpha), T.ptr, T.ld, B.ptr, B.ld)


def trsv(lane, uplo, trans, diag, T, x):
    """x := op(T)^-1 x for one column x (cuBLAS trsv: the level-2 solve of one right-hand
    side; the condition estimator's products)."""
    if x.size == 0:
        return
    getattr(cublas, _PREFIX[x.dtype] + "trsv")(lane.blas, _UPLO[uplo], _OP[trans],
                                                _DIAG[diag], x.rows, T.ptr, T.ld, x.ptr, 1)


def trmm(lane, side, uplo, trans, diag, alpha, T, B):
    """B := alpha op(T) B (side "L") or alpha B op(T) (side "R"), in place (cuBLAS's trmm is
    out of place; C = B gives BLAS's in-place form, as its documentation says)."""
    if B.size == 0:
        return
    trmm = getattr(cublas, _PREFIX[B.dtype] + "trmm")
    trmm(lane.blas, _SIDE[side], _UPLO[uplo], _OP[trans], _DIAG[diag], B.rows, B.cols,
         _scalar(B.dtype, alpha), T.ptr, T.ld, B.ptr, B.ld, B.ptr, B.ld)


def herk(lane, uplo, trans, alpha, A, beta, C):
    """The `uplo` triangle of C := alpha op(A) op(A)^H + beta C, op "N" or "C"."""
    if C.size == 0:
        return
    name, real = _HERK[C.dtype]
    k = A.cols if trans == "N" else A.rows
    op = _OP[trans] if C.dtype.kind == "c" else _OP["N" if trans == "N" else "T"]
    scalars = np.array([alpha, beta], dtype=real)  # real, as herk takes them
    getattr(cublas, name)(lane.blas, _UPLO[uplo], op, C.rows, k, scalars.ctypes.data,
                          A.ptr, A.ld, scalars.ctypes.data + scalars.itemsize, C.ptr, C.ld)


def invert_triangular_blocks(lane, uplo, diag, T, b, W, scratch):
    """W_c := T_cc^-1 for the diagonal blocks of order b of the square T (the last one
    may be smaller), each W_c at columns c (b + 1) of W (b rows, ld b, `inverse_columns`
    columns), the other triangle zero: the layout of the diagonal blocks of a matrix of
    leading dimension b, so that every level below is one strided-batched call for all
    blocks. Each block is halved down to leaves of at most _INVERSE_LEAF (lapack_aux.cu's
    invert_leaves, one thread block each), then for each pair of halves, lower
    W21 = -W22 (T21 W11) (upper W12 = -(W11 T12) W22): two gemms. cuBLAS trsm on the identity
    took longer, on the Cholesky's critical path once a step (perf/RESULTS.md, "Earlier today
    (14:10-14:24 UTC)" and "Measurements formerly in docstrings"). `scratch`: at least
    b x max(b, n) / 4 elements."""
    n = T.rows
    if W.ld != b:
        raise ValueError(f"invert_triangular_blocks: W's leading dimension {W.ld} is not "
                         f"the block order {b}")
    if n == 0:
        return
    lane.backend.laset(lane, "A", 0, 0, W)
    full, rest = divmod(n, b)
    item = T.dtype.itemsize
    if full:
        _invert_halving(lane, uplo, diag, T.ptr, T.ld, W.ptr, W.ld, b, full, scratch)
    if rest:
        start = full * b
        _invert_halving(lane, uplo, diag, T.ptr + start * (T.ld + 1) * item, T.ld,
                        W.ptr + start * (W.ld + 1) * item, W.ld, rest, 1, scratch)


def _invert_halving(lane, uplo, diag, t, ldt, w, ldw, order, count, scratch):
    """The inverses of `count` triangular blocks of `order` on the diagonals of t and w
    (consecutive: block c at c order (ld + 1))."""
    dtype = scratch.dtype
    if order <= _INVERSE_LEAF or order % 2:
        lane.backend.kernels.launch(
            f"invert_leaves_{_PREFIX[dtype]}", (count,), (min(_INVERSE_LEAF, order),),
            lane.handle, ctypes.c_void_p(t), ctypes.c_longlong(ldt),
            ctypes.c_longlong(order * (ldt + 1)), ctypes.c_void_p(w), ctypes.c_longlong(ldw),
            ctypes.c_longlong(order * (ldw + 1)), ctypes.c_int(order),
            ctypes.c_int(uplo == "L"), ctypes.c_int(diag == "U"))
        return
    half = order // 2
    _invert_halving(lane, uplo, diag, t, ldt, w, ldw, half, 2 * count, scratch)
    item = dtype.itemsize
    t11, w11 = t, w
    t22, w22 = t + half * (ldt + 1) * item, w + half * (ldw + 1) * item
    stride_t, stride_w = order * (ldt + 1), order * (ldw + 1)
    gemm, one, zero = _GEMM_STRIDED[dtype], _scalar(dtype, 1), _scalar(dtype, 0)
    minus = _scalar(dtype, -1)
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


# -- LAPACK auxiliaries and copies ------------------------------------------------------------
def laset(lane, uplo, alpha, beta, B):
    """LAPACK laset: the strictly upper ("U"), strictly lower ("L") or whole ("A") off-
    diagonal part of B := alpha, its diagonal := beta."""
    if B.size == 0:
        return
    alpha, beta = complex(alpha), complex(beta)
    lane.backend.kernels.launch(f"laset_{_PREFIX[B.dtype]}", _aux_grid(B.rows, B.cols),
                                _AUX_BLOCK, lane.handle, ctypes.c_void_p(B.ptr),
                                ctypes.c_longlong(B.ld), ctypes.c_int(B.rows),
                                ctypes.c_int(B.cols), ctypes.c_int(_LASET_PART[uplo]),
                                ctypes.c_double(alpha.real), ctypes.c_double(alpha.imag),
                                ctypes.c_double(beta.real), ctypes.c_double(beta.imag))


def lacpy(lane, uplo, src, dst):
    """LAPACK lacpy: the upper ("U", with the diagonal), lower ("L") or whole ("A") part of
    src into dst (same shape); the rest of dst is left as it is."""
    if dst.size == 0:
        return
    lane.backend.kernels.launch(f"lacpy_{_PREFIX[dst.dtype]}", _aux_grid(dst.rows, dst.cols),
                                _AUX_BLOCK, lane.handle, ctypes.c_void_p(src.ptr),
                                ctypes.c_longlong(src.ld), ctypes.c_void_p(dst.ptr),
                                ctypes.c_longlong(dst.ld), ctypes.c_int(dst.rows),
                                ctypes.c_int(dst.cols), ctypes.c_int(_LASET_PART[uplo]))


def scale_copy(lane, alpha, src, dst):
    """dst := alpha src (same shape): one cuBLAS geam, no wait."""
    if dst.size == 0:
        return
    geam = getattr(cublas, _PREFIX[dst.dtype] + "geam")
    geam(lane.blas, _OP["N"], _OP["N"], dst.rows, dst.cols, _scalar(dst.dtype, alpha),
         src.ptr, src.ld, _SCALARS[dst.dtype][2].ctypes.data, dst.ptr, dst.ld, dst.ptr,
         dst.ld)


def geam_transpose(lane, src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, dtype):
    """dst (rows x cols, column-major) := transpose of src (cols x rows, column-major)."""
    geam = getattr(cublas, _PREFIX[np.dtype(dtype)] + "geam")
    one, _, zero = (s.ctypes.data for s in _SCALARS[np.dtype(dtype)])
    geam(lane.blas, _OP["T"], _OP["N"], rows, cols, one, src_ptr, src_ld, zero, dst_ptr,
         dst_ld, dst_ptr, dst_ld)


def _device_copy_2d(src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, itemsize):
    """PyCUDA's 2-D copy of a rows x cols column-major block, device to device."""
    copy = drv.Memcpy2D()
    copy.set_src_device(src_ptr)
    copy.src_pitch = src_ld * itemsize
    copy.set_dst_device(dst_ptr)
    copy.dst_pitch = dst_ld * itemsize
    copy.width_in_bytes = rows * itemsize
    copy.height = cols
    return copy


def copy_device_on(lane, src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, itemsize):
    """A device-to-device 2-D copy on the copy lane `lane`'s stream (asynchronous: the source
    must live until the lane has passed it)."""
    _device_copy_2d(src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, itemsize)(lane.stream)


def copy_device(backend, src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, itemsize):
    """A device-to-device 2-D copy, finished when this returns (used before a run starts).
    Both sides contiguous (leading dimension = rows): one linear copy; otherwise PyCUDA's
    unaligned 2-D copy (user arrays may be laid out oddly: slower, never wrong)."""
    backend.context.push()
    try:
        if (src_ld == rows and dst_ld == rows) or cols == 1:
            drv.memcpy_dtod(dst_ptr, src_ptr, rows * cols * itemsize)
            backend.context.synchronize()  # a device-to-device copy returns before it ends
            return
        _device_copy_2d(src_ptr, src_ld, dst_ptr, dst_ld, rows, cols, itemsize)(aligned=False)
    finally:
        drv.Context.pop()
