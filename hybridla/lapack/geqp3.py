"""geqp3: QR with column pivoting, A P = Q R, on a tile store: LAPACK's dgeqp3 with dlaqps's
blocked panel, driven column by column from the CPU where the matrix lives, as MAGMA's dgeqp3
runs it on a GPU (cuSOLVER has no pivoted QR).

LAPACK's storage: R on and above the diagonal, |R(0, 0)| >= |R(1, 1)| >= ..., the reflectors
H(i) = I - tau_i v_i v_i^H below it (v_i(i) = 1 not stored); jpvt 0-based, column j of A P is
column jpvt[j] of A. All columns are free (LAPACK's jpvt = 0 on entry).

The column norms vn1 (partial: of the rows not yet factored, downdated as rows are) and vn2 (as
last computed) choose the pivots. A panel of kb <= PANEL_WIDTH columns starts at column j
(rows j:m not factored; n_j = n - j columns to its right, F an n_j x kb workspace, all
indices relative to column j):

    for k = 0, 1, ... while k < kb and no norm has lost its accuracy:
        rk = j + k
        [pivot]    p = k + argmax vn1[k:];  columns k and p of A (all rows), rows k and p of
                   F[:, :k], jpvt and the norms exchanged
        [column]   A[rk:m, k] -= A[rk:m, :k] F[k, :k]^H      (the panel's updates so far)
        [reflector] larfg on A[rk:m, k]: tau_k, beta; v in place (a unit at rk)
        [F]        y = A[rk:m, :]^H v  (one pass over the trailing rows: the panel's bytes)
                   F[:, k] = tau_k (y[k+1:] below row k - F[:, :k] y[:k])
        [row]      A[rk, k+1:] -= A[rk, :k+1] F[k+1:, :k+1]^H
        [norms]    vn1[k+1:] downdated from row rk, or flagged where the downdate has lost
                   accuracy (vn1 (1 - (|A(rk, i)| / vn1)^2) (vn1 / vn2)^2 <= sqrt(eps)); a flag
                   ends the panel after this column (LAPACK's lsticc); A[rk, k] := beta
    [update]   A[j+kb:m, kb:] -= A[j+kb:m, :kb] F[kb:, :kb]^H   (one GEMM)
    [recompute] the flagged columns' norms from their rows j+kb:m

LAPACK's [F] is two products, tau A[rk:m, k+1:]^H v and -tau A[rk:m, :k]^H v; they are one
here (y over all n_j columns: the same bytes, one launch fewer). LAPACK ends with its unblocked
laqp2 for the last columns; a panel that is as short as what is left is that (laqp2's column is
this loop with the update not deferred), so one code path serves both.

Passes over the matrix (s the element size): [F]'s product reads A[rk:m, j:n] once per column,
about (m - rk)(n - j) s bytes, ~(n^3 / 3) s over a square factorization (1.4 TB at n = 8192 in
float64): the pace is the device's memory bandwidth, as LAPACK's geqp3 is half matrix-vector
work. [update]'s GEMM reads and writes the trailing matrix once per panel. The host enqueues
about eight launches per column and waits once per column, for the flag that ends a panel.

Every operation is the backend's, on the critical-path lane; the whole loop is one CPU task of
the run (the panels' lengths are known only as they end). CPU interface on a device backend
(a host-resident matrix): it goes up in block columns before the loop and back after it.
info is 0: the factorization cannot fail.
"""
from __future__ import annotations

import functools

import numpy as np

from ..scheduler import Region, TaskGraph
from ..scheduler.transfers import TransferPlan
from ._blocked import run_graph

PANEL_WIDTH = 32  # LAPACK's geqp3 block (ilaenv's for geqrf) and MAGMA's: the panel's kb at most

# the loop's workspaces in the tile store (one task uses them, so no graph Region orders them)
_F, _Y, _TAU, _BETA, _NORMS = "qp3 F", "qp3 y", "qp3 tau", "qp3 beta", "qp3 norms"
_FLAGS, _JPVT, _STOP = "qp3 flags", "qp3 jpvt", "qp3 stop"


def geqp3(A, plan, trace=None):
    """QR with column pivoting of the tile store's m x n matrix, in place, in LAPACK's storage.
    Returns (jpvt, tau, info, trace): jpvt (n, int32, 0-based) and tau (min(m, n)) host arrays,
    info 0."""
    m, n = A.m, A.n
    k_all = min(m, n)
    jpvt = np.arange(n, dtype=np.int32)
    tau = np.zeros(k_all, dtype=A.dtype)
    graph = TaskGraph()
    transfers = TransferPlan(graph, A, plan)
    if A.streamed:
        transfers.bring_up()
    if k_all:
        _Work(A, min(PANEL_WIDTH, k_all))  # now: allocating in a run could synchronize
        graph.add("geqp3", 0, "cpu",
                  functools.partial(_factor, ops=plan.backend, A=A, jpvt=jpvt, tau=tau),
                  reads=[Region("A", 0, m, 0, n)],
                  writes=[Region("A", 0, m, 0, n), Region("tau", 0, k_all)],
                  flops=geqp3_flops(m, n), bytes=matvec_bytes(m, n, np.dtype(A.dtype).itemsize))
    if A.streamed:
        transfers.send_home(1, 0, m, 0, n)
    trace = run_graph(graph, plan, "geqp3", trace)
    return jpvt, tau, 0, trace


class _Work:
    """The loop's workspaces as blocks: F (n x width), y (n x 1), tau (k x 1), beta (1 x 1),
    the norms (n x 2, real: vn1, vn2), flags and jpvt (n x 1 each, int32), stop (1 x 1)."""

    def __init__(self, A, width):
        n, k_all = A.n, min(A.m, A.n)
        real = np.finfo(A.dtype).dtype
        self.F = A.workspace(_F, n, width)
        self.y = A.workspace(_Y, n, 1)
        self.tau = A.workspace(_TAU, k_all, 1)
        self.beta = A.workspace(_BETA, 1, 1)
        self.norms = A.workspace(_NORMS, n, 2, dtype=real)
        self.flags = A.workspace(_FLAGS, n, 1, dtype=np.int32)
        self.jpvt = A.workspace(_JPVT, n, 1, dtype=np.int32)
        self.stop = A.workspace(_STOP, 1, 1, dtype=np.int32)


def _factor(lane, ops, A, jpvt, tau):
    """The whole column loop (the module's docstring), enqueued on the critical-path lane; one
    wait per column, for the stop flag. jpvt and tau (host arrays) := the results."""
    m, n = A.m, A.n
    k_all = min(m, n)
    work = _Work(A, min(PANEL_WIDTH, k_all))
    gpu = ops.lane("gpu:panel")
    ops.from_host(gpu, jpvt[:, None], work.jpvt)
    with gpu:
        ops.column_norms(gpu, A.block(0, m, 0, n), work.norms, work.flags, work.stop,
                         every=True)
    j = 0
    while j < k_all:
        j += _panel(ops, gpu, A, work, j, min(PANEL_WIDTH, k_all - j))
    tau[:] = ops.to_host(gpu, work.tau)[:, 0]
    jpvt[:] = ops.to_host(gpu, work.jpvt)[:, 0]


def _panel(ops, gpu, A, work, j, width) -> int:
    """LAPACK laqps on columns j.. (at most `width` of them), then the trailing update and the
    flagged norms recomputed; returns how many columns it factored (kb)."""
    m, n = A.m, A.n
    sub = ops.sub_block
    cols = n - j  # the panel's view: columns j:n, every row (the exchanges move whole columns)
    P = A.block(0, m, j, n)
    F = sub(work.F, 0, cols, 0, width)
    norms, flags = sub(work.norms, j, n, 0, 2), sub(work.flags, j, n, 0, 1)
    jpvt, y = sub(work.jpvt, j, n, 0, 1), sub(work.y, 0, cols, 0, 1)
    last_row = min(m, n) - 1  # LAPACK's lastrk: no downdate from the last factored row
    k = 0
    while k < width:
        rk = j + k
        tau_k = sub(work.tau, rk, rk + 1, 0, 1)
        v = sub(P, rk, m, k, k + 1)
        with gpu:
            ops.laqps_pivot(gpu, P, k, F, norms, jpvt)
            if k > 0:
                ops.gemm(gpu, -1, sub(P, rk, m, 0, k), sub(F, k, k + 1, 0, k), 1, v,
                         trans_b="C")
            ops.larfg(gpu, v, tau_k, work.beta)
            ops.gemm(gpu, 1, sub(P, rk, m, 0, cols), v, 0, y, trans_a="C")
            if k > 0:
                ops.gemm(gpu, 1, sub(F, 0, cols, 0, k), sub(y, 0, k, 0, 1), 0,
                         sub(F, 0, cols, k, k + 1))
            ops.laqps_f_column(gpu, F, k, y, tau_k)
            if k + 1 < cols:
                ops.gemm(gpu, -1, sub(P, rk, rk + 1, 0, k + 1), sub(F, k + 1, cols, 0, k + 1),
                         1, sub(P, rk, rk + 1, k + 1, cols), trans_b="C")
            downdate = rk < last_row
            ops.laqps_downdate(gpu, sub(P, rk, rk + 1, 0, cols), k, norms, flags,
                               work.stop, sub(P, rk, rk + 1, k, k + 1), work.beta,
                               downdate=downdate)
        k += 1
        if downdate and ops.to_host(gpu, work.stop)[0, 0]:
            break  # a norm to recompute: the panel ends here (LAPACK's lsticc)
    kb, first = k, j + k
    with gpu:
        if first < m and kb < cols:
            ops.gemm(gpu, -1, sub(P, first, m, 0, kb), sub(F, kb, cols, 0, kb), 1,
                     sub(P, first, m, kb, cols), trans_b="C")
        if kb < cols:
            ops.column_norms(gpu, sub(P, first, m, kb, cols), sub(norms, kb, cols, 0, 2),
                             sub(flags, kb, cols, 0, 1), work.stop)
    return kb


def geqp3_flops(m, n) -> float:
    """Real flops of geqp3 as geqrf's (LAPACK's count), the norms' O(mn) aside."""
    k = min(m, n)
    return float(2 * m * n * k - (m + n) * k * k + 2 * k ** 3 / 3)


def matvec_bytes(m, n, itemsize) -> float:
    """Bytes of the matrix the [F] products read: sum over columns c < min(m, n) of
    (m - c)(n - j_c), j_c the column's panel start (taken as c)."""
    k = min(m, n)
    c = np.arange(k, dtype=np.float64)
    return float(itemsize * np.sum((m - c) * (n - c)))
