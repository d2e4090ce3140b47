"""The skeleton every streamed solve on host factors shares (getrs_ooc, potrs_ooc, geqrs_ooc):
factors in host memory, perhaps larger than the memory budget, and a right-hand side B that
goes up once and stays where the backend computes while the factors stream through it.

The working store, within plan.memory_budget:

    columns [0, W)             B's columns c0:c0 + W (all of B where it fits, else column
                               blocks of W, one after the other: `blocks`)
            [W, W + 2 nb)      two slots for the factors' block columns, in turn: one arrives
                               while the other is used (as _ooc.WideColumns.panels')
    rows    the factors' own (row i of the store is row i of B)

A triangular solve op(T) X = B (`trsm`) streams T's block columns K = k0:k1 (nb wide) in the
order the substitution needs them, each once: rows k0:n of a lower T, rows 0:k1 of an upper
one (its diagonal block T_KK and the rest of the column, T_RK):

    op "N" (right-looking):  X_K := T_KK^-1 B_K;             B_R := B_R - T_RK X_K
    op "T"/"C" (left-looking: column K of T is row K of op(T)):
                             B_K := B_K - op(T_RK) X_R;      X_K := op(T_KK)^-1 B_K

R the rows below K for a lower T, above it for an upper one; op(T) lower (T lower with "N",
upper with "T"/"C") runs K first to last, else last to first. Each block column is used by one
trsm on its diagonal block and one gemm on the rest, so it crosses the link once per triangular
solve: sum_K (n - k0 + k1) kb = n^2 + sum_K kb^2 elements for an L and a U (the diagonal
blocks belong to both), n (n + 1) / 2 + sum_K kb^2 / 2 for one triangle. B's columns are cut
into update tasks, as many as the backend runs at once (one on a GPU).

Every copy is a task of the one graph: the factors' block columns and B through the staging
slots (TransferPlan.upload / download), host-side work (LU's row interchanges) on the "cpu"
lane, so the trace shows every copy and compute lane. Regions: "A" the working store, "H" the
host B (the solution comes back into it), "F" the host factors (only read).
"""
from __future__ import annotations

import functools
import sys

from ..scheduler import Region, TaskGraph
from ..scheduler.transfers import TransferPlan
from ._blocked import run_graph

UP_SLOTS = DOWN_SLOTS = 4  # staging slots each way (out-of-core's count: _ooc.py)


def rhs_width(ops, rows, nrhs, dtype, nb, budget, extra=0) -> int:
    """The columns of B the working store holds at once: all `nrhs` where they fit `budget`
    with the two factor slots (and `extra` columns of workspaces), else the most that do.
    MemoryError where not even one column does."""
    budget = sys.maxsize if budget is None else budget

    def fits(width):
        return ops.required_bytes(rows, width + 2 * nb + extra, dtype, nb) <= budget
    if fits(nrhs):
        return nrhs
    if not fits(1):
        need = ops.required_bytes(rows, 1 + 2 * nb + extra, dtype, nb)
        raise MemoryError(f"a streamed solve with {rows}-row factors needs at least {need} "
                          f"bytes (one column of b and two block columns of nb = {nb}), over "
                          f"the budget of {budget} bytes (config device.memory_budget)")
    low, high = 1, nrhs  # fits(low); the largest such, by bisection
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return low


class StreamedSolve:
    """A streamed solve of `routine` with the host factors `factors` (any 2-D array of the
    solve's dtype, only read) on the host right-hand side `rhs` (F-ordered, rows x nrhs,
    overwritten by the solution): its working store, the one graph that records it and the
    copies. A context manager: the store goes whatever happens."""

    def __init__(self, factors, rhs, plan, routine, extra=0):
        self.F, self.H, self.plan, self.routine = factors, rhs, plan, routine
        self.ops, self.nb = plan.backend, plan.nb
        self.rows, self.nrhs = rhs.shape
        self.width = rhs_width(self.ops, self.rows, self.nrhs, rhs.dtype, self.nb,
                               plan.memory_budget, extra)
        self.slot0 = self.width
        self.A = self.ops.matrix(self.rows, self.width + 2 * self.nb, rhs.dtype, self.nb,
                                 settings=plan.device_settings)
        try:
            self.A.use_staging(UP_SLOTS, DOWN_SLOTS)
        except BaseException:
            self.A.close()
            raise
        self.graph = TaskGraph()
        self.transfers = TransferPlan(self.graph, self.A, plan)
        self.blocks_done = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.A.close()

    # -- B, in column blocks of W ----------------------------------------------------------
    def blocks(self, before=None, after=None, name="host"):
        """B's column blocks c0:c1 in turn: each comes up (in pieces of nb columns, a slot's),
        the caller records its solve, and it goes home. `before(lane, columns)` and
        `after(lane, columns)`: work on the block's host columns, in place, before it goes up
        and once it is home (CPU tasks called `name` in the trace)."""
        for c0 in range(0, self.nrhs, self.width):
            c1 = min(c0 + self.width, self.nrhs)
            if before is not None:
                self.host_task(name, before, c0, c1)
            for j0 in range(c0, c1, self.nb):
                j1 = min(j0 + self.nb, c1)
                self.transfers.upload(-1, self.H[:, j0:j1], 0, self.rows, j0 - c0, j1 - c0,
                                      reads=[Region("H", 0, self.rows, j0, j1)])
            yield c0, c1
            self.transfers.download(-1, 0, self.rows, 0, c1 - c0, target=self.H[:, c0:c1],
                                    writes=[Region("H", 0, self.rows, c0, c1)])
            if after is not None:
                self.host_task(name, after, c0, c1)
            self.blocks_done += 1

    def host_task(self, name, fn, c0, c1):
        """A CPU task on B's host columns c0:c1 (`fn(lane, columns)`, in place)."""
        self.graph.add(name, -1, "cpu", functools.partial(fn, columns=self.H[:, c0:c1]),
                       reads=[Region("H", 0, self.rows, c0, c1)],
                       writes=[Region("H", 0, self.rows, c0, c1)])

    def chunks(self, c0, c1):
        """B's block c0:c1 as the store's column ranges of its update tasks."""
        width = c1 - c0
        step = max(1, -(-width // self.ops.update_tasks(self.plan.workers)))
        return [(w0, min(w0 + step, width)) for w0 in range(0, width, step)]

    # -- the factors, a block column at a time ---------------------------------------------
    def panel(self, r0, r1, k0, k1):
        """Rows r0:r1 of the factors' block column k0:k1 up into the next slot; returns its
        rectangle on the store (rows r0:r1: a factor's row i is B's row i)."""
        s0 = self.slot0 + self.graph.counter("slot") % 2 * self.nb
        rect = (r0, r1, s0, s0 + k1 - k0)
        self.transfers.upload(k0 // self.nb, self.F[r0:r1, k0:k1], *rect,
                              reads=[Region("F", r0, r1, k0, k1)])
        return rect

    def trsm(self, n, uplo, trans, diag, c0, c1):
        """Record B[0:n, c0:c1] := op(T)^-1 B[0:n, c0:c1], T the `uplo` triangle of the
        factors' leading n x n block (unit diagonal with diag "U"), streamed a block column at
        a time (the module's docstring)."""
        nb = self.nb
        starts = list(range(0, n, nb))
        if (uplo == "L") != (trans == "N"):  # op(T) upper: back substitution
            starts.reverse()
        for k0 in starts:
            k1 = min(k0 + nb, n)
            rows = (k0, n) if uplo == "L" else (0, k1)
            rect = self.panel(*rows, k0, k1)
            rest = (k1, n) if uplo == "L" else (0, k0)
            for w0, w1 in self.chunks(c0, c1):
                if trans == "N":  # X_K, then B_R
                    reads, writes = [], [Region("A", rows[0], rows[1], w0, w1)]
                else:             # B_K from X_R, then X_K
                    reads = [Region("A", rest[0], rest[1], w0, w1)]
                    writes = [Region("A", k0, k1, w0, w1)]
                kb, width = k1 - k0, w1 - w0
                self.graph.add("trsm", k0 // nb, "gpu:update",
                               functools.partial(_solve_block_column, self.ops, A=self.A,
                                                 panel=rect, k=(k0, k1), rest=rest,
                                                 columns=(w0, w1), uplo=uplo, trans=trans,
                                                 diag=diag),
                               reads=[Region("A", *rect), *reads], writes=writes,
                               flops=float(kb * kb * width + 2 * (rest[1] - rest[0]) * kb
                                           * width))

    # -- the run ----------------------------------------------------------------------------
    def run(self, trace=None):
        """Run the recorded graph; returns the trace, which says how B was cut."""
        trace = run_graph(self.graph, self.plan, self.routine, trace)
        budget = self.plan.memory_budget
        trace.metadata["solve_place"] = "device"
        trace.metadata["streamed_solve"] = {"rhs_width": self.width,
                                            "rhs_blocks": self.blocks_done,
                                            "budget": budget}
        return trace


def _solve_block_column(ops, lane, A, panel, k, rest, columns, uplo, trans, diag):
    """One block column K of T (rows `panel` of the store: its diagonal block at rows k, the
    rest at rows `rest`) on B's store columns `columns` (the module's docstring)."""
    (_, _, s0, s1), (k0, k1), (w0, w1) = panel, k, columns
    T_KK = A.block(k0, k1, s0, s1)
    T_RK = A.block(rest[0], rest[1], s0, s1)
    B_K, B_R = A.block(k0, k1, w0, w1), A.block(rest[0], rest[1], w0, w1)
    if trans == "N":
        # X_K := T_KK^-1 B_K;  B_R := B_R - T_RK X_K
        ops.trsm(lane, "L", uplo, "N", diag, 1, T_KK, B_K)
        if rest[1] > rest[0]:
            ops.gemm(lane, -1, T_RK, B_K, 1, B_R)
    else:
        # B_K := B_K - op(T_RK) X_R;  X_K := op(T_KK)^-1 B_K
        if rest[1] > rest[0]:
            ops.gemm(lane, -1, T_RK, B_R, 1, B_K, trans_a=trans)
        ops.trsm(lane, "L", uplo, trans, diag, 1, T_KK, B_K)
