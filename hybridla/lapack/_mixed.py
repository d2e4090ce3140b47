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
"""
from __future__ import annotations

import contextlib
import functools
import math
import numbers
import time
from dataclasses import dataclass, field, replace as dataclass_replace

import numpy as np
from scipy.linalg import lapack

from ..backend.reduced import COMPUTE, LARGEST, REAL_ONLY, ReducedPrecisionOps
from ..scheduler import TaskGraph, run
from ._blocked import upload_all
from ._refine import refine
from ._scaling import balanced_scales, column_scales

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
                them, which inside GMRES is only their enqueueing (its Krylov basis is where A
                lives, DeviceSpace: the device's time shows where the Arnoldi step waits)
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
    inner_tol: float
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
    if not (_real(inner_tol) and 0 < inner_tol < 1):
        raise ValueError(f"inner_tol must be in (0, 1); got inner_tol={inner_tol!r}")
    if not isinstance(equilibrate, (bool, np.bool_)):
        raise ValueError(f"equilibrate must be True or False; got equilibrate={equilibrate!r}")
    return MixedOptions(lowest, refinement, None if tol is None else float(tol), int(max_iter),
                        float(inner_tol), int(max_inner), bool(equilibrate))


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


class TriangularPreconditioner:
    """M^-1 R = diag(scale_out) T_k^-op ... T_1^-op P diag(scale_in) R: the low-precision factors
    applied in their precision where they live, R and the result in the working precision. With
    a `butterfly` (keep_butterfly's pair for U and V: the factors are of U^T diag(r) A diag(c)
    V), M^-1 R = diag(scale_out) V T_k^-op ... P U^T diag(scale_in) R.
    `solves` lists (uplo, trans, diag) of the triangular solves with the leading n x n block of
    `low`; `permutation` (host indices) is LU's row interchanges, applied as a gather of the
    rows when R is rounded to the factors' precision (one pass, not a pass per interchange);
    or `pivots`, LAPACK's sequence of them, made into the permutation while the device
    inverts the diagonal blocks.

    One path: `apply` for blocks where the factors are (DeviceSpace's basis: R into the factors'
    precision and back by kernels, no host copy and no wait), and the call for host arrays
    (refine's x_0 and corrections), which puts R where the factors are, applies, and takes the
    result back.

    Range: the factors are of diag(scale_in) A diag(scale_out), entries about 1, but scale_in R
    has the magnitude of R / ||A||, which leaves float32's range for A near the working
    precision's limits (1e307: every entry underflows to 0; 1e-300: overflows). So a power of
    two g moves from the input side to the output side, M^-1 = diag(scale_out g) ...
    diag(scale_in / g) (the same operator: the solves are linear), with g = max scale_in: the
    rounded input is at most R's size, and the output scaling is done in the working precision.
    The call for host arrays also scales each column of R by a power of two to about 1 where it
    is far from it (a right-hand side of 1e300 or 1e-300), and the result back. Powers of two
    change no digit: for matrices in the ordinary range the results are those without.

    Each solve goes by blocks of `block` rows (the factorization's nb), with the inverses of the
    diagonal blocks made once (the backend's invert_triangular_blocks): per block,
    y_J := op(W_J) y_J, and the rest of y less the block column (row, for op "C") of T times
    y_J. The work is the same
    bandwidth-bound pass over the triangle as trsm's, as gemv-shaped products, which read the
    triangle faster than cuBLAS strsm on one column (perf/RESULTS.md, "Earlier today
    (14:10-14:24 UTC)")."""

    def __init__(self, ops, low, n, nrhs, solves, scale_in, scale_out, permutation=None,
                 butterfly=None, pivots=None):
        self.ops, self.low, self.n, self.solves = ops, low, n, solves
        scale_in, scale_out = balanced_scales(scale_in, scale_out)
        self.scale_in, self.scale_out, self.permutation = scale_in, scale_out, permutation
        self.butterfly = butterfly
        self.factors = low.block(0, n, 0, n)
        self.block = b = max(1, min(low.nb, n))
        low.workspace("preconditioner", n, nrhs)  # at its largest now: no allocation later
        low.workspace("preconditioner block", b, nrhs)
        self.scratch = low.workspace("inversion scratch", b, -(-max(b, n) // 4))
        self.seconds = 0.0
        self._recordings = {}
        self._kept = None  # the scales and permutation where the factors are
        started = time.perf_counter()
        # one set per triangle: the Cholesky's two solves (op N and C) share L's
        self.inverses = {key: self._invert_diagonal_blocks(*key)
                         for key in dict.fromkeys((uplo, diag) for uplo, _, diag in solves)}
        if pivots is not None:  # the host's share, while the device inverts
            self.permutation = lu_permutation(pivots)
        # the solves' recording (host work, nothing runs) while the device inverts: recorded at
        # the first application, it held the device idle (perf/RESULTS.md, "Windows factored
        # by leaves, one GMRES correction")
        lane = ops.lane("gpu:panel")
        with lane:
            self._replay_solves(lane, low.workspace("preconditioner", n, nrhs), launch=False)
        self.seconds += time.perf_counter() - started

    def __call__(self, R):
        """M^-1 R for a host array R (n x k, the working precision), as a new host array: R up,
        `apply`, the result down (one wait)."""
        started = time.perf_counter()
        try:
            ops, n, k = self.ops, self.n, R.shape[1]
            src, dst = (self.low.workspace(f"preconditioner {side}", n, k, dtype=R.dtype)
                        for side in ("argument", "result"))
            lane = ops.lane("gpu:panel")
            columns = column_scales(R)  # None where R's columns are all in range
            ops.from_host(lane, R if columns is None else R / columns, src)
            self._apply(src, dst)
            result = ops.to_host(lane, dst)
            if columns is not None:
                result *= columns
            return result
        finally:
            self.seconds += time.perf_counter() - started

    def _edges(self):
        return [(j0, min(j0 + self.block, self.n)) for j0 in range(0, self.n, self.block)]

    def _invert_diagonal_blocks(self, uplo, diag):
        """The inverses of T's diagonal blocks, W_J at columns J (block + 1) of a workspace
        (the backend's layout for invert_triangular_blocks)."""
        ops, b = self.ops, self.block
        inverses = self.low.workspace(f"diagonal inverses {uplo}{diag}", b,
                                      len(self._edges()) * (b + 1))
        lane = ops.lane("gpu:panel")
        with lane:
            ops.invert_triangular_blocks(lane, uplo, diag, self.factors, b, inverses,
                                         self.scratch)
        return inverses

    def apply(self, src, dst):
        """dst := M^-1 src for n x k blocks of the working precision where the factors live,
        enqueued without a wait; `seconds` counts the host's time to enqueue it."""
        started = time.perf_counter()
        self._apply(src, dst)
        self.seconds += time.perf_counter() - started

    def _apply(self, src, dst):
        ops, k = self.ops, src.shape[1]
        if self._kept is None:
            keep = functools.partial(ops.keep_on_device, self.low)
            self._kept = (keep("scale in", np.asarray(self.scale_in, np.float64)),
                          keep("permutation", None if self.permutation is None
                               else self.permutation.astype(np.int32)),
                          keep("scale out", np.asarray(self.scale_out, np.float64)))
        scale_in, permutation, scale_out = self._kept
        work = self.low.workspace("preconditioner", self.n, k)
        lane = ops.lane("gpu:panel")
        with lane:
            if self.butterfly is None:
                ops.vector_to_low(lane, src, work, scale_in, permutation)
                self._replay_solves(lane, work)
                ops.vector_from_low(lane, work, dst, scale_out)
                return
            # the factors are of U^T diag(r) A diag(c) V: in with U^T diag(r), out with diag(c) V
            left, right = self.butterfly
            mixed = self.low.workspace("preconditioner mixed", self.n, k, dtype=src.dtype)
            ops.butterfly_rows(lane, src, mixed, left, True, before=scale_in)
            ops.vector_to_low(lane, mixed, work, None, permutation)
            self._replay_solves(lane, work)
            ops.vector_from_low(lane, work, dst, None)
            ops.butterfly_rows(lane, dst, dst, right, False, after=scale_out)

    def _replay_solves(self, lane, work, launch=True):
        """The triangular solves on `work` (k columns), replayed: the same kernels on the same
        buffers for every k (launch=False: only recorded, for later)."""
        def solves():
            for uplo, trans, diag in self.solves:
                self._blocked_solve(lane, uplo, trans, self.inverses[uplo, diag], work)

        self.ops.replay(lane, self._recordings, work.shape[1], solves, launch=launch)

    def _blocked_solve(self, lane, uplo, trans, inverses, Y):
        """Y := op(T)^-1 Y, op "N" or "C": blocks from the top when op(T) is lower triangular,
        from the bottom when upper; after each block J, the rows still to solve lose op(T)'s
        part of block column J times Y_J."""
        ops, sub, T, n = self.ops, self.ops.sub_block, self.factors, self.n
        k = Y.shape[1]
        kept = self.low.workspace("preconditioner block", self.block, k)
        forward = (uplo == "L") == (trans == "N")
        edges = self._edges() if forward else self._edges()[::-1]
        b = self.block
        for j0, j1 in edges:
            Y_J, previous = sub(Y, j0, j1, 0, k), sub(kept, 0, j1 - j0, 0, k)
            W_J = sub(inverses, 0, j1 - j0, j0 // b * (b + 1), j0 // b * (b + 1) + j1 - j0)
            ops.lacpy(lane, "A", Y_J, previous)
            ops.gemm(lane, 1, W_J, previous, 0, Y_J, trans_a=trans)
            r0, r1 = (j1, n) if forward else (0, j0)
            if r0 == r1:
                continue
            # op(T)[rest, J]: T[rest, J] for "N", T[J, rest]^H for "C"
            coupling = sub(T, r0, r1, j0, j1) if trans == "N" else sub(T, j0, j1, r0, r1)
            ops.gemm(lane, -1, coupling, Y_J, 1, sub(Y, r0, r1, 0, k), trans_a=trans)


def lu_permutation(pivots) -> np.ndarray:
    """LAPACK's sequential interchanges (row i with row pivots[i], 0-based) as one gather:
    (P b) = b[perm]. laswp applies them to the row numbers (exact in float64): a Python loop
    over them was a third of the LU's refinement phase (perf/RESULTS.md, "Earlier today (H100
    14:53-14:56 UTC, H200 14:59-15:01 UTC)")."""
    if not len(pivots):
        return np.arange(0)
    rows = np.arange(len(pivots), dtype=np.float64).reshape(-1, 1)
    return lapack.dlaswp(rows, np.asarray(pivots, dtype=np.int32))[:, 0].astype(np.intp)


class WorkingOperator:
    """X -> A X (or A^H (A X), the normal equations' operator) in the working precision, where A
    lives: one pass over A per product (two for the normal equations)."""

    def __init__(self, ops, A, nrhs, uplo=None, normal=False):
        self.ops, self.A, self.uplo, self.normal = ops, A, uplo, normal
        self.whole = A.block(0, A.m, 0, A.n)
        A.workspace("refine", A.m + A.n, nrhs)  # X and the product, at their largest now
        self.seconds = 0.0

    def product(self, X, trans="N"):
        work = self.A.workspace("refine", self.A.m + self.A.n, X.shape[1])
        return self.ops.apply_to_host(self.ops.lane("gpu:panel"), self.whole, X, trans,
                                      self.uplo, work)

    def __call__(self, X):
        started = time.perf_counter()
        AX = self.product(X)
        result = self.product(AX, "C") if self.normal else AX
        self.seconds += time.perf_counter() - started
        return result

    def apply(self, src, dst):
        """dst := A src (A^H A src) for blocks where A lives (DeviceSpace's basis), no wait.
        `seconds` counts the host's time to enqueue it."""
        started = time.perf_counter()
        ops, lane = self.ops, self.ops.lane("gpu:panel")
        with lane:
            if self.normal:
                between = self.A.workspace("refine normal", self.A.m, src.shape[1])
                ops.apply(lane, self.whole, src, between)
                ops.apply(lane, self.whole, between, dst, "C")
            else:
                ops.apply(lane, self.whole, src, dst, "N", self.uplo)
        self.seconds += time.perf_counter() - started


class DeviceSpace:
    """refine's Krylov space where A lives (the methods of lapack/_refine.HostSpace): the basis
    V and Z = M^-1 V in workspaces of the working matrix's store, column (j, c) at j k + c, so
    that step j's columns are one block; the preconditioner and the product run from and into
    them (TriangularPreconditioner.apply, WorkingOperator.apply), and Gram-Schmidt is gemv's
    there. The host gets H's column only: one wait per Arnoldi step. With the basis on the
    host, each step moved four vectors of n across and ran its Gram-Schmidt on the CPU: a
    good part of each GMRES iteration (perf/RESULTS.md, "Earlier today (H100 16:00-16:02 UTC,
    H200 16:02 UTC)", and "Measurements formerly in docstrings")."""

    def __init__(self, ops, operator, preconditioner, counter, n, k, m, dtype):
        self.ops, self.operator, self.preconditioner = ops, operator, preconditioner
        self.counter, self.n, self.k, self.m = counter, n, k, m
        store = operator.A
        self.V = store.workspace("krylov V", n, (m + 1) * k)
        self.Z = store.workspace("krylov Z", n, m * k)
        self.W = store.workspace("krylov W", n, k)
        self.D = store.workspace("krylov D", n, k)
        self.y = store.workspace("krylov y", m + 1, 1)
        # per column: h of the first pass (m + 1 rows), of the second, and ||w||_2^2
        self.coefficients = store.workspace("krylov coefficients", 2 * m + 3, k)
        self.host_coefficients = np.empty((2 * m + 3, k), dtype, order="F")  # store's dtype
        self.lane = ops.lane("gpu:panel")

    def _column(self, B, index):
        return self.ops.sub_block(B, 0, self.n, index, index + 1)

    def start(self, R, running, beta):
        """V[:, c] (step 0) := R_c / beta_c."""
        scaled = np.zeros(R.shape, R.dtype, order="F")
        scaled[:, running] = R[:, running] / beta[running]
        self.ops.from_host(self.lane, scaled, self.ops.sub_block(self.V, 0, self.n, 0,
                                                                 R.shape[1]))

    def arnoldi(self, running, j):
        """Step j (see HostSpace.arnoldi), the solves and products one call per run of
        consecutive columns."""
        ops, sub, n, k, m = self.ops, self.ops.sub_block, self.n, self.k, self.m
        for c0, c1 in _runs(running):
            V_j, Z_j = (sub(B, 0, n, j * k + c0, j * k + c1) for B in (self.V, self.Z))
            self.preconditioner.apply(V_j, Z_j)
            self.operator.apply(Z_j, sub(self.W, 0, n, c0, c1))
            self.counter.solves += 1
            self.counter.matvecs += 1
        C, lane = self.coefficients, self.lane
        with lane:
            for c in running:
                basis, w = ops.strided_columns(self.V, c, j + 1, k), self._column(self.W, c)
                for first in (0, m + 1):  # CGS2: h = V^H w, w -= V h, twice
                    h = sub(C, first, first + j + 1, c, c + 1)
                    ops.gemm(lane, 1, basis, w, 0, h, trans_a="C")
                    ops.gemm(lane, -1, basis, h, 1, w)
                ops.gemm(lane, 1, w, w, 0, sub(C, 2 * m + 2, 2 * m + 3, c, c + 1), trans_a="C")
        host = ops.to_host(lane, C, out=self.host_coefficients)
        return [(host[:j + 1, c] + host[m + 1:m + 2 + j, c],
                 float(np.sqrt(max(host[2 * m + 2, c].real, 0.0)))) for c in running]

    def extend(self, c, j, hnext):
        """V[:, (j + 1) k + c] := w_c / hnext."""
        with self.lane:
            self.ops.scale_copy(self.lane, 1.0 / hnext, self._column(self.W, c),
                                self._column(self.V, (j + 1) * self.k + c))

    def combination_inf_norm(self, c, q) -> float:
        """||V_c q||_inf, V_c the first len(q) basis vectors of column c: one gemv here, the
        vector to the host for its largest entry."""
        ops, lane = self.ops, self.lane
        q_dev, out = ops.sub_block(self.y, 0, len(q), 0, 1), self._column(self.D, 0)
        ops.from_host(lane, np.asarray(q, self.host_coefficients.dtype).reshape(-1, 1), q_dev)
        with lane:
            ops.gemm(lane, 1, ops.strided_columns(self.V, c, len(q), self.k), q_dev, 0, out)
        return float(np.abs(ops.to_host(lane, out)).max())

    def combine(self, R, solutions):
        """D (host): column c = Z_c y_c for `solutions` {c: y_c}, Z_c its columns j k + c."""
        ops, lane = self.ops, self.lane
        D = ops.sub_block(self.D, 0, self.n, 0, R.shape[1])
        with lane:
            ops.laset(lane, "A", 0, 0, D)
        for c, y in solutions.items():
            y_dev = ops.sub_block(self.y, 0, len(y), 0, 1)
            ops.from_host(lane, np.asarray(y, R.dtype).reshape(-1, 1), y_dev)
            with lane:
                ops.gemm(lane, 1, ops.strided_columns(self.Z, c, len(y), self.k), y_dev, 0,
                         self._column(D, c))
        return ops.to_host(lane, D)


def _runs(columns):
    """(first, last + 1) of each run of consecutive numbers in the sorted list `columns`."""
    runs = []
    for c in columns:
        if runs and runs[-1][1] == c:
            runs[-1][1] = c + 1
        else:
            runs.append([c, c + 1])
    return [tuple(run) for run in runs]


def run_refinement(operator, preconditioner, B, anorm, options, n):
    """refine() with the stopping test's tol defaulting to sqrt(n) eps (MAGMA, cuSOLVER), and
    GMRES's Krylov space where A lives (DeviceSpace)."""
    eps = float(np.finfo(B.dtype).eps)
    tol = options.tol if options.tol is not None else np.sqrt(n) * eps
    method = options.refinement
    return refine(operator, preconditioner, B, anorm=anorm, method=method, tol=tol,
                  max_iter=options.max_iter, inner_tol=options.inner_tol,
                  max_inner=options.max_inner,
                  krylov_space=functools.partial(DeviceSpace, operator.ops, operator,
                                                 preconditioner))


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
        low = self.ops.host_matrix(self.A.host_source, None, self.plan.nb, dtype=dtype,
                                   settings=self.plan.device_settings)
        try:
            upload_all(low, self.plan)
            low.end_staging()
        except BaseException:
            low.close()
            raise
        return low

    def start(self):
        self._wait = self.A.upload_in_background()

    def arrived(self):
        """A, once it is all on the device (waits for the upload)."""
        if self._wait is not None:
            wait, self._wait = self._wait, None
            wait()
        return self.A


class MixedSolver:
    """The phases of a mixed-precision solve, in order; a driver (gesv_mixed, posv_mixed,
    gels_mixed) says how to scale, which factorization to run and how its factors precondition.

    solve(A, B, arriving): A the working-precision tile store (where the user's matrix lives,
    never written), B the right-hand sides (host array, n x nrhs); `arriving` an ArrivingMatrix
    when A is still on the host (its low-precision copy then comes from the host, rounded there,
    and is scaled in place on the device: for power-of-two scales that is the same rounding).
    Returns (X, MixedInfo): X None for codes -2 and -3 (no solution was computed), else the
    refined solution, which for codes < 0 did not pass the stopping test (the caller falls back,
    or not). The low-precision copy is a tile store of its own, freed whatever happens."""

    uplo = None        # Hermitian A stored in this triangle (posv_mixed)
    normal = False     # refine the normal equations A^H A x = A^H b (gels_mixed)

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
        """A where the device can read it (after its upload, for an arriving matrix)."""
        return self.arriving.arrived() if self.arriving is not None else A

    def solve(self, A, B, arriving=None):
        ops, options = self.ops, self.options
        n, nrhs = A.n, B.shape[1]
        self.dtype = A.dtype
        phases = Phases()
        info = MixedInfo(lowest=options.lowest, refinement=options.refinement)
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
                reduced = ReducedPrecisionOps(ops, options.lowest, low)
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
                operator = WorkingOperator(ops, A, nrhs, uplo=self.uplo, normal=self.normal)
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
