"""geqrf_ooc: Householder QR, A = Q R, of a host matrix larger than the memory budget (and with
it geqlf's QL and gelqf's LQ, in the coordinates of their QR problem: _householder.py's forms):
left-looking over wide block columns, each factored in-core by geqrf's engine. The skeleton
(the working store, the copies, the windows) is _ooc.WideColumns'.

In the QR problem's coordinates, for each wide column J = columns j0:j1 (W wide, as the budget
allows), in one of two buffers:

    A[:, J] comes up                                                          pass 1
    for each block column K = k0:k1 left of j0 (nb wide), its reflectors streamed up (pass 2),
    except the previous wide column's, which are still in the other buffer:
        V_K := its reflectors, explicit;  T_K := larft(V_K, tau_K)       Q_K = I - V T V^H
        A[k0:, J] := Q_K^H A[k0:, J]                                      larfb: 2 gemms, trmm
    R[0:j0, J] is final: it goes home                                     pass 3, while J is
    A[j0:, J] = Q_J R_J                 geqrf's engine on the buffer's rows j0:m      factored
    R_JJ and the reflectors go home                                       pass 3

The passes over the host matrix, and what they move (s bytes an element, c = n / W, m >= n):
    1  every element up once: m n s
    2  for wide column J, rows k0:m of the block columns left of the previous wide column: LU's
       sum, about (m n^2 / (2 W) - n^3 / (6 W)) s (n^3 s / (3 W) square), against 4 n^3 / 3
       flops for a square matrix: twice LU's flops a byte
    3  every element down once: m n s
Each is a graph task on a copy lane (staged through pinned slots on a device) that overlaps the
compute, as getrf_ooc's. T_K is formed again for each wide column that K updates (2 (m - k0)
nb^2 flops, nb / (2 W) of the update's): cheaper than keeping it.

info is 0: a Householder factorization cannot fail.
"""
from __future__ import annotations

import numpy as np

from ..update.qr import larfb_flops
from ._householder import QR, record_block_update, record_reflectors
from ._ooc import WideColumns
from .geqrf import record_geqrf

_PANEL_SLOTS = 2  # the finished panels' V and T, in turn


def geqrf_ooc(source, result, plan, form=QR, trace=None):
    """Factor the host matrix `source` into `result` (F-ordered, the same array with
    overwrite_a) as `form` (QR, QL, LQ) out of core, within plan.memory_budget. Returns
    (tau, info, trace) as geqrf's."""
    routine = {"QR": "geqrf", "QL": "geqlf", "LQ": "gelqf"}[form.storage]
    with WideColumns(source, result, plan, routine) as wide:
        ops, A, m, nb = wide.ops, wide.A, wide.M, wide.nb
        side, trans = form.trailing_update()
        for slot in range(_PANEL_SLOTS):  # at their largest, before the run
            A.workspace(f"VP{slot}", m, nb)
            A.workspace(f"TP{slot}", nb, nb)
        for J in wide:
            wide.bring_up(J, 0, m)
            for P in wide.finished(J):
                for K in wide.panels(J, P, rows=lambda k0, k1: (k0, m)):
                    step, kb = K.k0 // nb, K.k1 - K.k0
                    slot = wide.graph.counter("panel reflectors") % _PANEL_SLOTS
                    # Q_K = I - V_K T_K V_K^H from the finished panel
                    reflectors = record_reflectors(
                        wide.graph, ops, A, "A", form, step, f"P{slot}",
                        K.rect, m - K.k0, kb, form.taus(P.factored, K.k0 - P.c0, K.k1 - P.c0),
                        tau_of=P.store)
                    # A[k0:, J] := Q_K^H A[k0:, J]
                    record_block_update(wide.graph, ops, A, reflectors, side, trans,
                                        form.direction, A, "A", wide.buffer(J, K.k0, m),
                                        "gpu:update", step,
                                        larfb_flops(m - K.k0, kb, J.width))
            # R[0:j0, J] is final
            wide.send_home(J, 0, min(J.c0, m))
            if J.c0 < wide.k_end:
                # A[j0:, J] = Q_J R_J
                wide.factor(J, record_geqrf, form)
            wide.send_home(J, J.c0, m)
        trace = wide.run(trace)
        tau = np.zeros(wide.k_end, dtype=result.dtype)
        for J in wide:
            if J.store is not None:
                local, _ = J.store.finish_tau()
                t0, t1 = form.taus(wide.k_end, J.c0, J.c0 + J.factored)
                tau[t0:t1] = local[:J.factored]
    return tau, 0, trace
