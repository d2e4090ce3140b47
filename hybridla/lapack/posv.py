"""posv: solve A X = B for Hermitian positive definite A by potrf then potrs."""
from __future__ import annotations

from .potrf import potrf
from .potrs import potrs


def posv(A, B, plan, uplo="L", trace=None):
    """Factor A in place and overwrite B with the solution unless A is not positive definite.
    Returns (info, trace); info > 0 leaves B untouched, as LAPACK's posv does."""
    info, trace = potrf(A, plan, uplo, trace)
    if info == 0:
        potrs(plan.backend, A, B, uplo)
    return info, trace
