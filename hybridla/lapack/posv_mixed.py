"""posv_mixed: A X = B for Hermitian positive definite A to working precision, the Cholesky
factorization in a low precision (SLATE's posv_mixed; cuSOLVER has none):

    [convert]  d = 2^-round(log2 sqrt(a_ii)): diag(d) A diag(d) has a diagonal of about 1 and
               stays positive definite;  A_low := fl32(d A d), its `uplo` triangle only, in the
               pass over A that also sums the rows and columns for ||A||_inf
    [factor]   A_low + sigma I = L L^H (or U^H U): potrf on the engine, its GEMMs and HERKs in
               `lowest` on the tensor cores. sigma = 0 first; when the low-precision Cholesky
               breaks down (kappa(A) u_low near 1 or beyond), A_low is made again and factored
               with sigma = u_low * 4^k, k = 1, 2, 3, 4 (Higham and Pranesh, SISC 2021: a shift
               of a few units of the low precision keeps it positive definite, and GMRES
               refinement absorbs the perturbation). MixedInfo.shift reports sigma.
    [refine]   M^-1 v = diag(d) (L L^H)^-1 diag(d) v; refinement with the true A, only its
               `uplo` triangle read (hemm)

Codes beyond refine's: -2 (overflow, as gesv_mixed), -3 when even the largest shift breaks down
(info as LAPACK's potrf: the order of the failing minor).
"""
from __future__ import annotations

import numpy as np

from ..backend.reduced import LARGEST, UNIT_ROUNDOFF, inverse_power_of_two
from ._mixed import MixedSolver
from ._preconditioner import TriangularPreconditioner
from .potrf import potrf

SHIFT_ATTEMPTS = 4  # shifts u_low * 4, 16, 64, 256 after an unshifted breakdown


class PosvMixed(MixedSolver):
    herk_panels = True

    def __init__(self, ops, options, plan, uplo):
        super().__init__(ops, options, plan)
        self.uplo, self.shift = uplo, 0.0

    def scale_and_narrow(self, source, low):
        """d = 2^-round(log2 sqrt(a_ii)) (ones when not `equilibrate`), which keeps a Hermitian
        positive definite matrix so and brings its diagonal to about 1 (off-diagonal entries
        follow: |a_ij| <= sqrt(a_ii a_jj)); then one pass over the `uplo` triangle for its
        scaled copy and ||A||_inf (row sums of the triangle plus its column sums, less the
        diagonal). The copy's other triangle is never read: the factorization's scratch."""
        diagonal = np.abs(source.diagonal()).astype(np.float64)
        d = inverse_power_of_two(np.sqrt(diagonal)) if self.options.equilibrate else \
            np.ones(source.n)
        overflow, row_sum, col_sum = self.ops.narrow_hermitian(
            self.ops.lane("gpu:update"), low, source.block(0, source.n, 0, source.n),
            low.block(0, low.n, 0, low.n), d, self.uplo, LARGEST[self.options.lowest])
        return d, d, float((row_sum + col_sum - diagonal).max(initial=0.0)), overflow

    def factor(self, A, low, plan, r, c) -> int:
        shifts = [0.0] + [UNIT_ROUNDOFF[self.options.lowest] * 4.0 ** k
                          for k in range(1, SHIFT_ATTEMPTS + 1)]
        for attempt, sigma in enumerate(shifts):
            if attempt:  # the failed attempt overwrote part of the copy: make it again
                self.narrow_again(A, low, r, c)
                self.ops.add_to_diagonal(self.ops.lane("gpu:update"), low,
                                         low.block(0, low.n, 0, low.n), sigma)
            info, trace = potrf(low, plan, self.uplo)
            if plan.trace_path:
                trace.to_chrome(plan.trace_path)
            if info == 0:
                self.shift = sigma
                return 0
        return info

    def preconditioner(self, low, nrhs, r, c):
        first, second = ("N", "C") if self.uplo == "L" else ("C", "N")
        return TriangularPreconditioner(self.ops, low, low.n, nrhs,
                                        [(self.uplo, first, "N"), (self.uplo, second, "N")], r, c)


def posv_mixed(ops, A, B, options, plan, uplo="L", arriving=None):
    """Solve A X = B for Hermitian positive definite A (its `uplo` triangle in the tile store A,
    or in the host array of a HostResidentMatrix) by a low-precision Cholesky factorization and
    refinement. Returns (X, MixedInfo); see MixedSolver.solve."""
    solver = PosvMixed(ops, options, plan, uplo)
    X, info = solver.solve(A, B, arriving)
    info.shift = solver.shift
    return X, info
