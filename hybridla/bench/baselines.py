"""cuSOLVER, the baseline: its dense routines through nvmath.bindings.cusolverDn on F-ordered
CuPy arrays, one handle per process on CuPy's current stream.

- getrf, potrf (lower), geqrf factor in place; getrs, potrs solve with their factors;
  irs_gesv is <xy>_gesv, cuSOLVER's mixed-precision iterative-refinement solver.
- The routine is chosen by dtype prefix (s, d, c, z). getrf, potrf and geqrf query and allocate
  their workspace, pivots and info at each call unless they are given (perf/bench.py times the
  call with them inside, perf/mixed.py allocates them once outside its timed region).
- factor_with_transfers is the CPU-interface baseline: a pageable host matrix uploaded (CuPy
  stages it through pinned memory; prime its pool first, harness.prime_pinned_pool), factored,
  and the factors downloaded into a host array, all inside the caller's clock.
"""
from __future__ import annotations

import numpy as np

from . import harness

FILL_LOWER = 0          # CUBLAS_FILL_MODE_LOWER
OP_N = 0                # CUBLAS_OP_N
PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d",
          np.dtype(np.complex64): "c", np.dtype(np.complex128): "z"}
IRS_PRECISIONS = {"dd": "FP64", "ds": "FP32", "dx": "TF32", "dh": "FP16", "db": "BF16"}

_HANDLE: list = []


def cusolver():
    """nvmath.bindings.cusolverDn, or None (harness.import_error says why)."""
    return harness.optional_import("nvmath.bindings.cusolverDn")


def unavailable() -> str | None:
    """Why the cuSOLVER baseline cannot run here (it needs a CUDA device, CuPy and
    nvmath-python), or None."""
    reason = harness.no_gpu_reason()
    if reason is not None:
        return reason
    if cusolver() is None:
        return harness.import_error("nvmath.bindings.cusolverDn")
    return None


def handle() -> int:
    """The process's cuSOLVER handle, set to CuPy's current stream."""
    dn = cusolver()
    if not _HANDLE:
        _HANDLE.append(dn.create())
    dn.set_stream(_HANDLE[0], harness.cupy().cuda.get_current_stream().ptr)
    return _HANDLE[0]


def destroy_handle() -> None:
    if _HANDLE:
        cusolver().destroy(_HANDLE.pop())


def _functions(name: str, dtype):
    """(x<name>_buffer_size, x<name>) of cusolverDn for dtype, and the handle."""
    dn = cusolver()
    prefix = PREFIX[np.dtype(dtype)]
    return (getattr(dn, f"{prefix}{name}_buffer_size"), getattr(dn, f"{prefix}{name}"),
            handle())


def getrf(d_a, work=None, ipiv=None, info=None):
    """In-place xgetrf of the F-ordered CuPy matrix d_a; returns (ipiv, info), ipiv 1-based."""
    cp = harness.cupy()
    buffer_size, fn, h = _functions("getrf", d_a.dtype)
    m, n = d_a.shape
    lda = max(1, m)
    if work is None:
        work = cp.empty(max(1, buffer_size(h, m, n, d_a.data.ptr, lda)), dtype=d_a.dtype)
    ipiv = cp.empty(max(1, min(m, n)), dtype=cp.int32) if ipiv is None else ipiv
    info = cp.zeros(1, dtype=cp.int32) if info is None else info
    fn(h, m, n, d_a.data.ptr, lda, work.data.ptr, ipiv.data.ptr, info.data.ptr)
    return ipiv, info


def getrf_workspace(d_a):
    """getrf's workspace for matrices of d_a's shape and dtype (allocated outside a clock)."""
    buffer_size, _, h = _functions("getrf", d_a.dtype)
    m = d_a.shape[0]
    return harness.cupy().empty(max(1, buffer_size(h, m, d_a.shape[1], d_a.data.ptr, max(1, m))),
                                dtype=d_a.dtype)


def potrf(d_a, work=None, info=None):
    """In-place xpotrf (lower) of the F-ordered CuPy matrix d_a; returns (None, info)."""
    cp = harness.cupy()
    buffer_size, fn, h = _functions("potrf", d_a.dtype)
    n = d_a.shape[0]
    lda = max(1, n)
    if work is None:
        work = cp.empty(max(1, buffer_size(h, FILL_LOWER, n, d_a.data.ptr, lda)),
                        dtype=d_a.dtype)
    info = cp.zeros(1, dtype=cp.int32) if info is None else info
    fn(h, FILL_LOWER, n, d_a.data.ptr, lda, work.data.ptr, work.size, info.data.ptr)
    return None, info


def potrf_workspace(d_a):
    """potrf's workspace for matrices of d_a's shape and dtype (allocated outside a clock)."""
    buffer_size, _, h = _functions("potrf", d_a.dtype)
    n = d_a.shape[0]
    return harness.cupy().empty(max(1, buffer_size(h, FILL_LOWER, n, d_a.data.ptr, max(1, n))),
                                dtype=d_a.dtype)


def geqrf(d_a):
    """In-place xgeqrf of the F-ordered CuPy matrix d_a; returns (tau, info)."""
    cp = harness.cupy()
    buffer_size, fn, h = _functions("geqrf", d_a.dtype)
    m, n = d_a.shape
    lda = max(1, m)
    lwork = buffer_size(h, m, n, d_a.data.ptr, lda)
    work = cp.empty(max(1, lwork), dtype=d_a.dtype)
    tau = cp.empty(max(1, min(m, n)), dtype=d_a.dtype)
    info = cp.zeros(1, dtype=cp.int32)
    fn(h, m, n, d_a.data.ptr, lda, tau.data.ptr, work.data.ptr, lwork, info.data.ptr)
    return tau, info


def getrs(d_lu, ipiv, d_b, info):
    """xgetrs (no transpose): d_b := A^-1 d_b with getrf's factors and pivots."""
    dn = cusolver()
    n = d_lu.shape[0]
    nrhs = 1 if d_b.ndim == 1 else d_b.shape[1]
    getattr(dn, f"{PREFIX[np.dtype(d_lu.dtype)]}getrs")(
        handle(), OP_N, n, nrhs, d_lu.data.ptr, max(1, n), ipiv.data.ptr, d_b.data.ptr,
        max(1, n), info.data.ptr)


def potrs(d_c, d_b, info):
    """xpotrs (lower): d_b := A^-1 d_b with potrf's lower factor."""
    dn = cusolver()
    n = d_c.shape[0]
    nrhs = 1 if d_b.ndim == 1 else d_b.shape[1]
    getattr(dn, f"{PREFIX[np.dtype(d_c.dtype)]}potrs")(
        handle(), FILL_LOWER, n, nrhs, d_c.data.ptr, max(1, n), d_b.data.ptr, max(1, n),
        info.data.ptr)


def irs_workspace(prefix: str, d_a, d_b, d_x, ipiv) -> int:
    """Bytes of workspace <prefix>_gesv needs for these arrays."""
    n = d_a.shape[0]
    nrhs = 1 if d_b.ndim == 1 else d_b.shape[1]
    buffer_size = getattr(cusolver(), f"{prefix}_gesv_buffer_size")
    return int(buffer_size(handle(), n, nrhs, d_a.data.ptr, n, ipiv.data.ptr, d_b.data.ptr, n,
                           d_x.data.ptr, n, 0))


def irs_gesv(prefix: str, d_a, d_b, d_x, ipiv, work, lwork: int, info) -> int:
    """cusolverDn<prefix>_gesv: x := A^-1 b by an LU in the low precision, cuSOLVER's own
    refinement and FP64 fallback; d_a may be left overwritten. Returns niters (< 0: it fell
    back to an FP64 solve)."""
    n = d_a.shape[0]
    nrhs = 1 if d_b.ndim == 1 else d_b.shape[1]
    return int(getattr(cusolver(), f"{prefix}_gesv")(
        handle(), n, nrhs, d_a.data.ptr, n, ipiv.data.ptr, d_b.data.ptr, n, d_x.data.ptr, n,
        work.data.ptr, lwork, info.data.ptr))


def device_input(a: np.ndarray):
    """A device buffer of a's shape and a setup that refreshes it from a (a pageable copy, no
    pinned staging: for untimed setups)."""
    d_a = harness.cupy().empty(a.shape, dtype=a.dtype, order="F")

    def setup():
        d_a.set(a)
        return d_a
    return setup


def factor_with_transfers(call, a: np.ndarray, out: np.ndarray):
    """The CPU-interface baseline, to be timed as a whole: upload the host matrix `a`, factor
    it by call(d_a) -> (aux, info), download the factors into `out` (blocking) and aux (pivots,
    tau) and info into host memory. Returns (out, aux or None, info)."""
    d_a = harness.cupy().asarray(a, order="F")   # H2D from the pageable array
    d_aux, d_info = call(d_a)
    d_a.get(out=out)                             # D2H into host memory (blocking)
    return out, None if d_aux is None else harness.to_host(d_aux), d_info.get()


def info_note(info, meaning: str, notes: list) -> None:
    """LAPACK-style info (device or host, scalar or 1-element): raise for < 0, note > 0."""
    info = int(np.asarray(harness.to_host(info)).ravel()[0])
    if info < 0:
        raise RuntimeError(f"argument {-info} is illegal")
    if info > 0:
        notes.append(f"info={info} ({meaning.format(i=info)})")


def pivots(ipiv, info, notes: list) -> np.ndarray:
    """0-based swaps from cuSOLVER's (or torch's) 1-based ipiv; a note for info > 0."""
    if info is not None:
        info_note(info, "U({i},{i}) = 0", notes)
    return harness.to_host(ipiv).astype(np.int32) - 1
