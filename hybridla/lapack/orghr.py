"""orghr, ormhr: gehrd's Q formed, or applied (unghr, unmhr for complex dtypes), by the QR family.

gehrd's Q = H(lo) ... H(hi-1) is the identity outside rows and columns lo+1..hi, and inside it is
the Q of a QR factorization: reflector j has its unit in row j + 1, so in the nh x nh sub-block
F[lo+1:e, lo:e-1] of the factors (e = hi + 1, nh = hi - lo) reflector j sits where geqrf puts
reflector j - lo, unit on the diagonal, with tau[lo:hi]. LAPACK's dorghr shifts the reflectors one
column right in place and calls dorgqr; here a SubMatrix view lends orgqr and ormqr that
sub-block as it is, no copy:

    Q = diag(I_{lo+1}, Q_sub, I_{n-e}),   Q_sub = orgqr(F[lo+1:e, lo:e-1], tau[lo:hi])
    op(Q) C:  rows lo+1:e of C := op(Q_sub) C[lo+1:e, :]       (side "L")
    C op(Q):  columns lo+1:e of C := C[:, lo+1:e] op(Q_sub)     (side "R")

lo and hi are gehrd's (0-based, inclusive: scipy's). Every backend: the tasks are orgqr's and
ormqr's (the GPU's, on the cuda backend).
"""
from __future__ import annotations

from ..scheduler import Trace
from ._householder import QR
from ._submatrix import SubMatrix
from .gehrd import check_lo_hi
from .orgqr import form_q
from .ormqr import apply_q


def orghr(F, Q, plan, lo=0, hi=None, trace=None):
    """Overwrite the n x n tile store Q with gehrd's Q, from the factors F (a store with the n - 1
    scalars as its tau). Returns the run's trace."""
    n = F.n
    lo, hi = check_lo_hi(n, lo, n - 1 if hi is None else hi)
    if (Q.m, Q.n) != (n, n):
        raise ValueError(f"Q must be {n} x {n} to hold the Q of the factors; got {Q.m} x {Q.n}")
    ops = plan.backend
    if n:
        lane = ops.lane("gpu:update")
        with lane:  # the identity; the run below starts after it (a device backend synchronizes)
            ops.laset(lane, "A", 0, 1, Q.block(0, n, 0, n))
    nh = hi - lo
    if nh <= 0:
        ops.synchronize()
        return trace if trace is not None else Trace()
    return form_q(_reflectors(F, lo, hi), SubMatrix(Q, lo + 1, lo + 1, nh, nh), plan, QR, trace)


def ormhr(F, C, plan, lo=0, hi=None, side="L", trans="N", trace=None):
    """Overwrite the tile store C with op(Q) C (side "L") or C op(Q) ("R"), Q gehrd's from the
    factors F (with its tau); op by `trans`: "N", "C" (and "T" for real dtypes). Returns the
    run's trace."""
    n = F.n
    lo, hi = check_lo_hi(n, lo, n - 1 if hi is None else hi)
    if side not in ("L", "R"):
        raise ValueError(f"side must be 'L' or 'R'; got side={side!r}")
    if trans not in ("N", "C", "T"):
        raise ValueError(f"trans must be 'N' or 'C' ('T' for real dtypes); got trans={trans!r}")
    if (C.m if side == "L" else C.n) != n:
        raise ValueError(f"C ({C.m} x {C.n}) does not fit Q of order {n} on side {side!r}")
    nh = hi - lo
    if nh <= 0:
        return trace if trace is not None else Trace()
    sub = SubMatrix(C, lo + 1, 0, nh, C.n) if side == "L" else SubMatrix(C, 0, lo + 1, C.m, nh)
    return apply_q(_reflectors(F, lo, hi), sub, plan, QR, side, trans, trace)


def _reflectors(F, lo, hi):
    """gehrd's reflectors lo..hi-1 as the factors of a QR factorization (see the module)."""
    nh = hi - lo
    return SubMatrix(F, lo + 1, lo, nh, nh, taus=(lo, hi))
