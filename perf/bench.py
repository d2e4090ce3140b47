#!/usr/bin/env python3
"""Benchmark of hybridla's factorizations against cuSOLVER, MAGMA (through PyTorch) and SciPy.

Usage (from the repository root):

    python3 perf/bench.py --routine getrf --sizes 16384 32768 --dtype float64 \
        [--nb N] [--lookahead L] [--panel auto] [--repeat 3] [--interfaces gpu,cpu] \
        [--baselines cusolver,magma,scipy] [--scipy-max 16384] [--trace-dir DIR] [--out FILE.md]

    python3 perf/bench.py --routine potrf --sizes 16384 32768
    python3 perf/bench.py --routine geqrf,geqlf,gelqf --sizes 16384

--routine takes one routine or a comma list of them: getrf (LU with partial pivoting),
potrf (Cholesky, lower), geqrf (QR), geqlf (QL), gelqf (LQ), all square (m = n), in all
four dtypes.  Routines of one run are timed in that (table) order, one after another at each
size, on the same matrix where they share one: one process, one table.

Test matrices (F order, fixed seed, one per size and kind, shared by the routines of a run):

  getrf, geqrf, geqlf, gelqf   float64 standard normals (real and imaginary parts for
                               complex dtypes), generated on the host
  potrf                        Hermitian positive definite A = G G^H / n + I (G as above),
                               built in double precision on the GPU with CuPy where one is
                               present, else on the host with NumPy (O(n^3): slow for large n
                               without a GPU); the two generators draw different numbers

Every selected implementation is timed on it (xxxx = the routine's cuSOLVER/LAPACK call):

  cuSOLVER (device)     xxxx of nvmath.bindings.cusolverDn (getrf, potrf lower, geqrf) on a
                        CuPy array already on the device (upload outside the timed region)
  cuSOLVER+transfers    from the pageable NumPy array: cupy.asarray upload + xxxx +
                        download of the factors (and pivots / tau) into host memory, all timed
  hybridla GPU iface    hybridla.lu_factor / cho_factor(lower=True) / qr / ql / lq
                        (mode="raw") on the CuPy array, overwrite_a=True, backend="cuda"
                        (upload outside the timed region; the factors stay on the device)
  hybridla CPU iface    the same call on the NumPy array, backend="cuda" (or "host" without a
                        GPU); the factors are in host memory when the clock stops
  MAGMA (torch)         torch.linalg.lu_factor / torch.linalg.cholesky_ex / torch.geqrf on a
                        CUDA tensor with torch.backends.cuda.preferred_linalg_library("magma")
  SciPy                 scipy.linalg.lu_factor / cho_factor(lower=True) / qr(mode="raw") on the
                        host (only for n <= --scipy-max)

cuSOLVER, MAGMA (through torch) and SciPy have no QL or LQ: for geqlf and gelqf their rows
time geqrf on the same matrix ("cuSOLVER geqrf (device)", "SciPy geqrf (host)", ...; not
repeated when geqrf is in the same run), the cuSOLVER ratios are against cuSOLVER's geqrf,
and a column "vs our geqrf" gives hybridla's geqrf time through the same interface divided
by this time (issue 3 asks geqlf and gelqf to be within 1.2x of our geqrf: >= 0.83x here).
A hybridla function that does not exist (yet) gives a row "skipped: hybridla.qr not
available"; an implementation that cannot run on this machine (no GPU, no torch) is left
out with a message on stderr.

Each implementation runs once untimed at the smallest size (warm-up), then --repeat times
per size; the median is reported.  GPU timings synchronize the device before reading the
clock.  Every result is checked outside the timed region, in double precision with the
dtype's eps: getrf ||PA-LU||_1/(n ||A||_1 eps), potrf ||A-LL^H||_1/(...), geqrf/geqlf/gelqf
||A-QR||_1/(...) (QL, LQ) with Q formed by LAPACK's orgqr on the host (QL and LQ through the
QRs they are: of the reversed matrix, of A^H).  Dense up to n = 8191 on the host (getrf and
potrf: 16384 for results on the device), random-vector estimates above, marked ~ (QR family:
from R^H R = A^H A and its QL/LQ forms, which do not see tau); the table's header gives the
formulas.  Rows are printed as markdown as they come (a "routine" column when a run has
several routines); --out appends the table to a file; --trace-dir keeps hybridla's trace of
each last repetition as DIR/<routine>_<gpu|cpu>_<n>.json.

Without a GPU only the hybridla CPU interface (host backend) and SciPy rows are produced,
e.g. ``python3 perf/bench.py --sizes 2048 4096`` or ``--routine potrf --sizes 512 1000``.
"""

from __future__ import annotations

import argparse
import datetime
import functools
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

from flops import gelqf_flops, geqlf_flops, geqrf_flops, getrf_flops, potrf_flops  # noqa: E402

DTYPES = ("float32", "float64", "complex64", "complex128")
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



def _seed_int(*words: int) -> int:
    """One 63-bit integer seed from a sequence (CuPy's generators take an integer)."""
    return int(np.random.SeedSequence(list(words)).generate_state(1, dtype=np.uint64)[0] >> 1)


def spd_matrix(n: int, dtype, seed: int) -> np.ndarray:
    """n x n F-ordered Hermitian positive definite A = G G^H / n + I, G standard normal
    (real and imaginary parts for complex dtypes), exactly Hermitian, in host memory.

    Built in double precision one column block at a time (only the lower triangle is
    computed, the upper one is its mirror), on the GPU with CuPy where one is present (the
    O(n^3) product takes about a second there at n = 32768), else with NumPy on the host.
    The eigenvalues lie in about [1, 5] (real) or [1, 9] (complex).
    """
    dtype = np.dtype(dtype)
    wdt = check_dtype(dtype)
    on_gpu = _cupy_has_gpu()
    xp = _cupy() if on_gpu else np
    if not on_gpu and n > DENSE_CHECK_MAX_HOST:
        log(f"n={n}: building the SPD matrix on the host (O(n^3), no GPU): this takes a while")
    if on_gpu:
        rng = xp.random.default_rng(_seed_int(seed, n, 2))
    else:
        rng = np.random.default_rng([seed, n, 2])
    g = xp.empty((n, n), dtype=wdt)
    if np.issubdtype(wdt, np.complexfloating):
        g.real = rng.standard_normal((n, n), dtype=np.float64)
        g.imag = rng.standard_normal((n, n), dtype=np.float64)
    else:
        g[...] = rng.standard_normal((n, n), dtype=np.float64)
    a = xp.empty((n, n), dtype=dtype, order="F")
    for j0, j1 in _column_blocks(n, n, itemsize=wdt.itemsize):
        c = g[j0:] @ g[j0:j1].conj().T             # rows j0.. of columns j0:j1 of G G^H
        c /= n
        w = j1 - j0
        c[:w] = (c[:w] + c[:w].conj().T) / 2       # the diagonal block exactly Hermitian
        a[j0:, j0:j1] = c
        if j1 < n:
            a[j0:j1, j1:] = c[w:].conj().T         # the mirror of the block below
        del c
    del g
    diag = xp.arange(n)
    a[diag, diag] += 1
    if xp is np:
        return a
    host = np.empty((n, n), dtype=dtype, order="F")
    a.get(out=host)
    del a
    release_device_memory()
    return host


# Test-matrix generators by kind (a routine names the kind it needs).
MATRICES: dict[str, Callable[[int, Any, int], np.ndarray]] = {
    "general": random_matrix,
    "spd": spd_matrix,
}


class Case:
    """One problem size and matrix kind: the pristine host matrix plus lazily computed helpers.

    At most two full-size host arrays live here: the matrix ``a`` and one work buffer.
    """

    def __init__(self, n: int, dtype: np.dtype, opts: argparse.Namespace, warmup: int,
                 kind: str = "general"):
        self.n = n
        self.dtype = np.dtype(dtype)
        self.opts = opts
        self.warmup = warmup
        self.repeat = opts.repeat
        self.kind = kind
        self.a = MATRICES[kind](n, self.dtype, opts.seed)
        self._work: Optional[np.ndarray] = None
        self._anorm: Optional[float] = None
        self._x: Optional[np.ndarray] = None
        self._products: dict = {}

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

    def engine_kwargs(self, routine: str, iface: str, last: bool) -> dict:
        o = self.opts
        kw = dict(nb=o.nb, lookahead=o.lookahead, panel=o.panel)
        if o.trace_dir and last:
            kw["trace"] = os.path.join(o.trace_dir, f"{routine}_{iface}_{self.n}.json")
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

    def matvec(self, v: np.ndarray, adjoint: bool = False) -> np.ndarray:
        """A @ v (or A^H @ v) in double precision, column block by column block."""
        wdt = np.promote_types(check_dtype(self.dtype), v.dtype)
        out = np.zeros(self.n, dtype=wdt)
        for j0, j1 in _column_blocks(self.n, self.n):
            block = self.a[:, j0:j1].astype(wdt, copy=False)
            if adjoint:
                out[j0:j1] = adjoint_matvec(block, v)
            else:
                out += block @ v[j0:j1]
        return out

    def product(self, ops: str) -> np.ndarray:
        """op_k(A) ... op_1(A) x for a string of 'N' (A) and 'H' (A^H), applied right to
        left: product("N") = A x, product("HN") = A^H (A x), product("NH") = A (A^H x)."""
        if ops not in self._products:
            v = self.x if len(ops) == 1 else self.product(ops[1:])
            self._products[ops] = self.matvec(v, adjoint=ops[0] == "H")
        return self._products[ops]

    @property
    def ax(self) -> np.ndarray:
        """A @ x in double precision."""
        return self.product("N")


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
    factors: tuple          # the routine's factors (NumPy or device arrays), see Routine
    label: dict = field(default_factory=dict)    # fills the implementation's label
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
CUBLAS_FILL_MODE_LOWER = 0


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


def _cusolver_functions(name: str, dtype):
    """(x<name>_buffer_size, x<name>) of cusolverDn for dtype, and a handle on the current
    stream."""
    from nvmath.bindings import cusolverDn
    prefix = _CUSOLVER_PREFIX[np.dtype(dtype)]
    return (getattr(cusolverDn, f"{prefix}{name}_buffer_size"),
            getattr(cusolverDn, f"{prefix}{name}"), _cusolver_handle())


def cusolver_getrf(d_a):
    """In-place xgetrf of the F-ordered CuPy matrix d_a; returns (d_ipiv, d_info), 1-based."""
    cp = _cupy()
    buffer_size, getrf, handle = _cusolver_functions("getrf", d_a.dtype)
    m, n = d_a.shape
    lda = max(1, m)
    lwork = buffer_size(handle, m, n, d_a.data.ptr, lda)
    work = cp.empty(max(1, lwork), dtype=d_a.dtype)
    d_ipiv = cp.empty(max(1, min(m, n)), dtype=cp.int32)
    d_info = cp.zeros(1, dtype=cp.int32)
    getrf(handle, m, n, d_a.data.ptr, lda, work.data.ptr, d_ipiv.data.ptr, d_info.data.ptr)
    return d_ipiv, d_info


def cusolver_potrf(d_a):
    """In-place xpotrf (lower) of the F-ordered CuPy matrix d_a; returns (None, d_info)."""
    cp = _cupy()
    buffer_size, potrf, handle = _cusolver_functions("potrf", d_a.dtype)
    n = d_a.shape[0]
    lda = max(1, n)
    lwork = buffer_size(handle, CUBLAS_FILL_MODE_LOWER, n, d_a.data.ptr, lda)
    work = cp.empty(max(1, lwork), dtype=d_a.dtype)
    d_info = cp.zeros(1, dtype=cp.int32)
    potrf(handle, CUBLAS_FILL_MODE_LOWER, n, d_a.data.ptr, lda, work.data.ptr, lwork,
          d_info.data.ptr)
    return None, d_info


def cusolver_geqrf(d_a):
    """In-place xgeqrf of the F-ordered CuPy matrix d_a; returns (d_tau, d_info)."""
    cp = _cupy()
    buffer_size, geqrf, handle = _cusolver_functions("geqrf", d_a.dtype)
    m, n = d_a.shape
    lda = max(1, m)
    lwork = buffer_size(handle, m, n, d_a.data.ptr, lda)
    work = cp.empty(max(1, lwork), dtype=d_a.dtype)
    d_tau = cp.empty(max(1, min(m, n)), dtype=d_a.dtype)
    d_info = cp.zeros(1, dtype=cp.int32)
    geqrf(handle, m, n, d_a.data.ptr, lda, d_tau.data.ptr, work.data.ptr, lwork,
          d_info.data.ptr)
    return d_tau, d_info


def _cusolver_pivots(ipiv, info, notes: list) -> np.ndarray:
    """0-based swaps from cuSOLVER's (or torch's) 1-based ipiv; a note for info > 0."""
    if info is not None:
        _info_note(info, "U({i},{i}) = 0", notes)
    return to_host(ipiv).astype(np.int32) - 1


def _info_note(info, meaning: str, notes: list) -> None:
    """LAPACK-style info (device or host, scalar or 1-element): raise for < 0, note > 0."""
    info = int(np.asarray(to_host(info)).ravel()[0])
    if info < 0:
        raise RuntimeError(f"argument {-info} is illegal")
    if info > 0:
        notes.append(f"info={info} ({meaning.format(i=info)})")


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


def _optional_to_host(x):
    return None if x is None else to_host(x)


def run_cusolver(case: Case, r: Routine) -> Outcome:
    setup = _device_input(case)
    t, (a, aux, info) = measure(lambda d_a, last: (d_a, *r.cusolver.call(d_a)), setup,
                                case.repeat, warmup=case.warmup, sync=cupy_sync)
    notes: list = []
    return Outcome(t, r.cusolver.finish((a, _optional_to_host(aux), to_host(info)), notes),
                   notes=notes)


def run_cusolver_transfers(case: Case, r: Routine) -> Outcome:
    cp = _cupy()
    out = case.work_buffer()                 # pageable host buffer receiving the factors
    _prime_pinned_pool(case.nbytes)

    def fn(_, last):
        d_a = cp.asarray(case.a, order="F")  # H2D from the pageable array
        d_aux, d_info = r.cusolver.call(d_a)
        d_a.get(out=out)                     # D2H into host memory (blocking)
        return out, _optional_to_host(d_aux), d_info.get()

    t, raw = measure(fn, no_setup, case.repeat, warmup=case.warmup, sync=cupy_sync)
    notes: list = []
    return Outcome(t, r.cusolver.finish(raw, notes), notes=notes)


# ----------------------------------------------------------------------------------------
# hybridla
# ----------------------------------------------------------------------------------------

def run_hybridla_gpu(case: Case, r: Routine) -> Outcome:
    hl = _hybridla()
    setup = _device_input(case)

    def fn(d_a, last):
        return r.call(getattr(hl, r.api_fn), d_a, backend="cuda",
                      **case.engine_kwargs(r.name, "gpu", last))

    t, factors = measure(fn, setup, case.repeat, warmup=case.warmup, sync=cupy_sync)
    return Outcome(t, factors)


def run_hybridla_cpu(case: Case, r: Routine) -> Outcome:
    hl = _hybridla()
    backend = "cuda" if "cuda" in _hybridla_backends() else "host"

    def fn(a, last):
        return r.call(getattr(hl, r.api_fn), a, backend=backend,
                      **case.engine_kwargs(r.name, "cpu", last))

    t, factors = measure(fn, case.host_copy, case.repeat, warmup=case.warmup)
    notes = [] if isinstance(factors[0], np.ndarray) else [
        f"factors returned as {type(factors[0]).__name__}"]
    return Outcome(t, factors, label={"backend": f" ({backend})"}, notes=notes)


# ----------------------------------------------------------------------------------------
# MAGMA through PyTorch, SciPy
# ----------------------------------------------------------------------------------------

def run_magma(case: Case, r: Routine) -> Outcome:
    torch = _import("torch")
    # F-ordered host array -> tensor with strides (1, n): the logical matrix is A itself,
    # already in the column-major layout MAGMA wants.
    t_a = torch.from_numpy(case.a).to("cuda")
    prev = torch.backends.cuda.preferred_linalg_library()
    torch.backends.cuda.preferred_linalg_library("magma")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t, raw = measure(lambda _, last: r.torch.call(torch, t_a), no_setup,
                             case.repeat, warmup=case.warmup, sync=torch_sync)
    finally:
        torch.backends.cuda.preferred_linalg_library(prev)
    del t_a
    notes: list = []
    factors = r.torch.finish(raw, notes)
    said = {str(w.message).splitlines()[0][:100] for w in caught
            if "magma" in str(w.message).lower() or "cusolver" in str(w.message).lower()}
    notes += [f"torch warned: {s}" for s in sorted(said)]
    return Outcome(t, factors, label={"torch": f" {torch.__version__.split('+')[0]}"},
                   notes=notes)


def run_scipy(case: Case, r: Routine) -> Outcome:
    import scipy.linalg

    fn = getattr(scipy.linalg, r.scipy_fn)
    call = r.scipy_call or r.call
    t, factors = measure(lambda a, last: call(fn, a), case.host_copy, case.repeat,
                         warmup=case.warmup)
    return Outcome(t, factors)


# ----------------------------------------------------------------------------------------
# Availability probes
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


def adjoint_matvec(m, v):
    """m^H @ v as a row-vector product (no transposed copy of m); NumPy or CuPy."""
    if m.dtype.kind == "c" or v.dtype.kind == "c":
        return (v.conj() @ m).conj()
    return v @ m


def tri_matvec(f, x, xp, wdt, *, lower: bool, adjoint: bool = False, unit: bool = False,
               block: int = 2048):
    """op(T) @ x for the lower (or upper) triangle T of the square array f, with a unit
    diagonal if ``unit``; op(T) = T, or T^H if ``adjoint``.

    Works column block by column block in precision wdt (never forming T), for NumPy and
    CuPy alike.
    """
    n = f.shape[0]
    y = xp.zeros(n, dtype=np.promote_types(wdt, x.dtype))
    for j0 in range(0, n, block):
        j1 = min(n, j0 + block)
        diag = f[j0:j1, j0:j1]
        k = 1 if unit else 0
        diag = (xp.tril(diag, -k) if lower else xp.triu(diag, k)).astype(wdt, copy=False)
        rows = slice(j1, n) if lower else slice(0, j0)    # the rest of the column block
        off = f[rows, j0:j1]
        if adjoint:
            y[j0:j1] += adjoint_matvec(diag, x[j0:j1])
            if off.size:
                y[j0:j1] += adjoint_matvec(off.astype(wdt, copy=False), x[rows])
        else:
            y[j0:j1] += diag @ x[j0:j1]
            if off.size:
                y[rows] += off.astype(wdt, copy=False) @ x[j0:j1]
        if unit:
            y[j0:j1] += x[j0:j1]
    return y


def lu_matvec(lu, x, xp, wdt, block: int = 2048):
    """L @ (U @ x) for packed LU factors (unit lower L, upper U), without forming L or U."""
    y = tri_matvec(lu, x, xp, wdt, lower=False, block=block)
    return tri_matvec(lu, y, xp, wdt, lower=True, unit=True, block=block)


def _factor_array(case: Case, f):
    """The factor array as NumPy or CuPy, with its array module; checks its shape."""
    f = as_checkable(f)
    if f.shape != (case.n, case.n):
        raise ValueError(f"factors have shape {f.shape}, expected {(case.n, case.n)}")
    return f, array_module(f)


def _norm1(r, xp) -> float:
    return float(xp.abs(r).sum(axis=0).max()) if r.ndim == 2 else float(xp.abs(r).sum())


def getrf_error(case: Case, factors) -> tuple[float, bool]:
    """(||PA - LU||_1 / (n ||A||_1 eps), estimated?) computed where lu lives.

    Dense for host results with n < 8192 and device results with n <= 16384; otherwise
    estimated with a random vector: ||PAx - L(Ux)||_1 / (n ||A||_1 ||x||_1 eps).
    Arithmetic in double precision; eps is that of the factorization's dtype.
    """
    lu, piv = factors
    lu, xp = _factor_array(case, lu)
    n = case.n
    eps = float(np.finfo(case.dtype).eps)
    wdt = check_dtype(case.dtype)
    perm = swaps_to_perm(to_host(piv), n)
    dense_max = DENSE_CHECK_MAX_HOST if xp is np else DENSE_CHECK_MAX_DEVICE
    if n <= dense_max:
        l_mat = xp.tril(lu, -1).astype(wdt, copy=False)
        xp.fill_diagonal(l_mat, 1)
        r = l_mat @ xp.triu(lu).astype(wdt, copy=False)
        del l_mat
        r -= xp.asarray(case.a[perm]).astype(wdt, copy=False)
        num = _norm1(r, xp)
        del r
        return num / (n * case.anorm * eps), False
    x = xp.asarray(case.x)
    r = lu_matvec(lu, x, xp, wdt)
    r -= xp.asarray(case.ax[perm])
    num = _norm1(r, xp)
    xnorm = float(np.abs(case.x).sum())
    return num / (n * case.anorm * xnorm * eps), True


def potrf_error(case: Case, factors) -> tuple[float, bool]:
    """(||A - LL^H||_1 / (n ||A||_1 eps), estimated?) computed where L lives (the lower
    triangle of the factor; the other one is not read).

    Dense for host results with n < 8192 and device results with n <= 16384; otherwise
    estimated with a random vector: ||Ax - L(L^H x)||_1 / (n ||A||_1 ||x||_1 eps).
    """
    (c,) = factors
    c, xp = _factor_array(case, c)
    n = case.n
    eps = float(np.finfo(case.dtype).eps)
    wdt = check_dtype(case.dtype)
    dense_max = DENSE_CHECK_MAX_HOST if xp is np else DENSE_CHECK_MAX_DEVICE
    if n <= dense_max:
        l_mat = xp.tril(c).astype(wdt, copy=False)
        r = l_mat @ l_mat.conj().T
        del l_mat
        r -= xp.asarray(case.a).astype(wdt, copy=False)
        num = _norm1(r, xp)
        del r
        return num / (n * case.anorm * eps), False
    x = xp.asarray(case.x)
    y = tri_matvec(c, x, xp, wdt, lower=True, adjoint=True)
    r = tri_matvec(c, y, xp, wdt, lower=True)
    r -= xp.asarray(case.ax)
    num = _norm1(r, xp)
    xnorm = float(np.abs(case.x).sum())
    return num / (n * case.anorm * xnorm * eps), True


# QR family: (the triangle of the factors is lower, the Gram product as Case.product's ops).
# QR: R^H R = A^H A; QL: L^H L = A^H A; LQ: L L^H = A A^H.
_QR_FORMS = {"qr": (False, "HN"), "ql": (True, "HN"), "lq": (True, "NH")}


def _orgqr(f: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """Q (n x n) from geqrf's reflectors in f and tau, by LAPACK's xorgqr / xungqr."""
    from scipy.linalg import lapack
    orgqr = getattr(lapack, "zungqr" if f.dtype.kind == "c" else "dorgqr")
    lwork = int(orgqr(f, tau, lwork=-1)[1][0].real)
    q, _, info = orgqr(f, tau, lwork=max(1, lwork, f.shape[1]))
    if info != 0:
        raise RuntimeError(f"orgqr: info={info}")
    return q


def qr_dense_error(kind: str, case: Case, f: np.ndarray, tau: np.ndarray) -> float:
    """||A - QR||_1 (QL, LQ) / (n ||A||_1 eps) with Q formed on the host, in double.

    QL and LQ are checked as QRs (identities of LAPACK's geqlf and gelqf): the QL of A is
    the QR of J A J (J the reversal) with factors J F J and tau reversed; the LQ of A is the
    QR of A^H with factors F^H; ||A - LQ||_1 is then the infinity norm of A^H - Q'R.
    """
    wdt = check_dtype(case.dtype)
    a = case.a
    if kind == "ql":
        a, f, tau = a[::-1, ::-1], f[::-1, ::-1], tau[::-1]
    elif kind == "lq":
        a, f = a.conj().T, f.conj().T
    f = np.asfortranarray(f, dtype=wdt)
    q = _orgqr(f, np.ascontiguousarray(tau, dtype=wdt))
    r = q @ np.triu(f)
    r -= a
    num = float(np.abs(r).sum(axis=1 if kind == "lq" else 0).max())
    return num / (case.n * case.anorm * float(np.finfo(case.dtype).eps))


def qr_error(kind: str, case: Case, factors) -> tuple[float, bool]:
    """(||A - QR||_1 / (n ||A||_1 eps), estimated?) for kind "qr", "ql" (A = QL) or "lq"
    (A = LQ), from LAPACK-layout factors and tau.

    Dense (on the host) for n < 8192; otherwise estimated, where the factors live, from the
    triangular factor alone with a random vector, as the relative error of the Gram product
    in units of n eps: for QR ||A^H(Ax) - R^H(Rx)||_2 / (n eps ||A^H(Ax)||_2)
    (R^H R = A^H A), for QL the same with L, for LQ ||A(A^H x) - L(L^H x)||_2 /
    (n eps ||A(A^H x)||_2) (L L^H = A A^H).  ||A^H A x||_2 stands for ||A||_2^2 ||x||_2: a
    lower bound, close to it for these random matrices (the estimate errs on the high side;
    with 1-norms and ||A||_1 ||A||_inf it would be about n times too small).  On random
    matrices it comes out at 0.6-0.9x the dense ratio (n = 300..2000).  The estimate does
    not look at tau.
    """
    f, tau = factors
    f, xp = _factor_array(case, f)
    n = case.n
    if n <= DENSE_CHECK_MAX_HOST:
        return qr_dense_error(kind, case, to_host(f), to_host(tau)), False
    lower, ops = _QR_FORMS[kind]
    wdt = check_dtype(case.dtype)
    z = xp.asarray(case.x)
    for op in reversed(ops):
        z = tri_matvec(f, z, xp, wdt, lower=lower, adjoint=op == "H")
    gram = case.product(ops)
    z -= xp.asarray(gram)
    num = float(xp.linalg.norm(z))
    eps = float(np.finfo(case.dtype).eps)
    return num / (n * eps * float(np.linalg.norm(gram))), True


# ----------------------------------------------------------------------------------------
# The routines
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """A baseline's call (timed) and the conversion of its raw result to the routine's
    factors (untimed; it may add notes)."""
    call: Callable
    finish: Callable[[Any, list], tuple]


def _lu_call(fn, a, **kw) -> tuple:
    lu, piv = fn(a, overwrite_a=True, check_finite=False, **kw)
    return lu, piv


def _cho_call(fn, a, **kw) -> tuple:
    return (fn(a, lower=True, overwrite_a=True, check_finite=False, **kw)[0],)


def _householder_call(fn, a, **kw) -> tuple:
    """hybridla.geqrf / geqlf / gelqf: (factors, tau), what LAPACK's routine computes (qr's raw
    mode also builds the triangle, which cuSOLVER's geqrf does not)."""
    return fn(a, overwrite_a=True, check_finite=False, **kw)


def _raw_qr_call(fn, a, **kw) -> tuple:
    (f, tau), _ = fn(a, mode="raw", overwrite_a=True, check_finite=False, **kw)
    return f, tau


def _checked(factors: tuple, info, meaning: str, notes: list) -> tuple:
    _info_note(info, meaning, notes)
    return factors


_NOT_PD = "the leading minor of order {i} is not positive definite"


@dataclass(frozen=True)
class Routine:
    """One benchmarked routine: everything the driver needs, no if/else on names elsewhere.

    The factors of a routine are a tuple: getrf (lu, piv) with 0-based LAPACK swaps; potrf
    (c,) with L in the lower triangle; geqrf/geqlf/gelqf (factors, tau) in LAPACK's layout.
    """
    name: str
    flops: Callable[[int, int, Any], float]          # (m, n, dtype), LAWN 41
    matrix: str                                      # key of MATRICES
    api_fn: str                                      # hybridla.<api_fn>, scipy's signature
    call: Callable[..., tuple]                       # (fn, a, **engine options) -> factors
    check: Callable[[Case, tuple], tuple[float, bool]]
    error_text: str                                  # what check computes (table header)
    scipy_fn: Optional[str] = None                   # scipy.linalg.<scipy_fn>
    scipy_call: Optional[Callable[..., tuple]] = None  # its call, where not `call`
    cusolver: Optional[Call] = None                  # call(d_a) -> (aux, info), in place
    torch: Optional[Call] = None                     # call(torch, tensor) -> raw
    baseline: Optional[str] = None                   # baselines time this routine instead


_ESTIMATE = "values marked ~ are random-vector estimates"
_DENSE_BOTH = (f"dense for host results n < {DENSE_CHECK_MAX_HOST + 1} and device results "
               f"n <= {DENSE_CHECK_MAX_DEVICE}")
_DENSE_QR = f"dense (Q formed by LAPACK on the host) for n < {DENSE_CHECK_MAX_HOST + 1}"
_QR_FORM = "||{0}-{1}||_2/(n eps ||{0}||_2)"      # Gram-product estimates

_ROUTINE_LIST = [
    Routine(
        "getrf", getrf_flops, "general", "lu_factor", _lu_call, getrf_error,
        f"||PA-LU||_1/(n ||A||_1 eps): {_DENSE_BOTH}; {_ESTIMATE} "
        f"||PAx-L(Ux)||_1/(n ||A||_1 ||x||_1 eps).",
        scipy_fn="lu_factor",
        cusolver=Call(cusolver_getrf,
                      lambda raw, notes: (raw[0], _cusolver_pivots(raw[1], raw[2], notes))),
        torch=Call(lambda torch, t: torch.linalg.lu_factor(t),
                   lambda raw, notes: (as_checkable(raw[0]),
                                       _cusolver_pivots(raw[1], None, notes)))),
    Routine(
        "geqrf", geqrf_flops, "general", "geqrf", _householder_call,
        functools.partial(qr_error, "qr"),
        f"||A-QR||_1/(n ||A||_1 eps): {_DENSE_QR}; {_ESTIMATE} from R^H R = A^H A: "
        f"{_QR_FORM.format('A^H(Ax)', 'R^H(Rx)')}.",
        scipy_fn="qr", scipy_call=_raw_qr_call,
        cusolver=Call(cusolver_geqrf,
                      lambda raw, notes: _checked(raw[:2], raw[2], "unexpected", notes)),
        torch=Call(lambda torch, t: torch.geqrf(t),
                   lambda raw, notes: (as_checkable(raw[0]), raw[1]))),
    Routine(
        "geqlf", geqlf_flops, "general", "geqlf", _householder_call,
        functools.partial(qr_error, "ql"),
        f"||A-QL||_1/(n ||A||_1 eps): {_DENSE_QR} (as the QR of the reversed matrix); "
        f"{_ESTIMATE} from L^H L = A^H A: {_QR_FORM.format('A^H(Ax)', 'L^H(Lx)')}.",
        baseline="geqrf"),
    Routine(
        "gelqf", gelqf_flops, "general", "gelqf", _householder_call,
        functools.partial(qr_error, "lq"),
        f"||A-LQ||_1/(n ||A||_1 eps): {_DENSE_QR} (as the QR of A^H); {_ESTIMATE} from "
        f"L L^H = A A^H: {_QR_FORM.format('A(A^H x)', 'L(L^H x)')}.",
        baseline="geqrf"),
    Routine(
        "potrf", lambda m, n, dtype: potrf_flops(n, dtype), "spd", "cho_factor", _cho_call,
        potrf_error,
        f"||A-LL^H||_1/(n ||A||_1 eps): {_DENSE_BOTH}; {_ESTIMATE} "
        f"||Ax-L(L^H x)||_1/(n ||A||_1 ||x||_1 eps).",
        scipy_fn="cho_factor",
        cusolver=Call(cusolver_potrf,
                      lambda raw, notes: _checked(raw[:1], raw[2], _NOT_PD, notes)),
        torch=Call(lambda torch, t: torch.linalg.cholesky_ex(t),
                   lambda raw, notes: _checked((as_checkable(raw[0]),), raw[1], _NOT_PD,
                                               notes))),
]
# Table order = run order at each size: routines on the same matrix kind are neighbours,
# and geqrf comes before geqlf/gelqf (their "vs our geqrf" needs its times).
ROUTINES: dict[str, Routine] = {r.name: r for r in _ROUTINE_LIST}


# ----------------------------------------------------------------------------------------
# The implementations
# ----------------------------------------------------------------------------------------

def _supports_hybridla(r: Routine) -> Optional[str]:
    if getattr(_hybridla(), r.api_fn, None) is None:
        return f"skipped: hybridla.{r.api_fn} not available"
    return None


@dataclass(frozen=True)
class Impl:
    # Label template: {sub} is " geqrf" where a baseline stands in for a routine it lacks,
    # {what} SciPy's function (or the stand-in's name); a run fills the other fields.
    label: str
    run: Callable[[Case, Routine], Outcome]
    probe: Callable[[], Optional[str]]                 # this machine: else left out (logged)
    group: str                                         # an --interfaces or --baselines word
    max_n: Callable[[argparse.Namespace], Optional[int]] = lambda opts: None
    hybridla: bool = False                             # times the routine itself
    # this routine: a reason gives a "skipped" row
    supports: Callable[[Routine], Optional[str]] = lambda r: None

    def computes(self, r: Routine) -> Routine:
        """The routine this implementation times for r's rows."""
        return r if self.hybridla or r.baseline is None else ROUTINES[r.baseline]

    def label_for(self, r: Routine, **fill) -> str:
        c = self.computes(r)
        stand_in = c is not r
        fields = {"backend": "", "torch": "", **fill,
                  "sub": f" {c.name}" if stand_in else "",
                  "what": c.name if stand_in else c.scipy_fn}
        return self.label.format(**fields)


def _needs(attr: str, what: str):
    def supports(r: Routine) -> Optional[str]:
        return None if getattr(r, attr) is not None else f"skipped: {what} has no {r.name}"
    return supports


# Run order within one size: the cuSOLVER rows first, so that every later row has its ratios.
IMPLEMENTATIONS: dict[str, Impl] = {
    "cusolver": Impl("cuSOLVER{sub} (device)", run_cusolver, probe_cusolver, "cusolver",
                     supports=_needs("cusolver", "cuSOLVER")),
    "cusolver+transfers": Impl("cuSOLVER{sub}+transfers", run_cusolver_transfers,
                               probe_cusolver, "cusolver",
                               supports=_needs("cusolver", "cuSOLVER")),
    "hybridla-gpu": Impl("hybridla GPU iface", run_hybridla_gpu, probe_hybridla_gpu, "gpu",
                         hybridla=True, supports=_supports_hybridla),
    "hybridla-cpu": Impl("hybridla CPU iface{backend}", run_hybridla_cpu, probe_hybridla,
                         "cpu", hybridla=True, supports=_supports_hybridla),
    "magma": Impl("MAGMA{sub} (torch{torch})", run_magma, probe_magma, "magma",
                  supports=_needs("torch", "torch")),
    "scipy": Impl("SciPy {what} (host)", run_scipy, probe_scipy, "scipy",
                  max_n=lambda opts: opts.scipy_max, supports=_needs("scipy_fn", "SciPy")),
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
# Output
# ----------------------------------------------------------------------------------------

COLUMNS = ("n", "implementation", "time (s)", "TFLOP/s", "backward error",
           "vs cuSOLVER", "vs cuSOLVER+transfers", "note")
ROUTINE_COLUMN = "routine"            # after "n", when a run has several routines
OUR_REFERENCE_COLUMN = "vs our {}"    # before "note", when a routine stands on another


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


def _ratio(base: Optional[float], t: Optional[float]) -> str:
    return "n/a" if t is None else ("–" if base is None else f"{base / t:.2f}x")


class Table:
    """Prints markdown rows as they come; with a path also appends them to that file.

    The columns are COLUMNS, plus "routine" when the run has several routines and
    "vs our geqrf" when one of them (geqlf, gelqf) is measured against our geqrf.
    """

    def __init__(self, path: Optional[str], routines: list[Routine]):
        self.path = path
        self.routines = routines
        self.multi = len(routines) > 1
        self.references = sorted({r.baseline for r in routines if r.baseline})
        columns = list(COLUMNS)
        if self.multi:
            columns.insert(1, ROUTINE_COLUMN)
        for ref in self.references:
            columns.insert(len(columns) - 1, OUR_REFERENCE_COLUMN.format(ref))
        self.columns = tuple(columns)

    def emit(self, line: str, stdout: bool = True) -> None:
        if stdout:
            print(line, flush=True)
        if self.path:
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line + "\n")

    def row(self, n: int, r: Routine, label: str, t=None, flop=None, berr=None,
            estimated=False, bases=(None, None), ours=None, note="") -> str:
        """One row; bases: the (cuSOLVER, cuSOLVER+transfers) times, ours: our time of
        r.baseline through the same interface (or None)."""
        cells = [str(n)] + ([r.name] if self.multi else []) + [
            label, _fmt(t, ".4g"),
            "n/a" if t is None else f"{flop / t / 1e12:.3g}",
            "n/a" if berr is None else ("~" if estimated else "") + f"{berr:.2e}",
            *(_ratio(b, t) for b in bases)]
        cells += [_ratio(ours if r.baseline == ref else None, t) for ref in self.references]
        cells.append(note.replace("|", "/"))
        return "| " + " | ".join(cells) + " |"

    def start(self, opts: argparse.Namespace, command: str) -> None:
        now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        hl = _MODULES.get("hybridla")
        where = getattr(hl, "__file__", None) if hl is not None else None
        names = [r.name for r in self.routines]
        errors = " ".join((f"{r.name}: " if self.multi else "") + r.error_text
                          for r in self.routines)
        lines = [
            "",
            f"### {','.join(names)} {opts.dtype} on {device_name()}, {now}",
            "",
            f"`{command}`",
            "",
            f"hybridla: {where or 'not importable'}; numpy {np.__version__}; "
            f"repeat {opts.repeat} (median), warm-up once at the smallest size; "
            f"TFLOP/s from LAWN 41 {', '.join(names)} flops.",
            f"Backward error {errors} "
            f"Ratios are cuSOLVER time / this time (> 1: this is faster).",
        ]
        for ref in self.references:
            stand = ", ".join(r.name for r in self.routines if r.baseline == ref)
            lines.append(
                f"cuSOLVER, MAGMA and SciPy have no {stand}: their rows for {stand} time "
                f"{ref} on the same matrix (shown once per size when {ref} is in the run), "
                f"and the cuSOLVER ratios of {stand} are against cuSOLVER's {ref}. "
                f"\"vs our {ref}\" = hybridla's {ref} time through the same interface / "
                f"this time (\"within 1.2x of our {ref}\" is >= 0.83x).")
        lines += [
            "",
            "| " + " | ".join(self.columns) + " |",
            "|" + "|".join("---:" if c in ("n", "time (s)", "TFLOP/s") else "---"
                           for c in self.columns) + "|",
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


def _routine_list(value: str) -> list[str]:
    """A comma list of routine names, in table (run) order, each once."""
    words = {w.strip() for w in value.split(",") if w.strip()}
    bad = sorted(words - set(ROUTINES))
    if bad or not words:
        raise argparse.ArgumentTypeError(
            f"unknown routine {', '.join(bad) or repr(value)}; choose from "
            f"{', '.join(ROUTINES)} (or a comma list of them)")
    return [name for name in ROUTINES if name in words]


def _positive_int(value: str) -> int:
    v = int(value)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {v}")
    return v


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark hybridla's factorizations against cuSOLVER, MAGMA and SciPy.")
    p.add_argument("--routine", dest="routines", type=_routine_list, default="getrf",
                   metavar="|".join(ROUTINES),
                   help="one routine or a comma list (e.g. geqrf,geqlf,gelqf), run in "
                        "this order at each size")
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:        # `hybridla bench -- --routine ...` passes the "--" along
        argv = argv[1:]
    opts = p.parse_args(argv)
    if opts.lookahead is not None and opts.lookahead < 0:
        p.error("--lookahead must be >= 0")
    opts.routine = ",".join(opts.routines)
    return opts


def run_one(name: str, impl: Impl, r: Routine, case: Case, table: Table,
            measured: dict) -> str:
    """Time one implementation for routine r at one size, check its result; return the row.

    measured maps (implementation, routine timed) to seconds at this size; this row's time
    is added before its ratios are computed.
    """
    c = impl.computes(r)
    label, note = impl.label_for(r), ""
    t = berr = None
    estimated = False
    outcome = None
    reason = impl.supports(c)
    if reason:
        log(f"n={case.n}: {c.name} {name}: {reason}")
        return table.row(case.n, r, label, note=reason)
    try:
        log(f"n={case.n}: {c.name} {name}")
        outcome = impl.run(case, c)
        t, label = outcome.time, impl.label_for(r, **outcome.label)
        notes = list(outcome.notes)
        try:
            berr, estimated = c.check(case, outcome.factors)
        except Exception as exc:
            notes.append(f"backward error failed: {type(exc).__name__}: {exc}")
        note = "; ".join(notes)
    except Exception as exc:
        note = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        log(f"n={case.n}: {c.name} {name} failed: {note}")
    finally:
        outcome = None
        release_device_memory()
    if t is not None:
        measured[(name, c.name)] = t
    ref = r.baseline or r.name
    bases = (measured.get(("cusolver", ref)), measured.get(("cusolver+transfers", ref)))
    ours = measured.get((name, r.baseline)) if impl.hybridla and r.baseline else None
    return table.row(case.n, r, label, t, c.flops(case.n, case.n, case.dtype), berr,
                     estimated, bases, ours, note)


def main(argv=None) -> int:
    opts = parse_args(argv)
    dtype = np.dtype(opts.dtype)
    routines = [ROUTINES[name] for name in opts.routines]
    if opts.trace_dir:
        os.makedirs(opts.trace_dir, exist_ok=True)
    command = shlex.join(getattr(sys, "orig_argv", [sys.executable] + sys.argv)
                         if argv is None else ["perf/bench.py", *argv])
    impls = select_implementations(opts)
    if not impls:
        log("nothing to run")
        return 1
    table = Table(opts.out, routines)
    table.start(opts, command)
    try:
        for i, n in enumerate(sorted(set(opts.sizes))):
            case = None
            measured: dict = {}
            attempted: set = set()       # (implementation, routine timed) at this size
            for r in routines:
                if case is None or case.kind != r.matrix:
                    case = None
                    gc.collect()
                    kind = "" if r.matrix == "general" else f"{r.matrix} "
                    log(f"n={n}: generating the {dtype} {kind}matrix "
                        f"({n * n * dtype.itemsize / 2**30:.2f} GiB)")
                    case = Case(n, dtype, opts, warmup=1 if i == 0 else 0, kind=r.matrix)
                for name, impl in impls:
                    key = (name, impl.computes(r).name)
                    if key in attempted:     # a stand-in already in an earlier routine's rows
                        continue
                    attempted.add(key)
                    limit = impl.max_n(opts)
                    if limit is not None and n > limit:
                        log(f"n={n}: skipping {name} (n > {limit})")
                        continue
                    table.emit(run_one(name, impl, r, case, table, measured))
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
