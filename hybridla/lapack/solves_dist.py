"""The solves with distributed factors: triangular solves with a factor held in 1-D block-cyclic
columns (lapack/_dist.py), and getrs, potrs and the QR least-squares solve made of them. The
right-hand side X (n x nrhs, small beside the factor) is on every rank.

A triangular T x = b has two orders over its block columns, and the layout picks by `op`:

    op(T) = T, by columns (fan-in):  for each block k in order (forward for lower):
        the owner of k:  x_k := sum over ranks of their partial b_k   one reduce to the owner
                         x_k := T_kk^-1 x_k                           trsm
        all:             x_k := the owner's                           one broadcast
        the owner of k:  b_rest -= T[rest, k] x_k                      gemm: column k is its own
    op(T) = T^T or T^H, by rows (fan-out): T's column k is op(T)'s row k, so
        the owner of k:  x_k := T_kk^-op (b_k - op(T[done, k]) x_done)   gemm, trsm
        all:             x_k := the owner's                               one broadcast

The partial sums start as b on rank 0 and zero on the others, so that their sum is b less the
updates of every rank's columns. These are latency-bound (two collectives of nb x nrhs a
block); they run on the ranks' engines all the same, so that a failure aborts them alike.

getrs:  x = P b;  L y = x (unit, by columns);  U x = y (by columns); trans: U^op, L^op by rows,
        then P^T x. The interchanges are applied to the host copy of X around the solves.
potrs:  L y = b (by columns);  L^H x = y (by rows).
gels (m >= n, full rank):  c = Q^H b, step by step on the owner of each panel, its c[k0:m]
        broadcast after each;  R x = c[0:n] by columns.
"""
from __future__ import annotations

import functools

import numpy as np

from ..scheduler import Region
from ..scheduler.transport import connected
from ._dist import AbortingGraph, WorkerRun, check_resolution, run_graph_of
from ._dist_parts import device_part
from ._householder import QR, reserve_reflector_slots
from ..update.qr import apply_block_reflector


def solve_on_worker(solve, ops, transport, rank, local, job):
    """One worker's share of a solve (the long-lived task's body, like _dist.on_worker): the
    factor's local columns `local` into a store (a device copy where they are on the
    worker's GPU, job["device"]: _dist_parts.device_part), X := job["b"] (host, n x nrhs)
    where the backend computes, `solve(run, X)`, X back. Returns {"x" (on rank 0), "trace",
    "wall_origin"}."""
    from ..scheduler.plan import make_plan

    m, n = job["shape"]
    b = np.array(job["b"], dtype=job["dtype"], order="F", copy=True)
    check_resolution(ops, job, rank)
    plan = make_plan(ops, m, n, job["dtype"], routine=job["routine"], nb=job["nb"],
                     lookahead=job["lookahead"])
    layout = job["layout"]
    if job.get("device"):  # the factors on this worker's GPU: a device copy, no host pass
        A, _ = device_part(ops, plan, job, local, rank, transport)
    else:
        local = np.asarray(local, dtype=job["dtype"])
        if job["check_finite"] and not np.isfinite(local).all():
            raise ValueError(f"{job['name']} must not contain infs or NaNs (check_finite=True)")
        A = ops.matrix(m, local.shape[1], local.dtype, plan.nb, plan.device_settings)
    X = ops.matrix(b.shape[0], b.shape[1], b.dtype, plan.nb, plan.device_settings)
    lane = ops.lane("gpu:update")
    try:
        with lane:
            if not job.get("device") and local.size:
                ops.from_host(lane, np.asfortranarray(local), A.block(0, m, 0, local.shape[1]))
            if b.size:
                ops.from_host(lane, solve.before(b, job), X.block(0, b.shape[0], 0, b.shape[1]))
        run = WorkerRun(ops, plan, connected(transport), layout, rank, A)
        trace = solve(run, X, **job.get("arguments", {}))
        with lane:
            if b.size:
                ops.to_host(lane, X.block(0, b.shape[0], 0, b.shape[1]), out=b)
    finally:
        A.close()
        X.close()
    return {"x": solve.after(b, job) if rank == 0 else None,
            "trace": trace.records if job.get("traced", True) else [],
            "wall_origin": trace.wall_origin}


# -- the two orders of a triangular solve ---------------------------------------------------------
def record_trsm(graph, run, X, uplo, trans, diag, n):
    """op(T) x = X[0:n] in place, T the n x n triangle `uplo` of the factor's columns (run.A's
    rows 0:n), in the order the layout allows (module docstring)."""
    blocks = list(run.steps(n))
    forward = (uplo == "L") == (trans == "N")
    for step, k0, k1, owner, lk in (blocks if forward else blocks[::-1]):
        if trans == "N":
            _record_column_step(graph, run, X, uplo, diag, n, step, k0, k1, owner, lk)
        else:
            _record_row_step(graph, run, X, uplo, trans, diag, n, step, k0, k1, owner, lk)


def _record_column_step(graph, run, X, uplo, diag, n, step, k0, k1, owner, lk):
    ops, mine, w = run.ops, owner == run.rank, X.n
    xk, region = X.block(k0, k1, 0, w), Region("X", k0, k1, 0, 1)
    # x_k := the sum of the ranks' partial b_k, on the owner
    graph.add("reduce", step, "comm:reduce",
              lambda lane: run.transport.reduce(lane, [xk], [xk], owner),
              reads=[region], writes=[region] if mine else [], chain="comm")
    if mine:
        # x_k := T_kk^-1 x_k
        graph.add("trsm", step, "gpu:panel",
                  functools.partial(ops.trsm, side="L", uplo=uplo, trans="N", diag=diag,
                                    alpha=1, T=run.A.block(k0, k1, lk, lk + k1 - k0), B=xk),
                  writes=[region])
    _record_result_broadcast(graph, run, xk, region, owner, step)
    r0, r1 = (k1, n) if uplo == "L" else (0, k0)
    if mine and r1 > r0:
        # b_rest -= T[rest, k] x_k
        graph.add("gemm", step, "gpu:update",
                  functools.partial(ops.gemm, alpha=-1, A=run.A.block(r0, r1, lk, lk + k1 - k0),
                                    B=xk, beta=1, C=X.block(r0, r1, 0, w)),
                  reads=[region], writes=[Region("X", r0, r1, 0, 1)])


def _record_row_step(graph, run, X, uplo, trans, diag, n, step, k0, k1, owner, lk):
    ops, w = run.ops, X.n
    xk, region = X.block(k0, k1, 0, w), Region("X", k0, k1, 0, 1)
    if owner == run.rank:
        r0, r1 = (0, k0) if uplo == "U" else (k1, n)
        if r1 > r0:
            # x_k -= op(T[done, k]) x_done
            graph.add("gemm", step, "gpu:panel",
                      functools.partial(ops.gemm, alpha=-1,
                                        A=run.A.block(r0, r1, lk, lk + k1 - k0),
                                        B=X.block(r0, r1, 0, w), beta=1, C=xk, trans_a=trans),
                      reads=[Region("X", r0, r1, 0, 1)], writes=[region])
        # x_k := T_kk^-op x_k
        graph.add("trsm", step, "gpu:panel",
                  functools.partial(ops.trsm, side="L", uplo=uplo, trans=trans, diag=diag,
                                    alpha=1, T=run.A.block(k0, k1, lk, lk + k1 - k0), B=xk),
                  writes=[region])
    _record_result_broadcast(graph, run, xk, region, owner, step)


def _record_result_broadcast(graph, run, xk, region, owner, step):
    """x_k from its owner to every rank."""
    graph.add("bcast", step, "comm:bcast",
              lambda lane: run.transport.broadcast(lane, [xk], [xk], owner),
              reads=[region], writes=[region], chain="comm")


def _start_partial_sums(graph, run, X):
    """The partial sums of a by-columns solve: b on rank 0, zero on the others."""
    if run.rank != 0:
        graph.add("zero", 0, "gpu:update",
                  functools.partial(run.ops.laset, uplo="A", alpha=0, beta=0,
                                    B=X.block(0, X.m, 0, X.n)),
                  writes=[Region("X", 0, X.m, 0, 1)])


# -- getrs, potrs, gels ---------------------------------------------------------------------------
def _permutation(pivots):
    """The row order of the interchanges pivots[0], pivots[1], ... (P b = b[order])."""
    order = np.arange(len(pivots))
    for i, p in enumerate(pivots):
        order[i], order[p] = order[p], order[i]
    return order


class Getrs:
    """getrs with distributed factors: x = P^T L^-1 ... (module docstring)."""

    @staticmethod
    def before(b, job):
        # P b (trans "N"): the interchanges on the host copy, which every rank holds whole
        if job["arguments"]["trans"] == "N":
            return b[_permutation(job["pivots"])]
        return b

    @staticmethod
    def after(x, job):
        if job["arguments"]["trans"] != "N":
            out = np.empty_like(x)
            out[_permutation(job["pivots"])] = x
            return out
        return x

    def __call__(self, run, X, trans):
        graph = AbortingGraph(run.transport)
        n = run.layout.n
        if trans == "N":
            _start_partial_sums(graph, run, X)
            record_trsm(graph, run, X, "L", "N", "U", n)
            _start_partial_sums(graph, run, X)
            record_trsm(graph, run, X, "U", "N", "N", n)
        else:
            record_trsm(graph, run, X, "U", trans, "N", n)
            record_trsm(graph, run, X, "L", trans, "U", n)
        return run_graph_of(run, graph, iter(()), "getrs")


class Potrs:
    """potrs with the distributed lower factor: L y = b by columns, L^H x = y by rows."""

    before = after = staticmethod(lambda b, job: b)

    def __call__(self, run, X):
        graph = AbortingGraph(run.transport)
        n = run.layout.n
        _start_partial_sums(graph, run, X)
        record_trsm(graph, run, X, "L", "N", "N", n)
        record_trsm(graph, run, X, "L", "C", "N", n)
        return run_graph_of(run, graph, iter(()), "potrs")


class Gels:
    """The least-squares solve with distributed QR factors (m >= n, full rank): c = Q^H b by
    the panels' owners in turn, R x = c[0:n] by columns. job["tau"]: every reflector's."""

    before = after = staticmethod(lambda b, job: b)

    def __call__(self, run, X, tau):
        graph = AbortingGraph(run.transport)
        m, n, nb, ops = run.layout.m, run.layout.n, run.plan.nb, run.ops
        k = min(m, n)
        run.A.set_tau(np.asarray(tau, dtype=run.A.dtype))
        reserve_reflector_slots(run.A, 1, m, min(nb, k))
        for step, k0, k1, owner, lk in run.steps(k):
            rows = Region("X", k0, m, 0, 1)
            if owner == run.rank:
                # c[k0:m] := (I - V T V^H)^H c[k0:m]
                graph.add("larfb", step, "gpu:panel",
                          functools.partial(_apply_reflectors, ops=ops, A=run.A, X=X, k0=k0,
                                            k1=k1, lk=lk),
                          reads=[Region("A", k0, m, lk, lk + k1 - k0)],
                          writes=[rows, Region("V0", 0, 1)])
            block = X.block(k0, m, 0, X.n)
            graph.add("bcast", step, "comm:bcast",
                      functools.partial(_broadcast, run=run, block=block, owner=owner),
                      reads=[rows], writes=[rows], chain="comm")
        _start_partial_sums(graph, run, X)
        record_trsm(graph, run, X, "U", "N", "N", n)
        return run_graph_of(run, graph, iter(()), "gels")


def _broadcast(lane, run, block, owner):
    run.transport.broadcast(lane, [block], [block], owner)


def _apply_reflectors(lane, ops, A, X, k0, k1, lk):
    m, kb = A.m, k1 - k0
    V, T = A.workspace("V0", m - k0, kb), A.workspace("T0", kb, kb)
    ops.explicit_reflectors(lane, A.block(k0, m, lk, lk + kb), V, QR.storage)
    ops.triangular_factor(lane, V, A.tau_block(k0, k1), T, QR.direction,
                          work=A.scratch(lane, kb, kb))
    apply_block_reflector(ops, lane, A, "L", "C", V, T, X.block(k0, m, 0, X.n), QR.direction)


getrs_dist, potrs_dist, gels_dist = Getrs(), Potrs(), Gels()
