"""geqrf_dist: blocked right-looking Householder QR over several workers, A = Q R, the matrix in
1-D block-cyclic columns (lapack/_dist.py says why), one worker's share; any m x n.

For each step k (panel columns k0:k1, kb = k1 - k0 <= nb), on every rank:

    owner of block k:  [A11; A21] = Q1 [R11; 0]           its panel, in place: reflectors, tau
    all:               slot := the owner's reflectors and tau[k0:k1]   one broadcast
    all:               V1 := the slot's reflectors, explicitly;  T1 := larft(V1, tau)
    all, its columns right of the panel, the next block column first:
                       [A12; A22] := Q1^H [A12; A22]       W = V1^H C;  W := T1^H W;  C -= V1 W
    final, and sent home where the part is host-resident: the owner's panel, every rank's
                       rows k0:k1 right of it

Each rank forms T1 itself from the broadcast reflectors (kb^2 (m - k0) flops, beside the
update's 4 kb (m - k0) w) rather than receiving it: one message a step. Look-ahead across
workers as in getrf_dist. info is 0: a Householder factorization cannot fail.
"""
from __future__ import annotations

from ..panel.qr import householder_panel_cpu
from ..scheduler import Region
from ..scheduler.graph import WindowGraph
from ..scheduler.plan import PANEL_FLOPS
from ..update.qr import larfb_flops
from ._blocked import BlockedSteps, upload_all
from ._dist import (AbortingGraph, PanelSlots, factor_distributed, record_broadcast,
                    record_panel, run_graph_of)
from ._householder import QR, record_block_update, record_reflectors, reserve_reflector_slots


def geqrf_dist(run):
    """Factor this rank's share run.A in place (R and the reflectors, LAPACK's storage);
    run.results gets the tau of the panels it factored. Returns the trace."""
    return factor_distributed(run, record_geqrf_dist, "geqrf", tau=True)


def record_geqrf_dist(graph, run, slots):
    ops, A, m, nb = run.ops, run.A, run.layout.m, run.plan.nb
    k_end = min(m, run.layout.n)
    steps = BlockedSteps(graph, A, run.plan, k_end,
                         lambda k0, k1: larfb_flops(m - k0, k1 - k0, run.width))
    slots.run_ahead(steps.split_steps)
    for S in slots.stores:
        reserve_reflector_slots(S, 1, m, min(nb, k_end))
    for step, k0, k1, owner, lk in run.steps(k_end):
        kb, mine = k1 - k0, owner == run.rank
        S, slot = slots.store(step), slots.slot(step)
        panel, own_panel = run.panel(step, k0, k1, lk, m, owner)

        # [A11; A21] = Q1 [R11; 0]
        if mine:
            record_panel(graph, run, step, panel, _panel, [own_panel],
                         PANEL_FLOPS["geqrf"](m - k0, kb))

        # slot := the reflectors and tau[k0:k1], from the owner
        record_broadcast(graph, run, step, owner,
                         lambda lane, panel=panel, k0=k0, kb=kb: [
                             panel.block(0, m - k0, 0, kb), panel.tau_block(0, kb)],
                         lambda lane, S=S, k0=k0, kb=kb: [S.block(0, m - k0, 0, kb),
                                                          S.tau_block(0, kb)],
                         [own_panel], slots)

        # Q1 = I - V1 T1 V1^H, from the slot (its graph resource the slot's: a window graph)
        on_slot = WindowGraph(graph, slots.name(slot), 0, 0, prefix=f"{slots.name(slot)} ")
        reflectors = record_reflectors(on_slot, ops, S, "A", QR, step, slot,
                                       (0, m - k0, 0, kb), m - k0, kb, (0, kb))

        # [A12; A22] := Q1^H [A12; A22]; on the next panel's owner its column first, alone:
        # beside the rest of the update it took 3.9-16.8 ms against 0.5-1.2 ms, on the path
        # from one panel to the next that bounds the run (the panel after it then starts beside
        # the update: the run gained too little to measure; perf/RESULTS.md, issue 32, stop 51)
        next_owner = step + 1 < run.layout.blocks and run.layout.owner(step + 1) == run.rank
        steps.update_trailing(step, lk + kb if mine else lk, run.width,
                              lambda c0, c1, lane, **order: record_block_update(
                                  graph, ops, S, reflectors, "L", "C", QR.direction, A, "A",
                                  (k0, m, c0, c1), lane, step, larfb_flops(m - k0, kb, c1 - c0),
                                  **order),
                              rest_after_lookahead=next_owner)

        # final now, sent home where the part is host-resident: the owner's panel (R11 and
        # the reflectors) and rows k0:k1 (R12) of every rank's columns right of it
        if mine:
            steps.send_home(step, k0, m, lk, lk + kb)
        if run.width > (lk + kb if mine else lk):
            steps.send_home(step, k0, k1, lk + kb if mine else lk, run.width)
        yield step


def _panel(lane, ops, panel):
    rows, cols = (0, panel.m), (0, panel.n)
    if ops.has_device:
        ops.householder_panel(lane, panel, 0, "QR", rows, cols, cols)
    else:
        householder_panel_cpu(panel, 0, "QR", rows, cols, cols)


def orgqr_dist(run, columns, tau):
    """Q's first `columns` columns (orgqr) from this rank's share of geqrf_dist's factors,
    into a store of its own (run.output: its block columns of Q, in the same layout): Q E =
    H(0) (H(1) ... (H(k-1) E)) for E the identity's columns, the reflector blocks in reverse
    order, each broadcast by its owner and applied by every rank to its columns of E at and
    right of the block (the others are still zero in its rows). `tau`: every reflector's.
    Returns the trace."""
    import numpy as np

    ops, A, m, nb = run.ops, run.A, run.layout.m, run.plan.nb
    k_end = min(m, run.layout.n, columns)
    qlayout = type(run.layout)(m, columns, nb, run.layout.size)
    width = qlayout.width(run.rank)
    if A.streamed:  # the factors only read here: all of them up, now
        upload_all(A, run.plan)
    E = run.new_output(m, width)
    identity = np.zeros((m, width), dtype=A.dtype, order="F")
    identity[qlayout.columns(run.rank), np.arange(width)] = 1
    lane = ops.lane("gpu:update")
    if width:
        with lane:
            ops.from_host(lane, identity, E.block(0, m, 0, width))
    graph = AbortingGraph(run.transport)
    slots = PanelSlots(ops, m, nb, A.dtype, run.plan.lookahead + 2, run.plan.device_settings)
    A.set_tau(np.asarray(tau, dtype=A.dtype))  # the owners send theirs with the reflectors
    try:
        for S in slots.stores:
            reserve_reflector_slots(S, 1, m, min(nb, max(k_end, 1)))
        trace = run_graph_of(run, graph, _record_orgqr(graph, run, slots, E, qlayout, k_end),
                             "orgqr")
    finally:
        slots.close()
    return trace


def _record_orgqr(graph, run, slots, E, qlayout, k_end):
    ops, A, m = run.ops, run.A, run.layout.m
    for step, k0, k1, owner, lk in list(run.steps(k_end))[::-1]:
        kb, S, slot = k1 - k0, slots.store(step), slots.slot(step)
        # slot := the step's reflectors and tau[k0:k1], from the owner
        record_broadcast(graph, run, step, owner,
                         lambda lane, k0=k0, k1=k1, lk=lk: [A.block(k0, m, lk, lk + k1 - k0),
                                                            A.tau_block(k0, k1)],
                         lambda lane, S=S, k0=k0, kb=kb: [S.block(0, m - k0, 0, kb),
                                                          S.tau_block(0, kb)],
                         [Region("A", k0, m, lk, lk + kb)], slots)
        on_slot = WindowGraph(graph, slots.name(slot), 0, 0, prefix=f"{slots.name(slot)} ")
        reflectors = record_reflectors(on_slot, ops, S, "A", QR, step, slot,
                                       (0, m - k0, 0, kb), m - k0, kb, (0, kb))
        # E[k0:m, c] := H E[k0:m, c] for this rank's columns of Q from block k on
        c0 = qlayout.local_start(run.rank, step)
        c1 = qlayout.width(run.rank)
        if c1 > c0:
            record_block_update(graph, ops, S, reflectors, "L", "N", QR.direction, E, "E",
                                (k0, m, c0, c1), "gpu:update", step,
                                larfb_flops(m - k0, kb, c1 - c0))
        yield step

