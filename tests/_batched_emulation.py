"""The cuda backend's stacks module (hybridla/backend/cuda/batched.py) run on the CPU, so that the
device side of tests/test_stacks.py (drivers, pointer arrays, offsets, broadcasting, infos)
runs in CI without a GPU. Plain functions and classes, no pytest in here.

- `install(monkeypatch)`: a fresh copy of cuda/batched.py (and of batched_stacks.py, its stack
  types) loaded over emulations of what they import (PyCUDA's mem_alloc and compiler,
  backend/_driver's Module, streams and memset, the driver's cuMemcpy*, nvmath's cuBLAS and
  cuSOLVER bindings: argument for argument as nvmath-python's .pyx declares them; runtime's
  kernel source, read from cuda/, and its compile_source), an emulated backend made hybridla's "cuda" one for the
  test, and hybridla's user layer and drivers pointed at the copy. Returns an `Emulation`.
- The kernels of cuda/batched.cu are emulated by what their comments specify (stack_copy,
  fill_pointers, pivots_gather, getrf_panel_batched, laswp_batched, getrf_warp, potrf_warp): a
  change to a
  kernel's contract changes both. The CUDA code itself is tested on the GPU (-m cuda).
- Device memory is host memory: pointers are addresses of NumPy buffers, every one checked to
  lie in memory registered here (an AssertionError, not a stray write).
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import pathlib
import sys
import threading
import types

import numpy as np
import scipy.linalg as sl

_ROOT = pathlib.Path(__file__).resolve().parents[1] / "hybridla" / "backend"
_WORD = {"4": np.float32, "8": np.float64, "16": np.complex128}
_TYPE = {"s": np.float32, "d": np.float64, "c": np.complex64, "z": np.complex128}


# -- memory --------------------------------------------------------------------------------------
class Memory:
    """The address ranges the emulation may touch."""

    def __init__(self):
        self.buffers = {}  # start -> (end, keep-alive object)

    def register(self, array):
        base = array
        while isinstance(base.base, np.ndarray):
            base = base.base
        start = base.__array_interface__["data"][0]
        self.buffers[start] = (start + max(base.nbytes, 1), base)

    def check(self, start, nbytes):
        for low, (high, _) in self.buffers.items():
            if low <= start and start + nbytes <= high:
                return
        raise AssertionError(f"emulated device access [{start:#x}, +{nbytes}) outside memory")

    def view(self, ptr, shape, strides, dtype):
        """The emulated device memory at ptr as an ndarray of that shape and byte strides."""
        dtype = np.dtype(dtype)
        shape, strides = tuple(int(s) for s in shape), tuple(int(s) for s in strides)
        if 0 in shape:
            return np.empty(shape, dtype)
        extent = sum((s - 1) * st for s, st in zip(shape, strides)) + dtype.itemsize
        self.check(int(ptr), extent)
        buffer = (ctypes.c_char * extent).from_address(int(ptr))
        return np.ndarray(shape, dtype, buffer=buffer, strides=strides)

    def matrix(self, ptr, m, n, ld, dtype):
        itemsize = np.dtype(dtype).itemsize
        return self.view(ptr, (m, n), (itemsize, ld * itemsize), dtype)


class Allocation:
    def __init__(self, memory, nbytes):
        self.buf = np.full(max(int(nbytes), 1), 0xAB, np.uint8)  # garbage, as cuMemAlloc's
        memory.register(self.buf)
        self.memory, self.ptr = memory, self.buf.ctypes.data

    def __int__(self):
        return self.ptr

    def free(self):
        self.memory.buffers.pop(self.ptr, None)


class EmulatedArray:
    """A user's device array: a NumPy array behind __cuda_array_interface__."""

    def __init__(self, memory, array):
        self.a = array
        memory.register(array)

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.a.shape, "typestr": self.a.dtype.str,
                "data": (self.a.__array_interface__["data"][0], False),
                "strides": self.a.strides, "version": 3}

    @property
    def shape(self):
        return self.a.shape


# -- the emulated libraries ----------------------------------------------------------------------
def _abs1(x):
    return np.abs(x.real) + np.abs(x.imag) if np.iscomplexobj(x) else np.abs(x)


def _getf2(panel, pivots, k=0):
    """LAPACK getf2 on `panel` in place; pivots[k + j] := k + p; returns the first zero pivot
    (1-based, relative to the panel's first column), 0 if none."""
    first = 0
    for j in range(min(panel.shape)):
        p = j + int(np.argmax(_abs1(panel[j:, j])))
        pivots[k + j] = k + p
        if panel[p, j] == 0 and first == 0:
            first = j + 1
        if p != j:
            panel[[j, p], :] = panel[[p, j], :]
        if panel[j, j] != 0:
            panel[j + 1:, j] /= panel[j, j]
            panel[j + 1:, j + 1:] -= np.outer(panel[j + 1:, j], panel[j, j + 1:])
    return first


class Kernels:
    """batched.cu's kernels, launched by name with ctypes arguments."""

    def __init__(self, memory):
        self.memory, self.shared, self.launches = memory, {}, []

    def allow_shared(self, name, nbytes):
        self.shared[name] = nbytes

    def launch(self, name, grid, block, stream, *args, shared=0, cooperative=False):
        self.launches.append(name)
        values = [a.value if a.value is not None else 0 for a in args]
        for prefix in ("stack_copy", "fill_pointers", "pivots_gather", "getrf_panel_batched",
                       "laswp_batched", "getrf_warp", "potrf_warp"):
            if name.startswith(prefix):
                if prefix == "getrf_panel_batched":
                    assert shared <= self.shared[name], (name, shared, self.shared)
                if prefix == "laswp_batched":
                    assert shared <= 48 * 1024, (name, shared)
                return getattr(self, prefix)(name, *values)
        raise AssertionError(f"no emulation of kernel {name}")

    def stack_copy(self, name, src, offsets, src_stride, rs, cs, dst, dst_ld, dst_stride, m, n,
                   count, part, rest):
        mem, dtype = self.memory, np.dtype(_WORD[name.rsplit("_", 1)[1]])
        size = dtype.itemsize
        offs = mem.view(offsets, (count,), (8,), np.int64) if offsets else None
        r, c = np.indices((m, n))
        mask = {0: np.ones((m, n), bool), 1: r <= c, 2: r >= c, 3: r < c, 4: r > c}[part]
        for b in range(count):
            d = mem.matrix(dst + b * dst_stride * size, m, n, dst_ld, dtype)
            if src:
                offset = int(offs[b]) if offs is not None else b * src_stride
                s = mem.view(src + offset * size, (m, n), (rs * size, cs * size), dtype).copy()
                d[mask] = s[mask]
            else:
                d[mask] = 0
            if rest:
                d[~mask] = 0

    def fill_pointers(self, name, out, base, stride, offset, index, count):
        index = self.memory.view(index, (count,), (8,), np.int64) if index else np.arange(count)
        self.memory.view(out, (count,), (8,), np.uint64)[:] = base + index * stride + offset

    def pivots_gather(self, name, src, offsets, src_stride, step, dst, k, count, delta):
        mem = self.memory
        offs = mem.view(offsets, (count,), (8,), np.int64) if offsets \
            else np.arange(count) * src_stride
        values = np.stack([mem.view(src + int(offs[b]) * 4, (k,), (step * 4,), np.int32)
                           for b in range(count)])
        mem.view(dst, (count, k), (4 * k, 4), np.int32)[:] = values + delta

    def getrf_panel_batched(self, name, a, stride, lda, rows, jb, k, ipiv, ipiv_stride, info,
                            count):
        mem, dtype = self.memory, np.dtype(_TYPE[name[-1]])
        size = dtype.itemsize
        infos = mem.view(info, (count,), (4,), np.int32)
        for b in range(count):
            panel = mem.matrix(a + (b * stride + k + k * lda) * size, rows, jb, lda, dtype)
            pivots = mem.view(ipiv + b * ipiv_stride * 4, (k + jb,), (4,), np.int32)
            first = _getf2(panel, pivots, k)
            if first and infos[b] == 0:
                infos[b] = k + first

    def laswp_batched(self, name, a, stride, lda, m, n, c0, c1, ipiv, ipiv_stride, k0, k1, count,
                      cols):
        mem, dtype = self.memory, np.dtype(_WORD[name.rsplit("_", 1)[1]])
        size = dtype.itemsize
        columns = [c for c in range(n) if not c0 <= c < c1]
        for b in range(count):
            pivots = mem.view(ipiv + b * ipiv_stride * 4, (k1,), (4,), np.int32)
            matrix = mem.matrix(a + b * stride * size, lda, n, lda, dtype)
            for i in range(k0, k1):
                p = int(pivots[i])
                if p != i:
                    row = matrix[i, columns].copy()
                    matrix[i, columns] = matrix[p, columns]
                    matrix[p, columns] = row

    def getrf_warp(self, name, src, offsets, src_stride, rs, cs, a, stride, lda, m, n, ipiv,
                   ipiv_stride, info, count):
        _, prefix, largest = name.rsplit("_", 2)
        assert max(m, n) <= int(largest), (name, m, n)
        mem, dtype = self.memory, np.dtype(_TYPE[prefix])
        size = dtype.itemsize
        offs = mem.view(offsets, (count,), (8,), np.int64) if offsets else None
        infos = mem.view(info, (count,), (4,), np.int32)
        for b in range(count):
            offset = int(offs[b]) if offs is not None else b * src_stride
            source = mem.view(src + offset * size, (m, n), (rs * size, cs * size), dtype).copy()
            matrix = mem.matrix(a + b * stride * size, m, n, lda, dtype)
            matrix[:] = source
            pivots = mem.view(ipiv + b * ipiv_stride * 4, (min(m, n),), (4,), np.int32)
            infos[b] = _getf2(matrix, pivots)


    def potrf_warp(self, name, src, offsets, src_stride, rs, cs, a, stride, lda, n, upper, keep,
                   info, count):
        _, prefix, largest = name.rsplit("_", 2)
        assert n <= int(largest), (name, n)
        mem, dtype = self.memory, np.dtype(_TYPE[prefix])
        size = dtype.itemsize
        offs = mem.view(offsets, (count,), (8,), np.int64) if offsets else None
        infos = mem.view(info, (count,), (4,), np.int32)
        (potrf,) = sl.lapack.get_lapack_funcs(("potrf",), dtype=dtype)
        factor_part = np.triu(np.ones((n, n), bool)) if upper else np.tril(np.ones((n, n), bool))
        for b in range(count):
            offset = int(offs[b]) if offs is not None else b * src_stride
            source = mem.view(src + offset * size, (n, n), (rs * size, cs * size), dtype).copy()
            factor, infos[b] = potrf(source, lower=not upper, clean=False)
            matrix = mem.matrix(a + b * stride * size, n, n, lda, dtype)
            matrix[:] = np.where(factor_part, factor, source if keep else 0)


def _libraries(memory):
    """nvmath.bindings' cublas and cusolverDn, the batched routines cuda_batched calls."""
    cublas = types.ModuleType("nvmath.bindings.cublas")
    cusolver = types.ModuleType("nvmath.bindings.cusolverDn")
    mem = memory

    def pointers(array, count):
        return [int(p) for p in mem.view(array, (count,), (8,), np.uint64)]

    def scalar(ptr, dtype):  # alpha, beta: host pointers (cuBLAS' default pointer mode)
        return np.frombuffer((ctypes.c_char * np.dtype(dtype).itemsize).from_address(ptr),
                             dtype)[0]

    def host_info(ptr):  # getrs' and geqrf's info: a host pointer
        ctypes.c_int.from_address(ptr).value = 0

    def op(x, trans):
        return {0: x, 1: x.T, 2: x.conj().T}[trans]

    def lapack(name, dtype):
        return sl.lapack.get_lapack_funcs(name, dtype=dtype)

    for prefix, dtype in _TYPE.items():
        def getrf_batched(handle, n, aarray, lda, p, info, batch_size, dtype=dtype):
            pivots = mem.view(p, (batch_size, n), (4 * n, 4), np.int32)
            infos = mem.view(info, (batch_size,), (4,), np.int32)
            for b, address in enumerate(pointers(aarray, batch_size)):
                a = mem.matrix(address, n, n, lda, dtype)
                lu, piv, infos[b] = lapack("getrf", dtype)(np.array(a, order="F"))
                a[:] = lu
                pivots[b] = piv + 1  # LAPACK's 1-based pivots

        def getrs_batched(handle, trans, n, nrhs, aarray, lda, dev_ipiv, barray, ldb, info,
                          batch_size, dtype=dtype):
            pivots = mem.view(dev_ipiv, (batch_size, n), (4 * n, 4), np.int32)
            for b, (pa, pb) in enumerate(zip(pointers(aarray, batch_size),
                                             pointers(barray, batch_size))):
                x = mem.matrix(pb, n, nrhs, ldb, dtype)
                x[:], _ = lapack("getrs", dtype)(np.array(mem.matrix(pa, n, n, lda, dtype)),
                                                 pivots[b] - 1, np.array(x), trans=trans)
            host_info(info)

        def trsm_batched(handle, side, uplo, trans, diag, m, n, alpha, a, lda, b, ldb,
                         batch_count, dtype=dtype):
            order = m if side == 0 else n
            for pa, pb in zip(pointers(a, batch_count), pointers(b, batch_count)):
                t = mem.matrix(pa, order, order, lda, dtype)
                t = np.tril(t) if uplo == 0 else np.triu(t)
                if diag == 1:
                    np.fill_diagonal(t, 1)
                t, x = op(t, trans), mem.matrix(pb, m, n, ldb, dtype)
                x[:] = scalar(alpha, dtype) * (np.linalg.solve(t, x) if side == 0
                                               else np.linalg.solve(t.T, x.T).T)

        def gemm_strided_batched(handle, transa, transb, m, n, k, alpha, a, lda, stride_a, b,
                                 ldb, stride_b, beta, c, ldc, stride_c, batch_count,
                                 dtype=dtype):
            assert transa == transb == 0
            size = np.dtype(dtype).itemsize
            for i in range(batch_count):
                x = mem.matrix(a + i * stride_a * size, m, k, lda, dtype)
                y = mem.matrix(b + i * stride_b * size, k, n, ldb, dtype)
                z = mem.matrix(c + i * stride_c * size, m, n, ldc, dtype)
                z[:] = scalar(alpha, dtype) * (x @ y) + scalar(beta, dtype) * z

        def geqrf_batched(handle, m, n, aarray, lda, tau_array, info, batch_size, dtype=dtype):
            k = min(m, n)
            for pa, pt in zip(pointers(aarray, batch_size), pointers(tau_array, batch_size)):
                a = mem.matrix(pa, m, n, lda, dtype)
                factors, tau, _, _ = lapack("geqrf", dtype)(np.array(a, order="F"))
                a[:] = factors
                mem.view(pt, (k,), (np.dtype(dtype).itemsize,), dtype)[:] = tau
            host_info(info)

        def potrf_batched(handle, uplo, n, aarray, lda, info_array, batch_size, dtype=dtype):
            # nvmath copies a Python sequence to host memory: the address must be an int
            assert isinstance(aarray, int), "pass the pointer array's device address"
            infos = mem.view(info_array, (batch_size,), (4,), np.int32)
            r, c = np.indices((n, n))
            for b, address in enumerate(pointers(aarray, batch_size)):
                a = mem.matrix(address, n, n, lda, dtype)
                factor, infos[b] = lapack("potrf", dtype)(np.array(a, order="F"),
                                                          lower=uplo == 0, clean=False)
                a[:] = factor
                a[(r < c) if uplo == 0 else (r > c)] = np.nan  # cuSOLVER's workspace

        for name, fn in (("getrf_batched", getrf_batched), ("getrs_batched", getrs_batched),
                         ("trsm_batched", trsm_batched),
                         ("gemm_strided_batched", gemm_strided_batched),
                         ("geqrf_batched", geqrf_batched)):
            setattr(cublas, prefix + name, fn)
        setattr(cusolver, prefix + "potrf_batched", potrf_batched)
    return cublas, cusolver


# -- the backend ---------------------------------------------------------------------------------
class Lane:
    def __init__(self, name):
        self.name, self.handle, self.blas, self.solver = name, 1, 2, 3
        self._lock = threading.Lock()

    def __enter__(self):
        assert self._lock.acquire(blocking=False), f"lane {self.name} entered twice"
        return self

    def __exit__(self, *exc):
        self._lock.release()
        return False


class EmulatedBackend:
    """The cuda backend's public methods that cuda_batched and the user layer call. The
    device primitives of backend/device_arrays.admit record what they are asked (`waits`:
    ("stream", s) or ("device",), in order); `devices` says which device owns a pointer
    (default: ordinal 0, hybridla's)."""

    name, has_device, device_name = "cuda", True, "emulated"
    ordinal = 0
    CONSUMER_STREAM = 0x5EED  # the stream of ours handed to DLPack producers

    def __init__(self, memory):
        self.memory, self.lanes, self.allocations = memory, {}, {}
        self.waits, self.devices = [], {}

    def pointer_device(self, pointer):
        return self.devices.get(pointer, self.ordinal)

    def consumer_stream(self):
        return self.CONSUMER_STREAM

    def stream_synchronize(self, stream):
        self.waits.append(("stream", stream))

    @contextlib.contextmanager
    def active(self):
        yield self

    @contextlib.contextmanager
    def call(self, pool_max_bytes=None):
        yield self

    def lane(self, name):
        return self.lanes.setdefault(name, Lane(name))

    def alloc(self, nbytes, memory_pool=True):
        allocation = Allocation(self.memory, nbytes)
        self.allocations[allocation.ptr] = allocation
        return allocation

    def free(self, allocation):
        self.allocations.pop(int(allocation)).free()

    def synchronize(self):
        self.waits.append(("device",))

    def free_memory(self):
        return 1 << 40

    def has_nonfinite(self, obj):
        cai = obj.__cuda_array_interface__
        x = self.memory.view(cai["data"][0], cai["shape"], cai["strides"], cai["typestr"])
        return not np.isfinite(x).all()


class Emulation:
    def __init__(self, memory, backend, module, kernels):
        self.memory, self.backend, self.module, self.kernels = memory, backend, module, kernels

    def array(self, a):
        """The NumPy array a (kept as it is, strides and all) as a user's device array."""
        return EmulatedArray(self.memory, a)

    def host(self, x):
        """A NumPy copy of a device array of the emulation."""
        cai = x.__cuda_array_interface__
        return self.memory.view(cai["data"][0], cai["shape"], cai["strides"],
                                cai["typestr"]).copy()


def _load(name, path, package):
    """A fresh copy of the module at `path`, named `name`, its relative imports from `package`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.__package__ = package
    spec.loader.exec_module(module)
    return module


def install(monkeypatch) -> Emulation:
    """Load cuda/batched.py (and batched_stacks.py) over the emulations and make it, and an
    emulated backend, what hybridla's device stacks use for the rest of the test."""
    memory = Memory()
    kernels = Kernels(memory)
    cublas, cusolver = _libraries(memory)
    drv = types.ModuleType("pycuda.driver")
    drv.mem_alloc = lambda nbytes: Allocation(memory, nbytes)
    drv.Context = types.SimpleNamespace(get_device=lambda: types.SimpleNamespace(
        get_attribute=lambda attribute: 227 * 1024))
    drv.device_attribute = types.SimpleNamespace(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN=0)
    compiler = types.ModuleType("pycuda.compiler")
    compiler.compile = lambda source, **kw: b""
    pycuda = types.ModuleType("pycuda")
    pycuda.driver, pycuda.compiler = drv, compiler
    driver = types.ModuleType("hybridla.backend._driver")
    driver.CudaDriverError = type("CudaDriverError", (RuntimeError,), {})
    driver.Module = lambda cubin: kernels
    driver.stream_synchronize = lambda stream: None
    driver.memset_d32_async = lambda ptr, value, count, stream: memory.view(
        ptr, (count,), (4,), np.uint32).__setitem__(Ellipsis, value)

    class Libcuda:
        @staticmethod
        def cuMemcpyHtoDAsync_v2(dst, src, nbytes, stream):
            memory.check(dst.value, nbytes.value)
            ctypes.memmove(dst.value, src.value, nbytes.value)
            return 0

        @staticmethod
        def cuMemcpyDtoHAsync_v2(dst, src, nbytes, stream):
            memory.check(src.value, nbytes.value)
            ctypes.memmove(dst.value, src.value, nbytes.value)
            return 0

    nvmath = types.ModuleType("nvmath")
    bindings = types.ModuleType("nvmath.bindings")
    bindings.cublas, bindings.cusolverDn = cublas, cusolver
    nvmath.bindings = bindings
    import hybridla.backend
    source = next(p for p in (_ROOT / "cuda_batched.py", _ROOT / "cuda" / "batched.py",
                              _ROOT / "cuda" / "cuda_batched.py") if p.exists())
    package = "hybridla.backend" if source.parent == _ROOT else "hybridla.backend.cuda"
    # batched.py's siblings, loaded from their paths too (the cuda package itself is never
    # imported here): the stack types (batched_stacks.py) and runtime's kernel source and
    # compiler
    runtime = types.ModuleType(f"{package}.runtime")
    runtime._kernel_source = lambda name: (_ROOT.parents[1] / "cuda" / name).read_text()
    runtime.compile_source = lambda source, arch=None: compiler.compile(source)
    siblings = [(f"{package}.runtime", runtime)]
    with monkeypatch.context() as m:  # what the module imports, for its import only
        for name, module in (("pycuda", pycuda), ("pycuda.driver", drv),
                             ("pycuda.compiler", compiler), ("nvmath", nvmath),
                             ("nvmath.bindings", bindings), ("nvmath.bindings.cublas", cublas),
                             ("nvmath.bindings.cusolverDn", cusolver),
                             ("hybridla.backend._driver", driver), *siblings):
            m.setitem(sys.modules, name, module)
        m.setattr(hybridla.backend, "_driver", driver, raising=False)
        real_cdll = ctypes.CDLL
        m.setattr(ctypes, "CDLL", lambda name, *a, **k: Libcuda() if "libcuda" in name
                  else real_cdll(name, *a, **k))
        stacks = source.parent / "batched_stacks.py"
        if stacks.exists():
            m.setitem(sys.modules, f"{package}.batched_stacks",
                      _load(f"{package}._batched_stacks_emulated", stacks, package))
        module = _load(f"{package}._batched_emulated", source, package)
    backend = EmulatedBackend(memory)
    from hybridla import _stacked_device
    from hybridla.lapack import batched
    monkeypatch.setitem(hybridla.backend._made, "cuda", backend)
    monkeypatch.setattr(hybridla.backend, "_cuda_unavailable_reason", lambda: None)
    monkeypatch.setattr(_stacked_device, "_cb", lambda: module)
    monkeypatch.setattr(batched, "_ops", lambda: module)
    return Emulation(memory, backend, module, kernels)
