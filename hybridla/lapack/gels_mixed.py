"""gels_mixed: min ||A x - b||_2 for a full-rank m x n A, m >= n, to working precision, the QR
factorization in a low precision:

    [convert]  c powers of two, the columns of A diag(c) of largest entry about 1 (no row
               scaling: it would weight the problem);  A_low := fl32(A c)
    [factor]   A_low = Q R: geqrf on the engine, its GEMMs in `lowest` on the tensor cores
    [refine]   the normal equations A^H A x = A^H b with the true A (each product A^H (A v):
               two passes over A), preconditioned by M = diag(c)^-1 R^H R diag(c)^-1, the
               low-precision R's Cholesky-like factor of A^H A:
               M^-1 v = diag(c) R^-1 R^-H diag(c) v. Classical refinement of this system is
               Bjorck's corrected semi-normal equations; GMRES on it converges for kappa(A)
               up to about u_low^-1 (u_low the unit roundoff of `lowest`).

The stopping test is the normal equations': ||A^H r||_inf <= tol ||x||_inf ||A||_1 ||A||_inf
(||A||_1 ||A||_inf bounds ||A^H A||_inf), tol = sqrt(n) eps by default. Scaled by ||x||, that
test is looser than what LAPACK's least-squares testers ask of the residual's orthogonality,
||A^H r|| / (||A|| ||r|| eps) (xQRT17), by up to ||A|| ||x|| / ||r||: measured on 230 x 150
matrices of kappa 1e3 (tests/test_mixed.py), the solution agrees with LAPACK's to kappa eps,
but that orthogonality ratio ranged from 20 to 1500 where LAPACK's gels gave 8 to 16. The
forward error is what this solver offers; use lstsq for LAPACK's backward stability. Q is not
used: only R.
Codes beyond refine's: -2 (overflow; or A's norms outside the range where the normal equations
can be formed in the working precision, below), -3 when R fails the rank test below (A rank
deficient, or too close to it for the low precision: rank-deficient problems are not for this
solver, and would otherwise "converge" to one of the many solutions of the singular normal
equations, not lstsq's).

Range: the normal equations square A's magnitude (A^H A, ||A||_1 ||A||_inf), so they need
||A||_1 ||A||_inf inside LAPACK's safe range [safmin / eps, eps / safmin] (dgels's smlnum,
bignum), about |a_ij| from 1e-146 to 1e146 in float64; outside it the solver gives code -2 and
lstsq (which scales A, as dgels) answers. The right-hand sides are scaled by powers of two to
about sqrt(||A||_1 ||A||_inf) first (X divided back): A^H b and X then stay in range too.
"""
from __future__ import annotations

import math

import numpy as np

from ..backend.reduced import UNIT_ROUNDOFF
from ._mixed import MixedSolver, general_scaling
from ._preconditioner import TriangularPreconditioner
from ._scaling import safe_range
from .gels import rank_test
from .geqrf import geqrf

# the precision of R: its panels and storage (float32, complex64 for complex A)
R_EPS = float(np.finfo(np.float32).eps)


class GelsMixed(MixedSolver):
    normal = True

    def scale(self, A):
        scaling, _ = general_scaling(self.ops, A, self.options.equilibrate, rows=False)
        self.norms = (scaling.norm_inf, scaling.norm_one)
        return scaling.r, scaling.c, scaling.norm_inf * scaling.norm_one

    def out_of_range(self, anorm) -> str:
        """The normal equations' range (the module's docstring): ||A||_1 ||A||_inf within
        [smlnum, bignum], or A = 0 (whose R fails the rank test)."""
        norm_inf, norm_one = self.norms
        smlnum, bignum = safe_range(self.dtype)
        if (norm_inf == 0 and norm_one == 0) or smlnum <= anorm <= bignum:
            return ""
        return (f"||a||_1 ||a||_inf = {norm_one:.3g} * {norm_inf:.3g} is outside the range "
                f"[{smlnum:.3g}, {bignum:.3g}] where the normal equations can be formed in "
                f"{np.dtype(self.dtype).name} (entries of a too large or too small)")

    def rank_tolerance(self, m, n) -> float:
        """|R(i, i)| <= tol max_j |R(j, j)| makes A rank deficient for this solver:
        tol = max(max(m, n) eps_32, eps_lowest). R is the float32 (complex64) factor of the
        column-scaled A, its panels and storage in float32: an exactly rank-deficient A leaves
        such an entry at float32's rounding level, which max(m, n) eps_32 bounds (LAPACK's
        and numpy's rank tolerance, taken in the precision R was computed in). The working
        precision's eps cannot serve: that entry stays some 1e9 times above max(m, n)
        eps_64 (np.ones((6, 3)): 3e-15 relative, but 1e-7 for a random rank-deficient one).
        The trailing products in `lowest` (half, bfloat16, TF32) perturb R by about their eps
        relative to ||A|| (measured: 1e-4 for half), hence the floor eps_lowest; max(m, n)
        eps_lowest would refuse every matrix from a thousand rows on. A flagged A has
        kappa(A diag(c)) >= 1 / tol, where the refinement preconditioned by this R is at the
        edge of its reach anyway: the fallback (lstsq) decides, at the working precision."""
        return max(max(m, n) * R_EPS, 2 * UNIT_ROUNDOFF[self.options.lowest])

    def factor(self, A, low, plan, r, c) -> int:
        _, info, trace = geqrf(low, plan)
        if plan.trace_path:
            trace.to_chrome(plan.trace_path)
        if info:
            return info
        self.tol = self.rank_tolerance(low.m, low.n)
        return rank_test(low, self.tol)

    def failure_reason(self, info) -> str:
        return (f"a is rank deficient, or too ill-conditioned for the {self.options.lowest} "
                f"QR: |R({info}, {info})| <= {self.tol:.3g} max_j |R(j, j)|")

    def rhs_scales(self, B, anorm):
        """Powers of two s_j with max_i |s_j b_ij| about sqrt(||A||_1 ||A||_inf) (1 for a
        zero or non-finite column), as float64 (a scale for a float32 B may lie beyond
        float32's range where the scaled B does not)."""
        largest = np.abs(B).max(axis=0, initial=0.0).astype(np.float64)
        good = np.isfinite(largest) & (largest > 0) & (anorm > 0)
        ratio = np.where(good, math.sqrt(anorm) / np.where(good, largest, 1.0), 1.0)
        _, exponents = np.frexp(ratio)
        scales = np.where(good, np.ldexp(1.0, exponents - 1), 1.0)
        return scales[None, :]

    def preconditioner(self, low, nrhs, r, c):
        # A diag(c) = Q R:  (A^H A)^-1 = diag(c) R^-1 R^-H diag(c)
        return TriangularPreconditioner(self.ops, low, low.n, nrhs,
                                        [("U", "C", "N"), ("U", "N", "N")], c, c)


def gels_mixed(ops, A, B, options, plan, arriving=None):
    """Least squares min ||A X - B|| (A m x n, m >= n, full rank, the working-precision tile
    store or a HostResidentMatrix; B a host array m x nrhs) by a low-precision QR and refinement of the normal equations.
    Returns (X, MixedInfo), X n x nrhs."""
    if A.m < A.n:
        raise ValueError(f"gels_mixed needs m >= n (a tall or square matrix); got "
                         f"{A.m} x {A.n}")
    return GelsMixed(ops, options, plan).solve(A, B, arriving)
