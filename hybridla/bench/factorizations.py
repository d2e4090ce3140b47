"""What ``hybridla bench`` (perf/bench.py) times: the routines (getrf, geqrf, geqlf, gelqf,
potrf), each with its flop count, test matrix, check and baselines' calls, and the
implementations that time them (hybridla's GPU and CPU interfaces with the library's defaults
and tuned, cuSOLVER on the device and with pinned and pageable transfers, MAGMA through
PyTorch, SciPy), each knowing whether it can run here and planning its timed call for
harness.alternate.
"""
from __future__ import annotations

import argparse
import functools
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

import hybridla

from . import baselines, checks, harness
from .checks import Case
from .flops import gelqf_flops, geqlf_flops, geqrf_flops, getrf_flops, potrf_flops


@dataclass
class Plan:
    """How one implementation is timed on one case, ready for harness.alternate: fn(state,
    last) timed after setup() (untimed), sync around the clock, and finish(raw, notes) turning
    the last repetition's raw result into the routine's factors (see Routine; untimed, it may
    add notes). label fills the implementation's label; notes go to its row."""
    fn: Callable[[Any, bool], Any]
    finish: Callable[[Any, list], tuple]
    setup: Callable[[], Any] = harness.no_setup
    sync: Optional[Callable[[], None]] = None
    label: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


def _as_factors(raw, notes: list) -> tuple:
    return raw


def _device_input(case: Case) -> baselines.DeviceInput:
    """The case's device copy of A (uploaded once, shared by the rows that factor in place)."""
    if case.device_input is None:
        case.device_input = baselines.DeviceInput(case.a)
    return case.device_input


# -- the implementations' plans ----------------------------------------------------------

def plan_cusolver(case: Case, r: Routine) -> Plan:
    """cuSOLVER on the device copy of A, refreshed outside the timed region."""
    def finish(raw, notes):
        a, aux, info = raw
        return r.cusolver.finish((a, None if aux is None else harness.to_host(aux),
                                  harness.to_host(info)), notes)
    return Plan(lambda d_a, last: (d_a, *r.cusolver.call(d_a)), finish,
                _device_input(case).refresh, harness.cupy_sync)


def _plan_with_transfers(case: Case, r: Routine, pinned: bool) -> Plan:
    staging = baselines.HostStaging([case.a], pinned, harness.logger("bench"))
    if not pinned:  # the download goes to the case's reusable host buffer
        return Plan(lambda _, last: baselines.factor_with_transfers(
            r.cusolver.call, staging, case.work_buffer()), r.cusolver.finish,
            sync=harness.cupy_sync)
    # The factors come down into the pinned copy of A they went up from, which gets A back
    # before each run, outside the clock: one pinned copy of A instead of two (at n = 49152
    # two, beside A, the factors and hybridla's, took the 128 GB host past its memory).
    pinned_a = staging.host[0]
    return Plan(lambda _, last: baselines.factor_with_transfers(r.cusolver.call, staging,
                                                                pinned_a),
                r.cusolver.finish, setup=lambda: np.copyto(pinned_a, case.a),
                sync=harness.cupy_sync)


def plan_cusolver_pinned(case: Case, r: Routine) -> Plan:
    """The CPU-interface reference: A copied once into pinned memory (untimed); timed: async
    upload from it, cuSOLVER in place, async download into a pinned buffer, one stream."""
    return _plan_with_transfers(case, r, pinned=True)


def plan_cusolver_pageable(case: Case, r: Routine) -> Plan:
    """What a first try gets: cupy.asarray upload of the pageable A, cuSOLVER, d_a.get(out=)
    into a pageable array, one after the other, all timed."""
    return _plan_with_transfers(case, r, pinned=False)


def _hybridla_call(r: Routine, case: Case, iface: str, backend: str, tuned: bool):
    options = dict(TUNED_OPTIONS) if tuned else {}
    trace_as = f"{iface}-tuned" if tuned else iface

    def fn(a, last):
        return r.call(getattr(hybridla, r.api_fn), a, backend=backend, **options,
                      **case.engine_kwargs(r.name, trace_as, last))
    return fn


def plan_hybridla_gpu(case: Case, r: Routine, tuned: bool = False) -> Plan:
    """hybridla on a CuPy array (the device copy, refreshed outside the timed region; the
    factors stay on the device); the library's defaults unless tuned."""
    return Plan(_hybridla_call(r, case, "gpu", "cuda", tuned), _as_factors,
                _device_input(case).refresh, harness.cupy_sync)


def plan_hybridla_cpu(case: Case, r: Routine, tuned: bool = False) -> Plan:
    """hybridla on the NumPy array: the cuda backend where there is one, else the host's. With
    the library's defaults (overwrite_a=False) it gets the pristine A itself; tuned
    (overwrite_a=True) a fresh copy made outside the timed region."""
    backend = "cuda" if "cuda" in harness.hybridla_backends() else "host"

    def finish(factors, notes):
        if not isinstance(factors[0], np.ndarray):
            notes.append(f"factors returned as {type(factors[0]).__name__}")
        return factors
    return Plan(_hybridla_call(r, case, "cpu", backend, tuned), finish,
                case.host_copy if tuned else (lambda: case.a),
                harness.cupy_sync if backend == "cuda" else None,
                label={"backend": f" ({backend})"})


def plan_magma(case: Case, r: Routine) -> Plan:
    """MAGMA as PyTorch calls it, on a CUDA tensor uploaded outside the timed region; torch's
    warnings about MAGMA or cuSOLVER (its fallback) go to the row's note."""
    torch = harness.optional_import("torch")
    # F-ordered host array -> tensor with strides (1, n): the logical matrix is A itself,
    # already in the column-major layout MAGMA wants.
    t_a = torch.from_numpy(case.a).to("cuda")
    said: set = set()

    def fn(_, last):
        prev = torch.backends.cuda.preferred_linalg_library()
        torch.backends.cuda.preferred_linalg_library("magma")
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                raw = r.torch.call(torch, t_a)
        finally:
            torch.backends.cuda.preferred_linalg_library(prev)
        said.update(str(w.message).splitlines()[0][:100] for w in caught
                    if "magma" in str(w.message).lower() or "cusolver" in str(w.message).lower())
        return raw

    def finish(raw, notes):
        factors = r.torch.finish(raw, notes)
        notes += [f"torch warned: {s}" for s in sorted(said)]
        return factors
    return Plan(fn, finish, sync=harness.torch_sync,
                label={"torch": f" {torch.__version__.split('+')[0]}"})


def plan_scipy(case: Case, r: Routine) -> Plan:
    """SciPy on a fresh host copy (untimed), overwrite_a=True, check_finite=False."""
    import scipy.linalg

    fn = getattr(scipy.linalg, r.scipy_fn)
    call = r.scipy_call or r.call
    return Plan(lambda a, last: call(fn, a, **TUNED_OPTIONS), _as_factors, case.host_copy)


# -- whether each can run here (None: it can) ------------------------------------------------

def probe_cusolver() -> Optional[str]:
    return baselines.unavailable()


def probe_hybridla_gpu() -> Optional[str]:
    if "cuda" not in harness.hybridla_backends():
        return "hybridla's cuda backend is not available"
    if not harness.cupy_has_gpu():
        return "CuPy with a CUDA device is needed for the GPU interface"
    return None


def probe_magma() -> Optional[str]:
    torch = harness.optional_import("torch")
    if torch is None:
        return harness.import_error("torch")
    if not torch.cuda.is_available():
        return "torch.cuda is not available"
    if not getattr(torch.cuda, "has_magma", False):
        return "this PyTorch is built without MAGMA"
    return None


def probe_scipy() -> Optional[str]:
    if harness.optional_import("scipy.linalg") is None:
        return harness.import_error("scipy.linalg")
    return None


# -- the routines ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Call:
    """A baseline's call (timed) and the conversion of its raw result to the routine's
    factors (untimed; it may add notes)."""
    call: Callable
    finish: Callable[[Any, list], tuple]


# The options of the "tuned" rows (and of SciPy's, a baseline given every advantage): the
# library's defaults are check_finite=True, overwrite_a=False, and a row without "tuned" passes
# neither, so that it measures whatever the defaults are.
TUNED_OPTIONS = {"overwrite_a": True, "check_finite": False}


def _lu_call(fn, a, **kw) -> tuple:
    lu, piv = fn(a, **kw)
    return lu, piv


def _cho_call(fn, a, **kw) -> tuple:
    return (fn(a, lower=True, **kw)[0],)


def _householder_call(fn, a, **kw) -> tuple:
    """hybridla.geqrf / geqlf / gelqf: (factors, tau), what LAPACK's routine computes (qr's raw
    mode also builds the triangle, which cuSOLVER's geqrf does not)."""
    return fn(a, **kw)


def _raw_qr_call(fn, a, **kw) -> tuple:
    (f, tau), _ = fn(a, mode="raw", **kw)
    return f, tau


def _checked(factors: tuple, info, meaning: str, notes: list) -> tuple:
    baselines.info_note(info, meaning, notes)
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
    matrix: str                                      # key of matrices.MATRICES
    api_fn: str                                      # hybridla.<api_fn>, scipy's signature
    call: Callable[..., tuple]                       # (fn, a, **options) -> factors
    check: Callable[[Case, tuple], tuple[float, bool]]
    error_text: str                                  # what check computes (table header)
    scipy_fn: Optional[str] = None                   # scipy.linalg.<scipy_fn>
    scipy_call: Optional[Callable[..., tuple]] = None  # its call, where not `call`
    cusolver: Optional[Call] = None                  # call(d_a) -> (aux, info), in place
    torch: Optional[Call] = None                     # call(torch, tensor) -> raw
    baseline: Optional[str] = None                   # baselines time this routine instead


_ESTIMATE = "values marked ~ are random-vector estimates"
_DENSE_BOTH = (f"dense for host results n < {checks.DENSE_CHECK_MAX_HOST + 1} and device results "
               f"n <= {checks.DENSE_CHECK_MAX_DEVICE}")
_DENSE_QR = f"dense (Q formed by LAPACK on the host) for n < {checks.DENSE_CHECK_MAX_HOST + 1}"
_QR_FORM = "||{0}-{1}||_2/(n eps ||{0}||_2)"      # Gram-product estimates

_ROUTINE_LIST = [
    Routine(
        "getrf", getrf_flops, "general", "lu_factor", _lu_call, checks.getrf_error,
        f"||PA-LU||_1/(n ||A||_1 eps): {_DENSE_BOTH}; {_ESTIMATE} "
        f"||PAx-L(Ux)||_1/(n ||A||_1 ||x||_1 eps).",
        scipy_fn="lu_factor",
        cusolver=Call(baselines.getrf,
                      lambda raw, notes: (raw[0], baselines.pivots(raw[1], raw[2], notes))),
        torch=Call(lambda torch, t: torch.linalg.lu_factor(t),
                   lambda raw, notes: (harness.as_checkable(raw[0]),
                                       baselines.pivots(raw[1], None, notes)))),
    Routine(
        "geqrf", geqrf_flops, "general", "geqrf", _householder_call,
        functools.partial(checks.qr_error, "qr"),
        f"||A-QR||_1/(n ||A||_1 eps): {_DENSE_QR}; {_ESTIMATE} from R^H R = A^H A: "
        f"{_QR_FORM.format('A^H(Ax)', 'R^H(Rx)')}.",
        scipy_fn="qr", scipy_call=_raw_qr_call,
        cusolver=Call(baselines.geqrf,
                      lambda raw, notes: _checked(raw[:2], raw[2], "unexpected", notes)),
        torch=Call(lambda torch, t: torch.geqrf(t),
                   lambda raw, notes: (harness.as_checkable(raw[0]), raw[1]))),
    Routine(
        "geqlf", geqlf_flops, "general", "geqlf", _householder_call,
        functools.partial(checks.qr_error, "ql"),
        f"||A-QL||_1/(n ||A||_1 eps): {_DENSE_QR} (as the QR of the reversed matrix); "
        f"{_ESTIMATE} from L^H L = A^H A: {_QR_FORM.format('A^H(Ax)', 'L^H(Lx)')}.",
        baseline="geqrf"),
    Routine(
        "gelqf", gelqf_flops, "general", "gelqf", _householder_call,
        functools.partial(checks.qr_error, "lq"),
        f"||A-LQ||_1/(n ||A||_1 eps): {_DENSE_QR} (as the QR of A^H); {_ESTIMATE} from "
        f"L L^H = A A^H: {_QR_FORM.format('A(A^H x)', 'L(L^H x)')}.",
        baseline="geqrf"),
    Routine(
        "potrf", lambda m, n, dtype: potrf_flops(n, dtype), "spd", "cho_factor", _cho_call,
        checks.potrf_error,
        f"||A-LL^H||_1/(n ||A||_1 eps): {_DENSE_BOTH}; {_ESTIMATE} "
        f"||Ax-L(L^H x)||_1/(n ||A||_1 ||x||_1 eps).",
        scipy_fn="cho_factor",
        cusolver=Call(baselines.potrf,
                      lambda raw, notes: _checked(raw[:1], raw[2], _NOT_PD, notes)),
        torch=Call(lambda torch, t: torch.linalg.cholesky_ex(t),
                   lambda raw, notes: _checked((harness.as_checkable(raw[0]),), raw[1], _NOT_PD,
                                               notes))),
]
# Table order = run order at each size: routines on the same matrix kind are neighbours,
# and geqrf comes before geqlf/gelqf (their "vs our geqrf" needs its times).
ROUTINES: dict[str, Routine] = {r.name: r for r in _ROUTINE_LIST}


# -- the implementations ---------------------------------------------------------------------

def _supports_hybridla(r: Routine) -> Optional[str]:
    if getattr(hybridla, r.api_fn, None) is None:
        return f"skipped: hybridla.{r.api_fn} not available"
    return None


def _needs(attr: str, what: str):
    def supports(r: Routine) -> Optional[str]:
        return None if getattr(r, attr) is not None else f"skipped: {what} has no {r.name}"
    return supports


@dataclass(frozen=True)
class Impl:
    # Label template: {sub} is " geqrf" where a baseline stands in for a routine it lacks,
    # {what} SciPy's function (or the stand-in's name); a run fills the other fields.
    label: str
    plan: Callable[[Case, Routine], Plan]
    probe: Callable[[], Optional[str]]                 # this machine: else left out (logged)
    groups: tuple                                      # the --interfaces/--baselines words
    max_n: Callable[[argparse.Namespace], Optional[int]] = lambda opts: None
    hybridla: bool = False                             # times the routine itself
    # this routine: a reason gives a "skipped" row
    supports: Callable[[Routine], Optional[str]] = lambda r: None
    needs_gpu: bool = False                            # runs only where CuPy sees a GPU

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


_TUNED = " tuned (overwrite_a=True, check_finite=False)"
# Table and round order: hybridla's rows (each interface's first row, with the library's
# defaults, is its headline), then the baselines; the CPU interface's ratios are against
# cuSOLVER with pinned transfers (the reference), the pageable row is what a first try gets.
IMPLEMENTATIONS: dict[str, Impl] = {
    "hybridla-gpu": Impl("hybridla GPU iface", plan_hybridla_gpu, probe_hybridla_gpu,
                         ("gpu",), hybridla=True, supports=_supports_hybridla, needs_gpu=True),
    "hybridla-gpu-tuned": Impl("hybridla GPU iface" + _TUNED,
                               functools.partial(plan_hybridla_gpu, tuned=True),
                               probe_hybridla_gpu, ("gpu-tuned",), hybridla=True,
                               supports=_supports_hybridla, needs_gpu=True),
    "hybridla-cpu": Impl("hybridla CPU iface{backend}", plan_hybridla_cpu, lambda: None,
                         ("cpu",), hybridla=True, supports=_supports_hybridla),
    "hybridla-cpu-tuned": Impl("hybridla CPU iface{backend}" + _TUNED,
                               functools.partial(plan_hybridla_cpu, tuned=True), lambda: None,
                               ("cpu-tuned",), hybridla=True, supports=_supports_hybridla),
    "cusolver": Impl("cuSOLVER{sub} (device)", plan_cusolver, probe_cusolver,
                     ("cusolver", "cusolver-device"), supports=_needs("cusolver", "cuSOLVER"),
                     needs_gpu=True),
    "cusolver-pinned": Impl("cuSOLVER{sub}+transfers pinned (reference)", plan_cusolver_pinned,
                            probe_cusolver, ("cusolver", "cusolver-pinned"),
                            supports=_needs("cusolver", "cuSOLVER"), needs_gpu=True),
    "cusolver-pageable": Impl("cuSOLVER{sub}+transfers pageable (what a first try gets)",
                              plan_cusolver_pageable, probe_cusolver,
                              ("cusolver", "cusolver-pageable"),
                              supports=_needs("cusolver", "cuSOLVER"), needs_gpu=True),
    "magma": Impl("MAGMA{sub} (torch{torch})", plan_magma, probe_magma, ("magma",),
                  supports=_needs("torch", "torch"), needs_gpu=True),
    "scipy": Impl("SciPy {what} (host)", plan_scipy, probe_scipy, ("scipy",),
                  max_n=lambda opts: opts.scipy_max, supports=_needs("scipy_fn", "SciPy")),
}
# The rows the ratio columns divide by (the names above), and the headline row per interface.
DEVICE_REFERENCE = "cusolver"
HOST_REFERENCE = "cusolver-pinned"
HEADLINES = {"hybridla-gpu": DEVICE_REFERENCE, "hybridla-cpu": HOST_REFERENCE}


def select_implementations(opts: argparse.Namespace,
                           log: Callable[[str], None]) -> list[tuple[str, Impl]]:
    """The implementations asked for (--interfaces, --baselines) that can run here, in run
    order. Without a GPU those that need one are left out with one line saying so."""
    wanted = set(opts.interfaces) | set(opts.baselines)
    no_gpu = harness.no_gpu_reason()
    chosen, without_gpu = [], []
    for name, impl in IMPLEMENTATIONS.items():
        if not wanted.intersection(impl.groups):
            continue
        if impl.needs_gpu and no_gpu:
            without_gpu.append(impl.label.format(sub="", torch="", what="", backend=""))
            continue
        reason = impl.probe()
        if reason:
            log(f"skipping {name}: {reason}")
            continue
        chosen.append((name, impl))
    if without_gpu:
        log(f"no CUDA device with CuPy here ({no_gpu}): left out {', '.join(without_gpu)}; "
            f"the cuSOLVER baseline needs the cuda backend (a GPU, pip install "
            f"\"hybridla[cuda]\" and CuPy)")
    return chosen
