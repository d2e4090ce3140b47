"""ormqr, ormql, ormlq: C := op(Q) C or C op(Q), with Q from geqrf, geqlf or gelqf (for complex
dtypes these are LAPACK's unmqr, unmql, unmlq; op is "N" or "C", and "T" for real dtypes).

Q is the product of the factorization's block reflectors, one per step s of its blocked loop,
G_s = I - V_s T_s V_s^H (V_s explicit from the factors' panel s, T_s by larft, as in geqrf):

    QR, QL:  Q = P,   LQ:  Q = P^H,   P = G_0 G_1 ... G_{S-1}

so op(Q) is P or P^H, applied block by block:

    C := P C    = G_0 (G_1 (... (G_{S-1} C)))     the blocks last to first
    C := P^H C  = G_{S-1}^H (... (G_0^H C))       first to last
    C := C P    = ((C G_0) G_1) ...               first to last
    C := C P^H  = ((C G_{S-1}^H) ...) G_0^H       last to first

(LAPACK's dormqr order). G_s touches only the rows (side "L") or columns ("R") of C where V_s is
not zero. C's other dimension is cut into chunks, one chain of update tasks each, which run in
parallel; a step's V and T are formed once, into one of two workspace slots of the factors'
store, so the next step's are formed while this step's updates run.
"""
from __future__ import annotations

import numpy as np

from ..scheduler import TaskGraph
from ..update.qr import larfb_flops
from ._blocked import run_graph
from ._householder import LQ, QL, QR, record_block_update, record_reflectors, \
    reserve_reflector_slots

_SLOTS = 2


def ormqr(F, C, plan, side="L", trans="N", trace=None):
    """Overwrite the tile store C with op(Q) C (side "L") or C op(Q) ("R"), F from geqrf."""
    return apply_q(F, C, plan, QR, side, trans, trace)


def ormql(F, C, plan, side="L", trans="N", trace=None):
    """As ormqr, F from geqlf."""
    return apply_q(F, C, plan, QL, side, trans, trace)


def ormlq(F, C, plan, side="L", trans="N", trace=None):
    """As ormqr, F from gelqf."""
    return apply_q(F, C, plan, LQ, side, trans, trace)


def apply_q(F, C, plan, form, side, trans, trace=None):
    """C := op(Q) C or C op(Q) for the Q that the factors F (of `form`: QR, QL, LQ) represent,
    F.tau's k reflectors. Returns the run's trace."""
    graph = TaskGraph()
    record_apply_q(graph, F, C, plan, form, side, trans)
    return run_graph(graph, plan, f"orm{form.storage.lower()}", trace)


def record_apply_q(graph, F, C, plan, form, side, trans):
    """Record C := op(Q) C or C op(Q) into `graph` (F's resource "F", C's "C")."""
    ops, nb = plan.backend, plan.nb
    if side not in ("L", "R"):
        raise ValueError(f"side must be 'L' or 'R'; got side={side!r}")
    if trans == "T" and np.dtype(F.dtype).kind != "c":
        trans = "C"  # Q^T = Q^H for real Q
    if trans not in ("N", "C"):
        raise ValueError(f"trans must be 'N' or 'C' ('T' for real dtypes); got trans={trans!r}")
    order = form.shape(F.m, F.n)[0]  # Q is order x order
    k = len(F.tau)
    if (C.m if side == "L" else C.n) != order:
        raise ValueError(f"C ({C.m} x {C.n}) does not fit Q of order {order} on side {side!r}")
    p_trans = form.on_p(trans)
    steps = list(enumerate(range(0, k, nb)))
    if (side == "L") == (p_trans == "N"):
        steps.reverse()
    width = C.n if side == "L" else C.m
    tasks = ops.update_tasks(plan.workers)
    chunks = [(w0, min(w0 + -(-width // tasks), width))
              for w0 in range(0, width, max(1, -(-width // tasks)))]
    reserve_reflector_slots(F, _SLOTS, order, min(nb, k))
    for i, (step, k0) in enumerate(steps):
        k1 = min(k0 + nb, k)
        reflectors = record_reflectors(graph, ops, F, "F", form, step, i % _SLOTS,
                                       form.rect(F.m, F.n, k0, order, k0, k1), order - k0,
                                       k1 - k0, form.taus(k, k0, k1))
        s0, s1 = form.span(order, k0, order)  # where V_s is not zero
        for w0, w1 in chunks:
            rect = (s0, s1, w0, w1) if side == "L" else (w0, w1, s0, s1)
            record_block_update(graph, ops, F, reflectors, side, p_trans, form.direction, C,
                                "C", rect, "gpu:update", step,
                                larfb_flops(order - k0, k1 - k0, w1 - w0))
    return graph
