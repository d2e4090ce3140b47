"""gesv: solve A X = B by getrf then getrs, on one tile store for A and one for B."""
from __future__ import annotations

from .getrf import getrf
from .getrs import getrs


def gesv(A, B, plan, trace=None):
    """Factor A in place and overwrite B with the solution unless A is singular.
    Returns (pivots, info, trace); info > 0 leaves B untouched, as LAPACK's gesv does."""
    pivots, info, trace = getrf(A, plan, trace)
    if info == 0:
        getrs(plan.backend, A, B, "N")
    return pivots, info, trace
