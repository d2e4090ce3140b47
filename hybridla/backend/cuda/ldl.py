"""The cuda backend's operations for solve's structured forms (the drivers lapack/sytrf.py,
trtrs.py and larscl2.py): cuSOLVER <t>sytrf and Xsytrs, and the cuBLAS geam / dgmm calls and
the block views those drivers need, on the tile stores' device blocks.

Module-level functions over (backend, lane, ...), like the backend's family files: the caller
has entered `lane` (``with lane:``, which holds its handles and makes the context current) and
every call is enqueued on the lane's stream, raw pointers in, no host wait, except where a
docstring names one. Only the backend's public operations are used besides the two libraries
(backend.lacpy, backend.laset; DeviceBlock through `type(block)`).

cuSOLVER has no Hermitian factorization: its c/zsytrf factor a complex *symmetric* matrix
(A = A^T), which is what solve's "sym" means for complex dtypes; "her" goes another way
(lapack/sytrf.py's `hermitian_full` and LU: see _solve_device.py).
"""
from __future__ import annotations

import numpy as np
from nvmath.bindings import cublas, cusolverDn

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
           np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
_UPLO = {"L": 0, "U": 1}          # cublasFillMode_t: CUBLAS_FILL_MODE_LOWER, _UPPER
_OP = {"N": 0, "T": 1, "C": 2}    # cublasOperation_t
_SIDE_LEFT = 0                    # cublasSideMode_t CUBLAS_SIDE_LEFT: C = diag(x) A
# cudaDataType (library_types.h): CUDA_R_32F, CUDA_R_64F, CUDA_C_32F, CUDA_C_64F
_DATA_TYPE = {np.dtype(np.float32): 0, np.dtype(np.float64): 1,
              np.dtype(np.complex64): 4, np.dtype(np.complex128): 5}
# host scalars for cuBLAS's default (host) pointer mode, alive for the process
_ONE = {dtype: np.ones(1, dtype) for dtype in _PREFIX}
_ZERO = {dtype: np.zeros(1, dtype) for dtype in _PREFIX}
MIRROR_BLOCK = 512  # mirror_triangle's diagonal blocks: 3 calls per block column


def _call(library, routine, dtype):
    return getattr(library, _PREFIX[np.dtype(dtype)] + routine)


# -- LDL^T: cuSOLVER ---------------------------------------------------------------------------
def sytrf_lwork(backend, lane, A) -> int:
    """Elements of the workspace <t>sytrf needs for the n x n block A (<t>sytrf_bufferSize)."""
    return int(_call(cusolverDn, "sytrf_buffer_size", A.dtype)(lane.solver, A.rows, A.ptr, A.ld))


def sytrf(backend, lane, uplo, A, ipiv, work, info):
    """Bunch-Kaufman A = L D L^T (uplo "L") or U D U^T ("U") in place on A's `uplo` triangle
    (cuSOLVER <t>sytrf, LAPACK's layout): `ipiv` an n x 1 int32 block (LAPACK's pivots:
    1-based, negative for a 2 x 2 block of D), `work` a block of sytrf_lwork elements, `info`
    a 1 x 1 int32 block (LAPACK's: i > 0 when D(i, i) is exactly zero)."""
    _call(cusolverDn, "sytrf", A.dtype)(lane.solver, _UPLO[uplo], A.rows, A.ptr, A.ld, ipiv.ptr,
                                        work.ptr, work.rows * work.cols, info.ptr)


def sytrs(backend, lane, uplo, A, ipiv, B, F, info):
    """B := A^-1 B with sytrf's factors in A (cuSOLVER Xsytrs, the 64-bit API): `ipiv` an n x 1
    int64 block holding sytrf's pivots, `info` a 1 x 1 int32 block (< 0: a bad argument). Its
    device workspace is the store F's workspace "xsytrs"; its host workspace a NumPy buffer
    that must outlive the call, so when it has one this waits for the lane's stream (a named
    host wait; the queries say 0 bytes where none is needed)."""
    dtype = _DATA_TYPE[A.dtype]
    on_device, on_host = cusolverDn.xsytrs_buffer_size(
        lane.solver, _UPLO[uplo], A.rows, B.cols, dtype, A.ptr, A.ld, ipiv.ptr, dtype, B.ptr, B.ld)
    device = F.workspace("xsytrs", max(int(on_device), 1), 1, np.uint8)
    host = np.empty(max(int(on_host), 1), np.uint8)
    cusolverDn.xsytrs(lane.solver, _UPLO[uplo], A.rows, B.cols, dtype, A.ptr, A.ld, ipiv.ptr,
                      dtype, B.ptr, B.ld, device.ptr, int(on_device), host.ctypes.data,
                      int(on_host), info.ptr)
    if on_host:
        backend.synchronize()  # the host workspace goes with this frame


# -- completing a symmetric or Hermitian matrix from one triangle ------------------------------
def mirror_triangle(backend, lane, uplo, A, scratch, conjugate):
    """The triangle of the n x n block A opposite `uplo` := the `uplo` triangle's transpose
    (conjugate transpose when `conjugate`); the diagonal is left as it is. Per block column
    of MIRROR_BLOCK: the diagonal block transposed into `scratch` (a MIRROR_BLOCK square block
    or larger) and its strict triangle copied back, then the panel beside it transposed into
    its mirror image (disjoint, one cuBLAS geam)."""
    n, dtype = A.rows, A.dtype
    geam = _call(cublas, "geam", dtype)
    op = _OP["C" if conjugate else "T"]
    one, zero = _ONE[dtype].ctypes.data, _ZERO[dtype].ctypes.data

    def transpose(src, dst):  # dst := op(src): geam's C = B in place with transb "N", beta 0
        geam(lane.blas, op, _OP["N"], dst.rows, dst.cols, one, src.ptr, src.ld, zero, dst.ptr,
             dst.ld, dst.ptr, dst.ld)
    for c0 in range(0, n, MIRROR_BLOCK):
        c1 = min(c0 + MIRROR_BLOCK, n)
        k = c1 - c0
        D, S = A.sub(c0, c1, c0, c1), scratch.sub(0, k, 0, k)
        transpose(D, S)
        if uplo == "L":
            # D's strict upper := S's (D's strict lower, transposed): lacpy "U" of the
            # (k-1) x (k-1) block one column to the right is exactly that strict triangle
            backend.lacpy(lane, "U", S.sub(0, k - 1, 1, k), D.sub(0, k - 1, 1, k))
            if c1 < n:  # A[c0:c1, c1:n] := op(A[c1:n, c0:c1])
                transpose(A.sub(c1, n, c0, c1), A.sub(c0, c1, c1, n))
        else:
            backend.lacpy(lane, "L", S.sub(1, k, 0, k - 1), D.sub(1, k, 0, k - 1))
            if c1 < n:  # A[c1:n, c0:c1] := op(A[c0:c1, c1:n])
                transpose(A.sub(c0, c1, c1, n), A.sub(c1, n, c0, c1))


def real_diagonal(backend, lane, A):
    """Im A(i, i) := 0 on the square complex block A (a Hermitian matrix's diagonal, as LAPACK's
    hetrf reads it): laset on the imaginary parts, a 1 x n real block with leading dimension
    2 (ld + 1)."""
    real = np.dtype(A.dtype.char.lower())
    imaginary = type(A)(A.ptr + real.itemsize, 1, A.cols, 2 * (A.ld + 1), real)
    backend.laset(lane, "A", 0, 0, imaginary)


def transpose(backend, lane, src, dst):
    """dst := src^T (dst src.cols x src.rows, apart from src): one cuBLAS geam."""
    geam = _call(cublas, "geam", dst.dtype)
    geam(lane.blas, _OP["T"], _OP["N"], dst.rows, dst.cols, _ONE[dst.dtype].ctypes.data, src.ptr,
         src.ld, _ZERO[dst.dtype].ctypes.data, dst.ptr, dst.ld, dst.ptr, dst.ld)


# -- diagonals -------------------------------------------------------------------------------
def diagonal(A, k=0):
    """The k-th diagonal of the square block A (k > 0 above, k < 0 below the main one) as a
    1 x (n - |k|) block whose leading dimension is A's + 1: no copy (backend.to_host brings it
    down in one strided 2-D copy)."""
    n = A.rows
    r0, c0 = max(-k, 0), max(k, 0)
    return type(A)(A.ptr + (r0 + c0 * A.ld) * A.dtype.itemsize, 1, max(n - abs(k), 0), A.ld + 1,
                   A.dtype)


def scale_rows(backend, lane, r, B, out):
    """out := diag(r) B (cuBLAS dgmm, CUBLAS_SIDE_LEFT): r an n x 1 block, out B's shape and
    apart from B (cuBLAS documents no in-place dgmm)."""
    _call(cublas, "dgmm", B.dtype)(lane.blas, _SIDE_LEFT, B.rows, B.cols, B.ptr, B.ld, r.ptr, 1,
                                   out.ptr, out.ld)
