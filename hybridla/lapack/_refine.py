"""Iterative refinement for the mixed-precision solvers: the loops, written once for all of them.

The caller factors A in a low precision u_f (single, half, bfloat16, TF32...) and hands over two
operators, both returning host arrays in the working precision u (the dtype of b):

    apply_a(X)   = A X                  (the true A, working precision; A may live on a GPU)
    solve_low(R) = M^-1 R  ~  A^-1 R    (the low-precision factors: M = L U or L L^H)

Every residual r = b - A x is computed in the working precision from the true A, one apply_a for
all the columns that still need it. x_j, r_j, b_j are columns; ||.|| is the inf-norm unless marked.

Stopping test (MAGMA's and cuSOLVER's), per column j:

    ||r_j||_inf  <=  tol * ||x_j||_inf * anorm

anorm (||A||_inf) and tol come from the caller, whose default tol is sqrt(n) eps(u).

All columns must pass. A zero column b_j gets x_j = 0 (no solve) and passes. The backward error
recorded in RefinementResult.residuals is max_j ||r_j|| / (anorm ||x_j||), 0 where r_j = 0; entry
0 is that of x_0 = M^-1 b, then one entry per outer iteration.

Methods (the outer iteration is the same loop for the last three; only the correction differs):

  "none"             x = M^-1 b, judged by one residual. No refinement.
  "classical"        x_0 = M^-1 b;  for i = 1 .. max_iter:  r = b - A x_{i-1};  stop if the test
                     passes;  x_i = x_{i-1} + M^-1 r.            (LAPACK dsgesv, MAGMA, SLATE)
  "classical-gmres"  the same loop, the correction equation A d = r solved by GMRES on
                     A M^-1 z = r, d = M^-1 z, from d = 0, until ||r - A d||_2 <= inner_tol ||r||_2
                     or the estimate says x + d passes the stopping test (as "gmres"), or
                     max_inner iterations. (GMRES-IR, Carson & Higham 2017/2018; cuSOLVER's
                     CUSOLVER_IRS_REFINE_CLASSICAL_GMRES.)
  "gmres"            restarted right-preconditioned GMRES(max_inner) on A x = b from x_0 = M^-1 b,
                     at most max_iter cycles. A cycle started at x_{i-1} is one GMRES cycle on
                     A d = r_{i-1} from d = 0, so this too is the loop above, with the cycle as the
                     correction: it runs until its residual estimate says the stopping test should
                     pass (or max_inner iterations), and then the true residual b - A x_i decides.
                     Several right-hand sides: one GMRES per column (cuSOLVER's IRS cannot).

GMRES (one routine for "gmres" and the inner solver of "classical-gmres"): Arnoldi in the working
precision with CGS2 (classical Gram-Schmidt twice: as stable as MGS, but BLAS-2); Z = M^-1 V is
kept, so the update d = Z y needs no further solve (the flexible-GMRES form, equal to right
preconditioning for a fixed M); the Hessenberg least-squares problem is reduced by complex Givens
rotations as its columns arrive, so |g_{j+1}| = ||r - A Z_j y_j||_2 is known at every step for
free. That estimate only ever ends a cycle early; it never decides convergence. Being a 2-norm set
against an inf-norm test, it ends the cycle late rather than early. The columns run in lock step,
so each Arnoldi step costs one solve and one product for all the columns still running. The
basis V, Z and the Arnoldi steps live in a Krylov space: the host (HostSpace: host arrays, the
two callbacks), or where A is (`krylov_space`; the mixed solvers'
lapack/_mixed_operators.DeviceSpace), so that only H's new column crosses to the host, which
keeps the rotations, H and g.
Each GMRES iteration of one column counts once in inner_iterations.

Residuals from the products (`residual_from_products`, the GMRES methods only): where a pass over A
is as dear as a GMRES step (A kept in host memory: lapack/_mixed_operators.HostOperator), each
outer iteration's new residual is formed from the products its correction already made instead
of one more apply_a. The cycle keeps each A z_j as apply_a returned it (before Gram-Schmidt), so
with d = Z y

    r_new = r - (A Z) y        (in exact arithmetic b - A (x + d))

Both it and the direct b - A (x + d) are the true A's products in the working precision; they
differ from the exact residual of the stored x + d by rounding of the same order, gamma_n |A|
(|x| + |Z| |y|) against gamma_n (|b| + |A| |x + d|), and by eps |A| |x + d| for the rounding of
x + d itself, which the direct residual sees and this one does not: a backward error of eps
against the stopping test's sqrt(n) eps. (Not the GMRES estimate g_{j+1} V q, which assumes the
Arnoldi relation and orthogonality hold: their loss is what the attainable-accuracy literature
warns of.)

Early stop ("classical" and "classical-gmres"): if the backward error fails to drop by a factor 2
in two iterations in a row, or rises above that of x_0, refinement stagnates or diverges (kappa(A)
u_f too large for this method): code -1. Restarted GMRES may legitimately gain less than a factor
2 in a cycle, so "gmres" runs to max_iter. A NaN or Inf in x or r stops every method with -1.

Codes (RefinementResult.iterations), as MAGMA's and cuSOLVER's `iter`:
   k >= 0     converged after k corrections ("gmres": cycles); 0: x_0 already passed
   -1         stopped early: "none" whose x_0 fails the test, stagnation or divergence as above,
              or a NaN / Inf in x or r
   -max_iter  max_iter corrections or cycles without passing the test
   -2, -3     never returned here; the caller's: narrowing A (or b) to the low precision
              overflowed (-2), the low-precision factorization failed (-3)
Fallback (the caller's): on any code < 0 it solves in the working precision instead.
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np
from scipy.linalg import LinAlgError, solve_triangular

METHODS = ("none", "classical", "gmres", "classical-gmres")
DTYPES = (np.float32, np.float64, np.complex64, np.complex128)


@dataclass
class RefinementResult:
    x: np.ndarray            # n x k solution, working precision (dtype of b)
    iterations: int          # the code: >= 0 converged; -1 stopped early; -max_iter (docstring)
    residuals: list          # backward error of x_0, then one per outer iteration (docstring)
    inner_iterations: int    # GMRES iterations in total, over all columns
    matvecs: int             # calls of apply_a
    solves: int              # calls of solve_low
    converged: bool


def refine(apply_a, solve_low, b, *, anorm, method, tol, max_iter=30, inner_tol=1e-4,
           max_inner=50, krylov_space=None, residual_from_products=False) -> RefinementResult:
    """Solve A X = B to the stopping test by the refinement ``method`` (see the module docstring).

    ``b`` (n x k, or n for one column) is not modified; ``x`` has its shape and dtype. The
    callbacks get n x p arrays (p <= k) of b's dtype to read only (they may be views of the
    Krylov basis) and return arrays of their own, which refine then owns and may overwrite (one
    that shares memory with its argument is copied).

    ``krylov_space(ops, n, k, m, dtype)``: where GMRES keeps its basis and runs its Arnoldi
    steps (an object with HostSpace's methods; ops counts solves, products and inner
    iterations). Default: HostSpace, host arrays and the two callbacks; the mixed solvers keep
    it where A lives (lapack/_mixed_operators.DeviceSpace), so that an iteration needs no vector
    to cross to the host.

    ``residual_from_products``: the GMRES methods form each new residual from the products their
    correction made (the module docstring): one apply_a fewer per outer iteration.
    """
    _check_method_and_limits(method, tol, max_iter, inner_tol, max_inner)
    b = np.asarray(b)
    if b.dtype not in DTYPES:
        raise ValueError(f"b must be float32, float64, complex64 or complex128; got {b.dtype}")
    if b.ndim not in (1, 2):
        raise ValueError(f"b must be n x k (or n); got shape {b.shape}")
    anorm = float(anorm)
    if not (math.isfinite(anorm) and anorm >= 0):
        raise ValueError(f"anorm must be finite and >= 0; got {anorm}")
    B = b[:, None] if b.ndim == 1 else b
    n, k = B.shape
    ops = _Operators(apply_a, solve_low, n, B.dtype)

    if method == "none":
        X, R, be = _initial(ops, B, anorm)
        passed = bool(np.all(be <= tol)) and _finite(X, R)
        code, history = (0 if passed else -1), [_worst(be)]
    else:
        if method == "classical":
            def correct(R, X):
                return ops.solve_low(R), None
        else:
            space = (krylov_space or HostSpace)(ops, n, k, max_inner, B.dtype,
                                                keep_products=residual_from_products)
            krylov = _Krylov(space, k, max_inner, B.dtype)
            def passing(X):
                # the estimate ||r - A d||_2 at which b - A (x + d) passes the stopping test
                return tol * anorm * np.abs(X).max(axis=0)

            if method == "classical-gmres":
                def correct(R, X):
                    # inner_tol's reduction, or less where that already passes
                    return krylov.correction(ops, R, np.maximum(
                        inner_tol * column_norms(R), passing(X)), passing(X))
            else:
                def correct(R, X):
                    return krylov.correction(ops, R, passing(X), passing(X))
        X, code, history = _outer_loop(ops, B, anorm, tol, max_iter, correct,
                                       stop_when_slow=(method != "gmres"))
    return RefinementResult(x=X.reshape(b.shape), iterations=code, residuals=history,
                            inner_iterations=ops.inner, matvecs=ops.matvecs, solves=ops.solves,
                            converged=code >= 0)


def _outer_loop(ops, B, anorm, tol, max_iter, correct, stop_when_slow):
    """x_0 = M^-1 b; for i = 1 .. max_iter: r = b - A x_{i-1}, stop if the test passes,
    x_i = x_{i-1} + d, (d, A d) = correct(r, x_{i-1}), applied to the columns that fail only;
    the next r is r - A d where the correction has A d (not None), else b - A x_i.
    Returns (x, code, backward-error history)."""
    X, R, be = _initial(ops, B, anorm)
    history = [_worst(be)]
    slow = 0
    for i in range(max_iter + 1):
        if not _finite(X, R):
            return X, -1, history
        todo = ~(be <= tol)
        if not todo.any():
            return X, i, history
        if i > 0 and stop_when_slow:
            slow = slow + 1 if history[-1] > history[-2] / 2 else 0
            if slow == 2 or history[-1] > history[0]:
                return X, -1, history
        if i == max_iter:
            return X, -max_iter, history
        D, AD = correct(R[:, todo], X[:, todo])
        X[:, todo] += D
        if AD is None:
            R[:, todo] = _residual(ops, B, X, todo, be, anorm)
        else:
            R[:, todo] -= AD
            be[todo] = _backward_errors(R[:, todo], X[:, todo], anorm)
        history.append(_worst(be))
    raise AssertionError("unreachable")


def _initial(ops, B, anorm):
    """x_0 = M^-1 b and r_0 = b - A x_0 for the nonzero columns; x_j = 0 and r_j = 0 for the rest.
    Returns (X, R, be), be the backward error per column."""
    X = np.zeros_like(B, order="F")
    R = np.zeros_like(X)
    be = np.zeros(B.shape[1])
    nonzero = B.any(axis=0)
    if nonzero.any():
        X[:, nonzero] = ops.solve_low(B[:, nonzero])
        R[:, nonzero] = _residual(ops, B, X, nonzero, be, anorm)
    return X, R, be


def _residual(ops, B, X, cols, be, anorm):
    """b - A x for the columns ``cols`` in one apply_a; their backward errors go into be."""
    R = B[:, cols] - ops.apply_a(X[:, cols])
    be[cols] = _backward_errors(R, X[:, cols], anorm)
    return R


def _backward_errors(R, X, anorm):
    """||r_j|| / (anorm ||x_j||) per column of R and X."""
    rnorm = np.abs(R).max(axis=0).astype(np.float64)
    xnorm = np.abs(X).max(axis=0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        # 0/0 (r = 0 = x) passes; r/0 is inf; NaN stays NaN and fails every comparison.
        return np.where(rnorm == 0, 0.0, rnorm / (anorm * xnorm))


def column_norms(R) -> np.ndarray:
    """The 2-norms of R's columns, as LAPACK's nrm2 forms them: without overflow or underflow
    (each column divided by its largest modulus first), so that a residual of 1e200 (a matrix
    near the largest float) still has its norm. The divisor is a power of two: for columns in
    the ordinary range the norms are numpy's to the last bit. Real, R's precision."""
    largest = np.abs(R).max(axis=0, initial=0.0)
    _, exponents = np.frexp(np.where((largest > 0) & np.isfinite(largest), largest, 1))
    scales = np.ldexp(np.ones_like(largest), exponents - 1)
    return scales * np.linalg.norm(R / scales, axis=0)


def _finite(X, R) -> bool:
    return bool(np.isfinite(X).all() and np.isfinite(R).all())


def _worst(be) -> float:
    return float(np.max(be)) if be.size else 0.0


class _Operators:
    """apply_a and solve_low, counted; their results checked for shape and made F-ordered arrays
    of the working precision that refine may overwrite: copied only where they are not, or where
    they share memory with the argument. At n = 32768 a fresh 256 KiB array costs the host more
    than the arithmetic on it (glibc maps and faults in the pages of each one), and GMRES's host
    side runs once per iteration, between device calls: the copies are kept to those needed."""

    def __init__(self, apply_a, solve_low, n, dtype):
        self._apply_a, self._solve_low = apply_a, solve_low
        self.n, self.dtype = n, dtype
        self.matvecs = self.solves = self.inner = 0

    def apply_a(self, X):
        self.matvecs += 1
        return self._owned(self._apply_a(X), X, "apply_a")

    def solve_low(self, R):
        self.solves += 1
        return self._owned(self._solve_low(R), R, "solve_low")

    def _owned(self, Y, argument, name):
        Y = np.asarray(Y)
        if Y.shape != (self.n, argument.shape[1]):
            raise ValueError(f"{name} returned shape {Y.shape}; expected "
                             f"{(self.n, argument.shape[1])}")
        if Y.dtype != self.dtype or not Y.flags.f_contiguous or not Y.flags.writeable \
                or np.may_share_memory(Y, argument):
            return np.array(Y, dtype=self.dtype, order="F")
        return Y


class _Krylov:
    """GMRES(m) cycles from zero, one per column, in lock step; workspace for up to k columns.

    The basis V (orthonormal, Arnoldi's) and Z = M^-1 V live in `space`, which also runs each
    Arnoldi step; here, per column c: H[c] the Hessenberg matrix reduced to upper triangular by
    the rotations (cs, sn), g[c] the rotated right-hand side beta e_1.
    """

    def __init__(self, space, k, m, dtype):
        self.space, self.m = space, m
        self.H = np.zeros((k, m + 1, m), dtype)
        self.g = np.zeros((k, m + 1), dtype)
        self.cs = np.zeros((k, m))
        self.sn = np.zeros((k, m), dtype)

    # the inf-norm check stops a cycle where ||r||_inf is at most this share of the stopping
    # test's bound: d is not yet added to x, whose norm the bound takes, nor rounded
    INF_NORM_SHARE = 0.5

    def correction(self, ops, R, stop_at, passing=None):
        """(D, A D): D (n x p) minimising ||R_c - A D_c||_2 over D_c in M^-1 K_j(A M^-1, R_c)
        per column c, j <= m (one GMRES cycle from zero), a column stopping as soon as the
        estimate ||R_c - A D_c||_2 <= stop_at[c], or, with `passing` (the stopping test's bound
        on ||R_c - A D_c||_inf), as soon as the residual itself is within INF_NORM_SHARE of
        passing[c]. The residual is g_{j+1}
        V_{j+2} Q^H e_{j+1} (Q the rotations): one combination of the basis, formed where
        ||r||_2 / sqrt(n), the least its inf-norm can be, is small enough. The 2-norm alone
        overstates a spread-out residual's inf-norm about sqrt(n / (2 ln n)) times (40 at n =
        32768), so it can run a step more than the test needs (the randn solves of perf/
        RESULTS.md, at 50-90x per step, happened not to). A D = (A Z) y from the products the
        steps made, where the space keeps them (keep_products), else None."""
        n, p = R.shape
        space, H, g, cs, sn = self.space, self.H, self.g, self.cs, self.sn
        beta = column_norms(R)
        steps = np.zeros(p, dtype=int)
        running = [c for c in range(p) if beta[c] > 0]
        space.start(R, running, beta)
        for c in running:
            g[c] = 0
            g[c, 0] = beta[c]
        for j in range(self.m):
            if not running:
                break
            # one solve and one product for all running columns, then their Gram-Schmidt
            columns = space.arnoldi(running, j)
            ops.inner += len(running)
            still = []
            for (h, hnext), c in zip(columns, running):
                steps[c] = j + 1
                # The earlier rotations on the new column, then one to zero H[j+1, j].
                for i in range(j):
                    h[i], h[i + 1] = (cs[c, i] * h[i] + sn[c, i] * h[i + 1],
                                      -np.conj(sn[c, i]) * h[i] + cs[c, i] * h[i + 1])
                cs[c, j], sn[c, j], h[j] = _givens(h[j].item(), hnext)
                H[c, :j + 1, j] = h
                g[c, j + 1] = -np.conj(sn[c, j]) * g[c, j]
                g[c, j] = cs[c, j] * g[c, j]
                # |g[j+1]| is the residual 2-norm of the j+1-step solution. hnext = 0: the Krylov
                # space is invariant and the solution exact; NaN: nothing more to be had.
                if abs(g[c, j + 1]) > stop_at[c] and hnext > 0 and math.isfinite(hnext):
                    space.extend(c, j, hnext)
                    if passing is None or not self._passes_in_inf_norm(c, j, n, passing[c]):
                        still.append(c)
            running = still
        solutions = {c: _triangular_solve(H[c, :steps[c], :steps[c]], g[c, :steps[c]])
                     for c in range(p) if steps[c]}
        return space.combine(R, solutions), space.combine_products(R, solutions)

    def _passes_in_inf_norm(self, c, j, n, bound) -> bool:
        """Whether column c's residual after step j (V[:, :j+2] extended) has ||r||_inf <=
        INF_NORM_SHARE bound."""
        target = self.INF_NORM_SHARE * bound
        residual_2 = abs(self.g[c, j + 1])
        if not residual_2 <= math.sqrt(n) * target:
            return False
        return residual_2 * self.space.combination_inf_norm(c, self.residual_weights(c, j)) \
            <= target

    def residual_weights(self, c, j):
        """q = Q^H e_{j+1}, Q the rotations of column c up to step j: the residual after step
        j is g[c, j+1] V[:, :j+2] q. The rotations' adjoints, the last first."""
        q = np.zeros(j + 2, self.g.dtype)
        q[j + 1] = 1
        for i in range(j, -1, -1):
            cs, sn = self.cs[c, i], self.sn[c, i]
            q[i], q[i + 1] = cs * q[i] - sn * q[i + 1], np.conj(sn) * q[i] + cs * q[i + 1]
        return q


class HostSpace:
    """The Krylov basis in host memory, rows of V[c] and Z[c] per column c; the steps through
    refine's callbacks (host arrays)."""

    def __init__(self, ops, n, k, m, dtype, keep_products=False):
        self.ops = ops
        self.complex = np.dtype(dtype).kind == "c"
        self.scratch = np.empty(n, dtype)  # for the in-place Gram-Schmidt (_Operators' note)
        self.V = np.empty((k, m + 1, n), dtype)
        self.Z = np.empty((k, m, n), dtype)
        self.AZ = np.empty((k, m, n), dtype) if keep_products else None  # A Z, as apply_a gave
        self.W = {}

    def start(self, R, running, beta):
        """V[c, 0] := R_c / beta_c for the running columns."""
        for c in running:
            np.divide(R[:, c], beta[c], out=self.V[c, 0])

    def arnoldi(self, running, j):
        """Step j for the running columns: Z[c, j] = M^-1 V[c, j], w = A Z[c, j] orthogonalised
        against V[c, :j+1] twice (CGS2), in place. Returns (h, ||w||_2) per column, h = the
        coefficients of both passes, summed."""
        V, Z = self.V, self.Z
        Z[running, j] = self.ops.solve_low(_columns(V, running, j)).T
        W = self.ops.apply_a(_columns(Z, running, j))
        if self.AZ is not None:
            self.AZ[running, j] = W.T
        self.W = dict(zip(running, W.T))
        columns = []
        for w, c in zip(W.T, running):
            h = self._orthogonalize(V[c, :j + 1], w)
            h += self._orthogonalize(V[c, :j + 1], w)
            columns.append((h, float(np.linalg.norm(w))))
        return columns

    def extend(self, c, j, hnext):
        """V[c, j+1] := w_c / hnext (w_c the last step's, orthogonalised)."""
        np.divide(self.W[c], hnext, out=self.V[c, j + 1])

    def combination_inf_norm(self, c, q) -> float:
        """||V[c, :len(q)]^T q||_inf (the basis vectors of column c weighted by q)."""
        return float(np.abs(self.V[c, :len(q)].T @ q).max())

    def combine(self, R, solutions):
        """D: column c = Z[c, :j] y_c for `solutions` {c: y_c}, zero for the other columns."""
        return self._combination(self.Z, R, solutions)

    def combine_products(self, R, solutions):
        """A D = (A Z) y per column as `combine`'s, from the kept products; None unless
        keep_products."""
        return None if self.AZ is None else self._combination(self.AZ, R, solutions)

    @staticmethod
    def _combination(stack, R, solutions):
        D = np.zeros_like(R)
        for c, y in solutions.items():
            D[:, c] = stack[c, :len(y)].T @ y
        return D

    def _orthogonalize(self, basis, w):
        """One pass of classical Gram-Schmidt: h = B^H w and w := w - B^T h for the rows of
        `basis` (B), in place through one scratch vector; returns h. B^H w is formed as
        conj(B conj(w)): conjugating w, not a copy of the basis."""
        if self.complex:
            h = (basis @ np.conjugate(w, out=self.scratch)).conj()
        else:
            h = basis @ w
        w -= np.matmul(basis.T, h, out=self.scratch)
        return h


def _columns(stack, running, j):
    """stack[running, j] as an n x p array: a view where `running` is a run of consecutive
    columns (the usual case: all of them), else a copy."""
    if running[-1] - running[0] == len(running) - 1:
        return stack[running[0]:running[-1] + 1, j].T
    return stack[running, j].T


def _triangular_solve(U, y):
    """U^-1 y; NaN for a singular U, so that the caller's finiteness check stops the loop."""
    try:
        return solve_triangular(U, y, check_finite=False)
    except LinAlgError:
        return np.full_like(y, np.nan)


def _givens(a, b):
    """(c, s, rho), c real, with [c, s; -conj(s), c] [a; b] = [rho; 0], for real or complex a, b."""
    if b == 0:
        return 1.0, 0.0, a
    if a == 0:
        return 0.0, np.conj(b) / abs(b), abs(b)
    t = math.hypot(abs(a), abs(b))
    phase = a / abs(a)
    return abs(a) / t, phase * np.conj(b) / t, phase * t


def _check_method_and_limits(method, tol, max_iter, inner_tol, max_inner) -> None:
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(map(repr, METHODS))}; got {method!r}")
    for name, value in (("max_iter", max_iter), ("max_inner", max_inner)):
        try:
            ok = not isinstance(value, bool) and operator.index(value) >= 1
        except TypeError:
            ok = False
        if not ok:
            raise ValueError(f"{name} must be an integer >= 1; got {value!r}")
    if not (0 < inner_tol < 1):
        raise ValueError(f"inner_tol must satisfy 0 < inner_tol < 1; got {inner_tol!r}")
    if not (tol > 0):
        raise ValueError(f"tol must be > 0; got {tol!r}")
