#!/usr/bin/env python3
"""Benchmark of hybridla's mixed-precision iterative-refinement solvers (hybridla.solve_mixed)
against cuSOLVER's IRS solvers (<xy>_gesv), cuSOLVER's FP64 getrf/getrs and potrf/potrs, and
hybridla's own FP64 solve: one process, the same matrices, one table.

Usage (from the repository root):

    python3 perf/mixed.py [--sizes 32768] [--matrices randn,kappa=1e6,spd-kappa=1e4,spd-kappa=1e6] \
        [--lowest half,bfloat16,tf32] [--refinement classical-gmres,gmres] [--assume gen,pos] \
        [--interfaces gpu,cpu] [--baselines cusolver-dd,cusolver-ds,...,hybridla-fp64] \
        [--repeat 3] [--nrhs 1] [--nb N] [--backend cuda|host] [--seed 0] [--out FILE.md]

    python3 perf/mixed.py --dry          # host backend, tiny sizes, no CUDA module imported

Test matrices (--matrices, comma list; float64, F order, fixed seeds; built in double precision
on the GPU with CuPy where one is present, else on the host with NumPy; the two draw different
numbers):

  randn            standard normal entries
  kappa=K          A = U diag(s) (P U Q)^T, s_i = K^(-i/(n-1)) (geometric from 1 to 1/K, so
                   ||A||_2 = 1 and cond_2(A) = K), U Haar orthogonal (QR of a Gaussian with the
                   signs of R's diagonal moved into Q), P, Q random row and column permutations.
                   P U Q is orthogonal, so this is an SVD; ONE QR per size (about 2 s on the GPU
                   at n = 32768) serves every kappa and spd-kappa matrix of that size: U is kept in
                   host memory between matrices and uploaded for each.
  spd-kappa=K      A = U diag(s) U^T with the same U and s: symmetric positive definite, cond K,
                   made exactly symmetric ((A + A^T) / 2)
  spd              A = G G^T / n + I, G standard normal (as perf/bench.py's potrf matrix)

Right-hand side: b = A x_true (computed in float64 where A lives), x_true standard normal
(n, or n x --nrhs), fixed seed; so the forward error ||x - x_true||_inf / ||x_true||_inf is
reported besides the backward error.

Implementations (one row each per size and matrix; the cuSOLVER rows come first, so that every
later row has its ratios):

  cuSOLVER <xy>_gesv (device)   nvmath.bindings.cusolverDn dd_gesv (FP64), ds_gesv (FP32),
                                dx_gesv (TF32), dh_gesv (FP16), db_gesv (BF16, where the binding
                                exists): LU in the low precision + cuSOLVER's own refinement
                                and FP64 fallback (its defaults) on the CuPy arrays;
                                iterations = its returned niters (negative: it did not converge
                                and fell back to an FP64 solve)
  cuSOLVER dgetrf+dgetrs        plain FP64 LU and solve on the device
  cuSOLVER dpotrf+dpotrs        plain FP64 Cholesky (lower) and solve, SPD matrices only
  hybridla solve FP64           hybridla.solve(assume_a=gen|pos) on the device arrays (GPU iface);
                                on the NumPy arrays (CPU iface) only where the GPU interface is
                                not run (no GPU, --dry, --backend host or --interfaces cpu)
  hybridla solve_mixed          hybridla.solve_mixed for each lowest x refinement combination,
                                assume_a="gen" (and "pos" on the spd matrices, --assume), on the
                                device arrays (GPU iface) and on the NumPy arrays (CPU iface,
                                backend --backend: x in host memory when the clock stops)
  cuSOLVER dd_gesv+transfers    CPU iface baseline: cupy.asarray upload of A and b from the
                                pageable NumPy arrays + dd_gesv + download of x, all timed
  SciPy solve (host)            scipy.linalg.solve (--baselines scipy; not in the default list)

The default combinations are half, bfloat16, tf32 with classical-gmres, plus half with gmres;
giving --lowest or --refinement times the cross product of the two lists instead (the other
one defaulting to half,bfloat16,tf32 / classical-gmres).

Inputs: device rows run on fresh copies of A and b made outside the timed region each
repetition (one scratch A per matrix), with overwrite_a=overwrite_b=True for hybridla (cuSOLVER's
IRS may also leave garbage in dA, so it gets the same fresh copy); CPU-interface rows of
solve_mixed get the pristine NumPy arrays with overwrite_a=overwrite_b=False (the library uploads
them; nothing to copy); the host FP64 and SciPy rows get a host copy (untimed), overwrite_a=True.
check_finite=False everywhere.  cuSOLVER's workspaces, pivots and info are allocated once per
row outside the timed region; hybridla allocates what it needs inside its call.

Each implementation runs once untimed at its first size and matrix (warm-up), then --repeat
times; the median is reported (for solve_mixed, iterations and the time split come from the
median repetition's info).  GPU timings synchronize the device before reading the clock.

Columns: iterations (cuSOLVER's niters; info.iterations of solve_mixed, with its inner GMRES
iterations), fell back, convert/factor/refine = solve_mixed's info.seconds (its fallback time
goes in the note), backward error ||b - A x||_inf / (||A||_inf ||x||_inf) (the largest over the
right-hand sides) computed in float64 where A lives (the GPU when there is one), outside the
timed region, "passes" = the stopping test ||r||_inf < sqrt(n) ||x||_inf ||A||_inf eps (eps of
float64), the forward error, and ratios = baseline time / this time (> 1: this is faster):
"vs cuSOLVER dd" against dd_gesv on the device (for CPU-interface rows against dd_gesv+
transfers), "vs cuSOLVER dh" and "vs cuSOLVER dx" for solve_mixed's device rows, "vs our FP64"
= hybridla.solve's time on the same matrix through the same interface with the same assume_a /
this time.  If hybridla.solve_mixed does not exist (yet), its rows say "skipped: hybridla.
solve_mixed not available".

Memory: float64 A at n = 32768 is 8 GiB.  At most the pristine A, one scratch copy and the
implementation's own buffers live on the device at once (the QR and the products that build a
matrix briefly need three to five n x n arrays, with nothing else alive); cached CuPy blocks are
freed after every row.  A default run at n = 32768
(4 matrices) should take about 5 minutes on one H100/H200 (an estimate from cuSOLVER's known
times, not yet measured); trim with --baselines / --interfaces / --matrices / --assume.
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
from hybridla.bench import baselines, harness  # noqa: E402
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
IRS_PREFIXES = baselines.IRS_PRECISIONS
BASELINES = tuple(f"cusolver-{p}" for p in IRS_PREFIXES) + (
    "cusolver-getrf", "cusolver-potrf", "hybridla-fp64", "scipy")
DEFAULT_BASELINES = tuple(b for b in BASELINES if b != "scipy")
DEFAULT_COMBOS = (("half-x3", "classical-gmres"), ("half", "classical-gmres"),
                  ("tf32", "classical-gmres"))
DEFAULT_MATRICES = "randn,kappa=1e6,spd-kappa=1e4,spd-kappa=1e6"
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
        self.spec, self.n, self.nrhs = spec, n, nrhs
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
# Timing
# ----------------------------------------------------------------------------------------

@dataclass
class Timing:
    seconds: float        # median of the timed repetitions
    x: Any                # the last repetition's solution
    meta: Any             # what fn returned besides x, in the median repetition


def measure(fn: Callable[[Any], tuple], setup: Callable[[], Any], repeat: int, *,
            warmup: int = 0, sync: Optional[Callable[[], None]] = None) -> Timing:
    """Time fn(setup()) -> (x, meta) ``warmup + repeat`` times, setup() untimed; sync (if given)
    before starting and before stopping the clock (harness.measure)."""
    m = harness.measure(lambda state, last: fn(state), setup, repeat, warmup=warmup, sync=sync,
                        meta=itemgetter(1))
    return Timing(m.seconds, m.result[0], m.meta)


@dataclass
class Outcome:
    time: float
    x: Any
    iterations: str = "–"
    fell_back: str = "–"
    split: tuple = (None, None, None)        # convert, factor, refine (s)
    notes: list = field(default_factory=list)


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

def run_cusolver_irs(prefix: str, prob: Problem, env: Env, warmup: int) -> Outcome:
    """cusolverDn<XY>gesv on fresh device copies of A and b; its workspace, pivots and info
    allocated once, outside the timed region."""
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

    t = measure(fn, prob.device_copies, env.opts.repeat, warmup=warmup, sync=env.sync)
    notes: list = [f"workspace {lwork / 2**30:.2f} GiB"]
    baselines.info_note(d_info, "U({i},{i}) = 0", notes)
    niters = t.meta
    if niters < 0:
        notes.append(f"niters={niters}: refinement failed, FP64 fallback")
    return Outcome(t.seconds, t.x, str(niters), "yes" if niters < 0 else "no", notes=notes)


def run_cusolver_irs_transfers(prob: Problem, env: Env, warmup: int) -> Outcome:
    """CPU interface baseline: upload A and b (pageable NumPy), dd_gesv, download x; all timed."""
    cp = env.cp
    a_host, b_host = prob.host_inputs()
    x_host = np.empty_like(b_host, order="F")
    d_x = cp.empty(b_host.shape, dtype=np.float64, order="F")
    d_ipiv = cp.empty(prob.n, dtype=cp.int32)
    d_info = cp.zeros(1, dtype=cp.int32)
    d_a, d_b = prob.device_copies()                 # only their addresses, for the query
    lwork = baselines.irs_workspace("dd", d_a, d_b, d_x, d_ipiv)
    del d_a, d_b
    d_work = cp.empty(max(1, lwork), dtype=cp.uint8)
    harness.prime_pinned_pool(prob.nbytes, log)

    def fn(_):
        d_a = cp.asarray(a_host, order="F")          # H2D from the pageable arrays
        d_b = cp.asarray(b_host, order="F")
        niters = baselines.irs_gesv("dd", d_a, d_b, d_x, d_ipiv, d_work, lwork, d_info)
        d_x.get(out=x_host)                          # D2H (blocking)
        return x_host, niters

    t = measure(fn, lambda: None, env.opts.repeat, warmup=warmup, sync=env.sync)
    notes: list = []
    baselines.info_note(d_info, "U({i},{i}) = 0", notes)
    return Outcome(t.seconds, t.x, str(t.meta), "yes" if t.meta < 0 else "no", notes=notes)


def run_cusolver_getrf(prob: Problem, env: Env, warmup: int) -> Outcome:
    """dgetrf + dgetrs on fresh device copies, b overwritten by x."""
    cp = env.cp
    d_a, _ = prob.device_copies()
    d_work = baselines.getrf_workspace(d_a)
    d_ipiv = cp.empty(prob.n, dtype=cp.int32)
    d_info = cp.zeros(2, dtype=cp.int32)
    factor_info, solve_info = d_info[:1], d_info[1:]

    def fn(state):
        a, b = state
        baselines.getrf(a, work=d_work, ipiv=d_ipiv, info=factor_info)
        baselines.getrs(a, d_ipiv, b, solve_info)
        return b, None

    t = measure(fn, prob.device_copies, env.opts.repeat, warmup=warmup, sync=env.sync)
    notes: list = []
    baselines.info_note(d_info[:1], "U({i},{i}) = 0", notes)
    baselines.info_note(d_info[1:], "getrs: unexpected", notes)
    return Outcome(t.seconds, t.x, notes=notes)


def run_cusolver_potrf(prob: Problem, env: Env, warmup: int) -> Outcome:
    """dpotrf + dpotrs (lower triangle) on fresh device copies, b overwritten by x."""
    cp = env.cp
    d_a, _ = prob.device_copies()
    d_work = baselines.potrf_workspace(d_a)
    d_info = cp.zeros(2, dtype=cp.int32)
    factor_info, solve_info = d_info[:1], d_info[1:]

    def fn(state):
        a, b = state
        baselines.potrf(a, work=d_work, info=factor_info)
        baselines.potrs(a, b, solve_info)
        return b, None

    t = measure(fn, prob.device_copies, env.opts.repeat, warmup=warmup, sync=env.sync)
    notes: list = []
    baselines.info_note(d_info[:1], "the leading minor of order {i} is not positive definite",
                        notes)
    baselines.info_note(d_info[1:], "potrs: unexpected", notes)
    return Outcome(t.seconds, t.x, notes=notes)


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


def run_hybridla_fp64(assume: str, iface: str, prob: Problem, env: Env, warmup: int) -> Outcome:
    kw = dict(check_finite=False, backend="cuda" if iface == "gpu" else env.backend,
              **_assume_kwargs(assume), **env.engine())
    # The host copy: hybridla.solve's CPU interface factors into host memory, in place with
    # overwrite_a=True (else it would copy A inside the timed region).
    setup = prob.device_copies if iface == "gpu" else prob.host_copies

    def fn(state):
        a, b = state
        return hybridla.solve(a, b, overwrite_a=True, overwrite_b=True, **kw), None

    t = measure(fn, setup, env.opts.repeat, warmup=warmup, sync=env.sync)
    return Outcome(t.seconds, t.x, notes=_kind_note(t.x, iface))


def _seconds(info, key: str) -> Optional[float]:
    seconds = getattr(info, "seconds", None) or {}
    value = seconds.get(key) if isinstance(seconds, dict) else None
    return None if value is None else float(value)


def run_hybridla_mixed(lowest: str, refinement: str, assume: str, iface: str, prob: Problem,
                       env: Env, warmup: int) -> Outcome:
    kw = dict(lowest=lowest, refinement=refinement, check_finite=False,
              backend="cuda" if iface == "gpu" else env.backend, **_assume_kwargs(assume),
              **env.engine())
    # device arrays: fresh scratch copies, overwritten; NumPy arrays: the pristine ones, kept
    setup, overwrite = ((prob.device_copies, True) if iface == "gpu" else
                        (prob.host_inputs, False))

    def fn(state):
        a, b = state
        return hybridla.solve_mixed(a, b, overwrite_a=overwrite, overwrite_b=overwrite, **kw)

    t = measure(fn, setup, env.opts.repeat, warmup=warmup, sync=env.sync)
    info = t.meta
    iterations = getattr(info, "iterations", None)
    inner = getattr(info, "inner_iterations", None)
    fell_back = getattr(info, "fell_back", None)
    notes = _kind_note(t.x, iface)
    cells = "n/a" if iterations is None else str(iterations)
    if inner:
        cells += f" ({inner} inner)"
    if iterations is not None and iterations < 0:
        notes.append(f"iterations={iterations}: "
                     + ITERATION_CODES.get(iterations, "not converged"))
    fallback = _seconds(info, "fallback")
    if fallback is not None:
        notes.append(f"fallback {fallback:.3g} s")
    for name, asked in (("lowest", lowest), ("refinement", refinement)):
        used = getattr(info, name, asked)
        if used != asked:
            notes.append(f"info.{name}={used}")
    return Outcome(t.seconds, t.x, cells,
                   "n/a" if fell_back is None else ("yes" if fell_back else "no"),
                   tuple(_seconds(info, k) for k in ("convert", "factor", "refine")), notes)


def run_scipy(assume: str, prob: Problem, env: Env, warmup: int) -> Outcome:
    import scipy.linalg
    kw = _assume_kwargs(assume)

    def fn(state):
        a, b = state
        return scipy.linalg.solve(a, b, overwrite_a=True, overwrite_b=True,
                                  check_finite=False, **kw), None

    t = measure(fn, prob.host_copies, env.opts.repeat, warmup=warmup)
    return Outcome(t.seconds, t.x)


# ----------------------------------------------------------------------------------------
# The implementations
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Impl:
    key: str                       # warm-up and ratios are keyed by it
    label: str
    run: Callable[[Problem, Env, int], Outcome]
    iface: str = "gpu"             # where the ratios' baselines come from: "gpu" or "cpu"
    assume: str = "gen"            # "pos": SPD matrices only
    mixed: bool = False            # a hybridla.solve_mixed row
    skipped: Optional[str] = None  # a reason: the row says so, nothing runs

    def applies(self, spec: MatrixSpec) -> bool:
        return self.assume != "pos" or spec.spd


def combinations(opts: argparse.Namespace) -> list[tuple[str, str]]:
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


def select_implementations(env: Env) -> list[Impl]:
    """The rows of one matrix, in run (table) order: cuSOLVER first (the ratios need them)."""
    opts = env.opts
    baselines, ifaces = set(opts.baselines), set(opts.interfaces)
    assumes = [a for a in ASSUME if a in opts.assume]
    gpu_reason = _cusolver_reason(env)
    if gpu_reason is None and env.backend != "cuda":
        gpu_reason = "hybridla's cuda backend is not used (--backend host)"
    impls: list[Impl] = []

    def add(impl: Impl, needs_gpu: bool = True) -> None:
        reason = _cusolver_reason(env) if needs_gpu else None
        if reason:
            log(f"leaving out {impl.label}: {reason}")
        else:
            impls.append(impl)

    cusolverDn = harness.loaded("nvmath.bindings.cusolverDn")
    for prefix, precision in IRS_PREFIXES.items():
        if f"cusolver-{prefix}" not in baselines:
            continue
        label = f"cuSOLVER {prefix}_gesv {precision} (device)"
        missing = (cusolverDn is not None and not hasattr(cusolverDn, f"{prefix}_gesv"))
        add(Impl(f"cusolver-{prefix}", label, partial(run_cusolver_irs, prefix),
                 skipped=f"skipped: nvmath has no cusolverDn.{prefix}_gesv" if missing else None))
    if "cusolver-getrf" in baselines:
        add(Impl("cusolver-getrf", "cuSOLVER dgetrf+dgetrs (device)", run_cusolver_getrf))
    if "cusolver-potrf" in baselines:
        add(Impl("cusolver-potrf", "cuSOLVER dpotrf+dpotrs lower (device)", run_cusolver_potrf,
                 assume="pos"))
    if "scipy" in baselines:
        for assume in assumes:
            impls.append(Impl(f"scipy-{assume}", f"SciPy solve {assume} (host)",
                              partial(run_scipy, assume), iface="cpu", assume=assume))

    has_mixed = getattr(hybridla, "solve_mixed", None) is not None
    combos = combinations(opts)
    for iface in INTERFACES:
        if iface not in ifaces:
            continue
        if iface == "gpu" and gpu_reason:
            log(f"leaving out the GPU interface: {gpu_reason}")
            continue
        where = "GPU iface" if iface == "gpu" else f"CPU iface ({env.backend})"
        if iface == "cpu" and "cusolver-dd" in baselines:
            add(Impl("cusolver-dd+transfers", "cuSOLVER dd_gesv+transfers",
                     run_cusolver_irs_transfers, iface="cpu"))
        # FP64 reference: on the device array; through the CPU interface only without a GPU
        fp64_here = iface == "gpu" or ("gpu" not in ifaces or gpu_reason is not None)
        if "hybridla-fp64" in baselines and fp64_here:
            for assume in assumes:
                impls.append(Impl(f"fp64-{iface}-{assume}",
                                  f"hybridla solve FP64 {assume} {where}",
                                  partial(run_hybridla_fp64, assume, iface), iface=iface,
                                  assume=assume))
        for assume in assumes:
            for lowest, refinement in combos:
                label = f"hybridla solve_mixed {lowest} {refinement} {assume} {where}"
                impls.append(Impl(
                    f"mixed-{iface}-{assume}-{lowest}-{refinement}", label,
                    partial(run_hybridla_mixed, lowest, refinement, assume, iface),
                    iface=iface, assume=assume, mixed=True,
                    skipped=None if has_mixed else
                    "skipped: hybridla.solve_mixed not available"))
    return impls


# ----------------------------------------------------------------------------------------
# Output
# ----------------------------------------------------------------------------------------

COLUMNS = ("n", "matrix", "implementation", "time (s)", "iterations", "fell back",
           "convert (s)", "factor (s)", "refine (s)", "backward error", "passes",
           "forward error", "vs cuSOLVER dd", "vs cuSOLVER dh", "vs cuSOLVER dx", "vs our FP64",
           "note")
_RIGHT = ("n", "time (s)", "convert (s)", "factor (s)", "refine (s)")


def device_name(env: Env) -> str:
    cores = f"{os.cpu_count()} host cores"
    if env.cp is None:
        return f"no GPU ({platform.machine()}, {cores})"
    smi = harness.nvidia_smi_name(env.cp.cuda.Device().id)
    if smi:
        return f"{smi} (nvidia-smi), {cores}"
    return f"{harness.device_name()}, {cores}"


class Table(harness.MarkdownTable):
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
        combos = ", ".join(f"{lo}/{r}" for lo, r in combinations(opts))
        notes = [
            f"hybridla: {hybridla.__file__} (backend {env.backend}); {versions}; "
            f"repeat {opts.repeat} (median), warm-up once per implementation at its first "
            f"size and matrix; solve_mixed lowest/refinement: {combos}; assume_a: "
            f"{','.join(opts.assume)} (pos on SPD matrices only).",
            "Matrices: randn = standard normal; kappa=K = U diag(s) (P U Q)^T, spd-kappa=K = "
            "U diag(s) U^T, s geometric from 1 to 1/K, U Haar orthogonal (one QR per size), "
            "P, Q random permutations; spd = G G^T/n + I. b = A x_true, x_true standard "
            f"normal; seed {opts.seed}; built in float64 "
            + ("on the GPU (CuPy)." if env.cp is not None else "on the host (NumPy)."),
            "Backward error ||b-Ax||_inf/(||A||_inf ||x||_inf) in float64 outside the timed "
            "region; passes: < sqrt(n) eps (eps = 2^-52, the stopping test ||r||_inf < "
            "sqrt(n) ||x||_inf ||A||_inf eps); forward error ||x-x_true||_inf/"
            "||x_true||_inf. iterations: cuSOLVER's niters (< 0: fell back to FP64), "
            "solve_mixed's info.iterations (inner GMRES iterations in parentheses); "
            "convert/factor/refine: info.seconds of the median repetition.",
            "Ratios = baseline time / this time (> 1: this is faster): vs cuSOLVER dd = "
            "dd_gesv on the device (CPU-interface rows: dd_gesv+transfers, upload of A and b "
            "and download of x timed); vs dh / dx for solve_mixed's device rows; vs our FP64 "
            "= hybridla.solve (FP64) through the same interface, same assume_a.",
        ]
        self.start(f"solve_mixed float64, nrhs {opts.nrhs}, on {device_name(env)}, "
                   f"{harness.utc_now()}", command, notes)

    @staticmethod
    def row(n: int, matrix: str, impl: Impl, outcome: Optional[Outcome] = None,
            errors: Optional[tuple] = None, measured: Optional[dict] = None,
            note: str = "") -> str:
        measured = measured or {}
        t = outcome.time if outcome is not None else None
        cells = [str(n), matrix, impl.label, harness.fmt(t, ".4g")]
        if outcome is None:
            cells += ["–"] * 2 + ["n/a"] * 3
        else:
            cells += [outcome.iterations, outcome.fell_back,
                      *(harness.fmt(s, ".3g", "–") for s in outcome.split)]
        if errors is None:
            cells += ["n/a"] * 3
        else:
            berr, ferr = errors
            cells += [f"{berr:.2e}", "yes" if passes_stopping_test(berr, n) else "no",
                      f"{ferr:.2e}"]
        dd = measured.get("cusolver-dd" if impl.iface == "gpu" else "cusolver-dd+transfers")
        device_mixed = impl.mixed and impl.iface == "gpu"
        cells += [harness.ratio(dd if impl.key not in ("cusolver-dd", "cusolver-dd+transfers")
                                else None, t),
                  harness.ratio(measured.get("cusolver-dh") if device_mixed else None, t),
                  harness.ratio(measured.get("cusolver-dx") if device_mixed else None, t),
                  harness.ratio(measured.get(f"fp64-{impl.iface}-{impl.assume}")
                                if impl.mixed else None, t),
                  note.replace("|", "/")]
        return "| " + " | ".join(cells) + " |"


# ----------------------------------------------------------------------------------------
# Command line and driver
# ----------------------------------------------------------------------------------------

def _sizes(value: str) -> list[int]:
    return [positive_int(w) for w in value.split(",") if w.strip()]


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
        description="Benchmark hybridla.solve_mixed against cuSOLVER's IRS solvers and FP64.")
    p.add_argument("--sizes", type=_sizes, nargs="+", default=None, metavar="N[,N]",
                   help="matrix orders (default 32768; with --dry "
                        f"{','.join(map(str, DRY_SIZES))})")
    p.add_argument("--matrices", type=_matrices, default=_matrices(DEFAULT_MATRICES),
                   help=f"comma list of randn, spd, kappa=K, spd-kappa=K (default "
                        f"{DEFAULT_MATRICES})")
    p.add_argument("--lowest", type=_choices(LOWEST), default=None,
                   help="solve_mixed lowest precisions, comma list (with --refinement: "
                        "their cross product; default: half,bfloat16,tf32 x classical-gmres "
                        "plus half x gmres)")
    p.add_argument("--refinement", type=_choices(REFINEMENTS), default=None,
                   help="solve_mixed refinements, comma list")
    p.add_argument("--assume", type=_choices(ASSUME), default=list(ASSUME),
                   help="assume_a of hybridla's rows: gen,pos (pos on SPD matrices only)")
    p.add_argument("--interfaces", type=_choices(INTERFACES, True), default=list(INTERFACES),
                   help="hybridla interfaces, comma list: gpu (device arrays), cpu (NumPy)")
    p.add_argument("--baselines", type=_choices(BASELINES, True),
                   default=list(DEFAULT_BASELINES),
                   help=f"comma list of {', '.join(BASELINES)} (or none; default all but scipy)")
    p.add_argument("--repeat", type=positive_int, default=None,
                   help="timed runs per row (median; default 3, with --dry 1)")
    p.add_argument("--nrhs", type=positive_int, default=1, help="right-hand sides")
    p.add_argument("--nb", type=positive_int, default=None, help="hybridla block size")
    p.add_argument("--backend", choices=("cuda", "host"), default=None,
                   help="hybridla's backend (default cuda where available, else host)")
    p.add_argument("--seed", type=int, default=0, help="random matrix seed")
    p.add_argument("--out", default=None, metavar="FILE.md",
                   help="append the table (with device, date, command) to this file")
    p.add_argument("--dry", action="store_true",
                   help="tiny sizes, host backend, no CUDA module imported (for tests)")
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    opts = p.parse_args(argv)
    opts.sizes = sorted({n for group in opts.sizes for n in group}) if opts.sizes else (
        list(DRY_SIZES) if opts.dry else [32768])
    if opts.repeat is None:
        opts.repeat = 1 if opts.dry else 3
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


def run_row(impl: Impl, prob: Problem, env: Env, warmup: int, measured: dict) -> str:
    """Time one implementation on one problem, check its x; return the table row."""
    n, matrix = prob.n, prob.spec.name
    if impl.skipped:
        return Table.row(n, matrix, impl, note=impl.skipped)
    outcome = errors = None
    note = ""
    try:
        log(f"n={n} {matrix}: {impl.label}")
        outcome = impl.run(prob, env, warmup)
        notes = list(outcome.notes)
        try:
            errors = prob.check(outcome.x)
        except Exception as exc:
            notes.append(f"check failed: {type(exc).__name__}: {exc}")
        note = "; ".join(notes)
        measured[impl.key] = outcome.time
    except Exception as exc:
        note = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
        log(f"n={n} {matrix}: {impl.label} failed: {note}")
    finally:
        if outcome is not None:
            outcome.x = None
        harness.release_device_memory()
    return Table.row(n, matrix, impl, outcome, errors, measured, note)


def main(argv=None) -> int:
    with harness.recording_imports() as asked:
        try:
            return _run(argv)
        finally:
            _bench._MODULES = dict(asked)


def _run(argv) -> int:
    opts = parse_args(argv)
    command = harness.command_line(argv, "perf/mixed.py")
    env = make_env(opts)
    impls = select_implementations(env)
    if not impls:
        log("nothing to run")
        return 1
    table = Table(opts.out)
    table.begin(env, command)
    xp = env.cp if env.cp is not None else np
    warmed: set = set()
    try:
        for n in opts.sizes:
            factory = MatrixFactory(n, opts.seed, xp, log)
            for spec in opts.matrices:
                log(f"n={n}: building {spec.name} ({n * n * 8 / 2**30:.2f} GiB) "
                    f"{'on the GPU' if xp is not np else 'on the host'}")
                prob = Problem(spec, n, opts.nrhs, opts.seed, factory)
                measured: dict = {}
                for impl in impls:
                    if not impl.applies(spec):
                        continue
                    warmup = 0 if impl.key in warmed or impl.skipped else 1
                    warmed.add(impl.key)
                    table.emit(run_row(impl, prob, env, warmup, measured))
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
