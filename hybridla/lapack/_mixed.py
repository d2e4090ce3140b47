"""What the mixed-precision solvers share (gesv_mixed, posv_mixed, gels_mixed): the four phases

    [convert]  scale A exactly (powers of two) so that its entries are about 1, and round the
               scaled copy to float32 (complex64): the storage of the low-precision factors
    [factor]   the ordinary blocked factorization of that copy on the engine, its GEMMs on the
               tensor cores (backend/reduced.py)
    [refine]   iterative refinement in the working precision with the true A (lapack/_refine.py),
               preconditioned by the low-precision factors
    [fallback] the caller's: a working-precision solve when refinement did not converge

and the result's `MixedInfo`. Scaling is what makes half precision usable: IEEE half overflows
above 65504 and loses everything below 6e-8, while a matrix scaled to entries of about 1 keeps
its LU factors (|l_ij| <= 1, |u_ij| bounded by the growth factor) well inside that range. The
scales are powers of two, so scaling changes no digit of A and the refinement can work with the
unscaled A: M^-1 r = C (LU)^-1 R r for the factors of R A C.

Here: the options and their check, MixedInfo, the scaling and rounding of the convert phase,
ArrivingMatrix (a host matrix arriving during the factorization), HostResidentMatrix (a host
matrix that stays there: only its low-precision copy fits the device) and MixedSolver, the
phases' template. The preconditioner is lapack/_preconditioner.py; the working-precision operator and
the Krylov space where A lives, lapack/_mixed_operators.py.
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import time
from dataclasses import dataclass, field, replace as dataclass_replace

import numpy as np

from ..backend.reduced import COMPUTE, LARGEST, REAL_ONLY, ReducedPrecisionOps
from ..backend.reduced import workspace_bytes as reduced_workspace_bytes
from ._blocked import upload_all
from ._mixed_operators import DeviceSpace, HostOperator, WorkingOperator, run_refinement
from ._preconditioner import TriangularPreconditioner

LOW_DTYPE = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(np.float32): np.dtype(np.float32),
             np.dtype(np.complex128): np.dtype(np.complex64),
             np.dtype(np.complex64): np.dtype(np.complex64)}
REFINEMENTS = ("classical-gmres", "gmres", "classical", "none")
OVERFLOW, FACTORIZATION_FAILED = -2, -3  # MAGMA's and cuSOLVER's codes (refine returns the rest)


@dataclass
class MixedInfo:
    """How a mixed-precision solve went.

    iterations  MAGMA's and cuSOLVER's code: k >= 0 converged after k refinement iterations
                (0: the low-precision solution already passed the stopping test); -1 refinement
                stopped early (stagnating, diverging, or "none" not accurate enough); -2 the
                scaled matrix overflowed the low precision; -3 the low-precision factorization
                failed (a zero pivot, a non-positive minor); -max_iter not converged
    fell_back   the answer came from a working-precision solve (any code < 0, fallback on)
    residuals   backward errors ||b - A x||_inf / (||A||_inf ||x||_inf) (worst column): of the
                low-precision solution, then after each refinement iteration
    inner_iterations  GMRES iterations in all
    info        LAPACK's info of the low-precision factorization (0, or where it failed; for
                the QR of gels_mixed, the first diagonal entry of R that failed its rank test)
    reason      why no solution came from the low precision (codes -2 and -3), in words: what
                the error says without fallback; "" otherwise
    shift       the diagonal shift the low-precision Cholesky needed (posv_mixed), else 0
    seconds     wall time of each phase: convert, factor, refine, fallback, total; inside
                convert, "convert: upload" (a host matrix's rounded copy going up); inside
                refine, "refine: A products" and "refine: preconditioner": the host's time in
                them, which inside GMRES is only their enqueueing (its Krylov basis is where
                the backend computes, DeviceSpace: the device's time shows where the Arnoldi
                step waits), except for products that run on the host (a_on_host)
    a_on_host   A stayed in the user's host array and every product with it in the working
                precision (residuals, GMRES's A v) ran on the host, by host BLAS, only vectors
                crossing the link (HostResidentMatrix: the CPU interface where only the
                low-precision copy fits the device budget, or ooc="always"); False: they ran
                where the backend computes, on A's copy there
    kept_columns  with a_on_host, how many of A's last columns were kept where the backend
                computes instead (those that fit beside the low-precision copy): the
                products read them there
    """
    iterations: int = 0
    fell_back: bool = False
    residuals: list = field(default_factory=list)
    inner_iterations: int = 0
    lowest: str = "half"
    refinement: str = "classical-gmres"
    info: int = 0
    shift: float = 0.0
    seconds: dict = field(default_factory=dict)
    reason: str = ""
    a_on_host: bool = False
    kept_columns: int = 0

    @property
    def converged(self) -> bool:
        return self.iterations >= 0


@dataclass
class MixedOptions:
    """The refinement's parameters, checked (see linalg.solve_mixed)."""
    lowest: str
    refinement: str
    tol: float | None
    max_iter: int
    inner_tol: float | None  # None: "auto", the operator's (_mixed_operators)
    max_inner: int
    equilibrate: bool


def check_options(dtype, lowest, refinement, tol, max_iter, inner_tol, max_inner, equilibrate):
    """ValueError naming the argument for a bad option; returns MixedOptions."""
    if lowest not in COMPUTE:
        raise ValueError(f"lowest must be one of {COMPUTE}; got lowest={lowest!r}")
    if np.dtype(dtype).kind == "c" and lowest in REAL_ONLY:
        raise ValueError(f"lowest={lowest!r} is for real matrices (cuBLAS has no tensor-core "
                         f"GEMM with complex 16-bit operands); use 'tf32' or 'single' for "
                         f"{np.dtype(dtype).name}")
    if refinement not in REFINEMENTS:
        raise ValueError(f"refinement must be one of {REFINEMENTS}; got "
                         f"refinement={refinement!r}")
    if tol is not None and not (_real(tol) and math.isfinite(tol) and tol > 0):
        raise ValueError(f"tol must be a positive number (or None); got tol={tol!r}")
    for name, value in (("max_iter", max_iter), ("max_inner", max_inner)):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) \
                or value < 1:
            raise ValueError(f"{name} must be an integer >= 1; got {name}={value!r}")
    if inner_tol != "auto" and not (_real(inner_tol) and 0 < inner_tol < 1):
        raise ValueError(f"inner_tol must be in (0, 1) or 'auto'; got inner_tol={inner_tol!r}")
    if not isinstance(equilibrate, (bool, np.bool_)):
        raise ValueError(f"equilibrate must be True or False; got equilibrate={equilibrate!r}")
    return MixedOptions(lowest, refinement, None if tol is None else float(tol), int(max_iter),
                        None if inner_tol == "auto" else float(inner_tol), int(max_inner),
                        bool(equilibrate))


def _real(value) -> bool:
    """A real number (not a bool, not a string): what tol and inner_tol may be."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


class Phases:
    """Wall-clock seconds per phase (`with phases("factor"): ...`)."""

    def __init__(self):
        self.seconds, self._start = {}, time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, name):
        started = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - started

    def total(self):
        self.seconds["total"] = time.perf_counter() - self._start
        return self.seconds


def general_scaling(ops, A, equilibrate, rows=True, meanwhile=None):
    """The backend's Equilibration of A: row and column scales r, c (powers of two; ones when
    not `equilibrate`) with the entries of diag(r) A diag(c) at most about 1 in modulus, and
    the row and column sums and maxima of |A| (||A||_inf, ||A||_1, a zero row or column): two
    passes over A. `rows=False` scales columns only (least squares: row scaling would weight
    the problem). Returns (Equilibration, the result of `meanwhile()`, host work run while
    the device makes the passes; None without it)."""
    return ops.equilibration(ops.lane("gpu:update"), A, A.block(0, A.m, 0, A.n),
                             equilibrate and rows, equilibrate, meanwhile)


def keep_butterfly(ops, low, butterfly):
    """A RandomButterfly's groups where the factors of `low` live (keep_on_device): the pair
    that narrow and TriangularPreconditioner take."""
    keep = functools.partial(ops.keep_on_device, low)
    return keep("butterfly left", butterfly.left), keep("butterfly right", butterfly.right)


def narrow(ops, A, low, r, c, lowest, butterfly=None) -> bool:
    """low := diag(r) A diag(c) in float32 (complex64), or W_L^T diag(r) A diag(c) W_R with a
    `butterfly` (keep_butterfly's pair); True when an entry exceeds what the `lowest` precision
    can hold (the tensor cores would see an infinity): code -2."""
    return ops.narrow(ops.lane("gpu:update"), low, A.block(0, A.m, 0, A.n),
                      low.block(0, low.m, 0, low.n), r, c, LARGEST[lowest], butterfly)

def rounded_copy(ops, source, plan, dtype):
    """The host array `source` (any layout) in `dtype` (rounded where narrower), in a tile
    store of its own where the backend computes: on a device, converted by the host threads
    that stage it and uploaded whole (a source already of `dtype` but not column-major is
    made so first, on the host: the copy's size)."""
    if not ops.has_device:
        return ops.host_matrix(source, None, plan.nb, dtype=dtype)
    if source.dtype == dtype and not source.flags.f_contiguous:
        source = np.asfortranarray(source)  # only a rounding copy reads any layout
    low = ops.host_matrix(source, None, plan.nb, dtype=dtype, settings=plan.device_settings)
    try:
        upload_all(low, plan)
        low.end_staging()
    except BaseException:
        low.close()
        raise
    return low


def solve_workspace_bytes(m, n, dtype, nb, nrhs, options: MixedOptions, triangles=2,
                          herk_panels=False) -> int:
    """The memory a mixed solve of an m x n A (working precision `dtype`) and nrhs right-hand
    sides keeps where the backend computes beyond its low-precision copy's required_bytes
    (the copy, its panels' and lanes' workspaces): the reduced-precision factorization's
    buffers (`herk_panels` as MixedSolver's), the preconditioner's (of `triangles` triangles:
    the LU's two, the QR's or the Cholesky's one), GMRES's Krylov space with its kept
    products, and the products' vectors. All of it lives as long as the copy; the device counts
    it against the budget beside the copy and A's kept columns (solve_mixed with A on the
    host)."""
    low = LOW_DTYPE[np.dtype(dtype)]
    itemsize = np.dtype(dtype).itemsize
    return (reduced_workspace_bytes(m, n, nb, options.lowest, herk_panels)
            + TriangularPreconditioner.workspace_bytes(n, nb, nrhs, triangles, low, dtype)
            + DeviceSpace.workspace_bytes(n, nrhs, options.max_inner, dtype,
                                          keep_products=True)
            + (m + n) * nrhs * itemsize)


class ArrivingMatrix:
    """A host-resident working matrix on a device backend (the mixed solvers' CPU interface), in
    a tile store `A` that is allocated but still empty. Its low-precision copy goes up first,
    rounded by the host threads that stage it (half of A's bytes to move before the
    factorization can start); A itself follows from a host thread during the factorization, since
    only the refinement reads it."""

    def __init__(self, ops, A, plan):
        self.ops, self.A, self.plan = ops, A, plan
        self._wait = None

    def low_copy(self, dtype):
        """The host matrix rounded to `dtype`, uploaded (a tile store of its own)."""
        return rounded_copy(self.ops, self.A.host_source, self.plan, dtype)

    def start(self):
        self._wait = self.A.upload_in_background()

    def arrived(self):
        """A, once it is all on the device (waits for the upload)."""
        if self._wait is not None:
            wait, self._wait = self._wait, None
            wait()
        return self.A


class HostResidentMatrix(ArrivingMatrix):
    """A working matrix that stays in the user's host array `a` (m x n, any layout, of the
    working precision `dtype` or narrower): the CPU interface when only its low-precision copy
    fits the device budget (or ooc="always"). It stands for A in MixedSolver.solve and is its
    own ArrivingMatrix, one that never goes up whole: the low-precision copy is rounded and
    uploaded as ArrivingMatrix's (on the host backend, rounded in host memory), the convert
    phase and the factorization run on it where the backend computes as in core, and the
    refinement's products with A run on the host against `a` (HostOperator), only vectors
    crossing the link. The solve never writes `a`.

    `kept` of A's last columns (those that fit the budget beside the low-precision copy) also
    go up in the working precision, into a store of their own that stays where the backend
    computes, while the device factors the copy (as ArrivingMatrix's A does): each product
    then reads only the other n - kept columns on the host, where a pass over A costs about
    as much as a GMRES iteration (the host's memory at about 100 GB/s against the device's
    3 TB/s). For the same reason each outer iteration's residual comes from its correction's
    products there, not from one more pass (HostOperator.residual_from_products).

    `meanwhile()`, if given, runs once the copy is up and the host is free (the device
    factors): the caller's check that `a` is finite (a Future of a bool), read back by the
    caller after the solve."""

    def __init__(self, ops, a, dtype, plan, kept=0, meanwhile=None):
        super().__init__(ops, self, plan)
        self.a, self.dtype = a, np.dtype(dtype)
        self.m, self.n = a.shape
        self.split = self.n - max(0, min(int(kept), self.n))  # columns split: on the host
        self.kept = None  # the store of columns split: where the backend computes
        self.meanwhile, self.beside = meanwhile, None

    def low_copy(self, dtype):
        low = rounded_copy(self.ops, self.a, self.plan, dtype)
        if self.split < self.n:
            try:
                self.kept = self._kept_store(dtype)
            except BaseException:
                low.close()
                raise
        return low

    def _kept_store(self, low_dtype):
        """The kept columns' store: on the host backend a copy; on a device allocated now and
        filled by `start` (its staging slots hold half as many of these columns as of the
        copy's, so that the slots the copy grew serve both)."""
        source, nb = self.a[:, self.split:], max(1, self.plan.nb * np.dtype(low_dtype).itemsize
                                                  // self.dtype.itemsize)
        if not self.ops.has_device:
            return self.ops.host_matrix(source, None, nb, dtype=self.dtype)
        return self.ops.matrix(self.m, self.n - self.split, self.dtype, nb, host_source=source,
                               settings=self.plan.device_settings)

    def start(self):
        """A stays on the host but for its kept columns, which go up now, from a host thread of
        their own, beside `meanwhile`, while the device factors the copy."""
        if self.meanwhile is not None:
            self.beside = self.meanwhile()
        if self.kept is not None and self.ops.has_device:
            self._wait = self.kept.upload_in_background()

    def operator(self, low, uplo=None, normal=False):
        """The refinement's operator: products on the host (and with the kept columns where
        they are), the Krylov basis in `low`'s store, by block columns of the factorization's
        width."""
        return HostOperator(self.ops, self.a, self.dtype, low, self.plan.nb, uplo=uplo,
                            normal=normal, kept=self.kept)

    def narrow_into(self, low, r, c, uplo=None):
        """low := diag(r) A diag(c) rounded to low's precision again (its `uplo` triangle
        only, when given), made on the host a block column at a time and put where low
        lives: a retried factorization's copy (posv_mixed), without a second copy of A's
        size on the device."""
        ops, lane, nb = self.ops, self.ops.lane("gpu:update"), self.plan.nb
        for j0 in range(0, self.n, nb):
            j1 = min(j0 + nb, self.n)
            r0, r1 = {"L": (j0, self.m), "U": (0, j1), None: (0, self.m)}[uplo]
            with np.errstate(over="ignore", invalid="ignore"):  # the factorization judges
                block = (self.a[r0:r1, j0:j1] * (r[r0:r1, None] * c[None, j0:j1]))
                block = np.asfortranarray(block, dtype=low.dtype)
            ops.from_host(lane, block, low.block(r0, r1, j0, j1))

    def close(self):
        """Free the kept columns' store."""
        if self.kept is not None:
            kept, self.kept = self.kept, None
            kept.close()


class MixedSolver:
    """The phases of a mixed-precision solve, in order; a driver (gesv_mixed, posv_mixed,
    gels_mixed) says how to scale, which factorization to run and how its factors precondition.

    solve(A, B, arriving): A the working-precision tile store (where the user's matrix lives,
    never written), or a HostResidentMatrix (A stays in the user's host array: its products
    run there), B the right-hand sides (host array, n x nrhs); `arriving` an ArrivingMatrix
    when A is still on the host (its low-precision copy then comes from the host, rounded there,
    and is scaled in place on the device: for power-of-two scales that is the same rounding;
    a HostResidentMatrix is its own).
    Returns (X, MixedInfo): X None for codes -2 and -3 (no solution was computed), else the
    refined solution, which for codes < 0 did not pass the stopping test (the caller falls back,
    or not). The low-precision copy is a tile store of its own, freed whatever happens."""

    uplo = None        # Hermitian A stored in this triangle (posv_mixed)
    normal = False     # refine the normal equations A^H A x = A^H b (gels_mixed)
    herk_panels = False  # the factorization rounds HERK panels once for several products
                         # (the Cholesky's update): their buffers are kept (backend/reduced.py)

    def __init__(self, ops, options: MixedOptions, plan):
        self.ops, self.options, self.plan = ops, options, plan

    # -- what a driver defines -----------------------------------------------------------------
    def scale(self, A):
        """(r, c, anorm): the exact scales of the low-precision copy diag(r) A diag(c), and the
        norm the stopping test uses."""
        raise NotImplementedError

    def scale_and_narrow(self, source, low):
        """(r, c, anorm, overflow): `scale`, then low := diag(r) source diag(c) rounded (overflow:
        code -2). A driver may do both in fewer passes over `source`."""
        r, c, anorm = self.scale(source)
        return r, c, anorm, narrow(self.ops, source, low, r, c, self.options.lowest)

    def factor(self, A, low, plan, r, c) -> int:
        """Factor `low` in place on the engine; LAPACK's info."""
        raise NotImplementedError

    def preconditioner(self, low, nrhs, r, c) -> TriangularPreconditioner:
        raise NotImplementedError

    def out_of_range(self, anorm) -> str:
        """Why the refinement's stopping test (||r|| <= tol ||x|| anorm) cannot be evaluated in
        the working precision for this A, in words, or "". Here: a norm that is not finite
        (entries of A so near the largest float that their row sums overflow; NaN)."""
        if math.isfinite(anorm):
            return ""
        return (f"||a||_inf = {anorm} is not finite in {np.dtype(self.dtype).name} (entries "
                f"near the largest float): the refinement cannot test convergence")

    def failure_reason(self, info) -> str:
        """What a factorization that returned `info` > 0 means, in words ("": the caller's
        words for it)."""
        return ""

    def rhs_scales(self, B, anorm):
        """Powers of two, one per column of B, by which the driver scales the right-hand sides
        before refining (X comes back divided by them), or None: none."""
        return None

    # -- the template --------------------------------------------------------------------------
    def working_matrix(self, A):
        """A where the device can read it (after its upload, for an arriving matrix; a
        HostResidentMatrix stays where it is)."""
        return self.arriving.arrived() if self.arriving is not None else A

    def narrow_again(self, A, low, r, c):
        """low := the rounded diag(r) A diag(c) again, for a factorization retried after one
        that overwrote it (posv_mixed's shifts); only the `uplo` triangle where A is
        Hermitian."""
        A = self.working_matrix(A)
        if isinstance(A, HostResidentMatrix):
            A.narrow_into(low, r, c, self.uplo)
        else:
            narrow(self.ops, A, low, r, c, self.options.lowest)

    def operator(self, A, low, nrhs):
        """The refinement's working-precision operator, where A is."""
        if isinstance(A, HostResidentMatrix):
            return A.operator(low, uplo=self.uplo, normal=self.normal)
        return WorkingOperator(self.ops, A, nrhs, uplo=self.uplo, normal=self.normal)

    def solve(self, A, B, arriving=None):
        ops, options = self.ops, self.options
        n, nrhs = A.n, B.shape[1]
        self.dtype = A.dtype
        phases = Phases()
        info = MixedInfo(lowest=options.lowest, refinement=options.refinement,
                         a_on_host=isinstance(A, HostResidentMatrix))
        if info.a_on_host:
            arriving = A
        self.arriving, low = arriving, None
        try:
            with phases("convert"):
                if arriving is None:
                    # a device store follows the run's device settings (its memory pool)
                    low = ops.matrix(A.m, A.n, LOW_DTYPE[A.dtype], self.plan.nb,
                                     settings=self.plan.device_settings) if ops.has_device \
                        else ops.matrix(A.m, A.n, LOW_DTYPE[A.dtype], self.plan.nb)
                    source = A
                else:  # the norm from the rounded entries: 2^-24 relative, nothing to the test
                    with phases("convert: upload"):
                        low = arriving.low_copy(LOW_DTYPE[A.dtype])
                    if info.a_on_host:
                        info.kept_columns = A.n - A.split
                    arriving.start()
                    source = low  # scaled in place
                r, c, anorm, overflow = self.scale_and_narrow(source, low)
            if overflow:
                info.iterations = OVERFLOW
                info.reason = (f"the matrix overflows {options.lowest} precision after "
                               f"scaling" if options.equilibrate else
                               f"the matrix overflows {options.lowest} precision "
                               f"(equilibrate=False)")
                return None, self._done(info, phases)
            info.reason = self.out_of_range(anorm)
            if info.reason:  # no factorization: the refinement could not judge its result
                info.iterations = OVERFLOW
                return None, self._done(info, phases)
            with phases("factor"):
                reduced = ReducedPrecisionOps(ops, options.lowest, low,
                                              herk_panels=self.herk_panels)
                info.info = self.factor(A, low, dataclass_replace(self.plan, backend=reduced),
                                        r, c)
                overflow = reduced.overflowed()
            if overflow or info.info != 0:
                # a zero pivot first: what it leaves infinite may overflow a later rounding
                info.iterations = FACTORIZATION_FAILED if info.info != 0 else OVERFLOW
                if info.iterations == OVERFLOW:
                    info.reason = (f"the {options.lowest} factorization overflowed (a product "
                                   f"exceeded {options.lowest}'s range)")
                else:
                    info.reason = self.failure_reason(info.info)
                return None, self._done(info, phases)
            with phases("refine"):
                A = self.working_matrix(A)
                operator = self.operator(A, low, nrhs)
                scales = self.rhs_scales(B, anorm)
                if scales is not None:
                    B = (B * scales).astype(B.dtype, copy=False)
                rhs = operator.product(B, "C") if self.normal else B
                preconditioner = self.preconditioner(low, nrhs, r, c)
                result = run_refinement(operator, preconditioner, rhs, anorm, options, n)
                if scales is not None:
                    result.x /= scales

            # where the refinement's time went: products with A, low-precision solves, the rest
            # (the host's Krylov arithmetic)
            phases.seconds["refine: A products"] = operator.seconds
            phases.seconds["refine: preconditioner"] = preconditioner.seconds
            info.iterations, info.residuals = result.iterations, list(result.residuals)
            info.inner_iterations = result.inner_iterations
            return result.x, self._done(info, phases)
        finally:
            try:
                self.working_matrix(A)  # no upload may still be writing when A is freed
            finally:
                if low is not None:
                    low.close()

    @staticmethod
    def _done(info, phases):
        info.seconds = phases.total()
        return info
