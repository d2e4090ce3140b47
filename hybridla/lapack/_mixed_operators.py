"""The refinement's working-precision side: the operator X -> A X (or A^H A X for the
normal equations) in the working precision where A lives (WorkingOperator: A in a tile store;
HostOperator: A kept in the user's host array, its products by host BLAS), GMRES's Krylov
space with its basis where the backend computes (DeviceSpace), and refine() called with them
(run_refinement).

DeviceSpace keeps V (the Arnoldi basis) and Z = M^-1 V, column (j, c) at j k + c so that step
j's columns are one block; each step applies the preconditioner and A from and into them,
orthogonalizes by classical Gram-Schmidt twice (CGS2: h = V^H w, w -= V h, twice) and sends
only H's column and ||w||_2 to the host, which solves GMRES's small least-squares problem
(lapack/_refine.py). The stopping test's tol defaults to sqrt(n) eps (MAGMA, cuSOLVER).
"""
from __future__ import annotations

import functools
import time

import numpy as np
from scipy.linalg import get_blas_funcs

from ._refine import refine


class _Operator:
    """What both operators share: refine's callback X -> A X (A^H (A X) for the normal
    equations) on host arrays, from `product`, its time in `seconds`."""

    uplo: str | None
    normal: bool
    seconds: float
    # GMRES-IR's relative residual per correction where the caller leaves it to the operator
    # (mixed.inner_tol "auto"): where A lives, an outer iteration's residual is one cheap pass
    # there (configuration defaults.yaml says why 1e-8)
    auto_inner_tol = 1e-8
    # whether refine forms each new residual from a correction's products (lapack/_refine.py):
    # where a pass over A is cheap, the direct one costs nothing worth saving
    residual_from_products = False

    def product(self, X, trans="N"):
        raise NotImplementedError

    def __call__(self, X):
        started = time.perf_counter()
        AX = self.product(X)
        result = self.product(AX, "C") if self.normal else AX
        self.seconds += time.perf_counter() - started
        return result


class WorkingOperator(_Operator):
    """X -> A X (or A^H (A X), the normal equations' operator) in the working precision, where A
    lives: one pass over A per product (two for the normal equations). `store` (A itself) is
    where DeviceSpace keeps the Krylov basis."""

    def __init__(self, ops, A, nrhs, uplo=None, normal=False):
        self.ops, self.A, self.uplo, self.normal = ops, A, uplo, normal
        self.store = A
        self.whole = A.block(0, A.m, 0, A.n)
        A.workspace("refine", A.m + A.n, nrhs)  # X and the product, at their largest now
        self.seconds = 0.0

    def product(self, X, trans="N"):
        work = self.A.workspace("refine", self.A.m + self.A.n, X.shape[1])
        return self.ops.apply_to_host(self.ops.lane("gpu:panel"), self.whole, X, trans,
                                      self.uplo, work)

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


class HostOperator(_Operator):
    """X -> A X (or A^H (A X)) in the working precision `dtype` against the user's host array
    `a` (any layout; a narrower dtype is widened a block column at a time), by host BLAS: the
    mixed solvers' operator when A's working-precision matrix stays on the host
    (lapack/_mixed.HostResidentMatrix). One pass over A per product (two for the normal
    equations), by block columns of `width`, no temporary larger than a block column: at
    n = 100,000 a full-size one would be another 80 GB of host memory. With `uplo`, A is
    Hermitian and only that triangle is read. `store` is where DeviceSpace keeps the Krylov
    basis (the low-precision factors' store): `apply` takes a block of it to the host,
    multiplies there and puts the product back, so only vectors cross the link. `seconds`
    is the host's time in the products (here they run, not only their enqueueing).

    `kept`: a store where the backend computes holding A's last columns in the working
    precision (HostResidentMatrix's; not with `uplo`): the products read those there and
    only the columns before them on the host, A = [A_host, A_kept]:
        A X = A_host X_host + A_kept X_kept,    A^H X = [A_host^H X; A_kept^H X]."""

    # every product is a pass over A on the host: a correction runs until its estimate says
    # x + d passes the stopping test, since a second one would start a new Krylov space (at
    # n = 100,000, inner_tol 1e-8 ended the first correction at 1.9e-13 and a second outer
    # iteration took three more passes: perf/RESULTS.md, issue 31)
    auto_inner_tol = float(np.finfo(np.float64).tiny)
    # and each outer iteration's residual, a further pass, is formed from the correction's
    # products instead (r - (A Z) y; lapack/_refine.py says why it is as good): at n =
    # 100,000 one pass of 9
    residual_from_products = True

    def __init__(self, ops, a, dtype, store, width, uplo=None, normal=False, kept=None):
        if kept is not None and uplo is not None:
            raise ValueError("HostOperator: kept columns with a Hermitian triangle")
        self.ops, self.a, self.dtype, self.store = ops, a, np.dtype(dtype), store
        self.width, self.uplo, self.normal = max(1, int(width)), uplo, normal
        self.kept = kept
        self.split = a.shape[1] - (0 if kept is None else kept.n)
        self.seconds = 0.0

    def product(self, X, trans="N"):
        """op(A) X for a host X (n x k, or m x k for op "C"), a new F-ordered host array."""
        X = np.asarray(X, self.dtype)
        if self.kept is None:
            return host_product(self.a, X, trans, self.uplo, self.dtype, self.width)
        split, kept, lane = self.split, self.kept, self.ops.lane("gpu:panel")
        work = kept.workspace("refine", kept.m + kept.n, X.shape[1])
        if trans == "N":
            Y = self.ops.apply_to_host(lane, kept.block(0, kept.m, 0, kept.n), X[split:], "N",
                                       None, work)
            Y += host_product(self.a[:, :split], X[:split], "N", None, self.dtype, self.width)
            return Y
        Y = np.empty((self.a.shape[1], X.shape[1]), self.dtype, order="F")
        Y[split:] = self.ops.apply_to_host(lane, kept.block(0, kept.m, 0, kept.n), X, "C",
                                           None, work)
        Y[:split] = host_product(self.a[:, :split], X, "C", None, self.dtype, self.width)
        return Y

    def apply(self, src, dst):
        """dst := A src (A^H A src) for blocks where the backend computes: src to the host (it
        waits for the lane's work on src), the products here, the result up; complete on
        return."""
        lane = self.ops.lane("gpu:panel")
        X = self.ops.to_host(lane, src)
        self.ops.from_host(lane, self(X), dst)


def host_product(a, X, trans, uplo, dtype, width):
    """op(a) X in `dtype` for the host array `a` (m x n) and X (n x k, or m x k for op "C"), by
    block columns a[:, J] of `width` (views, or their widened copies where a's dtype is
    narrower): Y += a[:, J] X_J for "N", Y_J = a[:, J]^H X for "C". With `uplo`, a is
    Hermitian, only that triangle read: per block column the diagonal block (hemm, its
    triangle) and the rectangle R under it ("L") or over it ("U"), which counts twice,
    Y_rest += R X_J and Y_J += R^H X_rest."""
    m, n = a.shape
    Y = np.zeros((m if trans == "N" and uplo is None else n, X.shape[1]), dtype, order="F")
    for j0 in range(0, n, width):
        J = slice(j0, min(j0 + width, n))
        if uplo is None:
            A_J = np.asarray(a[:, J], dtype)
            if trans == "N":
                Y += A_J @ X[J]
            else:
                Y[J] = _adjoint_times(A_J, X)
            continue
        hemm, = get_blas_funcs(("hemm" if Y.dtype.kind == "c" else "symm",), dtype=Y.dtype)
        Y[J] += hemm(1, np.asarray(a[J, J], dtype), X[J], lower=int(uplo == "L"))
        rest = slice(J.stop, n) if uplo == "L" else slice(0, j0)
        R = np.asarray(a[rest, J], dtype)
        Y[rest] += R @ X[J]
        Y[J] += _adjoint_times(R, X[rest])
    return Y


def _adjoint_times(R, X):
    """R^H X without a conjugated copy of R (only of X's few columns)."""
    if R.dtype.kind != "c":
        return R.T @ X
    return np.conj(R.T @ np.conj(X))


class DeviceSpace:
    """refine's Krylov space where the backend computes (the methods of
    lapack/_refine.HostSpace): the basis V and Z = M^-1 V in workspaces of the operator's
    store, column (j, c) at j k + c, so that step j's columns are one block; the
    preconditioner and the product run from and into them (TriangularPreconditioner.apply,
    WorkingOperator.apply or HostOperator.apply), and Gram-Schmidt is gemv's there. The host gets H's column only: one wait per Arnoldi step. With the basis on the
    host, each step moved four vectors of n across and ran its Gram-Schmidt on the CPU: a
    good part of each GMRES iteration (perf/RESULTS.md, "Earlier today (H100 16:00-16:02 UTC,
    H200 16:02 UTC)", and "Measurements formerly in docstrings")."""

    def __init__(self, ops, operator, preconditioner, counter, n, k, m, dtype,
                 keep_products=False):
        self.ops, self.operator, self.preconditioner = ops, operator, preconditioner
        self.counter, self.n, self.k, self.m = counter, n, k, m
        # the working precision's, in the operator's store (A's, or the low-precision
        # factors' where A stays on the host)
        workspace = functools.partial(operator.store.workspace, dtype=dtype)
        self.V = workspace("krylov V", n, (m + 1) * k)
        self.Z = workspace("krylov Z", n, m * k)
        # A Z as the operator made it, before Gram-Schmidt (refine's residual_from_products)
        self.AZ = workspace("krylov AZ", n, m * k) if keep_products else None
        self.W = workspace("krylov W", n, k)
        self.D = workspace("krylov D", n, k)
        self.y = workspace("krylov y", m + 1, 1)
        # per column: h of the first pass (m + 1 rows), of the second, and ||w||_2^2
        self.coefficients = workspace("krylov coefficients", 2 * m + 3, k)
        self.host_coefficients = np.empty((2 * m + 3, k), dtype, order="F")
        self.lane = ops.lane("gpu:panel")

    @staticmethod
    def workspace_bytes(n, k, m, dtype, keep_products=False) -> int:
        """The device memory of __init__'s workspaces for n x k right-hand sides and m
        steps."""
        columns = (m + 1) * k + m * k * (2 if keep_products else 1) + 2 * k
        return (n * columns + (m + 1) + (2 * m + 3) * k) * np.dtype(dtype).itemsize

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
            if self.AZ is not None:
                with self.lane:
                    ops.lacpy(self.lane, "A", sub(self.W, 0, n, c0, c1),
                              sub(self.AZ, 0, n, j * k + c0, j * k + c1))
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
        return self._combination(self.Z, R, solutions)

    def combine_products(self, R, solutions):
        """A D (host) = (A Z) y per column as `combine`'s, from the kept products; None
        unless keep_products."""
        return None if self.AZ is None else self._combination(self.AZ, R, solutions)

    def _combination(self, stack, R, solutions):
        ops, lane = self.ops, self.lane
        D = ops.sub_block(self.D, 0, self.n, 0, R.shape[1])
        with lane:
            ops.laset(lane, "A", 0, 0, D)
        for c, y in solutions.items():
            y_dev = ops.sub_block(self.y, 0, len(y), 0, 1)
            ops.from_host(lane, np.asarray(y, R.dtype).reshape(-1, 1), y_dev)
            with lane:
                ops.gemm(lane, 1, ops.strided_columns(stack, c, len(y), self.k), y_dev, 0,
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
                  max_iter=options.max_iter,
                  inner_tol=operator.auto_inner_tol if options.inner_tol is None
                  else options.inner_tol,
                  max_inner=options.max_inner,
                  krylov_space=functools.partial(DeviceSpace, operator.ops, operator,
                                                 preconditioner),
                  residual_from_products=operator.residual_from_products)
