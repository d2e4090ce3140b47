"""potrf_dist: blocked right-looking Cholesky over several workers, A = L L^H, the matrix in
1-D block-cyclic columns (lapack/_dist.py says why), one worker's share. Lower only: the user
layer factors an upper one as the lower triangle of A^H (hybridla/distributed.py).

For each step k (diagonal block k0:k1, kb = k1 - k0 <= nb), on every rank:

    owner of block k:  A11 = L11 L11^H;  A21 := A21 L11^-H      its block column, in place
    all:               slot := the owner's [L11; L21]            one broadcast (comm:bcast)
    all, each of its block columns j right of the panel (rows j0:n), the next one first:
                       A[j0:n, j] -= L[j0:n, k] L[j, k]^H        herk on the diagonal block,
                                                                 gemm below it
    owner:             block column k is final: it goes home (a host-resident part)

Look-ahead across workers as in getrf_dist: each rank's first block column past the panel
goes first on the panel lane; on the owner of step k + 1 it is the next diagonal block.
info as LAPACK's: the order of the first leading minor that is not positive definite.
"""
from __future__ import annotations

import functools

from ..panel.chol import potrf_panel_cpu
from ..scheduler import Region
from ..update import chol as chol_update
from ._blocked import BlockedSteps
from ._dist import factor_distributed, record_broadcast, record_panel


def potrf_dist(run):
    """Factor this rank's share run.A (lower) in place; run.results gets the infos of the
    panels it factored. Returns the trace."""
    return factor_distributed(run, record_potrf_dist, "potrf")


def record_potrf_dist(graph, run, slots):
    A, n = run.A, run.layout.n
    steps = BlockedSteps(graph, A, run.plan, n,
                         lambda k0, k1: chol_update.herk_flops(n, k0, k1, k1, n))
    slots.run_ahead(steps.split_steps)
    for step, k0, k1, owner, lk in run.steps(n):
        kb, mine = k1 - k0, owner == run.rank
        S, slot = slots.store(step), slots.region(step)
        panel, own_panel = run.panel(step, k0, k1, lk, n, owner)

        # A11 = L11 L11^H;  A21 := A21 L11^-H
        if mine:
            record_panel(graph, run, step, panel, _panel,
                         [own_panel, Region("diagonal inverse", 0, 1)],
                         kb ** 3 / 3 + float(kb * kb * (n - k1)))

        # slot := [L11; L21], from the owner
        record_broadcast(graph, run, step, owner,
                         lambda lane, panel=panel, k0=k0, kb=kb: [panel.block(0, n - k0, 0, kb)],
                         lambda lane, S=S, k0=k0, kb=kb: [S.block(0, n - k0, 0, kb)],
                         [own_panel], slots)

        # A[j0:n, j] -= L[j0:n, k] L[j, k]^H for this rank's block columns j right of k
        steps.update_trailing(step, lk + kb if mine else lk, run.width,
                              lambda c0, c1, lane: _record_update(graph, run, step, lane, S,
                                                                  slot, k0, kb, c0, c1))

        # the owner's block column k is final since its panel: a host-resident part sends it
        # home (the strict upper triangle is never written and stays as it came)
        if mine:
            steps.send_home(step, k0, n, lk, lk + kb)
        yield step


def _record_update(graph, run, step, lane, S, slot, k0, kb, c0, c1):
    """The update task of local columns c0:c1: it writes rows j0:n of each block column (j0
    its first global column, found here once for the regions, the flops and the task); the
    strict upper triangle above them is never written, so a host-resident part keeps it at
    home (no download)."""
    nb, n = run.plan.nb, run.layout.n
    starts = [run.layout.global_column(run.rank, c) for c in range(c0, c1, nb)]
    return graph.add("update", step, lane,
                     functools.partial(_update, run=run, S=S, k0=k0, kb=kb, c0=c0, c1=c1,
                                       starts=starts),
                     reads=[slot],
                     writes=[Region("A", j0, n, c, min(c + nb, c1))
                             for j0, c in zip(starts, range(c0, c1, nb))],
                     flops=sum(chol_update.herk_flops(n - j0, 0, kb, 0, min(nb, c1 - c))
                               for j0, c in zip(starts, range(c0, c1, nb))))


def _panel(lane, ops, panel):
    kb = panel.n
    if ops.has_device:
        ops.potrf_panel(lane, panel, 0, "L", 0, kb)
    else:
        potrf_panel_cpu(panel, 0, 0, kb, "L")
    chol_update.solve_off_diagonal(ops, lane, panel, "L", 0, kb)


def _update(lane, run, S, k0, kb, c0, c1, starts):
    """Local columns c0:c1, each block column from its global row in `starts` down: the
    staircase update of update/chol.py on the local store and the slot (whose rows are k0:n)."""
    ops, A, n, nb = run.ops, run.A, run.layout.n, run.plan.nb
    top = starts[0]
    chol_update.staircase_update(ops, lane, S.block(top - k0, n - k0, 0, kb),
                                 A.block(top, n, c0, c1), [j0 - top for j0 in starts], nb,
                                 A.scratch)
