"""What the mixed-precision solvers ask of the cuda backend (lapack/_mixed.py, backend/reduced.py,
cuda/convert.cu, cuda/butterfly.cu): equilibration and the rounding into the low precision
(narrow), conversions of vectors, the random butterflies, and the reduced-precision GEMMs on the
tensor cores (half, bfloat16, tf32; error-corrected half-x3 and tf32-x3), with the HERK panel
rounded once for all its GEMMs.

Module-level functions over (lane, owner, blocks, ...): `owner` is the tile store that keeps the
buffers (operand copies, scales, the overflow flag). The passes before and after a
factorization (equilibration, narrow, narrow_hermitian, add_to_diagonal, prepare_reduced,
overflowed, keep_on_device) run on the owner's backend's update lane and wait: their results
decide what the host does next. The others are enqueued on the caller's lane, no wait.
"""
from __future__ import annotations

import ctypes
from typing import NamedTuple

import numpy as np
from nvmath.bindings import cublas

from .. import _driver
from ..reduced import (COMPUTE_LANES, Equilibration, leaf_operand_bytes, operand_bytes,
                       panel_slot_bytes)
from .blas import _AUX_BLOCK, _OP, _SCALARS, _TRIANGLE_CODE, _aux_grid
from .runtime import _PREFIX, _STATS_STRIP, _STATS_THREADS

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


def _panel_buffer(compute, key):
    """The store's workspace name of round_panel's buffer for `key`."""
    return f"{compute} panel {key}"


class _RoundedPanel:
    """A HERK's panel rounded once (round_panel): `ptr` its first (hi) copy, `ld` its leading
    dimension, `block` the bytes from one copy to the next, `along_rows` whether its long side
    (the one HERK strips cut) is rows (op "N") or columns (op "C")."""

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


# -- vectors: the refinement's conversions and butterflies ------------------------------------
def keep_on_device(owner, name, array):
    """A host vector copied once to the device for later kernels (`vector_to_low`'s scale
    and permutation): a handle to pass them, here its device address (the store's
    workspace `name`, freed with it). None stays None."""
    if array is None:
        return None
    array = np.ascontiguousarray(array)
    pointer = owner.extra_workspace(f"kept {name}", array.nbytes)
    gpu = owner.backend.lane("gpu:panel")
    with gpu:
        cublas.set_vector_async(array.size, array.itemsize, array.ctypes.data, 1, pointer, 1,
                                gpu.handle)
        _driver.stream_synchronize(gpu.handle)
    return pointer


def vector_to_low(lane, src, dst, scale, permutation=None):
    """dst_ij := (s_{p_i} src_{p_i j}) rounded to dst's precision, s and p (the LU's row
    permutation) kept on the device (`keep_on_device`; None: none). No wait."""
    if dst.size == 0:
        return
    lane.backend.kernels.launch(f"vector_to_low_{_PREFIX[src.dtype]}",
                                (-(-dst.rows // 256), dst.cols), (256,), lane.handle,
                                ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                                ctypes.c_void_p(permutation or 0), ctypes.c_void_p(scale or 0),
                                ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld))


def vector_from_low(lane, src, dst, scale):
    """dst_ij := s_i src_ij in dst's precision, s kept on the device (None: ones). No
    wait."""
    if dst.size == 0:
        return
    lane.backend.kernels.launch(f"vector_from_low_{_PREFIX[dst.dtype]}",
                                (-(-dst.rows // 256), dst.cols), (256,), lane.handle,
                                ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                                ctypes.c_void_p(scale or 0), ctypes.c_void_p(dst.ptr),
                                ctypes.c_longlong(dst.ld))


def butterfly_rows(lane, src, dst, groups, transpose, before=None, after=None):
    """dst := diag(after) op(W) diag(before) src (cuda/butterfly.cu): W the random butterfly
    whose groups (hybridla/butterfly.py) are kept on the device, op(W) = W^T when
    `transpose`; the scales kept on the device, None: none. dst may be src. No wait."""
    if dst.size == 0:
        return
    groups_count = dst.rows // 4 + dst.rows % 4
    lane.backend.kernels.launch(f"butterfly_rows_{_PREFIX[dst.dtype]}",
                                (-(-groups_count // 256), dst.cols), (256,), lane.handle,
                                ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                                ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                                ctypes.c_void_p(groups), ctypes.c_int(1 if transpose else 0),
                                ctypes.c_void_p(before or 0), ctypes.c_void_p(after or 0))


# -- before and after a factorization: on the update stream, and a wait -------------------------
def equilibration(lane, owner, A, rows, cols, meanwhile=None):
    """backend/reduced.Equilibration of the block A: row_stats, the row scales (ones unless
    `rows`), col_stats of diag(r) A, the column scales (ones unless `cols`), all enqueued
    at once with the scales made on the device (convert.cu's power_of_two_scales), then
    one copy down and one wait. `meanwhile`: host work run while the device makes the two
    passes (the solver's uploads), its result returned with the Equilibration. Three waits
    for the host between the passes made the LU's convert phase longer (perf/RESULTS.md,
    "Scales on the device, GMRES stopped on the inf-norm", and "Measurements formerly in
    docstrings")."""
    m, n = A.rows, A.cols
    # row max, row sum, column max, column sum (zeroed: atomics merge into them), r, c
    sizes = (m, m, n, n, m, n)
    offsets = np.concatenate([[0], np.cumsum(sizes)]) * 8
    buffer = owner.extra_workspace("equilibration", max(int(offsets[-1]), 8))
    row_max, row_sum, col_max, col_sum, r, c = (buffer + int(o) for o in offsets[:-1])
    backend = owner.backend
    gpu = backend.lane("gpu:update")
    with gpu:
        _driver.memset_d32_async(buffer, 0, 2 * int(offsets[4] // 8), gpu.handle)
        if A.size:
            grid = (-(-m // _STATS_THREADS), -(-n // _STATS_STRIP))
            matrix = (ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.ld), ctypes.c_int(m),
                      ctypes.c_int(n))
            prefix = _PREFIX[A.dtype]
            backend.kernels.launch(f"row_stats_{prefix}", grid, (_STATS_THREADS,), gpu.handle,
                                   *matrix, ctypes.c_void_p(row_max), ctypes.c_void_p(row_sum))
        _power_of_two_scales(gpu, row_max, m, rows, r)
        if A.size:
            backend.kernels.launch(f"col_stats_{prefix}", grid, (_STATS_THREADS,), gpu.handle,
                                   *matrix, ctypes.c_void_p(r), ctypes.c_void_p(col_max),
                                   ctypes.c_void_p(col_sum))
        _power_of_two_scales(gpu, col_max, n, cols, c)
    kept = meanwhile() if meanwhile is not None else None
    out = np.empty(int(offsets[-1]) // 8)
    with gpu:
        if out.size:
            cublas.get_vector_async(out.size, 8, buffer, 1, out.ctypes.data, 1, gpu.handle)
        _driver.stream_synchronize(gpu.handle)
    parts = np.split(out, offsets[1:-1] // 8)
    return Equilibration(*(parts[i] for i in (4, 5, 0, 1, 2, 3))), kept


def _power_of_two_scales(gpu, largest, count, enabled, scale):
    if count:
        gpu.backend.kernels.launch("power_of_two_scales", (-(-count // 256),), (256,),
                                   gpu.handle, ctypes.c_void_p(largest), ctypes.c_int(count),
                                   ctypes.c_int(1 if enabled else 0), ctypes.c_void_p(scale))


def narrow(lane, owner, src, dst, row_scale, col_scale, limit, butterfly=None) -> bool:
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
    backend = owner.backend
    gpu = backend.lane("gpu:update")
    with gpu:
        cublas.set_vector_async(scales.size, 8, scales.ctypes.data, 1, buffer, 1, gpu.handle)
        if butterfly is None:
            backend.kernels.launch(f"narrow_{_PREFIX[src.dtype]}",
                                   _aux_grid(dst.rows, dst.cols), _AUX_BLOCK, gpu.handle,
                                   ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                   ctypes.c_int(dst.rows), ctypes.c_int(dst.cols),
                                   ctypes.c_void_p(buffer),
                                   ctypes.c_void_p(buffer + dst.rows * 8),
                                   ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                                   ctypes.c_double(limit), ctypes.c_void_p(flag))
        else:
            left, right = butterfly
            groups = dst.rows // 4 + dst.rows % 4
            backend.kernels.launch(f"narrow_butterfly_{_PREFIX[src.dtype]}",
                                   _aux_grid(groups, groups), _AUX_BLOCK, gpu.handle,
                                   ctypes.c_void_p(src.ptr), ctypes.c_longlong(src.ld),
                                   ctypes.c_void_p(dst.ptr), ctypes.c_longlong(dst.ld),
                                   ctypes.c_int(dst.rows), ctypes.c_void_p(buffer),
                                   ctypes.c_void_p(buffer + dst.rows * 8), ctypes.c_void_p(left),
                                   ctypes.c_void_p(right), ctypes.c_double(limit),
                                   ctypes.c_void_p(flag))
        cublas.get_vector_async(1, 8, flag, 1, result.ctypes.data, 1, gpu.handle)
        _driver.stream_synchronize(gpu.handle)
    return bool(result.view(np.int32)[0])


def narrow_hermitian(lane, owner, src, dst, scale, uplo, limit):
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
    backend = owner.backend
    gpu = backend.lane("gpu:update")
    with gpu:
        cublas.set_vector_async(head.size, 8, head.ctypes.data, 1, buffer, 1, gpu.handle)
        backend.kernels.launch(f"narrow_hermitian_{_PREFIX[src.dtype]}",
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


def add_to_diagonal(lane, owner, B, sigma):
    """B's diagonal += sigma: one axpy with stride ld + 1 (a shifted low-precision
    Cholesky)."""
    k = min(B.rows, B.cols)
    if k == 0:
        return
    backend = owner.backend
    shift = owner.workspace("diagonal shift", k, 1)
    backend.from_host(lane, np.full((k, 1), sigma, dtype=B.dtype), shift)
    gpu = backend.lane("gpu:update")
    with gpu:
        one = _SCALARS[B.dtype][0].ctypes.data
        getattr(cublas, _PREFIX[B.dtype] + "axpy")(gpu.blas, k, one, shift.ptr, 1, B.ptr,
                                                   B.ld + 1)
        _driver.stream_synchronize(gpu.handle)


def prepare_reduced(owner, compute, panel_keys=(), leaf_order=0):
    """Before a reduced-precision factorization: the overflow flag zeroed, and for half and
    bfloat16 each compute lane's operand buffers, round_panel's buffers of `panel_keys` and,
    with a `leaf_order`, those of the blocked solves' leaf products (tf32-x3, operands of
    that many columns or rows), allocated at their largest (an allocation during the run
    could synchronize the device)."""
    flag = owner.extra_workspace("overflow flag", 4)
    zero = np.zeros(1, np.int32)
    gpu = owner.backend.lane("gpu:update")
    with gpu:
        cublas.set_vector_async(1, 4, zero.ctypes.data, 1, flag, 1, gpu.handle)
        _driver.stream_synchronize(gpu.handle)
    m, n, nb = owner.m, owner.n, owner.nb
    if compute in _OPERAND_TYPE:  # the sizes: backend/reduced.py, which callers count by
        for name in COMPUTE_LANES:
            for operand in "ab":
                owner.extra_workspace(f"{compute} {operand} {name}",
                                      operand_bytes(m, n, nb, compute))
        for key in panel_keys:
            owner.extra_workspace(_panel_buffer(compute, key), panel_slot_bytes(m, n, nb, compute))
    if leaf_order:
        for name in COMPUTE_LANES:
            for operand in "ab":
                owner.extra_workspace(f"tf32-x3 {operand} {name}",
                                      leaf_operand_bytes(m, n, leaf_order))


def overflowed(owner) -> bool:
    """Whether an operand rounding overflowed (a host wait: after the factorization)."""
    flag = np.zeros(1, np.int32)
    backend = owner.backend
    gpu = backend.lane("gpu:update")
    with gpu:
        backend.synchronize()
        cublas.get_vector_async(1, 4, owner.extra_workspace("overflow flag", 4), 1,
                                flag.ctypes.data, 1, gpu.handle)
        _driver.stream_synchronize(gpu.handle)
    return bool(flag[0])


# -- GEMMs on the tensor cores ------------------------------------------------------------------
def gemm_reduced(lane, owner, compute, alpha, A, B, beta, C, trans_a="N", trans_b="N"):
    """`gemm` on the tensor cores (backend/reduced.py): "single" is sgemm/cgemm; "tf32" the
    same operands with TF32 multiplications; "half" and "bfloat16" round A and B into this
    lane's operand buffers first (convert.cu: one read of 4 bytes, one write of 2 per
    element, overflow flagged) and multiply them with float32 sums."""
    if C.size == 0:
        return
    if compute == "single":
        lane.backend.gemm(lane, alpha, A, B, beta, C, trans_a, trans_b)
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
        _gemm_error_corrected(lane, owner, compute, alpha, A, B, beta, C, k, trans_a, trans_b)
        return
    operand_type, kernel = _OPERAND_TYPE[compute]
    flag = owner.extra_workspace("overflow flag", 4)
    rounded = []
    for name, X in (("a", A), ("b", B)):
        buffer = owner.extra_workspace(f"{compute} {name} {lane.name}", max(X.size, 1) * 2)
        lane.backend.kernels.launch(kernel, _aux_grid(X.rows, X.cols), _AUX_BLOCK, lane.handle,
                                    ctypes.c_void_p(X.ptr), ctypes.c_longlong(X.ld),
                                    ctypes.c_int(X.rows), ctypes.c_int(X.cols),
                                    ctypes.c_void_p(buffer), ctypes.c_longlong(max(X.rows, 1)),
                                    ctypes.c_void_p(flag))
        rounded.append((buffer, max(X.rows, 1)))
    (a_ptr, lda), (b_ptr, ldb) = rounded
    cublas.gemm_ex(lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, k, alpha_ptr,
                   a_ptr, operand_type, lda, b_ptr, operand_type, ldb, beta_ptr, C.ptr,
                   _CUDA_R_32F, C.ld, _COMPUTE_32F, _GEMM_DEFAULT)


def _gemm_error_corrected(lane, owner, compute, alpha, A, B, beta, C, k, trans_a, trans_b):
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
        _split_operand(lane, split, X, hi_ptr, lo_ptr, ld, 0, flag)
        placed[name] = (hi_ptr, buffer, ld)
    _error_corrected_products(lane, alpha, beta, C, k, trans_a, trans_b, placed["a"],
                              placed["b"], split)


def _split_operand(lane, split, X, hi_ptr, lo_ptr, ld, hi_again_ptr, flag):
    lane.backend.kernels.launch(split.kernel, _aux_grid(X.rows, X.cols), _AUX_BLOCK,
                                lane.handle, ctypes.c_void_p(X.ptr), ctypes.c_longlong(X.ld),
                                ctypes.c_int(X.rows), ctypes.c_int(X.cols),
                                ctypes.c_void_p(hi_ptr), ctypes.c_longlong(ld),
                                ctypes.c_void_p(lo_ptr), ctypes.c_longlong(ld),
                                ctypes.c_void_p(hi_again_ptr), ctypes.c_void_p(flag))


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


def round_panel(lane, owner, compute, A, trans, key=None):
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
        _split_operand(lane, _SPLITS[compute], A, buffer, buffer + block, ld,
                       buffer + 2 * block, flag)
    else:
        lane.backend.kernels.launch(kernel, _aux_grid(A.rows, A.cols), _AUX_BLOCK, lane.handle,
                                    ctypes.c_void_p(A.ptr), ctypes.c_longlong(A.ld),
                                    ctypes.c_int(A.rows), ctypes.c_int(A.cols),
                                    ctypes.c_void_p(buffer), ctypes.c_longlong(ld),
                                    ctypes.c_void_p(flag))
    return _RoundedPanel(compute, A, buffer, ld, block, along_rows, 2)


def gemm_rounded_panel(lane, owner, panel, alpha, first, second, beta, C, trans_a, trans_b):
    """C := alpha op(part first) op(part second) + beta C, the parts (i0, i1) of a
    round_panel along its long side, on the tensor cores as gemm_reduced."""
    if panel.compute not in _OPERAND_TYPE:
        lane.backend.gemm_reduced(lane, owner, panel.compute, alpha, panel.source_part(*first),
                                  panel.source_part(*second), beta, C, trans_a, trans_b)
        return
    a, b = panel.pointer(first[0]), panel.pointer(second[0])
    if panel.compute == "half-x3":
        _error_corrected_products(lane, alpha, beta, C, panel.k, trans_a, trans_b,
                                  (a, a, panel.ld), (b, b + panel.block, panel.ld))
        return
    operand_type, _ = _OPERAND_TYPE[panel.compute]
    scalars = np.array([alpha, beta], dtype=np.float32)
    cublas.gemm_ex(lane.blas, _OP[trans_a], _OP[trans_b], C.rows, C.cols, panel.k,
                   scalars.ctypes.data, a, operand_type, panel.ld, b, operand_type, panel.ld,
                   scalars.ctypes.data + 4, C.ptr, _CUDA_R_32F, C.ld, _COMPUTE_32F,
                   _GEMM_DEFAULT)
