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
Codes beyond refine's: -2 (overflow), -3 when R has an exact zero on its diagonal (A_low rank
deficient: rank-deficient problems are not for this solver).
"""
from __future__ import annotations

import numpy as np

from ._mixed import MixedSolver, TriangularPreconditioner, general_scaling
from .geqrf import geqrf


class GelsMixed(MixedSolver):
    normal = True

    def scale(self, A):
        scaling, _ = general_scaling(self.ops, A, self.options.equilibrate, rows=False)
        return scaling.r, scaling.c, scaling.norm_inf * scaling.norm_one

    def factor(self, A, low, plan, r, c) -> int:
        _, info, trace = geqrf(low, plan)
        if plan.trace_path:
            trace.to_chrome(plan.trace_path)
        if info:
            return info
        diagonal = low.diagonal()
        zero = np.flatnonzero(diagonal == 0)
        return int(zero[0]) + 1 if zero.size else 0

    def preconditioner(self, low, nrhs, r, c):
        # A diag(c) = Q R:  (A^H A)^-1 = diag(c) R^-1 R^-H diag(c)
        return TriangularPreconditioner(self.ops, low, low.n, nrhs,
                                        [("U", "C", "N"), ("U", "N", "N")], c, c)


def gels_mixed(ops, A, B, options, plan, arriving=None):
    """Least squares min ||A X - B|| (A m x n, m >= n, full rank, the working-precision tile
    store; B a host array m x nrhs) by a low-precision QR and refinement of the normal equations.
    Returns (X, MixedInfo), X n x nrhs."""
    if A.m < A.n:
        raise ValueError(f"gels_mixed needs m >= n (a tall or square matrix); got "
                         f"{A.m} x {A.n}")
    return GelsMixed(ops, options, plan).solve(A, B, arriving)
