"""cuSOLVER, the baseline: its dense routines through nvmath.bindings.cusolverDn on F-ordered
CuPy arrays, one handle per process on CuPy's current stream.

- getrf, potrf (lower), geqrf factor in place; getrs, potrs solve with their factors;
  irs_gesv is <xy>_gesv, cuSOLVER's mixed-precision iterative-refinement solver.
- The routine is chosen by dtype prefix (s, d, c, z). getrf, potrf and geqrf query and allocate
  their workspace, pivots and info at each call unless they are given (perf/bench.py times the
  call with them inside, perf/mixed.py allocates them once outside its timed region).
- The CPU-interface baselines (``HostStaging``, ``factor_with_transfers``): the matrix
  uploaded, factored and downloaded inside the caller's clock, either from PINNED host buffers
  (the reference: what a user can reach at best with cuSOLVER) or from the caller's PAGEABLE
  arrays (what a first try gets).
- ``IrsGesv``: cuSOLVER's expert mixed-precision solver cusolverDnIRSXgesv (main precision
  FP64, a chosen lowest precision, GMRES refinement by default), the mixed solvers' baseline.
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


class DeviceInput:
    """A host matrix uploaded once (pristine, never handed out) and one scratch buffer that
    refresh() overwrites with it by a device-to-device copy: the untimed setup of the rows
    that factor a device array in place. Contenders of one alternating run share it (each
    refreshes it before its call and is checked before the next one runs)."""

    def __init__(self, a: np.ndarray):
        cp = harness.cupy()
        self.pristine = cp.asarray(a, order="F")
        self.scratch = cp.empty_like(self.pristine, order="F")

    def refresh(self):
        self.scratch.data.copy_from_device(self.pristine.data, self.pristine.nbytes)
        return self.scratch


class HostStaging:
    """Where a with-transfers baseline's host data lives, and its timed copies.

    pinned=True (the reference row): each input is copied once, here (outside any clock), into
    a page-locked buffer, and a device buffer of its shape is allocated; upload() then issues
    asynchronous H2D copies from the pinned buffers on CuPy's current stream, and
    download(d, out) an asynchronous D2H copy into `out` (a pinned buffer from output_like)
    followed by a wait on that stream: the result is read from the pinned buffer itself, no
    further copy into pageable memory is timed.

    pinned=False (what a first try gets): upload() is cupy.asarray of the caller's pageable
    arrays (CuPy stages them through its pinned pool, primed here so that the staging buffer
    is not allocated inside the clock), download(d, out) is d.get(out=out) into a pageable
    array, one after the other.

    The inputs must not change after construction where pinned (the copies are made once).
    """

    def __init__(self, inputs, pinned: bool, log=None):
        self.pinned = pinned
        cp = harness.cupy()
        if pinned:
            self.host = []
            for a in inputs:
                buffer = harness.pinned_empty(a.shape, a.dtype)
                np.copyto(buffer, a)
                self.host.append(buffer)
            self.device = [cp.empty(a.shape, dtype=a.dtype, order="F") for a in inputs]
        else:
            self.host = list(inputs)
            self.device = []
            harness.prime_pinned_pool(max(a.nbytes for a in inputs), log)

    def output_like(self, a: np.ndarray) -> np.ndarray:
        """A host buffer for a's download: pinned or pageable, as the staging is."""
        if self.pinned:
            return harness.pinned_empty(a.shape, a.dtype)
        return np.empty(a.shape, dtype=a.dtype, order="F")

    def upload(self) -> list:
        """Device arrays holding the inputs (timed: the H2D copies happen here)."""
        cp = harness.cupy()
        if not self.pinned:
            return [cp.asarray(a, order="F") for a in self.host]
        stream = cp.cuda.get_current_stream()
        for h, d in zip(self.host, self.device):
            d.data.copy_from_host_async(h.ctypes.data, h.nbytes, stream)
        return self.device

    def download(self, d, out: np.ndarray) -> np.ndarray:
        """Copy the device array d into the host buffer out and wait for it; returns out."""
        if not self.pinned:
            return d.get(out=out)
        stream = harness.cupy().cuda.get_current_stream()
        d.data.copy_to_host_async(out.ctypes.data, out.nbytes, stream)
        stream.synchronize()
        return out


def factor_with_transfers(call, staging: HostStaging, out: np.ndarray):
    """A CPU-interface baseline, to be timed as a whole: upload the staged host matrix,
    factor it in place by call(d_a) -> (aux, info), download the factors into `out` (from
    staging.output_like) and aux (pivots, tau; small) and info into host memory.
    Returns (out, aux or None, info)."""
    d_a, = staging.upload()
    d_aux, d_info = call(d_a)
    staging.download(d_a, out)
    return out, None if d_aux is None else harness.to_host(d_aux), d_info.get()


# cuSOLVER's enums, as nvmath.bindings.cusolver documents them (PrecType, IRSRefinement); read
# from the binding where it has them, these values otherwise.
PREC_TYPES = {"FP64": ("R_64F", 1203), "FP32": ("R_32F", 1204), "FP16": ("R_16F", 1205),
              "BF16": ("R_16BF", 1206), "TF32": ("R_TF32", 1207)}
IRS_REFINEMENTS = {"GMRES": ("IRS_REFINE_GMRES", 1104),
                   "CLASSICAL": ("IRS_REFINE_CLASSICAL", 1102),
                   "CLASSICAL_GMRES": ("IRS_REFINE_CLASSICAL_GMRES", 1103)}
IRS_FUNCTIONS = ("irs_params_create", "irs_params_destroy", "irs_params_set_solver_precisions",
                 "irs_params_set_refinement_solver", "irs_params_set_max_iters",
                 "irs_params_set_tol", "irs_infos_create", "irs_infos_destroy",
                 "irs_xgesv_buffer_size", "irs_xgesv")


def _enum_value(enum: str, member: str, documented: int) -> int:
    types = harness.optional_import("nvmath.bindings.cusolver")
    value = getattr(getattr(types, enum, None), member, None)
    return documented if value is None else int(value)


def irs_unavailable() -> str | None:
    """Why cusolverDnIRSXgesv cannot be called here (the binding lacks a function), or None."""
    dn = cusolver()
    if dn is None:
        return harness.import_error("nvmath.bindings.cusolverDn")
    missing = [f for f in IRS_FUNCTIONS if not hasattr(dn, f)]
    return f"nvmath.bindings.cusolverDn has no {', '.join(missing)}" if missing else None


class IrsGesv:
    """cusolverDnIRSXgesv with main precision FP64: x := A^-1 b by an LU in `lowest` (FP16,
    BF16, TF32 or FP32), refinement `refinement` (GMRES: cuSOLVER's recommended one), at most
    max_iters iterations, tolerance tol (None: cuSOLVER's default), FP64 fallback on failure
    (cuSOLVER's default). The params structure and workspace size are made once, here, for
    n x nrhs problems; solve() is what is timed. close() frees the params.

    Raises RuntimeError if the binding lacks one of IRS_FUNCTIONS (irs_unavailable says which).
    """

    def __init__(self, lowest: str, n: int, nrhs: int, refinement: str = "GMRES",
                 max_iters: int = 50, tol: float | None = None):
        reason = irs_unavailable()
        if reason is not None:
            raise RuntimeError(reason)
        self.dn = dn = cusolver()
        self.n, self.nrhs = n, nrhs
        self.params = dn.irs_params_create()
        dn.irs_params_set_solver_precisions(
            self.params, _enum_value("PrecType", *PREC_TYPES["FP64"]),
            _enum_value("PrecType", *PREC_TYPES[lowest]))
        dn.irs_params_set_refinement_solver(
            self.params, _enum_value("IRSRefinement", *IRS_REFINEMENTS[refinement]))
        dn.irs_params_set_max_iters(self.params, max_iters)
        if tol is not None:
            dn.irs_params_set_tol(self.params, tol)
        self.lwork = int(dn.irs_xgesv_buffer_size(handle(), self.params, n, nrhs))

    def solve(self, d_a, d_b, d_x, work, info) -> tuple[int, int | None]:
        """x := A^-1 b (d_a may be left overwritten); returns (niters, outer iterations or
        None). niters < 0: refinement failed and cuSOLVER fell back to an FP64 solve. A fresh
        infos structure per call (cuSOLVER's infos describe one call), freed before return."""
        dn = self.dn
        infos = dn.irs_infos_create()
        try:
            niters = int(dn.irs_xgesv(handle(), self.params, infos, self.n, self.nrhs,
                                      d_a.data.ptr, self.n, d_b.data.ptr, self.n, d_x.data.ptr,
                                      self.n, work.data.ptr, self.lwork, info.data.ptr))
            outer = (int(dn.irs_infos_get_outer_niters(infos))
                     if hasattr(dn, "irs_infos_get_outer_niters") else None)
        finally:
            dn.irs_infos_destroy(infos)
        return niters, outer

    def close(self) -> None:
        if self.params is not None:
            self.dn.irs_params_destroy(self.params)
            self.params = None


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
