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

`orghr_home` forms Q for a host array (the CPU interface) where the factors' store computes, in
a store whose home is that array, and sends Q home as a factorization's result goes: on a device
backend the reflectors stay where gehrd left them and Q is formed beside them, so the only
traffic is Q coming down (n^2 elements, staged through the pinned slots by default).
"""
from __future__ import annotations

import numpy as np

from ..scheduler import TaskGraph, Trace
from ..scheduler.transfers import TransferPlan
from ._blocked import run_graph
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


def orghr_home(F, q, plan, lo=0, hi=None, trace=None):
    """Overwrite the host array q (F-ordered, n x n, F's dtype) with gehrd's Q from the factors'
    store F (with its n - 1 scalars as tau, as orghr takes it), formed where F computes.

    Q's store is `plan.backend.host_matrix(q, q)`: on a device backend a device store whose home
    is q, which orghr fills (nothing of q goes up) and which then goes home whole, staged through
    the pinned slots or copied directly as plan.device_settings say (q's pages are first touched
    by those copies); on the host backend q itself, formed in place, nothing moving. F's staging slots, if it holds them, are given back first:
    its own transfers are over (gehrd's run has ended), and one store at a time holds them.
    Returns `trace` (an earlier run's Trace, or None) with the records of Q's runs after its own,
    on its clock. q, lo and hi are checked before anything is touched (ValueError)."""
    n = F.n
    lo, hi = check_lo_hi(n, lo, n - 1 if hi is None else hi)
    if q.shape != (n, n) or q.dtype != np.dtype(F.dtype) or not q.flags.f_contiguous:
        raise ValueError(f"q must be an F-ordered {n} x {n} {np.dtype(F.dtype)} array to hold "
                         f"the Q of the factors; got {q.shape} {q.dtype}")
    ops = plan.backend
    F.end_staging()
    # the host backend takes no device settings: it forms Q in q itself
    Q = ops.host_matrix(q, q, plan.nb, settings=plan.device_settings if ops.has_device else None)
    try:
        trace = _after(trace, orghr(F, Q, plan, lo, hi))
        if Q.streamed:  # every element of Q is final now: all of it goes home
            graph = TaskGraph()
            TransferPlan(graph, Q, plan).send_home(0, 0, n, 0, n)
            trace = _after(trace, run_graph(graph, plan, "orghr"))
    finally:
        Q.close()
    return trace


def _after(trace, later):
    """`trace` (None: none) with the records of `later`, the Trace of a run that started after
    its own, added on its clock when first read (each run counts from its own start; their wall
    origins say how far apart the starts were). Returns the trace that holds both."""
    if trace is None:
        return later
    shift = 0.0 if trace.wall_origin is None or later.wall_origin is None \
        else later.wall_origin - trace.wall_origin
    trace.add_later(lambda: [(r["name"], r["lane"], r["start"] + shift, r["end"] + shift,
                              r["step"], r["flops"], r["bytes"]) for r in later.records])
    return trace


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
