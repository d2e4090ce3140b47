"""The cuda backend's LDL^T / structured-solve module (hybridla/backend/cuda_ldl.py) run on the
CPU, for machines without a GPU (plain functions and classes, no pytest in here).

- `load_cuda_ldl(monkeypatch)`: a fresh copy of cuda_ldl.py whose `nvmath.bindings` are the
  emulations below: cuBLAS geam / dgmm and cuSOLVER <t>sytrf / Xsytrs with the signatures of
  nvmath-python 1.0's bindings (argument for argument, as its .pxd declares them), acting on raw
  pointers into NumPy memory with the semantics the NVIDIA documentation gives (column-major,
  leading dimensions, host pointers to alpha and beta, the fill-mode, operation, side and
  cudaDataType codes), the LAPACK work done by scipy.linalg.lapack. Every pointer is checked to
  lie inside memory registered here (an AssertionError instead of a stray write), and geam's
  and dgmm's operands not to overlap where cuBLAS does not allow it.
- `Block`: the cuda backend's DeviceBlock (pointer, rows, cols, leading dimension, dtype).
- `PretendDevice`: the host backend claiming a device (`has_device`), its stores host arrays,
  `device_matrix` / `wrap` as the cuda backend's (in place when column-major, else a column-major
  copy), and `ldl` the emulated cuda_ldl module over its blocks: _solve_device.solve_form and the
  drivers run end to end on it.
"""
from __future__ import annotations

import ctypes
import importlib.util
import pathlib
import sys
import types

import numpy as np
from scipy.linalg import get_lapack_funcs

from hybridla.backend.host import HostBackend

try:
    from numpy.lib.array_utils import byte_bounds  # NumPy 2
except ImportError:  # NumPy 1
    byte_bounds = np.byte_bounds

_PREFIX = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}
_DATA_TYPE = {0: np.float32, 1: np.float64, 4: np.complex64, 5: np.complex128}
CUDA_LDL = pathlib.Path(__file__).resolve().parents[1] / "hybridla" / "backend" / "cuda" / "ldl.py"


# -- memory ------------------------------------------------------------------------------------
class Memory:
    """The address ranges the emulated libraries may touch (NumPy arrays' whole buffers)."""

    def __init__(self):
        self.ranges = []

    def register(self, array):
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        low, high = byte_bounds(root)
        if (low, high) not in self.ranges:
            self.ranges.append((low, high))

    def view(self, ptr, rows, cols, ld, dtype):
        """The rows x cols column-major array at ptr with leading dimension ld (writable)."""
        dtype = np.dtype(dtype)
        assert ld >= max(rows, 1) or rows <= 1, f"ld {ld} < rows {rows}"
        if rows == 0 or cols == 0:
            return np.zeros((rows, cols), dtype)
        count = rows + (cols - 1) * ld
        end = ptr + count * dtype.itemsize
        assert any(low <= ptr and end <= high for low, high in self.ranges), \
            f"{rows} x {cols} (ld {ld}) at {ptr:#x} is outside the registered memory"
        flat = np.frombuffer((ctypes.c_char * (count * dtype.itemsize)).from_address(ptr),
                             dtype=dtype, count=count)
        return np.lib.stride_tricks.as_strided(flat, (rows, cols),
                                               (dtype.itemsize, ld * dtype.itemsize))

    def scalar(self, ptr, dtype):
        return self.view(ptr, 1, 1, 1, dtype)[0, 0]


MEMORY = Memory()


class Block:
    """The cuda backend's DeviceBlock, over NumPy memory."""

    __slots__ = ("ptr", "rows", "cols", "ld", "dtype")

    def __init__(self, ptr, rows, cols, ld, dtype):
        self.ptr, self.rows, self.cols, self.ld, self.dtype = ptr, rows, cols, ld, np.dtype(dtype)

    @property
    def size(self):
        return self.rows * self.cols

    @property
    def shape(self):
        return (self.rows, self.cols)

    def sub(self, r0, r1, c0, c1):
        return Block(self.ptr + (r0 + c0 * self.ld) * self.dtype.itemsize, r1 - r0, c1 - c0,
                     self.ld, self.dtype)


def block_of(x):
    """A column-major NumPy view as a Block (its memory registered)."""
    assert x.ndim == 2
    item = x.dtype.itemsize
    if x.shape[0] > 1:
        assert x.strides[0] == item, f"not column-major: strides {x.strides}"
    ld = x.strides[1] // item if x.shape[1] > 1 else max(x.shape[0], 1)
    MEMORY.register(x)
    return Block(x.ctypes.data, x.shape[0], x.shape[1], max(ld, 1), x.dtype)


def array_of(B):
    return MEMORY.view(B.ptr, B.rows, B.cols, B.ld, B.dtype)


def _intervals_overlap(X, Y):
    def span(B):
        return B.ptr, B.ptr + (B.rows + (B.cols - 1) * B.ld) * B.dtype.itemsize
    (a0, a1), (b0, b1) = span(X), span(Y)
    return X.size and Y.size and a0 < b1 and b0 < a1


# -- the emulated libraries --------------------------------------------------------------------
def _op(x, code):
    return {0: x, 1: x.T, 2: x.conj().T}[code]


def _cublas():
    cublas = types.SimpleNamespace()
    for prefix, dtype in _PREFIX.items():
        def geam(handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc,
                 dtype=dtype):
            """C = alpha op(A) + beta op(B) (m x n); in place only as C = A with transa N and
            lda = ldc, or C = B with transb N and ldb = ldc (cuBLAS's rule)."""
            A = Block(a, *((m, n) if transa == 0 else (n, m)), lda, dtype)
            B = Block(b, *((m, n) if transb == 0 else (n, m)), ldb, dtype)
            C = Block(c, m, n, ldc, dtype)
            for X, trans in ((A, transa), (B, transb)):
                if X.ptr == C.ptr:
                    assert trans == 0 and X.ld == C.ld, "geam: bad in-place mode"
                else:
                    assert not _intervals_overlap(X, C), "geam: C overlaps an operand"
            al, be = MEMORY.scalar(alpha, dtype), MEMORY.scalar(beta, dtype)
            with np.errstate(all="ignore"):  # operands may hold garbage where it is not used
                result = al * _op(array_of(A), transa)
                if be != 0:
                    result = result + be * _op(array_of(B), transb)
            array_of(C)[...] = result

        def dgmm(handle, mode, m, n, a, lda, x, incx, c, ldc, dtype=dtype):
            """C = diag(x) A (mode 0, left) or A diag(x) (mode 1); not in place."""
            A, C = Block(a, m, n, lda, dtype), Block(c, m, n, ldc, dtype)
            assert not _intervals_overlap(A, C), "dgmm in place is not documented"
            v = MEMORY.view(x, 1, m if mode == 0 else n, incx, dtype)[0]
            array_of(C)[...] = v[:, None] * array_of(A) if mode == 0 else array_of(A) * v
        cublas.__dict__[prefix + "geam"], cublas.__dict__[prefix + "dgmm"] = geam, dgmm
    return cublas


LWORK = 7  # what the emulated <t>sytrf_bufferSize asks for
XSYTRS_BYTES = (24, 8)  # and Xsytrs_bufferSize (device, host)


def _cusolver():
    solver = types.SimpleNamespace(calls=[])
    for prefix, dtype in _PREFIX.items():
        def buffer_size(handle, n, a, lda, dtype=dtype):
            Block(a, n, n, lda, dtype)
            return LWORK

        def sytrf(handle, uplo, n, a, lda, ipiv, work, lwork, info, dtype=dtype):
            """LAPACK <t>sytrf on the `uplo` (0 lower, 1 upper) triangle, in place."""
            assert uplo in (0, 1) and lwork >= LWORK
            array_of(Block(work, lwork, 1, lwork, dtype))  # the workspace is there
            A = array_of(Block(a, n, n, lda, dtype))
            trf, = get_lapack_funcs(("sytrf",), dtype=dtype)
            ldu, piv, status = trf(np.array(A, order="F"), lower=int(uplo == 0))
            A[...] = ldu
            MEMORY.view(ipiv, n, 1, n, np.int32)[:, 0] = piv
            MEMORY.view(info, 1, 1, 1, np.int32)[0, 0] = status
            solver.calls.append(("sytrf", uplo))
        solver.__dict__[prefix + "sytrf_buffer_size"] = buffer_size
        solver.__dict__[prefix + "sytrf"] = sytrf

    def xsytrs_buffer_size(handle, uplo, n, nrhs, data_type_a, a, lda, ipiv, data_type_b, b,
                           ldb):
        assert data_type_a == data_type_b and data_type_a in _DATA_TYPE
        return XSYTRS_BYTES

    def xsytrs(handle, uplo, n, nrhs, data_type_a, a, lda, ipiv, data_type_b, b, ldb,
               buffer_on_device, workspace_in_bytes_on_device, buffer_on_host,
               workspace_in_bytes_on_host, info):
        """LAPACK <t>sytrs with int64 pivots (sytrf's, widened)."""
        dtype = _DATA_TYPE[data_type_a]
        assert data_type_b == data_type_a and uplo in (0, 1)
        assert (workspace_in_bytes_on_device, workspace_in_bytes_on_host) == XSYTRS_BYTES
        array_of(Block(buffer_on_device, workspace_in_bytes_on_device, 1,
                       workspace_in_bytes_on_device, np.uint8))
        assert buffer_on_host != 0
        A = array_of(Block(a, n, n, lda, dtype))
        pivots = MEMORY.view(ipiv, n, 1, n, np.int64)[:, 0].astype(np.int32)
        B = array_of(Block(b, n, nrhs, ldb, dtype))
        trs, = get_lapack_funcs(("sytrs",), dtype=dtype)
        x, status = trs(np.array(A, order="F"), pivots, np.array(B, order="F"),
                        lower=int(uplo == 0))
        B[...] = x
        MEMORY.view(info, 1, 1, 1, np.int32)[0, 0] = status
        solver.calls.append(("xsytrs", uplo, nrhs))
    solver.xsytrs_buffer_size, solver.xsytrs = xsytrs_buffer_size, xsytrs
    return solver


def load_cuda_ldl(monkeypatch):
    """cuda_ldl.py loaded afresh against the emulated bindings (sys.modules restored by the
    monkeypatch after the test); its scalars registered."""
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublas, bindings.cusolverDn = _cublas(), _cusolver()
    nvmath = types.ModuleType("nvmath")
    nvmath.bindings = bindings
    monkeypatch.setitem(sys.modules, "nvmath", nvmath)
    monkeypatch.setitem(sys.modules, "nvmath.bindings", bindings)
    spec = importlib.util.spec_from_file_location("cuda_ldl_emulated", CUDA_LDL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    MEMORY.ranges.clear()  # a test's own arrays only (freed ones' addresses may be reused)
    for table in (module._ONE, module._ZERO):
        for scalar in table.values():
            MEMORY.register(scalar)
    return module


# -- the backend the module is handed: the cuda backend's lacpy, laset, synchronize -------------
class Lane:
    name, blas, solver, handle = "gpu:update", 11, 22, 33

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class PointerBackend:
    """lacpy and laset with the semantics of the cuda backend's (lapack_aux.cu) on Blocks."""

    def __init__(self):
        self.synchronized = 0

    @staticmethod
    def _part(shape, uplo, with_diagonal):
        i, j = np.indices(shape)
        return {"A": np.ones(shape, bool), "U": j >= i if with_diagonal else j > i,
                "L": i >= j if with_diagonal else i > j}[uplo]

    def lacpy(self, lane, uplo, src, dst):
        if dst.size:
            mask = self._part(dst.shape, uplo, True)
            array_of(dst)[mask] = array_of(src)[mask]

    def laset(self, lane, uplo, alpha, beta, B):
        if B.size:
            X = array_of(B)
            X[self._part(B.shape, uplo, False) & ~np.eye(*B.shape, dtype=bool)] = alpha
            np.fill_diagonal(X, beta)

    def synchronize(self):
        self.synchronized += 1


# -- a host backend that stands in for the cuda one --------------------------------------------
class _Store:
    """A host store seen by cuda_ldl: its workspaces as Blocks."""

    def __init__(self, store):
        self.store = store

    def workspace(self, name, rows, cols, dtype=None):
        return block_of(self.store.workspace(name, rows, cols, dtype))


class LdlOnHost:
    """`backend.ldl` of PretendDevice: the emulated cuda_ldl functions over host blocks."""

    def __init__(self, module):
        self.module, self.pointers = module, PointerBackend()
        self.MIRROR_BLOCK = module.MIRROR_BLOCK

    def sytrf_lwork(self, backend, lane, A):
        return self.module.sytrf_lwork(self.pointers, Lane(), block_of(A))

    def sytrf(self, backend, lane, uplo, A, ipiv, work, info):
        self.module.sytrf(self.pointers, Lane(), uplo, *map(block_of, (A, ipiv, work, info)))

    def sytrs(self, backend, lane, uplo, A, ipiv, B, F, info):
        self.module.sytrs(self.pointers, Lane(), uplo, block_of(A), block_of(ipiv), block_of(B),
                          _Store(F), block_of(info))

    def mirror_triangle(self, backend, lane, uplo, A, scratch, conjugate):
        self.module.mirror_triangle(self.pointers, Lane(), uplo, block_of(A), block_of(scratch),
                                    conjugate)

    def real_diagonal(self, backend, lane, A):
        self.module.real_diagonal(self.pointers, Lane(), block_of(A))

    def transpose(self, backend, lane, src, dst):
        self.module.transpose(self.pointers, Lane(), block_of(src), block_of(dst))

    def diagonal(self, A, k=0):
        return array_of(self.module.diagonal(block_of(A), k))

    def scale_rows(self, backend, lane, r, B, out):
        self.module.scale_rows(self.pointers, Lane(), block_of(r), block_of(B), block_of(out))


class PretendDevice(HostBackend):
    """The host backend with has_device = True and the cuda backend's ways with arrays."""
    has_device = True
    device_name = "pretend device"

    def __init__(self, module):
        super().__init__()
        self.ldl = LdlOnHost(module)

    def wrap(self, a, pivots=None, tau=None):  # the cuda backend's: a copy unless column-major
        a = a if a.ndim == 2 else a.reshape(-1, 1)
        return super().wrap(a if a.flags.f_contiguous else np.asfortranarray(a), pivots, tau)

    def device_matrix(self, obj, nb, overwrite):
        two = obj if obj.ndim == 2 else obj.reshape(-1, 1)
        if overwrite and two.flags.f_contiguous and two.flags.writeable:
            return super().wrap(two), obj, None
        copy = np.array(two, order="F")
        if not overwrite:
            return super().wrap(copy), copy, None

        def write_back():  # a row-major array under overwrite: the result back in its layout
            two[...] = copy
        return super().wrap(copy), obj, write_back

    @staticmethod
    def required_bytes(m, n, dtype, nb):
        return m * n * np.dtype(dtype).itemsize

    @staticmethod
    def free_memory():
        return 1 << 40
