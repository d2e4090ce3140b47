#!/usr/bin/env python3
"""Benchmark of hybridla's mixed-precision iterative-refinement solvers (hybridla.solve_mixed)
against cuSOLVER's IRS solvers (<xy>_gesv), cuSOLVER's FP64 getrf/getrs and potrf/potrs, and
hybridla's own FP64 solve: one process, the same matrices, one table.

Usage (from the repository root):

    python3 perf/mixed.py [--sizes 8192,16384,32768] [--seeds 0,1] \
        [--matrices randn,kappa=1e6,spd-kappa=1e4,spd-kappa=1e6] [--assume gen,pos] \
        [--interfaces gpu,cpu] [--baselines cusolver-getrf,irs-fp16,...,hybridla-fp64] \
        [--lowest half,tf32|none] [--refinement classical-gmres] [--repeat 5] \
        [--irs-max-iters 50] [--irs-tol T] [--nrhs 1] [--nb N] [--backend cuda|host] [--out FILE.md]

    python3 perf/mixed.py --dry          # host backend, tiny sizes, no CUDA module imported

Test matrices (--matrices, comma list; float64, F order, fixed seeds; built in double precision
on the GPU with CuPy where one is present, else on the host with NumPy; the two draw different
numbers); every size is run with every seed of --seeds:

  randn            standard normal entries
  kappa=K          A = U diag(s) (P U Q)^T, s_i = K^(-i/(n-1)) (geometric from 1 to 1/K, so
                   ||A||_2 = 1 and cond_2(A) = K), U Haar orthogonal (QR of a Gaussian with the
                   signs of R's diagonal moved into Q), P, Q random row and column permutations;
                   ONE QR per size and seed serves every kappa and spd-kappa matrix
  spd-kappa=K      A = U diag(s) U^T with the same U and s: symmetric positive definite, cond K
  spd              A = G G^T / n + I, G standard normal (as perf/bench.py's potrf matrix)

Right-hand side: b = A x_true, x_true standard normal (n, or n x --nrhs), fixed seed.

Rows (--interfaces / --baselines words in brackets), in table and round order:

  hybridla solve_mixed defaults   [gpu, cpu] THE HEADLINE per interface and assume_a:
                                  hybridla.solve_mixed(A, b, assume_a=..., backend=...) and
                                  nothing else: the library's defaults (lowest, refinement,
                                  check_finite=True, no overwrite), the same for the Cholesky
                                  (pos) rows: no settings chosen for a matrix
  hybridla solve FP64             [hybridla-fp64] hybridla.solve, overwrite, check_finite=False
                                  (through the CPU interface only where the GPU's is not run)
  hybridla solve_mixed ... tuned  each --lowest x --refinement combination, check_finite=False,
                                  overwrite_a/b on device copies (--lowest none: no such rows)
  cuSOLVER ...+transfers pinned (reference)
                                  [cusolver-pinned] CPU interface's reference: A and b copied
                                  once into pinned buffers outside the clock; timed: async
                                  uploads, FP64 dgetrf+dgetrs (gen) / dpotrf+dpotrs (pos), async
                                  download of x into a pinned buffer
  cuSOLVER ...+transfers pageable (what a first try gets)
                                  [cusolver-pageable] cupy.asarray of the pageable arrays, the
                                  same solve, x.get(out=) into a pageable array
  cuSOLVER dgetrf+dgetrs (device) [cusolver-getrf] FP64 LU and solve: the FP64 reference (gen)
  cuSOLVER dpotrf+dpotrs (device) [cusolver-potrf] FP64 Cholesky and solve (pos, SPD only)
  cuSOLVER IRSXgesv GMRES FP64<-X [irs-fp16, irs-bf16, irs-tf32, irs-fp32] cuSOLVER's expert
                                  IRS API (cusolverDnIRSXgesv through nvmath.bindings.cusolverDn,
                                  baselines.IrsGesv): main precision FP64, lowest X, GMRES
                                  refinement, --irs-max-iters, --irs-tol, FP64 fallback;
                                  iterations = niters (outer), < 0: refinement failed and it
                                  fell back. The fastest one that converged on a matrix is the
                                  IRS reference; a binding without the IRS functions makes these
                                  rows say "n/a (reason)"
  cuSOLVER <xy>_gesv classical    [cusolver-dd, -ds, -dx, -dh, -db] the simple API (cuSOLVER's
                                  classical refinement; it hit 50 iterations and fell back in
                                  every earlier run): on request only
  SciPy solve (host)              [scipy] on request only

Inputs: device rows get fresh copies of A and b made outside the timed region (one scratch
pair per matrix, refreshed before each call); CPU-interface rows of solve_mixed get the pristine
NumPy arrays; the host FP64 and SciPy rows a host copy.  cuSOLVER's workspaces, pivots, infos and
IRS params are made once per row outside the timed region.

Statistics (harness.alternate, shared with perf/bench.py): per matrix, the rows run
ALTERNATELY, round-robin in table order, --repeat rounds (5 by default; one untimed round
wherever a row has not run yet); each row gives the median and the spread (fastest-slowest);
the iterations and time split come from the median repetition.

Columns: iterations, fell back, convert/factor/refine (solve_mixed's info.seconds), backward
error ||b - A x||_inf / (||A||_inf ||x||_inf) in float64 outside the timed region, "passes" =
the stopping test ||r||_inf < sqrt(n) ||x||_inf ||A||_inf eps, forward error, and ratios =
baseline median / this median (> 1: this is faster; "(parity)" where the two spreads overlap):
"vs cuSOLVER FP64" (getrf+getrs for gen rows, potrf+potrs for pos rows; for CPU-interface rows
their pinned+transfers rows), "vs best converged cuSOLVER IRSXgesv GMRES" (gen rows of the GPU
interface), "vs our FP64" (hybridla.solve, same interface and assume_a).  After the table, one
summary line per headline row and reference, with date, device, commit and baseline.

Memory: float64 A at n = 32768 is 8 GiB: the pristine A, one scratch copy and the rows' own
buffers live on the device at once.  Time: see perf/README.md for the commands and estimates.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any, Callable, Optional

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.append(_ROOT)   # the working tree's hybridla when it is not installed

import hybridla  # noqa: E402
# The shared harness (lazy CUDA imports, clocks, device memory, tables), the cuSOLVER baselines,
# the test matrices and the solves' checks live in the package (hybridla/bench/).
from hybridla.bench import baselines, harness, report  # noqa: E402
from hybridla.bench.checks import (  # noqa: E402,F401
    EPS, backward_error, forward_error, inf_norm, passes_stopping_test)
from hybridla.bench.matrices import (  # noqa: E402,F401
    MatrixFactory, MatrixSpec, download, general_with_singular_values, haar_orthogonal, normal,
    parse_matrix, randn_matrix, singular_values, spd_gram, spd_with_eigenvalues)
from hybridla.bench.runner import positive_int  # noqa: E402


class _LastRun:
    """The optional modules (CuPy, nvmath-python, PyTorch, ...) that the last main() asked the
    harness for: name -> module, or None where the import failed. A --dry run asks for none
    (tests/test_mixed_bench.py reads _bench._MODULES)."""
    _MODULES: dict = {}


_bench = _LastRun()

LOWEST = ("half-x3", "half", "bfloat16", "tf32", "single")
REFINEMENTS = ("classical-gmres", "gmres", "classical", "none")
ASSUME = ("gen", "pos")
INTERFACES = ("gpu", "cpu")
# cuSOLVER's simple-API IRS solvers <xy>_gesv (classical refinement; not in the default rows:
# they hit 50 iterations and fell back in every run) and the expert API's lowest precisions.
SIMPLE_IRS = baselines.IRS_PRECISIONS
IRS_LOWEST = ("FP16", "BF16", "TF32", "FP32")
BASELINES = (("cusolver-getrf", "cusolver-potrf")
             + tuple(f"irs-{lo.lower()}" for lo in IRS_LOWEST)
             + ("cusolver-pinned", "cusolver-pageable", "hybridla-fp64")
             + tuple(f"cusolver-{p}" for p in SIMPLE_IRS) + ("scipy",))
DEFAULT_BASELINES = tuple(b for b in BASELINES
                          if b != "scipy" and not (b.startswith("cusolver-")
                                                   and b[len("cusolver-"):] in SIMPLE_IRS))
DEFAULT_COMBOS = (("half-x3", "classical-gmres"), ("half", "classical-gmres"),
                  ("tf32", "classical-gmres"))
DEFAULT_MATRICES = "randn,kappa=1e6,spd-kappa=1e4,spd-kappa=1e6"
DEFAULT_SIZES = (8192, 16384, 32768)
DEFAULT_SEEDS = (0, 1)
DEFAULT_REPEAT = 5
DRY_SIZES = (64, 100)

ITERATION_CODES = {-1: "stopped early", -2: "overflow on narrowing",
                   -3: "low-precision factorization failed"}


log = harness.logger("mixed")


# ----------------------------------------------------------------------------------------
# One matrix at one size
# ----------------------------------------------------------------------------------------

class Problem:
    """The pristine A, x_true and b = A x_true where the matrices are built (device or host),
    their host copies for the CPU interface, and reusable scratch copies."""

    def __init__(self, spec: MatrixSpec, n: int, nrhs: int, seed: int, factory: MatrixFactory):
        xp = self.xp = factory.xp
        self.spec, self.n, self.nrhs, self.seed = spec, n, nrhs, seed
        self.a = factory.make(spec)
        shape = (n,) if nrhs == 1 else (n, nrhs)
        self.x_true = xp.asfortranarray(normal(shape, xp, seed, n, 5))
        self.b = xp.asfortranarray(self.a @ self.x_true)
        self.anorm = inf_norm(self.a, xp)
        self._host: Optional[tuple] = None
        self._host_work: Optional[np.ndarray] = None
        self._scratch: Optional[tuple] = None

    @property
    def on_device(self) -> bool:
        return self.xp is not np

    @property
    def nbytes(self) -> int:
        return self.n * self.n * 8

    def host_inputs(self) -> tuple:
        """(A, b) in host memory, pristine (do not overwrite)."""
        if self._host is None:
            self._host = ((self.a, self.b) if not self.on_device else
                          (download(self.a), download(self.b)))
        return self._host

    def host_copies(self) -> tuple:
        """Fresh host copies of (A, b); A in one reusable buffer (untimed setup)."""
        a, b = self.host_inputs()
        if self._host_work is None:
            self._host_work = np.empty_like(a, order="F")
        np.copyto(self._host_work, a)
        return self._host_work, b.copy(order="F")

    def device_copies(self) -> tuple:
        """Fresh device copies of (A, b) in scratch buffers allocated once (untimed setup)."""
        if self._scratch is None:
            self._scratch = (self.xp.empty_like(self.a, order="F"),
                             self.xp.empty_like(self.b, order="F"))
        a, b = self._scratch
        a[...] = self.a
        b[...] = self.b
        return a, b

    def check(self, x) -> tuple[float, float]:
        """(backward error, forward error) of x, computed where A lives."""
        x = self.xp.asarray(x) if self.on_device else harness.to_host(x)
        if x.shape != self.b.shape:
            x = x.reshape(self.b.shape)
        return (backward_error(self.a, x, self.b, self.anorm, self.xp),
                forward_error(x, self.x_true, self.xp))

    def close(self) -> None:
        self.a = self.b = self.x_true = None
        self._host = self._host_work = self._scratch = None


# ----------------------------------------------------------------------------------------
# Plans: what each row times (harness.alternate runs them round-robin)
# ----------------------------------------------------------------------------------------

@dataclass
class Outcome:
    """What a row reports besides its times: from the meta of its median repetition."""
    iterations: str = "–"
    fell_back: str = "–"
    split: tuple = (None, None, None)        # convert, factor, refine (s)
    notes: list = field(default_factory=list)
    converged: Optional[bool] = None         # IRS rows: niters >= 0


@dataclass
class Plan:
    """One row's timed call: fn(state) -> (x, meta) after setup() (untimed); describe(meta of
    the median repetition) -> Outcome; close() frees what the plan allocated."""
    fn: Callable[[Any], tuple]
    setup: Callable[[], Any]
    describe: Callable[[Any], Outcome] = lambda meta: Outcome()
    close: Callable[[], None] = lambda: None


@dataclass
class Env:
    """What this run may use: CuPy with a GPU (or None), hybridla's backend, the options."""
    cp: Any
    backend: str
    opts: argparse.Namespace

    @property
    def sync(self) -> Optional[Callable[[], None]]:
        return harness.cupy_sync if self.cp is not None else None

    def engine(self) -> dict:
        return {"nb": self.opts.nb} if self.opts.nb is not None else {}


# ----------------------------------------------------------------------------------------
# cuSOLVER (hybridla/bench/baselines.py: nvmath.bindings.cusolverDn)
# ----------------------------------------------------------------------------------------

def _niters_outcome(niters: int, outer: Optional[int], notes: list) -> Outcome:
    """An IRS row's cells: niters < 0 means refinement failed and cuSOLVER fell back to FP64."""
    if niters < 0:
        notes.append(f"niters={niters}: refinement failed, FP64 fallback")
    cells = str(niters) if outer is None or outer == niters else f"{niters} ({outer} outer)"
    return Outcome(cells, "yes" if niters < 0 else "no", notes=notes, converged=niters >= 0)


def plan_cusolver_irs(prefix: str, prob: Problem, env: Env) -> Plan:
    """cusolverDn<XY>gesv (the simple API, cuSOLVER's default refinement) on fresh device
    copies of A and b; its workspace, pivots and info allocated once, outside the clock."""
    cp = env.cp
    d_a, d_b = prob.device_copies()
    d_x = cp.empty_like(d_b, order="F")
    d_ipiv = cp.empty(prob.n, dtype=cp.int32)
    d_info = cp.zeros(1, dtype=cp.int32)
    lwork = baselines.irs_workspace(prefix, d_a, d_b, d_x, d_ipiv)
    d_work = cp.empty(max(1, lwork), dtype=cp.uint8)

    def fn(state):
        a, b = state
        return d_x, baselines.irs_gesv(prefix, a, b, d_x, d_ipiv, d_work, lwork, d_info)

    def describe(niters):
        notes: list = [f"workspace {lwork / 2**30:.2f} GiB"]
        baselines.info_note(d_info, "U({i},{i}) = 0", notes)
        return _niters_outcome(niters, None, notes)
    return Plan(fn, prob.device_copies, describe)


def plan_cusolver_irs_expert(lowest: str, prob: Problem, env: Env) -> Plan:
    """cusolverDnIRSXgesv (the expert API): main precision FP64, LU in `lowest`, GMRES
    refinement, at most --irs-max-iters iterations, tolerance --irs-tol (cuSOLVER's default if
    not given), FP64 fallback; on fresh device copies of A and b; params and workspace made
    once, outside the clock. Raises (the row then says why) if the binding lacks a function."""
    cp = env.cp
    solver = baselines.IrsGesv(lowest, prob.n, prob.nrhs, "GMRES", env.opts.irs_max_iters,
                               env.opts.irs_tol)
    d_x = cp.empty(prob.b.shape, dtype=np.float64, order="F")
    d_info = cp.zeros(1, dtype=cp.int32)
    d_work = cp.empty(max(1, solver.lwork), dtype=cp.uint8)

    def fn(state):
        a, b = state
        return d_x, solver.solve(a, b, d_x, d_work, d_info)

    def describe(meta):
        notes: list = [f"workspace {solver.lwork / 2**30:.2f} GiB"]
        baselines.info_note(d_info, "U({i},{i}) = 0", notes)
        return _niters_outcome(*meta, notes)
    return Plan(fn, prob.device_copies, describe, solver.close)


FP64_SOLVERS = {
    # assume_a -> (factor, solve, what info > 0 of the factorization means)
    "gen": (lambda a, work, ipiv, info: baselines.getrf(a, work=work, ipiv=ipiv, info=info),
            lambda a, ipiv, b, info: baselines.getrs(a, ipiv, b, info), "U({i},{i}) = 0"),
    "pos": (lambda a, work, ipiv, info: baselines.potrf(a, work=work, info=info),
            lambda a, ipiv, b, info: baselines.potrs(a, b, info),
            "the leading minor of order {i} is not positive definite"),
}
FP64_NAMES = {"gen": "dgetrf+dgetrs", "pos": "dpotrf+dpotrs lower"}


def _fp64_solver(assume: str, prob: Problem, env: Env):
    """(solve(a, b) -> b overwritten by x, describe) for cuSOLVER's FP64 factor + solve; the
    workspace, pivots and infos allocated once, outside the clock."""
    cp = env.cp
    factor, solve, meaning = FP64_SOLVERS[assume]
    d_a, _ = prob.device_copies()             # its shape and dtype, for the workspace query
    d_work = (baselines.getrf_workspace if assume == "gen" else baselines.potrf_workspace)(d_a)
    d_ipiv = cp.empty(prob.n, dtype=cp.int32)
    d_info = cp.zeros(2, dtype=cp.int32)

    def run(a, b):
        factor(a, d_work, d_ipiv, d_info[:1])
        solve(a, d_ipiv, b, d_info[1:])
        return b

    def describe(meta):
        notes: list = []
        baselines.info_note(d_info[:1], meaning, notes)
        baselines.info_note(d_info[1:], "solve: unexpected", notes)
        return Outcome(notes=notes)
    return run, describe


def plan_cusolver_fp64(assume: str, prob: Problem, env: Env) -> Plan:
    """dgetrf + dgetrs (gen) or dpotrf + dpotrs lower (pos) on fresh device copies, b
    overwritten by x."""
    run, describe = _fp64_solver(assume, prob, env)
    return Plan(lambda state: (run(*state), None), prob.device_copies, describe)


def plan_cusolver_fp64_transfers(assume: str, pinned: bool, prob: Problem, env: Env) -> Plan:
    """The CPU interface's baselines: upload A and b, the FP64 cuSOLVER solve of assume, and
    download x, all timed. pinned (the reference): A and b copied once into pinned buffers
    outside the clock, async copies on one stream, x read from a pinned buffer; else (what a
    first try gets) cupy.asarray of the pageable arrays and x.get(out=) into a pageable one."""
    run, describe = _fp64_solver(assume, prob, env)
    staging = baselines.HostStaging(prob.host_inputs(), pinned, log)
    x_host = staging.output_like(prob.host_inputs()[1])

    def fn(_):
        d_a, d_b = staging.upload()
        return staging.download(run(d_a, d_b), x_host), None
    return Plan(fn, harness.no_setup, describe)


# ----------------------------------------------------------------------------------------
# hybridla and SciPy
# ----------------------------------------------------------------------------------------

def _assume_kwargs(assume: str) -> dict:
    return {"assume_a": assume, "lower": True} if assume == "pos" else {"assume_a": assume}


def _kind_note(x, iface: str) -> list:
    on_host = isinstance(x, np.ndarray)
    if (iface == "cpu") != on_host:
        return [f"x returned as {type(x).__module__}.{type(x).__name__}"]
    return []


def _backend(iface: str, env: Env) -> str:
    return "cuda" if iface == "gpu" else env.backend


def plan_hybridla_fp64(assume: str, iface: str, prob: Problem, env: Env) -> Plan:
    """hybridla.solve, overwrite_a=overwrite_b=True, check_finite=False, on fresh copies."""
    kw = dict(check_finite=False, backend=_backend(iface, env), **_assume_kwargs(assume),
              **env.engine())
    # The host copy: hybridla.solve's CPU interface factors into host memory, in place with
    # overwrite_a=True (else it would copy A inside the timed region).
    setup = prob.device_copies if iface == "gpu" else prob.host_copies

    def fn(state):
        a, b = state
        x = hybridla.solve(a, b, overwrite_a=True, overwrite_b=True, **kw)
        return x, _kind_note(x, iface)
    return Plan(fn, setup, lambda notes: Outcome(notes=list(notes or [])))


def _seconds(info, key: str) -> Optional[float]:
    seconds = getattr(info, "seconds", None) or {}
    value = seconds.get(key) if isinstance(seconds, dict) else None
    return None if value is None else float(value)


def _mixed_outcome(info, asked: dict, kind_note: list) -> Outcome:
    """A solve_mixed row's cells from its info (iterations, fall-back, time split), with
    notes where the info says something the row did not ask for."""
    iterations = getattr(info, "iterations", None)
    inner = getattr(info, "inner_iterations", None)
    fell_back = getattr(info, "fell_back", None)
    notes = list(kind_note)
    cells = "n/a" if iterations is None else str(iterations)
    if inner:
        cells += f" ({inner} inner)"
    if iterations is not None and iterations < 0:
        notes.append(f"iterations={iterations}: "
                     + ITERATION_CODES.get(iterations, "not converged"))
    fallback = _seconds(info, "fallback")
    if fallback is not None:
        notes.append(f"fallback {fallback:.3g} s")
    for name, value in asked.items():
        used = getattr(info, name, value)
        if used != value:
            notes.append(f"info.{name}={used}")
    return Outcome(cells, "n/a" if fell_back is None else ("yes" if fell_back else "no"),
                   tuple(_seconds(info, k) for k in ("convert", "factor", "refine")), notes)


def plan_hybridla_mixed(combo: Optional[tuple], assume: str, iface: str, prob: Problem,
                        env: Env) -> Plan:
    """hybridla.solve_mixed. combo None: the library's DEFAULTS (only assume_a and the backend
    are passed: no lowest, refinement, lower, nb, overwrite or check_finite), the headline.
    combo (lowest, refinement): those, check_finite=False, --nb, and on device arrays
    overwrite_a=overwrite_b=True on fresh copies. NumPy arrays are the pristine ones, not
    overwritten (the library uploads them; nothing to copy)."""
    if combo is None:
        kw: dict = dict(assume_a=assume, backend=_backend(iface, env))
        overwrite = False
        asked: dict = {}
    else:
        lowest, refinement = combo
        asked = dict(lowest=lowest, refinement=refinement)
        kw = dict(check_finite=False, backend=_backend(iface, env), **asked,
                  **_assume_kwargs(assume), **env.engine())
        overwrite = iface == "gpu"
        kw.update(overwrite_a=overwrite, overwrite_b=overwrite)
    setup = prob.device_copies if iface == "gpu" else prob.host_inputs

    def fn(state):
        a, b = state
        x, info = hybridla.solve_mixed(a, b, **kw)
        return x, (info, _kind_note(x, iface))
    return Plan(fn, setup, lambda meta: _mixed_outcome(meta[0], asked, meta[1]))


def plan_scipy(assume: str, prob: Problem, env: Env) -> Plan:
    import scipy.linalg
    kw = _assume_kwargs(assume)

    def fn(state):
        a, b = state
        return scipy.linalg.solve(a, b, overwrite_a=True, overwrite_b=True,
                                  check_finite=False, **kw), None
    return Plan(fn, prob.host_copies)


# ----------------------------------------------------------------------------------------
# The implementations
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Impl:
    key: str                       # warm-up, ratios and the alternation are keyed by it
    label: str
    plan: Callable[[Problem, Env], Plan]
    iface: str = "gpu"             # where the ratios' baselines come from: "gpu" or "cpu"
    assume: str = "gen"            # "pos": SPD matrices only
    mixed: bool = False            # a hybridla.solve_mixed row
    headline: bool = False         # its interface's and assume_a's headline (defaults) row
    irs: bool = False              # a cuSOLVER IRSXgesv row (candidates for the reference)
    skipped: Optional[str] = None  # a reason: the row says so, nothing runs

    def applies(self, spec: MatrixSpec) -> bool:
        return self.assume != "pos" or spec.spd


def combinations(opts: argparse.Namespace) -> list[tuple[str, str]]:
    """The tuned solve_mixed rows' (lowest, refinement); --lowest none: no tuned rows."""
    if opts.lowest == []:
        return []
    if opts.lowest is None and opts.refinement is None:
        return list(DEFAULT_COMBOS)
    lowest = opts.lowest or ["half-x3", "half", "tf32"]
    refinement = opts.refinement or ["classical-gmres"]
    return [(lo, r) for r in refinement for lo in lowest]


def _cusolver_reason(env: Env) -> Optional[str]:
    if env.cp is None:
        return "no CuPy with a CUDA device" + (" (--dry)" if env.opts.dry else "")
    if baselines.cusolver() is None:
        return harness.import_error("nvmath.bindings.cusolverDn")
    return None


def fp64_reference_key(iface: str, assume: str) -> str:
    """The row the "vs cuSOLVER FP64" column divides by: cuSOLVER's FP64 factor+solve of the
    same assume_a, on the device for the GPU interface, with pinned transfers for the CPU's."""
    return f"cusolver-fp64-{assume}" if iface == "gpu" else f"cusolver-pinned-{assume}"


def select_implementations(env: Env) -> list[Impl]:
    """The rows of one matrix, in table and round order: hybridla's (each interface's first
    one per assume_a, with the library's defaults, is its headline), then the baselines."""
    opts = env.opts
    wanted, ifaces = set(opts.baselines), set(opts.interfaces)
    assumes = [a for a in ASSUME if a in opts.assume]
    gpu_reason = _cusolver_reason(env)
    if gpu_reason is None and env.backend != "cuda":
        gpu_reason = "hybridla's cuda backend is not used (--backend host)"
    hybrid: list[Impl] = []
    base: list[Impl] = []

    def add_baseline(impl: Impl) -> None:
        reason = _cusolver_reason(env)
        if reason:
            log(f"leaving out {impl.label}: {reason}")
        else:
            base.append(impl)

    has_mixed = getattr(hybridla, "solve_mixed", None) is not None
    no_mixed = None if has_mixed else "skipped: hybridla.solve_mixed not available"
    combos = combinations(opts)
    for iface in INTERFACES:
        if iface not in ifaces:
            continue
        if iface == "gpu" and gpu_reason:
            log(f"leaving out the GPU interface: {gpu_reason}")
            continue
        where = "GPU iface" if iface == "gpu" else f"CPU iface ({env.backend})"
        for assume in assumes:
            hybrid.append(Impl(f"mixed-{iface}-{assume}-defaults",
                               f"hybridla solve_mixed defaults {assume} {where}",
                               partial(plan_hybridla_mixed, None, assume, iface), iface=iface,
                               assume=assume, mixed=True, headline=True, skipped=no_mixed))
        # FP64 reference: on the device array; through the CPU interface only without a GPU
        fp64_here = iface == "gpu" or ("gpu" not in ifaces or gpu_reason is not None)
        if "hybridla-fp64" in wanted and fp64_here:
            for assume in assumes:
                hybrid.append(Impl(f"fp64-{iface}-{assume}",
                                   f"hybridla solve FP64 {assume} {where}",
                                   partial(plan_hybridla_fp64, assume, iface), iface=iface,
                                   assume=assume))
        for assume in assumes:
            for lowest, refinement in combos:
                hybrid.append(Impl(
                    f"mixed-{iface}-{assume}-{lowest}-{refinement}",
                    f"hybridla solve_mixed {lowest} {refinement} {assume} {where} tuned",
                    partial(plan_hybridla_mixed, (lowest, refinement), assume, iface),
                    iface=iface, assume=assume, mixed=True, skipped=no_mixed))
        if iface == "cpu":
            for word, pinned, what in (("cusolver-pinned", True, "pinned (reference)"),
                                       ("cusolver-pageable", False,
                                        "pageable (what a first try gets)")):
                if word not in wanted:
                    continue
                for assume in assumes:
                    add_baseline(Impl(f"{word}-{assume}",
                                      f"cuSOLVER {FP64_NAMES[assume]}+transfers {what}",
                                      partial(plan_cusolver_fp64_transfers, assume, pinned),
                                      iface="cpu", assume=assume))
    for assume, word in (("gen", "cusolver-getrf"), ("pos", "cusolver-potrf")):
        if word in wanted and assume in assumes:
            add_baseline(Impl(f"cusolver-fp64-{assume}",
                              f"cuSOLVER {FP64_NAMES[assume]} (device)",
                              partial(plan_cusolver_fp64, assume), assume=assume))
    irs_reason = irs_missing(env)
    for lowest in IRS_LOWEST:
        if f"irs-{lowest.lower()}" in wanted:
            add_baseline(Impl(f"irs-{lowest.lower()}",
                              f"cuSOLVER IRSXgesv GMRES FP64<-{lowest} (device)",
                              partial(plan_cusolver_irs_expert, lowest), irs=True,
                              skipped=None if irs_reason is None else f"n/a ({irs_reason})"))
    cusolverDn = harness.loaded("nvmath.bindings.cusolverDn")
    for prefix, precision in SIMPLE_IRS.items():
        if f"cusolver-{prefix}" not in wanted:
            continue
        missing = cusolverDn is not None and not hasattr(cusolverDn, f"{prefix}_gesv")
        add_baseline(Impl(f"cusolver-{prefix}",
                          f"cuSOLVER {prefix}_gesv {precision} classical (device)",
                          partial(plan_cusolver_irs, prefix),
                          skipped=f"n/a (nvmath has no cusolverDn.{prefix}_gesv)"
                          if missing else None))
    if "scipy" in wanted:
        for assume in assumes:
            base.append(Impl(f"scipy-{assume}", f"SciPy solve {assume} (host)",
                             partial(plan_scipy, assume), iface="cpu", assume=assume))
    return hybrid + base


def irs_missing(env: Env) -> Optional[str]:
    """Why the IRSXgesv rows cannot run (a function missing in the binding), else None; None
    too where there is no GPU (those rows are left out for that reason)."""
    if _cusolver_reason(env) is not None:
        return None
    return baselines.irs_unavailable()


# ----------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------

FP64_COLUMN = "vs cuSOLVER FP64 (getrf+getrs / potrf+potrs)"
IRS_COLUMN = "vs best converged cuSOLVER IRSXgesv GMRES"
COLUMNS = ("n", "seed", "matrix", "implementation", "time (s)", "spread (s)", "iterations",
           "fell back", "convert (s)", "factor (s)", "refine (s)", "backward error", "passes",
           "forward error", FP64_COLUMN, IRS_COLUMN, "vs our FP64", "note")
_RIGHT = ("n", "time (s)", "convert (s)", "factor (s)", "refine (s)")
BASELINE_NAMES = ("cuSOLVER FP64 dgetrf+dgetrs / dpotrf+dpotrs (device; CPU interface: with "
                  "pinned transfers) and the best converged cuSOLVER IRSXgesv GMRES")


def device_name(env: Env) -> str:
    cores = f"{os.cpu_count()} host cores"
    if env.cp is None:
        return f"no GPU ({platform.machine()}, {cores})"
    smi = report.nvidia_smi_name(env.cp.cuda.Device().id)
    if smi:
        return f"{smi} (nvidia-smi), {cores}"
    return f"{report.device_name()}, {cores}"


@dataclass
class Row:
    """One implementation's result on one problem."""
    impl: Impl
    m: Optional[harness.Measurement] = None
    outcome: Optional[Outcome] = None
    errors: Optional[tuple] = None           # (backward, forward)
    notes: list = field(default_factory=list)


def best_converged_irs(rows: dict) -> Optional[Row]:
    """The fastest IRS row whose median repetition converged (niters >= 0), or None."""
    done = [r for r in rows.values() if r.impl.irs and r.outcome is not None
            and r.outcome.converged and r.m is not None and r.m.seconds is not None]
    return min(done, key=lambda r: r.m.seconds) if done else None


class Table(report.MarkdownTable):
    """Prints markdown rows as they come; with a path also appends them to that file."""

    def __init__(self, path: Optional[str]):
        super().__init__(path, COLUMNS, _RIGHT)

    def begin(self, env: Env, command: str) -> None:
        opts = env.opts
        versions = f"numpy {np.__version__}"
        if env.cp is not None:
            versions += f", cupy {env.cp.__version__}"
            nvmath = harness.loaded("nvmath")
            if nvmath is not None:
                versions += f", nvmath-python {getattr(nvmath, '__version__', '?')}"
        combos = ", ".join(f"{lo}/{r}" for lo, r in combinations(opts)) or "none"
        notes = [
            f"hybridla: {hybridla.__file__} (backend {env.backend}); {versions}; "
            f"{opts.repeat} rounds per matrix, the implementations alternating round-robin "
            f"(one untimed round at the first matrix); time = median, spread = "
            f"fastest-slowest; solve_mixed headline rows use the library's defaults (only "
            f"assume_a and the backend passed); tuned rows lowest/refinement: {combos}; "
            f"assume_a: {','.join(opts.assume)} (pos on SPD matrices only).",
            "Matrices: randn = standard normal; kappa=K = U diag(s) (P U Q)^T, spd-kappa=K = "
            "U diag(s) U^T, s geometric from 1 to 1/K, U Haar orthogonal (one QR per size "
            "and seed), P, Q random permutations; spd = G G^T/n + I. b = A x_true, x_true "
            f"standard normal; seeds {','.join(map(str, opts.seeds))}; built in float64 "
            + ("on the GPU (CuPy)." if env.cp is not None else "on the host (NumPy)."),
            "Backward error ||b-Ax||_inf/(||A||_inf ||x||_inf) in float64 outside the timed "
            "region; passes: < sqrt(n) eps (eps = 2^-52, the stopping test ||r||_inf < "
            "sqrt(n) ||x||_inf ||A||_inf eps); forward error ||x-x_true||_inf/"
            "||x_true||_inf. iterations: cuSOLVER's niters (< 0: refinement failed, FP64 "
            "fallback), solve_mixed's info.iterations (inner GMRES iterations in "
            "parentheses); convert/factor/refine: info.seconds of the median repetition.",
            f"Ratios = baseline median / this median (> 1: this is faster), \"(parity)\" where "
            f"the spreads overlap. {FP64_COLUMN}: cuSOLVER's FP64 factor+solve of the same "
            f"assume_a on the device (CPU-interface rows: with pinned transfers of A, b and "
            f"x). {IRS_COLUMN} (gen rows of the GPU interface): cusolverDnIRSXgesv, GMRES "
            f"refinement, lowest FP16/BF16/TF32/FP32, the fastest one that converged on this "
            f"matrix (named in the summary; none converged: \"–\"). vs our FP64: "
            f"hybridla.solve through the same interface, same assume_a.",
        ]
        self.start(f"solve_mixed float64, nrhs {opts.nrhs}; "
                   f"{report.provenance(device_name(env), BASELINE_NAMES)}", command, notes)

    @staticmethod
    def row(prob: Problem, row: Row, rows: dict, irs_best: Optional[Row]) -> str:
        """One row; rows: every Row of this problem by key (the ratios' baselines)."""
        impl, m, outcome = row.impl, row.m, row.outcome
        t = None if m is None else m.seconds
        cells = [str(prob.n), str(prob.seed), prob.spec.name, impl.label,
                 report.fmt(t, ".4g"), report.spread_cell(m)]
        if outcome is None:
            cells += ["–"] * 2 + ["n/a"] * 3
        else:
            cells += [outcome.iterations, outcome.fell_back,
                      *(report.fmt(s, ".3g", "–") for s in outcome.split)]
        if row.errors is None:
            cells += ["n/a"] * 3
        else:
            berr, ferr = row.errors
            cells += [f"{berr:.2e}", "yes" if passes_stopping_test(berr, prob.n) else "no",
                      f"{ferr:.2e}"]

        def measured(key: Optional[str]) -> Optional[harness.Measurement]:
            other = rows.get(key) if key is not None and key != impl.key else None
            return None if other is None else other.m
        hybridla_row = impl.mixed or impl.key.startswith("fp64-")
        fp64 = fp64_reference_key(impl.iface, impl.assume) if hybridla_row else None
        irs = (irs_best.impl.key if irs_best is not None and hybridla_row
               and impl.iface == "gpu" and impl.assume == "gen" else None)
        ours = f"fp64-{impl.iface}-{impl.assume}" if impl.mixed else None
        notes = list(row.notes) + (list(outcome.notes) if outcome is not None else [])
        if irs_best is not None and row is irs_best:
            notes.append("the IRS reference (fastest converged)")
        cells += [report.compare(measured(fp64), m), report.compare(measured(irs), m),
                  report.compare(measured(ours), m), "; ".join(notes).replace("|", "/")]
        return "| " + " | ".join(cells) + " |"


def summary_lines(prob: Problem, rows: dict, irs_best: Optional[Row], env: Env) -> list:
    """The headline (defaults) rows of this problem against cuSOLVER FP64 and the best
    converged IRS row, each line with date, device, commit and baseline."""
    lines = []
    for row in rows.values():
        if not row.impl.headline or row.m is None or row.m.seconds is None:
            continue
        where = f"n={prob.n} seed={prob.seed} {prob.spec.name}: {row.impl.label} " \
                f"{row.m.seconds:.4g} s ({report.spread_cell(row.m)})"
        fp64 = rows.get(fp64_reference_key(row.impl.iface, row.impl.assume))
        refs = [fp64] if fp64 is not None else []
        if row.impl.iface == "gpu" and row.impl.assume == "gen":
            refs.append(irs_best)
        for ref in refs:
            name = "no converged cuSOLVER IRS row" if ref is None else ref.impl.label
            lines.append(
                f"- summary {where} vs {name}"
                + ("" if ref is None else f" {report.fmt(ref.m.seconds, '.4g')} s "
                   f"({report.spread_cell(ref.m)}): {report.compare(ref.m, row.m)}")
                + f"; {report.provenance(device_name(env), name)}")
    return lines


# ----------------------------------------------------------------------------------------
# Command line and driver
# ----------------------------------------------------------------------------------------

def _sizes(value: str) -> list[int]:
    return [positive_int(w) for w in value.split(",") if w.strip()]


def _seeds(value: str) -> list[int]:
    try:
        seeds = list(dict.fromkeys(int(w) for w in value.split(",") if w.strip()))
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds: a comma list of integers, not {value!r}") \
            from None
    if not seeds:
        raise argparse.ArgumentTypeError("no seed given")
    return seeds


def _matrices(value: str) -> list[MatrixSpec]:
    specs = [parse_matrix(w) for w in value.split(",") if w.strip()]
    if not specs:
        raise argparse.ArgumentTypeError("no matrix named")
    return list({s.name: s for s in specs}.values())


def _choices(allowed, none_ok: bool = False):
    """A comma list of words from allowed, each once; with none_ok, "none" is the empty list
    (not for --refinement, where "none" is a value)."""
    def parse(value: str) -> list[str]:
        words = list(dict.fromkeys(w.strip() for w in value.split(",") if w.strip()))
        if none_ok and words in (["none"], []):
            return []
        bad = [w for w in words if w not in allowed]
        if bad or not words:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad) or repr(value)}; choose from {', '.join(allowed)}"
                + (" (or 'none')" if none_ok else ""))
        return words
    return parse


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Benchmark hybridla.solve_mixed against cuSOLVER's FP64 solves and its "
                    "IRSXgesv GMRES solvers, alternating, median and spread.")
    p.add_argument("--sizes", type=_sizes, nargs="+", default=None, metavar="N[,N]",
                   help=f"matrix orders (default {','.join(map(str, DEFAULT_SIZES))}; with "
                        f"--dry {','.join(map(str, DRY_SIZES))})")
    p.add_argument("--matrices", type=_matrices, default=_matrices(DEFAULT_MATRICES),
                   help=f"comma list of randn, spd, kappa=K, spd-kappa=K (default "
                        f"{DEFAULT_MATRICES})")
    p.add_argument("--lowest", type=_choices(LOWEST, True), default=None,
                   help="the tuned solve_mixed rows' lowest precisions, comma list (with "
                        "--refinement: their cross product; default: half-x3,half,tf32 x "
                        "classical-gmres; none: no tuned rows)")
    p.add_argument("--refinement", type=_choices(REFINEMENTS), default=None,
                   help="the tuned solve_mixed rows' refinements, comma list")
    p.add_argument("--assume", type=_choices(ASSUME), default=list(ASSUME),
                   help="assume_a of hybridla's rows: gen,pos (pos on SPD matrices only)")
    p.add_argument("--interfaces", type=_choices(INTERFACES, True), default=list(INTERFACES),
                   help="hybridla interfaces, comma list: gpu (device arrays), cpu (NumPy)")
    p.add_argument("--baselines", type=_choices(BASELINES, True),
                   default=list(DEFAULT_BASELINES),
                   help=f"comma list of {', '.join(BASELINES)} (or none; default "
                        f"{','.join(DEFAULT_BASELINES)})")
    p.add_argument("--repeat", type=positive_int, default=None,
                   help=f"timed rounds per matrix, alternating (median and spread; default "
                        f"{DEFAULT_REPEAT}, with --dry 1)")
    p.add_argument("--irs-max-iters", type=positive_int, default=50,
                   help="IRSXgesv rows: at most this many refinement iterations (default 50, "
                        "cuSOLVER's)")
    p.add_argument("--irs-tol", type=float, default=None,
                   help="IRSXgesv rows: cusolverDnIRSParamsSetTol (default: cuSOLVER's)")
    p.add_argument("--nrhs", type=positive_int, default=1, help="right-hand sides")
    p.add_argument("--nb", type=positive_int, default=None,
                   help="hybridla block size (tuned and FP64 rows only)")
    p.add_argument("--backend", choices=("cuda", "host"), default=None,
                   help="hybridla's backend (default cuda where available, else host)")
    p.add_argument("--seeds", type=_seeds, default=None, metavar="S[,S]",
                   help=f"random matrix seeds, comma list (default "
                        f"{','.join(map(str, DEFAULT_SEEDS))}; with --dry 0)")
    p.add_argument("--seed", type=int, default=None, help="one seed (= --seeds SEED)")
    p.add_argument("--out", default=None, metavar="FILE.md",
                   help="append the table (with device, date, command) to this file")
    p.add_argument("--dry", action="store_true",
                   help="tiny sizes, host backend, no CUDA module imported (for tests)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    opts = p.parse_args(argv)
    opts.sizes = sorted({n for group in opts.sizes for n in group}) if opts.sizes else (
        list(DRY_SIZES) if opts.dry else list(DEFAULT_SIZES))
    if opts.seed is not None:
        if opts.seeds is not None:
            p.error("give --seeds or --seed, not both")
        opts.seeds = [opts.seed]
    if opts.seeds is None:
        opts.seeds = [0] if opts.dry else list(DEFAULT_SEEDS)
    if opts.repeat is None:
        opts.repeat = 1 if opts.dry else DEFAULT_REPEAT
    if opts.dry:
        if opts.backend == "cuda":
            p.error("--dry runs on the host backend only")
        opts.backend = "host"
    return opts


def make_env(opts: argparse.Namespace) -> Env:
    """CuPy (with a GPU) and hybridla's backend; with --dry neither CuPy nor CUDA is touched."""
    if opts.dry:
        return Env(None, "host", opts)
    cp = harness.cupy() if harness.cupy_has_gpu() else None
    backend = opts.backend
    if backend is None:
        backend = "cuda" if "cuda" in harness.hybridla_backends() else "host"
    elif backend == "cuda" and "cuda" not in harness.hybridla_backends():
        raise SystemExit("--backend cuda: hybridla's cuda backend is not available here")
    if cp is not None:
        harness.optional_import("nvmath")
    return Env(cp, backend, opts)


def _check(prob: Problem, row: Row):
    """The contender's finish: the last repetition's x checked at once (it may live in a
    scratch buffer the next contender refreshes)."""
    def finish(result):
        try:
            row.errors = prob.check(result[0])
        except Exception as exc:
            row.notes.append(f"check failed: {type(exc).__name__}: {exc}")
        return None
    return finish


def run_problem(impls: list, prob: Problem, env: Env, warmup: int) -> dict:
    """Time the implementations that apply to prob alternately (harness.alternate), check
    each x; returns key -> Row, in table order."""
    rows: dict = {}
    plans: dict = {}
    contenders = []
    for impl in impls:
        if not impl.applies(prob.spec):
            continue
        row = rows[impl.key] = Row(impl)
        if impl.skipped:
            row.notes.append(impl.skipped)
            continue
        try:
            plan = plans[impl.key] = impl.plan(prob, env)
        except Exception as exc:
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            log(f"n={prob.n} {prob.spec.name}: {impl.label}: {reason}")
            row.notes.append(f"n/a ({reason})")
            continue
        contenders.append(harness.Contender(
            impl.key, lambda state, last, fn=plan.fn: fn(state), plan.setup, env.sync,
            meta=itemgetter(1), finish=_check(prob, row)))
    log(f"n={prob.n} seed={prob.seed} {prob.spec.name}: {len(contenders)} implementations "
        f"alternating, {warmup} + {env.opts.repeat} rounds")
    try:
        results = harness.alternate(contenders, env.opts.repeat, warmup=warmup)
        for key, m in results.items():
            row = rows[key]
            row.m = m
            if m.error:
                log(f"n={prob.n} {prob.spec.name}: {row.impl.label} failed: {m.error}")
                row.notes.append(m.error)
            elif m.times:
                try:
                    row.outcome = plans[key].describe(m.meta)
                except Exception as exc:
                    row.notes.append(f"{type(exc).__name__}: {exc}")
    finally:
        for plan in plans.values():
            try:
                plan.close()
            except Exception:
                pass
        plans.clear()
        contenders = []
        harness.release_device_memory()
    return rows


def main(argv=None) -> int:
    with harness.recording_imports() as asked:
        try:
            return _run(argv)
        finally:
            _bench._MODULES = dict(asked)


def _run(argv) -> int:
    opts = parse_args(argv)
    command = report.command_line(argv, "perf/mixed.py")
    env = make_env(opts)
    impls = select_implementations(env)
    if not impls:
        log("nothing to run")
        return 1
    table = Table(opts.out)
    table.begin(env, command)
    xp = env.cp if env.cp is not None else np
    warmed: set = set()
    summaries: list = []
    try:
        for n in opts.sizes:
            for seed in opts.seeds:
                factory = MatrixFactory(n, seed, xp, log)
                for spec in opts.matrices:
                    log(f"n={n} seed={seed}: building {spec.name} ({n * n * 8 / 2**30:.2f} "
                        f"GiB) {'on the GPU' if xp is not np else 'on the host'}")
                    prob = Problem(spec, n, opts.nrhs, seed, factory)
                    keys = {i.key for i in impls if i.applies(spec) and not i.skipped}
                    # one untimed round wherever a row has not run yet (kernels, handles)
                    warmup = 0 if keys <= warmed else 1
                    warmed |= keys
                    rows = run_problem(impls, prob, env, warmup)
                    best = best_converged_irs(rows)
                    for row in rows.values():
                        table.emit(Table.row(prob, row, rows, best))
                    summaries += summary_lines(prob, rows, best, env)
                    prob.close()
                    prob = None
                    harness.release_device_memory()
                factory = None
    finally:
        if env.cp is not None:
            try:
                baselines.destroy_handle()
            except Exception:
                pass
    if summaries:
        table.emit("")
        for line in summaries:
            table.emit(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
