#!/usr/bin/env python3
"""Benchmark of hybridla's LU factorization against cuSOLVER, MAGMA (through PyTorch) and SciPy.

Usage (from the repository root):

    python3 perf/bench.py --routine getrf --sizes 16384 32768 --dtype float64 \
        [--nb N] [--lookahead L] [--panel auto] [--repeat 3] [--interfaces gpu,cpu] \
        [--baselines cusolver,magma,scipy] [--scipy-max 16384] [--trace-dir DIR] [--out FILE.md]

Everything runs in one process.  For each n (ascending) one random matrix is generated
(float64 standard normal, fixed seed; real and imaginary parts for complex dtypes,
Fortran order) and every selected implementation is timed on it:

  cuSOLVER (device)     xgetrf of nvmath.bindings.cusolverDn on a CuPy array already on the
                        device (upload outside the timed region)
  cuSOLVER+transfers    from the pageable NumPy array: cupy.asarray upload + xgetrf +
                        download of LU and pivots into host memory, all timed
  hybridla GPU iface    hybridla.lu_factor(cupy_array, overwrite_a=True, backend="cuda")
                        (upload outside the timed region; LU stays on the device)
  hybridla CPU iface    hybridla.lu_factor(numpy_array, overwrite_a=True, backend="cuda",
                        or "host" without a GPU); LU is in host memory when the clock stops
  MAGMA (torch)         torch.linalg.lu_factor on a CUDA tensor with
                        torch.backends.cuda.preferred_linalg_library("magma")
  SciPy                 scipy.linalg.lu_factor on the host (only for n <= --scipy-max)

Each implementation runs once untimed at the smallest size (warm-up), then --repeat times
per size; the median is reported.  GPU timings synchronize the device before reading the
clock.  Rows are printed as markdown as they come; --out appends the table to a file.

Without a GPU only the hybridla CPU interface (host backend) and SciPy rows are produced,
e.g. ``python3 perf/bench.py --sizes 2048 4096``.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import platform
import shlex
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
# Make the working tree's hybridla importable when it is not installed (an installed
# hybridla, e.g. one with built extensions, takes precedence).
_ROOT = os.path.dirname(_HERE)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from flops import getrf_flops  # noqa: E402

DTYPES = ("float32", "float64", "complex64", "complex128")
ROUTINES = {"getrf": getrf_flops}
INTERFACES = ("gpu", "cpu")
BASELINES = ("cusolver", "magma", "scipy")

# Backward error: dense ||PA - LU||_1 up to these sizes, random-vector estimate above.
DENSE_CHECK_MAX_HOST = 8191
DENSE_CHECK_MAX_DEVICE = 16384


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------
# Optional GPU modules (imported lazily: none of them is needed on a machine without GPU)
# ----------------------------------------------------------------------------------------

_MODULES: dict[str, Any] = {}


def _import(name: str):
    """Import a module once; return None (remembering the reason) if that fails."""
    if name not in _MODULES:
        try:
            _MODULES[name] = __import__(name, fromlist=["_"])
        except Exception as exc:  # ImportError, or a CUDA library failing to load
            _MODULES[name] = None
            _MODULES[name + ":error"] = f"{type(exc).__name__}: {exc}"
    return _MODULES[name]


def _import_error(name: str) -> str:
    return _MODULES.get(name + ":error", f"cannot import {name}")


def _cupy():
    return _import("cupy")


def _cupy_has_gpu() -> bool:
    cp = _cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def _hybridla():
    return _import("hybridla")


def _hybridla_backends() -> list[str]:
    hl = _hybridla()
    if hl is None:
        return []
    try:
        from hybridla.backend import available_backends
        return list(available_backends())
    except Exception as exc:
        log(f"hybridla.backend.available_backends() failed: {exc}")
        return []


def cupy_sync() -> None:
    _cupy().cuda.Device().synchronize()


def torch_sync() -> None:
    _import("torch").cuda.synchronize()


def release_device_memory() -> None:
    """Give cached device (and pinned host) memory back between implementations."""
    gc.collect()
    cp = _MODULES.get("cupy")
    if cp is not None:
        try:
            cp.cuda.Device().synchronize()
            cp.get_default_memory_pool().free_all_blocks()
            cp.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:
            pass
    torch = _MODULES.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        except Exception:
            pass


def to_host(arr) -> np.ndarray:
    """A NumPy view/copy of a NumPy, CuPy or PyTorch array."""
    if isinstance(arr, np.ndarray):
        return arr
    if hasattr(arr, "get"):                    # CuPy, PyCUDA GPUArray
        return arr.get()
    if hasattr(arr, "cpu"):                    # torch.Tensor
        return arr.cpu().numpy()
    return np.asarray(arr)


def as_checkable(lu):
    """NumPy arrays stay; device arrays (CuPy, torch, PyCUDA, ...) become CuPy arrays."""
    if isinstance(lu, np.ndarray):
        return lu
    cp = _cupy()
    if cp is not None and (isinstance(lu, cp.ndarray) or hasattr(lu, "__cuda_array_interface__")):
        return cp.asarray(lu)
    return to_host(lu)


def array_module(arr):
    cp = _MODULES.get("cupy")
    if cp is not None and isinstance(arr, cp.ndarray):
        return cp
    return np


# ----------------------------------------------------------------------------------------
# Test matrix and per-size state
# ----------------------------------------------------------------------------------------

def _column_blocks(n: int, rows: int, itemsize: int = 8, target_bytes: int = 1 << 28):
    """Column ranges [j0, j1) of about target_bytes each for a rows x n matrix."""
    width = max(1, min(n, target_bytes // max(1, rows * itemsize)))
    for j0 in range(0, n, width):
        yield j0, min(n, j0 + width)


def random_matrix(n: int, dtype, seed: int) -> np.ndarray:
    """n x n F-ordered matrix of float64 standard normals (real + 1j*imag if complex).

    Generated one column block at a time so that no full-size temporary is needed.
    """
    dtype = np.dtype(dtype)
    rng = np.random.default_rng([seed, n])
    a = np.empty((n, n), dtype=dtype, order="F")
    for j0, j1 in _column_blocks(n, n):
        block = a[:, j0:j1]
        # (w, n) C-order transposed = (n, w) F-order: column-major generation
        if np.issubdtype(dtype, np.complexfloating):
            block.real = rng.standard_normal((j1 - j0, n)).T
            block.imag = rng.standard_normal((j1 - j0, n)).T
        else:
            block[...] = rng.standard_normal((j1 - j0, n)).T
    return a


def check_dtype(dtype) -> np.dtype:
    """Precision of the backward-error computation: double (complex double) always."""
    return np.promote_types(np.dtype(dtype), np.float64)


class Case:
    """One problem size: the pristine host matrix plus lazily computed helpers.

    At most two full-size host arrays live here: the matrix ``a`` and one work buffer.
    """

    def __init__(self, n: int, dtype: np.dtype, opts: argparse.Namespace, warmup: int):
        self.n = n
        self.dtype = np.dtype(dtype)
        self.opts = opts
        self.warmup = warmup
        self.repeat = opts.repeat
        self.a = random_matrix(n, self.dtype, opts.seed)
        self._work: Optional[np.ndarray] = None
        self._anorm: Optional[float] = None
        self._x: Optional[np.ndarray] = None
        self._ax: Optional[np.ndarray] = None

    @property
    def nbytes(self) -> int:
        return self.a.nbytes

    def work_buffer(self) -> np.ndarray:
        """The reusable F-ordered host buffer (contents undefined)."""
        if self._work is None:
            self._work = np.empty_like(self.a, order="F")
        return self._work

    def host_copy(self) -> np.ndarray:
        """A fresh copy of A in the work buffer."""
        work = self.work_buffer()
        np.copyto(work, self.a)
        return work

    def engine_kwargs(self, iface: str, last: bool) -> dict:
        o = self.opts
        kw = dict(nb=o.nb, lookahead=o.lookahead, panel=o.panel)
        if o.trace_dir and last:
            kw["trace"] = os.path.join(o.trace_dir, f"{o.routine}_{iface}_{self.n}.json")
        return kw

    # --- helpers of the backward error (host, computed once per size) ---------------
    @property
    def anorm(self) -> float:
        """||A||_1, column block by column block (np.abs(A) would be a full copy)."""
        if self._anorm is None:
            self._anorm = max(float(np.abs(self.a[:, j0:j1]).sum(axis=0).max())
                              for j0, j1 in _column_blocks(self.n, self.n))
        return self._anorm

    @property
    def x(self) -> np.ndarray:
        if self._x is None:
            rng = np.random.default_rng([self.opts.seed, self.n, 1])
            self._x = rng.standard_normal(self.n).astype(check_dtype(self.dtype))
        return self._x

    @property
    def ax(self) -> np.ndarray:
        """A @ x in double precision."""
        if self._ax is None:
            wdt = check_dtype(self.dtype)
            ax = np.zeros(self.n, dtype=wdt)
            for j0, j1 in _column_blocks(self.n, self.n):
                ax += self.a[:, j0:j1].astype(wdt, copy=False) @ self.x[j0:j1]
            self._ax = ax
        return self._ax


# ----------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------

def measure(fn: Callable[[Any, bool], Any], setup: Callable[[], Any], repeat: int, *,
            warmup: int = 0, sync: Optional[Callable[[], None]] = None):
    """Time fn(setup(), last) ``warmup + repeat`` times; return (median seconds, last result).

    setup() runs outside the timed region (e.g. a fresh copy of the input); ``last`` is True
    on the final repetition.  sync (if given) is called before starting and before stopping
    the clock, so asynchronous device work is included.  The previous repetition's input
    and result are dropped before the next setup, so at most one of each is alive.
    """
    times = []
    result = None
    total = warmup + repeat
    for i in range(total):
        state = result = None
        state = setup()
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        result = fn(state, i == total - 1)
        if sync is not None:
            sync()
        t1 = time.perf_counter()
        if i >= warmup:
            times.append(t1 - t0)
    return statistics.median(times), result


def no_setup():
    return None


@dataclass
class Outcome:
    time: float
    lu: Any                 # NumPy or device array (checked on the GPU when on the device)
    piv: np.ndarray         # 0-based LAPACK swap sequence, host
    label: Optional[str] = None
    notes: list = field(default_factory=list)


# ----------------------------------------------------------------------------------------
# cuSOLVER through nvmath.bindings.cusolverDn
# ----------------------------------------------------------------------------------------

_CUSOLVER_PREFIX = {
    np.dtype(np.float32): "s",
    np.dtype(np.float64): "d",
    np.dtype(np.complex64): "c",
    np.dtype(np.complex128): "z",
}
_CUSOLVER_HANDLE: list = []


def _cusolver_handle() -> int:
    from nvmath.bindings import cusolverDn
    if not _CUSOLVER_HANDLE:
        _CUSOLVER_HANDLE.append(cusolverDn.create())
    handle = _CUSOLVER_HANDLE[0]
    cusolverDn.set_stream(handle, _cupy().cuda.get_current_stream().ptr)
    return handle


def destroy_cusolver_handle() -> None:
    if _CUSOLVER_HANDLE:
        from nvmath.bindings import cusolverDn
        cusolverDn.destroy(_CUSOLVER_HANDLE.pop())


def cusolver_getrf(d_a):
    """In-place xgetrf of the F-ordered CuPy matrix d_a; returns (d_ipiv, d_info), 1-based."""
    from nvmath.bindings import cusolverDn
    cp = _cupy()
    prefix = _CUSOLVER_PREFIX[np.dtype(d_a.dtype)]
    buffer_size = getattr(cusolverDn, f"{prefix}getrf_buffer_size")
    getrf = getattr(cusolverDn, f"{prefix}getrf")
    m, n = d_a.shape
    lda = max(1, m)
    handle = _cusolver_handle()
    lwork = buffer_size(handle, m, n, d_a.data.ptr, lda)
    work = cp.empty(max(1, lwork), dtype=d_a.dtype)
    d_ipiv = cp.empty(max(1, min(m, n)), dtype=cp.int32)
    d_info = cp.zeros(1, dtype=cp.int32)
    getrf(handle, m, n, d_a.data.ptr, lda, work.data.ptr, d_ipiv.data.ptr, d_info.data.ptr)
    return d_ipiv, d_info


def _cusolver_pivots(ipiv, info, notes: list) -> np.ndarray:
    info = int(to_host(info)[0])
    if info < 0:
        raise RuntimeError(f"cuSOLVER getrf: argument {-info} is illegal")
    if info > 0:
        notes.append(f"info={info} (U({info},{info}) = 0)")
    return to_host(ipiv).astype(np.int32) - 1


def _prime_pinned_pool(nbytes: int) -> None:
    """Put a pinned block of nbytes in CuPy's pinned pool, so that cupy.asarray's staging
    buffer (cudaHostAlloc, slow for GBs) is not allocated inside the timed region."""
    try:
        mem = _cupy().cuda.alloc_pinned_memory(nbytes)
        del mem
    except Exception as exc:   # cupy.asarray then falls back to a synchronous copy
        log(f"could not pin {nbytes / 2**30:.1f} GiB ahead of cuSOLVER+transfers: {exc}")


def _device_input(case: Case):
    """A device buffer and a setup that refreshes it from the host matrix (untimed)."""
    cp = _cupy()
    d_a = cp.empty(case.a.shape, dtype=case.dtype, order="F")

    def setup():
        d_a.set(case.a)          # pageable -> device, direct (no pinned staging copy)
        return d_a
    return setup


def run_cusolver(case: Case) -> Outcome:
    setup = _device_input(case)
    t, (lu, ipiv, info) = measure(lambda d_a, last: (d_a, *cusolver_getrf(d_a)), setup,
                                  case.repeat, warmup=case.warmup, sync=cupy_sync)
    notes: list = []
    return Outcome(t, lu, _cusolver_pivots(ipiv, info, notes), notes=notes)


def run_cusolver_transfers(case: Case) -> Outcome:
    cp = _cupy()
    out = case.work_buffer()                 # pageable host buffer receiving LU
    _prime_pinned_pool(case.nbytes)

    def fn(_, last):
        d_a = cp.asarray(case.a, order="F")  # H2D from the pageable array
        d_ipiv, d_info = cusolver_getrf(d_a)
        d_a.get(out=out)                     # D2H into host memory (blocking)
        return out, d_ipiv.get(), d_info.get()

    t, (lu, ipiv, info) = measure(fn, no_setup, case.repeat, warmup=case.warmup,
                                  sync=cupy_sync)
    notes: list = []
    return Outcome(t, lu, _cusolver_pivots(ipiv, info, notes), notes=notes)


# ----------------------------------------------------------------------------------------
# hybridla
# ----------------------------------------------------------------------------------------

def run_hybridla_gpu(case: Case) -> Outcome:
    hl = _hybridla()
    setup = _device_input(case)

    def fn(d_a, last):
        return hl.lu_factor(d_a, overwrite_a=True, check_finite=False, backend="cuda",
                            **case.engine_kwargs("gpu", last))

    t, (lu, piv) = measure(fn, setup, case.repeat, warmup=case.warmup, sync=cupy_sync)
    return Outcome(t, lu, to_host(piv))


def run_hybridla_cpu(case: Case) -> Outcome:
    hl = _hybridla()
    backend = "cuda" if "cuda" in _hybridla_backends() else "host"

    def fn(a, last):
        lu, piv = hl.lu_factor(a, overwrite_a=True, check_finite=False, backend=backend,
                               **case.engine_kwargs("cpu", last))
        return lu, piv

    t, (lu, piv) = measure(fn, case.host_copy, case.repeat, warmup=case.warmup)
    notes = [] if isinstance(lu, np.ndarray) else [f"lu returned as {type(lu).__name__}"]
    return Outcome(t, lu, to_host(piv), label=f"hybridla CPU iface ({backend})", notes=notes)


# ----------------------------------------------------------------------------------------
# MAGMA through PyTorch, SciPy
# ----------------------------------------------------------------------------------------

def run_magma(case: Case) -> Outcome:
    torch = _import("torch")
    # F-ordered host array -> tensor with strides (1, n): the logical matrix is A itself,
    # already in the column-major layout MAGMA wants.
    t_a = torch.from_numpy(case.a).to("cuda")
    prev = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library("magma")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t, (lu, piv) = measure(lambda _, last: torch.linalg.lu_factor(t_a), no_setup,
                                   case.repeat, warmup=case.warmup, sync=torch_sync)
    finally:
        torch.backends.cuda.preferred_linalg_library(prev)
    del t_a
    notes = []
    said = {str(w.message).splitlines()[0][:100] for w in caught
            if "magma" in str(w.message).lower() or "cusolver" in str(w.message).lower()}
    notes += [f"torch warned: {s}" for s in sorted(said)]
    return Outcome(t, as_checkable(lu), to_host(piv).astype(np.int32) - 1,
                   label=f"MAGMA (torch {torch.__version__.split('+')[0]})", notes=notes)


def run_scipy(case: Case) -> Outcome:
    import scipy.linalg

    def fn(a, last):
        return scipy.linalg.lu_factor(a, overwrite_a=True, check_finite=False)

    t, (lu, piv) = measure(fn, case.host_copy, case.repeat, warmup=case.warmup)
    return Outcome(t, lu, piv)


# ----------------------------------------------------------------------------------------
# Availability probes and the registry
# ----------------------------------------------------------------------------------------

def probe_cusolver() -> Optional[str]:
    if not _cupy_has_gpu():
        return _import_error("cupy") if _cupy() is None else "no CUDA device"
    if _import("nvmath.bindings.cusolverDn") is None:
        return _import_error("nvmath.bindings.cusolverDn")
    return None


def probe_hybridla() -> Optional[str]:
    if _hybridla() is None:
        return _import_error("hybridla")
    return None


def probe_hybridla_gpu() -> Optional[str]:
    reason = probe_hybridla()
    if reason:
        return reason
    if "cuda" not in _hybridla_backends():
        return "hybridla's cuda backend is not available"
    if not _cupy_has_gpu():
        return "CuPy with a CUDA device is needed for the GPU interface"
    return None


def probe_magma() -> Optional[str]:
    torch = _import("torch")
    if torch is None:
        return _import_error("torch")
    if not torch.cuda.is_available():
        return "torch.cuda is not available"
    if not getattr(torch.cuda, "has_magma", False):
        return "this PyTorch is built without MAGMA"
    return None


def probe_scipy() -> Optional[str]:
    return None if _import("scipy.linalg") is not None else _import_error("scipy.linalg")


@dataclass(frozen=True)
class Impl:
    label: str
    run: Callable[[Case], Outcome]
    probe: Callable[[], Optional[str]]
    group: str                                         # an --interfaces or --baselines word
    max_n: Callable[[argparse.Namespace], Optional[int]] = lambda opts: None


# Run order within one size: the cuSOLVER rows first, so that every later row has its ratios.
IMPLEMENTATIONS: dict[str, Impl] = {
    "cusolver": Impl("cuSOLVER (device)", run_cusolver, probe_cusolver, "cusolver"),
    "cusolver+transfers": Impl("cuSOLVER+transfers", run_cusolver_transfers, probe_cusolver,
                               "cusolver"),
    "hybridla-gpu": Impl("hybridla GPU iface", run_hybridla_gpu, probe_hybridla_gpu, "gpu"),
    "hybridla-cpu": Impl("hybridla CPU iface", run_hybridla_cpu, probe_hybridla, "cpu"),
    "magma": Impl("MAGMA (torch)", run_magma, probe_magma, "magma"),
    "scipy": Impl("SciPy lu_factor (host)", run_scipy, probe_scipy, "scipy",
                  max_n=lambda opts: opts.scipy_max),
}


def select_implementations(opts: argparse.Namespace) -> list[tuple[str, Impl]]:
    wanted = set(opts.interfaces) | set(opts.baselines)
    chosen = []
    for name, impl in IMPLEMENTATIONS.items():
        if impl.group not in wanted:
            continue
        reason = impl.probe()
        if reason:
            log(f"skipping {name}: {reason}")
            continue
        chosen.append((name, impl))
    return chosen


# ----------------------------------------------------------------------------------------
# Backward error
# ----------------------------------------------------------------------------------------

def swaps_to_perm(piv, m: int) -> np.ndarray:
    """Row permutation p with (P A) = A[p], from a 0-based LAPACK swap sequence."""
    piv = np.asarray(piv).ravel()
    if piv.size and (piv.min() < 0 or piv.max() >= m):
        raise ValueError(f"pivot out of range [0, {m}): min {piv.min()}, max {piv.max()}")
    perm = list(range(m))
    for i, p in enumerate(piv.tolist()):
        perm[i], perm[p] = perm[p], perm[i]
    return np.asarray(perm, dtype=np.intp)


def lu_matvec(lu, x, xp, wdt, block: int = 2048):
    """L @ (U @ x) for packed LU factors (unit lower L, upper U), without forming L or U.

    Works column block by column block in precision wdt, for NumPy and CuPy alike.
    """
    n = lu.shape[0]
    y = xp.zeros(n, dtype=wdt)                     # y = U x
    for j0 in range(0, n, block):
        j1 = min(n, j0 + block)
        xj = x[j0:j1]
        if j0:
            y[:j0] += lu[:j0, j0:j1].astype(wdt, copy=False) @ xj
        y[j0:j1] += xp.triu(lu[j0:j1, j0:j1]).astype(wdt, copy=False) @ xj
    z = y.copy()                                   # z = L y, unit diagonal
    for j0 in range(0, n, block):
        j1 = min(n, j0 + block)
        yj = y[j0:j1]
        z[j0:j1] += xp.tril(lu[j0:j1, j0:j1], -1).astype(wdt, copy=False) @ yj
        if j1 < n:
            z[j1:] += lu[j1:, j0:j1].astype(wdt, copy=False) @ yj
    return z


def backward_error(case: Case, lu, piv) -> tuple[float, bool]:
    """(||PA - LU||_1 / (n ||A||_1 eps), estimated?) computed where lu lives.

    Dense for host results with n < 8192 and device results with n <= 16384; otherwise
    estimated with a random vector: ||PAx - L(Ux)||_1 / (n ||A||_1 ||x||_1 eps).
    Arithmetic in double precision; eps is that of the factorization's dtype.
    """
    lu = as_checkable(lu)
    xp = array_module(lu)
    n = case.n
    if lu.shape != (n, n):
        raise ValueError(f"lu has shape {lu.shape}, expected {(n, n)}")
    eps = float(np.finfo(case.dtype).eps)
    wdt = check_dtype(case.dtype)
    perm = swaps_to_perm(piv, n)
    dense_max = DENSE_CHECK_MAX_HOST if xp is np else DENSE_CHECK_MAX_DEVICE
    if n <= dense_max:
        l_mat = xp.tril(lu, -1).astype(wdt, copy=False)
        xp.fill_diagonal(l_mat, 1)
        r = l_mat @ xp.triu(lu).astype(wdt, copy=False)
        del l_mat
        r -= xp.asarray(case.a[perm]).astype(wdt, copy=False)
        num = float(xp.abs(r).sum(axis=0).max())
        del r
        return num / (n * case.anorm * eps), False
    x = xp.asarray(case.x)
    r = lu_matvec(lu, x, xp, wdt)
    r -= xp.asarray(case.ax[perm])
    num = float(xp.abs(r).sum())
    xnorm = float(np.abs(case.x).sum())
    return num / (n * case.anorm * xnorm * eps), True


# ----------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------

COLUMNS = ("n", "implementation", "time (s)", "TFLOP/s", "backward error",
           "vs cuSOLVER", "vs cuSOLVER+transfers", "note")


def device_name() -> str:
    torch = _MODULES.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            return torch.cuda.get_device_name()
    except Exception:
        pass
    if _cupy_has_gpu():
        try:
            cp = _cupy()
            name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
            return name.decode() if isinstance(name, bytes) else str(name)
        except Exception:
            pass
    try:
        import pycuda.driver as drv     # does not create a context
        drv.init()
        if drv.Device.count() > 0:
            return drv.Device(0).name()
    except Exception:
        pass
    return f"no GPU (host {platform.machine()}, {os.cpu_count()} CPUs)"


def _fmt(x: Optional[float], spec: str, default: str = "n/a") -> str:
    return default if x is None else format(x, spec)


def format_row(n, label, t=None, flop=None, berr=None, estimated=False, base=None,
               note="") -> str:
    base = base or {}
    ratios = []
    for key in ("cusolver", "cusolver+transfers"):
        b = base.get(key)
        ratios.append("n/a" if t is None else ("–" if b is None else f"{b / t:.2f}x"))
    cells = [str(n), label, _fmt(t, ".4g"),
             "n/a" if t is None else f"{flop / t / 1e12:.3g}",
             "n/a" if berr is None else ("~" if estimated else "") + f"{berr:.2e}",
             *ratios, note.replace("|", "/")]
    return "| " + " | ".join(cells) + " |"


class Table:
    """Prints markdown rows as they come; with a path also appends them to that file."""

    def __init__(self, path: Optional[str]):
        self.path = path

    def emit(self, line: str, stdout: bool = True) -> None:
        if stdout:
            print(line, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def start(self, opts: argparse.Namespace, command: str) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        hl = _MODULES.get("hybridla")
        where = getattr(hl, "__file__", None) if hl is not None else None
        lines = [
            "",
            f"### {opts.routine} {opts.dtype} on {device_name()}, {now}",
            "",
            f"`{command}`",
            "",
            f"hybridla: {where or 'not importable'}; numpy {np.__version__}; "
            f"repeat {opts.repeat} (median), warm-up once at the smallest size; "
            f"TFLOP/s from LAWN 41 {opts.routine} flops.",
            f"Backward error ||PA-LU||_1/(n ||A||_1 eps): dense for host results n < "
            f"{DENSE_CHECK_MAX_HOST + 1} and device results n <= {DENSE_CHECK_MAX_DEVICE}; "
            f"values marked ~ are random-vector estimates ||PAx-L(Ux)||_1/(n ||A||_1 "
            f"||x||_1 eps). Ratios are cuSOLVER time / this time (> 1: this is faster).",
            "",
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "|".join("---:" if c in ("n", "time (s)", "TFLOP/s") else "---"
                           for c in COLUMNS) + "|",
        ]
        for line in lines:
            self.emit(line)


# ----------------------------------------------------------------------------------------
# Command line and driver
# ----------------------------------------------------------------------------------------

def _nb(value: str):
    if value == "auto":
        return value
    try:
        nb = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--nb: an integer or 'auto', not {value!r}")
    if nb <= 0:
        raise argparse.ArgumentTypeError("--nb must be positive")
    return nb


def _word_list(allowed):
    def parse(value: str) -> list[str]:
        words = [w.strip() for w in value.split(",") if w.strip()]
        if words in (["none"], []):
            return []
        bad = [w for w in words if w not in allowed]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad)}; choose from {', '.join(allowed)} (or 'none')")
        return words
    return parse


def _positive_int(value: str) -> int:
    v = int(value)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {v}")
    return v


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark hybridla's LU factorization against cuSOLVER, MAGMA and SciPy.")
    p.add_argument("--routine", choices=sorted(ROUTINES), default="getrf")
    p.add_argument("--sizes", type=_positive_int, nargs="+", default=[4096], metavar="N",
                   help="matrix orders (run in ascending order)")
    p.add_argument("--dtype", choices=DTYPES, default="float64")
    p.add_argument("--nb", type=_nb, default=None, help="hybridla block size (int or auto)")
    p.add_argument("--lookahead", type=int, default=None, help="hybridla lookahead depth")
    p.add_argument("--panel", choices=("cpu", "gpu", "auto"), default=None,
                   help="where hybridla factors panels")
    p.add_argument("--repeat", type=_positive_int, default=3, help="timed runs per size")
    p.add_argument("--interfaces", type=_word_list(INTERFACES), default=list(INTERFACES),
                   help="hybridla interfaces, comma separated: gpu,cpu")
    p.add_argument("--baselines", type=_word_list(BASELINES), default=list(BASELINES),
                   help="comma separated: cusolver (device and +transfers), magma, scipy")
    p.add_argument("--scipy-max", type=int, default=16384,
                   help="largest n for the (slow) SciPy baseline")
    p.add_argument("--seed", type=int, default=0, help="random matrix seed")
    p.add_argument("--trace-dir", default=None,
                   help="write hybridla's trace of the last repetition to "
                        "DIR/<routine>_<iface>_<n>.json")
    p.add_argument("--out", default=None, metavar="FILE.md",
                   help="append the table (with device, date, command) to this file")
    opts = p.parse_args(argv)
    if opts.lookahead is not None and opts.lookahead < 0:
        p.error("--lookahead must be >= 0")
    return opts


def run_one(name: str, impl: Impl, case: Case, flop: float, base: dict) -> str:
    """Time one implementation at one size, check its result; return the table row."""
    label, note = impl.label, ""
    t = berr = None
    estimated = False
    outcome = None
    try:
        log(f"n={case.n}: {name}")
        outcome = impl.run(case)
        t, label = outcome.time, outcome.label or impl.label
        notes = list(outcome.notes)
        try:
            berr, estimated = backward_error(case, outcome.lu, outcome.piv)
        except Exception as exc:
            notes.append(f"backward error failed: {type(exc).__name__}: {exc}")
        note = "; ".join(notes)
    except Exception as exc:
        note = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        log(f"n={case.n}: {name} failed: {note}")
    finally:
        outcome = None
        release_device_memory()
    if t is not None and name in ("cusolver", "cusolver+transfers"):
        base[name] = t
    return format_row(case.n, label, t, flop, berr, estimated, base, note)


def main(argv=None) -> int:
    opts = parse_args(argv)
    dtype = np.dtype(opts.dtype)
    if opts.trace_dir:
        os.makedirs(opts.trace_dir, exist_ok=True)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv)
                         if argv is None else ["perf/bench.py", *argv])
    impls = select_implementations(opts)
    if not impls:
        log("nothing to run")
        return 1
    table = Table(opts.out)
    table.start(opts, command)
    flop_count = ROUTINES[opts.routine]
    try:
        for i, n in enumerate(sorted(set(opts.sizes))):
            log(f"n={n}: generating the {dtype} matrix ({n * n * dtype.itemsize / 2**30:.2f} GiB)")
            case = Case(n, dtype, opts, warmup=1 if i == 0 else 0)
            flop = flop_count(n, n, dtype)
            base: dict = {}
            for name, impl in impls:
                limit = impl.max_n(opts)
                if limit is not None and n > limit:
                    log(f"n={n}: skipping {name} (n > {limit})")
                    continue
                table.emit(run_one(name, impl, case, flop, base))
            case = None
            gc.collect()
    finally:
        try:
            destroy_cusolver_handle()
        except Exception:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
