"""getrf_dist: blocked right-looking LU with partial pivoting over several workers, P A = L U,
the matrix in 1-D block-cyclic columns (lapack/_dist.py says why), one worker's share.

For each step k (panel columns k0:k1, kb = k1 - k0 <= nb), on every rank:

    owner of block k:  [A11; A21] = P_k [L11; L21] U11      its panel, in place
    all:               slot := the owner's [L11; L21] and P_k  one broadcast (comm:bcast),
                       P_k made the row moves it amounts to, which every laswp below applies
                       at once (replayed column by column, the interchanges of the columns
                       left of the panels alone took 0.16-0.19 s of each worker's run at
                       n = 65536 on 2 GPUs, perf/RESULTS.md, issue 32)
    all, its columns right of the panel, the next one first (look-ahead) then the rest:
                       [A12; A22] := P_k^T [A12; A22];  A12 := L11^-1 A12;  A22 -= L21 A12
    all:               [A10; A20] := P_k^T [A10; A20]          its finished columns on the left
    all:               rows k0:k1 of its columns are final: they go home (a host-resident part)

Every worker holds whole columns, so the interchanges never leave it. Look-ahead across
workers: each rank updates its first block column past the panel on the panel lane first;
on the owner of step k + 1 that is the next panel, which it factors and broadcasts while
every rank (itself included) is still in step k's update, so the broadcast hides under it.
"""
from __future__ import annotations

import functools

from ..update import lu as lu_update
from ._blocked import BlockedSteps
from ._dist import factor_distributed, record_broadcast, record_panel
from ..scheduler import Region


def getrf_dist(run):
    """Factor this rank's share run.A in place; run.results gets, for the panels this rank
    factored, their global pivots and infos (_dist.panel_results). Returns the trace."""
    return factor_distributed(run, record_getrf_dist, "getrf", pivots=True)


def record_getrf_dist(graph, run, slots):
    ops, A, m = run.ops, run.A, run.layout.m
    k_end = min(m, run.layout.n)
    steps = BlockedSteps(graph, A, run.plan, k_end,
                         lambda k0, k1: lu_update.update_flops(m, k0, k1, k1, run.width))
    slots.run_ahead(steps.split_steps)
    for step, k0, k1, owner, lk in run.steps(k_end):
        kb, mine = k1 - k0, owner == run.rank
        # the step's slot as a store of rows k0:m, whose pivots are the step's (relative to k0)
        S, slot = ops.window(slots.store(step), 0, m - k0, 0, kb), slots.region(step)
        rows = ops.window(A, k0, m, 0, run.width)  # rows k0:m: the step's interchanges' reach
        panel, own_panel = run.panel(step, k0, k1, lk, m, owner)

        # [A11; A21] = P [L11; L21] U11
        if mine:
            record_panel(graph, run, step, panel, _panel, [own_panel],
                         lu_update.update_flops(m - k0, 0, 0, 0, 0))

        # slot := [L11; L21] and the pivots (relative to k0), from the owner
        record_broadcast(graph, run, step, owner,
                         lambda lane, panel=panel, k0=k0, kb=kb: [
                             panel.block(0, m - k0, 0, kb), run.transport.pivots(panel, 0, kb)],
                         lambda lane, S=S, k0=k0, kb=kb: [S.block(0, m - k0, 0, kb),
                                                          run.transport.pivots(S, 0, kb)],
                         [own_panel], slots,
                         then=lambda lane, S=S, kb=kb: ops.prepare_interchanges(lane, S, 0, 0,
                                                                                kb))

        # [A12; A22] := P^T [A12; A22];  A12 := L11^-1 A12;  A22 := A22 - L21 A12
        updates = steps.update_trailing(
            step, lk + kb if mine else lk, run.width,
            lambda c0, c1, lane: graph.add(
                "update", step, lane,
                functools.partial(_update, ops=ops, rows=rows, A=A, S=S, k0=k0, kb=kb, c0=c0,
                                  c1=c1),
                reads=[slot], writes=[Region("A", k0, m, c0, c1)],
                flops=lu_update.update_flops(m, k0, k1, c0, c1)))

        # [A10; A20] := P^T [A10; A20], on the update lane after this step's update: ready as
        # soon as the broadcast is enqueued, it went ahead of the updates of columns still
        # arriving, and the stream waited for the other rank's panel with them behind it (1.05
        # s of one worker's update lane at n = 120000 on 2 GPUs: perf/RESULTS.md, issue 32,
        # stop 51)
        if lk > 0:
            graph.add("swap_left", step, "gpu:update",
                      functools.partial(ops.laswp, A=rows, c0=0, c1=lk, k0=0, k1=kb,
                                        pivots_of=S),
                      reads=[slot], writes=[Region("A", k0, m, 0, lk)], follows=updates[-1:])

        # rows k0:k1 of this rank's columns are final now (all rows that remain, after the
        # last step): a host-resident part sends them home
        steps.send_home(step, k0, k1 if k1 < k_end else m, 0, run.width)
        yield step


def _panel(lane, ops, panel):
    ops.getrf_panel(lane, panel, 0, 0, 0, panel.n)


def _update(lane, ops, rows, A, S, k0, kb, c0, c1):
    m = A.m
    ops.laswp(lane, rows, c0, c1, 0, kb, pivots_of=S)
    lu_update.eliminate(ops, lane, S.block(0, kb, 0, kb), S.block(kb, m - k0, 0, kb),
                        A.block(k0, k0 + kb, c0, c1), A.block(k0 + kb, m, c0, c1))
