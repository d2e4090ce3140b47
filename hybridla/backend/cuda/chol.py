"""What the Cholesky asks of the cuda backend: the diagonal block's potrf (cuSOLVER), the update
of the diagonal blocks of a trailing matrix (herk_diagonal_blocks: strided-batched gemms), the
products of a worker's spaced block columns (gemm_spaced_blocks), and the zeroed triangle of a
user's device array.

Module-level functions over (lane, blocks, ...) as blas.py's; zero_triangle takes the backend
(no lane: it is complete on return).
"""
from __future__ import annotations

import ctypes

from nvmath.bindings import cusolverDn

from .blas import _AUX_BLOCK, _GEMM_STRIDED, _LASET_PART, _OP, _UPLO, _aux_grid, _scalar
from .interop import device_array_layout
from .runtime import _PREFIX

# herk_diagonal_blocks halves a diagonal block down to this order: its gemms of 256 x 256 from
# a panel of 1024 still fill the device as one batch of the trailing matrix's blocks
_DIAGONAL_LEAF = 256


def potrf_panel(lane, A, step, uplo, k0, k1):
    """cuSOLVER potrf on the diagonal block A[k0:k1, k0:k1]; its info (the order of the first
    non-positive leading minor, within the block) goes to the step's info slot."""
    block = A.block(k0, k1, k0, k1)
    prefix = _PREFIX[A.dtype]
    need = getattr(cusolverDn, prefix + "potrf_buffer_size")(lane.solver, _UPLO[uplo],
                                                              block.rows, block.ptr, block.ld)
    work = A.extra_workspace("potrf", need * A.itemsize)
    getattr(cusolverDn, prefix + "potrf")(lane.solver, _UPLO[uplo], block.rows, block.ptr,
                                         block.ld, work, need, int(A.info_dev) + step * 4)


def herk_diagonal_blocks(lane, uplo, trans, alpha, A, C, nb, scratch, row_step=None):
    """The `uplo` triangles of C's diagonal blocks of nb (the last one may be smaller)
    += alpha op(A) op(A)^H for the matching rows ("N") or columns ("C") of A. With
    `row_step` (lower, "N" only): C's blocks of nb columns each, block i at rows i row_step
    (a worker's block columns of a matrix dealt out cyclically), all full: `_spaced_blocks`.

    cuBLAS's herk on one small block runs far below gemm's rate and each is a launch of its
    own, so the full blocks are strided-batched gemms: each block's triangle halved (the
    square between its halves, for all blocks in one call) down to blocks of
    `_DIAGONAL_LEAF`, whose full squares, both triangles, go to `scratch` (nb x C.rows or
    more) in one more call, and whose `uplo` triangles one kernel adds to C (the other
    triangle of C is not touched: LAPACK's contract for the user's matrix). Squares of the
    leaf's order rather than nb's cut the flops spent on the other triangle by nb / leaf."""
    if row_step is not None and row_step != nb:
        _spaced_blocks(lane, uplo, trans, alpha, A, C, nb, scratch, row_step)
        return
    full, rest = divmod(C.rows, nb)
    if rest:
        start = full * nb
        part = A.sub(start, A.rows, 0, A.cols) if trans == "N" else \
            A.sub(0, A.rows, start, A.cols)
        lane.backend.herk(lane, uplo, trans, alpha, part, 1,
                          C.sub(start, C.rows, start, C.cols))
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
            lane.blas, _OP[ops[0]], _OP[ops[1]], half, half, k, _scalar(dtype, alpha),
            A.ptr + first * unit * item, A.ld, 2 * half * unit,
            A.ptr + second * unit * item, A.ld, 2 * half * unit,
            _scalar(dtype, 1),
            C.ptr + (first + second * C.ld) * item, C.ld, 2 * half * (C.ld + 1),
            full * nb // (2 * half))
    blocks = full * nb // leaf
    _GEMM_STRIDED[dtype](lane.blas, _OP[ops[0]], _OP[ops[1]], leaf, leaf, k,
                         _scalar(dtype, alpha), A.ptr, A.ld, leaf * unit, A.ptr, A.ld,
                         leaf * unit, _scalar(dtype, 0), scratch.ptr, leaf, leaf * leaf,
                         blocks)
    lane.backend.kernels.launch(f"add_triangles_{_PREFIX[dtype]}",
                                (*_aux_grid(leaf, leaf), blocks),
                                _AUX_BLOCK, lane.handle, ctypes.c_void_p(scratch.ptr),
                                ctypes.c_longlong(leaf), ctypes.c_longlong(leaf * leaf),
                                ctypes.c_void_p(C.ptr), ctypes.c_longlong(C.ld),
                                ctypes.c_longlong(leaf * (C.ld + 1)), ctypes.c_int(leaf),
                                ctypes.c_int(_LASET_PART[uplo]))


def _spaced_blocks(lane, uplo, trans, alpha, A, C, nb, scratch, row_step):
    """herk_diagonal_blocks for blocks i at rows i row_step of C (and A), columns i nb of C:
    their full squares, both triangles, in one strided-batched gemm to `scratch` (nb x C.cols
    or more), then the `uplo` triangles added to C by one kernel. Squares of nb rather than
    the halving's leaves: the nb^2 kb flops a block spends on its other triangle are a
    sliver of its column's update."""
    if uplo != "L" or trans != "N" or C.cols % nb:
        raise ValueError("spaced diagonal blocks are lower, of A's rows, all of order nb")
    blocks, dtype, k = C.cols // nb, C.dtype, A.cols
    if not blocks:
        return
    _GEMM_STRIDED[dtype](lane.blas, _OP["N"], _OP["C"], nb, nb, k, _scalar(dtype, alpha),
                         A.ptr, A.ld, row_step, A.ptr, A.ld, row_step, _scalar(dtype, 0),
                         scratch.ptr, nb, nb * nb, blocks)
    lane.backend.kernels.launch(f"add_triangles_{_PREFIX[dtype]}",
                                (*_aux_grid(nb, nb), blocks),
                                _AUX_BLOCK, lane.handle, ctypes.c_void_p(scratch.ptr),
                                ctypes.c_longlong(nb), ctypes.c_longlong(nb * nb),
                                ctypes.c_void_p(C.ptr), ctypes.c_longlong(C.ld),
                                ctypes.c_longlong(row_step + nb * C.ld), ctypes.c_int(nb),
                                ctypes.c_int(_LASET_PART[uplo]))


def gemm_spaced_blocks(lane, alpha, A, B, beta, C, nb, row_step):
    """C's block columns i of nb (columns i nb : i nb + nb, all full) := alpha A B_i^H +
    beta C_i, B_i the nb rows of B from row i row_step: one strided-batched gemm, A shared by
    every block (its stride 0). The batch's tiles fill the device where one gemm per block
    (its few column tiles) leaves part of it idle."""
    blocks, dtype, k = C.cols // nb, C.dtype, A.cols
    if not blocks or not C.rows:
        return
    _GEMM_STRIDED[dtype](lane.blas, _OP["N"], _OP["C"], C.rows, nb, k, _scalar(dtype, alpha),
                         A.ptr, A.ld, 0, B.ptr, B.ld, row_step, _scalar(dtype, beta),
                         C.ptr, C.ld, nb * C.ld, blocks)


def zero_triangle(backend, obj, upper: bool):
    """Set the strictly upper (or lower) triangle of a square device array to zero."""
    ptr, (n, _), dtype, strides = device_array_layout(obj)
    column_major = strides[0] == dtype.itemsize
    ld = (strides[1] if column_major else strides[0]) // dtype.itemsize
    # a row-major array is the transpose in column-major terms: the other triangle
    lane = backend.lane("gpu:update")
    with lane:
        backend.kernels.launch(f"zero_triangle_{dtype.itemsize}", (-(-n // 256), n), (256,),
                               lane.handle, ctypes.c_void_p(ptr), ctypes.c_longlong(max(ld, 1)),
                               ctypes.c_int(n), ctypes.c_int(int(upper == column_major)))
    backend.synchronize()
